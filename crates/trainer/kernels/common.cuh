// Shared by every kernel file: the backend prepends this text to each .cu
// before NVRTC compiles it (see src/backend/cuda/kernels.rs), so no include
// paths or CUDA headers are needed at run time.
//
// Element types: every kernel family is instantiated for the activations'
// storage type, `float` (suffix `_f32`), bfloat16 (`_bf16`) or fp16
// (`_f16`); parameters, their gradients and per-row statistics are always
// `float` (the master copies of mixed precision). 16-bit values are loaded
// into fp32 registers, computed on in fp32 and rounded to nearest even when
// stored; reductions always accumulate in fp32 (or fp64 where the CPU
// reference does). The 16-bit types are our own structs, converted with
// bit arithmetic (bf16) or PTX `cvt` (fp16), so the kernels need neither
// cuda_bf16.h nor cuda_fp16.h, which the NVRTC wheel does not ship.

typedef unsigned int u32;
typedef unsigned long long u64;

// One tensor of a multi-tensor table (adamw_multi, sum_squares_multi), as
// the host writes it: the four addresses, the length, whether weight decay
// applies, the gradient's length, and for a row-sparse gradient (slots not
// 0) the table's slot per row (NO_SLOT: none) and its row width.
struct tensor_entry {
    u64 param, grad, m, v, len, decay, grad_len, slots, width;
};
// The slot of a row a row-sparse gradient does not hold (the host's
// row_slots::NO_SLOT).
#define NO_SLOT 0xffffffffu

struct bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) {
    return __uint_as_float(((u32)p->bits) << 16);
}
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
// bf16 bits of v, rounded to nearest even (NaN stays a quiet NaN).
__device__ __forceinline__ unsigned short bf16_bits(float v) {
    u32 u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ void st(bf16 *p, float v) { p->bits = bf16_bits(v); }

struct f16 {
    unsigned short bits;
};
__device__ __forceinline__ float ld(const f16 *p) {
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(p->bits));
    return v;
}
__device__ __forceinline__ unsigned short f16_bits(float v) {
    unsigned short b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
    return b;
}
__device__ __forceinline__ void st(f16 *p, float v) { p->bits = f16_bits(v); }

// `v` as a buffer of T holds it.
template <typename T> __device__ __forceinline__ float stored(float v) {
    T t;
    st(&t, v);
    return ld(&t);
}

// Two values rounded to T and packed into one register, `lo` in the low half
// (a pair's order in memory and in mma fragments).
template <typename T> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<bf16>(float lo, float hi) {
    return (u32)bf16_bits(lo) | ((u32)bf16_bits(hi) << 16);
}
template <> __device__ __forceinline__ u32 pack2<f16>(float lo, float hi) {
    return (u32)f16_bits(lo) | ((u32)f16_bits(hi) << 16);
}

// i % cols in 32-bit arithmetic when i fits: a 64-bit remainder is a long
// software routine on the GPU, which bound the bias and GELU kernels over
// activations (more instructions than their bytes take to move).
__device__ __forceinline__ u32 col_of(u64 i, u32 cols) {
    return i <= 0xffffffffull ? (u32)i % cols : (u32)(i % cols);
}

// i / cols, likewise in 32 bits when i fits.
__device__ __forceinline__ u64 row_of(u64 i, u32 cols) {
    return i <= 0xffffffffull ? (u64)((u32)i / cols) : i / cols;
}

// Grid-stride loop over [0, n).
#define GRID_STRIDE(i, n)                                                   \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);       \
         i += (u64)gridDim.x * blockDim.x)

// Elementwise kernels take 8 consecutive elements a thread where they can:
// one 16-byte access of a 16-bit type (two of fp32) instead of eight
// 2-byte ones, and the index arithmetic once per 8. GRID_STRIDE_VEC runs
// over the groups of 8 of [0, n) (`i` is a group's first element; buffers
// are 16-byte aligned, which the host checks), GRID_STRIDE_TAIL over the
// n % 8 elements after them. Launch with ceil(n / 8) threads' worth of
// blocks (or fewer: both loops stride).
#define GRID_STRIDE_VEC(i, n)                                                       \
    for (u64 i = 8 * ((u64)blockIdx.x * blockDim.x + threadIdx.x); i + 8 <= (n);     \
         i += 8 * (u64)gridDim.x * blockDim.x)
#define GRID_STRIDE_TAIL(i, n)                                                      \
    for (u64 i = ((n) & ~7ull) + (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (u64)gridDim.x * blockDim.x)

// 8 elements at `p` (16-byte aligned) to fp32, and back rounded as st does.
__device__ __forceinline__ void ld8(const float *p, float v[8]) {
    const float4 a = reinterpret_cast<const float4 *>(p)[0];
    const float4 b = reinterpret_cast<const float4 *>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void st8(float *p, const float v[8]) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
template <typename T> __device__ __forceinline__ void ld8_half(const T *p, float v[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
    const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        T lo, hi;
        lo.bits = (unsigned short)(w[k] & 0xffffu);
        hi.bits = (unsigned short)(w[k] >> 16);
        v[2 * k] = ld(&lo);
        v[2 * k + 1] = ld(&hi);
    }
}
template <typename T> __device__ __forceinline__ void st8_half(T *p, const float v[8]) {
    *reinterpret_cast<uint4 *>(p) = make_uint4(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]),
                                               pack2<T>(v[4], v[5]), pack2<T>(v[6], v[7]));
}
__device__ __forceinline__ void ld8(const bf16 *p, float v[8]) { ld8_half(p, v); }
__device__ __forceinline__ void ld8(const f16 *p, float v[8]) { ld8_half(p, v); }
__device__ __forceinline__ void st8(bf16 *p, const float v[8]) { st8_half(p, v); }
__device__ __forceinline__ void st8(f16 *p, const float v[8]) { st8_half(p, v); }

// Adds bias[(i + k) % cols] to v[k]: one remainder for the 8 when cols is a
// multiple of 8 (then the group lies in one row), else one each.
__device__ __forceinline__ void add_bias8(float v[8], const float *bias, u64 i, u32 cols) {
    if (cols % 8 == 0) {
        float b[8];
        ld8(bias + col_of(i, cols), b);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] += b[k];
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] += bias[col_of(i + k, cols)];
    }
}

// Split column reductions (bias and LayerNorm parameter gradients): the
// gridDim.y blocks of a column block each write partial sums, and the last
// to arrive adds them (sum_partials). Whether this block is that last one,
// counted in arrived[blockIdx.x], which the last sets back to 0 for the next
// launch (every other block has counted by then). Threads that wrote
// partials must __threadfence() before; every thread of the block calls it.
__device__ __forceinline__ bool last_to_arrive(u32 *arrived) {
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        last = atomicAdd(&arrived[blockIdx.x], 1u) == gridDim.y - 1;
        if (last) arrived[blockIdx.x] = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// In the last block (after last_to_arrive), one column's sum of the
// partials of the gridDim.y <= 64 chunks (the host's COLUMN_CHUNKS),
// partial[c * stride] for chunk c, in a fixed order: row phase y adds
// chunks y, y + 8, ... in chunk order, and row phase 0 adds the 8 sums in y
// order; the result is for threadIdx.y == 0. A row phase's at most 8 loads
// are issued before the first add, through L2 (__ldcg: the other blocks'
// writes, never a stale L1 line), where one thread adding all 64 chunks
// waited for each load in turn. Every thread of the block calls it
// (`active`: its column exists); `scratch` is overwritten, and a second
// call with the same scratch needs a __syncthreads() between.
__device__ __forceinline__ float sum_partials(const float *partial, u64 stride, bool active,
                                              float (*scratch)[33]) {
    float v[8];
#pragma unroll
    for (u32 k = 0; k < 8; ++k) {
        const u32 c = threadIdx.y + 8 * k;
        v[k] = active && c < gridDim.y ? __ldcg(partial + (u64)c * stride) : 0.0f;
    }
    float acc = 0.0f;
#pragma unroll
    for (u32 k = 0; k < 8; ++k)
        if (threadIdx.y + 8 * k < gridDim.y) acc += v[k];
    scratch[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    float total = 0.0f;
    if (threadIdx.y == 0)
        for (int y = 0; y < 8; ++y) total += scratch[y][threadIdx.x];
    return total;
}

// Instantiate `M(suffix, type)` for every storage type of activations.
#define FOR_EACH_TYPE(M) M(f32, float) M(bf16, bf16) M(f16, f16)
// `M(suffix, type)` for the 16-bit types only.
#define FOR_EACH_HALF(M) M(bf16, bf16) M(f16, f16)
// `M(s1, t1, s2, t2)` for every pair of storage types.
#define FOR_EACH_PAIR(M)                                                                    \
    M(f32, float, f32, float) M(f32, float, bf16, bf16) M(f32, float, f16, f16)            \
    M(bf16, bf16, f32, float) M(bf16, bf16, bf16, bf16) M(f16, f16, f32, float)             \
    M(f16, f16, f16, f16)

// Sum over a warp in a fixed butterfly order (deterministic).
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over a block of at most 1024 threads (a multiple of 32), in a fixed
// order, returned to every thread. `scratch` holds 32 values; the block must
// not use it concurrently.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    A total = lane < warps ? scratch[lane] : (A)0;
    if (warp == 0) total = warp_sum(total);
    // Every warp has read its scratch[lane] before thread 0 overwrites
    // scratch[0] (racecheck flags the read/write pair otherwise).
    __syncthreads();
    if (threadIdx.x == 0) scratch[0] = total;
    __syncthreads();
    total = scratch[0];
    return total;
}

// Philox4x32-10 (Salmon et al. 2011), the same function as src/rng.rs.
struct philox_out {
    u32 w[4];
};
__device__ __forceinline__ philox_out philox4x32_10(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0,
                                                    u32 k1) {
    for (int round = 0; round < 10; ++round) {
        const u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    philox_out out;
    out.w[0] = c0;
    out.w[1] = c1;
    out.w[2] = c2;
    out.w[3] = c3;
    return out;
}

// Philox block `blk` of dropout's stream (see dropout.cu): the words of
// elements 4 * blk .. 4 * blk + 3.
__device__ __forceinline__ philox_out dropout_block(u64 blk, u32 seed_lo, u32 seed_hi,
                                                    u32 step_lo, u32 step_hi, u32 stream) {
    return philox4x32_10((u32)blk, (u32)(blk >> 32) ^ stream, step_lo, step_hi, seed_lo, seed_hi);
}

// Word i % 4 of the Philox block i / 4 of dropout's stream, shifted to the
// 24 bits dropout compares with its threshold.
__device__ __forceinline__ u32 dropout_word(u64 i, u32 seed_lo, u32 seed_hi, u32 step_lo,
                                            u32 step_hi, u32 stream) {
    const philox_out r = dropout_block(i >> 2, seed_lo, seed_hi, step_lo, step_hi, stream);
    const u32 k = (u32)(i & 3);
    const u32 w = k == 0 ? r.w[0] : k == 1 ? r.w[1] : k == 2 ? r.w[2] : r.w[3];
    return w >> 8;
}

// A dropout mask as kernel arguments: element i is kept iff its word is at
// least `threshold` (0: no dropout, every element kept unscaled).
#define DROPOUT_PARAMS                                                                      \
    u32 threshold, float keep_scale, u32 seed_lo, u32 seed_hi, u32 step_lo, u32 step_hi,   \
        u32 stream
#define DROPOUT_ARGS threshold, keep_scale, seed_lo, seed_hi, step_lo, step_hi, stream

// Element i times its dropout factor (0 when dropped, keep_scale when kept).
__device__ __forceinline__ float dropped(float v, u64 i, DROPOUT_PARAMS) {
    if (threshold == 0) return v;
    return dropout_word(i, seed_lo, seed_hi, step_lo, step_hi, stream) >= threshold
               ? v * keep_scale
               : 0.0f;
}

// A dropout decision: -1 without dropout (the value passes unscaled), 1
// kept (scaled), 0 dropped; `drop_apply` is `dropped` given the decision.
__device__ __forceinline__ float drop_apply(float v, int keep, float keep_scale) {
    return keep < 0 ? v : keep ? v * keep_scale : 0.0f;
}

// Calls f(j, keep) for every column j of a row of n elements starting at
// element `base` of the dropout stream, with element base + j's decision.
// When n % 4 == 0 each thread takes 4 adjacent columns, one Philox block
// (rather than 4 blocks for one word each).
template <typename F>
__device__ __forceinline__ void for_row_dropout(u64 base, u32 n, DROPOUT_PARAMS, F f) {
    if (threshold == 0 || n % 4 != 0) {
        for (u32 j = threadIdx.x; j < n; j += blockDim.x)
            f(j, threshold == 0
                     ? -1
                     : (int)(dropout_word(base + j, seed_lo, seed_hi, step_lo, step_hi, stream) >=
                             threshold));
        return;
    }
    for (u32 j = 4 * threadIdx.x; j < n; j += 4 * blockDim.x) {
        const philox_out r =
            dropout_block((base + j) >> 2, seed_lo, seed_hi, step_lo, step_hi, stream);
#pragma unroll
        for (int w = 0; w < 4; ++w) f(j + w, (int)((r.w[w] >> 8) >= threshold));
    }
}

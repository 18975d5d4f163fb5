// Shared by every kernel file: the backend prepends this text to each .cu
// before NVRTC compiles it (see src/backend/cuda/kernels.rs), so no include
// paths or CUDA headers are needed at run time.
//
// Element types: every kernel family is instantiated for `float` (suffix
// `_f32`) and for bfloat16 storage (suffix `_bf16`). bf16 values are loaded
// into fp32 registers, computed on in fp32 and rounded to nearest even when
// stored; reductions always accumulate in fp32 (or fp64 where the CPU
// reference does). The bf16 type is our own 16-bit struct so the kernels do
// not depend on cuda_bf16.h, which the NVRTC wheel does not ship.

typedef unsigned int u32;
typedef unsigned long long u64;

struct bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) {
    return __uint_as_float(((u32)p->bits) << 16);
}
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16 *p, float v) {
    u32 u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        // NaN stays a (quiet) NaN.
        p->bits = (unsigned short)((u >> 16) | 0x40u);
        return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    p->bits = (unsigned short)(u >> 16);
}

// Grid-stride loop over [0, n).
#define GRID_STRIDE(i, n)                                                   \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);       \
         i += (u64)gridDim.x * blockDim.x)

// Instantiate `M(suffix, type)` for every element type.
#define FOR_EACH_TYPE(M) M(f32, float) M(bf16, bf16)

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

// Fused ("flash") attention: softmax(scale * q k^T) over the keys the mask
// keeps, dropped out, times v, without storing the s x s probabilities.
// Forward keeps one log-sum-exp per query row; backward recomputes each
// tile's probabilities from it (Dao, FlashAttention-2, 2023).
//
// Layout: q, k, v, out, dq, dk, dv are [b, s, heads * dh] (the projections'
// own token-major layout, so no head permutes); lse and delta are
// [b, heads, s] fp32; mask is [b, s] (a key with mask 0 gets probability
// exactly 0; a query row whose keys are all masked is all zeros, lse -inf).
// Attention dropout is the Philox stream of dropout.cu over the [b, heads,
// s, s] probabilities' element index, so the masks equal the unfused path's
// and the CPU reference's. Every sum runs in a fixed order (no atomics):
// backward is two kernels, one owning each key row (dk, dv) and one owning
// each query row (dq), which both recompute the tile's probabilities.
//
// Two implementations of each kernel:
//  - *_simt: one warp per row, tiles of 32 in shared memory, fp32 FMA; any
//    head dim up to 128, every storage type (the fp32 path, and heads the
//    tensor-core kernels do not take).
//  - *_mma (16-bit storage, head dim 32 or 64, sm_80+): 4 warps own 64 rows,
//    tiles of 64 in shared memory, products on the tensor cores with
//    mma.sync.m16n8k16 (bf16 or fp16 operands, fp32 accumulation); the
//    probabilities go from the accumulators to the next product's operand
//    registers without touching shared memory.
//
// Counts per call (B = b * heads, s queries and keys, d = head dim, e = size
// of the storage type; masked keys still counted):
//   forward            4*B*s*s*d FLOP + B*s*s exp, (4*B*s*d)*e + 8*B*s bytes
//   backward_delta     2*B*s*d FLOP,               2*B*s*d*e + 4*B*s bytes
//   backward_dkdv     10*B*s*s*d FLOP + B*s*s exp, (6*B*s*d)*e + 8*B*s bytes
//   backward_dq        8*B*s*s*d FLOP + B*s*s exp, (5*B*s*d)*e + 8*B*s bytes
// (plus re-reads of q/dO (dkdv) and k/v (dq) once per tile of the other side:
// s / 64 times for the mma kernels, s / 32 for the simt ones).

#define NEG_INF __int_as_float(0xff800000)

// What one call needs to know about its shape and dropout.
struct attn_args {
    u32 b, heads, s, dh;
    float scale;
    u32 threshold; // dropout keeps a word >= threshold (0: no dropout)
    float keep_scale;
    u32 seed_lo, seed_hi, step_lo, step_hi, stream;
};

// Whether dropout keeps probability (bh, i, j) of the [b*heads, s, s] tensor.
__device__ __forceinline__ bool attn_keep(const attn_args &a, u32 bh, u32 i, u32 j) {
    if (a.threshold == 0) return true;
    const u64 idx = ((u64)bh * a.s + i) * a.s + j;
    return dropout_word(idx, a.seed_lo, a.seed_hi, a.step_lo, a.step_hi, a.stream) >=
           a.threshold;
}

// One Philox block of the attention dropout stream (words idx & ~3 ..
// idx | 3) as 4 keep bits, bit w for word w.
__device__ __forceinline__ u32 attn_keep_block(const attn_args &a, u64 idx) {
    const philox_out r =
        dropout_block(idx >> 2, a.seed_lo, a.seed_hi, a.step_lo, a.step_hi, a.stream);
    u32 bits = 0;
#pragma unroll
    for (int w = 0; w < 4; ++w) bits |= (u32)((r.w[w] >> 8) >= a.threshold) << w;
    return bits;
}

// The keep bits of 4 elements one decision each (rows of the stream that
// do not start on a Philox block): element e = 2 * r + c is query i + c,
// key j + 8 * r when keys are the accumulator's rows, else query i + 8 * r,
// key j + c.
__device__ __forceinline__ u32 attn_keep_each(const attn_args &a, u32 bh, u32 i, u32 j,
                                              bool keys_as_rows) {
    u32 bits = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const u32 r = 8 * (e >> 1), c = e & 1;
        bits |= (u32)attn_keep(a, bh, keys_as_rows ? i + c : i + r, keys_as_rows ? j + r : j + c)
                << e;
    }
    return bits;
}

// The tensor-core kernels' keep bits of one thread's 4 accumulator
// elements of a column group, bit e for element e = 2 * r + c: query rows
// i0 and i0 + 8 (r), key columns j and j + 1 (c, j even). Philox makes 4
// words a block, each block one per 4 consecutive elements of a row; when
// s % 4 == 0 the lanes t and t ^ 1 (same g) hold the same two blocks, so
// each computes one and they swap: a quarter of the Philox rounds of one
// block per element. Every lane of the warp must call it.
__device__ __forceinline__ u32 attn_keep_rows(const attn_args &a, u32 bh, u32 i0, u32 j) {
    if (a.threshold == 0) return 0xfu;
    if (a.s % 4 != 0) return attn_keep_each(a, bh, i0, j, false);
    const u32 odd = threadIdx.x & 1; // t & 1: this lane computes row i0 + 8 * odd's block
    const u32 mine =
        attn_keep_block(a, ((u64)bh * a.s + i0 + 8 * odd) * a.s + (j & ~3u));
    const u32 other = __shfl_xor_sync(0xffffffffu, mine, 1);
    const u32 row0 = odd ? other : mine, row1 = odd ? mine : other, sh = j & 2u;
    return ((row0 >> sh) & 3u) | (((row1 >> sh) & 3u) << 2);
}

// The same with keys as rows (the dk/dv kernel): element e = 2 * r + c is
// key j0 + 8 * r, query i + c, where j0 is this lane's first key (j0 % 4 ==
// g % 4) and i is even. The 4 keys of a block are held by the 4 lanes whose g
// differ in the low two bits (k = g % 4), each with its own word of 4
// blocks (query i or i + 1, key group of j0 or j0 + 8): lane k computes
// block k and the four exchange words in 4 rounds. Every lane of the warp
// must call it.
__device__ __forceinline__ u32 attn_keep_cols(const attn_args &a, u32 bh, u32 j0, u32 i) {
    if (a.threshold == 0) return 0xfu;
    if (a.s % 4 != 0) return attn_keep_each(a, bh, i, j0, true);
    const u32 lane = threadIdx.x & 31, k = (lane >> 2) & 3;
    const u64 idx = ((u64)bh * a.s + i + (k & 1)) * a.s + (j0 & ~3u) + 8 * (k >> 1);
    const philox_out r =
        dropout_block(idx >> 2, a.seed_lo, a.seed_hi, a.step_lo, a.step_hi, a.stream);
    u32 bits = 0;
#pragma unroll
    for (u32 round = 0; round < 4; ++round) {
        // Receive word k of block (k + round) % 4 from the lane that made
        // it; send word (k - round) % 4 of ours to the lane that wants it.
        const u32 from = (k + round) & 3, word = (k - round) & 3;
        const u32 w = word == 0 ? r.w[0] : word == 1 ? r.w[1] : word == 2 ? r.w[2] : r.w[3];
        const u32 got = __shfl_sync(0xffffffffu, w, (lane & ~12u) | (from << 2));
        bits |= (u32)((got >> 8) >= a.threshold) << from;
    }
    return bits;
}

// Element offset of row `t` of sequence `bi`, head `h`, in a [b, s, heads*dh] tensor.
__device__ __forceinline__ u64 attn_row(const attn_args &a, u32 bi, u32 t, u32 h) {
    return ((u64)bi * a.s + t) * ((u64)a.heads * a.dh) + (u64)h * a.dh;
}

// ---------------------------------------------------------------------------
// SIMT kernels. Block: ATTN_WARPS warps, each owning one row. Head dim <= 128.

#define ATTN_WARPS 8
#define ATTN_TILE 32
#define ATTN_MAXD 128
#define ATTN_E (ATTN_MAXD / 32)

// Loads `rows` rows of `x` (row t0 on) into `dst` as fp32, zeros past s.
template <typename A>
__device__ __forceinline__ void attn_load_tile(const attn_args &a, const A *x, u32 bi, u32 h,
                                               u32 t0, float (*dst)[ATTN_MAXD + 1]) {
    for (u32 e = threadIdx.x; e < ATTN_TILE * a.dh; e += blockDim.x) {
        const u32 r = e / a.dh, c = e % a.dh;
        const u32 t = t0 + r;
        dst[r][c] = t < a.s ? ld(x + attn_row(a, bi, t, h) + c) : 0.0f;
    }
}

template <typename A>
__device__ void attention_forward_simt_impl(const A *q, const A *k, const A *v, const u32 *mask,
                                            A *out, float *lse, attn_args a) {
    __shared__ float ks[ATTN_TILE][ATTN_MAXD + 1];
    __shared__ float vs[ATTN_TILE][ATTN_MAXD + 1];
    __shared__ float qs[ATTN_WARPS][ATTN_MAXD];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 bh = blockIdx.y, bi = bh / a.heads, h = bh % a.heads;
    const u32 i = blockIdx.x * ATTN_WARPS + warp;
    const bool active = i < a.s;
    if (active)
        for (u32 c = lane; c < a.dh; c += 32) qs[warp][c] = ld(q + attn_row(a, bi, i, h) + c);
    float acc[ATTN_E];
#pragma unroll
    for (int e = 0; e < ATTN_E; ++e) acc[e] = 0.0f;
    float m = NEG_INF, l = 0.0f;
    for (u32 j0 = 0; j0 < a.s; j0 += ATTN_TILE) {
        __syncthreads();
        attn_load_tile(a, k, bi, h, j0, ks);
        attn_load_tile(a, v, bi, h, j0, vs);
        __syncthreads();
        if (!active) continue;
        const u32 j = j0 + lane;
        float sc = NEG_INF;
        if (j < a.s && mask[(u64)bi * a.s + j] != 0) {
            float dot = 0.0f;
            for (u32 c = 0; c < a.dh; ++c) dot += qs[warp][c] * ks[lane][c];
            sc = dot * a.scale;
        }
        const float m_new = fmaxf(m, warp_max(sc));
        if (m_new == NEG_INF) continue; // every key so far masked
        const float p = sc == NEG_INF ? 0.0f : expf(sc - m_new);
        const float corr = expf(m - m_new);
        l = l * corr + warp_sum(p);
        m = m_new;
        const float pd = attn_keep(a, bh, i, j) ? p * a.keep_scale : 0.0f;
#pragma unroll
        for (int e = 0; e < ATTN_E; ++e) acc[e] *= corr;
        for (int jj = 0; jj < ATTN_TILE; ++jj) {
            const float pj = __shfl_sync(0xffffffffu, pd, jj);
#pragma unroll
            for (int e = 0; e < ATTN_E; ++e) {
                const u32 c = lane + 32 * e;
                if (c < a.dh) acc[e] += pj * vs[jj][c];
            }
        }
    }
    if (!active) return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int e = 0; e < ATTN_E; ++e) {
        const u32 c = lane + 32 * e;
        if (c < a.dh) st(out + attn_row(a, bi, i, h) + c, acc[e] * inv);
    }
    if (lane == 0) lse[(u64)bh * a.s + i] = l > 0.0f ? m + logf(l) : NEG_INF;
}

// delta[bh, i] = sum_d dout[i, d] * out[i, d]: one warp per row.
template <typename A>
__device__ void attention_backward_delta_impl(const A *out, const A *dout, float *delta,
                                              attn_args a) {
    const u32 lane = threadIdx.x & 31;
    const u64 rows = (u64)a.b * a.heads * a.s;
    const u64 warps = (u64)gridDim.x * (blockDim.x >> 5);
    for (u64 r = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        const u32 i = (u32)(r % a.s), bh = (u32)(r / a.s);
        const u64 base = attn_row(a, bh / a.heads, i, bh % a.heads);
        float acc = 0.0f;
        for (u32 c = lane; c < a.dh; c += 32) acc += ld(out + base + c) * ld(dout + base + c);
        acc = warp_sum(acc);
        if (lane == 0) delta[r] = acc;
    }
}

// dk, dv of one key row per warp: dv_j = sum_i pd_ij dout_i, dk_j = scale *
// sum_i ds_ij q_i, over query tiles in order.
template <typename A>
__device__ void attention_backward_dkdv_simt_impl(const A *q, const A *k, const A *v,
                                                  const u32 *mask, const A *dout,
                                                  const float *lse, const float *delta, A *dk,
                                                  A *dv, attn_args a) {
    __shared__ float qs[ATTN_TILE][ATTN_MAXD + 1];
    __shared__ float dos[ATTN_TILE][ATTN_MAXD + 1];
    __shared__ float kr[ATTN_WARPS][ATTN_MAXD];
    __shared__ float vr[ATTN_WARPS][ATTN_MAXD];
    __shared__ float ls[ATTN_TILE], ds_[ATTN_TILE];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 bh = blockIdx.y, bi = bh / a.heads, h = bh % a.heads;
    const u32 j = blockIdx.x * ATTN_WARPS + warp;
    const bool active = j < a.s;
    const bool kept = active && mask[(u64)bi * a.s + j] != 0;
    if (active)
        for (u32 c = lane; c < a.dh; c += 32) {
            kr[warp][c] = ld(k + attn_row(a, bi, j, h) + c);
            vr[warp][c] = ld(v + attn_row(a, bi, j, h) + c);
        }
    float gk[ATTN_E], gv[ATTN_E];
#pragma unroll
    for (int e = 0; e < ATTN_E; ++e) gk[e] = gv[e] = 0.0f;
    for (u32 i0 = 0; i0 < a.s; i0 += ATTN_TILE) {
        __syncthreads();
        attn_load_tile(a, q, bi, h, i0, qs);
        attn_load_tile(a, dout, bi, h, i0, dos);
        if (threadIdx.x < ATTN_TILE) {
            const u32 i = i0 + threadIdx.x;
            ls[threadIdx.x] = i < a.s ? lse[(u64)bh * a.s + i] : NEG_INF;
            ds_[threadIdx.x] = i < a.s ? delta[(u64)bh * a.s + i] : 0.0f;
        }
        __syncthreads();
        if (!kept) continue;
        const u32 i = i0 + lane;
        float pd = 0.0f, ds = 0.0f;
        if (ls[lane] != NEG_INF) {
            float dot = 0.0f, dpd = 0.0f;
            for (u32 c = 0; c < a.dh; ++c) {
                dot += qs[lane][c] * kr[warp][c];
                dpd += dos[lane][c] * vr[warp][c];
            }
            const float p = expf(dot * a.scale - ls[lane]);
            const bool keep = attn_keep(a, bh, i, j);
            pd = keep ? p * a.keep_scale : 0.0f;
            const float dp = keep ? dpd * a.keep_scale : 0.0f;
            ds = p * (dp - ds_[lane]);
        }
        for (int ii = 0; ii < ATTN_TILE; ++ii) {
            const float pi = __shfl_sync(0xffffffffu, pd, ii);
            const float si = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
            for (int e = 0; e < ATTN_E; ++e) {
                const u32 c = lane + 32 * e;
                if (c < a.dh) {
                    gv[e] += pi * dos[ii][c];
                    gk[e] += si * qs[ii][c];
                }
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int e = 0; e < ATTN_E; ++e) {
        const u32 c = lane + 32 * e;
        if (c < a.dh) {
            st(dk + attn_row(a, bi, j, h) + c, gk[e] * a.scale);
            st(dv + attn_row(a, bi, j, h) + c, gv[e]);
        }
    }
}

// dq of one query row per warp: dq_i = scale * sum_j ds_ij k_j, over key
// tiles in order.
template <typename A>
__device__ void attention_backward_dq_simt_impl(const A *q, const A *k, const A *v,
                                                const u32 *mask, const A *dout,
                                                const float *lse, const float *delta, A *dq,
                                                attn_args a) {
    __shared__ float ks[ATTN_TILE][ATTN_MAXD + 1];
    __shared__ float vs[ATTN_TILE][ATTN_MAXD + 1];
    __shared__ float qr[ATTN_WARPS][ATTN_MAXD];
    __shared__ float dor[ATTN_WARPS][ATTN_MAXD];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 bh = blockIdx.y, bi = bh / a.heads, h = bh % a.heads;
    const u32 i = blockIdx.x * ATTN_WARPS + warp;
    const bool active = i < a.s;
    float li = NEG_INF, di = 0.0f;
    if (active) {
        for (u32 c = lane; c < a.dh; c += 32) {
            qr[warp][c] = ld(q + attn_row(a, bi, i, h) + c);
            dor[warp][c] = ld(dout + attn_row(a, bi, i, h) + c);
        }
        li = lse[(u64)bh * a.s + i];
        di = delta[(u64)bh * a.s + i];
    }
    float gq[ATTN_E];
#pragma unroll
    for (int e = 0; e < ATTN_E; ++e) gq[e] = 0.0f;
    for (u32 j0 = 0; j0 < a.s; j0 += ATTN_TILE) {
        __syncthreads();
        attn_load_tile(a, k, bi, h, j0, ks);
        attn_load_tile(a, v, bi, h, j0, vs);
        __syncthreads();
        if (!active || li == NEG_INF) continue;
        const u32 j = j0 + lane;
        float ds = 0.0f;
        if (j < a.s && mask[(u64)bi * a.s + j] != 0) {
            float dot = 0.0f, dpd = 0.0f;
            for (u32 c = 0; c < a.dh; ++c) {
                dot += qr[warp][c] * ks[lane][c];
                dpd += dor[warp][c] * vs[lane][c];
            }
            const float p = expf(dot * a.scale - li);
            const float dp = attn_keep(a, bh, i, j) ? dpd * a.keep_scale : 0.0f;
            ds = p * (dp - di);
        }
        for (int jj = 0; jj < ATTN_TILE; ++jj) {
            const float sj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
            for (int e = 0; e < ATTN_E; ++e) {
                const u32 c = lane + 32 * e;
                if (c < a.dh) gq[e] += sj * ks[jj][c];
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int e = 0; e < ATTN_E; ++e) {
        const u32 c = lane + 32 * e;
        if (c < a.dh) st(dq + attn_row(a, bi, i, h) + c, gq[e] * a.scale);
    }
}

// ---------------------------------------------------------------------------
// Tensor-core kernels (sm_80+, 16-bit storage, head dim D = 32 or 64).
//
// mma.sync.m16n8k16 fragments (PTX ISA, "row.col"; g = lane / 4, t = lane %
// 4): A (16 x 16) is 4 registers of 2 elements, {A[g][2t..], A[g+8][2t..],
// A[g][2t+8..], A[g+8][2t+8..]}; B (16 x 8) is 2 registers, {B[2t..][g],
// B[2t+8..][g]} (each a pair of consecutive k); C (16 x 8, fp32) is
// {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}. Two C tiles side by side
// (n = 16) are, converted to 16 bits, one A fragment of k = 16.
//
// Shared-memory tiles keep both orientations a product needs with pairs of
// consecutive k adjacent (a transposed copy where the natural layout has
// them a row apart); rows are padded by 8 elements (16 bytes) against bank
// conflicts, and a transposed copy is also swizzled (t_col).

#define MMA_ROWS 64 // rows a block owns (4 warps x 16)
#define MMA_TILE 64 // rows of the other side per shared-memory tile
#define MMA_PAD 8
#define MMA_THREADS 128 // 4 warps a block

// Fragments of bf16 or fp16 operands; `T` picks the instruction.
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const u32 a[4], u32 b0, u32 b1);

template <>
__device__ __forceinline__ void mma16816<bf16>(float c[4], const u32 a[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <>
__device__ __forceinline__ void mma16816<f16>(float c[4], const u32 a[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two adjacent 16-bit elements of a shared-memory row as one register.
template <typename T>
__device__ __forceinline__ u32 pair_at(const T *row, u32 col) {
    return *reinterpret_cast<const u32 *>(row + col);
}

// Where element (row, col) of a transposed tile is stored: column col ^
// (row & 56). The loader's stores from one warp go to rows 8 apart at the
// same column, which the padding alone puts in one bank (8 ways at D = 64,
// 4 at D = 32); the swizzle spreads them over 16 banks. It keeps a pair
// (col even, col + 1) adjacent, and the fragment reads (rows n * 8 + g,
// columns kc * 16 + 2t (+ 8)) in 32 distinct banks.
__device__ __forceinline__ u32 t_col(u32 row, u32 col) { return col ^ (row & 56u); }

// pair_at of a transposed tile.
template <typename T>
__device__ __forceinline__ u32 pair_at_t(const T (*tile)[MMA_TILE + MMA_PAD], u32 row,
                                         u32 col) {
    return pair_at(tile[row], t_col(row, col));
}

// Copies rows [t0, t0 + MMA_TILE) of one head of `x` into `dst` ([row][D]),
// and, when `dst_t` is not null, transposed into `dst_t` ([D][row],
// swizzled by t_col); zeros
// past s. Every thread of the block's MMA_THREADS issues all of its 16-byte
// loads before the first shared-memory store, so the tile waits on global
// memory once rather than once per element pair (a row of a head is D
// contiguous elements, 16-byte aligned: buffers are, and D and heads * D
// are multiples of 8).
template <typename T, int D>
__device__ __forceinline__ void mma_load_tile(const attn_args &a, const T *x, u32 bi, u32 h,
                                              u32 t0, T (*dst)[D + MMA_PAD],
                                              T (*dst_t)[MMA_TILE + MMA_PAD]) {
    constexpr u32 VEC = 8;           // 16-bit elements per 16-byte load
    constexpr u32 PER_ROW = D / VEC; // loads per row
    constexpr u32 LOADS = MMA_TILE * PER_ROW / MMA_THREADS;
    static_assert(MMA_TILE * PER_ROW % MMA_THREADS == 0, "whole loads per thread");
    uint4 vals[LOADS];
#pragma unroll
    for (u32 l = 0; l < LOADS; ++l) {
        const u32 e = threadIdx.x + l * MMA_THREADS;
        const u32 t = t0 + e / PER_ROW, c = VEC * (e % PER_ROW);
        vals[l] = t < a.s ? *reinterpret_cast<const uint4 *>(x + attn_row(a, bi, t, h) + c)
                          : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (u32 l = 0; l < LOADS; ++l) {
        const u32 e = threadIdx.x + l * MMA_THREADS;
        const u32 r = e / PER_ROW, c = VEC * (e % PER_ROW);
        if (dst) *reinterpret_cast<uint4 *>(&dst[r][c]) = vals[l];
        if (dst_t) {
            const u32 words[4] = {vals[l].x, vals[l].y, vals[l].z, vals[l].w};
#pragma unroll
            for (u32 w = 0; w < 4; ++w) {
                T lo, hi;
                lo.bits = (unsigned short)(words[w] & 0xffffu);
                hi.bits = (unsigned short)(words[w] >> 16);
                dst_t[c + 2 * w][t_col(c + 2 * w, r)] = lo;
                dst_t[c + 2 * w + 1][t_col(c + 2 * w + 1, r)] = hi;
            }
        }
    }
}

// The A fragments (k = D) of the warp's 16 rows of `x`, starting at row r0,
// from global memory.
template <typename T, int D>
__device__ __forceinline__ void mma_rows_fragment(const attn_args &a, const T *x, u32 bi, u32 h,
                                                  u32 r0, u32 frag[D / 16][4]) {
    const u32 lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const u32 row = r0 + g + 8 * (r & 1);
            const u32 col = kc * 16 + 2 * t + 8 * (r >> 1);
            frag[kc][r] =
                row < a.s ? *reinterpret_cast<const u32 *>(x + attn_row(a, bi, row, h) + col) : 0u;
        }
}

// Two fp32 accumulator tiles side by side, as one 16-bit A fragment.
template <typename T>
__device__ __forceinline__ void c_to_a(const float lo[4], const float hi[4], u32 out[4]) {
    out[0] = pack2<T>(lo[0], lo[1]);
    out[1] = pack2<T>(lo[2], lo[3]);
    out[2] = pack2<T>(hi[0], hi[1]);
    out[3] = pack2<T>(hi[2], hi[3]);
}

// Sum over the 4 lanes that hold one accumulator row (fixed order).
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return v;
}

// Grid (ceil(s / 64), b * heads), 128 threads.
template <typename T, int D>
__device__ void attention_forward_mma_impl(const T *q, const T *k, const T *v, const u32 *mask,
                                           T *out, float *lse, attn_args a) {
#if __CUDA_ARCH__ >= 800
    __shared__ __align__(16) T ks[MMA_TILE][D + MMA_PAD];
    __shared__ __align__(16) T vt[D][MMA_TILE + MMA_PAD];
    __shared__ u32 ms[MMA_TILE];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const u32 bh = blockIdx.y, bi = bh / a.heads, h = bh % a.heads;
    const u32 r0 = blockIdx.x * MMA_ROWS + warp * 16; // the warp's first query row
    u32 qf[D / 16][4];
    mma_rows_fragment<T, D>(a, q, bi, h, r0, qf);
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    // Rows g and g + 8 of the warp's 16.
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    for (u32 j0 = 0; j0 < a.s; j0 += MMA_TILE) {
        __syncthreads();
        mma_load_tile<T, D>(a, k, bi, h, j0, ks, nullptr);
        mma_load_tile<T, D>(a, v, bi, h, j0, nullptr, vt);
        if (threadIdx.x < MMA_TILE) {
            const u32 j = j0 + threadIdx.x;
            ms[threadIdx.x] = j < a.s ? mask[(u64)bi * a.s + j] : 0u;
        }
        __syncthreads();
        float sc[MMA_TILE / 8][4];
#pragma unroll
        for (int n = 0; n < MMA_TILE / 8; ++n) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < D / 16; ++kc)
                mma16816<T>(sc[n], qf[kc], pair_at(ks[n * 8 + g], kc * 16 + 2 * t),
                            pair_at(ks[n * 8 + g], kc * 16 + 2 * t + 8));
        }
        // Scale and mask; the tile's row maxima.
        float tmax[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int n = 0; n < MMA_TILE / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const u32 col = n * 8 + 2 * t + (e & 1);
                const float s_ = ms[col] != 0 ? sc[n][e] * a.scale : NEG_INF;
                sc[n][e] = s_;
                tmax[e >> 1] = fmaxf(tmax[e >> 1], s_);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float m_new = fmaxf(m[r], quad_max(tmax[r]));
            corr[r] = m_new == NEG_INF ? 1.0f : expf(m[r] - m_new);
            m[r] = m_new;
            l[r] *= corr[r];
        }
        // Probabilities (l sums them undropped), then dropout.
#pragma unroll
        for (int n = 0; n < MMA_TILE / 8; ++n) {
            const u32 keep = attn_keep_rows(a, bh, r0 + g, j0 + n * 8 + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1;
                const float p = sc[n][e] == NEG_INF ? 0.0f : expf(sc[n][e] - m[r]);
                l[r] += p;
                sc[n][e] = (p != 0.0f && ((keep >> e) & 1u)) ? p * a.keep_scale : 0.0f;
            }
        }
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
        // o += pd v: k runs over the tile's keys, 16 at a time.
#pragma unroll
        for (int kc = 0; kc < MMA_TILE / 16; ++kc) {
            u32 pf[4];
            c_to_a<T>(sc[2 * kc], sc[2 * kc + 1], pf);
#pragma unroll
            for (int n = 0; n < D / 8; ++n)
                mma16816<T>(o[n], pf, pair_at_t(vt, n * 8 + g, kc * 16 + 2 * t),
                            pair_at_t(vt, n * 8 + g, kc * 16 + 2 * t + 8));
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] = quad_sum(l[r]);
        const u32 i = r0 + g + 8 * r;
        if (i >= a.s) continue;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        T *row = out + attn_row(a, bi, i, h);
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            st(row + n * 8 + 2 * t, o[n][2 * r] * inv);
            st(row + n * 8 + 2 * t + 1, o[n][2 * r + 1] * inv);
        }
        if (t == 0) lse[(u64)bh * a.s + i] = l[r] > 0.0f ? m[r] + logf(l[r]) : NEG_INF;
    }
#endif
}

// dk, dv: the block owns 64 keys (16 per warp) and runs over query tiles.
// Products with keys as rows: s^T = k q^T, dpd^T = v dout^T, dv += pd^T
// dout, dk += ds^T q. Grid (ceil(s / 64), b * heads), 128 threads.
template <typename T, int D>
__device__ void attention_backward_dkdv_mma_impl(const T *q, const T *k, const T *v,
                                                 const u32 *mask, const T *dout,
                                                 const float *lse, const float *delta, T *dk,
                                                 T *dv, attn_args a) {
#if __CUDA_ARCH__ >= 800
    __shared__ __align__(16) T qs[MMA_TILE][D + MMA_PAD];
    __shared__ __align__(16) T qt[D][MMA_TILE + MMA_PAD];
    __shared__ __align__(16) T dos[MMA_TILE][D + MMA_PAD];
    __shared__ __align__(16) T dot_[D][MMA_TILE + MMA_PAD];
    __shared__ float ls[MMA_TILE], dls[MMA_TILE];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const u32 bh = blockIdx.y, bi = bh / a.heads, h = bh % a.heads;
    const u32 j0 = blockIdx.x * MMA_ROWS + warp * 16; // the warp's first key row
    u32 kf[D / 16][4], vf[D / 16][4];
    mma_rows_fragment<T, D>(a, k, bi, h, j0, kf);
    mma_rows_fragment<T, D>(a, v, bi, h, j0, vf);
    // Keys g and g + 8 of the warp's 16: masked (or past s) keys get no
    // probability, so their gradients stay zero.
    bool key_on[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 j = j0 + g + 8 * r;
        key_on[r] = j < a.s && mask[(u64)bi * a.s + j] != 0;
    }
    float gk[D / 8][4], gv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) gk[n][e] = gv[n][e] = 0.0f;
    for (u32 i0 = 0; i0 < a.s; i0 += MMA_TILE) {
        __syncthreads();
        mma_load_tile<T, D>(a, q, bi, h, i0, qs, qt);
        mma_load_tile<T, D>(a, dout, bi, h, i0, dos, dot_);
        if (threadIdx.x < MMA_TILE) {
            const u32 i = i0 + threadIdx.x;
            ls[threadIdx.x] = i < a.s ? lse[(u64)bh * a.s + i] : NEG_INF;
            dls[threadIdx.x] = i < a.s ? delta[(u64)bh * a.s + i] : 0.0f;
        }
        __syncthreads();
        float p[MMA_TILE / 8][4], dp[MMA_TILE / 8][4];
#pragma unroll
        for (int n = 0; n < MMA_TILE / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) p[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < D / 16; ++kc) {
                const u32 c0 = kc * 16 + 2 * t;
                mma16816<T>(p[n], kf[kc], pair_at(qs[n * 8 + g], c0),
                            pair_at(qs[n * 8 + g], c0 + 8));
                mma16816<T>(dp[n], vf[kc], pair_at(dos[n * 8 + g], c0),
                            pair_at(dos[n * 8 + g], c0 + 8));
            }
        }
        // Element (key row, query col): p, the dropped pd (into p) and ds
        // (into dp).
#pragma unroll
        for (int n = 0; n < MMA_TILE / 8; ++n) {
            const u32 keeps = attn_keep_cols(a, bh, j0 + g, i0 + n * 8 + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1;
                const u32 col = n * 8 + 2 * t + (e & 1);
                float pe = 0.0f, pd = 0.0f, ds = 0.0f;
                if (key_on[r] && ls[col] != NEG_INF) {
                    pe = expf(p[n][e] * a.scale - ls[col]);
                    const bool keep = (keeps >> e) & 1u;
                    pd = keep ? pe * a.keep_scale : 0.0f;
                    const float dpe = keep ? dp[n][e] * a.keep_scale : 0.0f;
                    ds = pe * (dpe - dls[col]);
                }
                p[n][e] = pd;
                dp[n][e] = ds;
            }
        }
        // dv += pd^T dout, dk += ds^T q: k runs over the tile's queries.
#pragma unroll
        for (int kc = 0; kc < MMA_TILE / 16; ++kc) {
            u32 pf[4], sf[4];
            c_to_a<T>(p[2 * kc], p[2 * kc + 1], pf);
            c_to_a<T>(dp[2 * kc], dp[2 * kc + 1], sf);
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                const u32 c0 = kc * 16 + 2 * t;
                mma16816<T>(gv[n], pf, pair_at_t(dot_, n * 8 + g, c0),
                            pair_at_t(dot_, n * 8 + g, c0 + 8));
                mma16816<T>(gk[n], sf, pair_at_t(qt, n * 8 + g, c0),
                            pair_at_t(qt, n * 8 + g, c0 + 8));
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 j = j0 + g + 8 * r;
        if (j >= a.s) continue;
        T *rk = dk + attn_row(a, bi, j, h);
        T *rv = dv + attn_row(a, bi, j, h);
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                st(rk + n * 8 + 2 * t + c, gk[n][2 * r + c] * a.scale);
                st(rv + n * 8 + 2 * t + c, gv[n][2 * r + c]);
            }
    }
#endif
}

// dq: the block owns 64 queries (16 per warp) and runs over key tiles:
// s = q k^T, dpd = dout v^T, dq += ds k. Grid (ceil(s / 64), b * heads),
// 128 threads.
template <typename T, int D>
__device__ void attention_backward_dq_mma_impl(const T *q, const T *k, const T *v,
                                               const u32 *mask, const T *dout, const float *lse,
                                               const float *delta, T *dq, attn_args a) {
#if __CUDA_ARCH__ >= 800
    __shared__ __align__(16) T ks[MMA_TILE][D + MMA_PAD];
    __shared__ __align__(16) T kt[D][MMA_TILE + MMA_PAD];
    __shared__ __align__(16) T vs[MMA_TILE][D + MMA_PAD];
    __shared__ u32 ms[MMA_TILE];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const u32 bh = blockIdx.y, bi = bh / a.heads, h = bh % a.heads;
    const u32 r0 = blockIdx.x * MMA_ROWS + warp * 16;
    u32 qf[D / 16][4], of[D / 16][4];
    mma_rows_fragment<T, D>(a, q, bi, h, r0, qf);
    mma_rows_fragment<T, D>(a, dout, bi, h, r0, of);
    float li[2], di[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 i = r0 + g + 8 * r;
        li[r] = i < a.s ? lse[(u64)bh * a.s + i] : NEG_INF;
        di[r] = i < a.s ? delta[(u64)bh * a.s + i] : 0.0f;
    }
    float gq[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) gq[n][0] = gq[n][1] = gq[n][2] = gq[n][3] = 0.0f;
    for (u32 j0 = 0; j0 < a.s; j0 += MMA_TILE) {
        __syncthreads();
        mma_load_tile<T, D>(a, k, bi, h, j0, ks, kt);
        mma_load_tile<T, D>(a, v, bi, h, j0, vs, nullptr);
        if (threadIdx.x < MMA_TILE) {
            const u32 j = j0 + threadIdx.x;
            ms[threadIdx.x] = j < a.s ? mask[(u64)bi * a.s + j] : 0u;
        }
        __syncthreads();
        float p[MMA_TILE / 8][4], dp[MMA_TILE / 8][4];
#pragma unroll
        for (int n = 0; n < MMA_TILE / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) p[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < D / 16; ++kc) {
                const u32 c0 = kc * 16 + 2 * t;
                mma16816<T>(p[n], qf[kc], pair_at(ks[n * 8 + g], c0),
                            pair_at(ks[n * 8 + g], c0 + 8));
                mma16816<T>(dp[n], of[kc], pair_at(vs[n * 8 + g], c0),
                            pair_at(vs[n * 8 + g], c0 + 8));
            }
        }
#pragma unroll
        for (int n = 0; n < MMA_TILE / 8; ++n) {
            const u32 keep = attn_keep_rows(a, bh, r0 + g, j0 + n * 8 + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1;
                const u32 col = n * 8 + 2 * t + (e & 1);
                float ds = 0.0f;
                if (ms[col] != 0 && li[r] != NEG_INF) {
                    const float pe = expf(p[n][e] * a.scale - li[r]);
                    const float dpe = ((keep >> e) & 1u) ? dp[n][e] * a.keep_scale : 0.0f;
                    ds = pe * (dpe - di[r]);
                }
                p[n][e] = ds;
            }
        }
#pragma unroll
        for (int kc = 0; kc < MMA_TILE / 16; ++kc) {
            u32 sf[4];
            c_to_a<T>(p[2 * kc], p[2 * kc + 1], sf);
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                const u32 c0 = kc * 16 + 2 * t;
                mma16816<T>(gq[n], sf, pair_at_t(kt, n * 8 + g, c0),
                            pair_at_t(kt, n * 8 + g, c0 + 8));
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 i = r0 + g + 8 * r;
        if (i >= a.s) continue;
        T *row = dq + attn_row(a, bi, i, h);
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            st(row + n * 8 + 2 * t, gq[n][2 * r] * a.scale);
            st(row + n * 8 + 2 * t + 1, gq[n][2 * r + 1] * a.scale);
        }
    }
#endif
}

// Kernel parameters: the shape and the dropout mask, as attn_args.
#define ATTN_PARAMS                                                                          \
    u32 b, u32 heads, u32 s, u32 dh, float scale, u32 threshold, float keep_scale,          \
        u32 seed_lo, u32 seed_hi, u32 step_lo, u32 step_hi, u32 stream
#define ATTN_ARGS                                                                            \
    attn_args {                                                                              \
        b, heads, s, dh, scale, threshold, keep_scale, seed_lo, seed_hi, step_lo, step_hi,   \
            stream                                                                           \
    }

#define ATTENTION_SIMT(S, T)                                                                 \
    extern "C" __global__ void attention_forward_simt_##S(const T *q, const T *k, const T *v, \
                                                          const u32 *mask, T *out,           \
                                                          float *lse, ATTN_PARAMS) {         \
        attention_forward_simt_impl(q, k, v, mask, out, lse, ATTN_ARGS);                     \
    }                                                                                        \
    extern "C" __global__ void attention_backward_delta_##S(const T *out, const T *dout,     \
                                                            float *delta, ATTN_PARAMS) {     \
        attention_backward_delta_impl(out, dout, delta, ATTN_ARGS);                          \
    }                                                                                        \
    extern "C" __global__ void attention_backward_dkdv_simt_##S(                             \
        const T *q, const T *k, const T *v, const u32 *mask, const T *dout,                  \
        const float *lse, const float *delta, T *dk, T *dv, ATTN_PARAMS) {                   \
        attention_backward_dkdv_simt_impl(q, k, v, mask, dout, lse, delta, dk, dv, ATTN_ARGS); \
    }                                                                                        \
    extern "C" __global__ void attention_backward_dq_simt_##S(                               \
        const T *q, const T *k, const T *v, const u32 *mask, const T *dout,                  \
        const float *lse, const float *delta, T *dq, ATTN_PARAMS) {                          \
        attention_backward_dq_simt_impl(q, k, v, mask, dout, lse, delta, dq, ATTN_ARGS);     \
    }
FOR_EACH_TYPE(ATTENTION_SIMT)

#define ATTENTION_MMA(S, T, D)                                                               \
    extern "C" __global__ void __launch_bounds__(128)                                        \
        attention_forward_mma##D##_##S(const T *q, const T *k, const T *v, const u32 *mask,  \
                                       T *out, float *lse, ATTN_PARAMS) {                    \
        attention_forward_mma_impl<T, D>(q, k, v, mask, out, lse, ATTN_ARGS);                \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) attention_backward_dkdv_mma##D##_##S(  \
        const T *q, const T *k, const T *v, const u32 *mask, const T *dout,                  \
        const float *lse, const float *delta, T *dk, T *dv, ATTN_PARAMS) {                   \
        attention_backward_dkdv_mma_impl<T, D>(q, k, v, mask, dout, lse, delta, dk, dv,      \
                                               ATTN_ARGS);                                   \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) attention_backward_dq_mma##D##_##S(    \
        const T *q, const T *k, const T *v, const u32 *mask, const T *dout,                  \
        const float *lse, const float *delta, T *dq, ATTN_PARAMS) {                          \
        attention_backward_dq_mma_impl<T, D>(q, k, v, mask, dout, lse, delta, dq, ATTN_ARGS); \
    }
#define ATTENTION_MMA_DIMS(S, T) ATTENTION_MMA(S, T, 32) ATTENTION_MMA(S, T, 64)
FOR_EACH_HALF(ATTENTION_MMA_DIMS)

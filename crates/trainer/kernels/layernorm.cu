// LayerNorm over the last axis (rows of n): out = (v - mean) * rstd * gamma
// + beta, two passes over the row (mean, then the centred variance), as the
// CPU reference; gamma, beta, mean and rstd are fp32 whatever the
// activations' storage.
//
// residual_layernorm_forward fuses the block before every post-LN
// LayerNorm: v = dropout(x + bias) + residual, stored in place of x (the
// residual stream's backward needs it), then the LayerNorm of the stored v,
// in one pass over the row instead of four launches. Its backward,
// residual_layernorm_backward, writes the LayerNorm's dx and, when dropout
// was on, dx through the dropout mask, in one pass.
//
// One block per row for forward and dx, except the residual kernels' rows of
// at most LN_WARP_MAX columns, a multiple of 8 (every hidden size of the
// seven families): those take one warp a row (*_warp), which holds the row
// in registers as groups of 8 columns read and written 16 bytes at a time,
// reads each input once and reduces with shuffles alone. A block per row
// reads a row three times and waits at eight barriers for its two block
// sums, which is most of the time of a row of 768. dgamma/dbeta are column
// sums over
// rows in a fixed order, so every sum is deterministic: one block per 32
// columns with (32, 8) threads (backward_params), or split over row chunks
// into partials that each column block's last block adds in a fixed order
// (last_to_arrive and sum_partials, in the same launch).
//
// Counts per call (R rows of n, s = sizeof(T)):
//   forward                    ~8*R*n FLOP, 2*R*n*s + 8n + 8R bytes
//   residual_layernorm_forward ~10*R*n FLOP, (3 + 1)*R*n*s + 12n + 8R bytes
//                              (+ R*n/4 Philox calls with dropout)
//   backward_dx                ~10*R*n FLOP, 3*R*n*s + 4n + 8R bytes
//   residual_layernorm_backward ~11*R*n FLOP, (3 + 1)*R*n*s + 4n + 8R bytes
//   backward_params             ~5*R*n FLOP, 2*R*n*s + 8R + 8n bytes

template <typename T>
__device__ void layernorm_row(const T *x, const float *gamma, const float *beta, T *out,
                              float *mean, float *rstd, u64 row, u32 n, float eps,
                              float *scratch) {
    const u64 base = row * n;
    float acc = 0.0f;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) acc += ld(x + base + j);
    const float m = block_sum(acc, scratch) / (float)n;
    float var = 0.0f;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
        const float d = ld(x + base + j) - m;
        var += d * d;
    }
    const float r = 1.0f / sqrtf(block_sum(var, scratch) / (float)n + eps);
    for (u32 j = threadIdx.x; j < n; j += blockDim.x)
        st(out + base + j, (ld(x + base + j) - m) * r * gamma[j] + beta[j]);
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

template <typename T>
__device__ void layernorm_forward_impl(const T *x, const float *gamma, const float *beta, T *out,
                                       float *mean, float *rstd, u64 rows, u32 n, float eps) {
    __shared__ float scratch[32];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x)
        layernorm_row(x, gamma, beta, out, mean, rstd, row, n, eps, scratch);
}

template <typename T>
__device__ void residual_layernorm_forward_impl(T *sum, const float *bias, const T *residual,
                                                const float *gamma, const float *beta, T *out,
                                                float *mean, float *rstd, u64 rows, u32 n,
                                                float eps, DROPOUT_PARAMS) {
    __shared__ float scratch[32];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * n;
        for_row_dropout(base, n, DROPOUT_ARGS, [&](u32 j, int keep) {
            const u64 i = base + j;
            const float v = drop_apply(ld(sum + i) + bias[j], keep, keep_scale);
            st(sum + i, v + ld(residual + i));
        });
        __syncthreads(); // the row's stored sums, read back by other threads
        layernorm_row(sum, gamma, beta, out, mean, rstd, row, n, eps, scratch);
    }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * gamma,
// for one row; returns nothing, calls `put(j, dx_j)` for each column.
template <typename T, typename Put>
__device__ void layernorm_dx_row(const T *dout, const T *x, const float *gamma, float m,
                                 float r, u64 base, u32 n, float *scratch, Put put) {
    float sg = 0.0f, sgx = 0.0f;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
        const float g = ld(dout + base + j) * gamma[j];
        sg += g;
        sgx += g * (ld(x + base + j) - m) * r;
    }
    const float mg = block_sum(sg, scratch) / (float)n;
    const float mgx = block_sum(sgx, scratch) / (float)n;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
        const float xhat = (ld(x + base + j) - m) * r;
        put(j, r * (ld(dout + base + j) * gamma[j] - mg - xhat * mgx));
    }
}

template <typename T>
__device__ void layernorm_backward_dx_impl(const T *dout, const T *x, const float *gamma,
                                           const float *mean, const float *rstd, T *dx, u64 rows,
                                           u32 n) {
    __shared__ float scratch[32];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * n;
        layernorm_dx_row(dout, x, gamma, mean[row], rstd[row], base, n, scratch,
                         [&](u32 j, float v) { st(dx + base + j, v); });
    }
}

// d_sum = dx (stored); d_branch = d_sum through the dropout mask, when not
// null.
template <typename T>
__device__ void residual_layernorm_backward_impl(const T *dout, const T *sum, const float *gamma,
                                                 const float *mean, const float *rstd, T *d_sum,
                                                 T *d_branch, u64 rows, u32 n, DROPOUT_PARAMS) {
    __shared__ float scratch[32];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * n;
        layernorm_dx_row(dout, sum, gamma, mean[row], rstd[row], base, n, scratch,
                         [&](u32 j, float v) { st(d_sum + base + j, v); });
        if (!d_branch) continue;
        __syncthreads(); // the row's stored d_sum, read back by other threads
        for_row_dropout(base, n, DROPOUT_ARGS, [&](u32 j, int keep) {
            const u64 i = base + j;
            st(d_branch + i, drop_apply(ld(d_sum + i), keep, keep_scale));
        });
    }
}

// ---------------------------------------------------------------------------
// Warp-per-row residual kernels. Lane l holds the column groups l, l + 32,
// ... (8 columns each, LN_GROUPS at most); a row of n columns has n / 8.

#define LN_GROUPS 4
#define LN_WARP_MAX (32 * 8 * LN_GROUPS)

// The dropout decisions (drop_apply's) of columns c .. c + 7 of the row
// whose first element is element `base` of the stream: two Philox blocks
// when base + c is a multiple of 4 (n % 8 == 0 makes it so), as
// for_row_dropout decides them.
__device__ __forceinline__ void dropout8(u64 i, int keep[8], DROPOUT_PARAMS) {
    if (threshold == 0) {
#pragma unroll
        for (int e = 0; e < 8; ++e) keep[e] = -1;
        return;
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const philox_out r =
            dropout_block((i >> 2) + half, seed_lo, seed_hi, step_lo, step_hi, stream);
#pragma unroll
        for (int w = 0; w < 4; ++w) keep[4 * half + w] = (int)((r.w[w] >> 8) >= threshold);
    }
}

// v = dropout(x + bias) + residual, stored in place of x, then the
// LayerNorm of the stored v: the same values as the block-per-row kernel
// up to the order of the row's sums.
template <typename T>
__device__ void residual_layernorm_forward_warp_impl(T *sum, const float *bias, const T *residual,
                                                     const float *gamma, const float *beta,
                                                     T *out, float *mean, float *rstd, u64 rows,
                                                     u32 n, float eps, DROPOUT_PARAMS) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = (u64)gridDim.x * (blockDim.x >> 5);
    for (u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
         row += warps) {
        const u64 base = row * n;
        float v[LN_GROUPS][8];
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_GROUPS; ++k) {
            const u32 c = 8 * (lane + 32 * k);
            if (c >= n) break;
            float r[8];
            int keep[8];
            ld8(sum + base + c, v[k]);
            ld8(residual + base + c, r);
            add_bias8(v[k], bias, c, n);
            dropout8(base + c, keep, DROPOUT_ARGS);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[k][e] = stored<T>(drop_apply(v[k][e], keep[e], keep_scale) + r[e]);
            st8(sum + base + c, v[k]);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += v[k][e];
        }
        const float m = warp_sum(acc) / (float)n;
        float var = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_GROUPS; ++k) {
            if (8 * (lane + 32 * k) >= n) break;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float d = v[k][e] - m;
                var += d * d;
            }
        }
        const float rs = 1.0f / sqrtf(warp_sum(var) / (float)n + eps);
#pragma unroll
        for (int k = 0; k < LN_GROUPS; ++k) {
            const u32 c = 8 * (lane + 32 * k);
            if (c >= n) break;
            float g[8], b[8], y[8];
            ld8(gamma + c, g);
            ld8(beta + c, b);
#pragma unroll
            for (int e = 0; e < 8; ++e) y[e] = (v[k][e] - m) * rs * g[e] + b[e];
            st8(out + base + c, y);
        }
        if (lane == 0) {
            mean[row] = m;
            rstd[row] = rs;
        }
    }
}

// residual_layernorm_backward's dx (d_sum) and d_branch, a warp a row.
template <typename T>
__device__ void residual_layernorm_backward_warp_impl(const T *dout, const T *sum,
                                                      const float *gamma, const float *mean,
                                                      const float *rstd, T *d_sum, T *d_branch,
                                                      u64 rows, u32 n, DROPOUT_PARAMS) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = (u64)gridDim.x * (blockDim.x >> 5);
    for (u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
         row += warps) {
        const u64 base = row * n;
        const float m = mean[row], rs = rstd[row];
        // g = dout * gamma and x - mean, per column (layernorm_dx_row's
        // expressions).
        float g[LN_GROUPS][8], d[LN_GROUPS][8];
        float sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_GROUPS; ++k) {
            const u32 c = 8 * (lane + 32 * k);
            if (c >= n) break;
            float gm[8];
            ld8(dout + base + c, g[k]);
            ld8(sum + base + c, d[k]);
            ld8(gamma + c, gm);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                g[k][e] *= gm[e];
                d[k][e] -= m;
                sg += g[k][e];
                sgx += g[k][e] * d[k][e] * rs;
            }
        }
        const float mg = warp_sum(sg) / (float)n;
        const float mgx = warp_sum(sgx) / (float)n;
#pragma unroll
        for (int k = 0; k < LN_GROUPS; ++k) {
            const u32 c = 8 * (lane + 32 * k);
            if (c >= n) break;
            float dx[8];
#pragma unroll
            for (int e = 0; e < 8; ++e)
                dx[e] = stored<T>(rs * (g[k][e] - mg - d[k][e] * rs * mgx));
            st8(d_sum + base + c, dx);
            if (!d_branch) continue;
            int keep[8];
            dropout8(base + c, keep, DROPOUT_ARGS);
#pragma unroll
            for (int e = 0; e < 8; ++e) dx[e] = drop_apply(dx[e], keep[e], keep_scale);
            st8(d_branch + base + c, dx);
        }
    }
}

// dgamma += sum_rows dout * xhat, dbeta += sum_rows dout. Block (32, 8).
template <typename T>
__device__ void layernorm_backward_params_impl(const T *dout, const T *x, const float *mean,
                                               const float *rstd, float *dgamma, float *dbeta,
                                               float *partial, u32 *arrived, u64 rows, u32 n) {
    __shared__ float pg[8][33];
    __shared__ float pb[8][33];
    const u32 col = blockIdx.x * 32 + threadIdx.x;
    // Row chunk of this block (gridDim.y chunks; 1: every row).
    const u64 per = (rows + gridDim.y - 1) / gridDim.y;
    const u64 r0 = (u64)blockIdx.y * per;
    const u64 r1 = r0 + per < rows ? r0 + per : rows;
    float ag = 0.0f, ab = 0.0f;
    if (col < n) {
        // Four rows' loads issued before their adds, which keep row order.
        u64 r = r0 + threadIdx.y;
        for (; r + 24 < r1; r += 32) {
            float d[4], xv[4], m[4], rs[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const u64 rk = r + 8 * k;
                d[k] = ld(dout + rk * n + col);
                xv[k] = ld(x + rk * n + col);
                m[k] = mean[rk];
                rs[k] = rstd[rk];
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                ag += d[k] * (xv[k] - m[k]) * rs[k];
                ab += d[k];
            }
        }
        for (; r < r1; r += 8) {
            const float d = ld(dout + r * n + col);
            ag += d * (ld(x + r * n + col) - mean[r]) * rstd[r];
            ab += d;
        }
    }
    pg[threadIdx.y][threadIdx.x] = ag;
    pb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && col < n) {
        float tg = 0.0f, tb = 0.0f;
        for (int y = 0; y < 8; ++y) {
            tg += pg[y][threadIdx.x];
            tb += pb[y][threadIdx.x];
        }
        if (gridDim.y == 1) {
            dgamma[col] += tg;
            dbeta[col] += tb;
        } else {
            // Partials [chunk][2][n], added by the column block's last block.
            partial[((u64)blockIdx.y * 2) * n + col] = tg;
            partial[((u64)blockIdx.y * 2 + 1) * n + col] = tb;
            __threadfence();
        }
    }
    if (gridDim.y == 1 || !last_to_arrive(arrived)) return;
    const float tg = sum_partials(partial + col, 2 * (u64)n, col < n, pg);
    const float tb = sum_partials(partial + n + col, 2 * (u64)n, col < n, pb);
    if (threadIdx.y == 0 && col < n) {
        dgamma[col] += tg;
        dbeta[col] += tb;
    }
}

// The residual kernels of one form: KIND empty (block per row) or _warp.
#define RESIDUAL_LAYERNORM(S, T, KIND)                                                       \
    extern "C" __global__ void residual_layernorm_forward##KIND##_##S(                       \
        T *sum, const float *bias, const T *residual, const float *gamma, const float *beta, \
        T *out, float *mean, float *rstd, u64 rows, u32 n, float eps, DROPOUT_PARAMS) {      \
        residual_layernorm_forward##KIND##_impl(sum, bias, residual, gamma, beta, out, mean, \
                                                rstd, rows, n, eps, DROPOUT_ARGS);           \
    }                                                                                        \
    extern "C" __global__ void residual_layernorm_backward##KIND##_##S(                      \
        const T *dout, const T *sum, const float *gamma, const float *mean,                  \
        const float *rstd, T *d_sum, T *d_branch, u64 rows, u32 n, DROPOUT_PARAMS) {         \
        residual_layernorm_backward##KIND##_impl(dout, sum, gamma, mean, rstd, d_sum,        \
                                                 d_branch, rows, n, DROPOUT_ARGS);           \
    }

#define LAYERNORM(S, T)                                                                      \
    extern "C" __global__ void layernorm_forward_##S(const T *x, const float *gamma,         \
                                                     const float *beta, T *out, float *mean, \
                                                     float *rstd, u64 rows, u32 n,           \
                                                     float eps) {                            \
        layernorm_forward_impl(x, gamma, beta, out, mean, rstd, rows, n, eps);               \
    }                                                                                        \
    extern "C" __global__ void layernorm_backward_dx_##S(const T *dout, const T *x,          \
                                                         const float *gamma,                 \
                                                         const float *mean,                  \
                                                         const float *rstd, T *dx, u64 rows, \
                                                         u32 n) {                            \
        layernorm_backward_dx_impl(dout, x, gamma, mean, rstd, dx, rows, n);                 \
    }                                                                                        \
    RESIDUAL_LAYERNORM(S, T, )                                                               \
    RESIDUAL_LAYERNORM(S, T, _warp)                                                          \
    extern "C" __global__ void layernorm_backward_params_##S(                                \
        const T *dout, const T *x, const float *mean, const float *rstd, float *dgamma,      \
        float *dbeta, float *partial, u32 *arrived, u64 rows, u32 n) {                       \
        layernorm_backward_params_impl(dout, x, mean, rstd, dgamma, dbeta, partial, arrived, \
                                       rows, n);                                             \
    }
FOR_EACH_TYPE(LAYERNORM)

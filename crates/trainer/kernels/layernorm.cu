// LayerNorm over the last axis (rows of n), fused with the residual add
// that precedes every LayerNorm in BERT: v = x + residual (residual may be
// null; when `sum_out` is not null v is stored there, the residual stream
// backward needs it), out = (v - mean) * rstd * gamma + beta. Two passes
// over the row (mean, then the centred variance), as the CPU reference.
//
// One block per row for forward and dx; dgamma/dbeta are column sums over
// rows with a fixed (32, 8) block shape, so every sum is deterministic.
//
// Counts per call (R rows of n, s = sizeof(T)):
//   forward            ~8*R*n FLOP, (2 reads + 1 write [+ residual read + sum
//                      write])*R*n*s + 2n*s (gamma, beta) + 2R*s (mean, rstd)
//   backward_dx       ~10*R*n FLOP, 3*R*n*s + n*s + 2R*s bytes
//   backward_params    ~5*R*n FLOP, 2*R*n*s + 2R*s + 4n*s bytes

template <typename T>
__device__ __forceinline__ float ln_input(const T *x, const T *residual, u64 i) {
    float v = ld(x + i);
    if (residual) v += ld(residual + i);
    return v;
}

template <typename T>
__device__ void layernorm_forward_impl(const T *x, const T *residual, T *sum_out,
                                       const T *gamma, const T *beta, T *out, T *mean,
                                       T *rstd, u64 rows, u32 n, float eps) {
    __shared__ float scratch[32];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * n;
        float acc = 0.0f;
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float v = ln_input(x, residual, base + j);
            if (sum_out) st(sum_out + base + j, v);
            acc += v;
        }
        const float m = block_sum(acc, scratch) / (float)n;
        float var = 0.0f;
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float d = ln_input(x, residual, base + j) - m;
            var += d * d;
        }
        const float r = 1.0f / sqrtf(block_sum(var, scratch) / (float)n + eps);
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float v = ln_input(x, residual, base + j);
            st(out + base + j, (v - m) * r * ld(gamma + j) + ld(beta + j));
        }
        if (threadIdx.x == 0) {
            st(mean + row, m);
            st(rstd + row, r);
        }
    }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * gamma.
template <typename T>
__device__ void layernorm_backward_dx_impl(const T *dout, const T *x, const T *gamma,
                                           const T *mean, const T *rstd, T *dx, u64 rows,
                                           u32 n) {
    __shared__ float scratch[32];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * n;
        const float m = ld(mean + row), r = ld(rstd + row);
        float sg = 0.0f, sgx = 0.0f;
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float g = ld(dout + base + j) * ld(gamma + j);
            sg += g;
            sgx += g * (ld(x + base + j) - m) * r;
        }
        const float mg = block_sum(sg, scratch) / (float)n;
        const float mgx = block_sum(sgx, scratch) / (float)n;
        for (u32 j = threadIdx.x; j < n; j += blockDim.x) {
            const float xhat = (ld(x + base + j) - m) * r;
            st(dx + base + j, r * (ld(dout + base + j) * ld(gamma + j) - mg - xhat * mgx));
        }
    }
}

// dgamma += sum_rows dout * xhat, dbeta += sum_rows dout. Block (32, 8).
template <typename T>
__device__ void layernorm_backward_params_impl(const T *dout, const T *x, const T *mean,
                                               const T *rstd, T *dgamma, T *dbeta, u64 rows,
                                               u32 n) {
    __shared__ float pg[8][33];
    __shared__ float pb[8][33];
    const u32 col = blockIdx.x * 32 + threadIdx.x;
    float ag = 0.0f, ab = 0.0f;
    if (col < n)
        for (u64 r = threadIdx.y; r < rows; r += 8) {
            const float d = ld(dout + r * n + col);
            ag += d * (ld(x + r * n + col) - ld(mean + r)) * ld(rstd + r);
            ab += d;
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
        st(dgamma + col, ld(dgamma + col) + tg);
        st(dbeta + col, ld(dbeta + col) + tb);
    }
}

#define LAYERNORM(S, T)                                                                     \
    extern "C" __global__ void layernorm_forward_##S(                                       \
        const T *x, const T *residual, T *sum_out, const T *gamma, const T *beta, T *out,   \
        T *mean, T *rstd, u64 rows, u32 n, float eps) {                                     \
        layernorm_forward_impl(x, residual, sum_out, gamma, beta, out, mean, rstd, rows, n, \
                               eps);                                                        \
    }                                                                                       \
    extern "C" __global__ void layernorm_backward_dx_##S(const T *dout, const T *x,         \
                                                         const T *gamma, const T *mean,     \
                                                         const T *rstd, T *dx, u64 rows,    \
                                                         u32 n) {                           \
        layernorm_backward_dx_impl(dout, x, gamma, mean, rstd, dx, rows, n);                \
    }                                                                                       \
    extern "C" __global__ void layernorm_backward_params_##S(                               \
        const T *dout, const T *x, const T *mean, const T *rstd, T *dgamma, T *dbeta,       \
        u64 rows, u32 n) {                                                                  \
        layernorm_backward_params_impl(dout, x, mean, rstd, dgamma, dbeta, rows, n);        \
    }
FOR_EACH_TYPE(LAYERNORM)

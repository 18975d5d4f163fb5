// Global gradient norm: per-block partial sums of squares in fp64 (as the
// CPU reference accumulates), written to `partial[blockIdx.x]`. The host
// adds the partials in block order (sum_squares), or adamw_multi does on the
// device (sum_squares_multi, over every tensor of a table); with a fixed
// grid the result is deterministic. Launch with 256 threads per block.
//
// Counts per call (n elements, s = sizeof(T)): 2n FLOP (fp64), n*s bytes
// read + 8 bytes per block written.

template <typename T>
__device__ void sum_squares_impl(const T *x, u64 n, double *partial) {
    __shared__ double scratch[32];
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        const double v = (double)ld(x + i);
        acc += v * v;
    }
    const double total = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

#define GLOBAL_NORM(S, T)                                                             \
    extern "C" __global__ void sum_squares_##S(const T *x, u64 n, double *partial) { \
        sum_squares_impl(x, n, partial);                                              \
    }
FOR_EACH_TYPE(GLOBAL_NORM)

// The gradients of a multi-tensor table (see optim.cu), in table order, a
// row-sparse one's compact rows as they are (its other rows are zero);
// launched with 1024 threads a block, as adamw_multi.
extern "C" __global__ void __launch_bounds__(1024)
    sum_squares_multi(const tensor_entry *table, u32 tensors, double *partial) {
    __shared__ double scratch[32];
    double acc = 0.0;
    for (u32 t = 0; t < tensors; ++t) {
        const float *g = (const float *)table[t].grad;
        // 16-byte loads (aligned tensors, as adamw_multi), then the tail.
        const u64 n = table[t].grad_len, n4 = n / 4;
        GRID_STRIDE(q, n4) {
            const float4 g4 = reinterpret_cast<const float4 *>(g)[q];
            acc += (double)g4.x * g4.x;
            acc += (double)g4.y * g4.y;
            acc += (double)g4.z * g4.z;
            acc += (double)g4.w * g4.w;
        }
        GRID_STRIDE(i, n - 4 * n4) {
            const double v = (double)g[4 * n4 + i];
            acc += v * v;
        }
    }
    const double total = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

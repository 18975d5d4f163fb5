// Global gradient norm: per-block partial sums of squares in fp64 (as the
// CPU reference accumulates), written to `partial[blockIdx.x]`. The host adds
// the partials in block order, so with a fixed grid the result is
// deterministic. Launch with 256 threads per block.
//
// Counts per call (n elements, s = sizeof(T)): 2n FLOP (fp64),
// n*s bytes read + 8 bytes per block written.

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

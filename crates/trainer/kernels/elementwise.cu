// Elementwise family: fill, residual add, add-assign, scale, bias add and
// its deterministic column-sum backward. All are memory bound.
//
// Counts per call (n elements, s = sizeof(T), rows x cols for bias ops):
//   fill        0 FLOP,   n*s bytes written
//   add         n FLOP,   3*n*s bytes
//   add_assign  n FLOP,   3*n*s bytes
//   scale       n FLOP,   2*n*s bytes
//   bias_add    n FLOP,   2*n*s + cols*s bytes
//   bias_backward n FLOP, n*s + 2*cols*s bytes

template <typename T>
__device__ void fill_impl(T *out, float v, u64 n) {
    GRID_STRIDE(i, n) st(out + i, v);
}
template <typename T>
__device__ void add_impl(const T *a, const T *b, T *out, u64 n) {
    GRID_STRIDE(i, n) st(out + i, ld(a + i) + ld(b + i));
}
template <typename T>
__device__ void add_assign_impl(T *acc, const T *x, u64 n) {
    GRID_STRIDE(i, n) st(acc + i, ld(acc + i) + ld(x + i));
}
template <typename T>
__device__ void scale_impl(T *buf, float f, u64 n) {
    GRID_STRIDE(i, n) st(buf + i, ld(buf + i) * f);
}
template <typename T>
__device__ void bias_add_impl(T *out, const T *bias, u64 n, u32 cols) {
    GRID_STRIDE(i, n) st(out + i, ld(out + i) + ld(bias + (i % cols)));
}

// Block (32, 8): threadIdx.x picks a column of this block's 32, threadIdx.y
// a row phase; each thread sums its rows in row order, then the 8 partial
// sums are added in y order. Fixed order, so the result is deterministic.
template <typename T>
__device__ void bias_backward_impl(const T *dout, T *dbias, u64 rows, u32 cols) {
    __shared__ float part[8][33];
    const u32 col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (col < cols)
        for (u64 r = threadIdx.y; r < rows; r += 8) acc += ld(dout + r * cols + col);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float total = 0.0f;
        for (int y = 0; y < 8; ++y) total += part[y][threadIdx.x];
        st(dbias + col, ld(dbias + col) + total);
    }
}

#define ELEMENTWISE(S, T)                                                                   \
    extern "C" __global__ void fill_##S(T *out, float v, u64 n) { fill_impl(out, v, n); }   \
    extern "C" __global__ void add_##S(const T *a, const T *b, T *out, u64 n) {             \
        add_impl(a, b, out, n);                                                             \
    }                                                                                       \
    extern "C" __global__ void add_assign_##S(T *acc, const T *x, u64 n) {                  \
        add_assign_impl(acc, x, n);                                                         \
    }                                                                                       \
    extern "C" __global__ void scale_##S(T *buf, float f, u64 n) { scale_impl(buf, f, n); } \
    extern "C" __global__ void bias_add_##S(T *out, const T *bias, u64 n, u32 cols) {       \
        bias_add_impl(out, bias, n, cols);                                                  \
    }                                                                                       \
    extern "C" __global__ void bias_backward_##S(const T *dout, T *dbias, u64 rows,         \
                                                 u32 cols) {                                \
        bias_backward_impl(dout, dbias, rows, cols);                                        \
    }
FOR_EACH_TYPE(ELEMENTWISE)

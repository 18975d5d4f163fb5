// Elementwise family: fill, residual add, add-assign, scale, bias add and
// its deterministic column-sum backward, and casts between storage types.
// All are memory bound.
//
// Counts per call (n elements, s = sizeof(T), rows x cols for bias ops):
//   fill        0 FLOP,   n*s bytes written
//   fill_multi  0 FLOP,   4n bytes written (n: all tensors' elements, fp32)
//               + 16 bytes read per tensor per block
//   add         n FLOP,   3*n*s bytes
//   add_assign  n FLOP,   (2*s_acc + s_x)*n bytes
//   scale       n FLOP,   2*n*s bytes
//   cast        0 FLOP,   (s_src + s_dst)*n bytes
//   cast_many   0 FLOP,   (4 + s_dst)*n bytes (n: all its tensors' elements)
//   bias_add    n FLOP,   2*n*s + 4*cols bytes
//   column_sums n FLOP,   n*s + 4*chunks*cols bytes (partials), then
//               chunks*cols FLOP, 4*(chunks + 2)*cols bytes (the last blocks)

template <typename T>
__device__ void fill_impl(T *out, float v, u64 n) {
    GRID_STRIDE(i, n) st(out + i, v);
}
// One tensor of a multi-tensor fill: address and length (as u64s, the
// layout the host writes).
struct fill_entry {
    u64 ptr, len;
};

// Every fp32 tensor of `table` set to `v` in one launch (a step's gradient
// zeroing: 200 tensors of BERT-base were 200 launches). 16-byte stores;
// the host passes only 16-byte aligned tensors. Launched with 1024 threads
// a block.
extern "C" __global__ void __launch_bounds__(1024)
    fill_multi(const fill_entry *table, u32 tensors, float v) {
    const float4 v4 = make_float4(v, v, v, v);
    for (u32 t = 0; t < tensors; ++t) {
        float *p = (float *)table[t].ptr;
        const u64 n = table[t].len, n4 = n / 4;
        GRID_STRIDE(i, n4) reinterpret_cast<float4 *>(p)[i] = v4;
        GRID_STRIDE(i, n - 4 * n4) p[4 * n4 + i] = v;
    }
}

template <typename T>
__device__ void add_impl(const T *a, const T *b, T *out, u64 n) {
    GRID_STRIDE(i, n) st(out + i, ld(a + i) + ld(b + i));
}
template <typename A, typename X>
__device__ void add_assign_impl(A *acc, const X *x, u64 n) {
    GRID_STRIDE(i, n) st(acc + i, ld(acc + i) + ld(x + i));
}
template <typename T>
__device__ void scale_impl(T *buf, float f, u64 n) {
    GRID_STRIDE(i, n) st(buf + i, ld(buf + i) * f);
}
// cast and bias_add take 8 elements a thread (GRID_STRIDE_VEC).
template <typename S, typename D>
__device__ void cast_impl(const S *src, D *dst, u64 n) {
    GRID_STRIDE_VEC(i, n) {
        float v[8];
        ld8(src + i, v);
        st8(dst + i, v);
    }
    GRID_STRIDE_TAIL(i, n) st(dst + i, ld(src + i));
}
template <typename T>
__device__ void bias_add_impl(T *out, const float *bias, u64 n, u32 cols) {
    GRID_STRIDE_VEC(i, n) {
        float v[8];
        ld8(out + i, v);
        add_bias8(v, bias, i, cols);
        st8(out + i, v);
    }
    GRID_STRIDE_TAIL(i, n) st(out + i, ld(out + i) + bias[col_of(i, cols)]);
}

// Block (32, 8): threadIdx.x picks a column of this block's 32, threadIdx.y
// a row phase; each thread sums its rows in row order, then the 8 partial
// sums are added in y order. Fixed order, so the result is deterministic.
template <typename T>
__device__ void bias_backward_impl(const T *dout, float *dbias, u64 rows, u32 cols) {
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
        dbias[col] += total;
    }
}

// The same column sums with the rows split into gridDim.y chunks, for the
// whole machine, in one launch: block (32, 8) sums its chunk of rows for 32
// columns (rows in order within a thread, the 8 row phases in order) into
// partial[chunk * cols + col]; the last of a column block's gridDim.y
// blocks to finish (last_to_arrive) adds the chunks onto dbias
// (sum_partials' fixed order). Fixed order for a given shape and chunk
// count, whichever block is last.
template <typename T>
__device__ void column_sums_impl(const T *dout, float *partial, u32 *arrived, float *dbias,
                                 u64 rows, u32 cols) {
    __shared__ float part[8][33];
    const u32 col = blockIdx.x * 32 + threadIdx.x;
    const u64 per = (rows + gridDim.y - 1) / gridDim.y;
    const u64 r0 = (u64)blockIdx.y * per;
    const u64 r1 = r0 + per < rows ? r0 + per : rows;
    float acc = 0.0f;
    if (col < cols) {
        // Four rows' loads issued before their adds, which keep row order.
        u64 r = r0 + threadIdx.y;
        for (; r + 24 < r1; r += 32) {
            const float a = ld(dout + r * cols + col), b = ld(dout + (r + 8) * cols + col),
                        c = ld(dout + (r + 16) * cols + col), e = ld(dout + (r + 24) * cols + col);
            acc += a;
            acc += b;
            acc += c;
            acc += e;
        }
        for (; r < r1; r += 8) acc += ld(dout + r * cols + col);
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float total = 0.0f;
        for (int y = 0; y < 8; ++y) total += part[y][threadIdx.x];
        partial[(u64)blockIdx.y * cols + col] = total;
        // Visible to every block before this one's arrival is counted.
        __threadfence();
    }
    if (!last_to_arrive(arrived)) return;
    const float total = sum_partials(partial + col, cols, col < cols, part);
    if (threadIdx.y == 0 && col < cols) dbias[col] += total;
}

#define ELEMENTWISE(S, T)                                                                   \
    extern "C" __global__ void fill_##S(T *out, float v, u64 n) { fill_impl(out, v, n); }   \
    extern "C" __global__ void add_##S(const T *a, const T *b, T *out, u64 n) {             \
        add_impl(a, b, out, n);                                                             \
    }                                                                                       \
    extern "C" __global__ void scale_##S(T *buf, float f, u64 n) { scale_impl(buf, f, n); } \
    extern "C" __global__ void bias_add_##S(T *out, const float *bias, u64 n, u32 cols) {   \
        bias_add_impl(out, bias, n, cols);                                                  \
    }                                                                                       \
    extern "C" __global__ void bias_backward_##S(const T *dout, float *dbias, u64 rows,     \
                                                 u32 cols) {                                \
        bias_backward_impl(dout, dbias, rows, cols);                                        \
    }                                                                                       \
    extern "C" __global__ void column_sums_##S(const T *dout, float *partial, u32 *arrived, \
                                               float *dbias, u64 rows, u32 cols) {          \
        column_sums_impl(dout, partial, arrived, dbias, rows, cols);                        \
    }
FOR_EACH_TYPE(ELEMENTWISE)

// Up to four fp32 tensors cast to 16 bits in one launch (a layer's weights
// before their products: one launch where there were one per weight), each
// as cast_impl casts it, one after another over the whole grid; an unused
// slot has length 0. Every pointer 16-byte aligned, as for cast.
#define CAST_MANY(S, T)                                                                     \
    extern "C" __global__ void cast_many_f32_##S(                                           \
        const float *s0, T *d0, u64 n0, const float *s1, T *d1, u64 n1, const float *s2,    \
        T *d2, u64 n2, const float *s3, T *d3, u64 n3) {                                    \
        cast_impl(s0, d0, n0);                                                              \
        cast_impl(s1, d1, n1);                                                              \
        cast_impl(s2, d2, n2);                                                              \
        cast_impl(s3, d3, n3);                                                              \
    }
FOR_EACH_HALF(CAST_MANY)

#define PAIRWISE(SA, TA, SB, TB)                                                            \
    extern "C" __global__ void add_assign_##SA##_##SB(TA *acc, const TB *x, u64 n) {        \
        add_assign_impl(acc, x, n);                                                         \
    }                                                                                       \
    extern "C" __global__ void cast_##SA##_##SB(const TA *src, TB *dst, u64 n) {            \
        cast_impl(src, dst, n);                                                             \
    }
FOR_EACH_PAIR(PAIRWISE)

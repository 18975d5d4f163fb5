// Embeddings: gather (optionally accumulating, for token + position + type
// embeddings), the deterministic scatter-add backward, [CLS] selection and
// masked mean pooling.
//
// The backward is deterministic without atomics: the host sorts the batch's
// token positions by id (a stable sort of at most a few thousand ids, which
// it already holds because ids are uploaded from the host) and passes the
// CSR lists; blocks own (32 columns, distinct id) and add that id's gradient
// rows in a fixed order onto the existing dtable row.
//
// Counts per call (T tokens, dim d, s = sizeof(T_) of the activations, tables
// fp32 (4 bytes), b*s_ tokens for pool):
//   embedding_forward   T*d FLOP if accumulating, (2 or 3)*T*d*s + 4T bytes
//   embedding_backward  T*d FLOP, T*d*s + 2*U*d*s + 4*(T + 2U + 1) bytes
//                       (U distinct ids)
//   cls_forward         0 FLOP, 2*b*d*s bytes
//   cls_backward        0 FLOP, b*seq*d*s + b*d*s bytes
//   mean_pool           b*seq*d FLOP, b*seq*d*s + 4*b*seq + b*d*s bytes

// Ids are validated on the host before launch; an id out of range is
// skipped here (never read out of bounds) as a second line of defence.
template <typename T>
__device__ void embedding_forward_impl(const u32 *ids, const float *table, T *out, u64 tokens,
                                       u32 dim, u32 rows, u32 accumulate) {
    GRID_STRIDE(i, tokens * dim) {
        const u32 j = col_of(i, dim);
        const u64 t = row_of(i, dim);
        const u32 id = ids[t];
        if (id >= rows) continue;
        const float v = table[(u64)id * dim + j];
        st(out + i, accumulate ? ld(out + i) + v : v);
    }
}

// csr = [order (tokens) | starts (unique + 1) | each distinct id's row of
// dtable (unique): the id, or its slot in a row-sparse gradient].
// Block (32, 8) per (32 columns, distinct id): thread (x, y) sums column x
// of the id's gradient rows y, y + 8, ... in token order, then the 8 phases
// are added in order onto the table row. A fixed order for a given batch,
// and every multiprocessor busy even when one id holds every token (BERT's
// token types), which one block per id left to a single one.
template <typename T>
__device__ void embedding_backward_impl(const u32 *csr, const T *dout, float *dtable, u32 tokens,
                                        u32 unique, u32 dim) {
    __shared__ float part[8][33];
    const u32 *order = csr;
    const u32 *starts = csr + tokens;
    const u32 *ids = starts + unique + 1;
    const u32 col = blockIdx.x * 32 + threadIdx.x;
    for (u32 u = blockIdx.y; u < unique; u += gridDim.y) {
        float acc = 0.0f;
        if (col < dim) {
            // Four positions' loads issued before their adds, which keep
            // token order: one id can hold every token of the batch (BERT's
            // token types), 512 rows a thread at 32 x 128.
            const u32 end = starts[u + 1];
            u32 p = starts[u] + threadIdx.y;
            for (; p + 24 < end; p += 32) {
                u32 t[4];
                float g[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) t[k] = order[p + 8 * k];
#pragma unroll
                for (int k = 0; k < 4; ++k) g[k] = ld(dout + (u64)t[k] * dim + col);
#pragma unroll
                for (int k = 0; k < 4; ++k) acc += g[k];
            }
            for (; p < end; p += 8) acc += ld(dout + (u64)order[p] * dim + col);
        }
        part[threadIdx.y][threadIdx.x] = acc;
        __syncthreads();
        if (threadIdx.y == 0 && col < dim) {
            const u64 at = (u64)ids[u] * dim + col;
            float total = dtable[at];
            for (int y = 0; y < 8; ++y) total += part[y][threadIdx.x];
            dtable[at] = total;
        }
        __syncthreads();
    }
}

// out[i] = x[i, 0] for x of [b, s, h].
template <typename T>
__device__ void cls_forward_impl(const T *x, T *out, u32 b, u32 s, u32 h) {
    GRID_STRIDE(o, (u64)b * h) {
        const u64 i = o / h, j = o % h;
        out[o] = x[i * s * h + j];
    }
}

// dx = dout at token 0, zero elsewhere (overwrites dx).
template <typename T>
__device__ void cls_backward_impl(const T *dout, T *dx, u32 b, u32 s, u32 h) {
    GRID_STRIDE(o, (u64)b * s * h) {
        const u64 j = o % h, t = (o / h) % s, i = o / ((u64)h * s);
        if (t == 0)
            dx[o] = dout[i * h + j];
        else
            st(dx + o, 0.0f);
    }
}

// Mean over tokens with mask != 0, summed in token order (one thread per
// output element).
template <typename T>
__device__ void mean_pool_impl(const T *x, const u32 *mask, T *out, u32 b, u32 s, u32 h) {
    GRID_STRIDE(o, (u64)b * h) {
        const u64 i = o / h, j = o % h;
        float acc = 0.0f;
        u32 count = 0;
        for (u32 t = 0; t < s; ++t)
            if (mask[i * s + t] != 0) {
                acc += ld(x + (i * s + t) * h + j);
                ++count;
            }
        const float inv = (float)(1.0 / (double)(count > 0 ? count : 1));
        st(out + o, acc * inv);
    }
}

#define EMBEDDING(S, T)                                                                    \
    extern "C" __global__ void embedding_forward_##S(const u32 *ids, const float *table,   \
                                                     T *out, u64 tokens, u32 dim,          \
                                                     u32 rows, u32 accumulate) {           \
        embedding_forward_impl(ids, table, out, tokens, dim, rows, accumulate);            \
    }                                                                                      \
    extern "C" __global__ void embedding_backward_##S(const u32 *csr, const T *dout,       \
                                                      float *dtable, u32 tokens, u32 unique, \
                                                      u32 dim) {                           \
        embedding_backward_impl(csr, dout, dtable, tokens, unique, dim);                   \
    }                                                                                      \
    extern "C" __global__ void cls_forward_##S(const T *x, T *out, u32 b, u32 s, u32 h) {  \
        cls_forward_impl(x, out, b, s, h);                                                 \
    }                                                                                      \
    extern "C" __global__ void cls_backward_##S(const T *dout, T *dx, u32 b, u32 s,        \
                                                u32 h) {                                   \
        cls_backward_impl(dout, dx, b, s, h);                                              \
    }                                                                                      \
    extern "C" __global__ void mean_pool_##S(const T *x, const u32 *mask, T *out, u32 b,   \
                                             u32 s, u32 h) {                               \
        mean_pool_impl(x, mask, out, b, s, h);                                             \
    }
FOR_EACH_TYPE(EMBEDDING)

// Cross-entropy fused with the softmax over classes, with optional class
// weights (HF / PyTorch semantics). Labels are validated on the host before
// launch. One thread per row: classifier heads have a handful of classes, so
// the row loop is short and the per-row order matches the CPU reference.
//
// forward writes w[y] * nll per row as fp64 to `row_loss`; the host adds the
// rows in order and divides by the denominator (deterministic).
// backward: dlogits = dloss * w[y] / denom * (softmax(logits) - onehot(y)).
//
// Counts per call (R rows, C classes, s = sizeof(T)):
//   forward   ~3*R*C FLOP + R*C exp + R log, R*C*s + 4R + 8R bytes
//   backward  ~4*R*C FLOP + 2*R*C exp + R log, 2*R*C*s + 4R bytes

template <typename T>
__device__ __forceinline__ void log_softmax_row(const T *row, u32 classes, float *max,
                                                float *lse) {
    float m = ld(row);
    for (u32 c = 1; c < classes; ++c) m = fmaxf(m, ld(row + c));
    float sum = 0.0f;
    for (u32 c = 0; c < classes; ++c) sum += expf(ld(row + c) - m);
    *max = m;
    *lse = logf(sum);
}

template <typename T>
__device__ void cross_entropy_forward_impl(const T *logits, const u32 *labels,
                                           const float *weights, double *row_loss, u32 rows,
                                           u32 classes) {
    GRID_STRIDE(i, rows) {
        const T *row = logits + i * classes;
        const u32 y = labels[i];
        if (y >= classes) {
            // Unreachable after host validation; poison rather than read
            // out of bounds.
            row_loss[i] = __longlong_as_double(0x7ff8000000000000ll);
            continue;
        }
        float m, lse;
        log_softmax_row(row, classes, &m, &lse);
        const double nll = (double)(m + lse - ld(row + y));
        const double w = weights ? (double)weights[y] : 1.0;
        row_loss[i] = w * nll;
    }
}

template <typename T>
__device__ void cross_entropy_backward_impl(const T *logits, const u32 *labels,
                                            const float *weights, T *dlogits, u32 rows,
                                            u32 classes, double denom, double dloss) {
    GRID_STRIDE(i, rows) {
        const T *row = logits + i * classes;
        T *d = dlogits + i * classes;
        const u32 y = labels[i];
        if (y >= classes) continue;
        float m, lse;
        log_softmax_row(row, classes, &m, &lse);
        const double w = weights ? (double)weights[y] : 1.0;
        const float f = (float)(dloss * w / denom);
        for (u32 c = 0; c < classes; ++c) {
            const float p = expf(ld(row + c) - m - lse);
            st(d + c, f * (p - (c == y ? 1.0f : 0.0f)));
        }
    }
}

#define LOSS(S, T)                                                                          \
    extern "C" __global__ void cross_entropy_forward_##S(const T *logits, const u32 *labels, \
                                                         const float *weights,              \
                                                         double *row_loss,                  \
                                                         u32 rows, u32 classes) {           \
        cross_entropy_forward_impl(logits, labels, weights, row_loss, rows, classes);       \
    }                                                                                       \
    extern "C" __global__ void cross_entropy_backward_##S(                                  \
        const T *logits, const u32 *labels, const float *weights, T *dlogits, u32 rows,     \
        u32 classes, double denom, double dloss) {                                          \
        cross_entropy_backward_impl(logits, labels, weights, dlogits, rows, classes, denom, \
                                    dloss);                                                 \
    }
FOR_EACH_TYPE(LOSS)

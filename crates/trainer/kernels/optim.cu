// Optimiser updates: AdamW fused into one pass (moments, bias correction,
// decoupled weight decay and the parameter update read and write each value
// once) and plain SGD. The host folds the step's scalars exactly as the CPU
// reference does: step = lr / (1 - beta1^t), inv_sqrt_bc2 = 1 / sqrt(1 -
// beta2^t), decay = 1 - lr * weight_decay.
//
// Counts per call (n elements, s = sizeof(T)):
//   adamw  ~13n FLOP + n sqrt, 7n*s bytes (read p, g, m, v; write p, m, v)
//   sgd     2n FLOP,           3n*s bytes

template <typename T>
__device__ void adamw_impl(T *param, const T *grad, T *m, T *v, u64 n, float b1, float b2,
                           float ob1, float ob2, float step, float inv_sqrt_bc2, float eps,
                           float decay) {
    GRID_STRIDE(i, n) {
        const float g = ld(grad + i);
        const float mi = b1 * ld(m + i) + ob1 * g;
        const float vi = b2 * ld(v + i) + ob2 * g * g;
        st(m + i, mi);
        st(v + i, vi);
        st(param + i, ld(param + i) * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps));
    }
}

template <typename T>
__device__ void sgd_impl(T *param, const T *grad, u64 n, float lr) {
    GRID_STRIDE(i, n) st(param + i, ld(param + i) - lr * ld(grad + i));
}

#define OPTIM(S, T)                                                                         \
    extern "C" __global__ void adamw_##S(T *param, const T *grad, T *m, T *v, u64 n,        \
                                         float b1, float b2, float ob1, float ob2,          \
                                         float step, float inv_sqrt_bc2, float eps,         \
                                         float decay) {                                     \
        adamw_impl(param, grad, m, v, n, b1, b2, ob1, ob2, step, inv_sqrt_bc2, eps, decay); \
    }                                                                                       \
    extern "C" __global__ void sgd_##S(T *param, const T *grad, u64 n, float lr) {          \
        sgd_impl(param, grad, n, lr);                                                       \
    }
FOR_EACH_TYPE(OPTIM)

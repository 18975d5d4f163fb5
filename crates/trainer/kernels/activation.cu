// Activations: exact GELU x * Phi(x) with the erf form (as HF BERT), fused
// with the bias add of the preceding linear layer, tanh (the pooler) and ReLU
// (DistilBERT's pre_classifier).
//
// Counts per call (n elements, s = sizeof(T); erf/exp/tanh counted as one
// special-function op each):
//   bias_gelu_forward   ~6n FLOP + n erf,        (2n)*s bytes (+cols*s bias)
//   gelu_backward      ~12n FLOP + n erf + n exp, 3n*s bytes
//   tanh_forward         n tanh,                  2n*s bytes
//   tanh_backward        3n FLOP,                 3n*s bytes
//   relu_forward         n FLOP,                  2n*s bytes
//   relu_backward        n FLOP,                  3n*s bytes

#define GELU_FRAC_1_SQRT_2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

// Phi(x) = erfc(-x / sqrt 2) / 2, as the CPU backend writes it: 1 + erf(x /
// sqrt 2) cancels in the left tail (relative error 4% at x = -5, and 0
// instead of a tiny value from about x = -6).
__device__ __forceinline__ float gelu_cdf(float v) {
    return 0.5f * erfcf(-v * GELU_FRAC_1_SQRT_2);
}

__device__ __forceinline__ float gelu(float v) { return v * gelu_cdf(v); }

// d/dx x Phi(x) = Phi(x) + x phi(x), times dout.
__device__ __forceinline__ float gelu_grad(float v, float dout) {
    const float cdf = gelu_cdf(v);
    const float pdf = GELU_INV_SQRT_2PI * expf(-0.5f * v * v);
    return dout * (cdf + v * pdf);
}

// `out = gelu(x + bias[i % cols])`; `bias` may be null (plain GELU). When
// `pre` is not null the biased pre-activation is stored there for backward
// (it may be `x` itself), and the GELU is taken of the stored value, as
// backward will see it. 8 elements a thread (GRID_STRIDE_VEC).
template <typename T>
__device__ void bias_gelu_forward_impl(const T *x, const float *bias, T *pre, T *out, u64 n,
                                       u32 cols) {
    GRID_STRIDE_VEC(i, n) {
        float v[8];
        ld8(x + i, v);
        if (bias) add_bias8(v, bias, i, cols);
        if (pre) {
            st8(pre + i, v);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = stored<T>(v[k]);
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = gelu(v[k]);
        st8(out + i, v);
    }
    GRID_STRIDE_TAIL(i, n) {
        float v = ld(x + i);
        if (bias) v += bias[col_of(i, cols)];
        if (pre) {
            st(pre + i, v);
            v = stored<T>(v);
        }
        st(out + i, gelu(v));
    }
}

// `dout` and `dx` may be one buffer (the in-place backward): each thread
// loads its elements of `dout` before it stores the same elements of `dx`.
template <typename T>
__device__ void gelu_backward_impl(const T *x, const T *dout, T *dx, u64 n) {
    GRID_STRIDE_VEC(i, n) {
        float v[8], d[8];
        ld8(x + i, v);
        ld8(dout + i, d);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = gelu_grad(v[k], d[k]);
        st8(dx + i, v);
    }
    GRID_STRIDE_TAIL(i, n) st(dx + i, gelu_grad(ld(x + i), ld(dout + i)));
}

template <typename T>
__device__ void tanh_forward_impl(const T *x, T *out, u64 n) {
    GRID_STRIDE(i, n) st(out + i, tanhf(ld(x + i)));
}

// Uses the forward's output: dx = dout * (1 - out^2).
template <typename T>
__device__ void tanh_backward_impl(const T *out, const T *dout, T *dx, u64 n) {
    GRID_STRIDE(i, n) {
        const float y = ld(out + i);
        st(dx + i, ld(dout + i) * (1.0f - y * y));
    }
}

// NaN propagates (fmaxf would hide it), as PyTorch's relu.
template <typename T>
__device__ void relu_forward_impl(const T *x, T *out, u64 n) {
    GRID_STRIDE(i, n) {
        const float v = ld(x + i);
        st(out + i, v < 0.0f ? 0.0f : v);
    }
}

// Uses the forward's output: the gradient passes where out > 0.
template <typename T>
__device__ void relu_backward_impl(const T *out, const T *dout, T *dx, u64 n) {
    GRID_STRIDE(i, n) st(dx + i, ld(out + i) > 0.0f ? ld(dout + i) : 0.0f);
}

#define ACTIVATION(S, T)                                                                 \
    extern "C" __global__ void bias_gelu_forward_##S(const T *x, const float *bias, T *pre, \
                                                     T *out, u64 n, u32 cols) {          \
        bias_gelu_forward_impl(x, bias, pre, out, n, cols);                              \
    }                                                                                    \
    extern "C" __global__ void gelu_backward_##S(const T *x, const T *dout, T *dx, u64 n) { \
        gelu_backward_impl(x, dout, dx, n);                                              \
    }                                                                                    \
    extern "C" __global__ void tanh_forward_##S(const T *x, T *out, u64 n) {             \
        tanh_forward_impl(x, out, n);                                                    \
    }                                                                                    \
    extern "C" __global__ void tanh_backward_##S(const T *out, const T *dout, T *dx,     \
                                                 u64 n) {                                \
        tanh_backward_impl(out, dout, dx, n);                                            \
    }                                                                                    \
    extern "C" __global__ void relu_forward_##S(const T *x, T *out, u64 n) {             \
        relu_forward_impl(x, out, n);                                                    \
    }                                                                                    \
    extern "C" __global__ void relu_backward_##S(const T *out, const T *dout, T *dx,     \
                                                 u64 n) {                                \
        relu_backward_impl(out, dout, dx, n);                                            \
    }
FOR_EACH_TYPE(ACTIVATION)

// Attention glue around the cuBLAS strided-batched products: head permutes
// and the masked softmax of bidirectional self-attention over keys.
//
// Softmax rows are handled one warp per row (4 warps per block): max and
// sum by warp butterflies in a fixed order. A key with mask[b, key] == 0
// gets probability exactly 0; a row whose keys are all masked is all zeros.
//
// Counts per call (E = b*s*heads*dh elements; R = b*heads*s rows of s
// keys; s_ = sizeof(T)):
//   permute_heads / unpermute_heads  0 FLOP, 2E*s_ bytes
//   softmax_forward   ~4*R*s FLOP + R*s exp, 2*R*s*s_ + b*s*4 bytes (mask)
//   softmax_backward  ~4*R*s FLOP,           3*R*s*s_ bytes

// [b, s, heads, dh] -> [b, heads, s, dh]; one thread per output element.
template <typename T>
__device__ void permute_heads_impl(const T *x, T *out, u32 b, u32 s, u32 heads, u32 dh) {
    const u64 n = (u64)b * s * heads * dh;
    GRID_STRIDE(o, n) {
        const u32 d = (u32)(o % dh);
        const u32 t = (u32)((o / dh) % s);
        const u32 h = (u32)((o / ((u64)dh * s)) % heads);
        const u64 bi = o / ((u64)dh * s * heads);
        out[o] = x[((bi * s + t) * heads + h) * dh + d];
    }
}

// [b, heads, s, dh] -> [b, s, heads, dh].
template <typename T>
__device__ void unpermute_heads_impl(const T *x, T *out, u32 b, u32 s, u32 heads, u32 dh) {
    const u64 n = (u64)b * s * heads * dh;
    GRID_STRIDE(o, n) {
        const u32 d = (u32)(o % dh);
        const u32 h = (u32)((o / dh) % heads);
        const u32 t = (u32)((o / ((u64)dh * heads)) % s);
        const u64 bi = o / ((u64)dh * heads * s);
        out[o] = x[((bi * heads + h) * s + t) * dh + d];
    }
}

template <typename T>
__device__ void softmax_forward_impl(const T *scores, const u32 *mask, T *probs, u32 b,
                                     u32 heads, u32 s, float scale) {
    const u64 rows = (u64)b * heads * s;
    const u32 lane = threadIdx.x & 31;
    const u64 warps = (u64)gridDim.x * (blockDim.x >> 5);
    for (u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
         row += warps) {
        const u32 *m = mask + (row / ((u64)heads * s)) * s;
        const T *x = scores + row * s;
        T *p = probs + row * s;
        float mx = __int_as_float(0xff800000); // -inf (no math.h in NVRTC)
        bool any = false;
        for (u32 j = lane; j < s; j += 32)
            if (m[j] != 0) {
                mx = fmaxf(mx, ld(x + j) * scale);
                any = true;
            }
        mx = warp_max(mx);
        any = __any_sync(0xffffffffu, any);
        if (!any) {
            for (u32 j = lane; j < s; j += 32) st(p + j, 0.0f);
            continue;
        }
        float sum = 0.0f;
        for (u32 j = lane; j < s; j += 32) {
            const float e = m[j] != 0 ? expf(ld(x + j) * scale - mx) : 0.0f;
            st(p + j, e);
            sum += e;
        }
        const float inv = 1.0f / warp_sum(sum);
        for (u32 j = lane; j < s; j += 32) st(p + j, ld(p + j) * inv);
    }
}

// dscores = scale * probs * (dprobs - sum(dprobs * probs)) per row of s.
template <typename T>
__device__ void softmax_backward_impl(const T *dprobs, const T *probs, T *dscores, u64 rows,
                                      u32 s, float scale) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = (u64)gridDim.x * (blockDim.x >> 5);
    for (u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
         row += warps) {
        const u64 base = row * s;
        float dot = 0.0f;
        for (u32 j = lane; j < s; j += 32) dot += ld(probs + base + j) * ld(dprobs + base + j);
        dot = warp_sum(dot);
        for (u32 j = lane; j < s; j += 32)
            st(dscores + base + j,
               scale * ld(probs + base + j) * (ld(dprobs + base + j) - dot));
    }
}

#define ATTENTION(S, T)                                                                    \
    extern "C" __global__ void permute_heads_##S(const T *x, T *out, u32 b, u32 s,         \
                                                 u32 heads, u32 dh) {                      \
        permute_heads_impl(x, out, b, s, heads, dh);                                       \
    }                                                                                      \
    extern "C" __global__ void unpermute_heads_##S(const T *x, T *out, u32 b, u32 s,       \
                                                   u32 heads, u32 dh) {                    \
        unpermute_heads_impl(x, out, b, s, heads, dh);                                     \
    }                                                                                      \
    extern "C" __global__ void softmax_forward_##S(const T *scores, const u32 *mask,       \
                                                   T *probs, u32 b, u32 heads, u32 s,      \
                                                   float scale) {                          \
        softmax_forward_impl(scores, mask, probs, b, heads, s, scale);                     \
    }                                                                                      \
    extern "C" __global__ void softmax_backward_##S(const T *dprobs, const T *probs,       \
                                                    T *dscores, u64 rows, u32 s,           \
                                                    float scale) {                         \
        softmax_backward_impl(dprobs, probs, dscores, rows, s, scale);                     \
    }
FOR_EACH_TYPE(ATTENTION)

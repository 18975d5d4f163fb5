// Optimiser updates on the fp32 master copies: AdamW fused into one pass
// (moments, bias correction, decoupled weight decay and the parameter
// update read and write each value once) and plain SGD. The host folds the
// step's scalars exactly as the CPU reference does: step = lr / (1 -
// beta1^t), inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t), decay = 1 - lr *
// weight_decay.
//
// adamw_multi updates every tensor of the model in one launch (a table of
// tensors, as apex's multi_tensor_apply) with the gradient clip folded in:
// each block adds the per-block partial sums of squares that
// sum_squares_multi (global_norm.cu) left, in a fixed order, so every block
// derives the same clip factor without the host reading the norm.
//
// A row-sparse gradient (the word-embedding table's, see the host's
// row_slots.rs) holds only the rows a step looked up; the others' gradient
// is zero, and their moments and weights are updated with zero, as a dense
// gradient's zeros would update them.
//
// Counts per call (n elements):
//   adamw        ~13n FLOP + n sqrt, 28n bytes (read p, g, m, v; write p, m, v)
//   adamw_multi  ~14n FLOP + n sqrt, 28n bytes + 72 bytes per tensor + 8 per
//                norm block per block (16-byte accesses); a row-sparse
//                gradient reads 4 bytes of slot per row and its slots' rows
//   sgd           2n FLOP,           12n bytes

__device__ __forceinline__ void adamw_one(float *param, const float *grad, float *m, float *v,
                                          u64 i, float g_scale, float b1, float b2, float ob1,
                                          float ob2, float step, float inv_sqrt_bc2, float eps,
                                          float decay) {
    const float g = grad[i] * g_scale;
    const float mi = b1 * m[i] + ob1 * g;
    const float vi = b2 * v[i] + ob2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

extern "C" __global__ void adamw_f32(float *param, const float *grad, float *m, float *v, u64 n,
                                     float b1, float b2, float ob1, float ob2, float step,
                                     float inv_sqrt_bc2, float eps, float decay) {
    GRID_STRIDE(i, n)
    adamw_one(param, grad, m, v, i, 1.0f, b1, b2, ob1, ob2, step, inv_sqrt_bc2, eps, decay);
}

extern "C" __global__ void sgd_f32(float *param, const float *grad, u64 n, float lr) {
    GRID_STRIDE(i, n) param[i] = param[i] - lr * grad[i];
}

// The gradient of elements 4q..4q+3 of a table entry (common.cuh): its
// own, or for a row-sparse gradient the row's slot's (zero without one).
// The host passes row widths that are multiples of 4 and tensors of fewer
// than 2^32 elements for row-sparse gradients, so the 4 elements lie in one
// row and the row index fits 32 bits.
__device__ __forceinline__ float4 grad4(const tensor_entry &e, u64 q) {
    const float *grad = (const float *)e.grad;
    if (!e.slots) return reinterpret_cast<const float4 *>(grad)[q];
    const u32 i = (u32)(4 * q), width = (u32)e.width, row = i / width;
    const u32 slot = ((const u32 *)e.slots)[row];
    if (slot == NO_SLOT) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return *reinterpret_cast<const float4 *>(grad + (u64)slot * width + (i - row * width));
}

// The sum of sum_squares_multi's per-block partials (at most 256, the
// host's NORM_BLOCKS), for a whole warp and the same in every block: lane
// l loads partials l, l + 32, ... before adding them in order, then each
// lane adds the 32 lane sums in lane order. One thread adding all of them
// waited for each load in turn.
__device__ double sum_norm_partials(const double *partials, u32 blocks) {
    const u32 lane = threadIdx.x % 32;
    double v[8];
#pragma unroll
    for (u32 k = 0; k < 8; ++k) v[k] = lane + 32 * k < blocks ? partials[lane + 32 * k] : 0.0;
    double acc = 0.0;
#pragma unroll
    for (u32 k = 0; k < 8; ++k)
        if (lane + 32 * k < blocks) acc += v[k];
    double total = 0.0;
    for (int l = 0; l < 32; ++l) total += __shfl_sync(0xffffffffu, acc, l);
    return total;
}

// The factor every gradient is multiplied by: grad_scale, times clip / norm
// when the global norm of the scaled gradients exceeds `clip` (clip <= 0:
// no clipping), from the sum of the unscaled gradients' squares.
__device__ float clip_factor(double sum_squares, float grad_scale, float clip) {
    if (clip <= 0.0f) return grad_scale;
    const double norm = (double)grad_scale * sqrt(sum_squares);
    if (norm > (double)clip && norm > 0.0) return (float)((double)grad_scale * (clip / norm));
    return grad_scale;
}

// Grid-stride over the elements of every tensor in table order. Launched
// with 1024 threads a block (the bound keeps registers within what that
// takes).
extern "C" __global__ void __launch_bounds__(1024)
    adamw_multi(const tensor_entry *table, u32 tensors, const double *partials, u32 blocks,
                float grad_scale, float clip, float b1, float b2, float ob1, float ob2,
                float step, float inv_sqrt_bc2, float eps, float decay) {
    __shared__ float factor;
    if (threadIdx.x < 32) {
        const double sum_squares = clip > 0.0f ? sum_norm_partials(partials, blocks) : 0.0;
        if (threadIdx.x == 0) factor = clip_factor(sum_squares, grad_scale, clip);
    }
    __syncthreads();
    const float f = factor;
    for (u32 t = 0; t < tensors; ++t) {
        const tensor_entry e = table[t];
        const float d = e.decay ? decay : 1.0f;
        float *param = (float *)e.param, *m = (float *)e.m, *v = (float *)e.v;
        const float *grad = (const float *)e.grad;
        // 4 elements a thread with 16-byte accesses (the host passes
        // 16-byte aligned tensors), then the len % 4 tail (none for a
        // row-sparse gradient); each element's arithmetic is adamw_one's.
        const u64 n4 = e.len / 4;
        GRID_STRIDE(q, n4) {
            const float4 p4 = reinterpret_cast<float4 *>(param)[q];
            const float4 g4 = grad4(e, q);
            const float4 m4 = reinterpret_cast<float4 *>(m)[q];
            const float4 v4 = reinterpret_cast<float4 *>(v)[q];
            // Arrays rather than pointers into a float4's members, which
            // C++ does not let one index across.
            float pp[4] = {p4.x, p4.y, p4.z, p4.w}, mm[4] = {m4.x, m4.y, m4.z, m4.w};
            float vv[4] = {v4.x, v4.y, v4.z, v4.w};
            const float gg[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
            for (int k = 0; k < 4; ++k)
                adamw_one(pp + k, gg + k, mm + k, vv + k, 0, f, b1, b2, ob1, ob2, step,
                          inv_sqrt_bc2, eps, d);
            reinterpret_cast<float4 *>(param)[q] = make_float4(pp[0], pp[1], pp[2], pp[3]);
            reinterpret_cast<float4 *>(m)[q] = make_float4(mm[0], mm[1], mm[2], mm[3]);
            reinterpret_cast<float4 *>(v)[q] = make_float4(vv[0], vv[1], vv[2], vv[3]);
        }
        GRID_STRIDE(i, e.len - 4 * n4)
        adamw_one(param, grad, m, v, 4 * n4 + i, f, b1, b2, ob1, ob2, step, inv_sqrt_bc2, eps,
                  d);
    }
}

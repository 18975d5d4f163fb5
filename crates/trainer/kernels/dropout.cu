// Inverted dropout with the counter-based Philox4x32-10 stream of
// src/rng.rs: element i is kept iff (word(i) >> 8) >= threshold, where
// word(i) is word i % 4 of philox([i/4 lo, (i/4 hi) ^ stream, step lo,
// step hi], [seed lo, seed hi]). So the mask equals the CPU backend's for the
// same (seed, step, stream, index), and backward regenerates it instead of
// storing it (the same kernel applied to the gradient).
//
// One thread per 4 elements (one Philox call). Counts per call (n elements,
// s = sizeof(T)): n/4 Philox calls (10 rounds of 2 mul.hi + 2 mul.lo + 4
// xor/add: ~100 integer ops per call) + n FLOP, 2n*s bytes.

template <typename T>
__device__ void dropout_impl(const T *x, T *out, u64 n, u32 threshold, float keep_scale,
                             u32 seed_lo, u32 seed_hi, u32 step_lo, u32 step_hi,
                             u32 stream) {
    const u64 blocks = (n + 3) / 4;
    GRID_STRIDE(b, blocks) {
        const philox_out r = dropout_block(b, seed_lo, seed_hi, step_lo, step_hi, stream);
        for (int j = 0; j < 4; ++j) {
            const u64 i = 4 * b + j;
            if (i >= n) break;
            const bool keep = (r.w[j] >> 8) >= threshold;
            st(out + i, keep ? ld(x + i) * keep_scale : 0.0f);
        }
    }
}

#define DROPOUT(S, T)                                                                     \
    extern "C" __global__ void dropout_##S(const T *x, T *out, u64 n, u32 threshold,      \
                                           float keep_scale, u32 seed_lo, u32 seed_hi,    \
                                           u32 step_lo, u32 step_hi, u32 stream) {        \
        dropout_impl(x, out, n, threshold, keep_scale, seed_lo, seed_hi, step_lo, step_hi, \
                     stream);                                                             \
    }
FOR_EACH_TYPE(DROPOUT)

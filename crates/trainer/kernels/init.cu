// Random initialisation: element i of a weight is scale * normal(i), the
// standard normal src/rng.rs's RngKey::normal draws for it (Box-Muller in
// double precision on the first two words of Philox4x32-10 over the
// element's own counter [i lo, (i hi) ^ stream, step lo, (step hi) ^ 2^31]),
// except elements in [zero_begin, zero_end), which are 0 (the padding
// token's embedding row). Drawn where the weight lives, so a trial's model
// costs the host nothing to build: BERT-large's 335M values take seconds
// on a host's cores and milliseconds here.
//
// The arithmetic is the host's, in the same order and in double
// precision; CUDA's log and cos may differ from the host's libm by an ulp
// of a double, so an element can differ from the CPU backend's by one ulp
// of its stored type, never more.
//
// One thread per element: n Philox calls, a log, a sqrt and a cos in
// double each; n * sizeof(T) bytes written.

template <typename T>
__device__ void init_normal_impl(T *out, u64 n, double scale, u64 zero_begin, u64 zero_end,
                                 u32 seed_lo, u32 seed_hi, u32 step_lo, u32 step_hi,
                                 u32 stream) {
    GRID_STRIDE(i, n) {
        float v = 0.0f;
        if (i < zero_begin || i >= zero_end) {
            const philox_out r = philox4x32_10((u32)i, (u32)(i >> 32) ^ stream, step_lo,
                                               step_hi ^ 0x80000000u, seed_lo, seed_hi);
            const double u1 = ((double)r.w[0] + 1.0) / 4294967297.0;
            const double u2 = (double)r.w[1] / 4294967296.0;
            v = (float)(scale * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)));
        }
        st(out + i, v);
    }
}

#define INIT_NORMAL(S, T)                                                                  \
    extern "C" __global__ void init_normal_##S(T *out, u64 n, double scale, u64 zero_begin, \
                                               u64 zero_end, u32 seed_lo, u32 seed_hi,     \
                                               u32 step_lo, u32 step_hi, u32 stream) {     \
        init_normal_impl(out, n, scale, zero_begin, zero_end, seed_lo, seed_hi, step_lo,   \
                         step_hi, stream);                                                 \
    }
FOR_EACH_TYPE(INIT_NORMAL)

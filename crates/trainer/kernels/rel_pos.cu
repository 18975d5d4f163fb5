// DeBERTa's disentangled attention: the content-to-position and
// position-to-content gathers of position scores at each query/key pair's
// relative-position bucket, their scatter backward, and the token-mask
// multiply of its embeddings.
//
// Layouts (see RelPosShape): scores [b, heads, s, s]; position scores rel
// [heads, b, s, P] (P = 2 * span); bucket table idx [s, s], every entry < P
// (checked on the host). transpose = 0: score (i, j) reads rel row i at
// idx[i, j]; transpose = 1: row j at idx[j, i].
//
// The backward is deterministic without atomics: one thread owns one rel
// row (all P entries) and walks the s score entries that read it in
// increasing order, exactly the CPU reference's order. The row is zeroed,
// accumulated in place, then scaled by alpha.
//
// Counts per call (Z = b*heads, e = sizeof(T_)):
//   rel_pos_gather   2*Z*s*s FLOP, 3*Z*s*s*e + 4*Z*s*s bytes (scores read and
//                    written, one rel read, one idx read per score)
//   rel_pos_scatter  Z*s*s + Z*s*P FLOP, Z*s*s*(e + 4) + 3*Z*s*P*e bytes
//   mask_rows        0 FLOP, up to 2*T*n*e + 4*T*n bytes (T tokens)

template <typename T>
__device__ void rel_pos_gather_impl(const T *rel, const u32 *idx, T *scores, u32 b, u32 heads,
                                    u32 s, u32 span2, u32 transpose, float alpha) {
    GRID_STRIDE(o, (u64)b * heads * s * s) {
        const u64 j = o % s, i = (o / s) % s, bh = o / ((u64)s * s);
        const u64 bi = bh / heads, h = bh % heads;
        const u64 r = transpose ? j : i, c = transpose ? i : j;
        const u32 k = idx[r * s + c];
        const float v = ld(rel + ((h * b + bi) * s + r) * span2 + k);
        st(scores + o, ld(scores + o) + alpha * v);
    }
}

template <typename T>
__device__ void rel_pos_scatter_impl(const T *dscores, const u32 *idx, T *drel, u32 b, u32 heads,
                                     u32 s, u32 span2, u32 transpose, float alpha) {
    GRID_STRIDE(row, (u64)heads * b * s) {
        const u64 r = row % s, hb = row / s;
        const u64 h = hb / b, bi = hb % b;
        const T *block = dscores + (bi * heads + h) * s * s;
        T *out = drel + row * span2;
        for (u32 k = 0; k < span2; ++k)
            st(out + k, 0.0f);
        for (u32 c = 0; c < s; ++c) {
            const u32 k = idx[r * s + c];
            const u64 at = transpose ? (u64)c * s + r : r * s + c;
            st(out + k, ld(out + k) + ld(block + at));
        }
        for (u32 k = 0; k < span2; ++k)
            st(out + k, alpha * ld(out + k));
    }
}

template <typename T>
__device__ void mask_rows_impl(T *x, const u32 *mask, u64 len, u32 n) {
    GRID_STRIDE(i, len) {
        if (mask[i / n] == 0)
            st(x + i, 0.0f);
    }
}

#define REL_POS(S, T)                                                                      \
    extern "C" __global__ void rel_pos_gather_##S(const T *rel, const u32 *idx, T *scores, \
                                                  u32 b, u32 heads, u32 s, u32 span2,      \
                                                  u32 transpose, float alpha) {            \
        rel_pos_gather_impl(rel, idx, scores, b, heads, s, span2, transpose, alpha);       \
    }                                                                                      \
    extern "C" __global__ void rel_pos_scatter_##S(const T *dscores, const u32 *idx,       \
                                                   T *drel, u32 b, u32 heads, u32 s,       \
                                                   u32 span2, u32 transpose,               \
                                                   float alpha) {                          \
        rel_pos_scatter_impl(dscores, idx, drel, b, heads, s, span2, transpose, alpha);    \
    }                                                                                      \
    extern "C" __global__ void mask_rows_##S(T *x, const u32 *mask, u64 len, u32 n) {      \
        mask_rows_impl(x, mask, len, n);                                                   \
    }
FOR_EACH_TYPE(REL_POS)

//! Counter-based dropout: the Philox4x32-10 words of `crate::rng`, computed
//! for `LANES` counter blocks at once, in AVX2 registers when the CPU has
//! them (a portable loop otherwise). The words, and so the masks, are
//! exactly `RngKey::block`'s: the same mask on any CPU and thread count, and
//! on a CUDA kernel implementing `crate::rng`.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use super::fast_f32::with_avx2;
use crate::float::Float;
use crate::rng::{RngKey, dropout_threshold, keep_word};

/// Counter blocks (4 elements each) generated together.
const LANES: usize = 8;
/// Elements covered by one batch of lanes.
const GROUP: usize = 4 * LANES;

const M0: u64 = 0xD251_1F53;
const M1: u64 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The words of blocks `first .. first + LANES`: `words[4 * l + j]` is word
/// `j` of block `first + l`, i.e. the word of element `4 * (first + l) + j`.
#[inline(always)]
fn philox_lanes(key: &RngKey, first: u64) -> [u32; GROUP] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { avx2::philox_lanes(key, first) };
    }
    philox_lanes_portable(key, first)
}

#[inline(always)]
fn philox_lanes_portable(key: &RngKey, first: u64) -> [u32; GROUP] {
    let mut c0 = [0u32; LANES];
    let mut c1 = [0u32; LANES];
    for l in 0..LANES {
        let block = first + l as u64;
        c0[l] = block as u32;
        c1[l] = (block >> 32) as u32 ^ key.stream;
    }
    let mut c2 = [key.step as u32; LANES];
    let mut c3 = [(key.step >> 32) as u32; LANES];
    let (mut k0, mut k1) = (key.seed as u32, (key.seed >> 32) as u32);
    for _ in 0..10 {
        for l in 0..LANES {
            let p0 = M0 * c0[l] as u64;
            let p1 = M1 * c2[l] as u64;
            let n0 = (p1 >> 32) as u32 ^ c1[l] ^ k0;
            let n2 = (p0 >> 32) as u32 ^ c3[l] ^ k1;
            c1[l] = p1 as u32;
            c3[l] = p0 as u32;
            c0[l] = n0;
            c2[l] = n2;
        }
        k0 = k0.wrapping_add(W0);
        k1 = k1.wrapping_add(W1);
    }
    let mut words = [0u32; GROUP];
    for l in 0..LANES {
        words[4 * l] = c0[l];
        words[4 * l + 1] = c1[l];
        words[4 * l + 2] = c2[l];
        words[4 * l + 3] = c3[l];
    }
    words
}

/// The same rounds with AVX2 intrinsics: 8 blocks in one register per
/// counter word (the compiler does not vectorise the 32x32->64 products of
/// the portable version by itself).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{GROUP, LANES, M0, M1, W0, W1};
    use crate::rng::RngKey;

    /// High and low 32 bits of `a[l] * m` for 8 lanes of u32.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn mulhilo(a: __m256i, m: u32) -> (__m256i, __m256i) {
        let mv = _mm256_set1_epi64x(m as i64);
        let even = _mm256_mul_epu32(a, mv);
        let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), mv);
        let hi = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
        let lo = _mm256_mullo_epi32(a, _mm256_set1_epi32(m as i32));
        (hi, lo)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn philox_lanes(key: &RngKey, first: u64) -> [u32; GROUP] {
        let mut b0 = [0u32; LANES];
        let mut b1 = [0u32; LANES];
        for l in 0..LANES {
            let block = first + l as u64;
            b0[l] = block as u32;
            b1[l] = (block >> 32) as u32 ^ key.stream;
        }
        // SAFETY: unaligned loads and stores of [u32; 8] arrays.
        let (mut c0, mut c1) = unsafe {
            (
                _mm256_loadu_si256(b0.as_ptr() as *const __m256i),
                _mm256_loadu_si256(b1.as_ptr() as *const __m256i),
            )
        };
        let mut c2 = _mm256_set1_epi32(key.step as u32 as i32);
        let mut c3 = _mm256_set1_epi32((key.step >> 32) as u32 as i32);
        let (mut k0, mut k1) = (key.seed as u32, (key.seed >> 32) as u32);
        for _ in 0..10 {
            let (hi0, lo0) = mulhilo(c0, M0 as u32);
            let (hi1, lo1) = mulhilo(c2, M1 as u32);
            let n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(k0 as i32));
            let n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(k1 as i32));
            c1 = lo1;
            c3 = lo0;
            c0 = n0;
            c2 = n2;
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let mut lanes = [[0u32; LANES]; 4];
        for (dst, c) in lanes.iter_mut().zip([c0, c1, c2, c3]) {
            // SAFETY: unaligned store into a [u32; 8].
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, c) };
        }
        let mut words = [0u32; GROUP];
        for l in 0..LANES {
            for j in 0..4 {
                words[4 * l + j] = lanes[j][l];
            }
        }
        words
    }
}

/// `out[i] = keep(base + i) ? x[i] * keep_scale : 0` for one chunk starting
/// at element `base` (a multiple of 4).
#[inline(always)]
fn apply_chunk<T: Float>(
    x: &[T],
    out: &mut [T],
    base: usize,
    key: &RngKey,
    threshold: u32,
    keep_scale: T,
) {
    debug_assert_eq!(base % 4, 0);
    let keep = |w: u32, x: T| {
        if keep_word(w, threshold) {
            x * keep_scale
        } else {
            T::ZERO
        }
    };
    let mut block = (base / 4) as u64;
    let mut outs = out.chunks_exact_mut(GROUP);
    let mut xs = x.chunks_exact(GROUP);
    for (o, x) in (&mut outs).zip(&mut xs) {
        let words = philox_lanes(key, block);
        for ((o, &x), &w) in o.iter_mut().zip(x).zip(&words) {
            *o = keep(w, x);
        }
        block += LANES as u64;
    }
    // The tail: fewer than GROUP elements, one counter block per 4.
    for (o, x) in outs
        .into_remainder()
        .chunks_mut(4)
        .zip(xs.remainder().chunks(4))
    {
        let words = key.block(block);
        for ((o, &x), &w) in o.iter_mut().zip(x).zip(&words) {
            *o = keep(w, x);
        }
        block += 1;
    }
}

/// Inverted dropout of `x` into `out`: kept elements scaled by `1/(1-p)`.
pub fn apply<T: Float>(x: &[T], out: &mut [T], p: f64, key: RngKey) {
    assert_eq!(x.len(), out.len());
    assert!(
        (0.0..1.0).contains(&p),
        "dropout probability {p} not in [0, 1)"
    );
    let keep_scale = T::from_f64(1.0 / (1.0 - p));
    let threshold = dropout_threshold(p);
    // CHUNK is a multiple of 4: chunks start on counter-block boundaries.
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .enumerate()
        .for_each(|(ci, (o, x))| {
            let base = ci * CHUNK;
            with_avx2(|| apply_chunk(x, o, base, &key, threshold, keep_scale))
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_match_the_scalar_philox() {
        for (seed, step, stream) in [
            (0u64, 0u64, 0u32),
            (u64::MAX, 7, 3),
            (0x1234_5678_9abc, 1 << 40, 77),
        ] {
            let key = RngKey { seed, step, stream };
            for first in [0u64, 5, (1 << 32) - 3] {
                let words = philox_lanes(&key, first);
                let portable = philox_lanes_portable(&key, first);
                assert_eq!(words, portable);
                for l in 0..LANES {
                    assert_eq!(words[4 * l..4 * l + 4], key.block(first + l as u64));
                }
            }
        }
    }

    #[test]
    fn mask_matches_the_scalar_definition() {
        let key = RngKey {
            seed: 42,
            step: 3,
            stream: 5,
        };
        let n = CHUNK + 4 * GROUP + 7;
        let x: Vec<f32> = (0..n).map(|i| 1.0 + i as f32).collect();
        let mut out = vec![0.0f32; n];
        apply(&x, &mut out, 0.25, key);
        for i in 0..n {
            let kept = crate::rng::dropout_keep(&key, i as u64, 0.25);
            let want = if kept {
                x[i] * (1.0 / 0.75) as f32
            } else {
                0.0
            };
            assert_eq!(out[i], want, "element {i}");
        }
    }
}

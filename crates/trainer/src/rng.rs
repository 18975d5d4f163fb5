//! Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//!
//! A value depends only on (seed, step, stream, element index), never on
//! which thread computes it or in what order, so dropout masks are identical
//! across thread counts, across recomputation of a layer, and between the CPU
//! and a CUDA kernel that implements the same function. That is why weight
//! initialisation and dropout draw from here rather than from `rand` /
//! `rand_distr`, whose sequential streams give a value by its position in
//! the stream, not by its index.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32 with 10 rounds: 4 random words from a 128-bit counter and a
/// 64-bit key.
#[inline]
pub fn philox4x32(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for _ in 0..10 {
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

/// Identifies one random stream: a dropout site in one step of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RngKey {
    /// The seed the run, or the model's random initialisation, was given.
    pub seed: u64,
    /// The micro-batch of the run the stream is drawn for, 0-based;
    /// weight initialisation uses `u64::MAX`, shuffling the epoch.
    pub step: u64,
    /// Which tensor (e.g. layer * 8 + site) the stream belongs to.
    pub stream: u32,
}

impl RngKey {
    /// The four random words of elements `4 * block .. 4 * block + 4`.
    #[inline]
    pub fn block(&self, block: u64) -> [u32; 4] {
        philox4x32(
            [
                block as u32,
                (block >> 32) as u32 ^ self.stream,
                self.step as u32,
                (self.step >> 32) as u32,
            ],
            [self.seed as u32, (self.seed >> 32) as u32],
        )
    }

    /// The 32-bit random word for element `index`.
    #[inline]
    pub fn word(&self, index: u64) -> u32 {
        self.block(index / 4)[(index % 4) as usize]
    }

    /// Uniform in [0, 1) with 24 bits, for element `index`.
    #[inline]
    pub fn uniform(&self, index: u64) -> f64 {
        (self.word(index) >> 8) as f64 * (1.0 / 16_777_216.0)
    }

    /// A standard normal value for element `index` (Box-Muller on two
    /// 32-bit words of the element's own counter block).
    pub fn normal(&self, index: u64) -> f64 {
        let out = philox4x32(
            [
                index as u32,
                (index >> 32) as u32 ^ self.stream,
                self.step as u32,
                (self.step >> 32) as u32 ^ 0x8000_0000,
            ],
            [self.seed as u32, (self.seed >> 32) as u32],
        );
        let u1 = ((out[0] as f64) + 1.0) / 4_294_967_297.0; // (0, 1)
        let u2 = (out[1] as f64) / 4_294_967_296.0;
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Whether dropout keeps element `index`: kept with probability `1 - p`
/// (its 24-bit uniform is at least `p`).
#[inline]
pub fn dropout_keep(key: &RngKey, index: u64, p: f64) -> bool {
    keep_word(key.word(index), dropout_threshold(p))
}

/// `p` as a threshold on the top 24 bits of a random word.
#[inline]
pub fn dropout_threshold(p: f64) -> u32 {
    (p * 16_777_216.0).ceil() as u32
}

/// Kept iff the word's 24-bit uniform `u / 2^24 >= p`.
#[inline]
pub fn keep_word(word: u32, threshold: u32) -> bool {
    (word >> 8) >= threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_the_published_known_answer() {
        // Random123 kat_vectors, philox4x32_10.
        let out = philox4x32([0; 4], [0; 2]);
        assert_eq!(out, [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        let out = philox4x32([0xffff_ffff; 4], [0xffff_ffff; 2]);
        assert_eq!(out, [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        let out = philox4x32(
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
        );
        assert_eq!(out, [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]);
    }

    #[test]
    fn keep_rate_is_close_to_one_minus_p() {
        let key = RngKey {
            seed: 7,
            step: 3,
            stream: 11,
        };
        let n = 100_000;
        let kept = (0..n).filter(|&i| dropout_keep(&key, i, 0.1)).count();
        let rate = kept as f64 / n as f64;
        assert!((rate - 0.9).abs() < 0.005, "keep rate {rate}");
    }

    #[test]
    fn normal_has_unit_variance() {
        let key = RngKey {
            seed: 1,
            step: 0,
            stream: 2,
        };
        let n = 50_000u64;
        let xs: Vec<f64> = (0..n).map(|i| key.normal(i)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
    }
}

//! The arithmetic of matrix products: fp32, or 16-bit operands with fp32
//! accumulation.
//!
//! Matrix products are nearly all of a BERT step's arithmetic, and tensor
//! cores run them an order of magnitude faster on 16-bit operands. With
//! [`MatmulPrecision::Bf16`] or [`MatmulPrecision::Fp16`] every [`Backend::matmul`]
//! reads its two operands rounded (to nearest even) to that format,
//! multiplies them exactly and accumulates in fp32; cuBLAS does this with
//! `CUBLAS_COMPUTE_32F_FAST_16BF` / `_16F` on fp32 buffers, and the CPU
//! backend emulates it by rounding copies of the operands. Every other
//! operation (LayerNorm, softmax, GELU, the loss, AdamW) computes in fp32,
//! and the weights, gradients and optimizer state are stored in fp32, so
//! the weights are their own master copy.
//!
//! What this does not do: choose how activations are stored. With the
//! reference kernels they stay fp32 at every precision; with the fused
//! kernels and 16-bit products they are stored in those 16 bits
//! ([`super::Storage::for_step`]), which the memory plan follows.
//!
//! fp16's range ends at 65504 and its normal numbers at 6.1e-5, so small
//! gradients vanish when rounded: fp16 needs the dynamic loss scaling of
//! [`crate::train::LossScaler`], which the training loop turns on for it.
//! bf16 has fp32's range and needs none.
//!
//! [`Backend::matmul`]: super::Backend::matmul

use std::fmt;
use std::str::FromStr;

/// The operand format of matrix products (see the module doc).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum MatmulPrecision {
    /// fp32 operands and accumulation (no TF32).
    #[default]
    Fp32,
    /// bfloat16 operands (8-bit mantissa, fp32's exponent range).
    Bf16,
    /// IEEE half operands (11-bit mantissa, range ±65504); trained with
    /// dynamic loss scaling.
    Fp16,
}

impl MatmulPrecision {
    /// Every precision, fp32 first.
    pub const ALL: [MatmulPrecision; 3] = [
        MatmulPrecision::Fp32,
        MatmulPrecision::Bf16,
        MatmulPrecision::Fp16,
    ];

    /// The name a study file uses: `fp32`, `bf16` or `fp16`.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPrecision::Fp32 => "fp32",
            MatmulPrecision::Bf16 => "bf16",
            MatmulPrecision::Fp16 => "fp16",
        }
    }

    /// Whether gradients need dynamic loss scaling to survive rounding.
    pub fn needs_loss_scaling(self) -> bool {
        self == MatmulPrecision::Fp16
    }

    /// The oldest CUDA compute capability whose tensor cores take these
    /// operands: bf16 since Ampere (8.0), fp16 since Volta (7.0).
    pub fn min_cuda_capability(self) -> (i32, i32) {
        match self {
            MatmulPrecision::Fp32 => (0, 0),
            MatmulPrecision::Bf16 => (8, 0),
            MatmulPrecision::Fp16 => (7, 0),
        }
    }

    /// `x` as a matrix product reads it: rounded to nearest even in the
    /// operand format (fp16 overflows to infinity beyond 65504).
    pub fn round(self, x: f32) -> f32 {
        match self {
            MatmulPrecision::Fp32 => x,
            MatmulPrecision::Bf16 => half::bf16::from_f32(x).to_f32(),
            MatmulPrecision::Fp16 => half::f16::from_f32(x).to_f32(),
        }
    }
}

impl fmt::Display for MatmulPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// An unknown precision name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown precision `{0}`: expected \"fp32\", \"bf16\" or \"fp16\"")]
pub struct UnknownMatmulPrecision(pub String);

impl FromStr for MatmulPrecision {
    type Err = UnknownMatmulPrecision;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MatmulPrecision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownMatmulPrecision(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for p in MatmulPrecision::ALL {
            assert_eq!(p.name().parse::<MatmulPrecision>(), Ok(p));
        }
        let e = "float16".parse::<MatmulPrecision>().unwrap_err();
        assert!(e.to_string().contains("`float16`"), "{e}");
    }

    #[test]
    fn rounding_keeps_each_format_s_mantissa_and_range() {
        let x = 1.0 + 2f32.powi(-9) + 2f32.powi(-20);
        assert_eq!(MatmulPrecision::Fp32.round(x), x);
        // bf16 keeps 7 stored mantissa bits: 2^-9 is below its half ulp.
        assert_eq!(MatmulPrecision::Bf16.round(x), 1.0);
        // fp16 keeps 10: 2^-9 survives, 2^-20 does not.
        assert_eq!(MatmulPrecision::Fp16.round(x), 1.0 + 2f32.powi(-9));
        assert_eq!(MatmulPrecision::Fp16.round(70000.0), f32::INFINITY);
        let big = MatmulPrecision::Bf16.round(1e30);
        assert!(
            big.is_finite() && (big / 1e30 - 1.0).abs() < 2f32.powi(-8),
            "{big}"
        );
        // Below fp16's smallest subnormal (2^-24), a gradient vanishes.
        assert_eq!(MatmulPrecision::Fp16.round(2f32.powi(-26)), 0.0);
        assert!(MatmulPrecision::Fp16.needs_loss_scaling());
        assert!(!MatmulPrecision::Bf16.needs_loss_scaling());
    }
}

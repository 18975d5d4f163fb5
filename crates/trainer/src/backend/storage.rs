//! How buffers are stored and which implementation of the step runs.
//!
//! Mixed precision as it is usually done: weights, their gradients, the
//! optimiser state and per-row statistics (LayerNorm's mean and rstd, the
//! attention's log-sum-exp) stay in the master type; activations, the
//! tensors saved for backward and the gradients of activations may be 16
//! bits ([`Storage`]). [`Kernels`] picks between the step the backends have
//! always run, one trait operation per op and fp32 everywhere, and the fused
//! one (fused attention that never stores the `s x s` probabilities, fused
//! bias/GELU and bias/dropout/residual/LayerNorm, one AdamW call for every
//! tensor with the gradient clip folded in), whose activations are 16 bits
//! when the products are. The memory plan runs the same code with the same
//! choice, so it follows the stored types exactly.

use std::str::FromStr;

use super::MatmulPrecision;
use crate::memory::BufKind;

/// How a buffer stores its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE single precision, 4 bytes.
    F32,
    /// IEEE double precision, 8 bytes (the CPU backend's gradient checks).
    F64,
    /// bfloat16, 2 bytes: 8-bit mantissa, fp32's exponent range.
    Bf16,
    /// IEEE half precision, 2 bytes: 11-bit mantissa, range ±65504.
    F16,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Dtype::F64 => 8,
            Dtype::F32 => 4,
            Dtype::Bf16 | Dtype::F16 => 2,
        }
    }

    /// The name kernels and reports use (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F64 => "f64",
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    }

    /// Whether this is a 16-bit format.
    pub fn is_half(self) -> bool {
        matches!(self, Dtype::Bf16 | Dtype::F16)
    }

    /// `v` as a buffer of this type holds it (rounded to nearest even; fp16
    /// overflows to infinity beyond 65504).
    pub fn round(self, v: f64) -> f64 {
        match self {
            Dtype::F64 => v,
            Dtype::F32 => v as f32 as f64,
            Dtype::Bf16 => half::bf16::from_f64(v).to_f64(),
            Dtype::F16 => half::f16::from_f64(v).to_f64(),
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// What a backend stores each kind of buffer as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Storage {
    /// Weights, gradients, optimiser state, inputs and statistics.
    pub master: Dtype,
    /// Activations and their gradients (`Activation` and `Workspace`).
    pub activations: Dtype,
}

impl Storage {
    /// Everything in `dtype`.
    pub fn uniform(dtype: Dtype) -> Self {
        Storage {
            master: dtype,
            activations: dtype,
        }
    }

    /// The storage of a step with master type `master`: activations in the
    /// products' 16-bit format when the fused kernels run, else `master`.
    pub fn for_step(master: Dtype, precision: MatmulPrecision, kernels: Kernels) -> Self {
        let activations = match (kernels, precision) {
            (Kernels::Fused, MatmulPrecision::Bf16) => Dtype::Bf16,
            (Kernels::Fused, MatmulPrecision::Fp16) => Dtype::F16,
            _ => master,
        };
        Storage {
            master,
            activations,
        }
    }

    /// The type a buffer of `kind` is stored as.
    pub fn of(self, kind: BufKind) -> Dtype {
        match kind {
            BufKind::Activation | BufKind::Workspace => self.activations,
            BufKind::Weight
            | BufKind::Grad
            | BufKind::OptimizerState
            | BufKind::Input
            | BufKind::Statistic
            | BufKind::Backend => self.master,
        }
    }
}

/// Which implementation of the training step runs (see the module doc).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Kernels {
    /// One trait operation per op, every buffer in the master type,
    /// attention through stored probabilities: the step verified on a device.
    #[default]
    Reference,
    /// Fused attention, fused bias/GELU and bias/dropout/residual/LayerNorm,
    /// one optimiser call for all tensors; 16-bit activations with 16-bit
    /// products.
    Fused,
}

impl Kernels {
    /// The name `MEMTUNE_CUDA_KERNELS` and the reports use: `reference` or
    /// `fused`.
    pub fn name(self) -> &'static str {
        match self {
            Kernels::Reference => "reference",
            Kernels::Fused => "fused",
        }
    }

    /// `MEMTUNE_CUDA_KERNELS` (`reference` or `fused`), or the reference
    /// step when it is not set.
    pub fn from_env() -> Result<Self, UnknownKernels> {
        match std::env::var("MEMTUNE_CUDA_KERNELS") {
            Ok(name) => name.parse(),
            Err(_) => Ok(Kernels::Reference),
        }
    }
}

impl std::fmt::Display for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// An unknown kernel set name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MEMTUNE_CUDA_KERNELS=`{0}`: expected \"reference\" or \"fused\"")]
pub struct UnknownKernels(pub String);

impl FromStr for Kernels {
    type Err = UnknownKernels;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "reference" => Ok(Kernels::Reference),
            "fused" => Ok(Kernels::Fused),
            other => Err(UnknownKernels(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_are_16_bits_only_in_the_fused_step_with_16_bit_products() {
        let f32 = Dtype::F32;
        for precision in MatmulPrecision::ALL {
            let s = Storage::for_step(f32, precision, Kernels::Reference);
            assert_eq!(s, Storage::uniform(f32));
        }
        let bf16 = Storage::for_step(f32, MatmulPrecision::Bf16, Kernels::Fused);
        assert_eq!(bf16.of(BufKind::Activation), Dtype::Bf16);
        assert_eq!(bf16.of(BufKind::Workspace), Dtype::Bf16);
        for kind in [
            BufKind::Weight,
            BufKind::Grad,
            BufKind::OptimizerState,
            BufKind::Input,
            BufKind::Statistic,
        ] {
            assert_eq!(bf16.of(kind), f32, "{kind:?}");
        }
        let fp32 = Storage::for_step(f32, MatmulPrecision::Fp32, Kernels::Fused);
        assert_eq!(fp32, Storage::uniform(f32));
    }

    #[test]
    fn rounding_is_to_nearest_even_and_names_parse() {
        // 1 + 2^-8 lies halfway between two bf16 values: ties to even (1).
        assert_eq!(Dtype::Bf16.round(1.0 + 2f64.powi(-8)), 1.0);
        assert_eq!(
            Dtype::Bf16.round(1.0 + 3.0 * 2f64.powi(-8)),
            1.0 + 2f64.powi(-6)
        );
        assert_eq!(Dtype::F16.round(70000.0), f64::INFINITY);
        assert_eq!("fused".parse::<Kernels>(), Ok(Kernels::Fused));
        assert!("fast".parse::<Kernels>().is_err());
    }
}

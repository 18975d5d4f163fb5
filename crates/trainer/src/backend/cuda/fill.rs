//! What a new device buffer holds before its first writer.
//!
//! [`Backend::alloc`] promises zeros, so those buffers get a memset.
//! [`Backend::alloc_overwritten`] buffers are written whole by the
//! operation they are allocated for, so they get none: a training
//! step allocates some 470 of them (2.8 GB at BERT-base, batch 32 x 128,
//! bf16 activations), each fill a pass over its bytes and one more
//! operation in the stream's queue.
//!
//! An operation that broke that promise would read whatever the memory
//! held before. So the `ops` tests poison those buffers with NaN instead
//! (`MEMTUNE_CUDA_POISON=1`, or [`super::CudaBackend::with_poisoned_scratch`];
//! always in debug builds), as the CPU backend's debug builds do: an
//! element read before it is written shows up as NaN in the results.
//!
//! [`Backend::alloc`]: crate::backend::Backend::alloc
//! [`Backend::alloc_overwritten`]: crate::backend::Backend::alloc_overwritten

use crate::backend::Dtype;

/// The contents of a new buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// All bytes zero.
    Zeros,
    /// Whatever the memory held (NaNs of this type when poisoning).
    Unspecified(Dtype),
}

/// A NaN of `dtype` as the bits of one element: the low 16 bits for the
/// 16-bit types, 32 bits for fp32; repeated in each 32-bit word of an fp64
/// buffer it is a NaN there too (all exponent bits set in the high word).
pub(crate) fn nan_bits(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::Bf16 => 0x7FC0,
        Dtype::F16 => 0x7E00,
        Dtype::F32 | Dtype::F64 => 0x7FF8_0000,
    }
}

/// `MEMTUNE_CUDA_POISON` is neither `0` nor `1`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("MEMTUNE_CUDA_POISON=`{0}`: expected \"1\" (poison overwritten buffers with NaN) or \"0\"")]
pub struct PoisonVarError(pub String);

/// Whether to poison overwritten buffers: `MEMTUNE_CUDA_POISON` (`1` or
/// `0`), or when it is unset, in debug builds only.
pub(crate) fn poison_from_env() -> Result<bool, PoisonVarError> {
    match std::env::var("MEMTUNE_CUDA_POISON") {
        Err(_) => Ok(cfg!(debug_assertions)),
        Ok(v) => parse_poison(&v),
    }
}

fn parse_poison(value: &str) -> Result<bool, PoisonVarError> {
    match value.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        other => Err(PoisonVarError(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poison_of_each_type_is_a_nan_of_that_type() {
        assert!(half::bf16::from_bits(nan_bits(Dtype::Bf16) as u16).is_nan());
        assert!(half::f16::from_bits(nan_bits(Dtype::F16) as u16).is_nan());
        assert!(f32::from_bits(nan_bits(Dtype::F32)).is_nan());
        let word = u64::from(nan_bits(Dtype::F64));
        assert!(f64::from_bits(word << 32 | word).is_nan());
    }

    #[test]
    fn the_variable_takes_one_or_zero() {
        assert_eq!(parse_poison("1"), Ok(true));
        assert_eq!(parse_poison(" 0\n"), Ok(false));
        let err = parse_poison("yes").unwrap_err();
        assert!(
            err.to_string().contains("MEMTUNE_CUDA_POISON=`yes`"),
            "{err}"
        );
    }
}

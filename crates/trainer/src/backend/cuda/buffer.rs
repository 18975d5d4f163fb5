//! Device buffers of the CUDA backend, allocated from gpu-mem.

use super::error::CudaError;
use crate::backend::Dtype;
use gpu_mem::cuda::CudaBuffer;

/// A float buffer on the device, of `len` elements of `dtype` (fp32, or a
/// 16-bit type for activations). `mem` is `None` for an empty buffer, or
/// when the allocation failed (the backend then holds the error, see
/// [`super::CudaBackend::check`]).
#[derive(Debug)]
pub struct CudaBuf {
    pub(super) mem: Option<CudaBuffer<u8>>,
    pub(super) len: usize,
    pub(super) dtype: Dtype,
}

/// An id buffer (`u32`) on the device, with a host copy of what was last
/// uploaded: labels and ids are validated on the host before any kernel
/// reads them, and the embedding backward sorts token positions by id there.
#[derive(Debug)]
pub struct CudaIds {
    pub(super) mem: Option<CudaBuffer<u32>>,
    pub(super) host: Vec<u32>,
}

impl CudaBuf {
    /// Elements in the buffer (not bytes).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The type its elements are stored as on the device.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// Bytes of device memory the elements take.
    pub fn bytes(&self) -> usize {
        self.len * self.dtype.bytes()
    }
    /// The device address (0 for an empty buffer). A non-empty buffer whose
    /// allocation failed is an error: handing kernels address 0 would be an
    /// illegal access, which loses the CUDA context for good.
    pub fn ptr(&self) -> Result<u64, CudaError> {
        device_ptr(self.mem.as_ref().map(|m| m.ptr()), self.len)
    }
}

fn device_ptr(mem: Option<u64>, len: usize) -> Result<u64, CudaError> {
    match mem {
        Some(ptr) => Ok(ptr),
        None if len == 0 => Ok(0),
        None => Err(CudaError::Invalid {
            op: "buffer",
            message: format!(
                "a buffer of {len} elements has no device memory (its allocation failed \
                 earlier; the failure was reported by check)"
            ),
        }),
    }
}

impl CudaIds {
    /// Ids in the buffer.
    pub fn len(&self) -> usize {
        self.host.len()
    }
    /// Whether the buffer holds no ids.
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }
    /// As [`CudaBuf::ptr`].
    pub fn ptr(&self) -> Result<u64, CudaError> {
        device_ptr(self.mem.as_ref().map(|m| m.ptr()), self.host.len())
    }
    /// The values last uploaded (zeros after allocation).
    pub fn host(&self) -> &[u32] {
        &self.host
    }
}

/// Token positions grouped by id, in token order within each id: the
/// layout `embedding_backward` reads (`[order | starts | ids]`).
pub fn embedding_csr(ids: &[u32]) -> (Vec<u32>, usize) {
    let mut order: Vec<u32> = (0..ids.len() as u32).collect();
    // Stable: positions of one id stay in token order.
    order.sort_by_key(|&t| ids[t as usize]);
    let mut starts = Vec::new();
    let mut unique = Vec::new();
    for (p, &t) in order.iter().enumerate() {
        let id = ids[t as usize];
        if unique.last() != Some(&id) {
            unique.push(id);
            starts.push(p as u32);
        }
    }
    starts.push(order.len() as u32);
    let count = unique.len();
    let mut csr = order;
    csr.extend(starts);
    csr.extend(unique);
    (csr, count)
}

#[cfg(test)]
mod tests {
    use super::embedding_csr;

    #[test]
    fn csr_groups_positions_by_id_in_token_order() {
        let (csr, unique) = embedding_csr(&[5, 2, 5, 0, 2, 5]);
        assert_eq!(unique, 3);
        let (order, rest) = csr.split_at(6);
        let (starts, ids) = rest.split_at(unique + 1);
        assert_eq!(order, &[3, 1, 4, 0, 2, 5]);
        assert_eq!(starts, &[0, 1, 3, 6]);
        assert_eq!(ids, &[0, 2, 5]);
    }
}

/// `values` as the bytes of a buffer of `dtype` (rounded to nearest even).
pub fn encode(dtype: Dtype, values: impl ExactSizeIterator<Item = f64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.bytes());
    for v in values {
        match dtype {
            Dtype::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            Dtype::F64 => out.extend_from_slice(&v.to_le_bytes()),
            Dtype::Bf16 => out.extend_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
            Dtype::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        }
    }
    out
}

/// The values of a buffer of `dtype` from its bytes.
pub fn decode(dtype: Dtype, bytes: &[u8]) -> Vec<f64> {
    let n = dtype.bytes();
    bytes
        .chunks_exact(n)
        .map(|c| match dtype {
            Dtype::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            Dtype::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            Dtype::Bf16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            Dtype::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
        })
        .collect()
}

#[cfg(test)]
mod codec_tests {
    use super::{decode, encode};
    use crate::backend::Dtype;

    #[test]
    fn values_round_trip_through_every_storage_type() {
        let values = [0.0, 1.5, -2.25, 1e-3, 3.0e4];
        for dtype in [Dtype::F32, Dtype::F64, Dtype::Bf16, Dtype::F16] {
            let bytes = encode(dtype, values.iter().copied());
            assert_eq!(bytes.len(), values.len() * dtype.bytes());
            let back = decode(dtype, &bytes);
            let expected: Vec<f64> = values.iter().map(|&v| dtype.round(v)).collect();
            assert_eq!(back, expected, "{dtype}");
        }
    }
}

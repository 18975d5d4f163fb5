//! The buffers a backend allocates for itself, beside the model's: the
//! cuBLAS workspace and the CUDA kernels' scratch come from the same
//! allocator as the model's buffers, so they count toward a trial's peak
//! and lease like any activation.
//!
//! This list is the one place those sizes live: the CUDA backend allocates
//! exactly [`StepBackend::Cuda`]'s buffers when it starts, and the memory
//! plan of a step on that backend ([`super::PlanRequest::backend`]) holds
//! the same buffers for the whole step, so a study runner's price of a
//! CUDA trial is the bytes the trial asks its allocator for. A buffer the
//! CUDA backend adds for itself (more kernel scratch, a CUDA graph's pool)
//! belongs here, and every price follows.

use serde::{Deserialize, Serialize};

/// One buffer a backend holds for as long as it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendBuffer {
    /// Its name in a plan (`cublas workspace`, ...); the CUDA backend
    /// names it the same when it allocates it.
    pub name: &'static str,
    /// Its size in bytes.
    pub bytes: usize,
}

/// cuBLAS workspace: 32 MiB, NVIDIA's recommendation for Hopper (4 MiB
/// suffices before it).
pub const CUDA_BLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// Blocks of the CUDA backend's deterministic sum-of-squares reduction
/// (fixed, so the order of additions never changes); one fp64 partial sum
/// each.
pub const CUDA_NORM_BLOCKS: usize = 256;
// optim.cu's sum_norm_partials loads at most 8 partials a lane of a warp.
const _: () = assert!(CUDA_NORM_BLOCKS <= 8 * 32);

/// fp32 partial sums of the CUDA backend's column reductions (bias and
/// LayerNorm parameter gradients): row chunks x columns.
pub const CUDA_COLUMN_PARTIALS: usize = 1 << 18;
/// At most this many row chunks per column reduction.
pub const CUDA_COLUMN_CHUNKS: usize = 64;
// common.cuh's sum_partials loads at most 8 chunks a row phase of 8.
const _: () = assert!(CUDA_COLUMN_CHUNKS <= 8 * 8);
/// Arrival counters of the split column reductions, one u32 per block of
/// 32 columns: a split reduction has at least 2 chunks, so at most
/// `CUDA_COLUMN_PARTIALS / 2` columns.
pub const CUDA_COLUMN_COUNTERS: usize = CUDA_COLUMN_PARTIALS / 64;
/// Tensors one multi-tensor optimiser launch takes.
pub const CUDA_TENSOR_TABLE: usize = 4096;
/// Bytes of one multi-tensor table entry (nine u64s: the four addresses,
/// length, decay flag, gradient length, row slots and row width).
pub const CUDA_TENSOR_ENTRY_BYTES: usize = 72;
/// Bytes of one entry of the multi-tensor fill's table (address, length).
pub const CUDA_FILL_ENTRY_BYTES: usize = 16;

/// What the CUDA backend allocates when it starts, in order.
const CUDA_BUFFERS: [BackendBuffer; 6] = [
    BackendBuffer {
        name: "cublas workspace",
        bytes: CUDA_BLAS_WORKSPACE_BYTES,
    },
    BackendBuffer {
        name: "norm partials",
        bytes: CUDA_NORM_BLOCKS * 8,
    },
    BackendBuffer {
        name: "column partials",
        bytes: CUDA_COLUMN_PARTIALS * 4,
    },
    BackendBuffer {
        name: "column counters",
        bytes: CUDA_COLUMN_COUNTERS * 4,
    },
    BackendBuffer {
        name: "tensor table",
        bytes: CUDA_TENSOR_TABLE * CUDA_TENSOR_ENTRY_BYTES,
    },
    BackendBuffer {
        name: "fill table",
        bytes: CUDA_TENSOR_TABLE * CUDA_FILL_ENTRY_BYTES,
    },
];

/// Which backend runs a step, as far as memory is concerned: what it holds
/// besides the model's buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepBackend {
    /// The CPU backend (and the allocation-only plan backend): nothing of
    /// its own.
    #[default]
    Host,
    /// The CUDA backend: the cuBLAS workspace and its kernels' scratch.
    Cuda,
}

impl StepBackend {
    /// The buffers the backend allocates for itself, in its order.
    pub fn buffers(self) -> &'static [BackendBuffer] {
        match self {
            StepBackend::Host => &[],
            StepBackend::Cuda => &CUDA_BUFFERS,
        }
    }

    /// Their bytes in all.
    pub fn buffer_bytes(self) -> usize {
        self.buffers().iter().map(|b| b.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cuda_backend_holds_its_workspace_and_partial_sums() {
        assert_eq!(StepBackend::Host.buffer_bytes(), 0);
        // 32 MiB + 2 KiB (the workspace and norm partials: what a CUDA
        // step asked for beyond the model's plan on an H200, 33,556,480
        // bytes), then 1 MiB of column partials and their 16 KiB of
        // counters, the 288 KiB optimiser table and the 64 KiB table of the
        // gradients' zeroing.
        assert_eq!(
            StepBackend::Cuda.buffer_bytes(),
            33_556_480 + (1 << 20) + 16 * 1024 + 288 * 1024 + 64 * 1024
        );
    }
}

//! The device memory the CUDA backend allocates for itself when it starts,
//! besides the model's buffers (which the memory plan lists): fixed sizes,
//! so a price can add them to the plan's peak without a device.

/// cuBLAS workspace: 32 MiB, NVIDIA's recommendation for Hopper (4 MiB
/// suffices before it).
pub const BLAS_WORKSPACE_BYTES: usize = 32 << 20;
/// Blocks of the deterministic sum-of-squares reduction (fixed, so the
/// order of additions never changes); one fp64 partial each.
pub const NORM_BLOCKS: usize = 256;
/// fp32 partial sums of the column reductions (bias and LayerNorm
/// parameter gradients): row chunks x columns.
pub const COLUMN_PARTIALS: usize = 1 << 18;
/// At most this many row chunks per column reduction.
pub const COLUMN_CHUNKS: usize = 64;
/// Tensors one multi-tensor optimiser launch takes (48 bytes each).
pub const TENSOR_TABLE: usize = 4096;
/// Bytes of one multi-tensor table entry (six u64s).
pub const TENSOR_ENTRY_BYTES: usize = 48;

/// Everything above, in bytes (before the allocator's rounding).
pub const CUDA_BACKEND_BYTES: usize = BLAS_WORKSPACE_BYTES
    + NORM_BLOCKS * 8
    + COLUMN_PARTIALS * 4
    + TENSOR_TABLE * TENSOR_ENTRY_BYTES;

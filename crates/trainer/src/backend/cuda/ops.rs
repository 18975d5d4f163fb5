//! The [`Backend`] operations as kernel launches and cuBLAS calls.
//!
//! Each operation checks its sizes and its buffers' types on the host first
//! (a mismatch is a recorded [`CudaError::Invalid`], never an out-of-bounds
//! kernel), then queues its work on the backend's stream. A kernel is
//! instantiated per storage type of the activations it reads and writes
//! (`layernorm_forward_bf16`); parameters, their gradients and statistics
//! are fp32 in every instantiation. See the kernel files for what each
//! kernel computes and costs.

use super::buffer::{decode, embedding_csr, encode};
use super::fill::Fill;
use super::{
    Arg, AtomicCounters, CudaBackend, CudaBuf, CudaError, CudaIds, KernelArg, THREADS, args,
};
use crate::backend::row_slots::NO_SLOT;
use crate::backend::{
    AdamWStep, AttentionInputs, AttentionShape, Backend, DeviceFailure, Dtype, Failure, Kernels,
    LossTargets, MatmulPrecision, MatmulShape, RelPosShape, RowSlots, SparseRows, Storage,
};
use crate::memory::backend_buffers::{
    CUDA_COLUMN_CHUNKS as COLUMN_CHUNKS, CUDA_COLUMN_COUNTERS as COLUMN_COUNTERS,
    CUDA_COLUMN_PARTIALS as COLUMN_PARTIALS, CUDA_NORM_BLOCKS as NORM_BLOCKS,
    CUDA_TENSOR_ENTRY_BYTES as TENSOR_ENTRY_BYTES, CUDA_TENSOR_TABLE as TENSOR_TABLE,
};
use crate::memory::{BufKind, OutOfMemory};
use crate::rng::{RngKey, dropout_threshold};
use Arg::{F32, F64, Ptr, U32, U64};
use gpu_mem::cuda::CudaBuffer;
use std::ops::Range;
use std::sync::Mutex;

fn need(op: &'static str, ok: bool, message: impl FnOnce() -> String) -> Result<(), CudaError> {
    if ok {
        Ok(())
    } else {
        Err(CudaError::Invalid {
            op,
            message: message(),
        })
    }
}

fn same_len(op: &'static str, a: usize, b: usize) -> Result<(), CudaError> {
    need(op, a == b, || format!("lengths differ: {a} and {b}"))
}

fn u32_of(op: &'static str, v: usize) -> Result<u32, CudaError> {
    u32::try_from(v).map_err(|_| CudaError::Invalid {
        op,
        message: format!("{v} does not fit the kernel's 32-bit index"),
    })
}

/// The rows of `n` elements a buffer of `len` holds, or an error naming
/// `op`.
fn rows_of(op: &'static str, len: usize, n: usize) -> Result<usize, CudaError> {
    need(op, n > 0 && len.is_multiple_of(n), || {
        format!("{len} elements are not rows of {n}")
    })?;
    Ok(len / n)
}

/// Checks that every buffer in `bufs` holds `len` elements.
fn all_len(op: &'static str, len: usize, bufs: &[&CudaBuf]) -> Result<(), CudaError> {
    bufs.iter().try_for_each(|b| same_len(op, b.len, len))
}

/// The one storage type of an op's activation buffers (an error when they
/// differ).
fn act(op: &'static str, bufs: &[&CudaBuf]) -> Result<Dtype, CudaError> {
    let dtype = bufs.first().map_or(Dtype::F32, |b| b.dtype);
    match bufs.iter().find(|b| b.dtype != dtype) {
        Some(other) => Err(CudaError::Invalid {
            op,
            message: format!("buffers of {dtype} and {} in one operation", other.dtype),
        }),
        None => Ok(dtype),
    }
}

/// Checks the operands of a LayerNorm over rows of `n` columns: `x` and
/// the buffers `like_x` of its shape and type (`[rows, n]` activations),
/// the fp32 `[n]` parameters and their gradients `per_column`, and the fp32
/// `[rows]` statistics `mean` and `rstd`. Returns the rows and the
/// activations' type.
fn layernorm_operands(
    op: &'static str,
    x: &CudaBuf,
    like_x: &[&CudaBuf],
    n: usize,
    per_column: &[&CudaBuf],
    mean: &CudaBuf,
    rstd: &CudaBuf,
) -> Result<(usize, Dtype), CudaError> {
    let rows = rows_of(op, x.len, n)?;
    all_len(op, x.len, like_x)?;
    all_len(op, n, per_column)?;
    all_len(op, rows, &[mean, rstd])?;
    master(op, per_column)?;
    master(op, &[mean, rstd])?;
    let activations: Vec<&CudaBuf> = std::iter::once(x).chain(like_x.iter().copied()).collect();
    Ok((rows, act(op, &activations)?))
}

/// Checks that parameters, their gradients and statistics are fp32.
fn master(op: &'static str, bufs: &[&CudaBuf]) -> Result<(), CudaError> {
    match bufs.iter().find(|b| b.dtype != Dtype::F32) {
        Some(b) => Err(CudaError::Invalid {
            op,
            message: format!("a parameter or statistic of {}, not f32", b.dtype),
        }),
        None => Ok(()),
    }
}

/// `base` instantiated for `dtype` (`layernorm_forward_bf16`).
fn typed(base: &str, dtype: Dtype) -> String {
    format!("{base}_{}", dtype.name())
}

/// Checks on the host that every id is a row of a table of `rows`.
fn ids_below(op: &'static str, ids: &CudaIds, rows: usize) -> Result<(), CudaError> {
    match ids.host.iter().position(|&id| id as usize >= rows) {
        Some(t) => Err(CudaError::Invalid {
            op,
            message: format!("id {} of token {t} is not below {rows} rows", ids.host[t]),
        }),
        None => Ok(()),
    }
}

/// Checks an embedding lookup's operands: the fp32 `table` (or its
/// gradient) of rows of `dim`, every id one of the table's rows
/// (`table_rows`, or the buffer's own rows when it is the table), and
/// `per_token` (the output or its gradient) `dim` wide for each id.
/// Returns the buffer's rows.
fn embedding_operands(
    op: &'static str,
    ids: &CudaIds,
    table: &CudaBuf,
    table_rows: Option<usize>,
    dim: usize,
    per_token: &CudaBuf,
) -> Result<usize, CudaError> {
    let rows = rows_of(op, table.len, dim)?;
    same_len(op, per_token.len, ids.len() * dim)?;
    master(op, &[table])?;
    ids_below(op, ids, table_rows.unwrap_or(rows))?;
    Ok(rows)
}

/// A dropout mask as the kernels' `DROPOUT_PARAMS`: threshold 0 (and scale
/// 1) without dropout.
fn dropout_args(op: &'static str, p: f64, key: Option<RngKey>) -> Result<[Arg; 7], CudaError> {
    need(op, (0.0..1.0).contains(&p), || {
        format!("probability {p} not in [0, 1)")
    })?;
    Ok(match key {
        Some(key) if p > 0.0 => [
            U32(dropout_threshold(p)),
            F32((1.0 / (1.0 - p)) as f32),
            U32(key.seed as u32),
            U32((key.seed >> 32) as u32),
            U32(key.step as u32),
            U32((key.step >> 32) as u32),
            U32(key.stream),
        ],
        _ => [U32(0), F32(1.0), U32(0), U32(0), U32(0), U32(0), U32(0)],
    })
}

/// The kernels' `ATTN_PARAMS` for a call.
fn attention_args(
    op: &'static str,
    sh: &AttentionShape,
    key: Option<RngKey>,
) -> Result<Vec<Arg>, CudaError> {
    let mut out = vec![
        U32(u32_of(op, sh.b)?),
        U32(u32_of(op, sh.heads)?),
        U32(u32_of(op, sh.s)?),
        U32(u32_of(op, sh.head_dim)?),
        F32(sh.scale as f32),
    ];
    out.extend(dropout_args(op, sh.dropout, key)?);
    Ok(out)
}

/// Threads per block of the multi-tensor optimiser kernels: their grid is
/// the fixed [`NORM_BLOCKS`] (the norm's partial sums, so its order), and
/// 256 blocks of 1024 threads keep every multiprocessor of an H100 full,
/// where 256 threads left three quarters of each idle (2.0 ms for BERT-base's
/// AdamW on an H200, about twice its bytes at the memory's rate).
const MULTI_TENSOR_THREADS: u32 = 1024;

/// A launch's grid or block shape.
type Dim3 = (u32, u32, u32);

/// Head dims the tensor-core attention kernels take.
const MMA_HEAD_DIMS: [usize; 2] = [32, 64];
/// The SIMT attention kernels' largest head dim.
const SIMT_MAX_HEAD_DIM: usize = 128;
/// Rows one attention block owns: the tensor-core kernels' 4 warps x 16,
/// the SIMT kernels' 8 warps x 1.
const MMA_ROWS: usize = 64;
const SIMT_ROWS: usize = 8;
/// The widest row the warp-per-row residual LayerNorm kernels hold
/// (`LN_WARP_MAX` of layernorm.cu).
const LN_WARP_MAX: usize = 1024;
/// Threads of a tensor-core attention block (`MMA_THREADS` of
/// attention_fused.cu, which sizes its tile loads by it).
const MMA_THREADS: u32 = 128;

impl CudaBackend {
    /// A warp-per-row kernel over `rows` rows, 4 warps per block (grid-stride
    /// over rows); nothing for none.
    fn launch_rows(&self, kernel: &str, rows: u64, args: &[Arg]) -> Result<(), CudaError> {
        if rows == 0 {
            return Ok(());
        }
        let blocks = rows.div_ceil(4).clamp(1, 1 << 16) as u32;
        self.launch(kernel, (blocks, 1, 1), (128, 1, 1), args)
    }

    /// A block-per-row kernel over `rows` rows (grid-stride over rows);
    /// nothing for none.
    fn launch_block_rows(&self, kernel: &str, rows: u64, args: &[Arg]) -> Result<(), CudaError> {
        if rows == 0 {
            return Ok(());
        }
        let blocks = rows.min(1 << 16) as u32;
        self.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), args)
    }

    /// The block-per-row LayerNorm kernel `base` for `dtype` over `rows`
    /// rows of `n` columns; it takes `buffers`, then the rows and `n`, then
    /// `tail`.
    fn launch_layernorm(
        &self,
        base: &'static str,
        dtype: Dtype,
        rows: usize,
        n: usize,
        buffers: &[Arg],
        tail: &[Arg],
    ) -> Result<(), CudaError> {
        let args = Self::layernorm_args(base, rows, n, buffers, tail)?;
        self.launch_block_rows(&typed(base, dtype), rows as u64, &args)
    }

    /// A LayerNorm kernel's arguments: `buffers`, the rows and `n`, `tail`.
    fn layernorm_args(
        base: &'static str,
        rows: usize,
        n: usize,
        buffers: &[Arg],
        tail: &[Arg],
    ) -> Result<Vec<Arg>, CudaError> {
        let sizes = [U64(rows as u64), U32(u32_of(base, n)?)];
        Ok([buffers, &sizes, tail].concat())
    }

    /// The residual LayerNorm kernel `base` over `rows` rows of `n`
    /// columns: its warp-per-row form (`base_warp`) where a warp can hold
    /// a row (`n` a multiple of 8, at most [`LN_WARP_MAX`]) and every buffer
    /// of `vectors` is 16-byte aligned for its 8-column accesses, else the
    /// block-per-row one. Arguments as [`Self::launch_layernorm`].
    #[allow(clippy::too_many_arguments)]
    fn launch_residual_layernorm(
        &self,
        base: &'static str,
        dtype: Dtype,
        rows: usize,
        n: usize,
        vectors: &[&CudaBuf],
        buffers: &[Arg],
        tail: &[Arg],
    ) -> Result<(), CudaError> {
        let mut aligned = true;
        for buf in vectors {
            aligned &= buf.ptr()?.is_multiple_of(16);
        }
        if !(aligned && n.is_multiple_of(8) && n <= LN_WARP_MAX) {
            return self.launch_layernorm(base, dtype, rows, n, buffers, tail);
        }
        let args = Self::layernorm_args(base, rows, n, buffers, tail)?;
        self.launch_rows(&typed(&format!("{base}_warp"), dtype), rows as u64, &args)
    }

    /// A kernel `op` between a per-sequence buffer `rows` (`[b, h]`) and a
    /// per-token one `tokens` (`[b, s, h]`) of one type, checked: it takes
    /// `buffers`, then `b`, `s` and `h`; a thread per element of `threads`.
    fn per_sequence(
        &self,
        op: &'static str,
        rows: &CudaBuf,
        tokens: &CudaBuf,
        (b, s): (usize, usize),
        buffers: &[Arg],
        threads: usize,
    ) -> Result<(), CudaError> {
        let h = rows_of(op, rows.len, b)?;
        same_len(op, tokens.len, b * s * h)?;
        let dtype = act(op, &[rows, tokens])?;
        let mut args = buffers.to_vec();
        for v in [b, s, h] {
            args.push(U32(u32_of(op, v)?));
        }
        self.launch_1d(&typed(op, dtype), threads as u64, &args)
    }

    /// The grid-stride kernel `kernel_T(inputs..., out, n)` over buffers of
    /// one length `n` and one type `T`.
    fn map(&self, kernel: &'static str, inputs: &[&CudaBuf], out: &mut CudaBuf) {
        self.run(|| {
            let (name, args) = Self::map_args(kernel, inputs, out)?;
            self.launch_1d(&name, out.len as u64, &args)
        })
    }

    /// [`Self::map`] of a kernel that takes 8 elements a thread.
    fn map8(&self, kernel: &'static str, inputs: &[&CudaBuf], out: &mut CudaBuf) {
        self.run(|| {
            let (name, args) = Self::map_args(kernel, inputs, out)?;
            let mut all: Vec<&CudaBuf> = inputs.to_vec();
            all.push(out);
            self.launch_vec8(&name, out.len as u64, &all, &args)
        })
    }

    /// The checks and arguments of an elementwise kernel: inputs of the
    /// output's length and storage type, then the output and its length.
    fn map_args(
        kernel: &'static str,
        inputs: &[&CudaBuf],
        out: &CudaBuf,
    ) -> Result<(String, Vec<Arg>), CudaError> {
        let mut all: Vec<&CudaBuf> = inputs.to_vec();
        all.push(out);
        let dtype = act(kernel, &all)?;
        let mut args = Vec::with_capacity(inputs.len() + 2);
        for x in inputs {
            same_len(kernel, x.len, out.len)?;
            args.push(x.arg()?);
        }
        args.extend(args![out, U64(out.len as u64)]);
        Ok((typed(kernel, dtype), args))
    }

    fn dropout(&self, x: &CudaBuf, out: &mut CudaBuf, p: f64, key: RngKey) {
        self.run(|| {
            same_len("dropout", x.len, out.len)?;
            let dtype = act("dropout", &[x, out])?;
            let mask = dropout_args("dropout", p, Some(key))?;
            if x.len == 0 {
                return Ok(());
            }
            let groups = (x.len as u64).div_ceil(4);
            let blocks = groups.div_ceil(THREADS as u64).clamp(1, 1 << 16) as u32;
            let args = [args![x, out, U64(x.len as u64)].as_slice(), &mask].concat();
            self.launch(
                &typed("dropout", dtype),
                (blocks, 1, 1),
                (THREADS, 1, 1),
                &args,
            )
        })
    }

    /// One launch of `cast_many_f32_*`: up to four fp32 tensors into
    /// 16-bit ones of one type (checked by the caller); unused slots have
    /// length 0.
    fn cast_four(&self, src: &[&CudaBuf], dst: &[CudaBuf]) -> Result<(), CudaError> {
        let mut args = Vec::with_capacity(12);
        let mut longest = 0;
        for slot in 0..4 {
            match (src.get(slot), dst.get(slot)) {
                (Some(s), Some(d)) => {
                    same_len("cast_all", s.len, d.len)?;
                    longest = longest.max(d.len);
                    args.extend([
                        Arg::Ptr(s.ptr()?),
                        Arg::Ptr(d.ptr()?),
                        Arg::U64(d.len as u64),
                    ]);
                }
                _ => args.extend([Arg::Ptr(0), Arg::Ptr(0), Arg::U64(0)]),
            }
        }
        let name = format!("cast_many_f32_{}", dst[0].dtype.name());
        let buffers: Vec<&CudaBuf> = src.iter().copied().chain(dst).collect();
        self.launch_vec8(&name, longest as u64, &buffers, &args)
    }

    /// Column sums of `dout` (`[rows, cols]`) added onto the fp32 `dbias`:
    /// over row chunks into the backend's partials, then the chunks in a
    /// fixed order (one kernel when the partials cannot hold two chunks).
    fn column_sums(
        &self,
        op: &'static str,
        dout: &CudaBuf,
        dbias: &CudaBuf,
        cols: usize,
    ) -> Result<(), CudaError> {
        let rows = rows_of(op, dout.len, cols)?;
        let dtype = act(op, &[dout])?;
        master(op, &[dbias])?;
        same_len(op, dbias.len, cols)?;
        let col_blocks = u32_of(op, cols)?.div_ceil(32);
        let (chunks, partials, counters) = self.column_split(op, rows, cols, col_blocks)?;
        if chunks < 2 {
            return self.launch(
                &typed("bias_backward", dtype),
                (col_blocks, 1, 1),
                (32, 8, 1),
                args![dout, dbias, U64(rows as u64), U32(cols as u32)],
            );
        }
        self.launch(
            &typed("column_sums", dtype),
            (col_blocks, chunks as u32, 1),
            (32, 8, 1),
            args![
                dout,
                Ptr(partials),
                Ptr(counters),
                dbias,
                U64(rows as u64),
                U32(cols as u32)
            ],
        )
    }

    /// How a column reduction over `rows` rows splits into row chunks whose
    /// partial sums take `width` floats each (the split kernels'
    /// `gridDim.y`), with the partials' and the arrival counters' buffers.
    /// Two or more chunks put `width <= COLUMN_PARTIALS / 2`, so each of the
    /// `col_blocks` column blocks has a counter; checked all the same.
    fn column_split(
        &self,
        op: &'static str,
        rows: usize,
        width: usize,
        col_blocks: u32,
    ) -> Result<(usize, u64, u64), CudaError> {
        let chunks = COLUMN_CHUNKS
            .min(COLUMN_PARTIALS / width)
            .min(rows.div_ceil(8))
            .max(1);
        need(
            op,
            chunks < 2 || col_blocks as usize <= COLUMN_COUNTERS,
            || format!("{col_blocks} column blocks; the counters take {COLUMN_COUNTERS}"),
        )?;
        Ok((
            chunks,
            self.column_partials.ptr(),
            self.column_counters.ptr(),
        ))
    }

    /// Checks a cross-entropy's operands: `logits` hold `classes` per
    /// label, every label (on the host copy) is below `classes`, and the
    /// weights are fp32, one per class. Returns the weights' address (0:
    /// none).
    fn loss_operands(
        logits: &CudaBuf,
        t: &LossTargets<'_, CudaBuf, CudaIds>,
    ) -> Result<u64, CudaError> {
        let (op, classes) = ("cross_entropy", t.classes);
        need(op, classes > 0, || "zero classes".into())?;
        same_len(op, logits.len, t.labels.len() * classes)?;
        let labels = t.labels.host.iter().enumerate();
        if let Some((row, &y)) = labels.clone().find(|&(_, &y)| y as usize >= classes) {
            return Err(CudaError::Invalid {
                op,
                message: format!("label {y} of row {row} is not below {classes} classes"),
            });
        }
        match t.weights {
            None => Ok(0),
            Some(w) => {
                same_len(op, w.len, classes)?;
                master(op, &[w])?;
                Ok(w.ptr()?)
            }
        }
    }

    /// Checks a fused attention call's buffers; returns their storage type.
    fn attention_check(
        op: &'static str,
        sh: &AttentionShape,
        bufs: &[&CudaBuf],
        mask: &CudaIds,
        stats: &[&CudaBuf],
    ) -> Result<Dtype, CudaError> {
        need(
            op,
            sh.head_dim > 0 && sh.head_dim <= SIMT_MAX_HEAD_DIM,
            || format!("head dim {} is not in 1..={SIMT_MAX_HEAD_DIM}", sh.head_dim),
        )?;
        all_len(op, sh.len(), bufs)?;
        all_len(op, sh.rows(), stats)?;
        master(op, stats)?;
        same_len(op, mask.len(), sh.b * sh.s)?;
        act(op, bufs)
    }

    /// The attention kernels' grid, block and name suffix: the tensor-core
    /// kernels for 16-bit storage, a head dim they take and a device that
    /// has them (sm_80+), else the SIMT ones. The tensor-core kernels read
    /// the rows of `tiles` 16 bytes at a time, so those must be 16-byte
    /// aligned (every allocation is; a misaligned one is an error here, not
    /// a fault that loses the context).
    fn attention_kernel(
        &self,
        sh: &AttentionShape,
        dtype: Dtype,
        base: &'static str,
        tiles: &[&CudaBuf],
    ) -> Result<(String, Dim3, Dim3), CudaError> {
        // One block row per (sequence, head): CUDA caps a grid's y at 65,535.
        let bh = sh.b * sh.heads;
        need(base, bh <= 65_535, || {
            format!(
                "a micro-batch of {} sequences x {} heads exceeds the attention grid's limit of \
                 65,535 (sequence, head) pairs; use a smaller micro-batch",
                sh.b, sh.heads
            )
        })?;
        let bh = bh as u32;
        let mma = dtype.is_half() && MMA_HEAD_DIMS.contains(&sh.head_dim) && self.capability.0 >= 8;
        if mma {
            for buf in tiles {
                let ptr = buf.ptr()?;
                need(base, ptr % 16 == 0, || {
                    format!(
                        "the tensor-core kernels read 16-byte rows; buffer at {ptr:#x} is not \
                         16-byte aligned"
                    )
                })?;
            }
            let grid = (sh.s.div_ceil(MMA_ROWS) as u32, bh, 1);
            Ok((
                format!("{base}_mma{}_{}", sh.head_dim, dtype.name()),
                grid,
                (MMA_THREADS, 1, 1),
            ))
        } else {
            let grid = (sh.s.div_ceil(SIMT_ROWS) as u32, bh, 1);
            Ok((
                format!("{base}_simt_{}", dtype.name()),
                grid,
                (32 * SIMT_ROWS as u32, 1, 1),
            ))
        }
    }

    /// A buffer of `len` elements of `kind`'s stored type, filled as
    /// `fill` says for that type.
    fn float_buf(&self, name: &str, kind: BufKind, len: usize, fill: fn(Dtype) -> Fill) -> CudaBuf {
        let dtype = self.storage.of(kind);
        CudaBuf {
            mem: self.alloc_recorded::<u8>(name, len * dtype.bytes(), fill(dtype)),
            len,
            dtype,
        }
    }

    /// Writes the multi-tensor table of `entries` (nine u64s per tensor,
    /// `tensor_entry` in `common.cuh`) unless it already holds them.
    fn tensor_table_of(&self, entries: &[u64]) -> Result<u64, CudaError> {
        self.table_of(&self.tensor_table, &self.table_contents, entries)
    }

    /// Writes `entries` into `table` unless `held` says it holds them: a
    /// step's tables are the same every step, so they cross the bus once.
    fn table_of(
        &self,
        table: &CudaBuffer<u64>,
        held: &Mutex<Vec<u64>>,
        entries: &[u64],
    ) -> Result<u64, CudaError> {
        let mut held = held.lock().unwrap_or_else(|p| p.into_inner());
        if held.as_slice() != entries {
            self.copy_in(table.ptr(), entries)?;
            *held = entries.to_vec();
        }
        Ok(table.ptr())
    }
}

impl Backend for CudaBackend {
    type Buf = CudaBuf;
    type Ids = CudaIds;

    fn storage(&self) -> Storage {
        self.storage
    }
    fn kernels(&self) -> Kernels {
        self.kernels
    }
    fn matmul_precision(&self) -> MatmulPrecision {
        self.precision
    }

    fn take_failure(&self) -> Result<(), Failure> {
        self.check().map_err(|e| match e {
            CudaError::Alloc {
                name,
                bytes,
                source: gpu_mem::AllocError::OutOfMemory(report),
            } => Failure::OutOfMemory(OutOfMemory::from_allocator(&name, bytes, &report)),
            e => Failure::Device(DeviceFailure {
                sticky: e.is_sticky(),
                message: e.to_string(),
            }),
        })
    }

    fn failed(&self) -> bool {
        self.pending().is_some()
    }

    fn alloc(&self, name: &str, kind: BufKind, len: usize) -> CudaBuf {
        self.float_buf(name, kind, len, |_| Fill::Zeros)
    }

    fn alloc_overwritten(&self, name: &str, kind: BufKind, len: usize) -> CudaBuf {
        self.float_buf(name, kind, len, Fill::Unspecified)
    }

    fn alloc_ids(&self, name: &str, len: usize) -> CudaIds {
        let mem = self.alloc_recorded::<u32>(name, len, Fill::Zeros);
        CudaIds {
            mem,
            host: vec![0; len],
        }
    }

    fn len(&self, buf: &CudaBuf) -> usize {
        buf.len
    }

    fn dtype(&self, buf: &CudaBuf) -> Dtype {
        buf.dtype
    }

    fn cast(&self, src: &CudaBuf, dst: &mut CudaBuf) {
        self.run(|| {
            same_len("cast", src.len, dst.len)?;
            let name = format!("cast_{}_{}", src.dtype.name(), dst.dtype.name());
            let n = dst.len as u64;
            self.launch_vec8(&name, n, &[src, dst], args![src, dst, U64(n)])
        })
    }

    fn cast_all(&self, src: &[&CudaBuf], dst: &mut [CudaBuf]) {
        let to = dst.first().map(|d| d.dtype);
        let four_at_once = src.len() == dst.len()
            && src.iter().all(|s| s.dtype == Dtype::F32)
            && matches!(to, Some(Dtype::Bf16 | Dtype::F16))
            && dst.iter().all(|d| Some(d.dtype) == to);
        if !four_at_once {
            for (src, dst) in src.iter().zip(dst) {
                self.cast(src, dst);
            }
            return;
        }
        for (src, dst) in src.chunks(4).zip(dst.chunks_mut(4)) {
            self.run(|| self.cast_four(src, dst));
        }
    }

    fn upload(&self, dst: &mut CudaBuf, src: &[f64]) {
        self.run(|| {
            same_len("upload", dst.len, src.len())?;
            self.copy_in(dst.ptr()?, &encode(dst.dtype, src.iter().copied()))
        })
    }

    fn upload_f32(&self, dst: &mut CudaBuf, src: &[f32]) {
        self.run(|| {
            same_len("upload", dst.len, src.len())?;
            match dst.dtype {
                Dtype::F32 => self.copy_in(dst.ptr()?, src),
                dtype => self.copy_in(dst.ptr()?, &encode(dtype, src.iter().map(|&v| v as f64))),
            }
        })
    }

    fn upload_ids(&self, dst: &mut CudaIds, src: &[u32]) {
        self.run(|| {
            same_len("upload_ids", dst.len(), src.len())?;
            dst.host.copy_from_slice(src);
            self.copy_in(dst.ptr()?, src)
        })
    }

    /// NaNs when an error is pending (see [`CudaBackend::check`]).
    fn download(&self, src: &CudaBuf) -> Vec<f64> {
        let mut host = vec![0u8; src.bytes()];
        let mut ok = false;
        self.run(|| {
            self.copy_out(&mut host, src.ptr()?)?;
            ok = true;
            Ok(())
        });
        if !ok {
            return vec![f64::NAN; src.len];
        }
        decode(src.dtype, &host)
    }

    fn fill(&self, dst: &mut CudaBuf, value: f64) {
        let n = dst.len as u64;
        let name = typed("fill", dst.dtype);
        self.run(|| self.launch_1d(&name, n, args![dst, F32(value as f32), U64(n)]))
    }

    /// One launch over a table of the tensors when they are fp32 and
    /// 16-byte aligned (a step's gradients always are), else one each.
    fn fill_all(&self, dsts: &mut [CudaBuf], value: f64) {
        let one_launch = dsts.len() <= TENSOR_TABLE
            && dsts
                .iter()
                .all(|d| d.dtype == Dtype::F32 && d.ptr().is_ok_and(|p| p % 16 == 0));
        if !one_launch {
            for dst in dsts {
                self.fill(dst, value);
            }
            return;
        }
        self.run(|| {
            let mut entries = Vec::with_capacity(2 * dsts.len());
            for d in dsts.iter().filter(|d| d.len > 0) {
                entries.extend([d.ptr()?, d.len as u64]);
            }
            if entries.is_empty() {
                return Ok(());
            }
            let table = self.table_of(&self.fill_table, &self.fill_contents, &entries)?;
            self.launch(
                "fill_multi",
                (NORM_BLOCKS as u32, 1, 1),
                (MULTI_TENSOR_THREADS, 1, 1),
                args![
                    Ptr(table),
                    U32((entries.len() / 2) as u32),
                    F32(value as f32)
                ],
            )
        })
    }

    /// Drawn on the device (`init.cu`): a model's weights never cross the
    /// bus.
    fn fill_normal(&self, dst: &mut CudaBuf, key: &RngKey, scale: f64, zeroed: Range<usize>) {
        let n = dst.len as u64;
        let name = typed("init_normal", dst.dtype);
        self.run(|| {
            self.launch_1d(
                &name,
                n,
                args![
                    dst,
                    U64(n),
                    F64(scale),
                    U64(zeroed.start as u64),
                    U64(zeroed.end as u64),
                    U32(key.seed as u32),
                    U32((key.seed >> 32) as u32),
                    U32(key.step as u32),
                    U32((key.step >> 32) as u32),
                    U32(key.stream)
                ],
            )
        })
    }

    fn add(&self, a: &CudaBuf, b: &CudaBuf, out: &mut CudaBuf) {
        self.map("add", &[a, b], out)
    }

    fn add_assign(&self, acc: &mut CudaBuf, x: &CudaBuf) {
        self.run(|| {
            same_len("add_assign", acc.len, x.len)?;
            let name = format!("add_assign_{}_{}", acc.dtype.name(), x.dtype.name());
            let n = acc.len as u64;
            self.launch_1d(&name, n, args![acc, x, U64(n)])
        })
    }

    fn scale(&self, buf: &mut CudaBuf, factor: f64) {
        let n = buf.len as u64;
        let name = typed("scale", buf.dtype);
        self.run(|| self.launch_1d(&name, n, args![buf, F32(factor as f32), U64(n)]))
    }

    /// Per-block fp64 partials on the device, added on the host in block
    /// order: deterministic. NaN when an error is pending.
    fn sum_squares(&self, buf: &CudaBuf) -> f64 {
        let mut total = f64::NAN;
        self.run(|| {
            if buf.len == 0 {
                total = 0.0;
                return Ok(());
            }
            let partials = self.norm_partials.ptr();
            self.launch(
                &typed("sum_squares", buf.dtype),
                (NORM_BLOCKS as u32, 1, 1),
                (THREADS, 1, 1),
                args![buf, U64(buf.len as u64), Ptr(partials)],
            )?;
            let mut host = vec![0f64; NORM_BLOCKS];
            self.copy_out(&mut host, partials)?;
            total = host.iter().sum();
            Ok(())
        });
        total
    }

    fn matmul(
        &self,
        shape: &MatmulShape,
        alpha: f64,
        a: &CudaBuf,
        b: &CudaBuf,
        beta: f64,
        c: &mut CudaBuf,
    ) {
        self.run(|| {
            let s = shape;
            need("matmul", a.len >= s.batch * s.m * s.k, || {
                "A too small".into()
            })?;
            need("matmul", b.len >= s.batch * s.k * s.n, || {
                "B too small".into()
            })?;
            need("matmul", c.len >= s.batch * s.m * s.n, || {
                "C too small".into()
            })?;
            let operands = act("matmul", &[a, b])?;
            need(
                "matmul",
                c.dtype == operands || (operands.is_half() && c.dtype == Dtype::F32),
                || format!("{operands} operands into a {} result", c.dtype),
            )?;
            if s.batch * s.m * s.n == 0 {
                return Ok(());
            }
            let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: sizes checked above; the buffers are live until the
            // caller drops them, and a drop returns the block to the caching
            // allocator, which only reuses it on this stream (in order) or
            // after an event on another stream.
            unsafe {
                blas.gemm(
                    s,
                    self.precision,
                    (operands, c.dtype),
                    alpha as f32,
                    a.ptr()?,
                    b.ptr()?,
                    beta as f32,
                    c.ptr()?,
                )
            }?;
            AtomicCounters::add(&self.counters.blas_calls, 1);
            Ok(())
        })
    }

    fn bias_add(&self, out: &mut CudaBuf, bias: &CudaBuf, n: usize) {
        self.run(|| {
            same_len("bias_add", bias.len, n)?;
            rows_of("bias_add", out.len, n)?;
            master("bias_add", &[bias])?;
            let name = typed("bias_add", out.dtype);
            let len = out.len as u64;
            self.launch_vec8(
                &name,
                len,
                &[out, bias],
                args![out, bias, U64(len), U32(u32_of("bias_add", n)?)],
            )
        })
    }

    fn bias_backward(&self, dout: &CudaBuf, dbias: &mut CudaBuf, n: usize) {
        self.run(|| self.column_sums("bias_backward", dout, dbias, n))
    }

    fn layernorm_forward(
        &self,
        x: &CudaBuf,
        gamma: &CudaBuf,
        beta: &CudaBuf,
        n: usize,
        eps: f64,
        out: &mut CudaBuf,
        mean: &mut CudaBuf,
        rstd: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "layernorm_forward";
            let (rows, dtype) = layernorm_operands(op, x, &[out], n, &[gamma, beta], mean, rstd)?;
            let buffers = args![x, gamma, beta, out, mean, rstd];
            self.launch_layernorm(op, dtype, rows, n, buffers, &[F32(eps as f32)])
        })
    }

    fn layernorm_backward(
        &self,
        dout: &CudaBuf,
        x: &CudaBuf,
        gamma: &CudaBuf,
        mean: &CudaBuf,
        rstd: &CudaBuf,
        n: usize,
        dx: &mut CudaBuf,
        dgamma: &mut CudaBuf,
        dbeta: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "layernorm_backward";
            let (rows, dtype) =
                layernorm_operands(op, x, &[dout, dx], n, &[gamma, dgamma, dbeta], mean, rstd)?;
            if rows == 0 {
                return Ok(());
            }
            let buffers = args![dout, x, gamma, mean, rstd, dx];
            self.launch_layernorm("layernorm_backward_dx", dtype, rows, n, buffers, &[])?;
            self.layernorm_params(dout, x, mean, rstd, dgamma, dbeta, dtype)
        })
    }

    fn permute_heads(&self, x: &CudaBuf, out: &mut CudaBuf, b: usize, s: usize, heads: usize) {
        self.permute("permute_heads", x, out, b, s, heads)
    }

    fn unpermute_heads(&self, x: &CudaBuf, out: &mut CudaBuf, b: usize, s: usize, heads: usize) {
        self.permute("unpermute_heads", x, out, b, s, heads)
    }

    fn softmax_forward(
        &self,
        scores: &CudaBuf,
        mask: &CudaIds,
        b: usize,
        heads: usize,
        s: usize,
        scale: f64,
        probs: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "softmax_forward";
            same_len(op, scores.len, b * heads * s * s)?;
            same_len(op, probs.len, scores.len)?;
            same_len(op, mask.len(), b * s)?;
            let dtype = act(op, &[scores, probs])?;
            self.launch_rows(
                &typed(op, dtype),
                (b * heads * s) as u64,
                args![
                    scores,
                    mask,
                    probs,
                    U32(u32_of(op, b)?),
                    U32(u32_of(op, heads)?),
                    U32(u32_of(op, s)?),
                    F32(scale as f32),
                ],
            )
        })
    }

    fn softmax_backward(
        &self,
        dprobs: &CudaBuf,
        probs: &CudaBuf,
        s: usize,
        scale: f64,
        dscores: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "softmax_backward";
            same_len(op, dprobs.len, probs.len)?;
            same_len(op, dscores.len, probs.len)?;
            let dtype = act(op, &[dprobs, probs, dscores])?;
            let rows = rows_of(op, probs.len, s)? as u64;
            self.launch_rows(
                &typed(op, dtype),
                rows,
                args![
                    dprobs,
                    probs,
                    dscores,
                    U64(rows),
                    U32(u32_of(op, s)?),
                    F32(scale as f32),
                ],
            )
        })
    }

    fn gelu_forward(&self, x: &CudaBuf, out: &mut CudaBuf) {
        self.run(|| {
            same_len("gelu_forward", x.len, out.len)?;
            let dtype = act("gelu_forward", &[x, out])?;
            let n = x.len as u64;
            // No bias (the trait adds it separately), nothing to save.
            let args = args![x, Ptr(0), Ptr(0), out, U64(n), U32(1)];
            self.launch_vec8(&typed("bias_gelu_forward", dtype), n, &[x, out], args)
        })
    }

    fn gelu_backward(&self, x: &CudaBuf, dout: &CudaBuf, dx: &mut CudaBuf) {
        self.map8("gelu_backward", &[x, dout], dx)
    }

    fn gelu_backward_in_place(&self, x: &CudaBuf, d: &mut CudaBuf) {
        self.run(|| {
            let op = "gelu_backward";
            same_len(op, x.len, d.len)?;
            let dtype = act(op, &[x, d])?;
            let n = d.len as u64;
            // `d` is both `dout` and `dx`: each thread loads its elements of
            // `dout` before it stores the same elements of `dx`, and no
            // other thread touches them (activation.cu).
            let args = args![x, d, d, U64(n)];
            self.launch_vec8(&typed(op, dtype), n, &[x, d], args)
        })
    }

    fn tanh_forward(&self, x: &CudaBuf, out: &mut CudaBuf) {
        self.map("tanh_forward", &[x], out)
    }

    fn tanh_backward(&self, out: &CudaBuf, dout: &CudaBuf, dx: &mut CudaBuf) {
        self.map("tanh_backward", &[out, dout], dx)
    }

    fn relu_forward(&self, x: &CudaBuf, out: &mut CudaBuf) {
        self.map("relu_forward", &[x], out)
    }

    fn relu_backward(&self, out: &CudaBuf, dout: &CudaBuf, dx: &mut CudaBuf) {
        self.map("relu_backward", &[out, dout], dx)
    }

    fn dropout_forward(&self, x: &CudaBuf, out: &mut CudaBuf, p: f64, key: RngKey) {
        self.dropout(x, out, p, key)
    }

    fn dropout_backward(&self, dout: &CudaBuf, dx: &mut CudaBuf, p: f64, key: RngKey) {
        self.dropout(dout, dx, p, key)
    }

    fn embedding_forward(
        &self,
        ids: &CudaIds,
        table: &CudaBuf,
        dim: usize,
        out: &mut CudaBuf,
        accumulate: bool,
    ) {
        self.run(|| {
            let op = "embedding_forward";
            let rows = embedding_operands(op, ids, table, None, dim, out)?;
            self.launch_1d(
                &typed(op, out.dtype),
                out.len as u64,
                args![
                    ids,
                    table,
                    out,
                    U64(ids.len() as u64),
                    U32(u32_of(op, dim)?),
                    U32(u32_of(op, rows)?),
                    U32(accumulate as u32),
                ],
            )
        })
    }

    fn embedding_backward(
        &self,
        ids: &CudaIds,
        dout: &CudaBuf,
        dim: usize,
        dtable: &mut CudaBuf,
        rows: Option<&mut RowSlots>,
    ) {
        self.run(|| {
            let op = "embedding_backward";
            let table_rows = rows.as_ref().map(|r| r.table_rows());
            let slots = embedding_operands(op, ids, dtable, table_rows, dim, dout)?;
            if ids.is_empty() {
                return Ok(());
            }
            let (mut csr, unique) = embedding_csr(&ids.host);
            if let Some(rows) = rows {
                // The kernel adds each id's tokens into the row its CSR
                // names: the id's slot.
                let first = csr.len() - unique;
                rows.assign(&mut csr[first..], slots)
                    .map_err(|message| CudaError::Invalid { op, message })?;
            }
            // Kernel scratch: a few KiB for a batch, freed when this returns
            // (the allocator reuses it in stream order).
            let scratch = self
                .new_buf::<u32>("embedding csr", csr.len(), Fill::Zeros)?
                .expect("a non-empty batch has a non-empty csr");
            self.copy_in(scratch.ptr(), &csr)?;
            // Blocks of (32 columns, 8 row phases), as `embedding.cu` says.
            self.launch(
                &typed(op, dout.dtype),
                (
                    u32_of(op, dim.div_ceil(32))?,
                    (unique as u32).min(u16::MAX as u32),
                    1,
                ),
                (32, 8, 1),
                args![
                    Ptr(scratch.ptr()),
                    dout,
                    dtable,
                    U32(u32_of(op, ids.len())?),
                    U32(u32_of(op, unique)?),
                    U32(u32_of(op, dim)?),
                ],
            )
        })
    }

    fn cls_forward(&self, x: &CudaBuf, out: &mut CudaBuf, b: usize, s: usize) {
        self.run(|| self.per_sequence("cls_forward", out, x, (b, s), args![x, out], out.len))
    }

    fn cls_backward(&self, dout: &CudaBuf, dx: &mut CudaBuf, b: usize, s: usize) {
        self.run(|| self.per_sequence("cls_backward", dout, dx, (b, s), args![dout, dx], dx.len))
    }

    fn mean_pool(&self, x: &CudaBuf, mask: &CudaIds, b: usize, s: usize, out: &mut CudaBuf) {
        self.run(|| {
            same_len("mean_pool", mask.len(), b * s)?;
            let args = args![x, mask, out];
            self.per_sequence("mean_pool", out, x, (b, s), args, out.len)
        })
    }

    fn rel_pos_gather(
        &self,
        shape: &RelPosShape,
        alpha: f64,
        rel: &CudaBuf,
        idx: &CudaIds,
        scores: &mut CudaBuf,
    ) {
        self.run(|| self.rel_pos(RelPosWay::Gather, shape, alpha, rel, idx, scores))
    }

    fn rel_pos_scatter(
        &self,
        shape: &RelPosShape,
        alpha: f64,
        dscores: &CudaBuf,
        idx: &CudaIds,
        drel: &mut CudaBuf,
    ) {
        self.run(|| self.rel_pos(RelPosWay::Scatter, shape, alpha, drel, idx, dscores))
    }

    fn mask_rows(&self, x: &mut CudaBuf, mask: &CudaIds, n: usize) {
        self.run(|| {
            let op = "mask_rows";
            same_len(op, x.len, mask.len() * n)?;
            self.launch_1d(
                &typed(op, x.dtype),
                x.len as u64,
                args![x, mask, U64(x.len as u64), U32(u32_of(op, n)?)],
            )
        })
    }

    /// Per-row weighted losses in fp64 on the device, added on the host in
    /// row order. NaN when an error is pending.
    fn cross_entropy_forward(
        &self,
        logits: &CudaBuf,
        t: &LossTargets<'_, CudaBuf, CudaIds>,
    ) -> f64 {
        let mut loss = f64::NAN;
        self.run(|| {
            let op = "cross_entropy_forward";
            let w = Self::loss_operands(logits, t)?;
            let rows = t.labels.len();
            if rows == 0 {
                loss = 0.0 / t.denom;
                return Ok(());
            }
            let row_loss = self
                .new_buf::<f64>("cross-entropy rows", rows, Fill::Zeros)?
                .expect("rows > 0");
            let sizes = [U32(u32_of(op, rows)?), U32(u32_of(op, t.classes)?)];
            let args = [
                args![logits, t.labels, Ptr(w), Ptr(row_loss.ptr())].as_slice(),
                &sizes,
            ]
            .concat();
            self.launch_1d(&typed(op, logits.dtype), rows as u64, &args)?;
            let mut host = vec![0f64; rows];
            self.copy_out(&mut host, row_loss.ptr())?;
            loss = host.iter().sum::<f64>() / t.denom;
            Ok(())
        });
        loss
    }

    fn cross_entropy_backward(
        &self,
        logits: &CudaBuf,
        t: &LossTargets<'_, CudaBuf, CudaIds>,
        dloss: f64,
        dlogits: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "cross_entropy_backward";
            let w = Self::loss_operands(logits, t)?;
            same_len(op, dlogits.len, logits.len)?;
            let dtype = act(op, &[logits, dlogits])?;
            let rows = t.labels.len();
            let sizes = [U32(u32_of(op, rows)?), U32(u32_of(op, t.classes)?)];
            let scale = [F64(t.denom), F64(dloss)];
            let args = [
                args![logits, t.labels, Ptr(w), dlogits].as_slice(),
                &sizes,
                &scale,
            ]
            .concat();
            self.launch_1d(&typed(op, dtype), rows as u64, &args)
        })
    }

    fn adamw(
        &self,
        param: &mut CudaBuf,
        grad: &CudaBuf,
        m: &mut CudaBuf,
        v: &mut CudaBuf,
        step: &AdamWStep,
    ) {
        self.run(|| {
            let op = "adamw";
            all_len(op, param.len, &[grad, m, v])?;
            master(op, &[param, grad, m, v])?;
            let h = adamw_scalars(step);
            let n = param.len as u64;
            let args = [args![param, grad, m, v, U64(n)].as_slice(), &h].concat();
            self.launch_1d("adamw_f32", n, &args)
        })
    }

    fn sgd(&self, param: &mut CudaBuf, grad: &CudaBuf, lr: f64) {
        self.run(|| {
            same_len("sgd", grad.len, param.len)?;
            master("sgd", &[param, grad])?;
            let n = param.len as u64;
            self.launch_1d("sgd_f32", n, args![param, grad, U64(n), F32(lr as f32)])
        })
    }

    fn attention_forward(
        &self,
        shape: &AttentionShape,
        x: &AttentionInputs<'_, CudaBuf, CudaIds>,
        out: &mut CudaBuf,
        lse: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "attention_forward";
            let &AttentionInputs { q, k, v, mask, key } = x;
            let dtype = Self::attention_check(op, shape, &[q, k, v, out], mask, &[lse])?;
            if shape.is_empty() {
                return Ok(());
            }
            let (name, grid, block) = self.attention_kernel(shape, dtype, op, &[k, v])?;
            let tail = attention_args(op, shape, key)?;
            let args = [args![q, k, v, mask, out, lse].as_slice(), &tail].concat();
            self.launch(&name, grid, block, &args)
        })
    }

    fn attention_backward(
        &self,
        shape: &AttentionShape,
        x: &AttentionInputs<'_, CudaBuf, CudaIds>,
        out: &CudaBuf,
        dout: &CudaBuf,
        lse: &CudaBuf,
        delta: &mut CudaBuf,
        dq: &mut CudaBuf,
        dk: &mut CudaBuf,
        dv: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "attention_backward";
            let &AttentionInputs { q, k, v, mask, key } = x;
            let bufs = [q, k, v, out, dout, &*dq, &*dk, &*dv];
            let dtype = Self::attention_check(op, shape, &bufs, mask, &[lse, delta])?;
            if shape.is_empty() {
                return Ok(());
            }
            let tail = attention_args(op, shape, key)?;
            let delta_args = [args![out, dout, delta].as_slice(), &tail].concat();
            self.launch_rows(
                &typed("attention_backward_delta", dtype),
                shape.rows() as u64,
                &delta_args,
            )?;
            let (name, grid, block) =
                self.attention_kernel(shape, dtype, "attention_backward_dkdv", &[q, dout])?;
            let kv = [
                args![q, k, v, mask, dout, lse, delta, dk, dv].as_slice(),
                &tail,
            ]
            .concat();
            self.launch(&name, grid, block, &kv)?;
            let (name, grid, block) =
                self.attention_kernel(shape, dtype, "attention_backward_dq", &[k, v])?;
            let qa = [args![q, k, v, mask, dout, lse, delta, dq].as_slice(), &tail].concat();
            self.launch(&name, grid, block, &qa)
        })
    }

    fn bias_gelu_forward(&self, pre: &mut CudaBuf, bias: &CudaBuf, out: &mut CudaBuf) {
        self.run(|| {
            let op = "bias_gelu_forward";
            same_len(op, pre.len, out.len)?;
            rows_of(op, pre.len, bias.len)?;
            master(op, &[bias])?;
            let dtype = act(op, &[pre, out])?;
            let n = pre.len as u64;
            // `pre` is read and written in place, each element by one thread.
            let cols = U32(u32_of(op, bias.len)?);
            let args = args![Ptr(pre.ptr()?), bias, pre, out, U64(n), cols];
            self.launch_vec8(&typed(op, dtype), n, &[pre, bias, out], args)
        })
    }

    fn residual_layernorm_forward(
        &self,
        sum: &mut CudaBuf,
        bias: &CudaBuf,
        residual: &CudaBuf,
        dropout: f64,
        key: Option<RngKey>,
        gamma: &CudaBuf,
        beta: &CudaBuf,
        eps: f64,
        out: &mut CudaBuf,
        mean: &mut CudaBuf,
        rstd: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "residual_layernorm_forward";
            let n = gamma.len;
            let per_column = [bias, gamma, beta];
            let (rows, dtype) =
                layernorm_operands(op, sum, &[residual, out], n, &per_column, mean, rstd)?;
            let buffers = args![sum, bias, residual, gamma, beta, out, mean, rstd];
            let tail = [&[F32(eps as f32)][..], &dropout_args(op, dropout, key)?].concat();
            let vectors = [&*sum, bias, residual, gamma, beta, &*out];
            self.launch_residual_layernorm(op, dtype, rows, n, &vectors, buffers, &tail)
        })
    }

    fn residual_layernorm_backward(
        &self,
        dout: &CudaBuf,
        sum: &CudaBuf,
        gamma: &CudaBuf,
        mean: &CudaBuf,
        rstd: &CudaBuf,
        dropout: f64,
        key: Option<RngKey>,
        d_sum: &mut CudaBuf,
        d_branch: Option<&mut CudaBuf>,
        dgamma: &mut CudaBuf,
        dbeta: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "residual_layernorm_backward";
            let n = gamma.len;
            let per_column = [gamma, &*dgamma, &*dbeta];
            let (rows, dtype) =
                layernorm_operands(op, sum, &[dout, d_sum], n, &per_column, mean, rstd)?;
            let mut vectors = vec![dout, sum, gamma, &*d_sum];
            let branch = match (&d_branch, key) {
                (Some(b), Some(_)) => {
                    same_len(op, b.len, sum.len)?;
                    act(op, &[sum, b])?;
                    vectors.push(b);
                    b.ptr()?
                }
                _ => 0,
            };
            let buffers = args![dout, sum, gamma, mean, rstd, d_sum, Ptr(branch)];
            let mask = dropout_args(op, dropout, key)?;
            self.launch_residual_layernorm(op, dtype, rows, n, &vectors, buffers, &mask)?;
            self.layernorm_params(dout, sum, mean, rstd, dgamma, dbeta, dtype)
        })
    }

    fn adamw_all(
        &self,
        params: &mut [CudaBuf],
        grads: &[CudaBuf],
        m: &mut [CudaBuf],
        v: &mut [CudaBuf],
        decay: &[bool],
        step: &AdamWStep,
        grad_scale: f64,
        clip: Option<f64>,
        sparse: Option<SparseRows<'_, CudaIds>>,
    ) {
        self.run(|| {
            let op = "adamw_all";
            let count = params.len();
            need(
                op,
                grads.len() == count && m.len() == count && v.len() == count,
                || "parameter, gradient and moment lists differ in length".into(),
            )?;
            need(op, decay.len() == count, || {
                "one decay flag per tensor".into()
            })?;
            need(op, count <= TENSOR_TABLE, || {
                format!("{count} tensors; one launch takes at most {TENSOR_TABLE}")
            })?;
            let mut entries = Vec::with_capacity(TENSOR_ENTRY_BYTES / 8 * count);
            for i in 0..count {
                let (p, g, mi, vi) = (&params[i], &grads[i], &m[i], &v[i]);
                all_len(op, p.len, &[mi, vi])?;
                master(op, &[p, g, mi, vi])?;
                let rows = sparse.filter(|s| s.tensor == i);
                let (slots, width) = match rows {
                    None => {
                        same_len(op, g.len, p.len)?;
                        (0, 0)
                    }
                    Some(s) => {
                        // Rows of whole 4-element groups, row indices of 32
                        // bits (as the kernel reads them).
                        need(op, s.width > 0 && s.width % 4 == 0, || {
                            format!("row width {} of tensor {i} is not a multiple of 4", s.width)
                        })?;
                        need(op, g.len % s.width == 0, || {
                            format!("gradient of tensor {i} is not whole rows of {}", s.width)
                        })?;
                        need(op, p.len <= u32::MAX as usize, || {
                            format!("tensor {i} has 2^32 elements or more")
                        })?;
                        same_len(op, s.slots.len() * s.width, p.len)?;
                        // A slot past the gradient would be read on the
                        // device (the uploaded map is the host's copy).
                        let rows = (g.len / s.width) as u32;
                        let inside = s.slots.host().iter().all(|&r| r == NO_SLOT || r < rows);
                        need(op, inside, || {
                            format!("a slot of tensor {i} is past its gradient's {rows} rows")
                        })?;
                        (s.slots.ptr()?, s.width as u64)
                    }
                };
                let ptrs = [p.ptr()?, g.ptr()?, mi.ptr()?, vi.ptr()?];
                // The kernels take 4 elements at a time with 16-byte accesses.
                need(op, ptrs.iter().all(|a| a % 16 == 0), || {
                    format!("tensor {i} is not 16-byte aligned")
                })?;
                entries.extend(ptrs);
                entries.extend([p.len as u64, decay[i] as u64, g.len as u64, slots, width]);
            }
            let table = self.tensor_table_of(&entries)?;
            let partials = self.norm_partials.ptr();
            let blocks = NORM_BLOCKS as u32;
            if clip.is_some() {
                self.launch(
                    "sum_squares_multi",
                    (blocks, 1, 1),
                    (MULTI_TENSOR_THREADS, 1, 1),
                    args![Ptr(table), U32(count as u32), Ptr(partials)],
                )?;
            }
            // Decayed tensors take the step's decay; the others none (the
            // kernel picks per tensor).
            let h = adamw_scalars(step);
            let head = args![
                Ptr(table),
                U32(count as u32),
                Ptr(partials),
                U32(blocks),
                F32(grad_scale as f32),
                F32(clip.unwrap_or(0.0) as f32),
            ];
            let args = [head.as_slice(), &h].concat();
            self.launch(
                "adamw_multi",
                (blocks, 1, 1),
                (MULTI_TENSOR_THREADS, 1, 1),
                &args,
            )
        })
    }
}

/// AdamW's scalars as the kernels take them: the CPU reference's, folded
/// in f64 then rounded once (b1, b2, 1-b1, 1-b2, lr / bc1, 1 / sqrt(bc2),
/// eps, 1 - lr * weight decay).
fn adamw_scalars(step: &AdamWStep) -> [Arg; 8] {
    let bc1 = 1.0 - step.beta1.powi(step.t as i32);
    let bc2 = 1.0 - step.beta2.powi(step.t as i32);
    [
        F32(step.beta1 as f32),
        F32(step.beta2 as f32),
        F32((1.0 - step.beta1) as f32),
        F32((1.0 - step.beta2) as f32),
        F32((step.lr / bc1) as f32),
        F32((1.0 / bc2.sqrt()) as f32),
        F32(step.eps as f32),
        F32((1.0 - step.lr * step.weight_decay) as f32),
    ]
}

impl CudaBackend {
    fn permute(
        &self,
        kernel: &'static str,
        x: &CudaBuf,
        out: &mut CudaBuf,
        b: usize,
        s: usize,
        heads: usize,
    ) {
        self.run(|| {
            same_len(kernel, x.len, out.len)?;
            let dtype = act(kernel, &[x, out])?;
            let dh = rows_of(kernel, x.len, b * s * heads)?;
            self.launch_1d(
                &typed(kernel, dtype),
                x.len as u64,
                args![
                    x,
                    out,
                    U32(u32_of(kernel, b)?),
                    U32(u32_of(kernel, s)?),
                    U32(u32_of(kernel, heads)?),
                    U32(u32_of(kernel, dh)?),
                ],
            )
        })
    }

    /// LayerNorm's parameter gradients (column sums over rows of `x`'s
    /// width): one pass when few rows, else over row chunks into the
    /// backend's partials and added in chunk order.
    #[allow(clippy::too_many_arguments)]
    fn layernorm_params(
        &self,
        dout: &CudaBuf,
        x: &CudaBuf,
        mean: &CudaBuf,
        rstd: &CudaBuf,
        dgamma: &CudaBuf,
        dbeta: &CudaBuf,
        dtype: Dtype,
    ) -> Result<(), CudaError> {
        let op = "layernorm_backward_params";
        let n = dgamma.len;
        let rows = x.len / n;
        let cols = u32_of(op, n)?;
        // Chunked, the kernel writes partials [chunk][2][n] and each column
        // block's last block adds them.
        let (chunks, partials, counters) = self.column_split(op, rows, 2 * n, cols.div_ceil(32))?;
        let grid = (cols.div_ceil(32), chunks as u32, 1);
        let args = args![
            dout,
            x,
            mean,
            rstd,
            dgamma,
            dbeta,
            Ptr(partials),
            Ptr(counters),
            U64(rows as u64),
            U32(cols)
        ];
        self.launch(&typed(op, dtype), grid, (32, 8, 1), args)
    }
}

/// Which way a relative-position op moves values between the
/// relative-embedding scores `rel` `[heads * b, s, span2]` and the
/// attention scores `[b * heads, s, s]`.
#[derive(Clone, Copy)]
enum RelPosWay {
    /// `rel` into the scores, a thread per score.
    Gather,
    /// Score gradients into `rel`'s, a thread per row of `rel`: each
    /// thread adds its row's buckets in order, so the sums are
    /// deterministic.
    Scatter,
}

impl CudaBackend {
    /// `rel_pos_gather` or `rel_pos_scatter` after checking the sizes and,
    /// on the host copy of the bucket table `idx` (`[s, s]`), that every
    /// bucket is below `span2`.
    fn rel_pos(
        &self,
        way: RelPosWay,
        shape: &RelPosShape,
        alpha: f64,
        rel: &CudaBuf,
        idx: &CudaIds,
        scores: &CudaBuf,
    ) -> Result<(), CudaError> {
        let RelPosShape {
            b, heads, s, span2, ..
        } = *shape;
        let (op, src, dst, threads) = match way {
            RelPosWay::Gather => ("rel_pos_gather", rel, scores, scores.len),
            RelPosWay::Scatter => ("rel_pos_scatter", scores, rel, heads * b * s),
        };
        same_len(op, rel.len, heads * b * s * span2)?;
        same_len(op, scores.len, b * heads * s * s)?;
        same_len(op, idx.len(), s * s)?;
        if let Some(k) = idx.host.iter().find(|&&k| k as usize >= span2) {
            return Err(CudaError::Invalid {
                op,
                message: format!("bucket {k} is not below {span2}"),
            });
        }
        let dtype = act(op, &[rel, scores])?;
        let mut args = args![src, idx, dst].to_vec();
        for v in [b, heads, s, span2] {
            args.push(U32(u32_of(op, v)?));
        }
        args.extend([U32(shape.transpose as u32), F32(alpha as f32)]);
        self.launch_1d(&typed(op, dtype), threads as u64, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(len: usize, dtype: Dtype) -> CudaBuf {
        CudaBuf {
            mem: None,
            len,
            dtype,
        }
    }

    #[test]
    fn layernorm_operands_give_rows_and_type_and_name_what_is_wrong() {
        let (x, out) = (buf(12, Dtype::Bf16), buf(12, Dtype::Bf16));
        let (gamma, beta) = (buf(4, Dtype::F32), buf(4, Dtype::F32));
        let (mean, rstd) = (buf(3, Dtype::F32), buf(3, Dtype::F32));
        let ok = layernorm_operands("ln", &x, &[&out], 4, &[&gamma, &beta], &mean, &rstd);
        assert_eq!(ok.unwrap(), (3, Dtype::Bf16));
        let message = |r: Result<(usize, Dtype), CudaError>| r.unwrap_err().to_string();
        // Not rows of n; an output of another length; a parameter of
        // another width; statistics of another height; 16-bit statistics;
        // activations of two types.
        let wide = buf(5, Dtype::F32);
        let short = buf(2, Dtype::F32);
        let half = buf(3, Dtype::Bf16);
        let f32_out = buf(12, Dtype::F32);
        for (case, r) in [
            (
                "rows",
                layernorm_operands("ln", &x, &[&out], 5, &[], &mean, &rstd),
            ),
            (
                "out",
                layernorm_operands("ln", &x, &[&wide], 4, &[&gamma], &mean, &rstd),
            ),
            (
                "param",
                layernorm_operands("ln", &x, &[&out], 4, &[&wide], &mean, &rstd),
            ),
            (
                "stats",
                layernorm_operands("ln", &x, &[&out], 4, &[&gamma], &short, &rstd),
            ),
            (
                "f32",
                layernorm_operands("ln", &x, &[&out], 4, &[&gamma], &half, &rstd),
            ),
            (
                "types",
                layernorm_operands("ln", &x, &[&f32_out], 4, &[&gamma], &mean, &rstd),
            ),
        ] {
            let m = message(r);
            assert!(m.contains("ln"), "{case}: {m}");
        }
    }
}

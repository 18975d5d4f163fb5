//! The [`Backend`] operations as kernel launches and cuBLAS calls.
//!
//! Each operation checks its sizes on the host first (a mismatch is a
//! recorded [`CudaError::Invalid`], never an out-of-bounds kernel), then
//! queues its work on the backend's stream. See the kernel files for what
//! each kernel computes and costs.

use super::buffer::embedding_csr;
use super::{Arg, CudaBackend, CudaBuf, CudaError, CudaIds, KernelArg, NORM_BLOCKS, THREADS, args};
use crate::backend::{
    AdamWStep, Backend, DeviceFailure, Failure, MatmulPrecision, MatmulShape, RelPosShape,
};
use crate::memory::{BufKind, OutOfMemory};
use crate::rng::{RngKey, dropout_threshold};
use Arg::{F32, F64, Ptr, U32, U64};

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

/// The kernel's `b, s, h` for a per-sequence `[b, h]` buffer of `rows_len`
/// elements beside a per-token `[b, s, h]` one of `tokens_len`, checked.
fn sequence_shape(
    op: &'static str,
    rows_len: usize,
    tokens_len: usize,
    b: usize,
    s: usize,
) -> Result<[Arg; 3], CudaError> {
    let h = rows_of(op, rows_len, b)?;
    same_len(op, tokens_len, b * s * h)?;
    Ok([
        U32(u32_of(op, b)?),
        U32(u32_of(op, s)?),
        U32(u32_of(op, h)?),
    ])
}

/// Checks that every buffer in `bufs` holds `len` elements.
fn all_len(op: &'static str, len: usize, bufs: &[&CudaBuf]) -> Result<(), CudaError> {
    bufs.iter().try_for_each(|b| same_len(op, b.len, len))
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

    fn dropout(&self, x: &CudaBuf, out: &mut CudaBuf, p: f64, key: RngKey) {
        self.run(|| {
            same_len("dropout", x.len, out.len)?;
            need("dropout", (0.0..1.0).contains(&p), || {
                format!("probability {p} not in [0, 1)")
            })?;
            let keep_scale = (1.0 / (1.0 - p)) as f32;
            let groups = (x.len as u64).div_ceil(4);
            let blocks = groups.div_ceil(THREADS as u64).clamp(1, 1 << 16) as u32;
            if x.len == 0 {
                return Ok(());
            }
            self.launch(
                "dropout",
                (blocks, 1, 1),
                (THREADS, 1, 1),
                args![
                    x,
                    out,
                    U64(x.len as u64),
                    U32(dropout_threshold(p)),
                    F32(keep_scale),
                    U32(key.seed as u32),
                    U32((key.seed >> 32) as u32),
                    U32(key.step as u32),
                    U32((key.step >> 32) as u32),
                    U32(key.stream),
                ],
            )
        })
    }

    fn ce_weights(&self, weights: Option<&CudaBuf>, classes: usize) -> Result<u64, CudaError> {
        match weights {
            None => Ok(0),
            Some(w) => {
                same_len("cross_entropy", w.len, classes)?;
                Ok(w.ptr()?)
            }
        }
    }

    fn validate_labels(
        labels: &CudaIds,
        logits: &CudaBuf,
        classes: usize,
    ) -> Result<(), CudaError> {
        need("cross_entropy", classes > 0, || "zero classes".into())?;
        same_len("cross_entropy", logits.len, labels.len() * classes)?;
        if let Some((row, &y)) = labels
            .host
            .iter()
            .enumerate()
            .find(|&(_, &y)| y as usize >= classes)
        {
            return Err(CudaError::Invalid {
                op: "cross_entropy",
                message: format!("label {y} of row {row} is not below {classes} classes"),
            });
        }
        Ok(())
    }
}

impl Backend for CudaBackend {
    type Buf = CudaBuf;
    type Ids = CudaIds;

    fn float_bytes(&self) -> usize {
        4
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

    fn alloc(&self, name: &str, _kind: BufKind, len: usize) -> CudaBuf {
        CudaBuf {
            mem: self.alloc_recorded::<f32>(name, len),
            len,
        }
    }

    fn alloc_ids(&self, name: &str, len: usize) -> CudaIds {
        let mem = self.alloc_recorded::<u32>(name, len);
        CudaIds {
            mem,
            host: vec![0; len],
        }
    }

    fn len(&self, buf: &CudaBuf) -> usize {
        buf.len
    }

    fn upload(&self, dst: &mut CudaBuf, src: &[f64]) {
        self.run(|| {
            same_len("upload", dst.len, src.len())?;
            let host: Vec<f32> = src.iter().map(|&v| v as f32).collect();
            self.copy_in(dst.ptr()?, &host)
        })
    }

    fn upload_f32(&self, dst: &mut CudaBuf, src: &[f32]) {
        self.run(|| {
            same_len("upload", dst.len, src.len())?;
            self.copy_in(dst.ptr()?, src)
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
        let mut host = vec![f32::NAN; src.len];
        let mut ok = false;
        self.run(|| {
            self.copy_out(&mut host, src.ptr()?)?;
            ok = true;
            Ok(())
        });
        if !ok {
            host.iter_mut().for_each(|v| *v = f32::NAN);
        }
        host.into_iter().map(f64::from).collect()
    }

    fn fill(&self, dst: &mut CudaBuf, value: f64) {
        let n = dst.len as u64;
        self.run(|| self.launch_1d("fill", n, args![dst, F32(value as f32), U64(n)]))
    }

    fn add(&self, a: &CudaBuf, b: &CudaBuf, out: &mut CudaBuf) {
        self.map("add", &[a, b], out)
    }

    fn add_assign(&self, acc: &mut CudaBuf, x: &CudaBuf) {
        self.run(|| {
            same_len("add_assign", acc.len, x.len)?;
            self.launch_1d(
                "add_assign",
                acc.len as u64,
                args![acc, x, U64(acc.len as u64)],
            )
        })
    }

    fn scale(&self, buf: &mut CudaBuf, factor: f64) {
        let n = buf.len as u64;
        self.run(|| self.launch_1d("scale", n, args![buf, F32(factor as f32), U64(n)]))
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
                "sum_squares",
                (NORM_BLOCKS, 1, 1),
                (THREADS, 1, 1),
                args![buf, U64(buf.len as u64), Ptr(partials)],
            )?;
            let mut host = vec![0f64; NORM_BLOCKS as usize];
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
                    alpha as f32,
                    a.ptr()?,
                    b.ptr()?,
                    beta as f32,
                    c.ptr()?,
                )
            }
        })
    }

    fn bias_add(&self, out: &mut CudaBuf, bias: &CudaBuf, n: usize) {
        self.run(|| {
            same_len("bias_add", bias.len, n)?;
            rows_of("bias_add", out.len, n)?;
            self.launch_1d(
                "bias_add",
                out.len as u64,
                args![out, bias, U64(out.len as u64), U32(u32_of("bias_add", n)?),],
            )
        })
    }

    fn bias_backward(&self, dout: &CudaBuf, dbias: &mut CudaBuf, n: usize) {
        self.run(|| {
            same_len("bias_backward", dbias.len, n)?;
            rows_of("bias_backward", dout.len, n)?;
            let cols = u32_of("bias_backward", n)?;
            self.launch(
                "bias_backward",
                (cols.div_ceil(32), 1, 1),
                (32, 8, 1),
                args![dout, dbias, U64((dout.len / n) as u64), U32(cols),],
            )
        })
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
            let rows = rows_of(op, x.len, n)?;
            all_len(op, x.len, &[out])?;
            all_len(op, n, &[gamma, beta])?;
            all_len(op, rows, &[mean, rstd])?;
            self.launch_block_rows(
                op,
                rows as u64,
                args![
                    x,
                    Ptr(0), // no residual: the trait adds it separately
                    Ptr(0), // so there is no sum to store
                    gamma,
                    beta,
                    out,
                    mean,
                    rstd,
                    U64(rows as u64),
                    U32(u32_of(op, n)?),
                    F32(eps as f32),
                ],
            )
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
            let rows = rows_of(op, x.len, n)?;
            all_len(op, x.len, &[dout, dx])?;
            all_len(op, n, &[gamma, dgamma, dbeta])?;
            all_len(op, rows, &[mean, rstd])?;
            if rows == 0 {
                return Ok(());
            }
            let cols = u32_of(op, n)?;
            self.launch_block_rows(
                "layernorm_backward_dx",
                rows as u64,
                args![dout, x, gamma, mean, rstd, dx, U64(rows as u64), U32(cols)],
            )?;
            self.launch(
                "layernorm_backward_params",
                (cols.div_ceil(32), 1, 1),
                (32, 8, 1),
                args![
                    dout,
                    x,
                    mean,
                    rstd,
                    dgamma,
                    dbeta,
                    U64(rows as u64),
                    U32(cols),
                ],
            )
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
            self.launch_rows(
                op,
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
            let rows = rows_of(op, probs.len, s)? as u64;
            self.launch_rows(
                op,
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
            self.launch_1d(
                "bias_gelu_forward",
                x.len as u64,
                // No bias (the trait adds it separately), nothing to save.
                args![x, Ptr(0), Ptr(0), out, U64(x.len as u64), U32(1),],
            )
        })
    }

    fn gelu_backward(&self, x: &CudaBuf, dout: &CudaBuf, dx: &mut CudaBuf) {
        self.map("gelu_backward", &[x, dout], dx)
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
            let rows = rows_of(op, table.len, dim)?;
            same_len(op, out.len, ids.len() * dim)?;
            ids_below(op, ids, rows)?;
            self.launch_1d(
                op,
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

    fn embedding_backward(&self, ids: &CudaIds, dout: &CudaBuf, dim: usize, dtable: &mut CudaBuf) {
        self.run(|| {
            let op = "embedding_backward";
            let rows = rows_of(op, dtable.len, dim)?;
            same_len(op, dout.len, ids.len() * dim)?;
            ids_below(op, ids, rows)?;
            if ids.is_empty() {
                return Ok(());
            }
            let (csr, unique) = embedding_csr(&ids.host);
            // Kernel scratch: a few KiB for a batch, freed when this returns
            // (the allocator reuses it in stream order).
            let scratch = self
                .new_buf::<u32>("embedding csr", csr.len())?
                .expect("a non-empty batch has a non-empty csr");
            self.copy_in(scratch.ptr(), &csr)?;
            let threads = (dim as u32).clamp(32, THREADS).next_multiple_of(32);
            self.launch(
                op,
                ((unique as u32).min(1 << 16), 1, 1),
                (threads, 1, 1),
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
        self.run(|| {
            let shape = sequence_shape("cls_forward", out.len, x.len, b, s)?;
            let args = [args![x, out].as_slice(), &shape].concat();
            self.launch_1d("cls_forward", out.len as u64, &args)
        })
    }

    fn cls_backward(&self, dout: &CudaBuf, dx: &mut CudaBuf, b: usize, s: usize) {
        self.run(|| {
            let shape = sequence_shape("cls_backward", dout.len, dx.len, b, s)?;
            let args = [args![dout, dx].as_slice(), &shape].concat();
            self.launch_1d("cls_backward", dx.len as u64, &args)
        })
    }

    fn mean_pool(&self, x: &CudaBuf, mask: &CudaIds, b: usize, s: usize, out: &mut CudaBuf) {
        self.run(|| {
            let shape = sequence_shape("mean_pool", out.len, x.len, b, s)?;
            same_len("mean_pool", mask.len(), b * s)?;
            let args = [args![x, mask, out].as_slice(), &shape].concat();
            self.launch_1d("mean_pool", out.len as u64, &args)
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
        self.run(|| {
            let op = "rel_pos_gather";
            rel_pos_check(op, shape, rel.len, idx, scores.len)?;
            self.launch_1d(
                op,
                scores.len as u64,
                &rel_pos_args(op, shape, alpha, rel, idx, scores)?,
            )
        })
    }

    fn rel_pos_scatter(
        &self,
        shape: &RelPosShape,
        alpha: f64,
        dscores: &CudaBuf,
        idx: &CudaIds,
        drel: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "rel_pos_scatter";
            rel_pos_check(op, shape, drel.len, idx, dscores.len)?;
            let rows = (shape.heads * shape.b * shape.s) as u64;
            self.launch_1d(
                op,
                rows,
                &rel_pos_args(op, shape, alpha, dscores, idx, drel)?,
            )
        })
    }

    fn mask_rows(&self, x: &mut CudaBuf, mask: &CudaIds, n: usize) {
        self.run(|| {
            let op = "mask_rows";
            same_len(op, x.len, mask.len() * n)?;
            self.launch_1d(
                op,
                x.len as u64,
                args![x, mask, U64(x.len as u64), U32(u32_of(op, n)?),],
            )
        })
    }

    /// Per-row weighted losses in fp64 on the device, added on the host in
    /// row order. NaN when an error is pending.
    fn cross_entropy_forward(
        &self,
        logits: &CudaBuf,
        labels: &CudaIds,
        weights: Option<&CudaBuf>,
        classes: usize,
        denom: f64,
    ) -> f64 {
        let mut loss = f64::NAN;
        self.run(|| {
            let op = "cross_entropy_forward";
            Self::validate_labels(labels, logits, classes)?;
            let w = self.ce_weights(weights, classes)?;
            let rows = labels.len();
            if rows == 0 {
                loss = 0.0 / denom;
                return Ok(());
            }
            let row_loss = self
                .new_buf::<f64>("cross-entropy rows", rows)?
                .expect("rows > 0");
            self.launch_1d(
                op,
                rows as u64,
                args![
                    logits,
                    labels,
                    Ptr(w),
                    Ptr(row_loss.ptr()),
                    U32(u32_of(op, rows)?),
                    U32(u32_of(op, classes)?),
                ],
            )?;
            let mut host = vec![0f64; rows];
            self.copy_out(&mut host, row_loss.ptr())?;
            loss = host.iter().sum::<f64>() / denom;
            Ok(())
        });
        loss
    }

    fn cross_entropy_backward(
        &self,
        logits: &CudaBuf,
        labels: &CudaIds,
        weights: Option<&CudaBuf>,
        classes: usize,
        denom: f64,
        dloss: f64,
        dlogits: &mut CudaBuf,
    ) {
        self.run(|| {
            let op = "cross_entropy_backward";
            Self::validate_labels(labels, logits, classes)?;
            same_len(op, dlogits.len, logits.len)?;
            let w = self.ce_weights(weights, classes)?;
            self.launch_1d(
                op,
                labels.len() as u64,
                args![
                    logits,
                    labels,
                    Ptr(w),
                    dlogits,
                    U32(u32_of(op, labels.len())?),
                    U32(u32_of(op, classes)?),
                    F64(denom),
                    F64(dloss),
                ],
            )
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
            same_len(op, grad.len, param.len)?;
            same_len(op, m.len, param.len)?;
            same_len(op, v.len, param.len)?;
            // The CPU reference's scalars, folded in f64 then rounded once.
            let bc1 = 1.0 - step.beta1.powi(step.t as i32);
            let bc2 = 1.0 - step.beta2.powi(step.t as i32);
            self.launch_1d(
                op,
                param.len as u64,
                args![
                    param,
                    grad,
                    m,
                    v,
                    U64(param.len as u64),
                    F32(step.beta1 as f32),
                    F32(step.beta2 as f32),
                    F32((1.0 - step.beta1) as f32),
                    F32((1.0 - step.beta2) as f32),
                    F32((step.lr / bc1) as f32),
                    F32((1.0 / bc2.sqrt()) as f32),
                    F32(step.eps as f32),
                    F32((1.0 - step.lr * step.weight_decay) as f32),
                ],
            )
        })
    }

    fn sgd(&self, param: &mut CudaBuf, grad: &CudaBuf, lr: f64) {
        self.run(|| {
            same_len("sgd", grad.len, param.len)?;
            self.launch_1d(
                "sgd",
                param.len as u64,
                args![param, grad, U64(param.len as u64), F32(lr as f32),],
            )
        })
    }
}

impl CudaBackend {
    /// The grid-stride kernel `kernel(inputs..., out, n)` over buffers of
    /// one length `n`.
    fn map(&self, kernel: &'static str, inputs: &[&CudaBuf], out: &mut CudaBuf) {
        self.run(|| {
            let mut args = Vec::with_capacity(inputs.len() + 2);
            for x in inputs {
                same_len(kernel, x.len, out.len)?;
                args.push(x.arg()?);
            }
            args.extend(args![out, U64(out.len as u64)]);
            self.launch_1d(kernel, out.len as u64, &args)
        })
    }

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
            let dh = rows_of(kernel, x.len, b * s * heads)?;
            self.launch_1d(
                kernel,
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
}

/// Sizes and the bucket table (its host copy) of a relative-position op.
fn rel_pos_check(
    op: &'static str,
    shape: &RelPosShape,
    rel_len: usize,
    idx: &CudaIds,
    scores_len: usize,
) -> Result<(), CudaError> {
    let RelPosShape {
        b, heads, s, span2, ..
    } = *shape;
    same_len(op, rel_len, heads * b * s * span2)?;
    same_len(op, scores_len, b * heads * s * s)?;
    same_len(op, idx.len(), s * s)?;
    match idx.host.iter().find(|&&k| k as usize >= span2) {
        Some(k) => Err(CudaError::Invalid {
            op,
            message: format!("bucket {k} is not below {span2}"),
        }),
        None => Ok(()),
    }
}

/// The kernel arguments shared by the gather and the scatter: source,
/// table, destination, then the shape.
fn rel_pos_args(
    op: &'static str,
    shape: &RelPosShape,
    alpha: f64,
    src: &CudaBuf,
    idx: &CudaIds,
    dst: &CudaBuf,
) -> Result<Vec<Arg>, CudaError> {
    Ok(args![
        src,
        idx,
        dst,
        U32(u32_of(op, shape.b)?),
        U32(u32_of(op, shape.heads)?),
        U32(u32_of(op, shape.s)?),
        U32(u32_of(op, shape.span2)?),
        U32(shape.transpose as u32),
        F32(alpha as f32),
    ]
    .to_vec())
}

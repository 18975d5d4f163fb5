//! The CPU reference backend: rayon-parallel kernels generic over f32/f64.
//!
//! Every float or id buffer is a `Vec` registered with a [`MemTracker`], so
//! the backend reports its measured peak of tensor bytes (kernel-internal
//! scalars and the host copies made by `download` are not tensors). Kernels
//! write disjoint outputs per task and reduce in a fixed order, so results do
//! not depend on the number of threads. Large float buffers are recycled
//! through a [`pool::BufferPool`] that the tracker does not see (it still
//! counts every logical buffer), which saves the page faults of fresh
//! allocations.
//!
//! An allocation the tracker's limit refuses is recorded as the backend's
//! failure (see [`Backend::take_failure`]): the buffer holds no memory, and
//! every operation is skipped until the failure is taken.
//!
//! 16-bit storage ([`CpuBackend::for_step`]) is emulated: a bf16 or fp16
//! buffer holds `T` values that every operation rounds to its type when it
//! writes them, as a device stores them, and the tracker charges the
//! device's 2 bytes per element (the host holds `T`). It is the reference
//! the CUDA backend's 16-bit step is checked against, not a way to save host
//! memory. The fused operations ([`Kernels::Fused`]) compute what their
//! unfused compositions compute, rounding once where the device kernels
//! round once.

pub mod activation;
pub mod attention;
pub mod attention_fused;
pub mod dropout;
pub mod elementwise;
pub mod embedding;
pub mod fast_f32;
pub mod layernorm;
pub mod loss;
pub mod matmul;
pub mod optim;
pub mod pool;
pub mod rel_pos;

use std::marker::PhantomData;

use rayon::prelude::*;
use std::sync::Arc;

use super::{
    AdamWStep, AttentionInputs, AttentionShape, Backend, Dtype, Failure, Kernels, LossTargets,
    MatmulPrecision, MatmulShape, RelPosShape, RowSlots, SparseRows, Storage,
};
use crate::float::Float;
use crate::memory::oom::RecordedOom;
use crate::memory::{Allocation, BufKind, MemTracker};
use crate::rng::RngKey;
use pool::BufferPool;

/// A host buffer with its tracked allocation.
pub struct CpuBuf<T> {
    /// The values; empty when the allocation was refused.
    pub data: Vec<T>,
    len: usize,
    /// What the buffer stands for (its values are exact in this type).
    dtype: Dtype,
    /// `None` when the allocation was refused.
    _alloc: Option<Allocation>,
    /// Where `data` goes back when the buffer is dropped (float buffers).
    pool: Option<(Arc<BufferPool<T>>, Arc<MemTracker>)>,
}

impl<T> CpuBuf<T> {
    /// A buffer of `len` elements whose allocation was refused.
    fn unbacked(len: usize, dtype: Dtype) -> Self {
        CpuBuf {
            data: Vec::new(),
            len,
            dtype,
            _alloc: None,
            pool: None,
        }
    }
}

impl<T: Float> CpuBuf<T> {
    /// Rounds every value to the buffer's type (a no-op for `T`'s own).
    fn store(&mut self) {
        if self.dtype != T::DTYPE {
            let dtype = self.dtype;
            self.data
                .par_iter_mut()
                .with_min_len(1 << 12)
                .for_each(|v| *v = T::from_f64(dtype.round(v.to_f64())));
        }
    }
}

impl<T> std::fmt::Debug for CpuBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CpuBuf({} {} elements, {:?})",
            self.len, self.dtype, self._alloc
        )
    }
}

impl<T> Drop for CpuBuf<T> {
    fn drop(&mut self) {
        // Runs before `_alloc` is dropped: the tracker still counts this
        // buffer, as `BufferPool::give` expects.
        if let Some((pool, tracker)) = self.pool.take() {
            pool.give(std::mem::take(&mut self.data), &tracker);
        }
    }
}

/// The CPU reference backend over host floats `T` (f32 or f64; see the
/// module doc). It starts with fp32 products, every kind stored as `T` and
/// the reference kernels; [`CpuBackend::for_step`] changes them.
pub struct CpuBackend<T: Float> {
    tracker: Arc<MemTracker>,
    pool: Arc<BufferPool<T>>,
    precision: MatmulPrecision,
    storage: Storage,
    kernels: Kernels,
    /// The refused allocation, until the training loop takes it.
    failure: RecordedOom,
    _t: PhantomData<T>,
}

impl<T: Float> Default for CpuBackend<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Float> CpuBackend<T> {
    /// A backend with a tracker of its own, without a limit and without
    /// recorded lifetimes.
    pub fn new() -> Self {
        Self::with_tracker(MemTracker::new(false))
    }

    /// A backend that registers its buffers with `tracker` (one with a
    /// limit, or one that records each buffer's lifetime).
    pub fn with_tracker(tracker: Arc<MemTracker>) -> Self {
        Self {
            tracker,
            pool: Arc::default(),
            precision: MatmulPrecision::Fp32,
            storage: Storage::uniform(T::DTYPE),
            kernels: Kernels::Reference,
            failure: RecordedOom::default(),
            _t: PhantomData,
        }
    }

    /// The backend with matrix products at `precision`, emulated: the
    /// operands are rounded copies (extra host memory the tracker does not
    /// count, as it does not count cuBLAS's conversions), the product is
    /// the fp32 one. It is the reference the CUDA backend's 16-bit products
    /// are checked against, not a way to train faster.
    pub fn with_matmul_precision(self, precision: MatmulPrecision) -> Self {
        let kernels = self.kernels;
        self.for_step(precision, kernels)
    }

    /// The backend of a step with products at `precision` and `kernels`:
    /// with [`Kernels::Fused`] and 16-bit products, activations stored in
    /// 16 bits (emulated, see the module doc).
    pub fn for_step(self, precision: MatmulPrecision, kernels: Kernels) -> Self {
        Self {
            precision,
            kernels,
            storage: Storage::for_step(T::DTYPE, precision, kernels),
            ..self
        }
    }

    /// Registers `bytes` with the tracker, or records the refusal (nothing
    /// is registered while a failure is pending).
    fn admit(&self, name: &str, kind: BufKind, bytes: usize) -> Option<Allocation> {
        if self.failed() {
            return None;
        }
        match self.tracker.allocate(name, kind, bytes) {
            Ok(alloc) => Some(alloc),
            Err(oom) => {
                self.failure.record(oom);
                None
            }
        }
    }

    /// A float buffer of `len`: recycled from the pool when one of exactly
    /// that length is free (zeroed only when `zeroed`), else fresh (zeros).
    fn alloc_from_pool(&self, name: &str, kind: BufKind, len: usize, zeroed: bool) -> CpuBuf<T> {
        let dtype = self.storage.of(kind);
        let Some(alloc) = self.admit(name, kind, len * dtype.bytes()) else {
            return CpuBuf::unbacked(len, dtype);
        };
        if len * size_of::<T>() < pool::MIN_POOLED_BYTES {
            return CpuBuf {
                data: vec![T::ZERO; len],
                len,
                dtype,
                _alloc: Some(alloc),
                pool: None,
            };
        }
        let data = match self.pool.take(len, &self.tracker) {
            Some(mut data) => {
                if zeroed {
                    elementwise::zero(&mut data);
                }
                data
            }
            None => vec![T::ZERO; len],
        };
        CpuBuf {
            data,
            len,
            dtype,
            _alloc: Some(alloc),
            pool: Some((Arc::clone(&self.pool), Arc::clone(&self.tracker))),
        }
    }

    /// Bytes of freed buffers kept for reuse (not tensors: the tracker does
    /// not count them).
    pub fn pooled_bytes(&self) -> usize {
        self.pool.pooled_bytes()
    }

    /// The tracker every buffer of this backend is registered with (live
    /// and peak tensor bytes).
    pub fn tracker(&self) -> &Arc<MemTracker> {
        &self.tracker
    }
}

/// Returns from a [`CpuBackend`] operation while a failure is pending: its
/// buffers may hold no memory (see [`Backend::failed`]).
macro_rules! skip_if_failed {
    ($be:expr) => {
        skip_if_failed!($be, ())
    };
    ($be:expr, $value:expr) => {
        if $be.failed() {
            return $value;
        }
    };
}

impl<T: Float> Backend for CpuBackend<T> {
    type Buf = CpuBuf<T>;
    type Ids = CpuBuf<u32>;

    fn matmul_precision(&self) -> MatmulPrecision {
        self.precision
    }
    fn storage(&self) -> Storage {
        self.storage
    }
    fn kernels(&self) -> Kernels {
        self.kernels
    }

    fn take_failure(&self) -> Result<(), Failure> {
        self.failure.take()
    }
    fn failed(&self) -> bool {
        self.failure.is_pending()
    }

    fn alloc(&self, name: &str, kind: BufKind, len: usize) -> CpuBuf<T> {
        self.alloc_from_pool(name, kind, len, true)
    }
    fn alloc_overwritten(&self, name: &str, kind: BufKind, len: usize) -> CpuBuf<T> {
        let mut buf = self.alloc_from_pool(name, kind, len, false);
        // Debug builds (the tests) poison the buffer, so that an op reading
        // an element before writing it shows up as NaN in the results.
        if cfg!(debug_assertions) {
            self.fill(&mut buf, f64::NAN);
        }
        buf
    }
    fn alloc_ids(&self, name: &str, len: usize) -> CpuBuf<u32> {
        // Ids are not floats: `dtype` only names them.
        match self.admit(name, BufKind::Input, len * 4) {
            Some(alloc) => CpuBuf {
                data: vec![0; len],
                len,
                dtype: Dtype::F32,
                _alloc: Some(alloc),
                pool: None,
            },
            None => CpuBuf::unbacked(len, Dtype::F32),
        }
    }
    fn len(&self, buf: &CpuBuf<T>) -> usize {
        buf.len
    }
    fn dtype(&self, buf: &CpuBuf<T>) -> Dtype {
        buf.dtype
    }
    fn cast(&self, src: &CpuBuf<T>, dst: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        assert_eq!(src.len, dst.len, "cast: length mismatch");
        dst.data.copy_from_slice(&src.data);
        dst.store();
    }
    fn upload(&self, dst: &mut CpuBuf<T>, src: &[f64]) {
        skip_if_failed!(self);
        assert_eq!(dst.data.len(), src.len(), "upload: length mismatch");
        dst.data
            .iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = T::from_f64(*s));
        dst.store();
    }
    fn upload_f32(&self, dst: &mut CpuBuf<T>, src: &[f32]) {
        skip_if_failed!(self);
        assert_eq!(dst.data.len(), src.len(), "upload: length mismatch");
        dst.data
            .iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = T::from_f64(*s as f64));
        dst.store();
    }
    fn upload_ids(&self, dst: &mut CpuBuf<u32>, src: &[u32]) {
        skip_if_failed!(self);
        dst.data.copy_from_slice(src);
    }
    /// NaNs while a failure is pending.
    fn download(&self, src: &CpuBuf<T>) -> Vec<f64> {
        skip_if_failed!(self, vec![f64::NAN; src.len]);
        src.data.iter().map(|v| v.to_f64()).collect()
    }
    fn fill(&self, dst: &mut CpuBuf<T>, value: f64) {
        skip_if_failed!(self);
        let v = T::from_f64(value);
        dst.data.iter_mut().for_each(|d| *d = v);
        dst.store();
    }

    fn fill_normal(
        &self,
        dst: &mut CpuBuf<T>,
        key: &RngKey,
        scale: f64,
        zeroed: std::ops::Range<usize>,
    ) {
        skip_if_failed!(self);
        // Each element has its own counter block, so the values do not
        // depend on how the range is split across threads.
        dst.data
            .par_iter_mut()
            .with_min_len(1 << 12)
            .enumerate()
            .for_each(|(i, d)| {
                *d = if zeroed.contains(&i) {
                    T::from_f64(0.0)
                } else {
                    T::from_f64(scale * key.normal(i as u64))
                }
            });
        dst.store();
    }

    fn add(&self, a: &CpuBuf<T>, b: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        elementwise::add(&a.data, &b.data, &mut out.data);
        out.store();
    }
    fn add_assign(&self, acc: &mut CpuBuf<T>, x: &CpuBuf<T>) {
        skip_if_failed!(self);
        elementwise::add_assign(&mut acc.data, &x.data);
        acc.store();
    }
    fn scale(&self, buf: &mut CpuBuf<T>, factor: f64) {
        skip_if_failed!(self);
        elementwise::scale(&mut buf.data, factor);
        buf.store();
    }
    fn sum_squares(&self, buf: &CpuBuf<T>) -> f64 {
        skip_if_failed!(self, f64::NAN);
        elementwise::sum_squares(&buf.data)
    }

    fn matmul(
        &self,
        shape: &MatmulShape,
        alpha: f64,
        a: &CpuBuf<T>,
        b: &CpuBuf<T>,
        beta: f64,
        c: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        check_matmul_types(a.dtype, b.dtype, c.dtype);
        // 16-bit operands are already rounded; fp32 ones are rounded here
        // as the products read them.
        if self.precision == MatmulPrecision::Fp32 || a.dtype.is_half() {
            matmul::matmul(shape, alpha, &a.data, &b.data, beta, &mut c.data);
        } else {
            let s = shape;
            let a = matmul::rounded(
                self.precision,
                &a.data[..(s.batch * s.m * s.k).min(a.data.len())],
            );
            let b = matmul::rounded(
                self.precision,
                &b.data[..(s.batch * s.k * s.n).min(b.data.len())],
            );
            matmul::matmul(shape, alpha, &a, &b, beta, &mut c.data);
        }
        c.store();
    }
    fn bias_add(&self, out: &mut CpuBuf<T>, bias: &CpuBuf<T>, n: usize) {
        skip_if_failed!(self);
        elementwise::bias_add(&mut out.data, &bias.data, n);
        out.store();
    }
    fn bias_backward(&self, dout: &CpuBuf<T>, dbias: &mut CpuBuf<T>, n: usize) {
        skip_if_failed!(self);
        elementwise::bias_backward(&dout.data, &mut dbias.data, n);
        dbias.store();
    }

    fn layernorm_forward(
        &self,
        x: &CpuBuf<T>,
        gamma: &CpuBuf<T>,
        beta: &CpuBuf<T>,
        n: usize,
        eps: f64,
        out: &mut CpuBuf<T>,
        mean: &mut CpuBuf<T>,
        rstd: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        layernorm::forward(
            &x.data,
            &gamma.data,
            &beta.data,
            n,
            eps,
            &mut out.data,
            &mut mean.data,
            &mut rstd.data,
        );
        out.store();
    }
    fn layernorm_backward(
        &self,
        dout: &CpuBuf<T>,
        x: &CpuBuf<T>,
        gamma: &CpuBuf<T>,
        mean: &CpuBuf<T>,
        rstd: &CpuBuf<T>,
        n: usize,
        dx: &mut CpuBuf<T>,
        dgamma: &mut CpuBuf<T>,
        dbeta: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        layernorm::backward(
            &dout.data,
            &x.data,
            &gamma.data,
            &mean.data,
            &rstd.data,
            n,
            &mut dx.data,
            &mut dgamma.data,
            &mut dbeta.data,
        );
        dx.store();
    }

    fn permute_heads(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>, b: usize, s: usize, heads: usize) {
        skip_if_failed!(self);
        attention::permute_heads(&x.data, &mut out.data, b, s, heads);
        out.store();
    }
    fn unpermute_heads(
        &self,
        x: &CpuBuf<T>,
        out: &mut CpuBuf<T>,
        b: usize,
        s: usize,
        heads: usize,
    ) {
        skip_if_failed!(self);
        attention::unpermute_heads(&x.data, &mut out.data, b, s, heads);
        out.store();
    }
    fn softmax_forward(
        &self,
        scores: &CpuBuf<T>,
        mask: &CpuBuf<u32>,
        b: usize,
        heads: usize,
        s: usize,
        scale: f64,
        probs: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        attention::softmax_forward(
            &scores.data,
            &mask.data,
            b,
            heads,
            s,
            scale,
            &mut probs.data,
        );
        probs.store();
    }
    fn softmax_backward(
        &self,
        dprobs: &CpuBuf<T>,
        probs: &CpuBuf<T>,
        s: usize,
        scale: f64,
        dscores: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        attention::softmax_backward(&dprobs.data, &probs.data, s, scale, &mut dscores.data);
        dscores.store();
    }

    fn gelu_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::gelu_forward(&x.data, &mut out.data);
        out.store();
    }
    fn gelu_backward(&self, x: &CpuBuf<T>, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::gelu_backward(&x.data, &dout.data, &mut dx.data);
        dx.store();
    }
    fn gelu_backward_in_place(&self, x: &CpuBuf<T>, d: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::gelu_backward_in_place(&x.data, &mut d.data);
        d.store();
    }
    fn tanh_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::tanh_forward(&x.data, &mut out.data);
        out.store();
    }
    fn tanh_backward(&self, out: &CpuBuf<T>, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::tanh_backward(&out.data, &dout.data, &mut dx.data);
        dx.store();
    }
    fn relu_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::relu_forward(&x.data, &mut out.data);
        out.store();
    }
    fn relu_backward(&self, out: &CpuBuf<T>, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::relu_backward(&out.data, &dout.data, &mut dx.data);
        dx.store();
    }
    fn dropout_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>, p: f64, key: RngKey) {
        skip_if_failed!(self);
        activation::dropout_forward(&x.data, &mut out.data, p, key);
        out.store();
    }
    fn dropout_backward(&self, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>, p: f64, key: RngKey) {
        skip_if_failed!(self);
        activation::dropout_backward(&dout.data, &mut dx.data, p, key);
        dx.store();
    }

    fn embedding_forward(
        &self,
        ids: &CpuBuf<u32>,
        table: &CpuBuf<T>,
        dim: usize,
        out: &mut CpuBuf<T>,
        accumulate: bool,
    ) {
        skip_if_failed!(self);
        embedding::forward(&ids.data, &table.data, dim, &mut out.data, accumulate);
        out.store();
    }
    fn embedding_backward(
        &self,
        ids: &CpuBuf<u32>,
        dout: &CpuBuf<T>,
        dim: usize,
        dtable: &mut CpuBuf<T>,
        rows: Option<&mut RowSlots>,
    ) {
        skip_if_failed!(self);
        let slots;
        let rows_of_tokens = match rows {
            None => &ids.data,
            Some(rows) => {
                let mut ids = ids.data.clone();
                if let Err(e) = rows.assign(&mut ids, dtable.data.len() / dim) {
                    panic!("embedding_backward: {e}");
                }
                slots = ids;
                &slots
            }
        };
        embedding::backward(rows_of_tokens, &dout.data, dim, &mut dtable.data);
        dtable.store();
    }
    fn cls_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>, b: usize, s: usize) {
        skip_if_failed!(self);
        embedding::cls_forward(&x.data, &mut out.data, b, s);
        out.store();
    }
    fn cls_backward(&self, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>, b: usize, s: usize) {
        skip_if_failed!(self);
        embedding::cls_backward(&dout.data, &mut dx.data, b, s);
        dx.store();
    }
    fn mean_pool(
        &self,
        x: &CpuBuf<T>,
        mask: &CpuBuf<u32>,
        b: usize,
        s: usize,
        out: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        embedding::mean_pool(&x.data, &mask.data, b, s, &mut out.data);
        out.store();
    }

    fn rel_pos_gather(
        &self,
        shape: &RelPosShape,
        alpha: f64,
        rel: &CpuBuf<T>,
        idx: &CpuBuf<u32>,
        scores: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        rel_pos::gather(shape, alpha, &rel.data, &idx.data, &mut scores.data);
        scores.store();
    }
    fn rel_pos_scatter(
        &self,
        shape: &RelPosShape,
        alpha: f64,
        dscores: &CpuBuf<T>,
        idx: &CpuBuf<u32>,
        drel: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        rel_pos::scatter(shape, alpha, &dscores.data, &idx.data, &mut drel.data);
        drel.store();
    }
    fn mask_rows(&self, x: &mut CpuBuf<T>, mask: &CpuBuf<u32>, n: usize) {
        skip_if_failed!(self);
        rel_pos::mask_rows(&mut x.data, &mask.data, n);
        x.store();
    }

    fn cross_entropy_forward(
        &self,
        logits: &CpuBuf<T>,
        t: &LossTargets<'_, CpuBuf<T>, CpuBuf<u32>>,
    ) -> f64 {
        skip_if_failed!(self, f64::NAN);
        let weights = t.weights.map(|w| &w.data[..]);
        loss::forward(&logits.data, &t.labels.data, weights, t.classes, t.denom)
    }
    fn cross_entropy_backward(
        &self,
        logits: &CpuBuf<T>,
        t: &LossTargets<'_, CpuBuf<T>, CpuBuf<u32>>,
        dloss: f64,
        dlogits: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        let weights = t.weights.map(|w| &w.data[..]);
        let (labels, out) = (&t.labels.data, &mut dlogits.data);
        loss::backward(
            &logits.data,
            labels,
            weights,
            t.classes,
            t.denom,
            dloss,
            out,
        );
        dlogits.store();
    }

    fn adamw(
        &self,
        param: &mut CpuBuf<T>,
        grad: &CpuBuf<T>,
        m: &mut CpuBuf<T>,
        v: &mut CpuBuf<T>,
        step: &AdamWStep,
    ) {
        skip_if_failed!(self);
        optim::adamw(
            &mut param.data,
            &grad.data,
            None,
            &mut m.data,
            &mut v.data,
            step,
            1.0,
        )
    }
    fn sgd(&self, param: &mut CpuBuf<T>, grad: &CpuBuf<T>, lr: f64) {
        skip_if_failed!(self);
        optim::sgd(&mut param.data, &grad.data, lr)
    }

    fn attention_forward(
        &self,
        shape: &AttentionShape,
        x: &AttentionInputs<'_, CpuBuf<T>, CpuBuf<u32>>,
        out: &mut CpuBuf<T>,
        lse: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        let (q, k, v, m) = (&x.q.data, &x.k.data, &x.v.data, &x.mask.data);
        attention_fused::forward(shape, q, k, v, m, x.key, &mut out.data, &mut lse.data);
        out.store();
    }
    fn attention_backward(
        &self,
        shape: &AttentionShape,
        x: &AttentionInputs<'_, CpuBuf<T>, CpuBuf<u32>>,
        out: &CpuBuf<T>,
        dout: &CpuBuf<T>,
        lse: &CpuBuf<T>,
        delta: &mut CpuBuf<T>,
        dq: &mut CpuBuf<T>,
        dk: &mut CpuBuf<T>,
        dv: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        attention_fused::backward(
            shape,
            attention_fused::Inputs {
                q: &x.q.data,
                k: &x.k.data,
                v: &x.v.data,
                mask: &x.mask.data,
                out: &out.data,
                dout: &dout.data,
                lse: &lse.data,
            },
            x.key,
            &mut delta.data,
            [&mut dq.data, &mut dk.data, &mut dv.data],
        );
        dq.store();
        dk.store();
        dv.store();
    }
    fn bias_gelu_forward(&self, pre: &mut CpuBuf<T>, bias: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        elementwise::bias_add(&mut pre.data, &bias.data, bias.len);
        pre.store();
        activation::gelu_forward(&pre.data, &mut out.data);
        out.store();
    }
    fn residual_layernorm_forward(
        &self,
        sum: &mut CpuBuf<T>,
        bias: &CpuBuf<T>,
        residual: &CpuBuf<T>,
        dropout: f64,
        key: Option<RngKey>,
        gamma: &CpuBuf<T>,
        beta: &CpuBuf<T>,
        eps: f64,
        out: &mut CpuBuf<T>,
        mean: &mut CpuBuf<T>,
        rstd: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        let n = bias.len;
        // One rounding, at the end, as the device's one pass stores it.
        elementwise::bias_add(&mut sum.data, &bias.data, n);
        if let Some(key) = key {
            let biased = sum.data.clone();
            activation::dropout_forward(&biased, &mut sum.data, dropout, key);
        }
        elementwise::add_assign(&mut sum.data, &residual.data);
        sum.store();
        let (g, b) = (&gamma.data, &beta.data);
        layernorm::forward(
            &sum.data,
            g,
            b,
            n,
            eps,
            &mut out.data,
            &mut mean.data,
            &mut rstd.data,
        );
        out.store();
    }
    fn residual_layernorm_backward(
        &self,
        dout: &CpuBuf<T>,
        sum: &CpuBuf<T>,
        gamma: &CpuBuf<T>,
        mean: &CpuBuf<T>,
        rstd: &CpuBuf<T>,
        dropout: f64,
        key: Option<RngKey>,
        d_sum: &mut CpuBuf<T>,
        d_branch: Option<&mut CpuBuf<T>>,
        dgamma: &mut CpuBuf<T>,
        dbeta: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        layernorm::backward(
            &dout.data,
            &sum.data,
            &gamma.data,
            &mean.data,
            &rstd.data,
            gamma.len,
            &mut d_sum.data,
            &mut dgamma.data,
            &mut dbeta.data,
        );
        d_sum.store();
        if let (Some(d_branch), Some(key)) = (d_branch, key) {
            activation::dropout_backward(&d_sum.data, &mut d_branch.data, dropout, key);
            d_branch.store();
        }
    }
    fn adamw_all(
        &self,
        params: &mut [CpuBuf<T>],
        grads: &[CpuBuf<T>],
        m: &mut [CpuBuf<T>],
        v: &mut [CpuBuf<T>],
        decay: &[bool],
        step: &AdamWStep,
        grad_scale: f64,
        clip: Option<f64>,
        sparse: Option<SparseRows<'_, CpuBuf<u32>>>,
    ) {
        skip_if_failed!(self);
        let norm = grad_scale
            * grads
                .iter()
                .map(|g| elementwise::sum_squares(&g.data))
                .sum::<f64>()
                .sqrt();
        let factor = match clip {
            Some(max) if norm > max && norm > 0.0 => grad_scale * (max / norm),
            _ => grad_scale,
        };
        for (i, p) in params.iter_mut().enumerate() {
            let step = AdamWStep {
                weight_decay: if decay[i] { step.weight_decay } else { 0.0 },
                ..*step
            };
            let g = &grads[i].data;
            let rows = sparse
                .filter(|s| s.tensor == i)
                .map(|s| (s.slots.data.as_slice(), s.width));
            optim::adamw(
                &mut p.data,
                g,
                rows,
                &mut m[i].data,
                &mut v[i].data,
                &step,
                factor,
            );
        }
    }
}

/// The operand types a product takes, as the device's: both 16-bit of one
/// format (the result in it or in the master type), or both the master
/// type. Anything else is a bug in the model code.
fn check_matmul_types(a: Dtype, b: Dtype, c: Dtype) {
    let ok = a == b && (c == a || (a.is_half() && !c.is_half()));
    assert!(ok, "matmul of {a} by {b} into {c}: operands of one type");
}

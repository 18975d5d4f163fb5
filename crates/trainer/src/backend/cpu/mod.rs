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

pub mod activation;
pub mod attention;
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
use std::sync::Arc;

use super::{AdamWStep, Backend, Failure, MatmulPrecision, MatmulShape, RelPosShape};
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
    /// `None` when the allocation was refused.
    _alloc: Option<Allocation>,
    /// Where `data` goes back when the buffer is dropped (float buffers).
    pool: Option<(Arc<BufferPool<T>>, Arc<MemTracker>)>,
}

impl<T> CpuBuf<T> {
    /// A buffer of `len` elements whose allocation was refused.
    fn unbacked(len: usize) -> Self {
        CpuBuf {
            data: Vec::new(),
            len,
            _alloc: None,
            pool: None,
        }
    }
}

impl<T> std::fmt::Debug for CpuBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuBuf({} elements, {:?})", self.len, self._alloc)
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

pub struct CpuBackend<T: Float> {
    tracker: Arc<MemTracker>,
    pool: Arc<BufferPool<T>>,
    precision: MatmulPrecision,
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
    pub fn new() -> Self {
        Self::with_tracker(MemTracker::new(false))
    }

    pub fn with_tracker(tracker: Arc<MemTracker>) -> Self {
        Self {
            tracker,
            pool: Arc::default(),
            precision: MatmulPrecision::Fp32,
            failure: RecordedOom::default(),
            _t: PhantomData,
        }
    }

    /// The backend with matrix products at `precision`, emulated: the
    /// operands are rounded copies (extra host memory the tracker does not
    /// count, as it does not count cuBLAS's conversions), the product is
    /// the fp32 one. It is the reference the CUDA backend's 16-bit products
    /// are checked against, not a way to train faster.
    pub fn with_matmul_precision(mut self, precision: MatmulPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// Registers `len` elements of `E` with the tracker, or records the
    /// refusal (nothing is registered while a failure is pending).
    fn admit<E>(&self, name: &str, kind: BufKind, len: usize) -> Option<Allocation> {
        if self.failed() {
            return None;
        }
        match self.tracker.allocate(name, kind, len * size_of::<E>()) {
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
        let Some(alloc) = self.admit::<T>(name, kind, len) else {
            return CpuBuf::unbacked(len);
        };
        if len * size_of::<T>() < pool::MIN_POOLED_BYTES {
            return CpuBuf {
                data: vec![T::ZERO; len],
                len,
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
            _alloc: Some(alloc),
            pool: Some((Arc::clone(&self.pool), Arc::clone(&self.tracker))),
        }
    }

    /// Bytes of freed buffers kept for reuse (not tensors: the tracker does
    /// not count them).
    pub fn pooled_bytes(&self) -> usize {
        self.pool.pooled_bytes()
    }

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
    fn float_bytes(&self) -> usize {
        size_of::<T>()
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
        match self.admit::<u32>(name, BufKind::Input, len) {
            Some(alloc) => CpuBuf {
                data: vec![0; len],
                len,
                _alloc: Some(alloc),
                pool: None,
            },
            None => CpuBuf::unbacked(len),
        }
    }
    fn len(&self, buf: &CpuBuf<T>) -> usize {
        buf.len
    }
    fn upload(&self, dst: &mut CpuBuf<T>, src: &[f64]) {
        skip_if_failed!(self);
        assert_eq!(dst.data.len(), src.len(), "upload: length mismatch");
        dst.data
            .iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = T::from_f64(*s));
    }
    fn upload_f32(&self, dst: &mut CpuBuf<T>, src: &[f32]) {
        skip_if_failed!(self);
        assert_eq!(dst.data.len(), src.len(), "upload: length mismatch");
        dst.data
            .iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = T::from_f64(*s as f64));
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
    }

    fn add(&self, a: &CpuBuf<T>, b: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        elementwise::add(&a.data, &b.data, &mut out.data)
    }
    fn add_assign(&self, acc: &mut CpuBuf<T>, x: &CpuBuf<T>) {
        skip_if_failed!(self);
        elementwise::add_assign(&mut acc.data, &x.data)
    }
    fn scale(&self, buf: &mut CpuBuf<T>, factor: f64) {
        skip_if_failed!(self);
        elementwise::scale(&mut buf.data, factor)
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
        if self.precision == MatmulPrecision::Fp32 {
            return matmul::matmul(shape, alpha, &a.data, &b.data, beta, &mut c.data);
        }
        let s = shape;
        let a = matmul::rounded(
            self.precision,
            &a.data[..(s.batch * s.m * s.k).min(a.data.len())],
        );
        let b = matmul::rounded(
            self.precision,
            &b.data[..(s.batch * s.k * s.n).min(b.data.len())],
        );
        matmul::matmul(shape, alpha, &a, &b, beta, &mut c.data)
    }
    fn bias_add(&self, out: &mut CpuBuf<T>, bias: &CpuBuf<T>, n: usize) {
        skip_if_failed!(self);
        elementwise::bias_add(&mut out.data, &bias.data, n)
    }
    fn bias_backward(&self, dout: &CpuBuf<T>, dbias: &mut CpuBuf<T>, n: usize) {
        skip_if_failed!(self);
        elementwise::bias_backward(&dout.data, &mut dbias.data, n)
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
        )
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
        )
    }

    fn permute_heads(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>, b: usize, s: usize, heads: usize) {
        skip_if_failed!(self);
        attention::permute_heads(&x.data, &mut out.data, b, s, heads)
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
        attention::unpermute_heads(&x.data, &mut out.data, b, s, heads)
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
        )
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
        attention::softmax_backward(&dprobs.data, &probs.data, s, scale, &mut dscores.data)
    }

    fn gelu_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::gelu_forward(&x.data, &mut out.data)
    }
    fn gelu_backward(&self, x: &CpuBuf<T>, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::gelu_backward(&x.data, &dout.data, &mut dx.data)
    }
    fn tanh_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::tanh_forward(&x.data, &mut out.data)
    }
    fn tanh_backward(&self, out: &CpuBuf<T>, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::tanh_backward(&out.data, &dout.data, &mut dx.data)
    }
    fn relu_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::relu_forward(&x.data, &mut out.data)
    }
    fn relu_backward(&self, out: &CpuBuf<T>, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>) {
        skip_if_failed!(self);
        activation::relu_backward(&out.data, &dout.data, &mut dx.data)
    }
    fn dropout_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>, p: f64, key: RngKey) {
        skip_if_failed!(self);
        activation::dropout_forward(&x.data, &mut out.data, p, key)
    }
    fn dropout_backward(&self, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>, p: f64, key: RngKey) {
        skip_if_failed!(self);
        activation::dropout_backward(&dout.data, &mut dx.data, p, key)
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
        embedding::forward(&ids.data, &table.data, dim, &mut out.data, accumulate)
    }
    fn embedding_backward(
        &self,
        ids: &CpuBuf<u32>,
        dout: &CpuBuf<T>,
        dim: usize,
        dtable: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        embedding::backward(&ids.data, &dout.data, dim, &mut dtable.data)
    }
    fn cls_forward(&self, x: &CpuBuf<T>, out: &mut CpuBuf<T>, b: usize, s: usize) {
        skip_if_failed!(self);
        embedding::cls_forward(&x.data, &mut out.data, b, s)
    }
    fn cls_backward(&self, dout: &CpuBuf<T>, dx: &mut CpuBuf<T>, b: usize, s: usize) {
        skip_if_failed!(self);
        embedding::cls_backward(&dout.data, &mut dx.data, b, s)
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
        embedding::mean_pool(&x.data, &mask.data, b, s, &mut out.data)
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
        rel_pos::gather(shape, alpha, &rel.data, &idx.data, &mut scores.data)
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
        rel_pos::scatter(shape, alpha, &dscores.data, &idx.data, &mut drel.data)
    }
    fn mask_rows(&self, x: &mut CpuBuf<T>, mask: &CpuBuf<u32>, n: usize) {
        skip_if_failed!(self);
        rel_pos::mask_rows(&mut x.data, &mask.data, n)
    }

    fn cross_entropy_forward(
        &self,
        logits: &CpuBuf<T>,
        labels: &CpuBuf<u32>,
        weights: Option<&CpuBuf<T>>,
        classes: usize,
        denom: f64,
    ) -> f64 {
        skip_if_failed!(self, f64::NAN);
        loss::forward(
            &logits.data,
            &labels.data,
            weights.map(|w| &w.data[..]),
            classes,
            denom,
        )
    }
    fn cross_entropy_backward(
        &self,
        logits: &CpuBuf<T>,
        labels: &CpuBuf<u32>,
        weights: Option<&CpuBuf<T>>,
        classes: usize,
        denom: f64,
        dloss: f64,
        dlogits: &mut CpuBuf<T>,
    ) {
        skip_if_failed!(self);
        loss::backward(
            &logits.data,
            &labels.data,
            weights.map(|w| &w.data[..]),
            classes,
            denom,
            dloss,
            &mut dlogits.data,
        )
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
        optim::adamw(&mut param.data, &grad.data, &mut m.data, &mut v.data, step)
    }
    fn sgd(&self, param: &mut CpuBuf<T>, grad: &CpuBuf<T>, lr: f64) {
        skip_if_failed!(self);
        optim::sgd(&mut param.data, &grad.data, lr)
    }
}

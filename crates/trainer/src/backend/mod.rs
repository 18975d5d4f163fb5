//! The backend seam: every numeric operation the model performs, each with
//! its forward and backward.
//!
//! The model owns no arithmetic. It asks a [`Backend`] for buffers (named,
//! with a [`BufKind`], so every allocation is accounted for by the memory
//! plan) and calls these operations on them. [`cpu::CpuBackend`] is the
//! reference implementation (generic over f32/f64); [`plan::PlanBackend`]
//! performs no arithmetic and only allocates, which is how the memory plan is
//! computed from the same code path; a CUDA backend implements the same trait
//! with device buffers.
//!
//! Conventions: tensors are row-major; shapes are passed explicitly; "grad"
//! outputs of parameters are accumulated (`+=`) so micro-batches can be
//! summed; gradients of activations are overwritten unless the parameter
//! list says `accumulate`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "testing")]
pub mod faulty;
mod host_counters;
pub mod matmul_precision;
pub mod plan;
pub mod row_slots;
pub mod sim;
pub mod storage;

use crate::memory::{BufKind, OutOfMemory};
use crate::rng::RngKey;
pub use host_counters::HostCounters;
pub use matmul_precision::MatmulPrecision;
pub use row_slots::{RowSlots, SparseRows};
use std::ops::Range;
pub use storage::{Dtype, Kernels, Storage};

/// A strided-batched matrix product in row-major terms:
/// `C[i] (m x n) = alpha * op(A[i]) * op(B[i]) + beta * C[i]` for `i < batch`,
/// where `op(A)` is `m x k` (stored `[m, k]`, or `[k, m]` when `trans_a`) and
/// `op(B)` is `k x n` (stored `[k, n]`, or `[n, k]` when `trans_b`). Batch
/// entries are contiguous. `beta == 0` overwrites C without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Number of products, each on its own contiguous slice of A, B and C.
    pub batch: usize,
    /// Rows of `op(A)` and of C.
    pub m: usize,
    /// Columns of `op(B)` and of C.
    pub n: usize,
    /// The contracted dimension: columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// A is stored `[k, m]` and used transposed.
    pub trans_a: bool,
    /// B is stored `[n, k]` and used transposed.
    pub trans_b: bool,
}

/// The layout of DeBERTa's relative-position gathers: attention scores
/// `[b, heads, s, s]`; position scores `rel` `[heads, b, s, span2]` (a query
/// or key row times each of the `span2` relative-position embeddings); the
/// bucket table `idx` `[s, s]` with every entry below `span2`. Without
/// `transpose`, score `(i, j)` reads `rel` row `i` at `idx[i, j]`
/// (content-to-position); with it, row `j` at `idx[j, i]`
/// (position-to-content, whose rows are keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelPosShape {
    /// Sequences in the batch.
    pub b: usize,
    /// Attention heads.
    pub heads: usize,
    /// Tokens per sequence (padded length).
    pub s: usize,
    /// Relative-position embeddings per row of `rel`: twice the model's
    /// attention span; every bucket index is below it.
    pub span2: usize,
    /// Position-to-content: score `(i, j)` reads key `j`'s row at
    /// `idx[j, i]` instead of query `i`'s at `idx[i, j]`.
    pub transpose: bool,
}

/// One fused attention call (see [`Backend::attention_forward`]): `q`, `k`,
/// `v` and the output are `[b, s, heads * head_dim]`, the log-sum-exp
/// `[b, heads, s]`; the probabilities `softmax(scale * q k^T)` over the keys
/// the mask keeps are dropped out with probability `dropout`, element by
/// element of the `[b, heads, s, s]` tensor the unfused path stores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Sequences in the batch.
    pub b: usize,
    /// Tokens per sequence (queries and keys alike).
    pub s: usize,
    /// Attention heads.
    pub heads: usize,
    /// Elements per head of a token's `q`, `k` and `v`.
    pub head_dim: usize,
    /// Factor on `q k^T` before the softmax (usually `1 / sqrt(head_dim)`).
    pub scale: f64,
    /// Dropout probability of the attention probabilities, in `[0, 1)`; it
    /// applies only when the inputs carry a key.
    pub dropout: f64,
}

/// What a weighted cross-entropy compares logits `[rows, classes]` with:
/// one label per row (each below `classes`), per-class `weights` (`None`:
/// all 1) and `denom`, the divisor of the summed loss.
pub struct LossTargets<'a, Buf, Ids> {
    /// The class of each row, `[rows]`.
    pub labels: &'a Ids,
    /// Per-class loss weights, `[classes]`; `None` weighs every class 1.
    pub weights: Option<&'a Buf>,
    /// Columns of the logits; every label must be below it.
    pub classes: usize,
    /// Divisor of the summed weighted loss: the training loop passes the
    /// whole batch's total weight, so micro-batch losses add up to the
    /// batch's weighted mean.
    pub denom: f64,
}

impl<'a, Buf, Ids> LossTargets<'a, Buf, Ids> {
    /// The targets from their four parts (see the fields).
    pub fn new(labels: &'a Ids, weights: Option<&'a Buf>, classes: usize, denom: f64) -> Self {
        LossTargets {
            labels,
            weights,
            classes,
            denom,
        }
    }
}

/// What [`Backend::attention_forward`] and its backward both read: `q`,
/// `k`, `v` (`[b, s, heads * head_dim]`), the key mask (`[b, s]`, nonzero
/// keeps the key) and the dropout's key (`None`: no dropout).
pub struct AttentionInputs<'a, Buf, Ids> {
    /// Queries, `[b, s, heads * head_dim]`.
    pub q: &'a Buf,
    /// Keys, `[b, s, heads * head_dim]`.
    pub k: &'a Buf,
    /// Values, `[b, s, heads * head_dim]`.
    pub v: &'a Buf,
    /// Key mask `[b, s]`: nonzero keeps the key, 0 excludes it.
    pub mask: &'a Ids,
    /// The dropout stream of the probabilities; `None` turns dropout off.
    pub key: Option<RngKey>,
}

impl AttentionShape {
    /// Elements of `q` (and of `k`, `v`, the output).
    pub fn len(&self) -> usize {
        self.b * self.s * self.heads * self.head_dim
    }
    /// Rows of the log-sum-exp (one per query and head).
    pub fn rows(&self) -> usize {
        self.b * self.heads * self.s
    }
    /// Whether the tensors have no elements (some dimension is 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Hyperparameters of one AdamW update of one tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// Learning rate of this step (the schedule's value).
    pub lr: f64,
    /// Decay rate of the first-moment (mean) estimate `m`.
    pub beta1: f64,
    /// Decay rate of the second-moment estimate `v`.
    pub beta2: f64,
    /// Added to `sqrt(v)` (bias-corrected) in the denominator.
    pub eps: f64,
    /// Decoupled: `param -= lr * weight_decay * param`. Zero for biases and
    /// LayerNorm parameters.
    pub weight_decay: f64,
    /// 1-based step number, for bias correction.
    pub t: u64,
}

/// A failure a device reported after the fact: a kernel launch or driver
/// call that failed while work was queued (the operations after it were
/// skipped, so values computed since are meaningless).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DeviceFailure {
    /// The device's or driver's error, as text.
    pub message: String,
    /// The device is unusable for the rest of the process (CUDA's sticky
    /// errors): the process must be replaced.
    pub sticky: bool,
}

/// What a backend recorded instead of returning it from an operation (see
/// [`Backend::take_failure`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Failure {
    /// An allocation was refused: the lease or the device is full. The
    /// step can be retried with less memory.
    #[error(transparent)]
    OutOfMemory(#[from] OutOfMemory),
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceFailure),
}

/// The operations a model needs. `Buf` holds floats of the backend's
/// precision, `Ids` holds `u32` (token ids, masks, labels).
pub trait Backend {
    /// A buffer of floats in the type its [`BufKind`] is stored as.
    type Buf: Send + Sync;
    /// A buffer of `u32` (token ids, masks, labels, bucket indices).
    type Ids: Send + Sync;

    /// What each kind of buffer is stored as (see [`Storage`]).
    fn storage(&self) -> Storage;

    /// Bytes per element of the master type (weights, gradients, state).
    fn float_bytes(&self) -> usize {
        self.storage().master.bytes()
    }

    /// Which implementation of the step the model runs (see [`Kernels`]):
    /// the model calls the fused operations below only when this is
    /// [`Kernels::Fused`], and every backend implements both.
    fn kernels(&self) -> Kernels {
        Kernels::Reference
    }

    /// Whether buffers hold values. A backend that only allocates (the
    /// memory plan's) returns false, so the model skips generating values
    /// nobody reads: random initialisation of BERT-large's 335M weights
    /// would otherwise dominate the cost of a plan.
    fn holds_values(&self) -> bool {
        true
    }

    /// The operand format of [`Backend::matmul`] (see [`MatmulPrecision`]); the
    /// training loop scales the loss when it needs to.
    fn matmul_precision(&self) -> MatmulPrecision {
        MatmulPrecision::Fp32
    }

    /// Waits for queued work and reports the first failure since the last
    /// call, which ends the failed state (see [`Backend::failed`]). The
    /// trait's operations cannot return errors, so a backend records the
    /// first failure instead: a refused allocation (every backend with a
    /// limit) or a failed launch (CUDA). The training loop calls this after
    /// each step and evaluation.
    fn take_failure(&self) -> Result<(), Failure> {
        Ok(())
    }

    /// Whether a failure is recorded and not yet taken. While it is, every
    /// allocation returns a buffer that holds no memory, every operation is
    /// skipped and every value read back is NaN, so the step runs to its
    /// end without effect; the training loop checks this before it changes
    /// host-side state (the optimiser's step count, the loss scale). Never
    /// waits for the device.
    fn failed(&self) -> bool {
        false
    }

    // ---- buffers -------------------------------------------------------
    /// A zero-filled float buffer of `len` elements.
    fn alloc(&self, name: &str, kind: BufKind, len: usize) -> Self::Buf;
    /// A float buffer whose contents are unspecified: the caller promises
    /// that the next operation writing it overwrites every element (an
    /// output of an op documented to overwrite, or a `beta = 0` matmul)
    /// before anything reads it. Accounted exactly as `alloc`; a backend may
    /// skip the zero fill (the CPU backend hands out a recycled buffer as
    /// it is, the CUDA backend issues no memset), and its debug builds fill
    /// it with NaN so that a broken promise shows. Defaults to `alloc`.
    fn alloc_overwritten(&self, name: &str, kind: BufKind, len: usize) -> Self::Buf {
        self.alloc(name, kind, len)
    }
    /// A zero-filled id buffer.
    fn alloc_ids(&self, name: &str, len: usize) -> Self::Ids;
    /// Elements in `buf` (not bytes).
    fn len(&self, buf: &Self::Buf) -> usize;
    /// The element type of `buf` (its kind's, see [`Backend::storage`]).
    fn dtype(&self, buf: &Self::Buf) -> Dtype;
    /// `dst = src`, converted to `dst`'s type.
    fn cast(&self, src: &Self::Buf, dst: &mut Self::Buf);
    /// [`Backend::cast`] of each `src[i]` into `dst[i]` (a layer's weights
    /// before their products); a GPU casts up to four in one launch.
    fn cast_all(&self, src: &[&Self::Buf], dst: &mut [Self::Buf]) {
        for (src, dst) in src.iter().zip(dst) {
            self.cast(src, dst);
        }
    }
    /// Copies host values into `dst`, rounded to its type; `src` must have
    /// `dst`'s length.
    fn upload(&self, dst: &mut Self::Buf, src: &[f64]);
    /// [`Backend::upload`] from f32 values (loaded weights).
    fn upload_f32(&self, dst: &mut Self::Buf, src: &[f32]);
    /// Copies host ids into `dst`; `src` must have `dst`'s length.
    fn upload_ids(&self, dst: &mut Self::Ids, src: &[u32]);
    /// The values of `src`, widened to f64 (NaN while a failure is pending;
    /// zeros on a backend that holds no values).
    fn download(&self, src: &Self::Buf) -> Vec<f64>;
    /// Sets every element of `dst` to `value` (rounded to its type).
    fn fill(&self, dst: &mut Self::Buf, value: f64);
    /// [`Backend::fill`] of every buffer of `dsts` (a step's gradient
    /// zeroing); a backend may do it in one launch.
    fn fill_all(&self, dsts: &mut [Self::Buf], value: f64) {
        for dst in dsts {
            self.fill(dst, value);
        }
    }
    /// Random initialisation: element `i` of `dst` becomes
    /// `scale * key.normal(i)` ([`RngKey::normal`]), except the elements in
    /// `zeroed` (a padding row), which become 0. A backend draws where the
    /// buffer lives; this default draws on the host, on every core, and
    /// uploads.
    fn fill_normal(&self, dst: &mut Self::Buf, key: &RngKey, scale: f64, zeroed: Range<usize>) {
        use rayon::prelude::*;
        let data: Vec<f64> = (0..self.len(dst))
            .into_par_iter()
            .map(|i| {
                if zeroed.contains(&i) {
                    0.0
                } else {
                    scale * key.normal(i as u64)
                }
            })
            .collect();
        self.upload(dst, &data);
    }

    // ---- elementwise -----------------------------------------------------
    /// `out = a + b` (residual connections). Backward: the gradient passes to
    /// both inputs unchanged.
    fn add(&self, a: &Self::Buf, b: &Self::Buf, out: &mut Self::Buf);
    /// `acc += x` (`acc` may be of the master type, `x` of the activations').
    fn add_assign(&self, acc: &mut Self::Buf, x: &Self::Buf);
    /// `buf *= factor`.
    fn scale(&self, buf: &mut Self::Buf, factor: f64);
    /// Sum of squares (for the global gradient norm), accumulated in f64 in
    /// a fixed order.
    fn sum_squares(&self, buf: &Self::Buf) -> f64;

    // ---- matmul ----------------------------------------------------------
    /// See [`MatmulShape`]. Its backward is two more matmuls with transposes
    /// (the model writes them out).
    fn matmul(
        &self,
        shape: &MatmulShape,
        alpha: f64,
        a: &Self::Buf,
        b: &Self::Buf,
        beta: f64,
        c: &mut Self::Buf,
    );
    /// `out[r, j] += bias[j]` for every row of `out` (`n` columns).
    fn bias_add(&self, out: &mut Self::Buf, bias: &Self::Buf, n: usize);
    /// Backward of `bias_add`: `dbias[j] += sum_r dout[r, j]`.
    fn bias_backward(&self, dout: &Self::Buf, dbias: &mut Self::Buf, n: usize);

    // ---- layernorm -------------------------------------------------------
    /// Per row of `n`: `out = (x - mean) * rstd * gamma + beta`; saves `mean`
    /// and `rstd` (one per row) for backward.
    #[allow(clippy::too_many_arguments)]
    fn layernorm_forward(
        &self,
        x: &Self::Buf,
        gamma: &Self::Buf,
        beta: &Self::Buf,
        n: usize,
        eps: f64,
        out: &mut Self::Buf,
        mean: &mut Self::Buf,
        rstd: &mut Self::Buf,
    );
    /// Overwrites `dx`; accumulates `dgamma`, `dbeta`.
    #[allow(clippy::too_many_arguments)]
    fn layernorm_backward(
        &self,
        dout: &Self::Buf,
        x: &Self::Buf,
        gamma: &Self::Buf,
        mean: &Self::Buf,
        rstd: &Self::Buf,
        n: usize,
        dx: &mut Self::Buf,
        dgamma: &mut Self::Buf,
        dbeta: &mut Self::Buf,
    );

    // ---- attention -------------------------------------------------------
    /// `[b, s, heads, dh] -> [b, heads, s, dh]`. Backward: `unpermute_heads`.
    fn permute_heads(&self, x: &Self::Buf, out: &mut Self::Buf, b: usize, s: usize, heads: usize);
    /// `[b, heads, s, dh] -> [b, s, heads, dh]`. Backward: `permute_heads`.
    fn unpermute_heads(&self, x: &Self::Buf, out: &mut Self::Buf, b: usize, s: usize, heads: usize);
    /// Bidirectional attention softmax over keys: for scores `[b, heads, s,
    /// s]`, `probs = softmax(scale * scores)` over the last axis, with keys
    /// whose `mask[b, key] == 0` excluded (probability exactly 0).
    #[allow(clippy::too_many_arguments)]
    fn softmax_forward(
        &self,
        scores: &Self::Buf,
        mask: &Self::Ids,
        b: usize,
        heads: usize,
        s: usize,
        scale: f64,
        probs: &mut Self::Buf,
    );
    /// `dscores = scale * probs * (dprobs - sum(dprobs * probs))` per row
    /// (rows of `s`); overwrites `dscores`.
    fn softmax_backward(
        &self,
        dprobs: &Self::Buf,
        probs: &Self::Buf,
        s: usize,
        scale: f64,
        dscores: &mut Self::Buf,
    );

    // ---- activations -----------------------------------------------------
    /// Exact GELU `x * Phi(x)` with the erf form (as HF BERT).
    fn gelu_forward(&self, x: &Self::Buf, out: &mut Self::Buf);
    /// `dx = dout * gelu'(x)` from the forward's input `x`; overwrites `dx`.
    fn gelu_backward(&self, x: &Self::Buf, dout: &Self::Buf, dx: &mut Self::Buf);
    /// [`Backend::gelu_backward`] into the incoming gradient itself: `d =
    /// d * gelu'(x)`, the same values without a second buffer of its size.
    fn gelu_backward_in_place(&self, x: &Self::Buf, d: &mut Self::Buf);
    /// `out = tanh(x)` (BERT's pooler activation).
    fn tanh_forward(&self, x: &Self::Buf, out: &mut Self::Buf);
    /// Uses the forward's output: `dx = dout * (1 - out^2)`.
    fn tanh_backward(&self, out: &Self::Buf, dout: &Self::Buf, dx: &mut Self::Buf);
    /// `max(x, 0)` (DistilBERT's `pre_classifier` activation).
    fn relu_forward(&self, x: &Self::Buf, out: &mut Self::Buf);
    /// Uses the forward's output: `dx = dout` where `out > 0`, else 0.
    fn relu_backward(&self, out: &Self::Buf, dout: &Self::Buf, dx: &mut Self::Buf);
    /// Inverted dropout; the mask is a function of `key` and the element
    /// index only (counter-based RNG), so backward regenerates it instead of
    /// storing it.
    fn dropout_forward(&self, x: &Self::Buf, out: &mut Self::Buf, p: f64, key: RngKey);
    /// The forward's mask and `1 / (1 - p)` scale applied to `dout`, from
    /// the same `p` and `key`; overwrites `dx`.
    fn dropout_backward(&self, dout: &Self::Buf, dx: &mut Self::Buf, p: f64, key: RngKey);

    // ---- embeddings ------------------------------------------------------
    /// `out[t] (+)= table[ids[t]]` for rows of `dim`.
    fn embedding_forward(
        &self,
        ids: &Self::Ids,
        table: &Self::Buf,
        dim: usize,
        out: &mut Self::Buf,
        accumulate: bool,
    );
    /// `dtable[ids[t]] += dout[t]`, summed in token order (deterministic).
    /// With `rows`, `dtable` is row-sparse: the row of `ids[t]` is its slot,
    /// given here to the rows the step has not looked up before.
    fn embedding_backward(
        &self,
        ids: &Self::Ids,
        dout: &Self::Buf,
        dim: usize,
        dtable: &mut Self::Buf,
        rows: Option<&mut RowSlots>,
    );
    /// `out[i] = x[i, 0]` for `x` of `[b, s, h]` (the `[CLS]` token).
    fn cls_forward(&self, x: &Self::Buf, out: &mut Self::Buf, b: usize, s: usize);
    /// Overwrites `dx` (`[b, s, h]`) with `dout` at token 0 and zeros elsewhere.
    fn cls_backward(&self, dout: &Self::Buf, dx: &mut Self::Buf, b: usize, s: usize);
    /// Mean of `x[i, t]` over tokens with `mask[i, t] != 0` (sentence
    /// embeddings; inference only).
    fn mean_pool(&self, x: &Self::Buf, mask: &Self::Ids, b: usize, s: usize, out: &mut Self::Buf);

    // ---- relative positions (DeBERTa) ------------------------------------
    /// `scores += alpha * rel` gathered at the bucket table (see
    /// [`RelPosShape`]). Backward: [`Backend::rel_pos_scatter`].
    fn rel_pos_gather(
        &self,
        shape: &RelPosShape,
        alpha: f64,
        rel: &Self::Buf,
        idx: &Self::Ids,
        scores: &mut Self::Buf,
    );
    /// Backward of `rel_pos_gather`: overwrites `drel` with `alpha` times the
    /// sum of the score gradients that read each element, summed in
    /// increasing score column (row, when transposed) order.
    fn rel_pos_scatter(
        &self,
        shape: &RelPosShape,
        alpha: f64,
        dscores: &Self::Buf,
        idx: &Self::Ids,
        drel: &mut Self::Buf,
    );
    /// Zeroes, in place, the rows of `n` whose token has `mask == 0`
    /// (DeBERTa's embedding mask). It is its own backward.
    fn mask_rows(&self, x: &mut Self::Buf, mask: &Self::Ids, n: usize);

    // ---- loss ------------------------------------------------------------
    /// Weighted cross-entropy summed over rows and divided by `denom`:
    /// `sum_i w[y_i] * -log softmax(logits_i)[y_i] / denom` (see
    /// [`LossTargets`]). Every label must be below `classes`:
    /// [`Classifier::check_batch`](crate::model::Classifier::check_batch),
    /// which the training loop runs on every batch before any kernel,
    /// refuses others. Backends do not check it again (the CPU backend
    /// panics on such a label, the CUDA one returns NaN).
    fn cross_entropy_forward(
        &self,
        logits: &Self::Buf,
        targets: &LossTargets<'_, Self::Buf, Self::Ids>,
    ) -> f64;
    /// `dlogits_i = dloss * w[y_i] / denom * (softmax(logits_i) - onehot(y_i))`;
    /// overwrites `dlogits`. Labels as for the forward.
    fn cross_entropy_backward(
        &self,
        logits: &Self::Buf,
        targets: &LossTargets<'_, Self::Buf, Self::Ids>,
        dloss: f64,
        dlogits: &mut Self::Buf,
    );

    // ---- optimiser -------------------------------------------------------
    /// One AdamW update with bias correction and decoupled weight decay.
    fn adamw(
        &self,
        param: &mut Self::Buf,
        grad: &Self::Buf,
        m: &mut Self::Buf,
        v: &mut Self::Buf,
        step: &AdamWStep,
    );
    /// Plain SGD: `param -= lr * grad` (a stateless optimiser, for the plan).
    fn sgd(&self, param: &mut Self::Buf, grad: &Self::Buf, lr: f64);

    // ---- fused (Kernels::Fused) ------------------------------------------
    /// Attention without stored probabilities (see [`AttentionShape`]):
    /// `out = dropout(softmax(scale q k^T)) v` over the keys whose
    /// `mask[b, key] != 0`, and per query row the log-sum-exp of the scaled
    /// scores (`-inf` when every key is masked; that row's output is 0).
    fn attention_forward(
        &self,
        shape: &AttentionShape,
        x: &AttentionInputs<'_, Self::Buf, Self::Ids>,
        out: &mut Self::Buf,
        lse: &mut Self::Buf,
    );
    /// Backward of [`Backend::attention_forward`], recomputing the
    /// probabilities from `lse`: overwrites `dq`, `dk`, `dv`, and `delta`
    /// (`[b, heads, s]`, scratch: each row's `sum(dout * out)`).
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        &self,
        shape: &AttentionShape,
        x: &AttentionInputs<'_, Self::Buf, Self::Ids>,
        out: &Self::Buf,
        dout: &Self::Buf,
        lse: &Self::Buf,
        delta: &mut Self::Buf,
        dq: &mut Self::Buf,
        dk: &mut Self::Buf,
        dv: &mut Self::Buf,
    );
    /// `pre += bias` per row (rows of `bias`'s length), then `out =
    /// gelu(pre)`; backward is [`Backend::gelu_backward`] on `pre`.
    fn bias_gelu_forward(&self, pre: &mut Self::Buf, bias: &Self::Buf, out: &mut Self::Buf);
    /// The residual block before a LayerNorm, in one pass: `sum =
    /// dropout(sum + bias) + residual` in place (rows of `bias`'s length),
    /// then `out = LayerNorm(sum)` with `mean` and `rstd` saved, as
    /// [`Backend::layernorm_forward`].
    #[allow(clippy::too_many_arguments)]
    fn residual_layernorm_forward(
        &self,
        sum: &mut Self::Buf,
        bias: &Self::Buf,
        residual: &Self::Buf,
        dropout: f64,
        key: Option<RngKey>,
        gamma: &Self::Buf,
        beta: &Self::Buf,
        eps: f64,
        out: &mut Self::Buf,
        mean: &mut Self::Buf,
        rstd: &mut Self::Buf,
    );
    /// Backward of [`Backend::residual_layernorm_forward`] up to the bias:
    /// overwrites `d_sum` with the LayerNorm's input gradient (the residual
    /// branch's), and `d_branch`, when dropout was on, with its dropout
    /// backward; accumulates `dgamma`, `dbeta`.
    #[allow(clippy::too_many_arguments)]
    fn residual_layernorm_backward(
        &self,
        dout: &Self::Buf,
        sum: &Self::Buf,
        gamma: &Self::Buf,
        mean: &Self::Buf,
        rstd: &Self::Buf,
        dropout: f64,
        key: Option<RngKey>,
        d_sum: &mut Self::Buf,
        d_branch: Option<&mut Self::Buf>,
        dgamma: &mut Self::Buf,
        dbeta: &mut Self::Buf,
    );
    /// One AdamW update of every tensor (`step.weight_decay` where `decay`
    /// says so), with each gradient multiplied by `grad_scale` and, when
    /// `clip` is given, by `clip / norm` where the global L2 norm of the
    /// scaled gradients exceeds it, all without reading the norm back.
    /// The gradient of `sparse`'s tensor is row-sparse: each row's is at
    /// its slot, zero where it has none.
    #[allow(clippy::too_many_arguments)]
    fn adamw_all(
        &self,
        params: &mut [Self::Buf],
        grads: &[Self::Buf],
        m: &mut [Self::Buf],
        v: &mut [Self::Buf],
        decay: &[bool],
        step: &AdamWStep,
        grad_scale: f64,
        clip: Option<f64>,
        sparse: Option<SparseRows<'_, Self::Ids>>,
    );
}

/// Clips gradients to `max_norm` by their global L2 norm; returns the norm
/// before clipping.
pub fn clip_global_norm<B: Backend>(backend: &B, grads: &mut [B::Buf], max_norm: f64) -> f64 {
    let norm = grads
        .iter()
        .map(|g| backend.sum_squares(g))
        .sum::<f64>()
        .sqrt();
    clip_to_norm(backend, grads, norm, max_norm);
    norm
}

/// Clips gradients whose global L2 norm is already known to be `norm`.
pub fn clip_to_norm<B: Backend>(backend: &B, grads: &mut [B::Buf], norm: f64, max_norm: f64) {
    if norm > max_norm && norm > 0.0 {
        let factor = max_norm / norm;
        for g in grads.iter_mut() {
            backend.scale(g, factor);
        }
    }
}

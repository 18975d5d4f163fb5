//! Predicted peaks from the trainer's memory plan, fast.
//!
//! A [`trainer::memory::MemoryPlan`] runs the whole step on a backend that
//! only allocates, recording every buffer of the model, its gradients and
//! optimiser state and the step: milliseconds for the simulated presets
//! (docs/benchmarks.md, "Plan check"), but one per candidate micro-batch of
//! every trial, or of every point of the simulated space, adds up. Two
//! exact shortcuts price every micro-batch of a (model, head, sequence
//! length) at once from a few plans ([`step_curve`]):
//!
//! - The shared BERT-shaped encoder: at a fixed sequence length the plan's
//!   peak is exactly
//!
//!   ```text
//!   peak(L layers, V vocabulary rows, m rows) = a + b L + c m + d L m + e V
//!   ```
//!
//!   (weights, gradients and AdamW state grow with L and V; saved
//!   activations with L m; the workspace live at the peak with m).
//!   [`AffinePeak`] builds five plans of a one/two-layer copy of the model
//!   with a 64/128-row vocabulary (everything else, sequence length and
//!   head included, unchanged), solves for the coefficients and evaluates
//!   the formula: identical to the full plan's peak, byte for byte (tests
//!   `plan_decomposition_*` on small shapes and `plan_equals_the_simulated_peak_*`
//!   on the seven simulated presets; `cargo xtask bench packing
//!   --check-plans`).
//! - DeBERTa: its peak is not affine in the micro-batch (which buffers are
//!   live at the peak changes with it), so the five-plan decomposition
//!   under-predicts it by about a KiB. Its peak is the upper envelope of
//!   the step's live bytes, [`PeakCurve::from_full_plans`]: three full
//!   plans, exact at every micro-batch.
//!
//! Neither is interpolated across sequence lengths: there the peak's
//! position in the step moves.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;

use trainer::memory::{MemoryPlan, PlanError, PlanRequest, step_peaks};
use trainer::model::{HeadConfig, ModelConfig};

use super::curve::PeakCurve;

/// The memory plan request the runner and the simulation use: fp32 weights
/// and activations, AdamW, dropout on, no recomputation, no class weights.
pub fn plan_request(
    config: impl Into<ModelConfig>,
    head: &HeadConfig,
    seq_len: usize,
    micro_batch: usize,
) -> PlanRequest {
    PlanRequest::fp32_adamw(config, head, micro_batch, seq_len)
}

/// The peak of a plan the runner made sure can run.
///
/// The runner plans only steps it has checked: the head with
/// `ModelConfig::check_head`, the sequence clamped to the model's
/// positions, micro-batches of at least one row, and data of two or more
/// classes. So a plan error here is a broken invariant of the runner, not
/// bad input, and it stops the runner with the plan's own message.
fn checked(plan: Result<usize, PlanError>) -> usize {
    plan.unwrap_or_else(|e| panic!("the runner planned an unchecked step: {e}"))
}

/// Peak bytes of one training step (model, gradients, optimiser state and
/// the step's activations) from the trainer's full [`MemoryPlan`] of one
/// micro-batch; [`PlanPeaks`] gives the same number for every micro-batch
/// from a few plans (see the module doc). Panics on a step that cannot run
/// (see [`PlanRequest::check`]).
pub fn plan_peak(
    config: impl Into<ModelConfig>,
    head: &HeadConfig,
    seq_len: usize,
    micro_batch: usize,
) -> u64 {
    let request = plan_request(config, head, seq_len, micro_batch);
    checked(MemoryPlan::new(&request).map(|plan| plan.peak_bytes)) as u64
}

/// The exact peak of `request`'s step (its micro-batch ignored) at every
/// micro-batch: the reduced-plan decomposition for the BERT-shaped
/// families, the full-plan envelope for DeBERTa (see the module doc). An
/// error says why DeBERTa's step could not be enveloped.
pub fn step_curve(request: &PlanRequest) -> Result<PeakCurve, String> {
    match request.config {
        ModelConfig::Bert(_) => Ok(AffinePeak::from_request(request).into()),
        ModelConfig::Deberta(_) => PeakCurve::from_full_plans(request),
    }
}

/// [`plan_peak`] for one (model, head, sequence length) and any
/// micro-batch, from a [`step_curve`] built on first use: what the runner
/// passes to `Packer::try_admit` as `&mut |micro| peaks.peak(micro)`.
#[derive(Debug)]
pub struct PlanPeaks {
    request: PlanRequest,
    curve: OnceCell<Option<PeakCurve>>,
    /// Full plans by micro-batch, for a step [`step_curve`] cannot price.
    planned: RefCell<HashMap<usize, u64>>,
}

impl PlanPeaks {
    /// The runner's usual step: [`plan_request`] (fp32, AdamW, dropout).
    pub fn new(config: impl Into<ModelConfig>, head: HeadConfig, seq_len: usize) -> Self {
        Self::from_request(plan_request(config, &head, seq_len, 1))
    }

    /// Any other step (precision, recomputation, optimiser, class
    /// weights); `request.micro_batch` is ignored.
    pub fn from_request(request: PlanRequest) -> Self {
        Self {
            request,
            curve: OnceCell::new(),
            planned: RefCell::new(HashMap::new()),
        }
    }

    /// Peak bytes at `micro_batch` rows (at least 1).
    pub fn peak(&self, micro_batch: usize) -> u64 {
        let curve = self.curve.get_or_init(|| {
            step_curve(&self.request)
                .inspect_err(|e| {
                    tracing::warn!(
                        "{} at length {}: {e}; planning each micro-batch in full",
                        self.request.config.model_type(),
                        self.request.seq_len
                    )
                })
                .ok()
        });
        if let Some(curve) = curve {
            return curve.at(micro_batch);
        }
        *self
            .planned
            .borrow_mut()
            .entry(micro_batch)
            .or_insert_with(|| {
                checked(step_peaks(&self.request, &[micro_batch.max(1)]).map(|p| p[0])) as u64
            })
    }
}

/// Layer counts and vocabulary size of the reduced plans.
const L0: usize = 1;
const L1: usize = 2;
const V0: usize = 64;
const V1: usize = 128;

/// `peak(m) = fixed + per_row * m` for one model at one sequence length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AffinePeak {
    pub fixed: i128,
    pub per_row: i128,
}

impl AffinePeak {
    /// Peak bytes for micro-batch `micro` (at least 1).
    pub fn at(&self, micro: usize) -> u64 {
        let bytes = self.fixed + self.per_row * micro as i128;
        u64::try_from(bytes).expect("a plan's peak is positive")
    }

    /// Solves the decomposition for `config` at `seq_len` (the runner's
    /// usual step, [`plan_request`]) from five reduced plans.
    pub fn from_reduced_plans(
        config: impl Into<ModelConfig>,
        head: &HeadConfig,
        seq_len: usize,
    ) -> Self {
        Self::from_request(&plan_request(config, head, seq_len, 1))
    }

    /// The decomposition for any plan request (its micro-batch ignored).
    pub fn from_request(request: &PlanRequest) -> Self {
        let config = &request.config;
        let p = |layers: usize, vocab: usize, micro: usize| -> i128 {
            let reduced = PlanRequest {
                config: config.resized(layers, vocab),
                micro_batch: micro,
                ..request.clone()
            };
            checked(MemoryPlan::new(&reduced).map(|plan| plan.peak_bytes)) as i128
        };
        let (p01, p11, p02, p12) = (p(L0, V0, 1), p(L1, V0, 1), p(L0, V0, 2), p(L1, V0, 2));
        let per_vocab_row = (p(L0, V1, 1) - p01) / (V1 - V0) as i128;
        // Differences of the bilinear form in (L, m) at L0/L1 and m = 1/2.
        let per_layer_row = p12 - p11 - p02 + p01;
        let per_layer = p11 - p01 - per_layer_row;
        let per_row = p02 - p01 - per_layer_row * L0 as i128;
        let layers = config.num_hidden_layers() as i128;
        let at_l_m1 = p01 + (layers - L0 as i128) * (per_layer + per_layer_row);
        let vocab = (config.vocab_size() as i128 - V0 as i128) * per_vocab_row;
        let row = per_row + per_layer_row * layers;
        Self {
            fixed: at_l_m1 - row + vocab,
            per_row: row,
        }
    }
}

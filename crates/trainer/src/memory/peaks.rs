//! A step's peak at every micro-batch from a few memory plans, exactly.
//!
//! A [`MemoryPlan`] runs the whole step on a backend that only allocates,
//! recording every buffer of the model, its gradients and optimiser state
//! and the step: milliseconds for the presets (docs/benchmarks.md, "Plan
//! check"), but one per candidate micro-batch of every trial a study runner
//! admits, or of every point of a simulated search space, adds up. Two
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
//!   `plan_decomposition_*` in `tests/plan_peaks.rs` on small shapes, and
//!   the study runner's packing tests on the seven simulated presets).
//! - DeBERTa: its peak is not affine in the micro-batch (which buffers are
//!   live at the peak changes with it), so the five-plan decomposition
//!   under-predicts it by about a KiB. Its peak is the upper envelope of
//!   the step's live bytes, [`PeakCurve::from_full_plans`]: three full
//!   plans, exact at every micro-batch.
//!
//! Neither is interpolated across sequence lengths: there the peak's
//! position in the step moves.

use std::cell::RefCell;
use std::collections::HashMap;

use super::curve::{CurveError, PeakCurve};
use super::plan::{MemoryPlan, PlanError, PlanRequest, step_peaks};
use crate::model::{HeadConfig, ModelConfig};

/// Peak bytes of the usual fine-tuning step
/// ([`PlanRequest::fp32_adamw`]: model, gradients, AdamW state and the
/// step's activations) at `micro_batch` rows of `seq_len` tokens, from the
/// full [`MemoryPlan`]; [`PlanPeaks`] gives the same number for every
/// micro-batch from a few plans. A step that cannot run is a
/// [`PlanError`] naming the field (see [`PlanRequest::check`]).
pub fn plan_peak(
    config: impl Into<ModelConfig>,
    head: &HeadConfig,
    seq_len: usize,
    micro_batch: usize,
) -> Result<u64, PlanError> {
    let request = PlanRequest::fp32_adamw(config, head, micro_batch, seq_len);
    Ok(MemoryPlan::new(&request)?.peak_bytes as u64)
}

/// The exact peak of `request`'s step (its micro-batch ignored) at every
/// micro-batch: the reduced-plan decomposition for the BERT-shaped
/// families, the full-plan envelope for DeBERTa (see the module doc). An
/// error is a request that cannot run, or why DeBERTa's step could not be
/// enveloped.
pub fn step_curve(request: &PlanRequest) -> Result<PeakCurve, CurveError> {
    match request.config {
        ModelConfig::Bert(_) => Ok(AffinePeak::from_request(request)?.into()),
        ModelConfig::Deberta(_) => PeakCurve::from_full_plans(request),
    }
}

/// [`plan_peak`] of one step (model, head, sequence length, precision and
/// the rest of a [`PlanRequest`]) at any micro-batch, from a
/// [`step_curve`] built when it is made; a step the curve cannot price is
/// planned in full at each micro-batch asked for. What a study runner
/// hands its packer as the peak of a trial.
#[derive(Debug)]
pub struct PlanPeaks {
    request: PlanRequest,
    curve: Result<PeakCurve, CurveError>,
    /// Full plans by micro-batch, for a step [`step_curve`] cannot price.
    planned: RefCell<HashMap<usize, u64>>,
}

impl PlanPeaks {
    /// The usual fine-tuning step ([`PlanRequest::fp32_adamw`]); an error
    /// names the field of a step that cannot run.
    pub fn new(
        config: impl Into<ModelConfig>,
        head: &HeadConfig,
        seq_len: usize,
    ) -> Result<Self, PlanError> {
        Self::from_request(PlanRequest::fp32_adamw(config, head, 1, seq_len))
    }

    /// Any other step (precision, recomputation, optimiser, class
    /// weights); `request.micro_batch` is ignored. An error names the field
    /// of a step that cannot run.
    pub fn from_request(request: PlanRequest) -> Result<Self, PlanError> {
        let request = PlanRequest {
            micro_batch: 1,
            ..request
        };
        request.check()?;
        let curve = match step_curve(&request) {
            Err(CurveError::Plan(e)) => return Err(e),
            curve => curve,
        };
        Ok(Self {
            request,
            curve,
            planned: RefCell::new(HashMap::new()),
        })
    }

    /// Why the step's peaks come from full plans rather than a curve
    /// (`None` when a curve prices them).
    pub fn unpriced(&self) -> Option<&CurveError> {
        self.curve.as_ref().err()
    }

    /// Peak bytes at `micro_batch` rows; zero rows, or more rows of the
    /// sequence length than a count of tokens holds, are a [`PlanError`].
    pub fn peak(&self, micro_batch: usize) -> Result<u64, PlanError> {
        let request = PlanRequest {
            micro_batch,
            ..self.request.clone()
        };
        request.check()?;
        if let Ok(curve) = &self.curve {
            return Ok(curve.at(micro_batch));
        }
        if let Some(&peak) = self.planned.borrow().get(&micro_batch) {
            return Ok(peak);
        }
        let peak = step_peaks(&request, &[micro_batch])?[0] as u64;
        self.planned.borrow_mut().insert(micro_batch, peak);
        Ok(peak)
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
    /// Bytes at zero rows (weights, gradients, optimiser state and the
    /// step's fixed workspace); may be negative for a line of a
    /// [`PeakCurve`] that only counts where it is highest.
    pub fixed: i128,
    /// Bytes per row of the micro-batch.
    pub per_row: i128,
}

impl AffinePeak {
    /// Peak bytes for micro-batch `micro`, clamped to `0..=u64::MAX` (a
    /// line from a plan is positive at every micro-batch of at least 1).
    pub fn at(&self, micro: usize) -> u64 {
        let bytes = self
            .fixed
            .saturating_add(self.per_row.saturating_mul(micro as i128));
        u64::try_from(bytes.max(0)).unwrap_or(u64::MAX)
    }

    /// Solves the decomposition for `config` at `seq_len` (the usual
    /// fine-tuning step, [`PlanRequest::fp32_adamw`]) from five reduced
    /// plans; an error names the field of a step that cannot run.
    pub fn from_reduced_plans(
        config: impl Into<ModelConfig>,
        head: &HeadConfig,
        seq_len: usize,
    ) -> Result<Self, PlanError> {
        Self::from_request(&PlanRequest::fp32_adamw(config, head, 1, seq_len))
    }

    /// The decomposition for any plan request (its micro-batch ignored);
    /// an error names the field of a step that cannot run.
    pub fn from_request(request: &PlanRequest) -> Result<Self, PlanError> {
        // The reduced plans replace the layers and vocabulary, so the
        // request itself is checked first (a vocabulary of 0 rows would
        // otherwise be priced).
        PlanRequest {
            micro_batch: 1,
            ..request.clone()
        }
        .check()?;
        let config = &request.config;
        let p = |layers: usize, vocab: usize, micro: usize| -> Result<i128, PlanError> {
            let reduced = PlanRequest {
                config: config.resized(layers, vocab),
                micro_batch: micro,
                ..request.clone()
            };
            Ok(MemoryPlan::new(&reduced)?.peak_bytes as i128)
        };
        let (p01, p11, p02, p12) = (p(L0, V0, 1)?, p(L1, V0, 1)?, p(L0, V0, 2)?, p(L1, V0, 2)?);
        let per_vocab_row = (p(L0, V1, 1)? - p01) / (V1 - V0) as i128;
        // Differences of the bilinear form in (L, m) at L0/L1 and m = 1/2.
        let per_layer_row = p12 - p11 - p02 + p01;
        let per_layer = p11 - p01 - per_layer_row;
        let per_row = p02 - p01 - per_layer_row * L0 as i128;
        let layers = config.num_hidden_layers() as i128;
        let at_l_m1 = p01 + (layers - L0 as i128) * (per_layer + per_layer_row);
        let vocab = (config.vocab_size() as i128 - V0 as i128) * per_vocab_row;
        let row = per_row + per_layer_row * layers;
        Ok(Self {
            fixed: at_l_m1 - row + vocab,
            per_row: row,
        })
    }
}

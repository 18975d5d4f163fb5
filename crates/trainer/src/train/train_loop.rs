//! The training loop: micro-batches accumulated into optimiser steps,
//! clipping, the schedule, evaluation each epoch, early stopping, and an
//! observer that may stop the trial.
//!
//! Out of memory: a step (or an evaluation) whose allocation is refused
//! ends without effect, and [`train`] takes the refusal from the backend
//! (see [`crate::memory::oom`]), splits the step's micro-batches in half
//! and runs the step again; the smaller
//! micro-batch is kept for the rest of the run. Because the loss
//! denominators count examples over the whole step, a split step computes
//! the same loss and gradients up to rounding (dropout masks differ: they are
//! keyed per micro-batch). Only a step that fails at micro-batch 1 is
//! [`TrainError::OutOfMemory`].

use std::time::Instant;

use super::batches::TrainBatches;
use super::loss_scale::{LossScaleConfig, LossScaler};
use super::metrics::{EpochMetrics, Metrics, argmax_rows};
use super::optimizer::{Optimizer, OptimizerConfig};
use super::schedule::LinearSchedule;
use crate::backend::{Backend, Failure, Kernels, clip_global_norm, clip_to_norm};
use crate::batch::Batch;
use crate::memory::{BufKind, OutOfMemory};
use crate::model::{BatchError, Classifier, Mode};

/// What the observer (a pruner) tells the loop after an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Go on training.
    Continue,
    /// End the run after this epoch; [`TrainReport::stopped_by_observer`]
    /// is set.
    Stop,
}

impl Control {
    /// `Stop` when `stop`, else `Continue`.
    pub fn stop_if(stop: bool) -> Control {
        if stop {
            Control::Stop
        } else {
            Control::Continue
        }
    }
}

/// Which validation figure early stopping watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Monitor {
    /// Lower is better.
    Loss,
    /// Higher is better.
    Accuracy,
    /// Macro F1; higher is better.
    F1Macro,
}

/// The settings of one run of [`train`]; the defaults are 3 epochs of
/// AdamW at peak rate `5e-5` with 10% warmup and clipping at norm 1.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// Passes over the training batches; at least 1.
    pub epochs: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Fraction of all optimiser steps spent warming up.
    pub warmup_ratio: f64,
    /// The optimiser and its hyperparameters.
    pub optimizer: OptimizerConfig,
    /// Clip gradients to this global L2 norm.
    pub max_grad_norm: Option<f64>,
    /// Micro-batches per optimiser step.
    pub accumulation_steps: usize,
    /// Per-class loss weights (length = number of classes).
    pub class_weights: Option<Vec<f64>>,
    /// Stop after this many epochs without improvement of `monitor`.
    pub patience: Option<usize>,
    /// The validation figure that picks the best epoch and drives early
    /// stopping; macro F1 by default.
    pub monitor: Monitor,
    /// Recompute each layer's activations in backward instead of keeping them.
    pub recompute: bool,
    /// Seeds dropout and the order of batches.
    pub seed: u64,
    /// Shuffle the order of training batches each epoch, and with
    /// [`TrainBatches::Redrawn`] draw which examples share a batch anew;
    /// without it every epoch trains on the same batches in the same order.
    pub shuffle: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: 3,
            lr: 5e-5,
            warmup_ratio: 0.1,
            optimizer: OptimizerConfig::default(),
            max_grad_norm: Some(1.0),
            accumulation_steps: 1,
            class_weights: None,
            patience: None,
            monitor: Monitor::F1Macro,
            recompute: false,
            seed: 0,
            shuffle: true,
        }
    }
}

impl TrainConfig {
    /// Refuses a learning rate, warm-up ratio, clipping norm or optimiser
    /// setting that would train on NaN or not at all, naming the field:
    /// [`train`] checks it before any kernel runs, since such a value
    /// would otherwise surface epochs later as a diverged loss.
    pub fn check_hyperparameters(&self) -> Result<(), String> {
        let bad = |field: &str, value: f64, need: &str| Err(format!("{field} = {value}: {need}"));
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            return bad("lr", self.lr, "need a finite value at least 0");
        }
        if !(0.0..=1.0).contains(&self.warmup_ratio) {
            return bad("warmup_ratio", self.warmup_ratio, "need a value in [0, 1]");
        }
        if let Some(norm) = self.max_grad_norm
            && !(norm.is_finite() && norm > 0.0)
        {
            return bad("max_grad_norm", norm, "need a finite value above 0");
        }
        if let OptimizerConfig::AdamW {
            beta1,
            beta2,
            eps,
            weight_decay,
        } = self.optimizer
        {
            for (field, beta) in [("beta1", beta1), ("beta2", beta2)] {
                if !(0.0..1.0).contains(&beta) {
                    return bad(field, beta, "need a value in [0, 1)");
                }
            }
            if !(eps.is_finite() && eps > 0.0) {
                return bad("eps", eps, "need a finite value above 0");
            }
            if !(weight_decay.is_finite() && weight_decay >= 0.0) {
                return bad(
                    "weight_decay",
                    weight_decay,
                    "need a finite value at least 0",
                );
            }
        }
        Ok(())
    }
}

/// Why [`train`] (or [`evaluate`]) stopped without a result.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TrainError {
    /// A training batch does not fit the model (checked before any kernel
    /// runs).
    #[error("training batch {index}: {source}")]
    TrainBatch {
        /// Position of the batch in the training batches, 0-based (for
        /// [`TrainBatches::Redrawn`], in its epoch's draw before the order
        /// is shuffled; the checks before training check epoch 0's).
        index: usize,
        /// What is wrong with it.
        source: BatchError,
    },
    /// A validation batch does not fit the model.
    #[error("validation batch {index}: {source}")]
    ValidBatch {
        /// Position of the batch in the validation batches, 0-based.
        index: usize,
        /// What is wrong with it.
        source: BatchError,
    },
    /// The settings or inputs cannot be trained on: no epochs, no
    /// accumulation steps, no training batches, class weights of the
    /// wrong length or not finite and non-negative, or a hyperparameter
    /// out of its range (see [`TrainConfig::check_hyperparameters`]).
    #[error("training config: {0}")]
    Config(String),
    /// The validation predictions could not be scored.
    #[error("validation metrics: {0}")]
    Metrics(#[from] super::metrics::MetricsError),
    /// The device failed (see [`crate::backend::Backend::take_failure`]).
    #[error("device failure: {0}")]
    Device(#[from] crate::backend::DeviceFailure),
    /// A training step's loss was not finite.
    #[error("training diverged: loss is {loss} at optimiser step {step}")]
    Diverged {
        /// The step's loss (NaN or infinite).
        loss: f64,
        /// The failing optimiser step, counted from 1.
        step: u64,
    },
    /// The evaluation after an epoch gave a loss that is not finite (the
    /// epoch's last update broke the weights): no metric of it means
    /// anything, and the next epoch would diverge.
    #[error("training diverged: validation loss is {loss} after epoch {epoch}")]
    ValidationDiverged {
        /// The validation loss (NaN or infinite).
        loss: f64,
        /// The epoch just trained, 0-based.
        epoch: usize,
    },
    /// Even micro-batch 1 did not fit (`micro_batch: 1`), or the gradients
    /// and optimiser state did not (`micro_batch: 0`).
    #[error("{error} (micro-batch {micro_batch})")]
    OutOfMemory {
        /// Rows per micro-batch when it failed: 1, or 0 when the gradients
        /// and optimiser state did not fit.
        micro_batch: usize,
        /// The refused allocation.
        #[source]
        error: OutOfMemory,
    },
}

/// One out-of-memory the loop recovered from by halving the micro-batch.
#[derive(Clone, Debug, PartialEq)]
pub struct OomRetry {
    /// Optimiser steps completed before the failed one (0-based index of
    /// the step that was retried).
    pub step: u64,
    /// Rows in the largest micro-batch of the attempt that failed.
    pub from_micro_batch: usize,
    /// Rows per micro-batch from the retry on: half of
    /// `from_micro_batch`, rounded up.
    pub to_micro_batch: usize,
    /// True when the evaluation after an epoch failed rather than a step.
    pub during_evaluation: bool,
    /// The refused allocation.
    pub error: OutOfMemory,
}

/// What a run of [`train`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainReport {
    /// Metrics of every epoch run, in order (index = epoch).
    pub epochs: Vec<EpochMetrics>,
    /// Index into `epochs` of the best epoch by the monitored figure.
    pub best_epoch: usize,
    /// True when the observer returned [`Control::Stop`].
    pub stopped_by_observer: bool,
    /// True when `patience` epochs in a row passed without improvement of
    /// the monitored figure.
    pub early_stopped: bool,
    /// Optimiser steps run in all, skipped updates included.
    pub steps: u64,
    /// Micro-batch size at the end (smaller than the largest training batch
    /// after an out-of-memory retry).
    pub micro_batch: usize,
    /// Every out-of-memory recovered from, in order.
    pub oom_retries: Vec<OomRetry>,
    /// Optimiser steps whose update loss scaling skipped (a gradient
    /// overflowed fp16); always 0 without loss scaling.
    pub skipped_steps: u64,
}

/// The state one training step needs besides the model.
pub struct StepContext<B: Backend> {
    /// The optimiser and its state.
    pub optimizer: Optimizer<B>,
    /// Per-class loss weights on the device (one per class); `None` for an
    /// unweighted loss.
    pub class_weights: Option<B::Buf>,
    host_class_weights: Option<Vec<f64>>,
    /// Clip gradients to this global L2 norm before the update.
    pub max_grad_norm: Option<f64>,
    /// Recompute each layer's activations in backward instead of keeping
    /// them.
    pub recompute: bool,
    /// Seeds dropout, with `micro_steps`.
    pub seed: u64,
    /// Micro-batches run so far (keys dropout).
    pub micro_steps: u64,
    /// Dynamic loss scaling, for a backend whose matrix products need it
    /// (fp16): GradScaler's defaults unless replaced.
    pub loss_scaler: Option<LossScaler>,
}

/// What one optimiser step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepLoss {
    /// The weighted mean loss of the step's micro-batches.
    pub loss: f64,
    /// False when loss scaling found a gradient that was not finite and
    /// skipped the update.
    pub applied: bool,
}

impl<B: Backend> StepContext<B> {
    /// Allocates gradients, optimiser state and the class-weight buffer.
    pub fn new<M: Classifier<B> + ?Sized>(
        be: &B,
        model: &mut M,
        optimizer: OptimizerConfig,
        class_weights: Option<&[f64]>,
        max_grad_norm: Option<f64>,
        recompute: bool,
        seed: u64,
    ) -> Self {
        // The fused AdamW reads the word-embedding table's gradient through
        // its rows' slots; the reference kernels keep every gradient dense.
        let row_sparse =
            be.kernels() == Kernels::Fused && matches!(optimizer, OptimizerConfig::AdamW { .. });
        model.params_mut().alloc_grads(be, row_sparse);
        let optimizer = Optimizer::new(be, model.params(), optimizer);
        let class_weights = class_weights.map(|w| {
            let mut buf = be.alloc("class_weights", BufKind::Input, w.len());
            be.upload(&mut buf, w);
            buf
        });
        let host_class_weights = class_weights.as_ref().map(|w| be.download(w));
        let loss_scaler = be.matmul_precision().needs_loss_scaling().then(|| {
            LossScaler::new(LossScaleConfig::default()).expect("the default settings are valid")
        });
        Self {
            optimizer,
            class_weights,
            host_class_weights,
            max_grad_norm,
            recompute,
            seed,
            micro_steps: 0,
            loss_scaler,
        }
    }
}

/// One optimiser step over already validated micro-batches: forward and
/// backward of each (uploaded one at a time), loss unscaling, clipping, the
/// update. This is the function the memory plan runs.
///
/// When the backend records a failure (an allocation refused), the step
/// stops before anything outside it changes (optimiser state, step count,
/// loss scale) and returns a NaN loss, not applied; the caller takes the
/// failure with [`Backend::take_failure`].
pub fn train_step<B: Backend, M: Classifier<B> + ?Sized>(
    be: &B,
    model: &mut M,
    ctx: &mut StepContext<B>,
    micro_batches: &[&Batch],
    lr: f64,
) -> Result<StepLoss, BatchError> {
    // A label without a class weight (weights given for fewer classes
    // than the model has) is refused before the loss reads past them.
    if let Some(w) = &ctx.host_class_weights {
        for batch in micro_batches {
            if let Some((row, &label)) = batch
                .labels
                .iter()
                .enumerate()
                .find(|(_, y)| **y >= w.len())
            {
                return Err(BatchError::LabelOutOfRange {
                    label,
                    row,
                    classes: w.len(),
                });
            }
        }
    }
    let denom: f64 = match &ctx.host_class_weights {
        None => micro_batches.iter().map(|b| b.batch as f64).sum(),
        Some(w) => micro_batches
            .iter()
            .flat_map(|b| b.labels.iter())
            .map(|&y| w.get(y).copied().unwrap_or(0.0))
            .sum(),
    };
    // The loss's gradient is `1 / denom` per example; a loss scale (a power
    // of two) multiplies it by dividing the denominator, exactly.
    let scale = ctx.loss_scaler.as_ref().map_or(1.0, LossScaler::scale);
    let denom = denom.max(f64::MIN_POSITIVE) / scale;
    let params = model.params_mut();
    params.zero_grads(be);
    // Room for every micro-batch's rows of a row-sparse gradient at once.
    params.reserve_rows(be, micro_batches.iter().map(|b| b.input_ids.len()).sum());
    let mut loss = 0.0;
    for batch in micro_batches {
        let mode = Mode::Train {
            seed: ctx.seed,
            step: ctx.micro_steps,
        };
        ctx.micro_steps += 1;
        loss += model.train_batch(
            be,
            batch,
            ctx.class_weights.as_ref(),
            denom,
            mode,
            ctx.recompute,
        )?;
        if be.failed() {
            return Ok(StepLoss {
                loss: f64::NAN,
                applied: false,
            });
        }
    }
    let loss = loss / scale;
    let grads = &mut model.params_mut().grads;
    let norm = match &mut ctx.loss_scaler {
        None => None,
        Some(scaler) => match scaler.unscale(be, grads) {
            Some(sum_squares) => Some(sum_squares.sqrt()),
            None => {
                return Ok(StepLoss {
                    loss,
                    applied: false,
                });
            }
        },
    };
    // The fused optimiser clips on the device, unless loss scaling has
    // already read the norm back.
    let device_clip = ctx.optimizer.clips(be) && norm.is_none();
    if let Some(max) = ctx.max_grad_norm
        && !device_clip
    {
        match norm {
            Some(norm) => clip_to_norm(be, grads, norm, max),
            None => {
                clip_global_norm(be, grads, max);
            }
        }
    }
    let clip = ctx.max_grad_norm.filter(|_| device_clip);
    ctx.optimizer.step(be, model.params_mut(), lr, clip);
    Ok(StepLoss {
        loss,
        applied: true,
    })
}

/// Loss and metrics over validation batches in eval mode; the loss is the
/// weighted mean cross-entropy when class weights are given, as in training.
pub fn evaluate<B: Backend, M: Classifier<B> + ?Sized>(
    be: &B,
    model: &M,
    batches: &[Batch],
    class_weights: Option<&B::Buf>,
) -> Result<Metrics, TrainError> {
    let classes = model.num_labels();
    let (mut preds, mut labels) = (Vec::new(), Vec::new());
    let (mut loss_sum, mut denom) = (0.0, 0.0);
    let host_w = class_weights.map(|w| be.download(w));
    if let Some(w) = host_w.as_ref().filter(|w| w.len() != classes) {
        return Err(TrainError::Config(format!(
            "{} class weights for a model of {classes} classes",
            w.len()
        )));
    }
    for (index, batch) in batches.iter().enumerate() {
        let (logits, loss) = model
            .evaluate_batch(be, batch, class_weights, 1.0)
            .map_err(|source| TrainError::ValidBatch { index, source })?;
        loss_sum += loss;
        denom += batch
            .labels
            .iter()
            .map(|&y| host_w.as_ref().map_or(1.0, |w| w[y]))
            .sum::<f64>();
        preds.extend(argmax_rows(&logits, classes));
        labels.extend_from_slice(&batch.labels);
    }
    Ok(Metrics::from_predictions(
        &preds,
        &labels,
        classes,
        loss_sum / denom.max(f64::MIN_POSITIVE),
    )?)
}

/// Runs `f` and takes the backend's failure: `Ok(Err(oom))` when an
/// allocation was refused (the caller retries with less), an error when the
/// device failed.
fn attempt<B: Backend, T>(
    be: &B,
    f: impl FnOnce() -> T,
) -> Result<Result<T, OutOfMemory>, TrainError> {
    let value = f();
    match be.take_failure() {
        Ok(()) => Ok(Ok(value)),
        Err(Failure::OutOfMemory(oom)) => Ok(Err(oom)),
        Err(Failure::Device(failure)) => Err(TrainError::Device(failure)),
    }
}

/// The micro-batch after an out-of-memory at `from` rows (half, rounded
/// up), or the final error when `from` is already 1.
fn halve(
    from: usize,
    error: OutOfMemory,
    step: u64,
    during_evaluation: bool,
    report: &mut TrainReport,
) -> Result<usize, TrainError> {
    if from <= 1 {
        return Err(TrainError::OutOfMemory {
            micro_batch: 1,
            error,
        });
    }
    let to = from.div_ceil(2);
    report.oom_retries.push(OomRetry {
        step,
        from_micro_batch: from,
        to_micro_batch: to,
        during_evaluation,
        error,
    });
    report.micro_batch = to;
    Ok(to)
}

/// Validation metrics with batches of at most `micro` rows; halves `micro`
/// on out-of-memory.
fn evaluate_fitted<B: Backend, M: Classifier<B> + ?Sized>(
    be: &B,
    model: &M,
    valid_batches: &[Batch],
    class_weights: Option<&B::Buf>,
    report: &mut TrainReport,
) -> Result<Metrics, TrainError> {
    loop {
        let micro = report.micro_batch;
        let largest = valid_batches.iter().map(|b| b.batch).max().unwrap_or(0);
        let fitted: Vec<Batch>;
        let batches = if largest <= micro {
            valid_batches
        } else {
            fitted = valid_batches
                .iter()
                .flat_map(|b| b.fit_to(micro).into_owned())
                .collect();
            &fitted
        };
        match attempt(be, || evaluate(be, model, batches, class_weights))? {
            Ok(metrics) => return metrics,
            Err(error) => {
                let from = largest.min(micro);
                halve(from, error, report.steps, true, report)?;
            }
        }
    }
}

fn better(monitor: Monitor, a: &Metrics, b: &Metrics) -> bool {
    match monitor {
        Monitor::Loss => a.loss < b.loss,
        Monitor::Accuracy => a.accuracy > b.accuracy,
        Monitor::F1Macro => a.f1_macro > b.f1_macro,
    }
}

/// Fine-tunes `model` on `train_batches` (a slice of batches, the same
/// every epoch, or batches drawn anew each epoch: [`TrainBatches`]),
/// evaluating on `valid_batches` after each epoch and calling `observer`
/// with the epoch's metrics.
pub fn train<'a, B: Backend, M: Classifier<B> + ?Sized>(
    be: &B,
    model: &mut M,
    train_batches: impl Into<TrainBatches<'a>>,
    valid_batches: &[Batch],
    cfg: &TrainConfig,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<TrainReport, TrainError> {
    let classes = model.num_labels();
    // Every epoch's batches hold the same examples, so epoch 0's stand for
    // all in the checks below.
    let source = train_batches.into();
    let first = source
        .epoch(0, cfg.seed, false, cfg.accumulation_steps)
        .map_err(|e| TrainError::Config(e.to_string()))?;
    if cfg.accumulation_steps == 0 || cfg.epochs == 0 || first.is_empty() {
        return Err(TrainError::Config(
            "epochs, accumulation_steps and the training set must be non-empty".into(),
        ));
    }
    cfg.check_hyperparameters().map_err(TrainError::Config)?;
    if let Some(w) = &cfg.class_weights
        && (w.len() != classes || w.iter().any(|v| !v.is_finite() || *v < 0.0))
    {
        return Err(TrainError::Config(format!(
            "class_weights {w:?}: need {classes} finite non-negative values"
        )));
    }
    // Validate everything on the host before any kernel runs.
    for (index, b) in first.iter().flatten() {
        model
            .check_batch(b)
            .map_err(|source| TrainError::TrainBatch {
                index: *index,
                source,
            })?;
    }
    let steps_per_epoch = first.len() as u64;
    let largest_batch = first
        .iter()
        .flatten()
        .map(|(_, b)| b.batch)
        .max()
        .unwrap_or(1);
    drop(first);
    for (index, b) in valid_batches.iter().enumerate() {
        model
            .check_batch(b)
            .map_err(|source| TrainError::ValidBatch { index, source })?;
    }
    let total = steps_per_epoch * cfg.epochs as u64;
    let schedule = LinearSchedule {
        peak_lr: cfg.lr,
        warmup_steps: (cfg.warmup_ratio * total as f64).ceil() as u64,
        total_steps: total,
    };
    let mut ctx = attempt(be, || {
        StepContext::new(
            be,
            model,
            cfg.optimizer,
            cfg.class_weights.as_deref(),
            cfg.max_grad_norm,
            cfg.recompute,
            cfg.seed,
        )
    })?
    .map_err(|error| TrainError::OutOfMemory {
        micro_batch: 0,
        error,
    })?;
    let mut report = TrainReport {
        epochs: Vec::new(),
        best_epoch: 0,
        stopped_by_observer: false,
        early_stopped: false,
        steps: 0,
        micro_batch: largest_batch,
        oom_retries: Vec::new(),
        skipped_steps: 0,
    };
    let mut since_best = 0;
    for epoch in 0..cfg.epochs {
        let start = Instant::now();
        let steps = source
            .epoch(epoch, cfg.seed, cfg.shuffle, cfg.accumulation_steps)
            .map_err(|e| TrainError::Config(e.to_string()))?;
        let mut loss_sum = 0.0;
        let mut groups = 0;
        for group in &steps {
            // The schedule moves with applied updates only: an fp16 step
            // skipped for an overflowed gradient leaves it where it was,
            // as Hugging Face's Trainer steps its scheduler.
            let lr = schedule.lr(report.steps - report.skipped_steps);
            let loss = loop {
                let pieces: Vec<_> = group
                    .iter()
                    .map(|(_, batch)| batch.fit_to(report.micro_batch))
                    .collect();
                let micro: Vec<&Batch> = pieces.iter().flat_map(|p| p.iter()).collect();
                let micro_steps = ctx.micro_steps;
                match attempt(be, || train_step(be, model, &mut ctx, &micro, lr))? {
                    Ok(result) => {
                        break result.map_err(|source| TrainError::TrainBatch {
                            index: group[0].0,
                            source,
                        })?;
                    }
                    Err(error) => {
                        // Nothing of the failed attempt survives: its
                        // buffers were freed when the step returned, it
                        // stopped before the parameters, the optimiser state
                        // and the loss scale, and the retry zeroes the
                        // gradients. Dropout keys restart where the step
                        // started.
                        ctx.micro_steps = micro_steps;
                        let largest = micro.iter().map(|b| b.batch).max().unwrap_or(1);
                        halve(largest, error, report.steps, false, &mut report)?;
                    }
                }
            };
            report.steps += 1;
            let StepLoss { loss, applied } = loss;
            // A non-finite loss came from the forward pass, which no loss
            // scale changes; a finite one with an overflowed gradient only
            // costs the update.
            if !loss.is_finite() {
                return Err(TrainError::Diverged {
                    loss,
                    step: report.steps,
                });
            }
            if !applied {
                report.skipped_steps += 1;
            }
            loss_sum += loss;
            groups += 1;
        }
        let valid = evaluate_fitted(
            be,
            model,
            valid_batches,
            ctx.class_weights.as_ref(),
            &mut report,
        )?;
        if !valid.loss.is_finite() {
            return Err(TrainError::ValidationDiverged {
                loss: valid.loss,
                epoch,
            });
        }
        let metrics = EpochMetrics {
            epoch,
            train_loss: loss_sum / groups as f64,
            valid,
            steps: report.steps,
            seconds: start.elapsed().as_secs_f64(),
        };
        if epoch == 0
            || better(
                cfg.monitor,
                &metrics.valid,
                &report.epochs[report.best_epoch].valid,
            )
        {
            report.best_epoch = epoch;
            since_best = 0;
        } else {
            since_best += 1;
        }
        let control = observer(&metrics);
        report.epochs.push(metrics);
        if control == Control::Stop {
            report.stopped_by_observer = true;
            break;
        }
        if cfg.patience.is_some_and(|p| since_best >= p) {
            report.early_stopped = true;
            break;
        }
    }
    Ok(report)
}

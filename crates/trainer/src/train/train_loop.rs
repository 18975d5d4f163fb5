//! The training loop: micro-batches accumulated into optimiser steps,
//! clipping, the schedule, evaluation each epoch, early stopping, and an
//! observer that may stop the trial.

use std::time::Instant;

use super::metrics::{EpochMetrics, Metrics, argmax_rows};
use super::optimizer::{Optimizer, OptimizerConfig};
use super::schedule::LinearSchedule;
use crate::backend::{Backend, clip_global_norm};
use crate::batch::Batch;
use crate::memory::BufKind;
use crate::model::{BatchError, BertClassifier, DeviceBatch, Mode};
use crate::rng::RngKey;

/// What the observer (a pruner) tells the loop after an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Continue,
    Stop,
}

/// Which validation figure early stopping watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Monitor {
    /// Lower is better.
    Loss,
    Accuracy,
    F1Macro,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    pub epochs: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Fraction of all optimiser steps spent warming up.
    pub warmup_ratio: f64,
    pub optimizer: OptimizerConfig,
    /// Clip gradients to this global L2 norm.
    pub max_grad_norm: Option<f64>,
    /// Micro-batches per optimiser step.
    pub accumulation_steps: usize,
    /// Per-class loss weights (length = number of classes).
    pub class_weights: Option<Vec<f64>>,
    /// Stop after this many epochs without improvement of `monitor`.
    pub patience: Option<usize>,
    pub monitor: Monitor,
    /// Recompute each layer's activations in backward instead of keeping them.
    pub recompute: bool,
    /// Seeds dropout and the order of batches.
    pub seed: u64,
    /// Shuffle the order of training batches each epoch.
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

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TrainError {
    #[error("training batch {index}: {source}")]
    TrainBatch { index: usize, source: BatchError },
    #[error("validation batch {index}: {source}")]
    ValidBatch { index: usize, source: BatchError },
    #[error("training config: {0}")]
    Config(String),
    #[error("training diverged: loss is {loss} at optimiser step {step}")]
    Diverged { loss: f64, step: u64 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct TrainReport {
    pub epochs: Vec<EpochMetrics>,
    /// Index into `epochs` of the best epoch by the monitored figure.
    pub best_epoch: usize,
    pub stopped_by_observer: bool,
    pub early_stopped: bool,
    pub steps: u64,
}

/// The state one training step needs besides the model.
pub struct StepContext<B: Backend> {
    pub optimizer: Optimizer<B>,
    pub class_weights: Option<B::Buf>,
    host_class_weights: Option<Vec<f64>>,
    pub max_grad_norm: Option<f64>,
    pub recompute: bool,
    pub seed: u64,
    /// Micro-batches run so far (keys dropout).
    pub micro_steps: u64,
}

impl<B: Backend> StepContext<B> {
    /// Allocates gradients, optimiser state and the class-weight buffer.
    pub fn new(
        be: &B,
        model: &mut BertClassifier<B>,
        optimizer: OptimizerConfig,
        class_weights: Option<&[f64]>,
        max_grad_norm: Option<f64>,
        recompute: bool,
        seed: u64,
    ) -> Self {
        model.alloc_grads(be);
        let optimizer = Optimizer::new(be, &model.params, optimizer);
        let class_weights = class_weights.map(|w| {
            let mut buf = be.alloc("class_weights", BufKind::Input, w.len());
            be.upload(&mut buf, w);
            buf
        });
        let host_class_weights = class_weights.as_ref().map(|w| be.download(w));
        Self {
            optimizer,
            class_weights,
            host_class_weights,
            max_grad_norm,
            recompute,
            seed,
            micro_steps: 0,
        }
    }
}

/// One optimiser step over already validated micro-batches: forward and
/// backward of each (uploaded one at a time), clipping, the update. Returns
/// the weighted mean loss of the step. This is the function the memory plan
/// runs.
pub fn train_step<B: Backend>(
    be: &B,
    model: &mut BertClassifier<B>,
    ctx: &mut StepContext<B>,
    micro_batches: &[&Batch],
    lr: f64,
) -> Result<f64, BatchError> {
    let classes = model.head.num_labels;
    let denom: f64 = match &ctx.host_class_weights {
        None => micro_batches.iter().map(|b| b.batch as f64).sum(),
        Some(w) => micro_batches
            .iter()
            .flat_map(|b| b.labels.iter())
            .map(|&y| w.get(y).copied().unwrap_or(0.0))
            .sum(),
    };
    model.zero_grads(be);
    let mut loss = 0.0;
    for batch in micro_batches {
        let device = DeviceBatch::upload(be, &model.config, classes, batch)?;
        let mode = Mode::Train {
            seed: ctx.seed,
            step: ctx.micro_steps,
        };
        ctx.micro_steps += 1;
        loss += model.forward_backward(
            be,
            &device,
            ctx.class_weights.as_ref(),
            denom.max(f64::MIN_POSITIVE),
            mode,
            ctx.recompute,
        );
    }
    if let Some(max) = ctx.max_grad_norm {
        clip_global_norm(be, &mut model.params.grads, max);
    }
    ctx.optimizer.step(be, &mut model.params, lr);
    Ok(loss)
}

/// Loss and metrics over validation batches in eval mode; the loss is the
/// weighted mean cross-entropy when class weights are given, as in training.
pub fn evaluate<B: Backend>(
    be: &B,
    model: &BertClassifier<B>,
    batches: &[Batch],
    class_weights: Option<&B::Buf>,
) -> Result<Metrics, TrainError> {
    let classes = model.head.num_labels;
    let (mut preds, mut labels) = (Vec::new(), Vec::new());
    let (mut loss_sum, mut denom) = (0.0, 0.0);
    let host_w = class_weights.map(|w| be.download(w));
    for (index, batch) in batches.iter().enumerate() {
        let device = DeviceBatch::upload(be, &model.config, classes, batch)
            .map_err(|source| TrainError::ValidBatch { index, source })?;
        let (logits, loss) = model.eval_batch(be, &device, class_weights, 1.0);
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
    ))
}

fn better(monitor: Monitor, a: &Metrics, b: &Metrics) -> bool {
    match monitor {
        Monitor::Loss => a.loss < b.loss,
        Monitor::Accuracy => a.accuracy > b.accuracy,
        Monitor::F1Macro => a.f1_macro > b.f1_macro,
    }
}

/// Fine-tunes `model` on `train_batches`, evaluating on `valid_batches` after
/// each epoch and calling `observer` with the epoch's metrics.
pub fn train<B: Backend>(
    be: &B,
    model: &mut BertClassifier<B>,
    train_batches: &[Batch],
    valid_batches: &[Batch],
    cfg: &TrainConfig,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<TrainReport, TrainError> {
    let classes = model.head.num_labels;
    if cfg.accumulation_steps == 0 || cfg.epochs == 0 || train_batches.is_empty() {
        return Err(TrainError::Config(
            "epochs, accumulation_steps and the training set must be non-empty".into(),
        ));
    }
    if let Some(w) = &cfg.class_weights
        && (w.len() != classes || w.iter().any(|v| !v.is_finite() || *v < 0.0))
    {
        return Err(TrainError::Config(format!(
            "class_weights {w:?}: need {classes} finite non-negative values"
        )));
    }
    // Validate everything on the host before any kernel runs.
    for (index, b) in train_batches.iter().enumerate() {
        crate::model::device_batch::validate(&model.config, classes, b)
            .map_err(|source| TrainError::TrainBatch { index, source })?;
    }
    for (index, b) in valid_batches.iter().enumerate() {
        crate::model::device_batch::validate(&model.config, classes, b)
            .map_err(|source| TrainError::ValidBatch { index, source })?;
    }
    let steps_per_epoch = train_batches.len().div_ceil(cfg.accumulation_steps) as u64;
    let total = steps_per_epoch * cfg.epochs as u64;
    let schedule = LinearSchedule {
        peak_lr: cfg.lr,
        warmup_steps: (cfg.warmup_ratio * total as f64).ceil() as u64,
        total_steps: total,
    };
    let mut ctx = StepContext::new(
        be,
        model,
        cfg.optimizer,
        cfg.class_weights.as_deref(),
        cfg.max_grad_norm,
        cfg.recompute,
        cfg.seed,
    );
    let mut report = TrainReport {
        epochs: Vec::new(),
        best_epoch: 0,
        stopped_by_observer: false,
        early_stopped: false,
        steps: 0,
    };
    let mut since_best = 0;
    for epoch in 0..cfg.epochs {
        let start = Instant::now();
        let mut order: Vec<usize> = (0..train_batches.len()).collect();
        if cfg.shuffle {
            let key = RngKey {
                seed: cfg.seed,
                step: epoch as u64,
                stream: u32::MAX,
            };
            for i in (1..order.len()).rev() {
                let j = (key.word(i as u64) as usize) % (i + 1);
                order.swap(i, j);
            }
        }
        let mut loss_sum = 0.0;
        let mut groups = 0;
        for group in order.chunks(cfg.accumulation_steps) {
            let micro: Vec<&Batch> = group.iter().map(|&i| &train_batches[i]).collect();
            let lr = schedule.lr(report.steps);
            let loss = train_step(be, model, &mut ctx, &micro, lr).map_err(|source| {
                TrainError::TrainBatch {
                    index: group[0],
                    source,
                }
            })?;
            report.steps += 1;
            if !loss.is_finite() {
                return Err(TrainError::Diverged {
                    loss,
                    step: report.steps,
                });
            }
            loss_sum += loss;
            groups += 1;
        }
        let valid = evaluate(be, model, valid_batches, ctx.class_weights.as_ref())?;
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

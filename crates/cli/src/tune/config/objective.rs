//! `[objective]` and `[[constraint]]`: what a trial is scored by (one
//! metric, or several for a Pareto front) and the limits it must keep.
//!
//! A trial's figures are of two kinds: its validation metrics (accuracy,
//! macro F1, loss, at its best epoch), known once it has trained, and its
//! costs: `peak_memory` (bytes its training step peaks at),
//! `inference_memory` (bytes predicting a batch of `inference_batch`
//! sequences peaks at), `params` (the model's parameter count), all known
//! before it trains, and `train_seconds` (the wall time of its epochs),
//! known after.

use hpo_sampler::StudyDirection;
use serde::{Deserialize, Serialize};

use super::error::join;
use super::raw::{RawConstraint, RawObjective, Scalar};
use super::units::parse_duration;
use super::{Check, ConfigError, Metric, direction_name};

/// The most sequences `inference_batch` takes (as many as `batch_size`).
const MAX_INFERENCE_BATCH: usize = 1 << 16;

/// What a trial is measured by, as an objective or a constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialMetric {
    Accuracy,
    F1Macro,
    Loss,
    /// Bytes the training step peaks at: the memory plan's prediction
    /// before the trial trains, the peak of requested bytes its worker
    /// measured after.
    PeakMemory,
    /// Bytes predicting one batch of `[objective] inference_batch`
    /// sequences of the trial's `max_length` peaks at: the model's fp32
    /// weights and a forward pass, the tensors `memtune predict
    /// --batch-size B --max-length L` holds for a batch of its longest
    /// texts (`trainer::memory::inference_peak`), planned before the trial
    /// trains. The checkpoint's copy while it loads is not counted.
    InferenceMemory,
    /// Seconds the trial's epochs took (training and evaluation).
    TrainSeconds,
    /// Scalar parameters of the model with its classification head.
    Params,
}

impl TrialMetric {
    pub fn name(self) -> &'static str {
        match self {
            TrialMetric::Accuracy => "accuracy",
            TrialMetric::F1Macro => "f1_macro",
            TrialMetric::Loss => "loss",
            TrialMetric::PeakMemory => "peak_memory",
            TrialMetric::InferenceMemory => "inference_memory",
            TrialMetric::TrainSeconds => "train_seconds",
            TrialMetric::Params => "params",
        }
    }

    /// Validation metrics are maximised (accuracy, F1) or minimised
    /// (loss); every cost is minimised.
    pub fn natural_direction(self) -> StudyDirection {
        match self.validation() {
            Some(m) => m.natural_direction(),
            None => StudyDirection::Minimize,
        }
    }

    /// The validation metric it is, if it is one.
    pub fn validation(self) -> Option<Metric> {
        match self {
            TrialMetric::Accuracy => Some(Metric::Accuracy),
            TrialMetric::F1Macro => Some(Metric::F1Macro),
            TrialMetric::Loss => Some(Metric::Loss),
            TrialMetric::PeakMemory
            | TrialMetric::InferenceMemory
            | TrialMetric::TrainSeconds
            | TrialMetric::Params => None,
        }
    }

    /// Known before the trial trains (from the memory plan and the
    /// model's shape), so a constraint on it is checked before training.
    pub fn known_before_training(self) -> bool {
        matches!(
            self,
            TrialMetric::PeakMemory | TrialMetric::InferenceMemory | TrialMetric::Params
        )
    }

    /// `value` as a person reads it (bytes in GiB, seconds, counts).
    pub fn show(self, value: f64) -> String {
        match self {
            TrialMetric::PeakMemory | TrialMetric::InferenceMemory => {
                gpu_mem::human_bytes(value.max(0.0) as u64)
            }
            // Milliseconds below a tenth of a second, where tenths of a
            // second would show a limit and what broke it both as 0.0 s.
            TrialMetric::TrainSeconds if value.abs() < 0.1 => format!("{:.1} ms", value * 1e3),
            TrialMetric::TrainSeconds => format!("{value:.1} s"),
            TrialMetric::Params => format!("{value:.0}"),
            _ => format!("{value:.4}"),
        }
    }
}

impl From<Metric> for TrialMetric {
    fn from(m: Metric) -> Self {
        match m {
            Metric::Accuracy => TrialMetric::Accuracy,
            Metric::F1Macro => TrialMetric::F1Macro,
            Metric::Loss => TrialMetric::Loss,
        }
    }
}

/// What a study optimises: one objective, or several (a Pareto front).
#[derive(Clone, Debug, PartialEq)]
pub struct Objective {
    /// One per objective, in the order of a trial's values.
    pub metrics: Vec<TrialMetric>,
    /// One per objective, each its metric's natural direction.
    pub directions: Vec<StudyDirection>,
    /// The validation metric that picks a trial's best epoch and that
    /// early stopping and the pruner watch: the objective's own, or the
    /// first validation metric of `metrics` (accuracy when none is listed).
    pub metric: Metric,
    /// Sequences a prediction batch holds, for `inference_memory`.
    pub inference_batch: usize,
}

impl Objective {
    /// Several objectives: the study has a Pareto front, and no pruner.
    pub fn is_multi(&self) -> bool {
        self.metrics.len() > 1
    }
}

/// `[[constraint]]`: a trial is feasible while `metric <= max` (in the
/// metric's unit: bytes, seconds, parameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Constraint {
    pub metric: TrialMetric,
    pub max: f64,
}

impl Constraint {
    /// The value Optuna stores for it: above 0, violated by that much.
    pub fn value(&self, measured: f64) -> f64 {
        measured - self.max
    }

    /// `peak_memory 9.20 GiB > max 8.00 GiB` (or `<=`).
    pub fn describe(&self, measured: f64) -> String {
        let op = if measured > self.max { ">" } else { "<=" };
        format!(
            "{} {} {op} max {}",
            self.metric.name(),
            self.metric.show(measured),
            self.metric.show(self.max)
        )
    }
}

impl Check<'_> {
    pub(super) fn objective(&self, o: &RawObjective) -> Result<Objective, ConfigError> {
        let inference_batch = match o.inference_batch {
            Some(0) => return Err(self.err("objective.inference_batch", "must be at least 1")),
            Some(n) if n > MAX_INFERENCE_BATCH => {
                return Err(self.err(
                    "objective.inference_batch",
                    format!("{n} is more than {MAX_INFERENCE_BATCH} sequences"),
                ));
            }
            Some(n) => n,
            None => 1,
        };
        if o.metric.is_some() && o.metrics.is_some() {
            return Err(self.err(
                "objective.metrics",
                "give either metric (one objective) or metrics (several), not both",
            ));
        }
        let Some(metrics) = &o.metrics else {
            if o.directions.is_some() {
                return Err(self.err(
                    "objective.directions",
                    "one metric takes `direction`; `directions` goes with `metrics = [...]`",
                ));
            }
            let metric = o.metric.unwrap_or(Metric::Accuracy);
            let natural = metric.natural_direction();
            let direction = o.direction.unwrap_or(natural);
            if direction != natural {
                return Err(self.err(
                    "objective.direction",
                    contradiction(metric.name(), natural, direction),
                ));
            }
            return Ok(Objective {
                metrics: vec![metric.into()],
                directions: vec![direction],
                metric,
                inference_batch,
            });
        };
        if metrics.len() < 2 {
            return Err(self.err(
                "objective.metrics",
                "list two or more metrics; one objective is written `metric = \"...\"`",
            ));
        }
        for (i, m) in metrics.iter().enumerate() {
            if metrics[..i].contains(m) {
                return Err(self.err(
                    &format!("objective.metrics[{i}]"),
                    format!("{} is listed twice", m.name()),
                ));
            }
        }
        if o.direction.is_some() {
            return Err(self.err(
                "objective.direction",
                "several metrics take `directions = [...]`, one per metric",
            ));
        }
        let natural: Vec<StudyDirection> = metrics.iter().map(|m| m.natural_direction()).collect();
        if let Some(given) = &o.directions {
            if given.len() != metrics.len() {
                return Err(self.err(
                    "objective.directions",
                    format!(
                        "has {} directions for {} metrics",
                        given.len(),
                        metrics.len()
                    ),
                ));
            }
            for (i, (&d, &n)) in given.iter().zip(&natural).enumerate() {
                if d != n {
                    return Err(self.err(
                        &format!("objective.directions[{i}]"),
                        contradiction(metrics[i].name(), n, d),
                    ));
                }
            }
        }
        Ok(Objective {
            metric: metrics
                .iter()
                .find_map(|m| m.validation())
                .unwrap_or(Metric::Accuracy),
            metrics: metrics.clone(),
            directions: natural,
            inference_batch,
        })
    }

    pub(super) fn constraints(
        &self,
        raw: &[RawConstraint],
    ) -> Result<Vec<Constraint>, ConfigError> {
        let mut out: Vec<Constraint> = Vec::with_capacity(raw.len());
        for (i, c) in raw.iter().enumerate() {
            let at = format!("constraint[{i}]");
            if let Some(j) = out.iter().position(|o| o.metric == c.metric) {
                return Err(self.err(
                    &join(&at, "metric"),
                    format!(
                        "{} is already constrained by constraint[{j}]",
                        c.metric.name()
                    ),
                ));
            }
            let key = join(&at, "max");
            let max = match c.metric {
                TrialMetric::PeakMemory | TrialMetric::InferenceMemory => {
                    self.size(&key, &c.max)? as f64
                }
                TrialMetric::TrainSeconds => match &c.max {
                    Scalar::Str(text) => parse_duration(text)
                        .map_err(|m| self.err(&key, m))?
                        .as_secs_f64(),
                    other => {
                        return Err(self.err(
                            &key,
                            format!(
                                "must be a duration such as \"30m\" or \"1h30m\", got {}",
                                other.to_param_value()
                            ),
                        ));
                    }
                },
                TrialMetric::Params => match c.max.as_f64() {
                    Some(n) if n.is_finite() && n >= 0.0 => n,
                    _ => {
                        return Err(self.err(
                            &key,
                            format!(
                                "must be a number of parameters such as 110000000, got {}",
                                c.max.to_param_value()
                            ),
                        ));
                    }
                },
                other => {
                    return Err(self.err(
                        &join(&at, "metric"),
                        format!(
                            "{} cannot be constrained: a constraint is on peak_memory, inference_memory, train_seconds or params",
                            other.name()
                        ),
                    ));
                }
            };
            if max <= 0.0 {
                return Err(self.err(&key, "must be larger than 0"));
            }
            out.push(Constraint {
                metric: c.metric,
                max,
            });
        }
        Ok(out)
    }
}

fn contradiction(metric: &str, natural: StudyDirection, given: StudyDirection) -> String {
    format!(
        "{metric} should be {}d, not {}d",
        direction_name(natural),
        direction_name(given)
    )
}

//! The study file exactly as written: serde structs that reject unknown keys
//! and wrong types. Everything here is checked and converted into the public
//! types of [`super`] before anything runs; nothing else reads these.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use hpo_sampler::{ParamValue, StudyDirection};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use trainer::data::{BadRecordPolicy, DataFormat};

use super::objective::TrialMetric;
use super::{BuiltinModel, DeviceKind, Metric, PrunerKind, SamplerKind, SimPreset};
use crate::tune::space::ParamType;

/// A TOML scalar where several types are meaningful (bounds, choices,
/// sizes); which ones are allowed is checked with the key path in hand.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    pub(crate) fn to_param_value(&self) -> ParamValue {
        match self {
            Scalar::Bool(b) => ParamValue::Bool(*b),
            Scalar::Int(i) => ParamValue::Int(*i),
            Scalar::Float(f) => ParamValue::Float(*f),
            Scalar::Str(s) => ParamValue::Str(s.clone()),
        }
    }

    /// The value as a float, for numbers only.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::Int(i) => Some(*i as f64),
            Scalar::Float(f) => Some(*f),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number, a string or a boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v)
                    .map(Scalar::Int)
                    .map_err(|_| E::custom(format!("integer {v} is too large")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_string()))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub study: RawStudy,
    #[serde(default)]
    pub data: RawData,
    #[serde(default)]
    pub objective: RawObjective,
    #[serde(default)]
    pub constraint: Vec<RawConstraint>,
    pub models: BTreeMap<String, RawModel>,
    #[serde(default)]
    pub param: Vec<RawParam>,
    #[serde(default)]
    pub fixed: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub sampler: RawSampler,
    #[serde(default)]
    pub pruner: RawPruner,
    #[serde(default)]
    pub runner: RawRunner,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStudy {
    pub name: Option<String>,
    pub storage: Option<String>,
    pub n_trials: u64,
    pub timeout: Option<String>,
    pub trial_timeout: Option<String>,
    pub seed: Option<u64>,
    pub report: Option<bool>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawData {
    pub source: Option<DataSourceKind>,
    pub files: Option<Vec<PathBuf>>,
    pub format: Option<DataFormat>,
    pub text: Option<String>,
    pub text_pair: Option<String>,
    pub label: Option<String>,
    pub num_classes: Option<usize>,
    pub label_names: Option<Vec<String>>,
    pub bad_records: Option<BadRecordPolicy>,
    pub validation_fraction: Option<f64>,
    pub split_seed: Option<u64>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DataSourceKind {
    Embedded,
    Files,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawObjective {
    pub metric: Option<Metric>,
    pub metrics: Option<Vec<TrialMetric>>,
    pub direction: Option<StudyDirection>,
    pub directions: Option<Vec<StudyDirection>>,
    pub inference_batch: Option<usize>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConstraint {
    pub metric: TrialMetric,
    pub max: Scalar,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModel {
    pub dir: Option<PathBuf>,
    pub builtin: Option<BuiltinModel>,
    pub preset: Option<SimPreset>,
    pub sim: Option<SimPreset>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawParam {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ParamType,
    pub sets: Option<String>,
    pub low: Option<Scalar>,
    pub high: Option<Scalar>,
    pub log: Option<bool>,
    pub step: Option<Scalar>,
    pub choices: Option<Vec<Scalar>>,
    pub when: Option<RawWhen>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWhen {
    pub param: String,
    #[serde(rename = "in")]
    pub values: Vec<Scalar>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSampler {
    pub kind: Option<SamplerKind>,
    pub seed: Option<u64>,
    pub n_startup_trials: Option<usize>,
    /// GP only (kind = "gp" or "auto").
    pub deterministic_objective: Option<bool>,
    pub n_ei_candidates: Option<usize>,
    pub ei_finalists: Option<usize>,
    pub prior_weight: Option<f64>,
    pub consider_magic_clip: Option<bool>,
    pub consider_endpoints: Option<bool>,
    pub multivariate: Option<bool>,
    pub group: Option<bool>,
    pub constant_liar: Option<bool>,
    /// NSGA-II only.
    pub population_size: Option<usize>,
}

impl RawSampler {
    /// The TPE-only keys that are set.
    pub(crate) fn tpe_keys(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut note = |set: bool, key| {
            if set {
                keys.push(key)
            }
        };
        note(self.n_startup_trials.is_some(), "n_startup_trials");
        note(self.n_ei_candidates.is_some(), "n_ei_candidates");
        note(self.ei_finalists.is_some(), "ei_finalists");
        note(self.prior_weight.is_some(), "prior_weight");
        note(self.consider_magic_clip.is_some(), "consider_magic_clip");
        note(self.consider_endpoints.is_some(), "consider_endpoints");
        note(self.multivariate.is_some(), "multivariate");
        note(self.group.is_some(), "group");
        note(self.constant_liar.is_some(), "constant_liar");
        keys
    }
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPruner {
    pub kind: Option<PrunerKind>,
    pub n_startup_trials: Option<usize>,
    pub n_warmup_steps: Option<i64>,
    pub interval_steps: Option<i64>,
    pub n_min_trials: Option<usize>,
    pub percentile: Option<f64>,
    pub min_resource: Option<Scalar>,
    pub max_resource: Option<Scalar>,
    pub reduction_factor: Option<i64>,
    pub min_early_stopping_rate: Option<i64>,
    pub bootstrap_count: Option<usize>,
    pub patience: Option<usize>,
    pub min_delta: Option<f64>,
    pub wrapped: Option<Box<RawPruner>>,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
}

impl RawPruner {
    /// Every option key that is set (`kind` aside).
    pub(crate) fn set_keys(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut note = |set: bool, key| {
            if set {
                keys.push(key)
            }
        };
        note(self.n_startup_trials.is_some(), "n_startup_trials");
        note(self.n_warmup_steps.is_some(), "n_warmup_steps");
        note(self.interval_steps.is_some(), "interval_steps");
        note(self.n_min_trials.is_some(), "n_min_trials");
        note(self.percentile.is_some(), "percentile");
        note(self.min_resource.is_some(), "min_resource");
        note(self.max_resource.is_some(), "max_resource");
        note(self.reduction_factor.is_some(), "reduction_factor");
        note(
            self.min_early_stopping_rate.is_some(),
            "min_early_stopping_rate",
        );
        note(self.bootstrap_count.is_some(), "bootstrap_count");
        note(self.patience.is_some(), "patience");
        note(self.min_delta.is_some(), "min_delta");
        note(self.wrapped.is_some(), "wrapped");
        note(self.lower.is_some(), "lower");
        note(self.upper.is_some(), "upper");
        keys
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRunner {
    pub device: Option<DeviceKind>,
    pub precision: Option<String>,
    pub kernels: Option<String>,
    pub recompute: Option<String>,
    pub sim_memory: Option<Scalar>,
    pub sim_devices: Option<Vec<Scalar>>,
    pub devices: Option<Vec<String>>,
    pub safety_margin: Option<Scalar>,
    pub process_overhead: Option<Scalar>,
    pub memory_limit: Option<Scalar>,
    pub max_workers: Option<usize>,
    pub min_micro_tokens: Option<usize>,
    pub threads_per_worker: Option<usize>,
    pub recycle_after: Option<usize>,
    pub heartbeat: Option<String>,
    pub stale_after: Option<String>,
    pub systematic_failures: Option<usize>,
    pub log_file: Option<PathBuf>,
}

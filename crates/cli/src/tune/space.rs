//! The search space of a study: which hyperparameters exist, the
//! `[[param]]` entries that search them (with conditions), the `[fixed]`
//! values, and the two conversions the runner needs: sampling a trial
//! through `hpo_sampler`'s define-by-run [`Trial`], and turning a trial's
//! stored parameters into the [`TrialSettings`] a worker trains with.
//!
//! A hyperparameter's value for one trial is, in order: the value of the
//! one active `[[param]]` that `sets` it, else its `[fixed]` value, else its
//! built-in default ([`Hyperparameter::default_value`]). The file format is
//! described in [`super::config`].

use std::collections::{BTreeMap, BTreeSet};

use hpo_sampler::{Distribution, ParamValue, Sampler, Trial};
use serde::{Deserialize, Serialize};
use trainer::train::{Monitor, OptimizerConfig, TrainConfig};

use super::config::error::{ConfigError, SpanIndex};
use super::config::raw::{RawParam, Scalar};

/// What a trial trains with: every hyperparameter resolved to a value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialSettings {
    /// A key of the study's `[models]`.
    pub model: String,
    pub learning_rate: f64,
    /// The effective batch size (examples per optimiser step); the runner
    /// splits it into micro-batches and gradient accumulation.
    pub batch_size: usize,
    pub max_length: usize,
    pub warmup_ratio: f64,
    pub weight_decay: f64,
    /// Hidden and attention dropout; `None` keeps the model's own.
    pub dropout: Option<f64>,
    /// Widths of the classifier head's hidden layers (0 to 3 of them).
    pub head_hidden: Vec<usize>,
    pub epochs: usize,
    /// Stop after this many epochs without improvement; `None`: never.
    pub patience: Option<usize>,
    /// Seeds dropout and batch order: the study's seed, the same for every
    /// trial, so trials differ by their hyperparameters and not by noise.
    pub seed: u64,
}

impl TrialSettings {
    /// The trainer's options for these settings: `monitor` from the study's
    /// objective ([`super::config::Metric::monitor`]), `accumulation_steps`
    /// from the runner's lease; AdamW with the trainer's betas and epsilon
    /// and this trial's weight decay.
    pub fn train_config(&self, monitor: Monitor, accumulation_steps: usize) -> TrainConfig {
        let defaults = TrainConfig::default();
        let optimizer = match defaults.optimizer {
            OptimizerConfig::AdamW {
                beta1, beta2, eps, ..
            } => OptimizerConfig::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay: self.weight_decay,
            },
            other => other,
        };
        TrainConfig {
            epochs: self.epochs,
            lr: self.learning_rate,
            warmup_ratio: self.warmup_ratio,
            optimizer,
            accumulation_steps,
            patience: self.patience,
            monitor,
            seed: self.seed,
            ..defaults
        }
    }
}

/// The type of a `[[param]]` (`type = "float" | "int" | "categorical"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamType {
    Float,
    Int,
    Categorical,
}

/// A trainable setting that a `[[param]]` may search or `[fixed]` may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hyperparameter {
    /// A key of `[models]`.
    Model,
    LearningRate,
    /// Effective batch size.
    BatchSize,
    MaxLength,
    WarmupRatio,
    WeightDecay,
    Dropout,
    /// Hidden layers of the classifier head, 0 to 3.
    HeadLayers,
    /// Width of every head layer that has no `head_width_<n>` of its own.
    HeadWidth,
    HeadWidth1,
    HeadWidth2,
    HeadWidth3,
    Epochs,
    /// Early-stopping patience in epochs; 0 turns early stopping off.
    Patience,
}

/// The values a hyperparameter can take.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Domain {
    /// A key of `[models]`.
    Model,
    /// `low <= v <= high`, except `v == low` when `low_open` and `v == high`
    /// when `high_open`.
    Float {
        low: f64,
        high: f64,
        low_open: bool,
        high_open: bool,
    },
    Int {
        low: i64,
        high: i64,
    },
}

impl Hyperparameter {
    pub const ALL: [Hyperparameter; 14] = [
        Hyperparameter::Model,
        Hyperparameter::LearningRate,
        Hyperparameter::BatchSize,
        Hyperparameter::MaxLength,
        Hyperparameter::WarmupRatio,
        Hyperparameter::WeightDecay,
        Hyperparameter::Dropout,
        Hyperparameter::HeadLayers,
        Hyperparameter::HeadWidth,
        Hyperparameter::HeadWidth1,
        Hyperparameter::HeadWidth2,
        Hyperparameter::HeadWidth3,
        Hyperparameter::Epochs,
        Hyperparameter::Patience,
    ];

    /// Its name in the study file.
    pub fn name(self) -> &'static str {
        match self {
            Hyperparameter::Model => "model",
            Hyperparameter::LearningRate => "learning_rate",
            Hyperparameter::BatchSize => "batch_size",
            Hyperparameter::MaxLength => "max_length",
            Hyperparameter::WarmupRatio => "warmup_ratio",
            Hyperparameter::WeightDecay => "weight_decay",
            Hyperparameter::Dropout => "dropout",
            Hyperparameter::HeadLayers => "head_layers",
            Hyperparameter::HeadWidth => "head_width",
            Hyperparameter::HeadWidth1 => "head_width_1",
            Hyperparameter::HeadWidth2 => "head_width_2",
            Hyperparameter::HeadWidth3 => "head_width_3",
            Hyperparameter::Epochs => "epochs",
            Hyperparameter::Patience => "patience",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|h| h.name() == name)
    }

    /// The value used when neither a param nor `[fixed]` sets it; `None`
    /// for `model` (which must be searched or fixed unless there is one
    /// model) and for `dropout` (the model's own).
    pub fn default_value(self) -> Option<ParamValue> {
        Some(match self {
            Hyperparameter::Model | Hyperparameter::Dropout => return None,
            Hyperparameter::LearningRate => ParamValue::Float(5e-5),
            Hyperparameter::BatchSize => ParamValue::Int(32),
            Hyperparameter::MaxLength => ParamValue::Int(128),
            Hyperparameter::WarmupRatio => ParamValue::Float(0.1),
            Hyperparameter::WeightDecay => ParamValue::Float(0.01),
            Hyperparameter::HeadLayers => ParamValue::Int(0),
            Hyperparameter::HeadWidth => ParamValue::Int(256),
            Hyperparameter::HeadWidth1
            | Hyperparameter::HeadWidth2
            | Hyperparameter::HeadWidth3 => {
                return None;
            }
            Hyperparameter::Epochs => ParamValue::Int(3),
            Hyperparameter::Patience => ParamValue::Int(0),
        })
    }

    fn domain(self) -> Domain {
        let unit = |low_open, high_open| Domain::Float {
            low: 0.0,
            high: 1.0,
            low_open,
            high_open,
        };
        match self {
            Hyperparameter::Model => Domain::Model,
            Hyperparameter::LearningRate => unit(true, false),
            Hyperparameter::WarmupRatio | Hyperparameter::WeightDecay => unit(false, false),
            Hyperparameter::Dropout => unit(false, true),
            Hyperparameter::BatchSize => Domain::Int {
                low: 1,
                high: 1 << 16,
            },
            Hyperparameter::MaxLength => Domain::Int {
                low: trainer::tokenize::MIN_MAX_LENGTH as i64,
                high: 1 << 16,
            },
            Hyperparameter::HeadLayers => Domain::Int { low: 0, high: 3 },
            Hyperparameter::HeadWidth
            | Hyperparameter::HeadWidth1
            | Hyperparameter::HeadWidth2
            | Hyperparameter::HeadWidth3 => Domain::Int {
                low: 1,
                high: 1 << 16,
            },
            Hyperparameter::Epochs => Domain::Int {
                low: 1,
                high: 10_000,
            },
            Hyperparameter::Patience => Domain::Int {
                low: 0,
                high: 10_000,
            },
        }
    }

    fn known_names() -> String {
        Self::ALL.map(|h| h.name()).join(", ")
    }
}

impl Domain {
    fn describe(self) -> String {
        match self {
            Domain::Model => "a key of [models]".into(),
            Domain::Float {
                low,
                high,
                low_open,
                high_open,
            } => format!(
                "a number in {}{low}, {high}{}",
                if low_open { "(" } else { "[" },
                if high_open { ")" } else { "]" }
            ),
            Domain::Int { low, high } => format!("an integer in [{low}, {high}]"),
        }
    }

    /// Whether `value` is in the domain (models checked against `models`).
    fn admits(self, value: &ParamValue, models: &BTreeSet<String>) -> bool {
        match (self, value) {
            (Domain::Model, ParamValue::Str(s)) => models.contains(s),
            (
                Domain::Float {
                    low,
                    high,
                    low_open,
                    high_open,
                },
                ParamValue::Int(_) | ParamValue::Float(_),
            ) => {
                let v = value.as_f64().expect("numeric");
                v.is_finite()
                    && (if low_open { v > low } else { v >= low })
                    && (if high_open { v < high } else { v <= high })
            }
            (Domain::Int { low, high }, ParamValue::Int(v)) => low <= *v && *v <= high,
            _ => false,
        }
    }
}

/// A `when = { param = "...", in = [...] }`: the param is active only when
/// the named earlier param is active and has one of these values.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub param: String,
    pub values: Vec<ParamValue>,
}

impl Condition {
    /// Whether the condition holds given the referenced param's value
    /// (`None`: that param is inactive in this trial, so this one is too).
    pub fn holds(&self, value: Option<&ParamValue>) -> bool {
        value.is_some_and(|v| self.values.iter().any(|c| c.same_choice(v)))
    }
}

/// One `[[param]]`: a searched parameter (stored under `name`) that sets
/// one hyperparameter, possibly only under a condition.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// The parameter's name in the study (Optuna's param name).
    pub name: String,
    /// The hyperparameter it sets.
    pub sets: Hyperparameter,
    pub distribution: Distribution,
    pub when: Option<Condition>,
    /// Line of its `[[param]]` in the study file.
    pub line: usize,
}

impl ParamSpec {
    /// Whether the param is active given the values of the params before it.
    pub fn is_active(&self, value_of: impl Fn(&str) -> Option<ParamValue>) -> bool {
        self.when
            .as_ref()
            .is_none_or(|c| c.holds(value_of(&c.param).as_ref()))
    }
}

/// Checks and converts the `[[param]]` entries and `[fixed]`.
///
/// `max_positions`: the fewest token positions among models of known
/// architecture (builtin and simulated ones) and that model's key; every
/// possible `max_length` must fit it.
pub(crate) fn build(
    raw: &[RawParam],
    raw_fixed: &BTreeMap<String, Scalar>,
    models: &BTreeSet<String>,
    max_positions: Option<(usize, &str)>,
    index: &SpanIndex<'_>,
) -> Result<(Vec<ParamSpec>, BTreeMap<Hyperparameter, ParamValue>), ConfigError> {
    let mut params: Vec<ParamSpec> = Vec::with_capacity(raw.len());
    for (i, p) in raw.iter().enumerate() {
        let at = format!("param[{i}]");
        let spec = build_param(p, &at, &params, models, index)?;
        params.push(spec);
    }
    check_exclusive(raw, &params, index)?;

    let mut fixed = BTreeMap::new();
    for (key, value) in raw_fixed {
        let at = super::config::error::join("fixed", key);
        let Some(h) = Hyperparameter::from_name(key) else {
            return Err(index.error_at(
                &at,
                format!(
                    "unknown hyperparameter `{key}`; known: {}",
                    Hyperparameter::known_names()
                ),
            ));
        };
        let v = value.to_param_value();
        if !h.domain().admits(&v, models) {
            return Err(index.error_at(
                &at,
                format!("{key} must be {}, got {v}", domain_text(h, models)),
            ));
        }
        if let Some(p) = params.iter().find(|p| p.sets == h && p.when.is_none()) {
            return Err(index.error_at(
                &at,
                format!(
                    "{key} is always set by param `{}` (line {}), so this value would never be used",
                    p.name, p.line
                ),
            ));
        }
        fixed.insert(h, v);
    }

    if let Some((limit, model)) = max_positions {
        check_max_length(&params, &fixed, limit, model, index)?;
    }

    let model_always_set = fixed.contains_key(&Hyperparameter::Model)
        || params
            .iter()
            .any(|p| p.sets == Hyperparameter::Model && p.when.is_none());
    if models.len() > 1 && !model_always_set {
        return Err(index.error_at(
            "fixed",
            "several [models] are defined: search over them with a [[param]] that sets `model` (without `when`), or give `model` in [fixed]",
        ));
    }
    Ok((params, fixed))
}

/// Where a `max_length` too long for a model is set.
pub(crate) enum LengthAt {
    Fixed,
    /// The `i`-th param, at its field `key` (`high`, `choices[j]`).
    Param {
        i: usize,
        key: String,
    },
}

/// The first value `max_length` can take above `limit`, and where it is
/// set, if any.
pub(crate) fn max_length_over(
    params: &[ParamSpec],
    fixed: &BTreeMap<Hyperparameter, ParamValue>,
    limit: usize,
) -> Option<(LengthAt, ParamValue)> {
    let too_long = |v: &ParamValue| matches!(v, ParamValue::Int(i) if *i > limit as i64);
    if let Some(v) = fixed
        .get(&Hyperparameter::MaxLength)
        .filter(|v| too_long(v))
    {
        return Some((LengthAt::Fixed, v.clone()));
    }
    params.iter().enumerate().find_map(|(i, p)| {
        if p.sets != Hyperparameter::MaxLength {
            return None;
        }
        let (key, v) = match &p.distribution {
            Distribution::Int { high, .. } if too_long(&ParamValue::Int(*high)) => {
                ("high".to_string(), ParamValue::Int(*high))
            }
            Distribution::Categorical { choices } => {
                let j = choices.iter().position(too_long)?;
                (format!("choices[{j}]"), choices[j].clone())
            }
            _ => return None,
        };
        Some((LengthAt::Param { i, key }, v))
    })
}

/// Every value `max_length` can take must fit the model with the fewest
/// positions.
fn check_max_length(
    params: &[ParamSpec],
    fixed: &BTreeMap<Hyperparameter, ParamValue>,
    limit: usize,
    model: &str,
    index: &SpanIndex<'_>,
) -> Result<(), ConfigError> {
    let message = |v: &ParamValue| {
        format!("max_length {v} is more than the {limit} token positions of model `{model}`")
    };
    match max_length_over(params, fixed, limit) {
        None => Ok(()),
        Some((LengthAt::Fixed, v)) => Err(index.error_at("fixed.max_length", message(&v))),
        Some((LengthAt::Param { i, key }, v)) => Err(index.error_at(
            &format!("param[{i}].{key}"),
            format!("param `{}`: {}", params[i].name, message(&v)),
        )),
    }
}

fn domain_text(h: Hyperparameter, models: &BTreeSet<String>) -> String {
    match h.domain() {
        Domain::Model => format!(
            "one of the [models] keys ({})",
            models.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
        d => d.describe(),
    }
}

fn build_param(
    p: &RawParam,
    at: &str,
    earlier: &[ParamSpec],
    models: &BTreeSet<String>,
    index: &SpanIndex<'_>,
) -> Result<ParamSpec, ConfigError> {
    let err = |key: &str, message: String| {
        let path = if key.is_empty() {
            at.to_string()
        } else {
            format!("{at}.{key}")
        };
        index.error_at(&path, format!("param `{}`: {message}", p.name))
    };
    if p.name.is_empty() {
        return Err(index.error_at(&format!("{at}.name"), "a param needs a non-empty name"));
    }
    if let Err(e) = store::check_param_name(&p.name) {
        return Err(index.error_at(&format!("{at}.name"), e.to_string()));
    }
    if let Some(other) = earlier.iter().find(|e| e.name == p.name) {
        return Err(err(
            "name",
            format!("defined twice (also on line {})", other.line),
        ));
    }
    let (sets_key, target) = match &p.sets {
        Some(s) => ("sets", s.as_str()),
        None => ("name", p.name.as_str()),
    };
    let sets = Hyperparameter::from_name(target).ok_or_else(|| {
        err(
            sets_key,
            format!(
                "unknown hyperparameter `{target}`; known: {}{}",
                Hyperparameter::known_names(),
                if p.sets.is_none() {
                    " (name the hyperparameter with `sets` when the param's name differs)"
                } else {
                    ""
                }
            ),
        )
    })?;

    let forbid = |key: &str, set: bool| {
        if set {
            Err(err(
                key,
                format!("`{key}` is not used by type = \"{}\"", type_name(p.kind)),
            ))
        } else {
            Ok(())
        }
    };
    let distribution = match p.kind {
        ParamType::Categorical => {
            forbid("low", p.low.is_some())?;
            forbid("high", p.high.is_some())?;
            forbid("log", p.log.is_some())?;
            forbid("step", p.step.is_some())?;
            let choices = p
                .choices
                .as_ref()
                .ok_or_else(|| err("", "type = \"categorical\" needs `choices`".into()))?;
            if choices.is_empty() {
                return Err(err("choices", "needs at least one choice".into()));
            }
            let choices: Vec<ParamValue> = choices.iter().map(Scalar::to_param_value).collect();
            for (j, c) in choices.iter().enumerate() {
                if let Some(first) = choices[..j].iter().position(|d| d == c) {
                    return Err(index.error_at(
                        &format!("{at}.choices[{j}]"),
                        format!(
                            "param `{}`: choice {c} is listed twice (also choices[{first}]); \
                             a repeated choice would only be drawn more often",
                            p.name
                        ),
                    ));
                }
                if !sets.domain().admits(c, models) {
                    return Err(index.error_at(
                        &format!("{at}.choices[{j}]"),
                        format!(
                            "param `{}`: choice {c} is not {}",
                            p.name,
                            domain_text(sets, models)
                        ),
                    ));
                }
            }
            Distribution::categorical(choices).map_err(|e| err("choices", e.to_string()))?
        }
        ParamType::Float | ParamType::Int => {
            forbid("choices", p.choices.is_some())?;
            let kind = type_name(p.kind);
            let low = p
                .low
                .as_ref()
                .ok_or_else(|| err("", format!("type = \"{kind}\" needs `low` and `high`")))?;
            let high = p
                .high
                .as_ref()
                .ok_or_else(|| err("", format!("type = \"{kind}\" needs `low` and `high`")))?;
            let log = p.log.unwrap_or(false);
            if log && p.step.is_some() {
                return Err(err(
                    "step",
                    "`step` cannot be combined with log = true".into(),
                ));
            }
            let d = if p.kind == ParamType::Int {
                let low_i = int_of(low).ok_or_else(|| {
                    err(
                        "low",
                        format!("must be an integer, got {}", low.to_param_value()),
                    )
                })?;
                let high_i = int_of(high).ok_or_else(|| {
                    err(
                        "high",
                        format!("must be an integer, got {}", high.to_param_value()),
                    )
                })?;
                let step = match &p.step {
                    None => 1,
                    Some(s) => int_of(s).ok_or_else(|| {
                        err(
                            "step",
                            format!("must be an integer, got {}", s.to_param_value()),
                        )
                    })?,
                };
                check_range(low_i as f64, high_i as f64, log, &err)?;
                if step <= 0 {
                    return Err(err("step", format!("must be > 0, got {step}")));
                }
                let dist = Distribution::int(low_i, high_i, log, step)
                    .map_err(|e| err("", distribution_reason(e)))?;
                // In i128: `high - low` of i64 bounds may overflow an i64.
                let width = i128::from(high_i) - i128::from(low_i);
                if width % i128::from(step) != 0 {
                    return Err(err(
                        "step",
                        format!("step = {step} does not divide high - low = {width}"),
                    ));
                }
                dist
            } else {
                let low_f = finite_number(low, "low", &err)?;
                let high_f = finite_number(high, "high", &err)?;
                check_range(low_f, high_f, log, &err)?;
                let step = match &p.step {
                    None => None,
                    Some(s) => {
                        let step = finite_number(s, "step", &err)?;
                        if step <= 0.0 {
                            return Err(err("step", format!("must be > 0, got {step}")));
                        }
                        let k = (high_f - low_f) / step;
                        if (k - k.round()).abs() > 1e-9 * k.abs().max(1.0) {
                            return Err(err(
                                "step",
                                format!(
                                    "step = {step} does not divide high - low = {}",
                                    high_f - low_f
                                ),
                            ));
                        }
                        Some(step)
                    }
                };
                // Ranges and `log` are checked above: what the library
                // still refuses is the step (more than 2^53 steps).
                let key = if step.is_some() { "step" } else { "" };
                Distribution::float(low_f, high_f, log, step)
                    .map_err(|e| err(key, distribution_reason(e)))?
            };
            check_range_domain(sets, &d, models, &err)?;
            d
        }
    };

    let when = match &p.when {
        None => None,
        Some(w) => Some(build_condition(w, at, &p.name, earlier, index)?),
    };
    Ok(ParamSpec {
        name: p.name.clone(),
        sets,
        distribution,
        when,
        line: index.line_of(at),
    })
}

fn type_name(t: ParamType) -> &'static str {
    match t {
        ParamType::Float => "float",
        ParamType::Int => "int",
        ParamType::Categorical => "categorical",
    }
}

fn int_of(s: &Scalar) -> Option<i64> {
    match s {
        Scalar::Int(i) => Some(*i),
        _ => None,
    }
}

/// A bound or step: a number, and finite (TOML spells `inf` and `nan`).
fn finite_number(
    s: &Scalar,
    key: &str,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<f64, ConfigError> {
    match s.as_f64() {
        Some(v) if v.is_finite() => Ok(v),
        Some(v) => Err(err(key, format!("must be a finite number, got {v}"))),
        None => Err(err(
            key,
            format!("must be a number, got {}", s.to_param_value()),
        )),
    }
}

fn check_range(
    low: f64,
    high: f64,
    log: bool,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if low > high {
        return Err(err("low", format!("low = {low} is above high = {high}")));
    }
    if log && low <= 0.0 {
        return Err(err(
            "low",
            format!("log = true needs low > 0, got low = {low}"),
        ));
    }
    Ok(())
}

/// Every value of a range param must be a value of its hyperparameter.
fn check_range_domain(
    sets: Hyperparameter,
    d: &Distribution,
    models: &BTreeSet<String>,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let (low, high) = match (sets.domain(), d) {
        (Domain::Model, _) => {
            return Err(err(
                "type",
                "model is chosen with type = \"categorical\" and choices that are [models] keys"
                    .into(),
            ));
        }
        (Domain::Int { .. }, Distribution::Float { .. }) => {
            return Err(err(
                "type",
                format!("{} takes integers: use type = \"int\"", sets.name()),
            ));
        }
        (_, Distribution::Float { low, high, .. }) => {
            (ParamValue::Float(*low), ParamValue::Float(*high))
        }
        (_, Distribution::Int { low, high, .. }) => (ParamValue::Int(*low), ParamValue::Int(*high)),
        (_, Distribution::Categorical { .. }) => return Ok(()),
    };
    for (key, v) in [("low", &low), ("high", &high)] {
        if !sets.domain().admits(v, models) {
            return Err(err(
                key,
                format!(
                    "{} must be {}, got {key} = {v}",
                    sets.name(),
                    domain_text(sets, models)
                ),
            ));
        }
    }
    Ok(())
}

fn build_condition(
    w: &super::config::raw::RawWhen,
    at: &str,
    name: &str,
    earlier: &[ParamSpec],
    index: &SpanIndex<'_>,
) -> Result<Condition, ConfigError> {
    let err = |key: &str, message: String| {
        index.error_at(
            &format!("{at}.when.{key}"),
            format!("param `{name}`: {message}"),
        )
    };
    let Some(referent) = earlier.iter().find(|e| e.name == w.param) else {
        let later = if w.param == name {
            "a param cannot depend on itself".to_string()
        } else {
            format!(
                "`when` names `{}`, which is not a param defined before this one (a `when` can only test an earlier [[param]])",
                w.param
            )
        };
        return Err(err("param", later));
    };
    if w.values.is_empty() {
        return Err(err(
            "in",
            "needs at least one value (else the param is never active)".into(),
        ));
    }
    let values: Vec<ParamValue> = w.values.iter().map(Scalar::to_param_value).collect();
    for (j, v) in values.iter().enumerate() {
        let ok = match &referent.distribution {
            Distribution::Categorical { choices } => choices.iter().any(|c| c.same_choice(v)),
            d @ Distribution::Int { .. } => {
                matches!(v, ParamValue::Int(i) if d.contains(*i as f64))
            }
            Distribution::Float { .. } => {
                return Err(err(
                    "param",
                    format!(
                        "`{}` is a float param; a `when` can only test a categorical or int param",
                        w.param
                    ),
                ));
            }
        };
        if !ok {
            return Err(index.error_at(
                &format!("{at}.when.in[{j}]"),
                format!(
                    "param `{name}`: {v} is not a value param `{}` can take ({})",
                    w.param, referent.distribution
                ),
            ));
        }
    }
    Ok(Condition {
        param: w.param.clone(),
        values,
    })
}

/// Two params that set the same hyperparameter must never be active in the
/// same trial: both need a `when` on the same param with disjoint values.
fn check_exclusive(
    raw: &[RawParam],
    params: &[ParamSpec],
    index: &SpanIndex<'_>,
) -> Result<(), ConfigError> {
    for (j, b) in params.iter().enumerate() {
        for a in &params[..j] {
            if a.sets != b.sets {
                continue;
            }
            let exclusive = match (&a.when, &b.when) {
                (Some(x), Some(y)) => {
                    x.param == y.param
                        && !x
                            .values
                            .iter()
                            .any(|v| y.values.iter().any(|w| v.same_choice(w)))
                }
                _ => false,
            };
            if !exclusive {
                let key = if raw[j].sets.is_some() {
                    "sets"
                } else {
                    "name"
                };
                return Err(index.error_at(
                    &format!("param[{j}].{key}"),
                    format!(
                        "param `{}` and param `{}` (line {}) both set {} and may be active in the same trial; give both a `when` on the same param with disjoint values",
                        b.name,
                        a.name,
                        a.line,
                        b.sets.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn trial_error(
    origin: &str,
    spec: Option<&ParamSpec>,
    param: &str,
    message: String,
) -> ConfigError {
    ConfigError::Trial {
        origin: origin.to_string(),
        line: spec.map_or(0, |s| s.line),
        param: param.to_string(),
        message,
    }
}

/// Suggests every active param, in file order, through `trial`.
pub(crate) fn sample<S: Sampler + ?Sized>(
    params: &[ParamSpec],
    trial: &mut Trial<'_, S>,
    origin: &str,
) -> Result<(), ConfigError> {
    for p in params {
        let active = p.is_active(|name| trial.params().get(name).map(|q| q.value()));
        if !active {
            continue;
        }
        trial
            .suggest(&p.name, &p.distribution)
            .map_err(|e| trial_error(origin, Some(p), &p.name, e.to_string()))?;
    }
    Ok(())
}

/// What the rest of the study needs to resolve settings.
pub(crate) struct Resolve<'a> {
    pub params: &'a [ParamSpec],
    pub fixed: &'a BTreeMap<Hyperparameter, ParamValue>,
    pub models: &'a BTreeSet<String>,
    pub seed: u64,
    pub origin: &'a str,
}

impl Resolve<'_> {
    /// Stored param values (name -> external value) to settings.
    pub(crate) fn settings(
        &self,
        values: &BTreeMap<String, ParamValue>,
    ) -> Result<TrialSettings, ConfigError> {
        for name in values.keys() {
            if !self.params.iter().any(|p| &p.name == name) {
                return Err(trial_error(
                    self.origin,
                    None,
                    name,
                    "not a param of this study's search space".into(),
                ));
            }
        }
        // Which param sets each hyperparameter in this trial.
        let mut chosen: BTreeMap<Hyperparameter, (&ParamSpec, &ParamValue)> = BTreeMap::new();
        for p in self.params {
            let active = p.is_active(|name| values.get(name).cloned());
            let value = values.get(&p.name);
            match (active, value) {
                (true, None) => {
                    return Err(trial_error(
                        self.origin,
                        Some(p),
                        &p.name,
                        "active in this trial but has no value".into(),
                    ));
                }
                (false, Some(_)) => {
                    return Err(trial_error(
                        self.origin,
                        Some(p),
                        &p.name,
                        "has a value but its `when` condition does not hold".into(),
                    ));
                }
                (false, None) => {}
                (true, Some(v)) => {
                    if let Some((other, _)) = chosen.insert(p.sets, (p, v)) {
                        return Err(trial_error(
                            self.origin,
                            Some(p),
                            &p.name,
                            format!(
                                "sets {} which param `{}` also sets in this trial",
                                p.sets.name(),
                                other.name
                            ),
                        ));
                    }
                }
            }
        }
        let value_of = |h: Hyperparameter| -> Result<Option<ParamValue>, ConfigError> {
            let (spec, v) = match chosen.get(&h) {
                Some((spec, v)) => (Some(*spec), (*v).clone()),
                None => match self.fixed.get(&h).cloned().or_else(|| {
                    if h == Hyperparameter::Model && self.models.len() == 1 {
                        self.models.first().cloned().map(ParamValue::Str)
                    } else {
                        h.default_value()
                    }
                }) {
                    Some(v) => (None, v),
                    None => return Ok(None),
                },
            };
            // Stored ints may come back as integral floats.
            let v = match (h.domain(), &v) {
                (Domain::Int { .. }, ParamValue::Float(f)) if f.fract() == 0.0 => {
                    ParamValue::Int(*f as i64)
                }
                _ => v,
            };
            if !h.domain().admits(&v, self.models) {
                let name = spec.map_or(h.name(), |s| s.name.as_str());
                return Err(trial_error(
                    self.origin,
                    spec,
                    name,
                    format!(
                        "{} must be {}, got {v}",
                        h.name(),
                        domain_text(h, self.models)
                    ),
                ));
            }
            Ok(Some(v))
        };
        let float = |h| -> Result<f64, ConfigError> {
            Ok(value_of(h)?.and_then(|v| v.as_f64()).unwrap_or(f64::NAN))
        };
        let int = |h| -> Result<Option<usize>, ConfigError> {
            Ok(value_of(h)?.and_then(|v| match v {
                ParamValue::Int(i) => usize::try_from(i).ok(),
                _ => None,
            }))
        };
        let model = match value_of(Hyperparameter::Model)? {
            Some(ParamValue::Str(s)) => s,
            _ => {
                return Err(trial_error(
                    self.origin,
                    None,
                    "model",
                    "no model: neither a param nor [fixed] sets it".into(),
                ));
            }
        };
        let head_layers = int(Hyperparameter::HeadLayers)?.unwrap_or(0);
        let width = int(Hyperparameter::HeadWidth)?.unwrap_or(256);
        let layer_widths = [
            Hyperparameter::HeadWidth1,
            Hyperparameter::HeadWidth2,
            Hyperparameter::HeadWidth3,
        ];
        let mut head_hidden = Vec::with_capacity(head_layers);
        for h in layer_widths.into_iter().take(head_layers) {
            head_hidden.push(int(h)?.unwrap_or(width));
        }
        let dropout = match value_of(Hyperparameter::Dropout)? {
            Some(v) => v.as_f64(),
            None => None,
        };
        Ok(TrialSettings {
            model,
            learning_rate: float(Hyperparameter::LearningRate)?,
            batch_size: int(Hyperparameter::BatchSize)?.unwrap_or(32),
            max_length: int(Hyperparameter::MaxLength)?.unwrap_or(128),
            warmup_ratio: float(Hyperparameter::WarmupRatio)?,
            weight_decay: float(Hyperparameter::WeightDecay)?,
            dropout,
            head_hidden,
            epochs: int(Hyperparameter::Epochs)?.unwrap_or(3),
            patience: int(Hyperparameter::Patience)?.filter(|&p| p > 0),
            seed: self.seed,
        })
    }
}

/// What is wrong with a distribution, without the library's "parameter ''"
/// (the caller names the parameter and its key).
fn distribution_reason(e: hpo_sampler::Error) -> String {
    match e {
        hpo_sampler::Error::InvalidDistribution { reason, .. } => reason,
        other => other.to_string(),
    }
}

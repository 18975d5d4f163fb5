//! What a report is drawn from: the study, its trials, the distribution of
//! each parameter, and the memory attributes the runner records per trial
//! (absent from studies made by `memtune ask` or Optuna alone).

use std::collections::BTreeMap;

use serde_json::Value as Json;
use store::{Distribution, FrozenTrial, StudyDirection, TrialState};

/// One study, read whole.
pub struct ReportInput {
    pub study_name: String,
    /// The first objective's direction (charts show the first objective).
    pub direction: StudyDirection,
    pub n_objectives: usize,
    /// Every objective's direction.
    pub directions: Vec<StudyDirection>,
    /// Every objective's name: the study's own (Optuna's
    /// `study:metric_names`, which `memtune tune` sets), else `objective N`.
    pub objective_names: Vec<String>,
    /// The storage as the user named it.
    pub storage: String,
    /// Sorted by number.
    pub trials: Vec<FrozenTrial>,
    /// Each parameter's distribution, from the last trial that has it.
    pub params: BTreeMap<String, Distribution>,
}

impl ReportInput {
    /// `metric_names`: the study's `study:metric_names`, when it has them.
    pub fn new(
        study: store::Study,
        storage: String,
        mut trials: Vec<FrozenTrial>,
        metric_names: Option<&Json>,
    ) -> Self {
        trials.sort_by_key(|t| t.number);
        let mut params = BTreeMap::new();
        for t in &trials {
            for (name, p) in &t.params {
                params.insert(name.clone(), p.distribution.clone());
            }
        }
        let n = study.directions.len();
        let objective_names = match metric_names.and_then(Json::as_array) {
            Some(names) if names.len() == n => names
                .iter()
                .enumerate()
                .map(|(k, v)| v.as_str().map_or(format!("objective {k}"), String::from))
                .collect(),
            _ => (0..n).map(|k| format!("objective {k}")).collect(),
        };
        ReportInput {
            directions: study.directions.clone(),
            objective_names,
            study_name: study.name,
            direction: study
                .directions
                .first()
                .copied()
                .unwrap_or(StudyDirection::NotSet),
            n_objectives: study.directions.len(),
            storage,
            trials,
            params,
        }
    }

    /// COMPLETE trials with a finite first objective value.
    pub fn completed(&self) -> impl Iterator<Item = (&FrozenTrial, f64)> {
        self.trials.iter().filter_map(|t| {
            (t.state == TrialState::Complete)
                .then(|| t.value())
                .flatten()
                .filter(|v| v.is_finite())
                .map(|v| (t, v))
        })
    }

    /// The best trials: Optuna's `best_trials` (COMPLETE, feasible when
    /// any trial has constraints, dominated by no other), in number order.
    pub fn front(&self) -> Vec<&FrozenTrial> {
        let constrained = self.trials.iter().any(|t| t.has_constraints());
        hpo_sampler::multi::pareto_front(&self.trials, &self.directions, constrained)
    }

    /// Whether `a` is a better objective value than `b`.
    pub fn better(&self, a: f64, b: f64) -> bool {
        match self.direction {
            StudyDirection::Minimize => a < b,
            StudyDirection::Maximize | StudyDirection::NotSet => a > b,
        }
    }

    /// Trials that carry the runner's memory attributes.
    pub fn memory(&self) -> Vec<(&FrozenTrial, MemoryAttrs)> {
        self.trials
            .iter()
            .filter_map(|t| MemoryAttrs::of(t).map(|m| (t, m)))
            .collect()
    }
}

/// A parameter's value on a numeric axis: the value itself for float and
/// int distributions, the choice index for categorical ones.
pub fn axis_value(t: &FrozenTrial, name: &str) -> Option<f64> {
    t.params.get(name).map(|p| p.internal)
}

/// What the runner records about a trial's memory (see `tune::record`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryAttrs {
    pub predicted_peak: Option<u64>,
    pub measured_peak: Option<u64>,
    pub micro_batch: Option<u64>,
    pub accumulation: Option<u64>,
    /// It recomputed its layers' activations in backward (`[runner]
    /// recompute`).
    pub recompute: bool,
    pub lease_bytes: Option<u64>,
    pub worker_pid: Option<u64>,
    pub device: Option<String>,
    pub device_capacity: Option<u64>,
    pub device_usable: Option<u64>,
    /// When the lease began (Optuna's naive local time format).
    pub lease_start: Option<String>,
    /// The configuration did not fit the empty device at micro-batch 1.
    pub infeasible: bool,
    pub needed_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    /// `(from, to, message)` for each OOM inside a step that halved the
    /// micro-batch.
    pub oom_retries: Vec<(u64, u64, String)>,
    /// The resolved settings (`config` or `oom_config`).
    pub config: Option<Json>,
}

impl MemoryAttrs {
    /// `None` when the trial has none of the runner's memory attributes.
    pub fn of(t: &FrozenTrial) -> Option<MemoryAttrs> {
        let a = &t.user_attrs;
        let u = |k: &str| a.get(k).and_then(Json::as_u64);
        let infeasible = a.get("oom").and_then(Json::as_bool) == Some(true);
        let m = MemoryAttrs {
            predicted_peak: u("predicted_peak_bytes"),
            measured_peak: u("peak_bytes"),
            micro_batch: u("micro_batch"),
            accumulation: u("accumulation_steps"),
            recompute: a.get("recompute").and_then(Json::as_bool) == Some(true),
            lease_bytes: u("lease_bytes"),
            worker_pid: u("worker_pid"),
            device: a.get("device").and_then(Json::as_str).map(String::from),
            device_capacity: u("device_capacity_bytes"),
            device_usable: u("device_usable_bytes"),
            lease_start: a
                .get("lease_start")
                .and_then(Json::as_str)
                .map(String::from),
            infeasible,
            needed_bytes: u("needed_bytes"),
            available_bytes: u("available_bytes"),
            oom_retries: a
                .get("oom_retries")
                .and_then(Json::as_array)
                .map(|list| {
                    list.iter()
                        .map(|r| {
                            (
                                r["from_micro_batch"].as_u64().unwrap_or(0),
                                r["to_micro_batch"].as_u64().unwrap_or(0),
                                r["error"].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
            config: a.get("config").or_else(|| a.get("oom_config")).cloned(),
        };
        let any = m.predicted_peak.is_some() || m.micro_batch.is_some() || infeasible;
        any.then_some(m)
    }

    /// How the configuration fared on the device.
    pub fn fit(&self) -> Fit {
        if self.infeasible {
            Fit::Infeasible
        } else if self.recompute {
            Fit::Recomputed
        } else if self.accumulation.unwrap_or(1) > 1 || !self.oom_retries.is_empty() {
            Fit::SmallerMicroBatch
        } else {
            Fit::Fits
        }
    }

    /// A number from the resolved settings (`batch_size`, `max_length`, ...).
    pub fn setting(&self, key: &str) -> Option<f64> {
        self.config.as_ref()?.get(key)?.as_f64()
    }
}

/// The three outcomes of packing a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Its whole batch ran as one micro-batch.
    Fits,
    /// It ran with gradient accumulation, or an OOM halved its micro-batch.
    SmallerMicroBatch,
    /// It fitted only by recomputing its layers' activations in backward.
    Recomputed,
    /// Not even micro-batch 1 fits the empty device.
    Infeasible,
}

impl Fit {
    pub fn label(self) -> &'static str {
        match self {
            Fit::Fits => "fits",
            Fit::SmallerMicroBatch => "needed a smaller micro-batch",
            Fit::Recomputed => "recomputed its activations",
            Fit::Infeasible => "infeasible",
        }
    }
}

/// Seconds since 1970 of Optuna's naive `YYYY-MM-DD HH:MM:SS[.ffffff]`,
/// read as if it were UTC: differences between two such times are right.
pub fn seconds(text: &str) -> Option<f64> {
    let (date, time) = text.trim().split_once([' ', 'T'])?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut hms = time.splitn(3, ':');
    let h: f64 = hms.next()?.parse().ok()?;
    let min: f64 = hms.next()?.parse().ok()?;
    let s: f64 = hms.next()?.parse().ok()?;
    // Out-of-range fields are refused, not wrapped: `f64::parse` takes
    // "inf", "NaN" and "1e308" too, and such a time never ended an axis.
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0.0..24.0).contains(&h)
        || !(0.0..60.0).contains(&min)
        || !(0.0..61.0).contains(&s)
        || !(-1_000_000..=1_000_000).contains(&y)
    {
        return None;
    }
    Some(days_from_civil(y, m, day) as f64 * 86_400.0 + h * 3_600.0 + min * 60.0 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::{Fit, MemoryAttrs, seconds};
    use serde_json::json;
    use store::FrozenTrial;

    #[test]
    fn a_trial_fits_by_accumulation_or_recomputation_or_not_at_all() {
        let fit = |attrs: &[(&str, serde_json::Value)]| {
            let mut t = FrozenTrial::new(0);
            for (k, v) in attrs {
                t.user_attrs.insert(k.to_string(), v.clone());
            }
            MemoryAttrs::of(&t).map(|m| m.fit())
        };
        let whole = [("micro_batch", json!(32)), ("accumulation_steps", json!(1))];
        assert_eq!(fit(&whole), Some(Fit::Fits));
        let split = [("micro_batch", json!(8)), ("accumulation_steps", json!(4))];
        assert_eq!(fit(&split), Some(Fit::SmallerMicroBatch));
        let recomputed = [
            ("micro_batch", json!(8)),
            ("accumulation_steps", json!(4)),
            ("recompute", json!(true)),
        ];
        assert_eq!(fit(&recomputed), Some(Fit::Recomputed));
        let kept = [("micro_batch", json!(32)), ("recompute", json!(false))];
        assert_eq!(fit(&kept), Some(Fit::Fits));
        assert_eq!(fit(&[("oom", json!(true))]), Some(Fit::Infeasible));
        assert_eq!(fit(&[]), None);
    }

    #[test]
    fn optuna_times_read_as_seconds() {
        assert_eq!(seconds("1970-01-01 00:00:00"), Some(0.0));
        assert_eq!(seconds("1970-01-02 00:00:01.5"), Some(86_401.5));
        let a = seconds("2024-02-28 23:59:59").unwrap();
        let b = seconds("2024-03-01 00:00:00").unwrap();
        assert_eq!(b - a, 86_401.0, "2024 is a leap year");
        assert_eq!(seconds("yesterday"), None);
        assert_eq!(seconds("2024-13-01 00:00:00"), None);
        for bad in ["inf", "NaN", "-inf", "1e308"] {
            assert_eq!(seconds(&format!("2024-01-01 00:00:{bad}")), None, "{bad}");
            assert_eq!(seconds(&format!("2024-01-01 {bad}:00:00")), None, "{bad}");
        }
    }
}

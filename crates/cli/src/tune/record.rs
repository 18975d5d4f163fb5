//! How each outcome of a trial is written to the store: state, value and
//! the attributes the legacy setup's analysis scripts read (`oom`, `oom_config`,
//! `cuda_error`, `cuda_error_msg`), plus ours (`error_kind`, `error_msg`,
//! `micro_batch`, `predicted_peak_bytes`, `recompute`, `startup_seconds`
//! (data, device, model: the seconds before a trial's first step), ...).
//! User attributes are what a
//! person reads in `memtune trials` or `optuna.load_study`; constraint
//! values go where Optuna's samplers read them (system attribute
//! `constraints`).

use std::collections::BTreeSet;

use serde_json::{Value as Json, json};
use store::{RetryPolicy, Storage, TrialRef, TrialState};

use super::config::{Constraint, TrialSettings};
use super::packing::Lease;
use super::progress::Counts;
use hpo_sampler::CONSTRAINTS_KEY;

fn settings_json(s: &TrialSettings) -> Json {
    serde_json::to_value(s).expect("settings serialise")
}

pub fn settings_text(s: &TrialSettings) -> String {
    let head = if s.head_hidden.is_empty() {
        "linear".to_string()
    } else {
        format!("{:?}", s.head_hidden)
    };
    format!(
        "{} lr={:.2e} batch={} len={} warmup={:.2} wd={:.3} dropout={} head={head} epochs={}",
        s.model,
        s.learning_rate,
        s.batch_size,
        s.max_length,
        s.warmup_ratio,
        s.weight_decay,
        s.dropout.map_or("model".to_string(), |d| format!("{d:.2}")),
        s.epochs
    )
}

/// The stored params of a trial as `name=value` pairs.
pub fn params_text(t: &store::FrozenTrial) -> String {
    t.params
        .iter()
        .map(|(name, p)| {
            let v = match store::value_to_json(&p.value()) {
                Json::Number(n) => n
                    .as_f64()
                    .filter(|f| f.fract() != 0.0 && f.abs() < 1e-2)
                    .map_or(n.to_string(), |f| format!("{f:.2e}")),
                other => other.to_string(),
            };
            format!("{name}={v}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn set_user(storage: &Storage, trial: &TrialRef, attrs: &[(&str, Json)]) -> store::Result<()> {
    for (k, v) in attrs {
        storage.set_trial_user_attr(trial.trial_id, k, v)?;
    }
    Ok(())
}

/// The device a trial was leased on, as `memtune report` draws its
/// timeline (one runner's device; several runners may share a study).
pub struct DeviceRecord<'a> {
    pub name: &'a str,
    pub matmul_precision: trainer::backend::MatmulPrecision,
    pub kernels: trainer::backend::Kernels,
    pub capacity: u64,
    /// What leases may sum to (capacity less the safety margin).
    pub usable: u64,
}

pub fn started(
    storage: &Storage,
    trial: &TrialRef,
    settings: &TrialSettings,
    lease: &Lease,
    device: &DeviceRecord<'_>,
    pid: u32,
    threads: usize,
) -> store::Result<()> {
    set_user(
        storage,
        trial,
        &[
            // The trial's start on the device: `datetime_start` is its
            // claim, which may wait for memory before a lease.
            ("lease_start", json!(store::time::now_local())),
            ("config", settings_json(settings)),
            ("device", json!(device.name)),
            ("matmul_precision", json!(device.matmul_precision.name())),
            ("kernels", json!(device.kernels.name())),
            ("device_capacity_bytes", json!(device.capacity)),
            ("device_usable_bytes", json!(device.usable)),
            ("micro_batch", json!(lease.micro_batch)),
            ("accumulation_steps", json!(lease.accumulation)),
            ("predicted_peak_bytes", json!(lease.predicted_peak)),
            ("lease_bytes", json!(lease.bytes)),
            ("worker_pid", json!(pid)),
            // 0: the worker's own thread count (`threads_per_worker`).
            ("threads", json!(threads)),
        ],
    )
}

/// A trial that trained: its values (one per objective), what it ran
/// with, and its constraint values when the study has constraints.
pub fn finished(
    storage: &Storage,
    trial: &TrialRef,
    state: TrialState,
    values: &[f64],
    details: &Json,
    constraints: Option<&[f64]>,
) -> store::Result<()> {
    if let Json::Object(map) = details {
        for (k, v) in map {
            storage.set_trial_user_attr(trial.trial_id, k, v)?;
        }
    }
    if let Some(c) = constraints {
        storage.set_trial_system_attr(trial.trial_id, CONSTRAINTS_KEY, &json!(c))?;
    }
    storage.finish(trial.trial_id, state, values)
}

/// A trial that a `[[constraint]]` rules out before it trains: PRUNED (no
/// value) without running, with its predicted constraint values (one
/// above 0), why, and the configuration it would have run.
pub fn over_constraint(
    storage: &Storage,
    trial: &TrialRef,
    settings: &TrialSettings,
    constraints: &[f64],
    why: &str,
) -> store::Result<()> {
    set_user(
        storage,
        trial,
        &[
            ("error_kind", json!("constraint")),
            ("error_msg", json!(why)),
            ("config", settings_json(settings)),
        ],
    )?;
    storage.set_trial_system_attr(trial.trial_id, CONSTRAINTS_KEY, &json!(constraints))?;
    storage.finish(trial.trial_id, TrialState::Pruned, &[])
}

/// A configuration that does not fit at micro-batch 1: PRUNED (no value),
/// with the memory it needs and had, and a positive constraint violation
/// (the fraction by which it overshoots), so TPE ranks it below every
/// feasible trial and learns the memory boundary. A study with
/// `[[constraint]]`s stores one value per constraint, each at least that
/// violation: whatever its own constraints say, the trial could not run.
pub fn infeasible(
    storage: &Storage,
    trial: &TrialRef,
    settings: &TrialSettings,
    needed: u64,
    available: u64,
    why: &str,
    constraints: Option<&[f64]>,
) -> store::Result<()> {
    let violation = (needed as f64 - available as f64).max(1.0) / available.max(1) as f64;
    set_user(
        storage,
        trial,
        &[
            ("oom", json!(true)),
            ("oom_config", settings_json(settings)),
            ("error_kind", json!("oom")),
            ("error_msg", json!(why)),
            ("needed_bytes", json!(needed)),
            ("available_bytes", json!(available)),
        ],
    )?;
    let constraints: Vec<f64> = match constraints {
        None => vec![violation],
        Some(values) => values.iter().map(|v| v.max(violation)).collect(),
    };
    storage.set_trial_system_attr(trial.trial_id, CONSTRAINTS_KEY, &json!(constraints))?;
    storage.finish(trial.trial_id, TrialState::Pruned, &[])
}

pub fn cuda_error(
    storage: &Storage,
    trial: &TrialRef,
    settings: &TrialSettings,
    message: &str,
    exit: &str,
) -> store::Result<()> {
    set_user(
        storage,
        trial,
        &[
            ("cuda_error", json!(true)),
            ("cuda_error_msg", json!(message)),
            ("error_kind", json!("cuda_error")),
            ("error_msg", json!(format!("{message} (worker {exit})"))),
            ("config", settings_json(settings)),
        ],
    )?;
    storage.finish(trial.trial_id, TrialState::Fail, &[])
}

pub fn error(
    storage: &Storage,
    trial: &TrialRef,
    kind: &str,
    message: &str,
    settings: Option<&TrialSettings>,
) -> store::Result<()> {
    set_user(
        storage,
        trial,
        &[("error_kind", json!(kind)), ("error_msg", json!(message))],
    )?;
    if let Some(s) = settings {
        storage.set_trial_user_attr(trial.trial_id, "config", &settings_json(s))?;
    }
    storage.finish(trial.trial_id, TrialState::Fail, &[])
}

/// FAIL now with its kind, and a WAITING copy (same params, `failed_trial`
/// and `retry_history`, as stale trials get) for the next run, in one
/// transaction. `false` when the trial was no longer RUNNING (another
/// runner had failed it as stale and retried it).
pub fn fail_and_retry(
    storage: &Storage,
    trial: &TrialRef,
    kind: &str,
    message: &str,
) -> store::Result<bool> {
    let policy = RetryPolicy {
        max_retry: None,
        inherit_intermediate_values: false,
    };
    let retried = storage.fail_trial_and_retry(
        *trial,
        &policy,
        &[("error_kind", json!(kind)), ("error_msg", json!(message))],
    )?;
    Ok(retried.is_some())
}

/// Optuna's study system attribute naming each objective
/// (`Study.set_metric_names`).
pub const METRIC_NAMES_KEY: &str = "study:metric_names";

/// memtune's study system attribute listing the study's `[[constraint]]`s
/// in file order ([`constraints_json`]): what each entry of a trial's
/// `constraints` system attribute measured.
pub const STUDY_CONSTRAINTS_KEY: &str = "memtune:constraints";

/// The study's constraints as [`STUDY_CONSTRAINTS_KEY`] stores them:
/// `[{"metric": "peak_memory", "max": 8589934592.0}, ...]`.
pub fn constraints_json(constraints: &[Constraint]) -> Json {
    constraints
        .iter()
        .map(|c| json!({"metric": c.metric.name(), "max": c.max}))
        .collect()
}

/// Names the study's objectives as Optuna's `Study.set_metric_names`
/// does, and stores its constraints ([`STUDY_CONSTRAINTS_KEY`]),
/// unless the study has them already; returns what it has when it has
/// others, key first (its trials' values then mean other things than the
/// study file's).
pub fn name_metrics(
    storage: &Storage,
    study_id: i64,
    names: &[&str],
    constraints: &[Constraint],
) -> store::Result<Option<(&'static str, Json)>> {
    let mut stored = storage.study_system_attrs(study_id)?;
    for (key, value) in [
        (METRIC_NAMES_KEY, json!(names)),
        (STUDY_CONSTRAINTS_KEY, constraints_json(constraints)),
    ] {
        match stored.remove(key) {
            None => storage.set_study_system_attr(study_id, key, &value)?,
            Some(s) if s == value => {}
            Some(s) => return Ok(Some((key, s))),
        }
    }
    Ok(None)
}

/// Counts toward `n_trials` (see the runner's module doc).
pub fn count(trials: &[store::FrozenTrial]) -> Counts {
    let retried: BTreeSet<u64> = trials
        .iter()
        .filter_map(|t| t.system_attrs.get("retry_history"))
        .filter_map(Json::as_array)
        .flatten()
        .filter_map(Json::as_u64)
        .collect();
    let mut c = Counts::default();
    for t in trials {
        match t.state {
            TrialState::Complete => c.complete += 1,
            TrialState::Pruned => {
                c.pruned += 1;
                c.infeasible += usize::from(t.user_attrs.get("oom") == Some(&json!(true)));
                c.over_constraint +=
                    usize::from(t.user_attrs.get("error_kind") == Some(&json!("constraint")));
            }
            TrialState::Fail if !retried.contains(&t.number) => c.failed += 1,
            TrialState::Fail => {}
            TrialState::Running => c.running += 1,
            TrialState::Waiting => c.waiting += 1,
        }
    }
    c
}

//! `memtune ask`: Optuna's `optuna ask` on the store and `hpo-sampler`.
//!
//! One ask claims the oldest WAITING (enqueued) trial or creates a RUNNING
//! one, as Optuna's `study.ask` does, samples every parameter of the fixed
//! `--search-space` from the study's history (RUNNING trials included, so
//! the TPE's constant liar spreads parallel workers), stores each parameter
//! as Optuna does (internal value plus distribution JSON) and prints
//! `{"number": N, "params": {...}}` exactly as Optuna formats it. A claimed
//! trial keeps the params it already stores and takes its `fixed_params`
//! (Optuna's `enqueue_trial`); only the rest are sampled.
//!
//! Everything that can be wrong with the input (search space, sampler
//! options, unknown study) is checked before the first write, so a failed
//! ask changes nothing. The store has no "create a RUNNING trial with
//! params" operation, so the trial and its params are separate
//! transactions (as in Optuna); if storing a param or printing the trial
//! fails, the trial is marked FAIL so no half-asked trial stays RUNNING.
//! Ctrl-C, SIGTERM or SIGHUP is held from just before the trial exists:
//! one that comes before the sampled params are stored ends the trial (a
//! created one FAIL, a claimed enqueued one FAIL with a WAITING copy that
//! keeps what was enqueued) and the ask exits 130 without printing; one
//! that comes later lets the ask finish and print the trial, whose params
//! are stored. (A second signal, which ends the process at once, or
//! SIGKILL in between still leaves the trial RUNNING, as Optuna's `ask`
//! would.)

use super::Context;
use crate::error::{CliError, Result};
use crate::history::{self, HistoryError};
use hpo_sampler::{
    AutoConfig, AutoSampler, GpConfig, GpSampler, NsgaIIConfig, NsgaIISampler, Param,
    RandomSampler, Sampler, StudyView, TpeConfig, TpeSampler,
};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::io::Write;
use store::python_json::{self, Object};
use store::{Claim, TrialFilter, TrialState};

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study` is accepted too).
    #[arg(long = "study-name", alias = "study", value_parser = super::study_name)]
    pub study_name: String,
    /// Parameters to sample: a JSON object of Optuna distributions by name,
    /// e.g. '{"x": {"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0}}}'.
    #[arg(long, default_value = "{}")]
    pub search_space: String,
    /// `tpe` (TPESampler, the default; multi-objective TPE on a study of
    /// several objectives), `random` (RandomSampler), `gp` (GPSampler; a
    /// random ParEGO scalarisation per ask on several objectives), `auto`
    /// (GP below 200 finished trials while at most half the parameters are
    /// categorical, TPE beyond; on several objectives GP below 30 finished
    /// trials per parameter, at least 100 and at most 300, TPE beyond,
    /// NSGA-II from 1,000 COMPLETE trials) or `nsga2` (NSGAIISampler).
    #[arg(long)]
    pub sampler: Option<String>,
    /// Sampler options as JSON, as Optuna's: e.g. '{"seed": 1}' or
    /// '{"n_startup_trials": 5}'.
    #[arg(long)]
    pub sampler_kwargs: Option<String>,
    /// Seed (the same as `"seed"` in --sampler-kwargs). Each ask derives its
    /// own stream from (seed, trial number), so a seeded study is
    /// reproducible and consecutive asks differ.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output format (only Optuna's default, `json`).
    #[arg(short = 'f', long, default_value = "json", value_parser = ["json"])]
    pub format: String,
    /// Print params as `params_NAME` keys at the top level, as Optuna's --flatten.
    #[arg(long)]
    pub flatten: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Random,
    Tpe,
    Gp,
    Auto,
    NsgaII,
}

/// The sampler asked for, with its options checked.
struct SamplerChoice {
    kind: Kind,
    seed: Option<u64>,
    tpe: TpeConfig,
    gp: GpConfig,
    nsga2: NsgaIIConfig,
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let space = store::search_space_from_json(&args.search_space)
        .map_err(|e| CliError::Usage(format!("bad --search-space: {e}")))?;
    // A range no value can be drawn from fails the sampler, which runs
    // after the trial is created or an enqueued one claimed; such a param
    // is refused below unless the trial to be claimed fixes it.
    let undrawable: Vec<(&String, String)> = space
        .iter()
        .filter(|(_, d)| !d.single())
        .filter_map(|(name, d)| {
            let reason = match d.check_drawable().err()? {
                hpo_sampler::Error::InvalidDistribution { reason, .. } => reason,
                other => other.to_string(),
            };
            Some((name, reason))
        })
        .collect();
    let choice = sampler_choice(args)?;
    let order = key_order(&args.search_space)
        .map_err(|e| CliError::Usage(format!("bad --search-space: {e}")))?;
    let storage = ctx.open_existing()?;
    let study = storage.study(&args.study_name)?;
    let kind = choice.kind;
    // The history is read (and checked) once, before the trial exists, so
    // a stored row the sampler cannot read leaves nothing behind. A trial
    // another worker creates in the few milliseconds between this read and
    // `create_trial` has no params yet, so the constant liar loses nothing.
    let trials = storage.trials(study.study_id, &TrialFilter::default())?;
    // Each trial, and each COMPLETE one's count of values against the
    // study's directions, which only the study knows.
    StudyView::with_directions(&study.name, &study.directions, &trials)
        .check()
        .map_err(HistoryError::in_storage(&storage))?;
    // (Another worker may claim that trial first: this ask then claims the
    // next, and a param it leaves to the sampler fails it after the claim.)
    let next_waiting = trials
        .iter()
        .filter(|t| t.state == TrialState::Waiting)
        .min_by_key(|t| t.trial_id);
    let fixed_by_next = |name: &str| {
        next_waiting.is_some_and(|t| {
            t.params.contains_key(name)
                || t.system_attrs
                    .get(FIXED_PARAMS_KEY)
                    .is_some_and(|fixed| fixed.get(name).is_some())
        })
    };
    if let Some((name, reason)) = undrawable.iter().find(|(name, _)| !fixed_by_next(name)) {
        return Err(CliError::Usage(format!(
            "bad --search-space: parameter `{name}`: {reason}"
        )));
    }
    // As Optuna's storage: a distribution the study's history contradicts
    // is refused, here before anything is written.
    hpo_sampler::check_against_history(&trials, &space)
        .map_err(|e| CliError::Usage(format!("study `{}`: {e}", study.name)))?;
    // So is a space the next enqueued trial's values do not fit: claimed,
    // that trial could only be failed, and its enqueued values lost.
    if let Some(waiting) = next_waiting {
        params_of_enqueued(waiting, &space)?;
    }

    // From here a stop signal is held (see the module doc).
    let stop =
        crate::tune::runner::handle_stop_signals().map_err(|e| CliError::Failed(e.to_string()))?;
    let stopped = || stop.load(std::sync::atomic::Ordering::SeqCst);
    if stopped() {
        return Err(CliError::Interrupted);
    }
    // As Optuna's `study.ask`: an enqueued (WAITING) trial is claimed first.
    let claim = storage.create_or_claim_trial(study.study_id)?;
    let trial = claim.trial();
    #[cfg(feature = "fault-injection")]
    interrupt_if_asked(trial.number)?;
    let number = trial.number as u64;
    let view = StudyView::with_directions(&study.name, &study.directions, &trials);
    let seed = choice.seed.map(|s| per_trial_seed(s, number));
    let mut sampler: Box<dyn Sampler> = match kind {
        Kind::Random => Box::new(RandomSampler::new(seed)),
        Kind::Tpe => Box::new(TpeSampler::new(TpeConfig {
            seed,
            ..choice.tpe.clone()
        })),
        Kind::Gp => Box::new(GpSampler::new(GpConfig {
            seed,
            ..choice.gp.clone()
        })),
        Kind::NsgaII => Box::new(NsgaIISampler::new(NsgaIIConfig {
            seed,
            ..choice.nsga2.clone()
        })),
        Kind::Auto => Box::new(AutoSampler::new(
            AutoConfig::default(),
            GpConfig {
                seed,
                ..choice.gp.clone()
            },
            TpeConfig {
                seed,
                ..choice.tpe.clone()
            },
        )),
    };
    // As Optuna's `_suggest`: a claimed trial's stored and fixed params are
    // taken as they are, and only the rest is asked of the sampler.
    let given = match claim {
        Claim::Created(_) => Ok((BTreeMap::new(), BTreeMap::new())),
        Claim::Claimed(_) => enqueued_params(&storage, trial.trial_id, &space),
    };
    let stored_params = given
        .and_then(|(given, already_stored)| {
            let rest: hpo_sampler::SearchSpace = space
                .iter()
                .filter(|(name, _)| !given.contains_key(*name))
                .map(|(name, d)| (name.clone(), d.clone()))
                .collect();
            let mut params = hpo_sampler::ask(sampler.as_mut(), view, number, &rest)
                .map_err(|e| CliError::Failed(e.to_string()))?;
            params.extend(given);
            // The last moment the ask can stop: once its params are
            // stored, finishing it (printing the trial) is what leaves the
            // study consistent.
            if stopped() {
                return Err(CliError::Interrupted);
            }
            Ok((params, already_stored))
        })
        .and_then(|(params, already_stored)| {
            for (name, p) in params
                .iter()
                .filter(|(n, _)| !already_stored.contains_key(*n))
            {
                storage.set_param(trial.trial_id, name, p.internal, &p.distribution)?;
            }
            // What the sampler keeps on the trial (NSGA-II's generation).
            for (key, value) in sampler.system_attrs(&view, number) {
                storage.set_trial_system_attr(trial.trial_id, &key, &value)?;
            }
            Ok(params)
        });
    // A trial whose ask cannot finish is marked FAIL rather than left
    // RUNNING for no one to tell.
    let fail_trial = |e: &dyn std::fmt::Display| {
        let cleanup = storage.finish(trial.trial_id, TrialState::Fail, &[]);
        CliError::Failed(match cleanup {
            Ok(()) => format!("trial {} was marked FAIL: {e}", trial.number),
            Err(c) => format!(
                "{e}; trial {} could not be marked FAIL either: {c}",
                trial.number
            ),
        })
    };
    let params = stored_params.map_err(|e| match e {
        CliError::Interrupted => end_interrupted(&storage, &claim),
        e => fail_trial(&e),
    })?;

    // Optuna prints `trial.params`: in the search space's order (its
    // `study.ask` suggests them in that order), params already stored on a
    // claimed trial beyond the space after them.
    let names = order
        .iter()
        .filter(|n| params.contains_key(*n))
        .chain(params.keys().filter(|n| !order.contains(n)));
    let values: Vec<(String, Json)> = names
        .map(|name| (name.clone(), store::value_to_json(&params[name].value())))
        .collect();
    let number = ("number".to_string(), Json::from(trial.number));
    let line = if args.flatten {
        let record: Vec<(String, Json)> = std::iter::once(number)
            .chain(values.into_iter().map(|(k, v)| (format!("params_{k}"), v)))
            .collect();
        python_json::to_string(&Object(&record))
    } else {
        #[derive(serde::Serialize)]
        struct Asked<'a> {
            number: i64,
            params: Object<'a>,
        }
        python_json::to_string(&Asked {
            number: trial.number,
            params: Object(&values),
        })
    };
    // Whoever asked never learns a trial number it cannot read.
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| fail_trial(&format!("cannot write output: {e}")))
}

/// Sends this process SIGINT if `MEMTUNE_FAULT` asks it to for trial
/// `number` (`interrupt-ask@N`): Ctrl-C just after the trial is created.
#[cfg(feature = "fault-injection")]
fn interrupt_if_asked(number: i64) -> Result<()> {
    let faults = crate::tune::fault::Faults::from_env().map_err(CliError::Usage)?;
    if faults.interrupt_ask_of == Some(number) {
        // SAFETY: raise(3) has no memory effects.
        unsafe { libc::raise(libc::SIGINT) };
    }
    Ok(())
}

/// Ends the trial of an ask that was told to stop before it stored params:
/// FAIL, with a WAITING copy when it was enqueued (its fixed params are
/// someone's request, kept for the next ask).
fn end_interrupted(storage: &store::Storage, claim: &Claim) -> CliError {
    const WHY: &str =
        "the ask was interrupted (Ctrl-C, SIGTERM or SIGHUP) before it printed the trial";
    let trial = claim.trial();
    let ended = match claim {
        Claim::Created(_) => storage.finish(trial.trial_id, TrialState::Fail, &[]),
        Claim::Claimed(_) => {
            crate::tune::record::fail_and_retry(storage, &trial, "interrupted", WHY).map(drop)
        }
    };
    match ended {
        Ok(()) => CliError::Interrupted,
        Err(e) => CliError::Failed(format!(
            "interrupted, and trial {} could not be marked FAIL: {e}",
            trial.number
        )),
    }
}

/// The top-level keys of a JSON object in the order written, each once
/// (serde_json's maps sort their keys; a Python dict keeps them in order).
fn key_order(text: &str) -> std::result::Result<Vec<String>, serde_json::Error> {
    use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys(Vec<String>);
    struct KeysVisitor;
    impl<'de> Visitor<'de> for KeysVisitor {
        type Value = Keys;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Keys, A::Error> {
            let mut keys: Vec<String> = Vec::new();
            while let Some((key, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            Ok(Keys(keys))
        }
    }
    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            d.deserialize_map(KeysVisitor)
        }
    }
    serde_json::from_str::<Keys>(text).map(|k| k.0)
}

/// Optuna's `study.enqueue_trial` key: fixed external values by name.
const FIXED_PARAMS_KEY: &str = "fixed_params";

/// The params a claimed WAITING trial brings for `space`: those it already
/// stores win, then its `fixed_params` system attribute (what Optuna's
/// `enqueue_trial` writes); the sampler draws the rest. Returns them and
/// the subset that is already stored (not to be written again). A fixed
/// value outside its distribution is refused (Optuna only warns), so that
/// a trial never runs with a value its search space does not allow.
fn enqueued_params(
    storage: &store::Storage,
    trial_id: i64,
    space: &hpo_sampler::SearchSpace,
) -> Result<(BTreeMap<String, Param>, BTreeMap<String, Param>)> {
    let stored = storage.trial(trial_id)?;
    stored.check().map_err(HistoryError::in_storage(storage))?;
    params_of_enqueued(&stored, space)
}

/// [`enqueued_params`] of a trial already read.
fn params_of_enqueued(
    stored: &hpo_sampler::FrozenTrial,
    space: &hpo_sampler::SearchSpace,
) -> Result<(BTreeMap<String, Param>, BTreeMap<String, Param>)> {
    let mut params = BTreeMap::new();
    let fixed = stored.system_attrs.get(FIXED_PARAMS_KEY);
    let mut already = BTreeMap::new();
    for (name, distribution) in space {
        if let Some(p) = stored.params.get(name) {
            if !p.distribution.compatible_with(distribution) {
                return Err(CliError::Usage(format!(
                    "enqueued trial {}: parameter `{name}` is stored with {} but the search space has {distribution}",
                    stored.number, p.distribution
                )));
            }
            already.insert(name.clone(), p.clone());
            params.insert(name.clone(), p.clone());
        } else if let Some(value) = fixed.and_then(|f| f.get(name)) {
            let internal = history::fixed_internal(distribution, name, value).map_err(|why| {
                CliError::Usage(format!("enqueued trial {}: {why}", stored.number))
            })?;
            params.insert(
                name.clone(),
                Param {
                    distribution: distribution.clone(),
                    internal,
                },
            );
        }
    }
    Ok((params, already))
}

fn sampler_choice(args: &Args) -> Result<SamplerChoice> {
    let kind = match args.sampler.as_deref() {
        None => Kind::Tpe,
        Some(s) => match s.to_ascii_lowercase().as_str() {
            "tpe" | "tpesampler" => Kind::Tpe,
            "random" | "randomsampler" => Kind::Random,
            "gp" | "gpsampler" => Kind::Gp,
            "auto" => Kind::Auto,
            "nsga2" | "nsgaii" | "nsgaiisampler" => Kind::NsgaII,
            _ => {
                return Err(CliError::Usage(format!(
                    "unknown --sampler `{s}`: use tpe (TPESampler), random (RandomSampler), \
                     gp (GPSampler), auto or nsga2 (NSGAIISampler)"
                )));
            }
        },
    };
    let mut choice = SamplerChoice {
        kind,
        seed: args.seed,
        tpe: TpeConfig::default(),
        gp: GpConfig::default(),
        nsga2: NsgaIIConfig::default(),
    };
    let Some(text) = &args.sampler_kwargs else {
        return Ok(choice);
    };
    if args.sampler.is_none() {
        // Optuna refuses this too: the options would silently apply to a default.
        return Err(CliError::Usage(
            "--sampler-kwargs is set without --sampler: give --sampler as well".into(),
        ));
    }
    let bad = |key: &str, want: &str| {
        CliError::Usage(format!("bad --sampler-kwargs: `{key}` must be {want}"))
    };
    let kwargs: Map<String, Json> = serde_json::from_str(text)
        .map_err(|e| CliError::Usage(format!("bad --sampler-kwargs (not a JSON object): {e}")))?;
    let tpe = &mut choice.tpe;
    for (key, v) in &kwargs {
        let uint = || v.as_u64().ok_or_else(|| bad(key, "a non-negative integer"));
        let flag = || v.as_bool().ok_or_else(|| bad(key, "true or false"));
        match (key.as_str(), kind) {
            ("seed", _) => {
                if !v.is_null() {
                    let s = uint()?;
                    if args.seed.is_some_and(|given| given != s) {
                        return Err(CliError::Usage(format!(
                            "--seed {} and --sampler-kwargs seed {s} disagree",
                            args.seed.unwrap_or_default()
                        )));
                    }
                    choice.seed = Some(s);
                }
            }
            ("n_startup_trials", Kind::Tpe) => tpe.n_startup_trials = uint()? as usize,
            ("n_startup_trials", Kind::Gp) => choice.gp.n_startup_trials = uint()? as usize,
            ("n_startup_trials", Kind::Auto) => {
                let n = uint()? as usize;
                tpe.n_startup_trials = n;
                choice.gp.n_startup_trials = n;
            }
            ("deterministic_objective", Kind::Gp | Kind::Auto) => {
                choice.gp.deterministic_objective = flag()?
            }
            ("n_ei_candidates", Kind::Tpe) => {
                // Candidates or finalists given hold on every space.
                *tpe = tpe.clone().one_rule_everywhere();
                tpe.n_ei_candidates = uint()? as usize;
                if !(1..=TpeConfig::MAX_EI_CANDIDATES).contains(&tpe.n_ei_candidates) {
                    return Err(bad(key, "between 1 and 1000000"));
                }
            }
            ("ei_finalists", Kind::Tpe) => {
                // null or 0: every candidate competes (Optuna).
                *tpe = tpe.clone().one_rule_everywhere();
                tpe.ei_finalists = match v {
                    Json::Null => None,
                    _ => Some(uint()? as usize).filter(|&k| k > 0),
                }
            }
            ("prior_weight", Kind::Tpe) => {
                tpe.prior_weight = v
                    .as_f64()
                    .filter(|w| *w > 0.0 && w.is_finite())
                    .ok_or_else(|| bad(key, "a positive number"))?
            }
            ("consider_magic_clip", Kind::Tpe) => tpe.consider_magic_clip = flag()?,
            ("consider_endpoints", Kind::Tpe) => tpe.consider_endpoints = flag()?,
            ("multivariate", Kind::Tpe) => tpe.multivariate = flag()?,
            ("group", Kind::Tpe) => tpe.group = flag()?,
            ("constant_liar", Kind::Tpe) => tpe.constant_liar = flag()?,
            ("population_size", Kind::NsgaII) => {
                let n = uint()?;
                let max = hpo_sampler::NsgaIIConfig::MAX_POPULATION_SIZE;
                if !(2..=max as u64).contains(&n) {
                    return Err(bad(key, &format!("at least 2 and at most {max}")));
                }
                choice.nsga2.population_size = n as usize;
            }
            _ => {
                return Err(CliError::Usage(format!(
                    "bad --sampler-kwargs: `{key}` is not an option memtune's {kind:?} sampler supports"
                )));
            }
        }
    }
    if tpe.group && !tpe.multivariate {
        return Err(bad("group", "used with multivariate=true"));
    }
    Ok(choice)
}

/// A seed of its own for trial `number`: each `memtune ask` is a fresh
/// process, so a sampler seeded with the study seed alone would draw the
/// same random start for every trial. splitmix64 of the pair keeps seeds of
/// neighbouring trials unrelated.
fn per_trial_seed(seed: u64, number: u64) -> u64 {
    let mut z = seed ^ number.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_with(kwargs: &str) -> Args {
        Args {
            study_name: "s".into(),
            search_space: "{}".into(),
            sampler: Some("tpe".into()),
            sampler_kwargs: Some(kwargs.into()),
            seed: None,
            format: "json".into(),
            flatten: false,
        }
    }

    fn choice(kwargs: &str) -> Result<SamplerChoice> {
        sampler_choice(&args_with(kwargs))
    }

    #[test]
    fn ei_finalists_kwarg_sets_or_clears_the_finalists() {
        // The default is Optuna's: every candidate competes.
        assert_eq!(choice("{}").unwrap().tpe.ei_finalists, None);
        assert_eq!(choice("{}").unwrap().tpe.n_ei_candidates, 24);
        // Given candidates or finalists hold on continuous and integer
        // spaces too.
        let space_rules = |kwargs| {
            let tpe = choice(kwargs).unwrap().tpe;
            (tpe.continuous.is_some(), tpe.integer.is_some())
        };
        assert_eq!(space_rules("{}"), (true, true));
        assert_eq!(space_rules(r#"{"ei_finalists": 8}"#), (false, false));
        assert_eq!(space_rules(r#"{"n_ei_candidates": 48}"#), (false, false));
        let set = |kwargs| choice(kwargs).unwrap().tpe.ei_finalists;
        assert_eq!(set(r#"{"ei_finalists": 8}"#), Some(8));
        assert_eq!(set(r#"{"ei_finalists": null}"#), None);
        assert_eq!(set(r#"{"ei_finalists": 0}"#), None);
        let err = choice(r#"{"ei_finalists": -1}"#).err().unwrap().to_string();
        assert!(err.contains("ei_finalists"), "{err}");
        // NSGA-II's population, as the study file's `population_size`.
        let nsga2 = |kwargs| {
            sampler_choice(&Args {
                sampler: Some("nsga2".into()),
                ..args_with(kwargs)
            })
        };
        assert_eq!(
            nsga2(r#"{"population_size": 8}"#)
                .unwrap()
                .nsga2
                .population_size,
            8
        );
        let err = nsga2(r#"{"population_size": 1}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("at least 2"), "{err}");
        // A count that would exhaust memory is refused, not allocated.
        let err = choice(r#"{"n_ei_candidates": 100000000000}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("between 1 and 1000000"), "{err}");
    }

    #[test]
    fn per_trial_seeds_differ_and_repeat() {
        assert_eq!(per_trial_seed(1, 5), per_trial_seed(1, 5));
        assert_ne!(per_trial_seed(1, 5), per_trial_seed(1, 6));
        assert_ne!(per_trial_seed(1, 5), per_trial_seed(2, 5));
    }
}

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
//! transactions (as in Optuna); if storing a param fails, the trial is
//! marked FAIL so no half-asked trial stays RUNNING.

use super::Context;
use crate::error::{CliError, Result};
use crate::history;
use hpo_sampler::json::{
    distribution_to_json, search_space_from_json, value_from_json, value_to_json,
};
use hpo_sampler::{
    AutoConfig, AutoSampler, GpConfig, GpSampler, Param, RandomSampler, Sampler, StudyView,
    TpeConfig, TpeSampler,
};
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::io::Write;
use store::{Claim, TrialFilter, TrialState};

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study` is accepted too).
    #[arg(long = "study-name", alias = "study")]
    pub study_name: String,
    /// Parameters to sample: a JSON object of Optuna distributions by name,
    /// e.g. '{"x": {"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0}}}'.
    #[arg(long, default_value = "{}")]
    pub search_space: String,
    /// `tpe` (TPESampler, the default for one objective), `random`
    /// (RandomSampler), `gp` (GPSampler) or `auto` (GP below 200 finished
    /// trials while at most half the parameters are categorical, TPE beyond).
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
}

/// The sampler asked for, with its options checked.
struct SamplerChoice {
    kind: Kind,
    seed: Option<u64>,
    tpe: TpeConfig,
    gp: GpConfig,
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let space = search_space_from_json(&args.search_space)
        .map_err(|e| CliError::Usage(format!("bad --search-space: {e}")))?;
    let choice = sampler_choice(args)?;
    let storage = ctx.open_existing()?;
    let study = storage.study(&args.study_name)?;
    let kind = match (choice.kind, study.directions.len(), &args.sampler) {
        (k, 1, _) => k,
        (Kind::Random, _, _) => Kind::Random,
        (Kind::Tpe, n, None) => {
            eprintln!(
                "memtune: study `{}` has {n} objectives; the TPE here is single-objective, sampling at random",
                study.name
            );
            Kind::Random
        }
        (Kind::Gp | Kind::Auto, n, _) => {
            return Err(CliError::Usage(format!(
                "study `{}` has {n} objectives; the GP sampler here is single-objective: use --sampler random",
                study.name
            )));
        }
        (Kind::Tpe, n, Some(_)) => {
            return Err(CliError::Usage(format!(
                "study `{}` has {n} objectives; TPESampler here is single-objective: use --sampler random",
                study.name
            )));
        }
    };
    // The history is read (and checked) once, before the trial exists, so
    // a stored row the sampler cannot read leaves nothing behind. A trial
    // another worker creates in the few milliseconds between this read and
    // `create_trial` has no params yet, so the constant liar loses nothing.
    let stored = storage.trials(study.study_id, &TrialFilter::default())?;
    let trials = history::frozen_trials(&stored)?;
    // As Optuna's storage: a distribution the study's history contradicts
    // is refused, here before anything is written.
    hpo_sampler::check_against_history(&trials, &space)
        .map_err(|e| CliError::Usage(format!("study `{}`: {e}", study.name)))?;

    // As Optuna's `study.ask`: an enqueued (WAITING) trial is claimed first.
    let claim = storage.create_or_claim_trial(study.study_id)?;
    let trial = claim.trial();
    let number = trial.number as u64;
    let view = StudyView {
        name: &study.name,
        direction: history::direction(study.directions[0]),
        trials: &trials,
    };
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
    let stored_params = hpo_sampler::ask(sampler.as_mut(), view, number, &space)
        .map_err(|e| CliError::Failed(e.to_string()))
        .and_then(|sampled| match claim {
            Claim::Created(_) => Ok((sampled, BTreeMap::new())),
            Claim::Claimed(_) => enqueued_params(&storage, trial.trial_id, &space, sampled),
        })
        .and_then(|(params, already_stored)| {
            for (name, p) in params
                .iter()
                .filter(|(n, _)| !already_stored.contains_key(*n))
            {
                storage.set_param(
                    trial.trial_id,
                    name,
                    p.internal,
                    &python_spacing(&distribution_to_json(&p.distribution)),
                )?;
            }
            Ok(params)
        });
    let params = match stored_params {
        Ok(p) => p,
        Err(e) => {
            let cleanup = storage.finish(trial.trial_id, TrialState::Fail, &[]);
            return Err(CliError::Failed(match cleanup {
                Ok(()) => format!("trial {} was marked FAIL: {e}", trial.number),
                Err(c) => format!(
                    "{e}; trial {} could not be marked FAIL either: {c}",
                    trial.number
                ),
            }));
        }
    };

    // Optuna prints `trial.params`: in the search space's order (its
    // `study.ask` suggests them in that order), params already stored on a
    // claimed trial beyond the space after them.
    let order = key_order(&args.search_space)
        .map_err(|e| CliError::Usage(format!("bad --search-space: {e}")))?;
    let names = order
        .iter()
        .filter(|n| params.contains_key(*n))
        .chain(params.keys().filter(|n| !order.contains(n)));
    let values: Vec<(String, String)> = names
        .map(|name| {
            (
                name.clone(),
                python_json(&value_to_json(&params[name].value())),
            )
        })
        .collect();
    let mut record = vec![("number".to_string(), trial.number.to_string())];
    if args.flatten {
        record.extend(values.into_iter().map(|(k, v)| (format!("params_{k}"), v)));
    } else {
        record.push(("params".into(), python_object(values)));
    }
    writeln!(out, "{}", python_object(record))?;
    Ok(())
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

/// `{"k": v, ...}` as `json.dumps` writes a dict: entries in the given
/// order, values already spelled.
fn python_object(entries: impl IntoIterator<Item = (String, String)>) -> String {
    let parts: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{}: {v}", python_string(&k)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// A string as `json.dumps` writes it (`ensure_ascii`): every non-ASCII
/// character as `\uXXXX`, beyond the BMP as a surrogate pair.
fn python_string(s: &str) -> String {
    let escaped = Json::String(s.to_string()).to_string();
    let mut out = String::with_capacity(escaped.len());
    for c in escaped.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Optuna's `study.enqueue_trial` key: fixed external values by name.
const FIXED_PARAMS_KEY: &str = "fixed_params";

/// The params of a claimed WAITING trial: those it already stores win, then
/// its `fixed_params` system attribute (what Optuna's `enqueue_trial`
/// writes), then the sampled ones. Returns the params and the subset that
/// is already stored (not to be written again). A fixed value outside its
/// distribution is refused (Optuna only warns), since a stored value
/// outside its distribution would poison every later ask's history.
fn enqueued_params(
    storage: &store::Storage,
    trial_id: i64,
    space: &hpo_sampler::SearchSpace,
    mut params: BTreeMap<String, Param>,
) -> Result<(BTreeMap<String, Param>, BTreeMap<String, Param>)> {
    let stored = storage.trial(trial_id)?;
    let converted = history::frozen_trial(&stored)?;
    let fixed = stored.system_attrs.get(FIXED_PARAMS_KEY);
    let mut already = BTreeMap::new();
    for (name, distribution) in space {
        if let Some(p) = converted.params.get(name) {
            if !p.distribution.compatible_with(distribution) {
                return Err(CliError::Usage(format!(
                    "enqueued trial {}: parameter `{name}` is stored with {} but the search space has {distribution}",
                    stored.number, p.distribution
                )));
            }
            already.insert(name.clone(), p.clone());
            params.insert(name.clone(), p.clone());
        } else if let Some(value) = fixed.and_then(|f| f.get(name)) {
            let bad = |why: String| {
                CliError::Usage(format!(
                    "enqueued trial {}: fixed parameter `{name}` = {value}: {why}",
                    stored.number
                ))
            };
            let external = value_from_json(value, name).map_err(|e| bad(e.to_string()))?;
            let internal = distribution.to_internal(&external).map_err(bad)?;
            if !distribution.contains(internal) {
                return Err(bad(format!("outside {distribution}")));
            }
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
            _ => {
                return Err(CliError::Usage(format!(
                    "unknown --sampler `{s}`: use tpe (TPESampler), random (RandomSampler), \
                     gp (GPSampler) or auto"
                )));
            }
        },
    };
    let mut choice = SamplerChoice {
        kind,
        seed: args.seed,
        tpe: TpeConfig::default(),
        gp: GpConfig::default(),
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
                tpe.n_ei_candidates = uint()? as usize;
                if tpe.n_ei_candidates == 0 {
                    return Err(bad(key, "at least 1"));
                }
            }
            ("ei_finalists", Kind::Tpe) => {
                // null or 0: every candidate competes (Optuna).
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

/// JSON as Python's `json.dumps` spells it (`", "` and `": "` separators),
/// so output is byte-comparable with `optuna ask`'s for the same values.
fn python_json(v: &Json) -> String {
    match v {
        Json::Array(items) => {
            let parts: Vec<String> = items.iter().map(python_json).collect();
            format!("[{}]", parts.join(", "))
        }
        Json::Object(map) => python_object(map.iter().map(|(k, v)| (k.clone(), python_json(v)))),
        Json::String(text) => python_string(text),
        // serde_json spells 5e-5 as `5e-5`; Python's repr as `5e-05`.
        Json::Number(n) => python_number(&n.to_string()),
        scalar => scalar.to_string(),
    }
}

/// Compact JSON re-spelled as Python's `json.dumps` writes it, keeping the
/// key order: `", "` and `": "` separators and floats in Python's `repr`
/// (`1e-05`, `0.0001`, `1.0`). `distribution_to_json` keeps Optuna's key
/// order but not its spelling, and the stored `distribution_json` should be
/// the bytes Optuna itself would store.
pub(crate) fn python_spacing(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() + 16);
    let mut number = String::new();
    let (mut in_string, mut escaped) = (false, false);
    for c in compact.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E') {
            number.push(c);
            continue;
        }
        out.push_str(&python_number(&std::mem::take(&mut number)));
        out.push(c);
        match c {
            '"' => in_string = true,
            ',' | ':' => out.push(' '),
            _ => {}
        }
    }
    out.push_str(&python_number(&number));
    out
}

/// A JSON number token as Python prints it: integers unchanged, floats as
/// `repr(float)`.
fn python_number(token: &str) -> String {
    let is_float = token.contains(['.', 'e', 'E']);
    match token.parse::<f64>() {
        Ok(x) if is_float && x.is_finite() => python_repr(x),
        _ => token.to_string(),
    }
}

/// `repr(x)` of a finite float: the fewest significant digits that read
/// back as `x`, and of those the nearest to `x` with ties to even (Rust's
/// shortest form breaks such ties the other way, e.g. `...458.813` for
/// Python's `...458.812`); fixed notation from 1e-4 up to 1e16, else an
/// exponent with a sign and at least two digits.
fn python_repr(x: f64) -> String {
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    let shortest = format!("{:e}", x.abs());
    let n = shortest
        .split('e')
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .count();
    // Fixed precision is correctly rounded, ties to even.
    let rounded = format!("{:.*e}", n.saturating_sub(1), x.abs());
    let (mantissa, exp) = rounded.split_once('e').unwrap_or((&rounded, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    match exp {
        0..16 => {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                format!("{sign}{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
            }
        }
        -4..0 => format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize)),
        _ => {
            let (head, tail) = digits.split_at(1);
            let dot = if tail.is_empty() { "" } else { "." };
            let exp_sign = if exp < 0 { '-' } else { '+' };
            format!("{sign}{head}{dot}{tail}e{exp_sign}{:02}", exp.abs())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(kwargs: &str) -> Result<SamplerChoice> {
        sampler_choice(&Args {
            study_name: "s".into(),
            search_space: "{}".into(),
            sampler: Some("tpe".into()),
            sampler_kwargs: Some(kwargs.into()),
            seed: None,
            format: "json".into(),
            flatten: false,
        })
    }

    #[test]
    fn ei_finalists_kwarg_sets_or_clears_the_finalists() {
        // The default is Optuna's: every candidate competes.
        assert_eq!(choice("{}").unwrap().tpe.ei_finalists, None);
        assert_eq!(choice("{}").unwrap().tpe.n_ei_candidates, 24);
        let set = |kwargs| choice(kwargs).unwrap().tpe.ei_finalists;
        assert_eq!(set(r#"{"ei_finalists": 8}"#), Some(8));
        assert_eq!(set(r#"{"ei_finalists": null}"#), None);
        assert_eq!(set(r#"{"ei_finalists": 0}"#), None);
        let err = choice(r#"{"ei_finalists": -1}"#).err().unwrap().to_string();
        assert!(err.contains("ei_finalists"), "{err}");
    }

    #[test]
    fn per_trial_seeds_differ_and_repeat() {
        assert_eq!(per_trial_seed(1, 5), per_trial_seed(1, 5));
        assert_ne!(per_trial_seed(1, 5), per_trial_seed(1, 6));
        assert_ne!(per_trial_seed(1, 5), per_trial_seed(2, 5));
    }

    #[test]
    fn respaces_like_python_outside_strings_only() {
        assert_eq!(
            python_spacing(r#"{"name":"C","attributes":{"choices":["a,b:\"c",1]}}"#),
            r#"{"name": "C", "attributes": {"choices": ["a,b:\"c", 1]}}"#
        );
    }

    #[test]
    fn floats_like_python_repr() {
        for (token, python) in [
            ("0.00001", "1e-05"),
            ("1e-5", "1e-05"),
            ("0.0001", "0.0001"),
            ("1.0", "1.0"),
            ("-0.0", "-0.0"),
            ("12.5", "12.5"),
            ("1e16", "1e+16"),
            ("1.5e300", "1.5e+300"),
            ("123456789012345.0", "123456789012345.0"),
            ("8", "8"),
            ("-3", "-3"),
            ("-26474598524458.8125", "-26474598524458.812"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("9999999999999998.0", "9999999999999998.0"),
            ("0.1", "0.1"),
        ] {
            assert_eq!(python_number(token), python, "{token}");
        }
        assert_eq!(
            python_spacing(r#"{"step":null,"low":0.00001,"high":0.1,"log":true}"#),
            r#"{"step": null, "low": 1e-05, "high": 0.1, "log": true}"#
        );
    }

    #[test]
    fn prints_like_python_json_dumps() {
        let v: Json =
            serde_json::from_str(r#"{"number": 3, "params": {"a": [1, "x"], "b": 0.5}}"#).unwrap();
        assert_eq!(
            python_json(&v),
            r#"{"number": 3, "params": {"a": [1, "x"], "b": 0.5}}"#
        );
        let v = serde_json::json!({"lr": 5e-5, "big": 1e16, "one": 1.0, "n": 7});
        assert_eq!(
            python_json(&v),
            r#"{"big": 1e+16, "lr": 5e-05, "n": 7, "one": 1.0}"#
        );
    }
}

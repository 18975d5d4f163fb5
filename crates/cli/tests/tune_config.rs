//! The study file: every kind of mistake is an error naming the file, the
//! key path and the line; the shipped studies parse; sampling respects
//! conditions; settings resolve params, `[fixed]` and defaults.

use std::collections::BTreeMap;
use std::path::Path;
use trainer::backend::{Kernels, MatmulPrecision};

use cli::tune::config::{
    ConfigError, Constraint, DeviceKind, Hyperparameter, Metric, ModelSource, PrunerSpec,
    Recompute, SafetyMargin, SamplerKind, SimPreset, StudyConfig, TrialMetric, TrialSettings,
};
use hpo_sampler::{
    FrozenTrial, ParamValue, RandomSampler, Sampler, StudyDirection, StudyView, TpeSampler,
    TrialState,
};

/// A small valid study; the error tests change one thing in it.
const BASE: &str = r#"[study]
name = "t"
n_trials = 5

[models.small]
builtin = "minilm-l6"

[models.large]
dir = "models/large"

[[param]]
name = "model"
type = "categorical"
choices = ["small", "large"]

[[param]]
name = "lr_small"
sets = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4
log = true
when = { param = "model", in = ["small"] }

[[param]]
name = "lr_large"
sets = "learning_rate"
type = "float"
low = 5e-6
high = 3e-5
log = true
when = { param = "model", in = ["large"] }

[[param]]
name = "head_layers"
type = "int"
low = 0
high = 2

[[param]]
name = "head_width"
type = "categorical"
choices = [64, 128]
when = { param = "head_layers", in = [1, 2] }

[fixed]
epochs = 2
"#;

/// 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("`{needle}` not in the document"))
        + 1
}

fn replace(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "`{from}` not in BASE");
    BASE.replacen(from, to, 1)
}

/// Parses `text`, expects an error at `key` on the line containing
/// `line_needle`, whose message contains `says`.
#[track_caller]
fn expect_error(text: &str, key: &str, line_needle: &str, says: &str) {
    expect_error_on(text, key, line_of(text, line_needle), says);
}

#[track_caller]
fn expect_error_on(text: &str, key: &str, line: usize, says: &str) {
    let e = StudyConfig::parse(text, "study.toml").expect_err("the study should be refused");
    let shown = e.to_string();
    assert_eq!(e.key(), Some(key), "wrong key in: {shown}");
    assert_eq!(e.line(), Some(line), "wrong line in: {shown}");
    assert!(
        shown.starts_with(&format!("study.toml:{line}:")),
        "file and line missing: {shown}"
    );
    if !key.is_empty() {
        assert!(shown.contains(&format!("`{key}`")), "key missing: {shown}");
    }
    assert!(shown.contains(says), "expected `{says}` in: {shown}");
}

#[test]
fn ei_finalists_is_read_and_zero_means_all() {
    let with = |v: &str| {
        StudyConfig::parse(
            &format!("{BASE}\n[sampler]\nei_finalists = {v}\n"),
            "study.toml",
        )
        .unwrap()
        .sampler
        .tpe
        .ei_finalists
    };
    assert_eq!(with("4"), Some(4));
    assert_eq!(with("0"), None);
}

#[test]
fn candidates_or_finalists_in_the_file_hold_on_continuous_and_integer_spaces_too() {
    let space_rules = |sampler: &str| {
        let tpe = StudyConfig::parse(&format!("{BASE}\n[sampler]\n{sampler}\n"), "study.toml")
            .unwrap()
            .sampler
            .tpe;
        (tpe.continuous.is_some(), tpe.integer.is_some())
    };
    assert_eq!(
        space_rules("kind = \"tpe\""),
        (true, true),
        "the default keeps its rules"
    );
    assert_eq!(space_rules("n_ei_candidates = 48"), (false, false));
    assert_eq!(space_rules("ei_finalists = 4"), (false, false));
}

#[test]
fn base_study_parses() {
    let c = StudyConfig::parse(BASE, "study.toml").unwrap();
    assert_eq!(c.study.name, "t");
    assert_eq!(c.study.n_trials, 5);
    assert_eq!(c.study.storage, "sqlite:///memtune.db");
    assert_eq!(c.params.len(), 5);
    assert_eq!(c.params[1].sets, Hyperparameter::LearningRate);
    assert_eq!(c.params[1].line, line_of(BASE, "lr_small") - 1);
    assert_eq!(c.objective.metric, Metric::Accuracy);
    assert_eq!(c.objective.directions, [StudyDirection::Maximize]);
    assert_eq!(
        c.models["large"],
        ModelSource::Dir("models/large".into()),
        "parse() keeps relative paths as written"
    );
    assert_eq!(c.fixed[&Hyperparameter::Epochs], ParamValue::Int(2));
    assert_eq!(c.runner.device, DeviceKind::Auto);
    assert_eq!(c.runner.safety_margin, SafetyMargin::Fraction(0.05));
    assert_eq!(c.sampler.kind, SamplerKind::Tpe);
    assert_eq!(c.sampler.tpe.n_ei_candidates, 24, "Optuna's default");
    assert_eq!(c.sampler.tpe.ei_finalists, None, "all compete, as Optuna's");
    assert!(matches!(
        c.pruner,
        PrunerSpec::Median {
            n_startup_trials: 5,
            n_warmup_steps: 0,
            interval_steps: 1,
            n_min_trials: 1
        }
    ));
}

#[test]
fn unknown_keys_are_refused_at_every_depth() {
    expect_error(
        &format!("bogus = 1\n{BASE}"),
        "bogus",
        "bogus",
        "unknown field `bogus`",
    );
    expect_error(
        &replace("name = \"t\"", "nme = \"t\""),
        "study.nme",
        "nme",
        "unknown field `nme`",
    );
    expect_error(
        &replace("high = 1e-4", "hgh = 1e-4"),
        "param[1].hgh",
        "hgh",
        "unknown field `hgh`",
    );
    expect_error(
        &replace(
            "{ param = \"model\", in = [\"small\"] }",
            "{ param = \"model\", inn = [\"small\"] }",
        ),
        "param[1].when.inn",
        "inn =",
        "unknown field `inn`",
    );
    expect_error(
        &replace(
            "builtin = \"minilm-l6\"",
            "builtin = \"minilm-l6\"\nrevision = 2",
        ),
        "models.small.revision",
        "revision",
        "unknown field `revision`",
    );
    expect_error(
        &format!("{BASE}\n[runner]\ndevise = \"cpu\"\n"),
        "runner.devise",
        "devise",
        "unknown field",
    );
}

#[test]
fn the_report_is_written_unless_turned_off() {
    assert!(StudyConfig::parse(BASE, "study.toml").unwrap().study.report);
    let off = replace("n_trials = 5", "n_trials = 5\nreport = false");
    assert!(!StudyConfig::parse(&off, "study.toml").unwrap().study.report);
    expect_error(
        &replace("n_trials = 5", "n_trials = 5\nreport = \"no\""),
        "study.report",
        "report = ",
        "invalid type",
    );
}

#[test]
fn wrong_types_are_refused() {
    expect_error(
        &replace("n_trials = 5", "n_trials = \"five\""),
        "study.n_trials",
        "five",
        "invalid type",
    );
    expect_error(
        &replace(
            "log = true\nwhen = { param = \"model\", in = [\"small\"] }",
            "log = \"yes\"\nwhen = { param = \"model\", in = [\"small\"] }",
        ),
        "param[1].log",
        "\"yes\"",
        "invalid type",
    );
    expect_error(
        &replace("low = 0\n", "low = 0.5\n"),
        "param[3].low",
        "low = 0.5",
        "must be an integer",
    );
    expect_error(
        &replace("type = \"int\"", "type = \"integer\""),
        "param[3].type",
        "\"integer\"",
        "unknown variant",
    );
    expect_error(
        &format!("{BASE}\n[runner]\nmax_workers = -1\n"),
        "runner.max_workers",
        "max_workers",
        "invalid value",
    );
}

#[test]
fn impossible_ranges_are_refused() {
    expect_error(
        &replace("low = 1e-5\nhigh = 1e-4", "low = 1e-3\nhigh = 1e-4"),
        "param[1].low",
        "low = 1e-3",
        "above high",
    );
    expect_error(
        &replace("low = 1e-5", "low = 0.0"),
        "param[1].low",
        "low = 0.0",
        "log = true needs low > 0",
    );
    expect_error(
        &replace("low = 1e-5", "low = -1e-5"),
        "param[1].low",
        "low = -1e-5",
        "log = true needs low > 0",
    );
    expect_error(
        &replace("high = 2\n", "high = 2\nstep = 3\n"),
        "param[3].step",
        "step = 3",
        "does not divide",
    );
    expect_error(
        &replace("high = 2\n", "high = 5\n"),
        "param[3].high",
        "high = 5",
        "head_layers must be an integer in [0, 3]",
    );
    expect_error(
        &replace("epochs = 2", "epochs = 0"),
        "fixed.epochs",
        "epochs = 0",
        "epochs must be an integer in [1, 10000]",
    );
    // Below the three special tokens and one real token a trainer needs.
    expect_error(
        &replace("epochs = 2", "max_length = 3"),
        "fixed.max_length",
        "max_length = 3",
        "max_length must be an integer in [4, 65536]",
    );
    expect_error(
        &replace("epochs = 2", "dropout = 1.0"),
        "fixed.dropout",
        "dropout = 1.0",
        "[0, 1)",
    );
    expect_error(
        &replace("choices = [64, 128]", "choices = [64, 0]"),
        "param[4].choices[1]",
        "choices = [64, 0]",
        "choice 0 is not an integer",
    );
    expect_error(
        &replace("n_trials = 5", "n_trials = 0"),
        "study.n_trials",
        "n_trials = 0",
        "at least 1",
    );
    // Ranges whose width overflows an i64, or with more grid points than a
    // float holds exactly: errors, not an arithmetic panic.
    let wide = replace(
        "low = 0\nhigh = 2\n",
        "low = -9223372036854775808\nhigh = 9223372036854775807\n",
    );
    expect_error(
        &wide,
        "param[3].low",
        "low = -9223372036854775808",
        "head_layers must be an integer in [0, 3], got low = -9223372036854775808",
    );
    expect_error(
        &wide.replacen(
            "9223372036854775807\n",
            "9223372036854775807\nstep = 2\n",
            1,
        ),
        "param[3].step",
        "step = 2",
        "does not divide high - low = 18446744073709551615",
    );
    expect_error(
        &replace(
            "low = 1e-5\nhigh = 1e-4\nlog = true",
            "low = 0.0\nhigh = 0.2\nstep = 1e-320",
        ),
        "param[1].step",
        "step = 1e-320",
        "more than 2^53 steps",
    );
}

#[test]
fn unknown_hyperparameters_are_refused() {
    expect_error(
        &replace("name = \"head_layers\"", "name = \"head_depth\""),
        "param[3].name",
        "head_depth",
        "unknown hyperparameter `head_depth`",
    );
    expect_error(
        &replace("sets = \"learning_rate\"", "sets = \"lr\""),
        "param[1].sets",
        "sets = \"lr\"",
        "unknown hyperparameter `lr`",
    );
    expect_error(
        &replace("epochs = 2", "momentum = 0.9"),
        "fixed.momentum",
        "momentum",
        "unknown hyperparameter `momentum`",
    );
}

#[test]
fn params_that_may_both_be_active_are_refused() {
    // Overlapping conditions.
    let text = replace("in = [\"large\"]", "in = [\"large\", \"small\"]");
    expect_error_on(
        &text,
        "param[2].sets",
        line_of(&text, "name = \"lr_large\"") + 1,
        "may be active in the same trial",
    );
    // One unconditional.
    let text = replace(
        "log = true\nwhen = { param = \"model\", in = [\"large\"] }\n",
        "log = true\n",
    );
    expect_error_on(
        &text,
        "param[2].sets",
        line_of(&text, "name = \"lr_large\"") + 1,
        "both set learning_rate",
    );
    // A [fixed] value that an unconditional param always overrides.
    expect_error(
        &replace("epochs = 2", "head_layers = 1"),
        "fixed.head_layers",
        "head_layers = 1",
        "never be used",
    );
}

#[test]
fn conditions_must_name_an_earlier_param_and_its_values() {
    expect_error(
        &replace(
            "{ param = \"model\", in = [\"small\"] }",
            "{ param = \"modle\", in = [\"small\"] }",
        ),
        "param[1].when.param",
        "modle",
        "not a param defined before this one",
    );
    expect_error(
        &replace(
            "{ param = \"model\", in = [\"small\"] }",
            "{ param = \"head_layers\", in = [1] }",
        ),
        "param[1].when.param",
        "in = [1] }",
        "not a param defined before this one",
    );
    expect_error(
        &replace("in = [1, 2]", "in = [1, 7]"),
        "param[4].when.in[1]",
        "in = [1, 7]",
        "7 is not a value param `head_layers` can take",
    );
    expect_error(
        &replace("in = [\"small\"]", "in = [\"tiny\"]"),
        "param[1].when.in[0]",
        "tiny",
        "not a value param `model` can take",
    );
}

#[test]
fn model_choices_must_be_model_keys() {
    expect_error(
        &replace(
            "choices = [\"small\", \"large\"]",
            "choices = [\"small\", \"bert-huge\"]",
        ),
        "param[0].choices[1]",
        "bert-huge",
        "one of the [models] keys (large, small)",
    );
    // Several models and nothing choosing one.
    let text = BASE.replace("name = \"model\"", "name = \"arch\"");
    assert!(StudyConfig::parse(&text, "study.toml").is_err());
    expect_error(
        &replace(
            "[models.small]\nbuiltin = \"minilm-l6\"",
            "[models.small]\nbuiltin = \"minilm-l6\"\nsim = \"bert-base\"",
        ),
        "models.small",
        "[models.small]",
        "only one of dir, builtin, preset or sim",
    );
    expect_error(
        &replace("builtin = \"minilm-l6\"", "preset = \"bert-huge\""),
        "models.small.preset",
        "preset = \"bert-huge\"",
        "unknown preset `bert-huge`",
    );
    expect_error(
        &replace("builtin = \"minilm-l6\"", "builtin = \"bert-base\""),
        "models.small.builtin",
        "builtin = \"bert-base\"",
        "unknown variant `bert-base`",
    );
    expect_error(
        &replace("builtin = \"minilm-l6\"", "sim = \"bert-base\""),
        "models.small.sim",
        "sim = \"bert-base\"",
        "device = \"sim\"",
    );
    expect_error(
        &replace("builtin = \"minilm-l6\"", "sim = \"gpt-2\""),
        "models.small.sim",
        "sim = \"gpt-2\"",
        "unknown preset `gpt-2`, expected one of minilm-l6, bert-base",
    );
}

#[test]
fn every_trainer_preset_is_a_simulated_model() {
    for name in trainer::model::ModelConfig::PRESETS {
        assert_eq!(SimPreset::new(name).map(SimPreset::name), Some(name));
    }
    for name in ["xlm-roberta-base", "deberta-v3-base", "deberta-v3-large"] {
        assert_eq!(SimPreset::new(name).unwrap().name(), name);
    }
    assert!(SimPreset::new("gpt-2").is_none());
}

#[test]
fn other_sections_are_checked() {
    expect_error(
        &replace("n_trials = 5", "n_trials = 5\ntimeout = \"15\""),
        "study.timeout",
        "timeout",
        "not a duration",
    );
    expect_error(
        &replace("n_trials = 5", "n_trials = 5\ntrial_timeout = \"0s\""),
        "study.trial_timeout",
        "trial_timeout",
        "must be longer than 0",
    );
    expect_error(
        &replace("n_trials = 5", "n_trials = 5\ntrial_timeout = \"10ms\""),
        "study.trial_timeout",
        "trial_timeout",
        "must be at least 1s",
    );

    expect_error(
        &replace("name = \"t\"", "name = \"t\"\nstorage = \"postgres://x\""),
        "study.storage",
        "postgres",
        "sqlite:///",
    );
    expect_error(
        &format!("{BASE}\n[objective]\nmetric = \"loss\"\ndirection = \"maximize\"\n"),
        "objective.direction",
        "direction",
        "loss should be minimized",
    );
    expect_error(
        &format!("{BASE}\n[data]\ntext = \"sentence\"\n"),
        "data.text",
        "sentence",
        "only used with source = \"files\"",
    );
    expect_error(
        &format!("{BASE}\n[data]\nfiles = [\"a.csv\"]\n"),
        "data",
        "[data]",
        "num_classes",
    );
    expect_error(
        &format!("{BASE}\n[sampler]\nkind = \"random\"\nn_startup_trials = 3\n"),
        "sampler.n_startup_trials",
        "n_startup_trials = 3",
        "only used with kind = \"tpe\"",
    );
    expect_error(
        &format!("{BASE}\n[pruner]\nkind = \"median\"\npercentile = 30.0\n"),
        "pruner.percentile",
        "percentile = 30.0",
        "not an option of kind = \"median\"",
    );
    expect_error(
        &format!("{BASE}\n[pruner]\nkind = \"hyperband\"\nreduction_factor = 1\n"),
        "pruner.reduction_factor",
        "reduction_factor = 1",
        "must be >= 2",
    );
    expect_error(
        &format!(
            "{BASE}\n[pruner]\nkind = \"patient\"\npatience = 2\nwrapped = {{ kind = \"median\", n_min_trials = 0 }}\n"
        ),
        "pruner.wrapped.n_min_trials",
        "wrapped",
        "must be at least 1",
    );
    expect_error(
        &format!("{BASE}\n[runner]\nmemory_limit = 0\n"),
        "runner.memory_limit",
        "memory_limit",
        "must be larger than 0",
    );
    expect_error(
        &format!("{BASE}\n[runner]\nmemory_limit = \"24 gigs\"\n"),
        "runner.memory_limit",
        "24 gigs",
        "not a size",
    );
    expect_error(
        &format!("{BASE}\n[runner]\ndevice = \"sim\"\nsim_memory = \"24 gigs\"\n"),
        "runner.sim_memory",
        "24 gigs",
        "not a size",
    );
    // Values so large that the runner's arithmetic on them would overflow.
    expect_error(
        &format!("{BASE}\n[runner]\nheartbeat = \"200000000000000d\"\n"),
        "runner.heartbeat",
        "heartbeat",
        "longer than 100 years",
    );
    expect_error(
        &format!("{BASE}\n[runner]\ndevice = \"sim\"\nsim_memory = \"8388607TiB\"\n"),
        "runner.sim_memory",
        "8388607TiB",
        "larger than 1 PiB",
    );
    expect_error(
        &format!("{BASE}\n[runner]\nmemory_limit = 9007199254740993\n"),
        "runner.memory_limit",
        "memory_limit",
        "larger than 1 PiB",
    );
    expect_error(
        &format!("{BASE}\n[runner]\nthreads_per_worker = 100000\n"),
        "runner.threads_per_worker",
        "threads_per_worker",
        "at most 4096",
    );
    // A heartbeat is a write to the storage: back to back, it is a load.
    expect_error(
        &format!("{BASE}\n[runner]\nheartbeat = \"0.0001ms\"\n"),
        "runner.heartbeat",
        "heartbeat",
        "at least 100ms",
    );
    expect_error(
        &format!("{BASE}\n[runner]\nheartbeat = \"10s\"\nstale_after = \"15s\"\n"),
        "runner.stale_after",
        "stale_after",
        "twice the heartbeat",
    );
    // A patient pruner wrapping another, written as a table of its own:
    // the key's path and the wrapped kind's own line.
    let nested = format!(
        "{BASE}\n[pruner]\nkind = \"patient\"\npatience = 1\n\n[pruner.wrapped]\nkind = \"patient\"\npatience = 2\n"
    );
    let wrapped_line = line_of(&nested, "[pruner.wrapped]") + 1;
    expect_error_on(
        &nested,
        "pruner.wrapped.kind",
        wrapped_line,
        "cannot wrap another patient pruner",
    );
    // A NaN bound is named as itself, not as the comparison it spoils.
    expect_error(
        &format!("{BASE}\n[pruner]\nkind = \"threshold\"\nupper = nan\n"),
        "pruner.upper",
        "upper = nan",
        "not NaN",
    );
    // Optuna's schema stores names of at most 512 characters.
    let long = "n".repeat(513);
    expect_error(
        &replace("name = \"t\"", &format!("name = \"{long}\"")),
        "study.name",
        "name = \"nnn",
        "at most 512",
    );
    // The simulated device trains presets only; the first other model is
    // named at its key.
    expect_error(
        &format!("{BASE}\n[runner]\ndevice = \"sim\"\n"),
        "models.large.dir",
        "dir = ",
        "every model must be a preset",
    );
    // A missing required key is reported at its table.
    expect_error(
        &replace("n_trials = 5\n", ""),
        "study",
        "[study]",
        "missing field `n_trials`",
    );
    // Bad TOML syntax: the line of the mistake.
    let e =
        StudyConfig::parse(&replace("n_trials = 5", "n_trials = = 5"), "study.toml").unwrap_err();
    assert_eq!(e.line(), Some(3), "{e}");
    assert!(e.to_string().starts_with("study.toml:3:"), "{e}");
    assert_eq!(e.key(), Some(""), "{e}");
    // A key or table defined twice: the second one's path and line.
    let twice = replace("n_trials = 5", "n_trials = 5\nname = \"u\"");
    expect_error(&twice, "study.name", "name = \"u\"", "duplicate key");
    let twice = format!("{BASE}\n[models.small]\nsim = \"bert-base\"\n");
    expect_error_on(
        &twice,
        "models.small",
        twice.lines().count() - 1,
        "duplicate key",
    );
    let twice =
        format!("{BASE}\n[runner]\ndevice = \"cpu\"\n\n[runner]  # again\nmax_workers = 1\n");
    expect_error_on(&twice, "runner", twice.lines().count() - 1, "duplicate key");
    // A dotted key, under a header with a comment.
    let twice = format!("{BASE}\n[models]  # more\nsmall.sim = \"bert-base\"\n");
    expect_error_on(
        &twice,
        "models.small.sim",
        twice.lines().count(),
        "duplicate key",
    );
}

/// One field read as two things, a file or a choice listed twice: each
/// would change what a trial learns or how often it is drawn, silently.
#[test]
fn fields_files_and_choices_named_twice_are_refused() {
    let files = "[data]\nsource = \"files\"\nfiles = [\"a.csv\"]\nnum_classes = 2\n";
    for (extra, key, needle, says) in [
        (
            "text_pair = \"label\"\n",
            "data.text_pair",
            "text_pair",
            "also the label field",
        ),
        (
            "text_pair = \"text\"\n",
            "data.text_pair",
            "text_pair",
            "also the text field",
        ),
        (
            "text = \"s\"\nlabel = \"s\"\n",
            "data.label",
            "label = ",
            "also the text field",
        ),
    ] {
        expect_error(&format!("{BASE}\n{files}{extra}"), key, needle, says);
    }
    expect_error(
        &format!(
            "{BASE}\n{}",
            files.replace("[\"a.csv\"]", "[\"a.csv\", \"./a.csv\"]")
        ),
        "data.files[1]",
        "files = ",
        "`./a.csv` is listed twice",
    );
    expect_error(
        &replace("choices = [64, 128]", "choices = [64, 128, 64]"),
        "param[4].choices[2]",
        "choices = [64, 128, 64]",
        "choice 64 is listed twice (also choices[0])",
    );
}

#[test]
fn from_path_names_the_file_and_resolves_paths_against_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, replace("n_trials = 5", "n_trials = 0")).unwrap();
    let e = StudyConfig::from_path(&path).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!("{}:3:", path.display())),
        "{e}"
    );
    std::fs::write(&path, BASE).unwrap();
    let c = StudyConfig::from_path(&path).unwrap();
    assert_eq!(
        c.models["large"],
        ModelSource::Dir(dir.path().join("models/large"))
    );
    let missing = StudyConfig::from_path(&dir.path().join("none.toml")).unwrap_err();
    assert!(matches!(missing, ConfigError::Read { .. }), "{missing}");
}

#[test]
fn paths_that_are_not_utf8_are_refused_at_their_key() {
    use std::os::unix::ffi::OsStrExt;
    // Trials carry their paths to their workers as JSON text.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(std::ffi::OsStr::from_bytes(b"st\xffudy"));
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("s.toml");
    std::fs::write(&path, BASE).unwrap();
    let e = StudyConfig::from_path(&path).unwrap_err();
    let shown = e.to_string();
    assert_eq!(e.key(), Some("models.large.dir"), "{shown}");
    assert!(shown.contains("not valid UTF-8"), "{shown}");
    // An absolute model directory is fine; the data's relative path is not.
    let model = root.path().join("models/large");
    let absolute = replace(
        "dir = \"models/large\"",
        &format!("dir = {:?}", model.to_str().unwrap()),
    );
    std::fs::write(
        &path,
        format!("{absolute}\n[data]\nfiles = [\"a.csv\"]\nnum_classes = 2\n"),
    )
    .unwrap();
    let e = StudyConfig::from_path(&path).unwrap_err();
    assert_eq!(e.key(), Some("data.files"), "{e}");
    // Random-weight presets are written beside the log.
    std::fs::write(
        &path,
        format!("{absolute}\n[runner]\nlog_file = \"s.log\"\n"),
    )
    .unwrap();
    let e = StudyConfig::from_path(&path).unwrap_err();
    assert_eq!(e.key(), Some("runner.log_file"), "{e}");
    std::fs::write(&path, &absolute).unwrap();
    StudyConfig::from_path(&path).unwrap();
}

#[test]
fn shipped_studies_parse() {
    let d = StudyConfig::default_study();
    assert_eq!(d.models.len(), 1);
    // Sized to finish within 15 minutes on a 2-core CPU (README).
    assert!(d.study.n_trials >= 4 && d.study.n_trials <= 12);
    assert_eq!(d.fixed[&Hyperparameter::MaxLength], ParamValue::Int(64));
    // One-epoch trials: nothing for a pruner to cut.
    assert!(matches!(d.pruner, PrunerSpec::None));

    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let full = StudyConfig::from_path(&examples.join("study.toml")).unwrap();
    assert_eq!(
        full.runner.log_file.as_deref(),
        Some(examples.join("memtune-tune.log").as_path())
    );
    let seeds = StudyConfig::from_path(&examples.join("study-seeds.toml")).unwrap();
    assert_eq!(seeds.runner.device, DeviceKind::Sim);
    assert_eq!(seeds.runner.sim_memory, Some(24 << 30));
    assert_eq!(seeds.runner.safety_margin, SafetyMargin::Bytes(1 << 30));
    assert_eq!(
        seeds.models["bert-large"],
        ModelSource::Sim(SimPreset::new("bert-large").unwrap())
    );
    assert!(seeds.sampler.tpe.group && seeds.sampler.tpe.multivariate);

    // The GPU bundle's study (its run.sh puts the model's path in).
    let bundle =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/src/gpu_bundle/study.toml");
    let text = std::fs::read_to_string(&bundle).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gpu_study = dir.path().join("study.toml");
    std::fs::write(&gpu_study, text.replace("MODEL_DIR", "/models/minilm")).unwrap();
    let gpu = StudyConfig::from_path(&gpu_study).unwrap();
    assert_eq!(gpu.runner.device, DeviceKind::CudaAll);
    assert_eq!(gpu.study.n_trials, 20);
}

/// Runs `n` trials of `config` through `sampler` with a made-up objective,
/// checking that each trial's params are exactly the active ones.
fn run_trials(config: &StudyConfig, sampler: &mut dyn Sampler, n: u64) -> Vec<FrozenTrial> {
    let mut history: Vec<FrozenTrial> = Vec::new();
    for number in 0..n {
        let study = StudyView {
            name: "t",
            direction: StudyDirection::Maximize,
            directions: &[],
            trials: &history,
        };
        let mut trial = hpo_sampler::Trial::new(sampler, study, number);
        config.sample(&mut trial).unwrap();
        let params = trial.into_params();
        let values: BTreeMap<String, ParamValue> =
            params.iter().map(|(k, p)| (k.clone(), p.value())).collect();
        for spec in &config.params {
            let active = spec.is_active(|name| values.get(name).cloned());
            assert_eq!(
                active,
                values.contains_key(&spec.name),
                "trial {number}: `{}` present iff active ({values:?})",
                spec.name
            );
        }
        let settings = config.settings(&values).unwrap();
        assert_eq!(config.settings_of_params(&params).unwrap(), settings);
        let mut frozen = FrozenTrial::new(number);
        frozen.state = TrialState::Complete;
        frozen.values = Some(vec![
            settings.learning_rate.ln() + settings.head_hidden.len() as f64,
        ]);
        frozen.params = params;
        history.push(frozen);
    }
    history
}

#[test]
fn sampling_respects_conditions() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let seeds = StudyConfig::from_path(&examples.join("study-seeds.toml")).unwrap();
    let mut random = RandomSampler::new(Some(3));
    let mut tpe = TpeSampler::with_seed(3);
    for (sampler, n) in [(&mut random as &mut dyn Sampler, 60), (&mut tpe, 40)] {
        let trials = run_trials(&seeds, sampler, n);
        let mut saw = (false, false, false, false);
        for t in &trials {
            let model = match t.params["model"].value() {
                ParamValue::Str(s) => s,
                other => panic!("model {other}"),
            };
            let large = model.ends_with("large");
            assert_eq!(t.params.contains_key("lr_large"), large);
            assert_eq!(t.params.contains_key("lr_base"), !large);
            // DeBERTa's head is its own pooler and classifier.
            let deberta = model.starts_with("deberta");
            assert_eq!(t.params.contains_key("head_layers"), !deberta);
            let layers = match t.params.get("head_layers").map(|p| p.value()) {
                Some(ParamValue::Int(i)) => i,
                None => 0,
                Some(other) => panic!("head_layers {other}"),
            };
            assert_eq!(t.params.contains_key("head_width_1"), layers >= 1);
            assert_eq!(t.params.contains_key("head_width_2"), layers >= 2);
            assert_eq!(t.params.contains_key("head_width_3"), layers >= 3);
            saw.0 |= large;
            saw.1 |= !large;
            saw.2 |= layers == 3;
            saw.3 |= deberta;
        }
        assert_eq!(saw, (true, true, true, true), "every branch exercised");
    }

    // A seeded sampler from the config is deterministic; a resume mixes
    // in the trial count.
    let first = |mut s: Box<dyn Sampler + Send>| run_trials(&seeds, s.as_mut(), 3);
    assert_eq!(first(seeds.make_sampler()), first(seeds.make_sampler()));
    assert_ne!(first(seeds.make_sampler()), first(seeds.make_sampler_at(7)));
}

#[test]
fn settings_resolve_params_fixed_and_defaults() {
    let c = StudyConfig::parse(BASE, "study.toml").unwrap();
    let values: BTreeMap<String, ParamValue> = [
        ("model", ParamValue::Str("large".into())),
        ("lr_large", ParamValue::Float(2e-5)),
        ("head_layers", ParamValue::Int(2)),
        ("head_width", ParamValue::Int(64)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let s = c.settings(&values).unwrap();
    assert_eq!(
        s,
        TrialSettings {
            model: "large".into(),
            learning_rate: 2e-5,
            batch_size: 32,
            max_length: 128,
            warmup_ratio: 0.1,
            weight_decay: 0.01,
            dropout: None,
            head_hidden: vec![64, 64],
            epochs: 2,
            patience: None,
            seed: 0,
        }
    );
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(serde_json::from_str::<TrialSettings>(&json).unwrap(), s);

    // Stored ints may come back as floats.
    let mut as_floats = values.clone();
    as_floats.insert("head_layers".into(), ParamValue::Float(2.0));
    assert_eq!(c.settings(&as_floats).unwrap(), s);

    let refused = |change: &dyn Fn(&mut BTreeMap<String, ParamValue>), param: &str, says: &str| {
        let mut v = values.clone();
        change(&mut v);
        let e = c.settings(&v).unwrap_err();
        let shown = e.to_string();
        assert!(shown.starts_with("study.toml"), "{shown}");
        assert!(shown.contains(&format!("param `{param}`")), "{shown}");
        assert!(shown.contains(says), "{shown}");
    };
    refused(
        &|v| {
            v.remove("lr_large");
        },
        "lr_large",
        "no value",
    );
    refused(
        &|v| {
            v.insert("lr_small".into(), ParamValue::Float(1e-5));
        },
        "lr_small",
        "condition does not hold",
    );
    refused(
        &|v| {
            v.insert("momentum".into(), ParamValue::Float(0.9));
        },
        "momentum",
        "not a param",
    );
    refused(
        &|v| {
            v.insert("model".into(), ParamValue::Str("huge".into()));
            v.remove("lr_large");
        },
        "model",
        "one of the [models] keys",
    );
    refused(
        &|v| {
            v.insert("head_width".into(), ParamValue::Int(0));
        },
        "head_width",
        "integer in [1, 65536]",
    );
}

#[test]
fn every_pruner_kind_builds() {
    for pruner in [
        "kind = \"none\"",
        "kind = \"median\"\nn_warmup_steps = 1",
        "kind = \"percentile\"\npercentile = 25.0",
        "kind = \"successive_halving\"\nmin_resource = \"auto\"",
        "kind = \"successive_halving\"\nmin_resource = 1\nbootstrap_count = 2",
        "kind = \"hyperband\"\nmax_resource = 9",
        "kind = \"patient\"\npatience = 1\nwrapped = { kind = \"median\" }",
        "kind = \"threshold\"\nlower = 0.5",
    ] {
        let text = format!("{BASE}\n[pruner]\n{pruner}\n");
        let c = StudyConfig::parse(&text, "study.toml").unwrap_or_else(|e| panic!("{pruner}: {e}"));
        let _ = c.make_pruner();
    }
    let c = StudyConfig::parse(
        &format!("{BASE}\n[sampler]\nkind = \"random\"\nseed = 1\n"),
        "s",
    )
    .unwrap();
    assert_eq!(c.sampler.kind, SamplerKind::Random);
    assert_eq!(c.sampler.seed, Some(1));

    // The GP and auto kinds, with their one own key.
    let c = StudyConfig::parse(
        &format!(
            "{BASE}\n[sampler]\nkind = \"gp\"\nn_startup_trials = 4\ndeterministic_objective = true\n"
        ),
        "s",
    )
    .unwrap();
    assert_eq!(c.sampler.kind, SamplerKind::Gp);
    assert_eq!(c.sampler.gp.n_startup_trials, 4);
    assert!(c.sampler.gp.deterministic_objective);
    let _ = c.make_sampler();
    let c = StudyConfig::parse(&format!("{BASE}\n[sampler]\nkind = \"auto\"\n"), "s").unwrap();
    assert_eq!(c.sampler.kind, SamplerKind::Auto);
    let _ = c.make_sampler();
    expect_error(
        &format!("{BASE}\n[runner]\nlog_file = \"\"\n"),
        "runner.log_file",
        "log_file = \"\"",
        "must name a file",
    );
    expect_error(
        &format!("{BASE}\n[sampler]\nn_ei_candidates = 100000000000\n"),
        "sampler.n_ei_candidates",
        "n_ei_candidates = 100000000000",
        "between 1 and 1000000",
    );
    expect_error(
        &format!("{BASE}\n[sampler]\nkind = \"gp\"\nn_ei_candidates = 3\n"),
        "sampler.n_ei_candidates",
        "n_ei_candidates = 3",
        "only used with kind = \"tpe\" or \"auto\"",
    );
    expect_error(
        &format!("{BASE}\n[sampler]\ndeterministic_objective = true\n"),
        "sampler.deterministic_objective",
        "deterministic_objective = true",
        "only used with kind = \"gp\" or \"auto\"",
    );
}

#[test]
fn max_length_must_fit_known_models() {
    expect_error(
        &replace("epochs = 2", "max_length = 1024"),
        "fixed.max_length",
        "max_length = 1024",
        "512 token positions of model `small`",
    );
    let text = replace(
        "[fixed]",
        "[[param]]\nname = \"max_length\"\ntype = \"categorical\"\nchoices = [256, 768]\n\n[fixed]",
    );
    expect_error(
        &text,
        "param[5].choices[1]",
        "choices = [256, 768]",
        "more than the 512",
    );
}

#[test]
fn train_config_carries_the_settings() {
    let c = StudyConfig::default_study();
    let values: BTreeMap<String, ParamValue> = [
        ("learning_rate", ParamValue::Float(3e-5)),
        ("batch_size", ParamValue::Int(32)),
        ("warmup_ratio", ParamValue::Float(0.05)),
        ("weight_decay", ParamValue::Float(0.02)),
        ("dropout", ParamValue::Float(0.1)),
        ("head_layers", ParamValue::Int(0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let s = c.settings(&values).unwrap();
    assert_eq!(s.model, "minilm-l6");
    assert_eq!((s.max_length, s.epochs, s.patience), (64, 1, None));
    assert_eq!(s.head_hidden, Vec::<usize>::new());
    assert_eq!(s.seed, 42);
    let t = s.train_config(c.objective.metric.monitor(), 4);
    assert_eq!((t.epochs, t.lr, t.warmup_ratio), (1, 3e-5, 0.05));
    assert_eq!((t.accumulation_steps, t.patience, t.seed), (4, None, 42));
    assert_eq!(t.monitor, trainer::train::Monitor::Accuracy);
    assert!(matches!(
        t.optimizer,
        trainer::train::OptimizerConfig::AdamW { weight_decay, .. } if weight_decay == 0.02
    ));
}

#[test]
fn missing_keys_are_reported_at_their_table() {
    let e = StudyConfig::parse("[study]\nn_trials = 1\n", "s.toml").unwrap_err();
    assert_eq!(e.key(), Some(""), "{e}");
    assert!(e.to_string().contains("missing field `models`"), "{e}");
    let text = replace(", in = [\"small\"] }", " }");
    expect_error(
        &text,
        "param[1].when",
        "when = { param = \"model\" }",
        "missing field `in`",
    );
    let text = replace("type = \"int\"\n", "");
    expect_error_on(
        &text,
        "param[3]",
        line_of(&text, "name = \"head_layers\"") - 1,
        "missing field `type`",
    );
}

#[test]
fn devices_are_auto_cpu_cuda_cuda_n_or_sim() {
    let device = |v: &str| {
        StudyConfig::parse(
            &format!("{BASE}\n[runner]\ndevice = \"{v}\"\n"),
            "study.toml",
        )
        .map(|c| c.runner.device)
    };
    assert_eq!(device("auto").unwrap(), DeviceKind::Auto);
    assert_eq!(device("cpu").unwrap(), DeviceKind::Cpu);
    assert_eq!(device("cuda").unwrap(), DeviceKind::Cuda(0));
    assert_eq!(device("cuda:3").unwrap(), DeviceKind::Cuda(3));
    for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1"] {
        let e = device(bad).unwrap_err().to_string();
        assert!(
            e.contains(&format!("unknown device `{bad}`")) && e.contains("study.toml"),
            "{e}"
        );
    }
}

#[test]
fn precision_is_auto_fp32_bf16_or_fp16() {
    let precision = |v: &str| {
        StudyConfig::parse(
            &format!("{BASE}\n[runner]\nprecision = \"{v}\"\n"),
            "study.toml",
        )
        .map(|c| c.runner.precision)
    };
    let base = StudyConfig::parse(BASE, "study.toml").unwrap();
    assert_eq!(base.runner.precision, None);
    assert_eq!(precision("auto").unwrap(), None);
    assert_eq!(precision("fp32").unwrap(), Some(MatmulPrecision::Fp32));
    assert_eq!(precision("bf16").unwrap(), Some(MatmulPrecision::Bf16));
    assert_eq!(precision("fp16").unwrap(), Some(MatmulPrecision::Fp16));
    let text = format!("{BASE}\n[runner]\nprecision = \"float16\"\n");
    expect_error(
        &text,
        "runner.precision",
        "precision =",
        "unknown precision `float16`: expected \"fp32\", \"bf16\" or \"fp16\", or \"auto\"",
    );
    let text = format!("{BASE}\n[runner]\nprecision = 16\n");
    expect_error(&text, "runner.precision", "precision =", "invalid type");
}

#[test]
fn kernels_are_auto_by_default_or_named() {
    let kernels = |v: &str| {
        StudyConfig::parse(
            &format!("{BASE}\n[runner]\nkernels = \"{v}\"\n"),
            "study.toml",
        )
        .map(|c| c.runner.kernels)
    };
    let base = StudyConfig::parse(BASE, "study.toml").unwrap();
    assert_eq!(base.runner.kernels, None);
    assert_eq!(kernels("auto").unwrap(), None);
    assert_eq!(kernels("reference").unwrap(), Some(Kernels::Reference));
    assert_eq!(kernels("fused").unwrap(), Some(Kernels::Fused));
    let text = format!("{BASE}\n[runner]\nkernels = \"flash\"\n");
    expect_error(
        &text,
        "runner.kernels",
        "kernels =",
        "`flash`: expected \"auto\", \"reference\" or \"fused\"",
    );
}

#[test]
fn recompute_is_auto_by_default_or_named() {
    let recompute = |v: &str| {
        StudyConfig::parse(
            &format!("{BASE}\n[runner]\nrecompute = {v}\n"),
            "study.toml",
        )
        .map(|c| c.runner.recompute)
    };
    let base = StudyConfig::parse(BASE, "study.toml").unwrap();
    assert_eq!(base.runner.recompute, Recompute::Auto);
    assert_eq!(recompute("\"auto\"").unwrap(), Recompute::Auto);
    assert_eq!(recompute("\"always\"").unwrap(), Recompute::Always);
    assert_eq!(recompute("\"never\"").unwrap(), Recompute::Never);
    let text = format!("{BASE}\n[runner]\nrecompute = \"sometimes\"\n");
    expect_error(
        &text,
        "runner.recompute",
        "recompute =",
        "`sometimes`: expected \"auto\", \"always\" or \"never\"",
    );
    let text = format!("{BASE}\n[runner]\nrecompute = true\n");
    expect_error(&text, "runner.recompute", "recompute =", "invalid type");
}

#[test]
fn several_devices_are_read_and_checked() {
    let parse = |runner: &str| StudyConfig::parse(&format!("{BASE}\n[runner]\n{runner}"), "s.toml");
    let all = parse("device = \"cuda:*\"\n").unwrap();
    assert_eq!(all.runner.device, DeviceKind::CudaAll);
    assert_eq!(all.runner.cuda_devices, None);
    let listed = parse("devices = [\"cuda:0\", \"cuda:2\"]\n").unwrap();
    assert_eq!(listed.runner.device, DeviceKind::CudaAll);
    assert_eq!(listed.runner.cuda_devices, Some(vec![0, 2]));
    let sim = StudyConfig::parse(
        &format!(
            "{BASE}\n[runner]\ndevice = \"sim\"\nsim_devices = [\"24GiB\", \"24GiB\", \"80GiB\"]\n"
        )
        .replace("builtin = \"minilm-l6\"", "sim = \"bert-base\"")
        .replace("dir = \"models/large\"", "sim = \"bert-large\""),
        "s.toml",
    )
    .unwrap();
    assert_eq!(
        sim.runner.sim_devices,
        Some(vec![24 << 30, 24 << 30, 80 << 30])
    );
    assert_eq!(sim.runner.sim_memory, None);

    let runner = |body: &str| format!("{BASE}\n[runner]\n{body}");
    expect_error(
        &runner("device = \"cuda:0\"\ndevices = [\"cuda:1\"]\n"),
        "runner.devices",
        "devices =",
        "either device or devices",
    );
    expect_error(
        &runner("devices = []\n"),
        "runner.devices",
        "devices =",
        "at least one",
    );
    expect_error(
        &runner("devices = [\"cuda:0\", \"sim\"]\n"),
        "runner.devices[1]",
        "devices =",
        "expected a CUDA device",
    );
    expect_error(
        &runner("devices = [\"cuda:1\", \"cuda:1\"]\n"),
        "runner.devices[1]",
        "devices =",
        "listed twice",
    );
    expect_error(
        &runner("device = \"cuda:x\"\n"),
        "runner.device",
        "device =",
        "\"cuda:*\"",
    );
    expect_error(
        &runner("sim_devices = [\"24GiB\"]\n"),
        "runner.sim_devices",
        "sim_devices",
        "only used with device = \"sim\"",
    );
    expect_error(
        &runner("device = \"sim\"\nsim_memory = \"24GiB\"\nsim_devices = [\"24GiB\"]\n"),
        "runner.sim_devices",
        "sim_devices",
        "not both",
    );
    expect_error(
        &runner("device = \"sim\"\nsim_devices = []\n"),
        "runner.sim_devices",
        "sim_devices",
        "at least one size",
    );
    expect_error(
        &runner("device = \"sim\"\nsim_devices = [\"24GiB\", \"24 gigs\"]\n"),
        "runner.sim_devices[1]",
        "sim_devices",
        "not a size",
    );
    expect_error(
        &runner("device = \"sim\"\nsim_devices = [\"24GiB\", 0]\n"),
        "runner.sim_devices[1]",
        "sim_devices",
        "larger than 0",
    );
    expect_error(
        &runner(
            "device = \"sim\"\nsafety_margin = \"8GiB\"\nsim_devices = [\"24GiB\", \"8GiB\"]\n",
        ),
        "runner.safety_margin",
        "safety_margin",
        "leaves nothing",
    );
    expect_error(
        &runner("device = \"sim\"\nsafety_margin = 1\n"),
        "runner.safety_margin",
        "safety_margin",
        "a fraction such as 0.05",
    );
    let zero = StudyConfig::parse(&runner("safety_margin = 0\n"), "study.toml").unwrap();
    assert_eq!(zero.runner.safety_margin, SafetyMargin::Bytes(0));
}

/// BASE with `extra` appended (an `[objective]`, `[[constraint]]`s, ...).
fn with(extra: &str) -> String {
    format!("{BASE}\n{extra}\n")
}

#[test]
fn several_objectives_take_their_directions_from_their_metrics() {
    let c = StudyConfig::parse(
        &with("[objective]\nmetrics = [\"accuracy\", \"peak_memory\", \"train_seconds\"]"),
        "study.toml",
    )
    .unwrap();
    assert_eq!(
        c.objective.metrics,
        [
            TrialMetric::Accuracy,
            TrialMetric::PeakMemory,
            TrialMetric::TrainSeconds
        ]
    );
    use StudyDirection::{Maximize, Minimize};
    assert_eq!(c.objective.directions, [Maximize, Minimize, Minimize]);
    assert!(c.objective.is_multi());
    // No pruner on several objectives, as in Optuna.
    assert_eq!(c.pruner, PrunerSpec::None);
    // The best epoch follows the first validation metric listed.
    let c = StudyConfig::parse(
        &with("[objective]\nmetrics = [\"params\", \"loss\", \"f1_macro\"]\ndirections = [\"minimize\", \"minimize\", \"maximize\"]"),
        "study.toml",
    )
    .unwrap();
    assert_eq!(c.objective.metric, Metric::Loss);
    assert_eq!(c.objective.directions, [Minimize, Minimize, Maximize]);
    let c = StudyConfig::parse(
        &with("[objective]\nmetrics = [\"params\", \"peak_memory\"]"),
        "study.toml",
    )
    .unwrap();
    assert_eq!(c.objective.metric, Metric::Accuracy);
    // One metric is one objective, as before.
    let c = StudyConfig::parse(&with("[objective]\nmetric = \"f1_macro\""), "study.toml").unwrap();
    assert_eq!(c.objective.metrics, [TrialMetric::F1Macro]);
    assert!(!c.objective.is_multi());
    assert!(c.constraints.is_empty());
}

#[test]
fn objective_mistakes_name_their_field() {
    expect_error(
        &with("[objective]\nmetric = \"accuracy\"\nmetrics = [\"accuracy\", \"params\"]"),
        "objective.metrics",
        "metrics =",
        "either metric (one objective) or metrics",
    );
    expect_error(
        &with("[objective]\nmetrics = [\"accuracy\"]"),
        "objective.metrics",
        "metrics =",
        "two or more",
    );
    expect_error(
        &with("[objective]\nmetrics = [\"accuracy\", \"params\", \"accuracy\"]"),
        "objective.metrics[2]",
        "metrics =",
        "accuracy is listed twice",
    );
    expect_error(
        &with("[objective]\nmetrics = [\"accuracy\", \"memory\"]"),
        "objective.metrics[1]",
        "metrics =",
        "unknown variant `memory`",
    );
    expect_error(
        &with(
            "[objective]\nmetrics = [\"accuracy\", \"peak_memory\"]\ndirections = [\"maximize\", \"maximize\"]",
        ),
        "objective.directions[1]",
        "directions",
        "peak_memory should be minimized, not maximized",
    );
    expect_error(
        &with(
            "[objective]\nmetrics = [\"accuracy\", \"peak_memory\"]\ndirections = [\"maximize\"]",
        ),
        "objective.directions",
        "directions",
        "1 directions for 2 metrics",
    );
    expect_error(
        &with("[objective]\nmetrics = [\"accuracy\", \"peak_memory\"]\ndirection = \"maximize\""),
        "objective.direction",
        "direction =",
        "directions = [...]",
    );
    expect_error(
        &with("[objective]\nmetric = \"accuracy\"\ndirections = [\"maximize\"]"),
        "objective.directions",
        "directions",
        "one metric takes `direction`",
    );
    // A single objective is a validation metric; costs need `metrics`.
    expect_error(
        &with("[objective]\nmetric = \"peak_memory\""),
        "objective.metric",
        "peak_memory",
        "unknown variant",
    );
    // Pruning is refused on several objectives; kind = "none" is fine.
    let mo = "[objective]\nmetrics = [\"accuracy\", \"peak_memory\"]\n";
    expect_error(
        &with(&format!("{mo}[pruner]\nkind = \"median\"")),
        "pruner.kind",
        "median",
        "several objectives cannot be pruned",
    );
    expect_error(
        &with(&format!("{mo}[pruner]\nn_startup_trials = 3")),
        "pruner",
        "[pruner]",
        "several objectives cannot be pruned",
    );
    let c = StudyConfig::parse(
        &with(&format!("{mo}[pruner]\nkind = \"none\"")),
        "study.toml",
    )
    .unwrap();
    assert_eq!(c.pruner, PrunerSpec::None);
}

#[test]
fn inference_memory_is_a_metric_and_a_constraint_with_its_batch() {
    let c = StudyConfig::parse(
        &with(
            "[objective]\nmetrics = [\"accuracy\", \"inference_memory\"]\n\n\
             [[constraint]]\nmetric = \"inference_memory\"\nmax = \"2GiB\"",
        ),
        "study.toml",
    )
    .unwrap();
    assert_eq!(
        c.objective.metrics,
        [TrialMetric::Accuracy, TrialMetric::InferenceMemory]
    );
    use StudyDirection::{Maximize, Minimize};
    assert_eq!(c.objective.directions, [Maximize, Minimize]);
    assert_eq!(c.objective.inference_batch, 1, "one sequence by default");
    assert_eq!(
        c.constraints,
        [Constraint {
            metric: TrialMetric::InferenceMemory,
            max: (2u64 << 30) as f64
        }]
    );
    assert!(TrialMetric::InferenceMemory.known_before_training());
    let c = StudyConfig::parse(
        &with("[objective]\nmetric = \"accuracy\"\ninference_batch = 32"),
        "study.toml",
    )
    .unwrap();
    assert_eq!(c.objective.inference_batch, 32);
    expect_error(
        &with("[objective]\nmetric = \"accuracy\"\ninference_batch = 0"),
        "objective.inference_batch",
        "inference_batch = 0",
        "at least 1",
    );
    expect_error(
        &with("[objective]\nmetric = \"accuracy\"\ninference_batch = 1000000000"),
        "objective.inference_batch",
        "inference_batch = 1000000000",
        "more than 65536 sequences",
    );
    expect_error(
        &with("[[constraint]]\nmetric = \"inference_memory\"\nmax = \"lots\""),
        "constraint[0].max",
        "lots",
        "not a size",
    );
}

#[test]
fn constraints_are_read_in_their_units_and_mistakes_name_their_field() {
    let c = StudyConfig::parse(
        &with(
            "[[constraint]]\nmetric = \"peak_memory\"\nmax = \"8GiB\"\n\n\
             [[constraint]]\nmetric = \"train_seconds\"\nmax = \"1h30m\"\n\n\
             [[constraint]]\nmetric = \"params\"\nmax = 110000000",
        ),
        "study.toml",
    )
    .unwrap();
    assert_eq!(
        c.constraints,
        [
            Constraint {
                metric: TrialMetric::PeakMemory,
                max: (8u64 << 30) as f64
            },
            Constraint {
                metric: TrialMetric::TrainSeconds,
                max: 5400.0
            },
            Constraint {
                metric: TrialMetric::Params,
                max: 1.1e8
            },
        ]
    );
    // A single objective may be constrained too; bytes may be an integer.
    let c = StudyConfig::parse(
        &with("[[constraint]]\nmetric = \"peak_memory\"\nmax = 4096"),
        "study.toml",
    )
    .unwrap();
    assert_eq!(c.constraints[0].max, 4096.0);
    expect_error(
        &with("[[constraint]]\nmetric = \"peak_memory\"\nmax = \"8 gigs\""),
        "constraint[0].max",
        "8 gigs",
        "not a size",
    );
    expect_error(
        &with(
            "[[constraint]]\nmetric = \"params\"\nmax = 1\n\n[[constraint]]\nmetric = \"train_seconds\"\nmax = 60",
        ),
        "constraint[1].max",
        "max = 60",
        "must be a duration",
    );
    expect_error(
        &with("[[constraint]]\nmetric = \"train_seconds\"\nmax = \"soon\""),
        "constraint[0].max",
        "soon",
        "not a duration",
    );
    expect_error(
        &with("[[constraint]]\nmetric = \"params\"\nmax = \"110M\""),
        "constraint[0].max",
        "110M",
        "number of parameters",
    );
    expect_error(
        &with("[[constraint]]\nmetric = \"params\"\nmax = 0"),
        "constraint[0].max",
        "max = 0",
        "larger than 0",
    );
    expect_error(
        &with("[[constraint]]\nmetric = \"accuracy\"\nmax = 0.5"),
        "constraint[0].metric",
        "metric = \"accuracy\"",
        "accuracy cannot be constrained",
    );
    let twice = with(
        "[[constraint]]\nmetric = \"params\"\nmax = 5\n\n[[constraint]]\nmetric = \"params\"\nmax = 6",
    );
    expect_error_on(
        &twice,
        "constraint[1].metric",
        line_of(&twice, "max = 6") - 1,
        "already constrained by constraint[0]",
    );
    expect_error(
        &with("[[constraint]]\nmetric = \"params\"\nmin = 5"),
        "constraint[0].min",
        "min = 5",
        "unknown field `min`",
    );
    expect_error(
        &with("[[constraint]]\nmax = 5"),
        "constraint[0]",
        "[[constraint]]",
        "missing field `metric`",
    );
}

#[test]
fn several_objectives_pick_their_sampler_and_nsga2_is_one() {
    let mo = "[objective]\nmetrics = [\"accuracy\", \"peak_memory\"]\n";
    for kind in ["tpe", "random", "gp", "auto", "nsga2"] {
        let c = StudyConfig::parse(
            &with(&format!("{mo}[sampler]\nkind = \"{kind}\"\nseed = 1")),
            "study.toml",
        )
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
        // Each builds and samples past its startup trials on a history of
        // two objectives.
        let mut sampler = c.make_sampler();
        let mut history: Vec<FrozenTrial> = Vec::new();
        for number in 0..12 {
            let view = StudyView::with_directions("t", &c.objective.directions, &history);
            let mut trial = hpo_sampler::Trial::new(sampler.as_mut(), view, number);
            c.sample(&mut trial).unwrap();
            let params = trial.into_params();
            let settings = c.settings_of_params(&params).unwrap();
            let mut t = FrozenTrial::new(number);
            t.state = TrialState::Complete;
            t.values = Some(vec![
                settings.learning_rate.ln(),
                settings.head_hidden.len() as f64,
            ]);
            t.params = params;
            history.push(t);
        }
        assert_eq!(history.len(), 12, "{kind}");
    }
    let c = StudyConfig::parse(
        &with(&format!(
            "{mo}[sampler]\nkind = \"nsga2\"\npopulation_size = 8"
        )),
        "study.toml",
    )
    .unwrap();
    assert_eq!(c.sampler.kind, SamplerKind::Nsga2);
    assert_eq!(c.sampler.nsga2.population_size, 8);
    expect_error(
        &with("[sampler]\nkind = \"tpe\"\npopulation_size = 8"),
        "sampler.population_size",
        "population_size",
        "only used with kind = \"nsga2\"",
    );
    expect_error(
        &with("[sampler]\nkind = \"nsga2\"\npopulation_size = 1"),
        "sampler.population_size",
        "population_size",
        "at least 2",
    );
    // A generation is held in memory: a mistyped size is refused.
    expect_error(
        &with("[sampler]\nkind = \"nsga2\"\npopulation_size = 4611686018427387904"),
        "sampler.population_size",
        "population_size",
        "at most 1048576",
    );
    expect_error(
        &with("[sampler]\nkind = \"nsga2\"\nn_ei_candidates = 8"),
        "sampler.n_ei_candidates",
        "n_ei_candidates",
        "only used with kind = \"tpe\"",
    );
}

/// A constraint on a short time says its figures in milliseconds rather
/// than rounding the limit and the measure both to 0.0 s.
#[test]
fn constraints_on_short_times_keep_their_digits() {
    let c = Constraint {
        metric: TrialMetric::TrainSeconds,
        max: 0.01,
    };
    assert_eq!(c.describe(0.04), "train_seconds 40.0 ms > max 10.0 ms");
    assert_eq!(c.describe(2.5), "train_seconds 2.5 s > max 10.0 ms");
    assert_eq!(c.describe(0.005), "train_seconds 5.0 ms <= max 10.0 ms");
}

//! What the runner prices a trial at: on a CUDA device, the memory plan of
//! the trial's largest step with the CUDA backend's own buffers, for every
//! family of the legacy setup's space, every matrix-product precision, both
//! kernel sets (their stored types), every length, and with the layers
//! recomputed; and random-weight presets and `[runner] memory_limit` on the
//! CPU and the simulated device.

mod common;

use std::path::{Path, PathBuf};

use cli::tune::config::{Metric, TrialSettings};
use cli::tune::pricing::{PricedDevice, Pricer};
use cli::tune::protocol::{Job, ModelSource};
use cli::tune::simulate::space;
use serde_json::Value as Json;
use store::{Storage, TrialFilter, TrialState};
use trainer::backend::{Kernels, MatmulPrecision};
use trainer::data::{DataSource, LoadOptions};
use trainer::memory::{MemoryPlan, PlanRequest, StepBackend};
use trainer::model::{HeadConfig, ModelConfig};

/// Twelve texts of 600 words (every length up to 512 tokens occurs) in a
/// CSV file under `dir`, and their texts.
fn long_texts(dir: &Path) -> (DataSource, Vec<String>) {
    let words = trainer::testing::sentiment_words(300);
    let mut csv = String::from("text,label\n");
    let mut texts = Vec::new();
    for i in 0..12 {
        let text: Vec<&str> = (0..600)
            .map(|j| words[(i * 31 + j * 7) % 300].as_str())
            .collect();
        let text = text.join(" ");
        csv.push_str(&format!("\"{text}\",{}\n", i % 2));
        texts.push(text);
    }
    let path = dir.join("long.csv");
    std::fs::write(&path, csv).unwrap();
    let source = DataSource::Files {
        paths: vec![path],
        options: LoadOptions::new(2),
    };
    (source, texts)
}

fn settings(max_length: usize, batch_size: usize) -> TrialSettings {
    TrialSettings {
        model: "m".into(),
        learning_rate: 1e-4,
        batch_size,
        max_length,
        warmup_ratio: 0.1,
        weight_decay: 0.01,
        dropout: None,
        head_hidden: vec![],
        epochs: 1,
        patience: None,
        seed: 1,
    }
}

fn job(model: &Path, data: &DataSource, max_length: usize, precision: MatmulPrecision) -> Job {
    Job {
        trial_number: 0,
        model: ModelSource::Dir {
            path: model.to_path_buf(),
        },
        data: data.clone(),
        validation_fraction: 0.25,
        split_seed: 42,
        metric: Metric::Accuracy,
        settings: settings(max_length, 4),
        micro_batch: 4,
        accumulation_steps: 1,
        recompute: false,
        memory_limit: None,
        fault: None,
        threads: 0,
        cuda_device: Some(0),
        matmul_precision: precision,
        kernels: Kernels::Reference,
    }
}

#[test]
fn a_cuda_trial_is_priced_at_the_plan_of_its_longest_step_for_every_family_precision_kernel_set_and_length()
 {
    let dir = tempfile::tempdir().unwrap();
    let (data, texts) = long_texts(dir.path());
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let mut pricer = Pricer::new(PricedDevice::Cuda {
        expandable_segments: true,
    });
    for &model in space::MODELS.iter() {
        let model_dir: PathBuf = dir.path().join(model);
        let config = trainer::preset::write_dir(&model_dir, model, &texts).unwrap();
        assert_eq!(Some(&config), ModelConfig::preset(model).as_ref());
        for precision in MatmulPrecision::ALL {
            for kernels in [Kernels::Reference, Kernels::Fused] {
                // Recomputed at the shortest and longest length only: the
                // plan's own tests cover recomputation at every shape.
                let runs = [64, 128, 256, 512]
                    .map(|length| (length, false))
                    .into_iter()
                    .chain([(64, true), (512, true)]);
                for (length, recompute) in runs {
                    let job = Job {
                        kernels,
                        recompute,
                        ..job(&model_dir, &data, length, precision)
                    };
                    let price = pricer.price(&job).unwrap();
                    // Every text is longer than `length`: the largest step
                    // is a full micro-batch at `length`.
                    let plan = MemoryPlan::new(&PlanRequest {
                        recompute,
                        ..PlanRequest::fp32_adamw(config.clone(), &head, 4, length)
                            .on(StepBackend::Cuda, precision)
                            .with_step(precision, kernels)
                    })
                    .unwrap();
                    let at = format!(
                        "{model} {precision} {kernels} length {length} recompute {recompute}"
                    );
                    assert_eq!(price.peak, plan.peak_bytes as u64, "{at}");
                    assert!(price.limit >= price.peak, "{at}");
                }
            }
        }
    }
}

#[test]
fn the_cpu_prices_a_trial_at_exactly_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (data, texts) = long_texts(dir.path());
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let model = dir.path().join("minilm");
    let config = trainer::preset::write_dir(&model, "minilm-l6", &texts).unwrap();
    let mut pricer = Pricer::new(PricedDevice::Cpu);
    let job = Job {
        cuda_device: None,
        ..job(&model, &data, 96, MatmulPrecision::Fp32)
    };
    let price = pricer.price(&job).unwrap();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let plan = MemoryPlan::new(&PlanRequest::fp32_adamw(config, &head, 4, 96)).unwrap();
    assert_eq!(price.peak, plan.peak_bytes as u64);
    assert_eq!(price.limit, price.peak);
}

fn attr(t: &store::FrozenTrial, key: &str) -> Json {
    t.user_attrs.get(key).cloned().unwrap_or(Json::Null)
}

fn trials(db: &Path, study: &str) -> Vec<store::FrozenTrial> {
    let s = Storage::open_existing(db).unwrap();
    let st = s.study(study).unwrap();
    s.trials(st.study_id, &TrialFilter::default()).unwrap()
}

/// Forty short labelled texts in `dir/d.csv`: a few steps of a random
/// MiniLM per trial.
fn short_reviews_csv(dir: &Path) {
    let mut csv = String::from("text,label\n");
    for i in 0..40 {
        let word = if i % 2 == 0 { "great" } else { "awful" };
        csv.push_str(&format!("\"the film was {word} number {i}\",{}\n", i % 2));
    }
    std::fs::write(dir.join("d.csv"), csv).unwrap();
}

#[test]
fn random_weight_presets_train_on_the_cpu_under_a_memory_limit_and_are_marked() {
    let dir = tempfile::tempdir().unwrap();
    short_reviews_csv(dir.path());
    let study = r#"
[study]
name = "presets"
n_trials = 2
seed = 1

[data]
source = "files"
files = ["d.csv"]
num_classes = 2

[objective]
metric = "accuracy"

[models.minilm]
preset = "minilm-l6"

[[param]]
name = "batch_size"
type = "categorical"
choices = [4, 8]

[fixed]
epochs = 1
max_length = 16

[sampler]
kind = "random"
seed = 2

[runner]
device = "cpu"
memory_limit = "1GiB"
max_workers = 1
"#;
    let config = dir.path().join("s.toml");
    std::fs::write(&config, study).unwrap();
    let db = dir.path().join("s.db");
    let out = common::ok(common::memtune(
        &db,
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    ));
    assert!(out.contains("of 1.00 GiB"), "{out}");
    let ts = trials(&db, "presets");
    assert_eq!(ts.len(), 2);
    for t in &ts {
        assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
        assert_eq!(attr(t, "random_weights_preset"), "minilm-l6");
        assert_eq!(attr(t, "device_capacity_bytes"), 1u64 << 30);
        assert_eq!(
            attr(t, "requested_peak_bytes"),
            attr(t, "predicted_peak_bytes")
        );
    }
    // The runner's preset directory beside the storage (the model's key and
    // a hash of the preset and the texts): the tokenizer every worker read.
    let presets = dir.path().join("presets-presets");
    let names: Vec<String> = std::fs::read_dir(&presets)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let (key, hash) = names[0].split_once('-').unwrap();
    assert_eq!(key, "minilm");
    assert!(
        hash.len() == 8 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash}"
    );
    assert!(trainer::preset::has_random_weights(
        &presets.join(&names[0])
    ));
    let report = std::fs::read_to_string(dir.path().join("presets-report.html")).unwrap();
    assert!(
        report.contains("random weights"),
        "the report does not say so"
    );

    // A study of the same name on other data, in another storage beside
    // this one, builds its own tokenizer beside the first, not over it.
    let tokenizer = presets.join(&names[0]).join("tokenizer.json");
    let first = std::fs::read(&tokenizer).unwrap();
    let other_csv = std::fs::read_to_string(dir.path().join("d.csv"))
        .unwrap()
        .replace("film", "novel");
    std::fs::write(dir.path().join("d.csv"), other_csv).unwrap();
    let config = dir.path().join("s.toml");
    std::fs::write(&config, study.replace("n_trials = 2", "n_trials = 1")).unwrap();
    common::ok(common::memtune(
        &dir.path().join("other.db"),
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    ));
    assert_eq!(std::fs::read_dir(&presets).unwrap().count(), 2);
    assert_eq!(std::fs::read(&tokenizer).unwrap(), first);
}

/// The same one-trial study of a random MiniLM with the reference and the
/// fused kernels, bf16 products (emulated on the CPU): each trial records
/// its kernel set and holds exactly its price, and the fused one (16-bit
/// activations, no stored attention probabilities) is priced lower.
#[test]
fn the_kernel_set_of_the_study_file_runs_the_trials_at_its_own_price() {
    let dir = tempfile::tempdir().unwrap();
    short_reviews_csv(dir.path());
    let mut peaks = Vec::new();
    for kernels in ["reference", "fused"] {
        let study = format!(
            r#"
[study]
name = "{kernels}"
n_trials = 1
seed = 1

[data]
source = "files"
files = ["d.csv"]
num_classes = 2

[objective]
metric = "accuracy"

[models.minilm]
preset = "minilm-l6"

[fixed]
epochs = 1
batch_size = 8
max_length = 16

[runner]
device = "cpu"
precision = "bf16"
kernels = "{kernels}"
max_workers = 1
"#
        );
        let config = dir.path().join(format!("{kernels}.toml"));
        std::fs::write(&config, study).unwrap();
        let db = dir.path().join("s.db");
        common::ok(common::memtune(
            &db,
            &[
                "tune",
                "--no-progress",
                "--config",
                config.to_str().unwrap(),
            ],
        ));
        let ts = trials(&db, kernels);
        assert_eq!(ts.len(), 1);
        let t = &ts[0];
        assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
        assert_eq!(attr(t, "kernels"), kernels);
        assert_eq!(attr(t, "matmul_precision"), "bf16");
        assert_eq!(
            attr(t, "requested_peak_bytes"),
            attr(t, "predicted_peak_bytes"),
            "{kernels}"
        );
        peaks.push(attr(t, "predicted_peak_bytes").as_u64().unwrap());
    }
    assert!(
        peaks[1] < peaks[0],
        "fused {} vs reference {}",
        peaks[1],
        peaks[0]
    );
}

#[test]
fn presets_run_on_the_simulated_device_as_a_card_of_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let study = r#"
[study]
name = "capped"
n_trials = 4

[objective]
metric = "accuracy"

[models.roberta-large]
preset = "roberta-large"

[models.deberta-v3-large]
preset = "deberta-v3-large"

[[param]]
name = "model"
type = "categorical"
choices = ["roberta-large", "deberta-v3-large"]

[[param]]
name = "batch_size"
type = "categorical"
choices = [16, 64]

[fixed]
epochs = 1
max_length = 256

[sampler]
kind = "random"
seed = 5

[runner]
device = "sim"
sim_memory = "80GiB"
memory_limit = "24GiB"
"#;
    let config = dir.path().join("s.toml");
    std::fs::write(&config, study).unwrap();
    let db = dir.path().join("s.db");
    common::ok(common::memtune(
        &db,
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    ));
    let ts = trials(&db, "capped");
    assert_eq!(ts.len(), 4);
    let usable = attr(&ts[0], "device_usable_bytes").as_u64().unwrap();
    assert_eq!(attr(&ts[0], "device_capacity_bytes"), 24u64 << 30);
    assert!(usable < 24 << 30);
    for t in &ts {
        assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
        assert!(attr(t, "random_weights_preset").is_string());
        assert!(attr(t, "lease_bytes").as_u64().unwrap() <= usable);
        assert!(attr(t, "oom_retries").as_array().unwrap().is_empty());
        assert_eq!(
            attr(t, "requested_peak_bytes"),
            attr(t, "predicted_peak_bytes")
        );
    }
}

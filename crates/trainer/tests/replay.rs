//! A run replayed on a simulated device (`finetune::replay_run`) asks for
//! exactly what the run asks for, and its reserved peak is a lease the run
//! never outgrows; random-weight preset directories (`preset`) load and
//! train like checkpoints.

use std::path::Path;

use trainer::backend::MatmulPrecision;
use trainer::data::{DataSource, LoadOptions};
use trainer::finetune::{FinetuneSpec, finetune_cpu, replay_run};
use trainer::memory::{MemoryPlan, PlanRequest, StepBackend};
use trainer::model::{HeadConfig, ModelConfig};
use trainer::preset;
use trainer::testing::{sentiment_words, tiny_config, write_tiny_model};
use trainer::tokenize::TextTokenizer;
use trainer::train::{Control, TrainConfig};

fn spec(dir: &Path, micro_batch: usize, max_length: usize) -> FinetuneSpec {
    FinetuneSpec {
        kernels: trainer::backend::Kernels::Reference,
        model_dir: dir.to_path_buf(),
        data: DataSource::default(),
        validation_fraction: 0.2,
        split_seed: 7,
        max_length,
        micro_batch,
        batch_size: None,
        head_hidden: vec![16],
        dropout: None,
        memory_limit: None,
        matmul_precision: MatmulPrecision::Fp32,
        train: TrainConfig {
            epochs: 2,
            accumulation_steps: 2,
            seed: 3,
            lr: 1e-3,
            ..TrainConfig::default()
        },
    }
}

fn tiny_model(dir: &Path) {
    let words = sentiment_words(400);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    write_tiny_model(dir, &tiny_config(), &words, 1).unwrap();
}

#[test]
fn a_cpu_run_peaks_where_its_replay_does_and_fits_that_lease_exactly() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    let spec = spec(dir.path(), 24, 128);
    let replay = replay_run(&spec, StepBackend::Host, gpu_mem::Config::default()).unwrap();
    // The largest step is the longest training batch at the full
    // micro-batch: the memory plan of that step.
    assert!(replay.longest_train_batch >= replay.longest_validation_batch);
    assert!(
        replay.longest_train_batch < 128,
        "the data is shorter than max_length"
    );
    let config = trainer::finetune::read_model_config(&dir.path().join("config.json")).unwrap();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![16],
    };
    let plan = MemoryPlan::new(&PlanRequest::fp32_adamw(
        config,
        &head,
        24,
        replay.longest_train_batch,
    ))
    .unwrap();
    assert_eq!(replay.peak_requested, plan.peak_bytes as u64);

    let run = finetune_cpu(&spec, &mut |_| Control::Continue).unwrap();
    assert_eq!(run.peak_bytes as u64, replay.peak_requested);
    // As a lease: enough, and not a byte more than needed.
    let leased = |limit: u64| FinetuneSpec {
        memory_limit: Some(limit as usize),
        ..spec.clone()
    };
    let fits = finetune_cpu(&leased(replay.peak_requested), &mut |_| Control::Continue).unwrap();
    assert!(fits.report.oom_retries.is_empty());
    let short = finetune_cpu(&leased(replay.peak_requested - 1), &mut |_| {
        Control::Continue
    })
    .unwrap();
    assert!(!short.report.oom_retries.is_empty());
}

#[test]
fn a_cuda_replay_prices_the_backends_own_buffers_and_reserves_at_least_that() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    let spec = spec(dir.path(), 16, 64);
    let host = replay_run(&spec, StepBackend::Host, gpu_mem::Config::expandable()).unwrap();
    let cuda = replay_run(&spec, StepBackend::Cuda, gpu_mem::Config::expandable()).unwrap();
    assert_eq!(
        cuda.peak_requested,
        host.peak_requested + StepBackend::Cuda.buffer_bytes() as u64
    );
    assert!(cuda.peak_reserved >= cuda.peak_requested);
    // The plan of a CUDA step holds the same buffers.
    let config = trainer::finetune::read_model_config(&dir.path().join("config.json")).unwrap();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![16],
    };
    let request = PlanRequest::fp32_adamw(config, &head, 16, cuda.longest_train_batch);
    let on_cuda =
        MemoryPlan::new(&request.clone().on(StepBackend::Cuda, MatmulPrecision::Bf16)).unwrap();
    assert_eq!(on_cuda.peak_bytes as u64, cuda.peak_requested);
    assert_eq!(
        on_cuda.peak_bytes,
        MemoryPlan::new(&request).unwrap().peak_bytes + StepBackend::Cuda.buffer_bytes()
    );
}

#[test]
fn a_simulated_device_losing_its_context_fails_the_next_step_for_good() {
    use trainer::backend::faulty::Faults;
    let spec = trainer::finetune::SimSpec {
        config: ModelConfig::from(tiny_config()),
        epochs: 3,
        backend: StepBackend::Cuda,
        ..Default::default()
    };
    let faults = Faults {
        lose_context_after_epoch: Some(0),
        ..Faults::default()
    };
    let mut epochs = 0;
    let error = trainer::finetune::finetune_sim_with_faults(&spec, &faults, &mut |_| {
        epochs += 1;
        Control::Continue
    })
    .unwrap_err();
    assert_eq!(epochs, 1);
    let text = error.to_string();
    assert!(text.contains("CUDA_ERROR_ASSERT"), "{text}");
    match error {
        trainer::finetune::FinetuneError::Train(trainer::train::TrainError::Device(f)) => {
            assert!(f.sticky)
        }
        other => panic!("not a device failure: {other:?}"),
    }
}

/// Long texts of the sentiment words, so every length up to 512 tokens
/// occurs, in a CSV file under `dir`.
fn long_texts(dir: &Path) -> DataSource {
    let words = sentiment_words(300);
    let mut csv = String::from("text,label\n");
    for i in 0..12 {
        let text: Vec<&str> = (0..600)
            .map(|j| words[(i * 31 + j * 7) % 300].as_str())
            .collect();
        csv.push_str(&format!("\"{}\",{}\n", text.join(" "), i % 2));
    }
    let path = dir.join("long.csv");
    std::fs::write(&path, csv).unwrap();
    DataSource::Files {
        paths: vec![path],
        options: LoadOptions::new(2),
    }
}

#[test]
fn preset_directories_of_every_family_tokenize_for_their_model() {
    let texts: Vec<String> = sentiment_words(2000);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    for name in [
        "bert-base",
        "roberta-large",
        "xlm-roberta-base",
        "deberta-v3-base",
        "distilbert-base",
        "electra-base",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = preset::write_dir(dir.path(), name, &texts).unwrap();
        assert!(preset::has_random_weights(dir.path()));
        assert!(!dir.path().join("model.safetensors").exists());
        // The checks a run makes before it builds the model.
        assert_eq!(
            trainer::finetune::check_model_dir(dir.path(), 2).unwrap(),
            config,
            "{name}"
        );
        let tok = TextTokenizer::from_model_dir(dir.path(), 512).unwrap();
        tok.check_model(config.vocab_size(), config.max_sequence())
            .unwrap();
        let special = tok.special_tokens();
        let pad = match &config {
            ModelConfig::Bert(c) => c.pad_token_id,
            ModelConfig::Deberta(c) => c.pad_token_id,
        };
        assert_eq!(special.pad, pad, "{name}");
        let encoded = tok.encode("a great film", None).unwrap();
        assert_eq!(encoded.ids[0], special.cls, "{name}");
        assert_eq!(*encoded.ids.last().unwrap(), special.sep, "{name}");
        // The same texts give the same tokenizer.
        let again = tempfile::tempdir().unwrap();
        preset::write_dir(again.path(), name, &texts).unwrap();
        let read = |d: &Path| std::fs::read_to_string(d.join("tokenizer.json")).unwrap();
        assert!(
            read(dir.path()) == read(again.path()),
            "{name}: trained differently twice"
        );
    }
    assert!(preset::write_dir(Path::new("/nonexistent"), "bert-huge", &texts).is_err());
}

#[test]
fn a_random_weight_preset_trains_on_the_cpu_at_its_replayed_peak() {
    let dir = tempfile::tempdir().unwrap();
    let data = long_texts(dir.path());
    let texts: Vec<String> = data
        .load()
        .unwrap()
        .examples
        .into_iter()
        .map(|e| e.text)
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let model = dir.path().join("minilm");
    preset::write_dir(&model, "minilm-l6", &texts).unwrap();
    let spec = FinetuneSpec {
        data,
        validation_fraction: 0.25,
        head_hidden: vec![],
        train: TrainConfig {
            epochs: 1,
            accumulation_steps: 1,
            ..spec(&model, 4, 24).train
        },
        ..spec(&model, 4, 24)
    };
    let replay = replay_run(&spec, StepBackend::Host, gpu_mem::Config::default()).unwrap();
    assert_eq!(replay.longest_train_batch, 24);
    let run = finetune_cpu(&spec, &mut |_| Control::Continue).unwrap();
    assert_eq!(run.peak_bytes as u64, replay.peak_requested);
    assert!(run.report.epochs[0].train_loss.is_finite());
}

/// A replay asked to stop gives up between epochs (after the first of
/// three here), and one never asked to stop is `replay_run` itself.
#[test]
fn a_replay_gives_up_between_epochs_when_told_to_stop() {
    use std::cell::Cell;
    use trainer::finetune::replay_run_unless;
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    let mut spec = spec(dir.path(), 8, 64);
    spec.train.epochs = 3;
    let asked = Cell::new(0);
    let stop_after_one_epoch = || {
        asked.set(asked.get() + 1);
        asked.get() > 1
    };
    let config = gpu_mem::Config::default;
    let given_up =
        replay_run_unless(&spec, StepBackend::Host, config(), &stop_after_one_epoch).unwrap();
    assert_eq!(given_up, None);
    assert_eq!(
        asked.get(),
        2,
        "asked before reading the data and after epoch 1"
    );
    assert_eq!(
        replay_run_unless(&spec, StepBackend::Host, config(), &|| true).unwrap(),
        None
    );
    let whole = replay_run_unless(&spec, StepBackend::Host, config(), &|| false).unwrap();
    assert_eq!(
        whole,
        Some(replay_run(&spec, StepBackend::Host, config()).unwrap())
    );
}

//! DeBERTa-v3 through the same training loop as the BERT families: a
//! fine-tune of the tiny `deberta-v2` fixture (HF's config, weights and
//! SentencePiece tokenizer) on the CPU learns, its measured peak equals the
//! memory plan's, and a lease too small for the micro-batch is met by
//! halving it.

use std::path::PathBuf;

use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::finetune::{FinetuneSpec, finetune_cpu, finetune_cpu_trained};
use trainer::memory::plan::run_planned_step;
use trainer::memory::{MemTracker, MemoryPlan, PlanRequest};
use trainer::model::deberta::{DebertaClassifier, DebertaConfig};
use trainer::model::{HeadConfig, ModelConfig};
use trainer::train::{Control, TrainConfig, train};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/families/deberta-v2")
}

fn config() -> DebertaConfig {
    DebertaConfig::from_file(dir().join("config.json")).unwrap()
}

fn spec(micro_batch: usize, epochs: usize) -> FinetuneSpec {
    FinetuneSpec {
        kernels: trainer::backend::Kernels::Reference,
        model_dir: dir(),
        data: Default::default(),
        validation_fraction: 0.2,
        split_seed: 3,
        max_length: 24,
        micro_batch,
        batch_size: None,
        head_hidden: vec![],
        dropout: None,
        memory_limit: None,
        matmul_precision: trainer::backend::MatmulPrecision::Fp32,
        train: TrainConfig {
            epochs,
            lr: 3e-3,
            seed: 1,
            ..TrainConfig::default()
        },
    }
}

fn request(micro_batch: usize, seq_len: usize, labels: usize) -> PlanRequest {
    let head = HeadConfig {
        num_labels: labels,
        hidden: vec![],
    };
    PlanRequest::fp32_adamw(config(), &head, micro_batch, seq_len)
}

#[test]
fn finetune_cpu_trains_a_deberta_directory() {
    let out = finetune_cpu(&spec(64, 3), &mut |_| Control::Continue).unwrap();
    let losses: Vec<f64> = out.report.epochs.iter().map(|e| e.train_loss).collect();
    assert_eq!(losses.len(), 3);
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(losses[2] < losses[0], "training loss falls: {losses:?}");
    let valid = &out.report.epochs[2].valid;
    assert!(valid.loss.is_finite() && valid.accuracy > 0.0, "{valid:?}");
    assert!(out.report.oom_retries.is_empty() && out.peak_bytes > 0);
}

#[test]
fn the_training_loop_peaks_where_the_plan_says() {
    // Fixed-shape batches (every token real), so each step is the plan's.
    let (b, s, labels) = (4, 12, 3);
    let c = config();
    let batch = |k: usize| Batch {
        batch: b,
        seq: s,
        input_ids: (0..b * s)
            .map(|i| ((i * 7 + k) % c.vocab_size) as u32)
            .collect(),
        token_type_ids: vec![0; b * s],
        attention_mask: vec![1; b * s],
        labels: (0..b).map(|i| (i + k) % labels).collect(),
    };
    let train_set: Vec<Batch> = (0..3).map(batch).collect();
    let valid = vec![batch(5)];
    let tracker = MemTracker::new(true);
    let be = CpuBackend::<f32>::with_tracker(tracker.clone());
    let (mut model, fresh) = DebertaClassifier::from_dir(&be, dir(), labels, 0).unwrap();
    assert!(fresh.is_empty(), "{fresh:?}");
    let cfg = TrainConfig {
        epochs: 2,
        lr: 1e-3,
        ..TrainConfig::default()
    };
    let report = train(&be, &mut model, &train_set, &valid, &cfg, &mut |_| {
        Control::Continue
    })
    .unwrap();
    assert!(report.epochs.iter().all(|e| e.train_loss.is_finite()));
    let plan = MemoryPlan::new(&request(b, s, labels)).unwrap();
    assert_eq!(tracker.peak_bytes(), plan.peak_bytes, "{}", plan.summary());

    // And the plan's record is the CPU's, buffer by buffer.
    let tracker = MemTracker::new(true);
    let be = CpuBackend::<f32>::with_tracker(tracker.clone());
    drop(run_planned_step(&be, &request(b, s, labels)).unwrap());
    assert_eq!(plan.buffers, tracker.buffers());
}

#[test]
fn a_lease_below_the_micro_batch_halves_it() {
    let full = finetune_cpu(&spec(32, 1), &mut |_| Control::Continue).unwrap();
    assert!(full.report.oom_retries.is_empty());
    // Micro-batch 4 fits at any length up to max_length; 32 rows do not.
    let limit = MemoryPlan::new(&request(4, 24, 2)).unwrap().peak_bytes;
    assert!(limit < full.peak_bytes, "{limit} vs {}", full.peak_bytes);
    let leased = FinetuneSpec {
        memory_limit: Some(limit),
        ..spec(32, 1)
    };
    let out = finetune_cpu(&leased, &mut |_| Control::Continue).unwrap();
    let report = &out.report;
    assert!(!report.oom_retries.is_empty(), "{report:?}");
    assert_eq!(report.oom_retries[0].from_micro_batch, 32);
    assert!(
        (4..32).contains(&report.micro_batch),
        "{}",
        report.micro_batch
    );
    assert!(out.peak_bytes <= limit, "{} > {limit}", out.peak_bytes);
    assert!(report.epochs[0].train_loss.is_finite());

    // Below the weights and optimiser state, the run fails clearly.
    let tiny = FinetuneSpec {
        memory_limit: Some(1000),
        ..spec(32, 1)
    };
    let err = finetune_cpu(&tiny, &mut |_| Control::Continue).unwrap_err();
    assert!(err.out_of_memory().is_some(), "{err}");
}

#[test]
fn recomputing_the_layers_trains_the_same_model_in_less_memory() {
    let kept = finetune_cpu(&spec(32, 2), &mut |_| Control::Continue).unwrap();
    let recomputed = FinetuneSpec {
        train: TrainConfig {
            recompute: true,
            ..spec(32, 2).train
        },
        ..spec(32, 2)
    };
    let recomputed = finetune_cpu(&recomputed, &mut |_| Control::Continue).unwrap();
    // The same dropout masks, so the same losses and accuracies, exactly.
    let learned = |out: &trainer::finetune::FinetuneOutcome| {
        let epochs = out.report.epochs.iter();
        epochs
            .map(|e| (e.train_loss, e.valid.clone(), e.steps))
            .collect::<Vec<_>>()
    };
    assert_eq!(learned(&recomputed), learned(&kept));
    assert!(
        recomputed.peak_bytes < kept.peak_bytes,
        "{} vs {}",
        recomputed.peak_bytes,
        kept.peak_bytes
    );
}

#[test]
fn what_deberta_cannot_do_is_a_clear_error() {
    let hidden = FinetuneSpec {
        head_hidden: vec![8],
        ..spec(32, 1)
    };
    let err = finetune_cpu(&hidden, &mut |_| Control::Continue).unwrap_err();
    assert!(err.to_string().contains("hidden head layers"), "{err}");

    // A run that keeps its model (to export it) keeps the DeBERTa one.
    let trained = finetune_cpu_trained(&spec(32, 1), &mut |_| Control::Continue).unwrap();
    assert_eq!(trained.model.model_config(), ModelConfig::from(config()));

    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![4],
    };
    assert!(ModelConfig::from(config()).check_head(&head).is_err());
}

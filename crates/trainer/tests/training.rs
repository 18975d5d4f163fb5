//! The training loop on tiny models: it learns, it is deterministic across
//! runs and thread counts, accumulation equals a big batch, the observer and
//! early stopping stop it, bad labels are refused before any kernel runs.

mod common;

use common::{Rand, time_seed};
use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::model::{BatchError, BertClassifier, HeadConfig};
use trainer::train::{
    Control, EpochMetrics, OptimizerConfig, StepContext, TrainConfig, TrainError, train, train_step,
};

const VOCAB: usize = 20;
const MARK: u32 = 3;

/// Label 1 iff the marker token occurs; variable lengths with padding.
fn marker_batches(seed: u64, n_batches: usize, batch: usize, seq: usize) -> Vec<Batch> {
    let mut r = Rand::new(seed, 7);
    (0..n_batches)
        .map(|_| {
            let mut b = Batch {
                batch,
                seq,
                input_ids: vec![0; batch * seq],
                token_type_ids: vec![0; batch * seq],
                attention_mask: vec![0; batch * seq],
                labels: vec![0; batch],
            };
            for i in 0..batch {
                let len = 3 + r.below(seq - 2);
                let label = r.below(2);
                for t in 0..len {
                    b.attention_mask[i * seq + t] = 1;
                    b.input_ids[i * seq + t] = if t == 0 {
                        1
                    } else {
                        4 + r.below(VOCAB - 4) as u32
                    };
                }
                if label == 1 {
                    b.input_ids[i * seq + 1 + r.below(len - 1)] = MARK;
                }
                b.labels[i] = label;
            }
            b
        })
        .collect()
}

fn tiny() -> (BertConfig, HeadConfig) {
    (
        BertConfig::tiny(32, 2, 4, 64, VOCAB),
        HeadConfig {
            num_labels: 2,
            hidden: vec![16],
        },
    )
}

fn config(seed: u64) -> TrainConfig {
    TrainConfig {
        epochs: 8,
        lr: 2e-3,
        warmup_ratio: 0.1,
        seed,
        ..TrainConfig::default()
    }
}

fn run(seed: u64, cfg: &TrainConfig) -> Vec<EpochMetrics> {
    let be = CpuBackend::<f32>::new();
    let (c, h) = tiny();
    let mut model = BertClassifier::new_random(&be, &c, &h, seed).unwrap();
    let train_set = marker_batches(seed, 16, 8, 10);
    let valid = marker_batches(seed ^ 1, 4, 16, 10);
    train(&be, &mut model, &train_set, &valid, cfg, &mut |_| {
        Control::Continue
    })
    .unwrap()
    .epochs
}

#[test]
fn learns_a_marker_task_and_is_deterministic_across_thread_counts() {
    let seed = time_seed();
    let cfg = config(seed);
    let in_pool = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| run(seed, &cfg))
    };
    let one = in_pool(1);
    let two = in_pool(2);
    assert_eq!(
        one,
        two.iter()
            .map(|e| EpochMetrics {
                seconds: one[e.epoch].seconds,
                ..e.clone()
            })
            .collect::<Vec<_>>(),
        "seed {seed}"
    );
    let last = one.last().unwrap();
    assert!(
        last.valid.accuracy >= 0.9,
        "accuracy {} (seed {seed}): {one:#?}",
        last.valid.accuracy
    );
    assert!(last.train_loss < one[0].train_loss, "seed {seed}");
}

#[test]
fn accumulation_equals_one_big_batch() {
    let seed = time_seed();
    let be = CpuBackend::<f64>::new();
    let (mut c, h) = tiny();
    c.hidden_dropout_prob = 0.0;
    c.attention_probs_dropout_prob = 0.0;
    let parts = marker_batches(seed, 2, 4, 9);
    let mut whole = parts[0].clone();
    whole.batch = 8;
    whole.input_ids.extend_from_slice(&parts[1].input_ids);
    whole
        .token_type_ids
        .extend_from_slice(&parts[1].token_type_ids);
    whole
        .attention_mask
        .extend_from_slice(&parts[1].attention_mask);
    whole.labels.extend_from_slice(&parts[1].labels);
    let weights = [0.8, 1.7];
    let mut after = Vec::new();
    for micro in [vec![&parts[0], &parts[1]], vec![&whole]] {
        let mut model = BertClassifier::new_random(&be, &c, &h, seed).unwrap();
        let mut ctx = StepContext::new(
            &be,
            &mut model,
            OptimizerConfig::Sgd,
            Some(&weights),
            Some(0.5),
            false,
            seed,
        );
        train_step(&be, &mut model, &mut ctx, &micro, 0.1).unwrap();
        after.push(
            model
                .params
                .values
                .iter()
                .flat_map(|v| v.data.clone())
                .collect::<Vec<f64>>(),
        );
    }
    let err = common::rel_err(&after[0], &after[1]);
    assert!(
        err < 1e-12,
        "accumulated vs whole batch differ by {err:e} (seed {seed})"
    );
}

#[test]
fn observer_and_patience_stop_training() {
    let seed = time_seed();
    let cfg = TrainConfig {
        epochs: 5,
        ..config(seed)
    };
    let be = CpuBackend::<f32>::new();
    let (c, h) = tiny();
    let data = marker_batches(seed, 2, 4, 8);
    let mut model = BertClassifier::new_random(&be, &c, &h, seed).unwrap();
    let mut seen = Vec::new();
    let report = train(&be, &mut model, &data, &data, &cfg, &mut |m| {
        seen.push(m.epoch);
        if m.epoch == 1 {
            Control::Stop
        } else {
            Control::Continue
        }
    })
    .unwrap();
    assert_eq!(seen, vec![0, 1]);
    assert!(report.stopped_by_observer && report.epochs.len() == 2);

    // Learning rate 0: nothing improves, so patience 2 stops after epoch 2.
    let frozen = TrainConfig {
        lr: 0.0,
        patience: Some(2),
        ..cfg
    };
    let report = train(&be, &mut model, &data, &data, &frozen, &mut |_| {
        Control::Continue
    })
    .unwrap();
    assert!(report.early_stopped, "{report:?}");
    assert_eq!(report.epochs.len(), 3);
    assert_eq!(report.best_epoch, 0);
}

#[test]
fn bad_labels_and_ids_are_refused_before_training() {
    let be = CpuBackend::<f32>::new();
    let (c, h) = tiny();
    let mut model = BertClassifier::new_random(&be, &c, &h, 1).unwrap();
    let before: Vec<f32> = model.params.values[0].data.clone();
    let mut data = marker_batches(1, 3, 4, 8);
    data[2].labels[3] = 2;
    let err = train(&be, &mut model, &data, &data[..1], &config(1), &mut |_| {
        Control::Continue
    })
    .unwrap_err();
    assert_eq!(
        err,
        TrainError::TrainBatch {
            index: 2,
            source: BatchError::LabelOutOfRange {
                label: 2,
                row: 3,
                classes: 2
            }
        }
    );
    data[2].labels[3] = 1;
    data[1].input_ids[5] = VOCAB as u32;
    let err = train(&be, &mut model, &data, &data[..1], &config(1), &mut |_| {
        Control::Continue
    })
    .unwrap_err();
    assert!(err.to_string().contains("input_ids"), "{err}");
    assert_eq!(model.params.values[0].data, before, "nothing trained");
    let bad_weights = TrainConfig {
        class_weights: Some(vec![1.0]),
        ..config(1)
    };
    data[1].input_ids[5] = 1;
    assert!(matches!(
        train(&be, &mut model, &data, &data, &bad_weights, &mut |_| {
            Control::Continue
        }),
        Err(TrainError::Config(_))
    ));
}

#[test]
fn hyperparameters_out_of_range_are_refused_by_name_before_training() {
    let be = CpuBackend::<f32>::new();
    let (c, h) = tiny();
    let mut model = BertClassifier::new_random(&be, &c, &h, 1).unwrap();
    let before = model.params.values[0].data.clone();
    let data = marker_batches(1, 2, 4, 8);
    let adamw = |beta1: f64, beta2: f64, eps: f64, weight_decay: f64| TrainConfig {
        optimizer: OptimizerConfig::AdamW {
            beta1,
            beta2,
            eps,
            weight_decay,
        },
        ..config(1)
    };
    let cases = [
        (
            "lr",
            TrainConfig {
                lr: f64::NAN,
                ..config(1)
            },
        ),
        (
            "lr",
            TrainConfig {
                lr: -1e-5,
                ..config(1)
            },
        ),
        (
            "warmup_ratio",
            TrainConfig {
                warmup_ratio: 1.5,
                ..config(1)
            },
        ),
        (
            "warmup_ratio",
            TrainConfig {
                warmup_ratio: f64::NAN,
                ..config(1)
            },
        ),
        (
            "max_grad_norm",
            TrainConfig {
                max_grad_norm: Some(0.0),
                ..config(1)
            },
        ),
        (
            "max_grad_norm",
            TrainConfig {
                max_grad_norm: Some(f64::INFINITY),
                ..config(1)
            },
        ),
        ("beta1", adamw(1.0, 0.999, 1e-8, 0.01)),
        ("beta2", adamw(0.9, -0.1, 1e-8, 0.01)),
        ("eps", adamw(0.9, 0.999, 0.0, 0.01)),
        ("weight_decay", adamw(0.9, 0.999, 1e-8, f64::NAN)),
    ];
    for (field, cfg) in cases {
        let err = train(&be, &mut model, &data, &data, &cfg, &mut |_| {
            Control::Continue
        })
        .unwrap_err();
        assert!(
            matches!(&err, TrainError::Config(m) if m.starts_with(&format!("{field} = "))),
            "{field}: {err}"
        );
    }
    assert_eq!(model.params.values[0].data, before, "nothing trained");
    // The edges of each range are accepted: no warm-up, all warm-up, no
    // clipping, no decay, a zero learning rate.
    let edges = TrainConfig {
        epochs: 1,
        lr: 0.0,
        warmup_ratio: 1.0,
        max_grad_norm: None,
        ..adamw(0.0, 0.0, 1e-8, 0.0)
    };
    train(&be, &mut model, &data, &data, &edges, &mut |_| {
        Control::Continue
    })
    .unwrap();
}

#[test]
fn a_validation_loss_that_is_not_finite_is_divergence() {
    // One optimiser step an epoch at a learning rate no f32 weight
    // survives: the step's own loss is finite (the forward pass ran before
    // the update), the evaluation after it is not.
    let be = CpuBackend::<f32>::new();
    let (c, h) = tiny();
    let mut model = BertClassifier::new_random(&be, &c, &h, 1).unwrap();
    let data = marker_batches(1, 1, 4, 8);
    let cfg = TrainConfig {
        epochs: 2,
        lr: 1e39,
        warmup_ratio: 0.0,
        ..config(1)
    };
    let mut observed = 0;
    let err = train(&be, &mut model, &data, &data, &cfg, &mut |_| {
        observed += 1;
        Control::Continue
    })
    .unwrap_err();
    assert!(
        matches!(err, TrainError::ValidationDiverged { epoch: 0, loss } if !loss.is_finite()),
        "{err:?}"
    );
    assert!(err.to_string().contains("diverged"), "{err}");
    assert_eq!(
        observed, 0,
        "an epoch without a finite loss is not reported"
    );
}

#[test]
fn weight_decay_skips_biases_and_layernorm() {
    let be = CpuBackend::<f32>::new();
    let (c, h) = tiny();
    let model = BertClassifier::new_random(&be, &c, &h, 1).unwrap();
    for info in &model.params.info {
        let no_decay = info.name.ends_with(".bias") || info.name.contains("LayerNorm");
        assert_eq!(info.decay, !no_decay, "{}", info.name);
    }
    // With a zero gradient, AdamW only decays the decayed tensors.
    let mut model = model;
    let before: Vec<Vec<f32>> = model.params.values.iter().map(|v| v.data.clone()).collect();
    model.alloc_grads(&be);
    let mut opt = trainer::train::Optimizer::new(&be, &model.params, OptimizerConfig::default());
    opt.step(&be, &mut model.params, 0.5, None);
    for (i, info) in model.params.info.iter().enumerate() {
        let factor = if info.decay { 1.0 - 0.5 * 0.01 } else { 1.0 };
        let want: Vec<f32> = before[i].iter().map(|v| v * factor).collect();
        assert_eq!(model.params.values[i].data, want, "{}", info.name);
    }
}

/// Random weights (a preset, or a head a checkpoint lacks) are drawn from
/// normal(0, `initializer_range`), as HF's `_init_weights` draws them.
#[test]
fn random_weights_follow_the_config_s_initializer_range() {
    let be = CpuBackend::<f64>::new();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    for range in [0.02, 0.2] {
        let config = BertConfig {
            initializer_range: range,
            ..BertConfig::tiny(64, 1, 4, 128, 500)
        };
        let model = BertClassifier::new_random(&be, &config, &head, 1).unwrap();
        let i = model.params.index_of("pooler.dense.weight").unwrap();
        let w = &model.params.values[i].data;
        let std = (w.iter().map(|x| x * x).sum::<f64>() / w.len() as f64).sqrt();
        assert!((std / range - 1.0).abs() < 0.1, "{range}: {std}");
    }
}

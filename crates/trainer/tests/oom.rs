//! Out-of-memory handling: the tracker's limit and fault injection unwind
//! with `OutOfMemory`, `catch_oom` turns that (and only that) into an error,
//! and `train` retries a step that ran out of memory with half the
//! micro-batch, computing the same loss.

mod common;

use common::{Rand, random_batch};
use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::memory::{BufKind, MemTracker, OutOfMemory, catch_oom};
use trainer::model::{BertClassifier, HeadConfig};
use trainer::train::{Control, TrainConfig, TrainError, TrainReport, train};

const VOCAB: usize = 30;

fn tiny() -> (BertConfig, HeadConfig) {
    let mut c = BertConfig::tiny(16, 2, 2, 32, VOCAB);
    // Dropout masks are keyed per micro-batch, so only without dropout does
    // a split step compute exactly the same thing.
    c.hidden_dropout_prob = 0.0;
    c.attention_probs_dropout_prob = 0.0;
    (
        c,
        HeadConfig {
            num_labels: 2,
            hidden: vec![8],
        },
    )
}

fn batches(seed: u64, sizes: &[usize], seq: usize) -> Vec<Batch> {
    let mut r = Rand::new(seed, 3);
    sizes
        .iter()
        .map(|&n| {
            let lens: Vec<usize> = (0..n).map(|_| 2 + r.below(seq - 1)).collect();
            random_batch(&mut r, &lens, seq, VOCAB, 2)
        })
        .collect()
}

fn cfg() -> TrainConfig {
    TrainConfig {
        epochs: 2,
        lr: 1e-3,
        shuffle: false,
        ..TrainConfig::default()
    }
}

/// Trains a fresh model on `be`; returns the report and the tracker's peak.
fn run(
    be: &CpuBackend<f64>,
    train_set: &[Batch],
    valid: &[Batch],
    cfg: &TrainConfig,
    limit: Option<usize>,
    fail_nth: Option<u64>,
) -> Result<TrainReport, TrainError> {
    let (c, h) = tiny();
    let mut model = BertClassifier::new_random(be, &c, &h, 7).unwrap();
    be.tracker().reset_peak();
    be.tracker().set_limit(limit);
    if let Some(n) = fail_nth {
        be.tracker().fail_nth_allocation(n);
    }
    let result = train(be, &mut model, train_set, valid, cfg, &mut |_| {
        Control::Continue
    });
    be.tracker().set_limit(None);
    be.tracker().clear_injected_fault();
    result
}

#[test]
fn tracker_limit_and_injection_refuse_with_details() {
    let t = MemTracker::new(false);
    t.set_limit(Some(100));
    let a = t.allocate("a", BufKind::Weight, 60);
    let e = t.try_allocate("b", BufKind::Activation, 41).unwrap_err();
    assert_eq!(
        e,
        OutOfMemory {
            requested: 41,
            live: 60,
            limit: 100,
            buffer: "b".into(),
            injected: false,
            allocator: None,
        }
    );
    assert!(e.to_string().contains("`b`"), "{e}");
    let b = t.try_allocate("b", BufKind::Activation, 40).unwrap();
    drop((a, b));
    assert_eq!(t.live_bytes(), 0);

    t.set_limit(None);
    t.fail_nth_allocation(2);
    let _x = t.allocate("x", BufKind::Input, 1);
    let e = t.try_allocate("y", BufKind::Input, 1).unwrap_err();
    assert!(e.injected && e.buffer == "y", "{e:?}");
    assert!(e.to_string().starts_with("injected"), "{e}");
    // Once only.
    assert!(t.try_allocate("y", BufKind::Input, 1).is_ok());
}

#[test]
fn catch_oom_catches_only_out_of_memory() {
    let t = MemTracker::new(false);
    t.set_limit(Some(10));
    let err = catch_oom(|| t.allocate("big", BufKind::Workspace, 11)).unwrap_err();
    assert_eq!(err.requested, 11);
    assert_eq!(t.live_bytes(), 0);
    assert_eq!(catch_oom(|| 5).unwrap(), 5);
    let other = std::panic::catch_unwind(|| catch_oom(|| panic!("a real bug")));
    let payload = other.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"a real bug"));
}

#[test]
fn limit_below_the_weights_fails_at_construction() {
    let (c, h) = tiny();
    let be = CpuBackend::<f32>::new();
    let weights = {
        let _model = BertClassifier::new_random(&be, &c, &h, 0).unwrap();
        be.tracker().live_bytes()
    };
    be.tracker().set_limit(Some(weights - 1));
    let Err(e) = catch_oom(|| BertClassifier::new_random(&be, &c, &h, 0)) else {
        panic!("the weights fit a limit below them");
    };
    assert!(!e.injected && e.limit == weights - 1, "{e:?}");
    assert_eq!(
        be.tracker().live_bytes(),
        0,
        "the unwind freed every weight"
    );
    be.tracker().set_limit(Some(weights));
    assert!(catch_oom(|| BertClassifier::new_random(&be, &c, &h, 0)).is_ok());
}

#[test]
fn oom_step_is_retried_with_half_the_micro_batch_and_same_loss() {
    let train_set = batches(1, &[8, 8, 8], 6);
    let valid = batches(2, &[2], 6);
    let halves: Vec<Batch> = train_set.iter().flat_map(|b| b.split(2)).collect();
    let halves_cfg = TrainConfig {
        accumulation_steps: 2,
        ..cfg()
    };

    let be = CpuBackend::<f64>::new();
    let full = run(&be, &train_set, &valid, &cfg(), None, None).unwrap();
    let peak8 = be.tracker().peak_bytes();
    let split = run(&be, &halves, &valid, &halves_cfg, None, None).unwrap();
    let peak4 = be.tracker().peak_bytes();
    assert!(peak4 < peak8, "{peak4} vs {peak8}");
    assert!(full.oom_retries.is_empty() && full.micro_batch == 8);

    let limited = run(
        &be,
        &train_set,
        &valid,
        &cfg(),
        Some((peak4 + peak8) / 2),
        None,
    )
    .unwrap();
    assert_eq!(limited.micro_batch, 4);
    assert_eq!(limited.oom_retries.len(), 1, "{:?}", limited.oom_retries);
    let retry = &limited.oom_retries[0];
    assert_eq!(
        (retry.step, retry.from_micro_batch, retry.to_micro_batch),
        (0, 8, 4)
    );
    assert!(!retry.during_evaluation && !retry.error.injected);
    assert!(be.tracker().peak_bytes() <= (peak4 + peak8) / 2);
    assert_eq!(limited.steps, full.steps);
    for (a, b) in limited.epochs.iter().zip(&full.epochs) {
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(1.0);
        assert!(close(a.train_loss, b.train_loss), "{a:?}\n{b:?}");
        assert!(close(a.valid.loss, b.valid.loss), "{a:?}\n{b:?}");
    }
    // The pre-split run is the same computation too.
    assert_eq!(split.epochs.len(), full.epochs.len());

    // A limit that not even one example fits is reported at micro-batch 1.
    let e = run(
        &be,
        &train_set,
        &valid,
        &cfg(),
        Some(weights_and_state(&be)),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(e, TrainError::OutOfMemory { micro_batch: 1, .. }),
        "{e:?}"
    );
}

/// Bytes of weights, gradients and AdamW state of the tiny model (what is
/// live before the first step).
fn weights_and_state(be: &CpuBackend<f64>) -> usize {
    let (c, h) = tiny();
    let m = BertClassifier::new_random(be, &c, &h, 7).unwrap();
    m.num_parameters() * 8 * 4
}

#[test]
fn injected_oom_at_every_allocation_recovers_or_reports() {
    // One step of 3 rows, one of 1 row, then evaluation.
    let train_set = batches(3, &[3, 1], 5);
    let valid = batches(4, &[2], 5);
    let cfg = TrainConfig { epochs: 1, ..cfg() };
    let be = CpuBackend::<f64>::new();
    let clean = run(&be, &train_set, &valid, &cfg, None, None).unwrap();
    let (c, h) = tiny();
    let model = BertClassifier::new_random(&be, &c, &h, 7).unwrap();
    let before = be.tracker().allocation_requests();
    let mut model = model;
    train(&be, &mut model, &train_set, &valid, &cfg, &mut |_| {
        Control::Continue
    })
    .unwrap();
    let per_run = be.tracker().allocation_requests() - before;
    drop(model);
    assert!(per_run > 50, "{per_run}");

    let (mut recovered, mut at_setup, mut at_one) = (0, 0, 0);
    for n in 1..=per_run {
        match run(&be, &train_set, &valid, &cfg, None, Some(n)) {
            Ok(report) => {
                assert_eq!(report.oom_retries.len(), 1, "fault {n}");
                assert!(report.oom_retries[0].error.injected);
                assert_eq!(report.steps, clean.steps);
                assert!(report.epochs[0].valid.loss.is_finite());
                recovered += 1;
            }
            Err(TrainError::OutOfMemory {
                micro_batch: 0,
                error,
            }) => {
                assert!(error.injected);
                at_setup += 1;
            }
            Err(TrainError::OutOfMemory {
                micro_batch: 1,
                error,
            }) => {
                assert!(error.injected);
                at_one += 1;
            }
            Err(e) => panic!("fault {n}: {e}"),
        }
        assert_eq!(be.tracker().live_bytes(), 0, "fault {n} leaked");
    }
    assert!(
        recovered > 0 && at_setup > 0 && at_one > 0,
        "{recovered} {at_setup} {at_one}"
    );
    assert_eq!(recovered + at_setup + at_one, per_run as usize);
}

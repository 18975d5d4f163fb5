//! Out-of-memory handling: the tracker's limit refuses with `OutOfMemory`,
//! the backend records it and skips the rest of the step, `take_failure`
//! hands it over with its figures, and `train` retries a step that ran out
//! of memory with half the micro-batch, computing the same loss. Injected
//! faults (`FaultyBackend`) take the same path.

mod common;

use common::{Rand, random_batch};
use trainer::backend::cpu::CpuBackend;
use trainer::backend::faulty::FaultyBackend;
use trainer::backend::{Backend, Failure, Kernels, MatmulPrecision};
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::memory::{BufKind, MemTracker, OutOfMemory};
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

type Faulty = FaultyBackend<CpuBackend<f64>>;

/// Trains a fresh model on `be`; returns the report and the tracker's peak.
fn run(
    be: &Faulty,
    train_set: &[Batch],
    valid: &[Batch],
    cfg: &TrainConfig,
    limit: Option<usize>,
    fail_nth: Option<u64>,
) -> Result<TrainReport, TrainError> {
    let (c, h) = tiny();
    let mut model = BertClassifier::new_random(be, &c, &h, 7).unwrap();
    let tracker = be.inner().tracker();
    tracker.reset_peak();
    tracker.set_limit(limit);
    if let Some(n) = fail_nth {
        be.fail_nth_allocation(n);
    }
    let result = train(be, &mut model, train_set, valid, cfg, &mut |_| {
        Control::Continue
    });
    tracker.set_limit(None);
    result
}

#[test]
fn the_tracker_limit_refuses_with_details() {
    let t = MemTracker::new(false);
    t.set_limit(Some(100));
    let a = t.allocate("a", BufKind::Weight, 60).unwrap();
    let e = t.allocate("b", BufKind::Activation, 41).unwrap_err();
    assert_eq!(
        e,
        OutOfMemory {
            requested: 41,
            live: 60,
            limit: 100,
            buffer: "b".into(),
            allocator: None,
        }
    );
    assert_eq!(
        e.to_string(),
        "out of memory allocating `b` (41 bytes, 0.0 MiB) with 60 bytes (0.0 MiB) live of a \
         100 byte (0.0 MiB) limit"
    );
    let b = t.allocate("b", BufKind::Activation, 40).unwrap();
    drop((a, b));
    assert_eq!(t.live_bytes(), 0);
    assert_eq!(t.allocation_requests(), 3);
}

#[test]
fn a_refused_allocation_is_a_recorded_value_with_its_figures() {
    let be = CpuBackend::<f32>::new();
    be.tracker().set_limit(Some(4096));
    let mut kept = be.alloc("kept", BufKind::Weight, 512);
    be.fill(&mut kept, 1.5);
    assert!(!be.failed());
    // 512 floats live (2048 bytes); 600 more (2400 bytes) pass the limit.
    let mut refused = be.alloc("too big", BufKind::Activation, 600);
    assert!(be.failed());
    assert_eq!(be.len(&refused), 600);
    assert_eq!(be.tracker().live_bytes(), 2048, "nothing was charged");
    // Every operation is skipped and reads back as NaN until it is taken,
    // the buffer that fits included.
    be.fill(&mut refused, 2.0);
    be.scale(&mut kept, 2.0);
    assert!(be.download(&refused).iter().all(|v| v.is_nan()));
    assert!(be.sum_squares(&kept).is_nan());
    let later = be.alloc("later", BufKind::Workspace, 1);
    assert_eq!(be.tracker().allocation_requests(), 2, "not even tried");
    drop(later);
    match be.take_failure() {
        Err(Failure::OutOfMemory(e)) => assert_eq!(
            e,
            OutOfMemory {
                requested: 2400,
                live: 2048,
                limit: 4096,
                buffer: "too big".into(),
                allocator: None,
            },
            "{e}"
        ),
        other => panic!("expected the refusal, got {other:?}"),
    }
    // Taken: the backend works again, and the skipped scale never ran.
    assert!(!be.failed() && be.take_failure().is_ok());
    assert_eq!(be.download(&kept), vec![1.5; 512]);
    drop(refused);
    assert_eq!(be.tracker().live_bytes(), 2048);
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
    let model = BertClassifier::new_random(&be, &c, &h, 0).unwrap();
    drop(model);
    let Err(Failure::OutOfMemory(e)) = be.take_failure() else {
        panic!("the weights fit a limit below them");
    };
    assert_eq!(e.limit, weights - 1, "{e:?}");
    assert_eq!(be.tracker().live_bytes(), 0, "every weight was freed");
    be.tracker().set_limit(Some(weights));
    let _model = BertClassifier::new_random(&be, &c, &h, 0).unwrap();
    assert!(be.take_failure().is_ok());
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

    let be = FaultyBackend::new(CpuBackend::<f64>::new());
    let tracker = be.inner().tracker();
    let full = run(&be, &train_set, &valid, &cfg(), None, None).unwrap();
    let peak8 = tracker.peak_bytes();
    let split = run(&be, &halves, &valid, &halves_cfg, None, None).unwrap();
    let peak4 = tracker.peak_bytes();
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
    assert!(!retry.during_evaluation);
    assert_eq!(retry.error.limit, (peak4 + peak8) / 2);
    assert!(tracker.peak_bytes() <= (peak4 + peak8) / 2);
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
        Some(weights_and_state(be.inner())),
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
    every_injected_oom_recovers_or_reports(FaultyBackend::new(CpuBackend::<f64>::new()));
}

/// The fused step, whose word-embedding gradient is allocated at each
/// step's start (row-sparse), recovers the same way.
#[test]
fn injected_oom_at_every_allocation_of_the_fused_step_recovers_or_reports() {
    let cpu = CpuBackend::<f64>::new().for_step(MatmulPrecision::Fp32, Kernels::Fused);
    every_injected_oom_recovers_or_reports(FaultyBackend::new(cpu));
}

fn every_injected_oom_recovers_or_reports(be: Faulty) {
    // One step of 3 rows, one of 1 row, then evaluation.
    let train_set = batches(3, &[3, 1], 5);
    let valid = batches(4, &[2], 5);
    let cfg = TrainConfig { epochs: 1, ..cfg() };
    let clean = run(&be, &train_set, &valid, &cfg, None, None).unwrap();
    let (c, h) = tiny();
    let model = BertClassifier::new_random(&be, &c, &h, 7).unwrap();
    let before = be.allocation_requests();
    let mut model = model;
    train(&be, &mut model, &train_set, &valid, &cfg, &mut |_| {
        Control::Continue
    })
    .unwrap();
    let per_run = be.allocation_requests() - before;
    drop(model);
    assert!(per_run > 50, "{per_run}");

    let (mut recovered, mut at_setup, mut at_one) = (0, 0, 0);
    for n in 1..=per_run {
        match run(&be, &train_set, &valid, &cfg, None, Some(n)) {
            Ok(report) => {
                assert_eq!(report.oom_retries.len(), 1, "fault {n}");
                let e = &report.oom_retries[0].error;
                assert_eq!(e.limit, e.live, "fault {n}: {e}");
                assert_eq!(report.steps, clean.steps);
                assert!(report.epochs[0].valid.loss.is_finite());
                recovered += 1;
            }
            Err(TrainError::OutOfMemory {
                micro_batch: 0,
                error,
            }) => {
                assert_eq!(error.limit, error.live, "fault {n}: {error}");
                at_setup += 1;
            }
            Err(TrainError::OutOfMemory {
                micro_batch: 1,
                error,
            }) => {
                assert_eq!(error.limit, error.live, "fault {n}: {error}");
                at_one += 1;
            }
            Err(e) => panic!("fault {n}: {e}"),
        }
        assert_eq!(be.inner().tracker().live_bytes(), 0, "fault {n} leaked");
        assert!(!be.failed(), "fault {n} left the backend failed");
    }
    assert!(
        recovered > 0 && at_setup > 0 && at_one > 0,
        "{recovered} {at_setup} {at_one}"
    );
    assert_eq!(recovered + at_setup + at_one, per_run as usize);
}

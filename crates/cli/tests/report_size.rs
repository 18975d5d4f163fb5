//! A 1,000-trial study (five parameters, three intermediate values each,
//! the runner's memory attributes on two workers (their start and end
//! times are when the test stores them), some PRUNED and FAIL)
//! gives a report under 5 MB. The time `memtune report` takes is printed,
//! not asserted: `cargo test --release -p cli --test report_size --
//! --nocapture` measures it (docs/benchmarks.md).

mod common;

use std::time::Instant;

use serde_json::json;
use store::{Distribution, Storage, StudyDirection, TrialState};

const TRIALS: i64 = 1000;

fn make_study(db: &std::path::Path) {
    // No fsync per commit: the file only has to outlive this test.
    let opts = store::OpenOptions {
        durability: store::Durability::Normal,
        ..store::OpenOptions::default()
    };
    let storage = Storage::open_with(db, &opts).unwrap();
    let study = storage
        .create_study("big", &[StudyDirection::Maximize])
        .unwrap();
    let lr = Distribution::Float {
        low: 1e-5,
        high: 1e-3,
        log: true,
        step: None,
    };
    let warmup = Distribution::Float {
        low: 0.0,
        high: 0.2,
        log: false,
        step: None,
    };
    let layers = Distribution::Int {
        low: 0,
        high: 3,
        log: false,
        step: 1,
    };
    let batch = Distribution::Categorical {
        choices: vec![8.into(), 16.into(), 32.into(), 64.into()],
    };
    let length = Distribution::Categorical {
        choices: vec![128.into(), 256.into(), 512.into()],
    };
    // Deterministic pseudo-random draws (a multiplicative hash per trial).
    let u = |i: i64, k: u64| {
        ((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15 ^ k) >> 11) as f64 / (1u64 << 53) as f64
    };
    for i in 0..TRIALS {
        let t = storage.create_trial(study.study_id).unwrap();
        let (x_lr, x_w, x_l, x_b, x_len) = (
            1e-5 * 100f64.powf(u(i, 1)),
            0.2 * u(i, 2),
            (u(i, 3) * 4.0).floor().min(3.0),
            (u(i, 4) * 4.0).floor().min(3.0),
            (u(i, 5) * 3.0).floor().min(2.0),
        );
        for (name, v, d) in [
            ("learning_rate", x_lr, &lr),
            ("warmup_ratio", x_w, &warmup),
            ("head_layers", x_l, &layers),
            ("batch_size", x_b, &batch),
            ("max_length", x_len, &length),
        ] {
            storage.set_param(t.trial_id, name, v, d).unwrap();
        }
        let value = 0.9 - (x_lr.log10() + 4.5).powi(2) * 0.05 - x_w * 0.1;
        let attrs = [
            ("device", json!("simulated GPU")),
            ("device_capacity_bytes", json!(24u64 << 30)),
            ("device_usable_bytes", json!(23u64 << 30)),
            ("micro_batch", json!(8 << (x_b as u32 % 2))),
            ("accumulation_steps", json!(1 + x_b as u64 / 2)),
            ("predicted_peak_bytes", json!(((2.0 + x_len) * 1e9) as u64)),
            ("peak_bytes", json!(((2.0 + x_len) * 1e9 * 0.97) as u64)),
            ("lease_bytes", json!(((2.5 + x_len) * 1e9) as u64)),
            ("worker_pid", json!(1000 + i % 2)),
            (
                "config",
                json!({"batch_size": 8 << x_b as u32, "max_length": 128 << x_len as u32}),
            ),
        ];
        for (k, v) in attrs {
            storage.set_trial_user_attr(t.trial_id, k, &v).unwrap();
        }
        for step in 0..3 {
            storage
                .report_intermediate(t.trial_id, step, value - 0.1 / (step + 1) as f64)
                .unwrap();
        }
        let state = match i % 10 {
            7 => TrialState::Pruned,
            9 => {
                storage
                    .set_trial_user_attr(t.trial_id, "error_kind", &json!("error"))
                    .unwrap();
                TrialState::Fail
            }
            _ => TrialState::Complete,
        };
        let values = if state == TrialState::Fail {
            vec![]
        } else {
            vec![value]
        };
        storage.finish(t.trial_id, state, &values).unwrap();
    }
}

#[test]
fn a_thousand_trial_report_is_under_5_mb() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("big.db");
    make_study(&db);
    let page = dir.path().join("big.html");
    let started = Instant::now();
    common::ok(common::memtune(
        &db,
        &["report", "--study", "big", "-o", page.to_str().unwrap()],
    ));
    let took = started.elapsed();
    let bytes = std::fs::metadata(&page).unwrap().len();
    println!(
        "report of {TRIALS} trials: {:.2} s, {:.2} MB",
        took.as_secs_f64(),
        bytes as f64 / 1e6
    );
    assert!(bytes < 5_000_000, "{bytes} bytes");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("Not shown"), "a section was left out");
}

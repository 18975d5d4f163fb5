//! Prices the recorded trials of a CUDA study as the runner does now (the
//! run replayed on a simulated device standing for the CUDA backend), beside
//! what each trial recorded on the device: its predicted, requested and
//! reserved peaks and the allocator limit it had.
//!
//! `cargo run --release -p cli --example price_recorded -- STUDY.db STUDY MODEL_DIR`
//!
//! The trials' model is MODEL_DIR (the study's `[models]` directory), their
//! data the embedded set with the default split, as the GPU bundle's
//! `study` step runs them.

use std::path::PathBuf;

use cli::tune::config::{Metric, TrialSettings};
use cli::tune::pricing::{PricedDevice, Pricer};
use cli::tune::protocol::{Job, ModelSource};
use serde_json::Value as Json;
use store::{OpenOptions, Storage, TrialFilter};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, study, model] = &args[..] else {
        eprintln!("usage: price_recorded STUDY.db STUDY MODEL_DIR");
        std::process::exit(2);
    };
    let opts = OpenOptions {
        create: false,
        read_only: true,
        ..OpenOptions::default()
    };
    let storage = Storage::open_with(db, &opts).unwrap_or_else(|e| fail(&e));
    let study = storage.study(study).unwrap_or_else(|e| fail(&e));
    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap_or_else(|e| fail(&e));
    let mut pricer = Pricer::new(PricedDevice::Cuda {
        expandable_segments: true,
    });
    println!(
        "| trial | batch | len | micro | recorded predicted | recorded requested | replay requested | recorded reserved | replay reserved | allocator limit then | OOM retries |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for t in &trials {
        let attr = |k: &str| t.user_attrs.get(k).cloned().unwrap_or(Json::Null);
        let Ok(settings) = serde_json::from_value::<TrialSettings>(attr("config")) else {
            continue;
        };
        let retries = attr("oom_retries").as_array().map_or(0, Vec::len);
        // The micro-batch the trial was admitted at: before a retry, its
        // first; the record's own otherwise.
        let micro = attr("oom_retries")
            .as_array()
            .and_then(|r| r.first())
            .and_then(|r| r["from_micro_batch"].as_u64())
            .or_else(|| attr("micro_batch").as_u64())
            .unwrap_or(settings.batch_size as u64) as usize;
        let job = Job {
            trial_number: i64::try_from(t.number).unwrap_or(i64::MAX),
            model: ModelSource::Dir {
                path: PathBuf::from(model),
            },
            data: Default::default(),
            validation_fraction: 0.2,
            split_seed: 42,
            metric: Metric::Accuracy,
            micro_batch: micro,
            accumulation_steps: settings.batch_size.div_ceil(micro),
            // Recorded since the runner may recompute; never before.
            recompute: attr("recompute").as_bool().unwrap_or(false),
            settings: settings.clone(),
            memory_limit: None,
            fault: None,
            threads: 0,
            cuda_device: Some(0),
            matmul_precision: Default::default(),
            // Recorded since the kernel sets are selectable; the reference
            // set before.
            kernels: attr("kernels")
                .as_str()
                .and_then(|k| k.parse().ok())
                .unwrap_or_default(),
        };
        let price = pricer.price(&job).unwrap_or_else(|e| fail(&e));
        // The allocator limit such a trial had when the runner priced a
        // step (the plan's peak and a 1% allowance of at least 8 MiB),
        // with the backend's reserved 34 MiB on top.
        let predicted = attr("predicted_peak_bytes").as_u64().unwrap_or(0);
        let limit = predicted + (predicted.div_ceil(100)).max(8 << 20) + (34 << 20);
        println!(
            "| {} | {} | {} | {micro} | {} | {} | {} | {} | {} | {} | {retries} |",
            t.number,
            settings.batch_size,
            settings.max_length,
            attr("predicted_peak_bytes"),
            attr("requested_peak_bytes"),
            price.peak,
            attr("peak_bytes"),
            price.limit,
            limit,
        );
    }
}

fn fail(e: &dyn std::fmt::Display) -> ! {
    eprintln!("price_recorded: {e}");
    std::process::exit(1);
}

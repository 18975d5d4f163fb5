//! Fine-tunes a pretrained model on the embedded Sentiment Labelled
//! Sentences set (seeded 80/20 stratified split) on the CPU and prints each
//! epoch's validation metrics.
//!
//! `cargo run --release -p trainer --example finetune -- MODEL_DIR [EPOCHS]
//! [LR] [MICRO_BATCH] [MAX_LENGTH] [SEED]`

use std::path::PathBuf;
use std::time::Instant;

use trainer::data::{BadRecordPolicy, DataSource};
use trainer::finetune::{FinetuneSpec, finetune_cpu};
use trainer::train::{Control, EpochMetrics, TrainConfig};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    match args.get(i) {
        None => default,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("argument {i} ({s:?}) is not valid");
            std::process::exit(2)
        }),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(model_dir) = args.first().map(PathBuf::from) else {
        eprintln!("usage: finetune MODEL_DIR [EPOCHS] [LR] [MICRO_BATCH] [MAX_LENGTH] [SEED]");
        std::process::exit(2)
    };
    let spec = FinetuneSpec {
        kernels: trainer::backend::Kernels::Reference,
        model_dir,
        data: DataSource::EmbeddedSentiment {
            bad_records: BadRecordPolicy::Skip,
        },
        validation_fraction: 0.2,
        split_seed: 42,
        max_length: arg(&args, 4, 64),
        micro_batch: arg(&args, 3, 32),
        batch_size: None,
        head_hidden: vec![],
        dropout: None,
        memory_limit: None,
        matmul_precision: trainer::backend::MatmulPrecision::Fp32,
        train: TrainConfig {
            epochs: arg(&args, 1, 3),
            lr: arg(&args, 2, 5e-5),
            seed: arg(&args, 5, 0),
            ..TrainConfig::default()
        },
    };
    eprintln!("{spec:?}");
    let start = Instant::now();
    let mut observer = |m: &EpochMetrics| {
        println!(
            "epoch {} train_loss {:.4} valid_loss {:.4} accuracy {:.4} f1_macro {:.4} ({:.0} s)",
            m.epoch,
            m.train_loss,
            m.valid.loss,
            m.valid.accuracy,
            m.valid.f1_macro,
            start.elapsed().as_secs_f64()
        );
        Control::Continue
    };
    match finetune_cpu(&spec, &mut observer) {
        Ok(out) => {
            let best = &out.report.epochs[out.report.best_epoch];
            println!(
                "best epoch {}: validation accuracy {:.4} on {} examples ({} train; {} records skipped)",
                best.epoch,
                best.valid.accuracy,
                out.validation_examples,
                out.train_examples,
                out.skipped_records.len()
            );
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    }
}

//! `testing::write_tiny_model` produces a model directory the whole
//! `finetune_cpu` path reads (config, vocab.txt tokenizer, safetensors), and
//! a fine-tune on it is fast, learns, honours the memory limit, fault
//! injection and the dropout override.

use std::time::Instant;

use trainer::backend::faulty::Faults;
use trainer::config::BertConfig;
use trainer::data::{DataSource, LoadOptions};
use trainer::finetune::{FinetuneError, FinetuneSpec, finetune_cpu, finetune_cpu_with_faults};
use trainer::testing::{sentiment_words, tiny_config, write_tiny_model};
use trainer::tokenize::TextTokenizer;
use trainer::train::{Control, TrainConfig};

mod common;

fn spec(dir: &std::path::Path, data: DataSource) -> FinetuneSpec {
    common::tiny_finetune_spec(dir, data)
}

fn embedded() -> DataSource {
    common::embedded()
}

#[test]
fn tiny_model_directory_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_tiny_model(
        dir.path(),
        &tiny_config(),
        &["Great", "movie", "great", ""],
        3,
    )
    .unwrap();
    assert_eq!(written.vocab_size, 5 + 2);
    let read = BertConfig::from_file(dir.path().join("config.json")).unwrap();
    assert_eq!(read, written);
    let tok = TextTokenizer::from_model_dir(dir.path(), 16).unwrap();
    tok.check_model(read.vocab_size, read.max_sequence())
        .unwrap();
    let enc = tok.encode("great movie, terrible", None).unwrap();
    let great = tok.token_id("great").unwrap();
    assert!(enc.ids.contains(&great), "{:?}", enc.ids);
    let tensors = trainer::weights::load_safetensors(dir.path().join("model.safetensors")).unwrap();
    assert!(tensors.contains_key("encoder.layer.1.output.LayerNorm.weight"));
    assert!(!tensors.keys().any(|k| k.starts_with("classifier")));
}

#[test]
fn tiny_model_finetunes_the_embedded_set_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let words = sentiment_words(600);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    write_tiny_model(dir.path(), &tiny_config(), &words, 5).unwrap();
    let start = Instant::now();
    let mut epochs = 0;
    let out = finetune_cpu(&spec(dir.path(), embedded()), &mut |m| {
        eprintln!(
            "epoch {} {:.2} s at {:.2} s",
            m.epoch,
            m.seconds,
            start.elapsed().as_secs_f64()
        );
        epochs += 1;
        Control::Continue
    })
    .unwrap();
    let seconds = start.elapsed().as_secs_f64();
    let best = &out.report.epochs[out.report.best_epoch].valid;
    eprintln!(
        "tiny fine-tune: {epochs} epochs in {seconds:.2} s, best accuracy {:.3}",
        best.accuracy
    );
    assert_eq!(epochs, 3);
    assert_eq!(out.train_examples + out.validation_examples, 3000);
    // Random weights, 600 words, 3 epochs: well above chance.
    assert!(best.accuracy > 0.65, "{:?}", out.report.epochs);
    assert!(out.peak_bytes > 0 && out.report.oom_retries.is_empty());
}

#[test]
fn memory_limit_fault_injection_and_dropout_reach_the_run() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_model(dir.path(), &tiny_config(), &["good", "bad", "film"], 2).unwrap();
    let csv = dir.path().join("data.csv");
    let mut rows = String::from("text,label\n");
    for i in 0..40 {
        let (w, l) = if i % 2 == 0 { ("good", 1) } else { ("bad", 0) };
        rows.push_str(&format!("a {w} film number {i},{l}\n"));
    }
    std::fs::write(&csv, rows).unwrap();
    let data = DataSource::Files {
        paths: vec![csv],
        options: LoadOptions::new(2),
    };
    let base = FinetuneSpec {
        micro_batch: 8,
        train: TrainConfig {
            epochs: 1,
            ..spec(dir.path(), data.clone()).train
        },
        ..spec(dir.path(), data)
    };
    let clean = finetune_cpu(&base, &mut |_| Control::Continue).unwrap();

    // A lease below the weights: out of memory while building the model.
    let e = finetune_cpu(
        &FinetuneSpec {
            memory_limit: Some(1000),
            ..base.clone()
        },
        &mut |_| Control::Continue,
    )
    .unwrap_err();
    assert!(
        matches!(e, FinetuneError::OutOfMemory { micro_batch: 0, .. }),
        "{e}"
    );
    assert!(e.out_of_memory().is_some_and(|o| o.limit == 1000));

    // An injected fault late in the run is recovered by halving.
    let faults = Faults {
        fail_nth_allocation: Some(clean.allocation_requests * 3 / 4),
        ..Faults::default()
    };
    let out = finetune_cpu_with_faults(&base, &faults, &mut |_| Control::Continue).unwrap();
    assert_eq!(out.report.oom_retries.len(), 1, "{:?}", out.report);
    let injected = &out.report.oom_retries[0].error;
    assert_eq!(injected.limit, injected.live, "{injected}");
    assert_eq!(out.report.micro_batch, 4);

    // Dropout override: validated, and it changes the run.
    let e = finetune_cpu(
        &FinetuneSpec {
            dropout: Some(1.0),
            ..base.clone()
        },
        &mut |_| Control::Continue,
    )
    .unwrap_err();
    assert!(e.to_string().contains("dropout"), "{e}");
    let no_dropout = finetune_cpu(
        &FinetuneSpec {
            dropout: Some(0.0),
            ..base.clone()
        },
        &mut |_| Control::Continue,
    )
    .unwrap();
    assert_ne!(
        no_dropout.report.epochs[0].train_loss,
        clean.report.epochs[0].train_loss
    );
}

//! Prints the trainer's seeded stratified split of the embedded data set,
//! one line per loaded example in load order: `index label characters side`
//! (side is `train` or `validation`). benches/reference/hf_finetune.py reads
//! it with `--split FILE` so the PyTorch reference trains and validates on
//! exactly our sentences.
//!
//! `cargo run --release -p trainer --example split_dump -- [FRACTION] [SEED] > split.txt`

use trainer::data::{BadRecordPolicy, DataSource, stratified_split};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fraction: f64 = args
        .first()
        .map_or(Ok(0.2), |s| s.parse())
        .unwrap_or_else(|_| {
            eprintln!("FRACTION must be a number in (0, 1)");
            std::process::exit(2)
        });
    let seed: u64 = args
        .get(1)
        .map_or(Ok(42), |s| s.parse())
        .unwrap_or_else(|_| {
            eprintln!("SEED must be a non-negative integer");
            std::process::exit(2)
        });
    let source = DataSource::EmbeddedSentiment {
        bad_records: BadRecordPolicy::Skip,
    };
    let run = || -> Result<(), Box<dyn std::error::Error>> {
        let dataset = source.load()?;
        let split = stratified_split(&dataset.examples, dataset.num_classes, fraction, seed)?;
        // The validation side keeps load order, so one pass pairs them up.
        let mut validation = split.validation.iter().peekable();
        for (i, example) in dataset.examples.iter().enumerate() {
            let side = if validation.peek() == Some(&example) {
                validation.next();
                "validation"
            } else {
                "train"
            };
            println!(
                "{i} {} {} {side}",
                example.label,
                example.text.chars().count()
            );
        }
        if validation.next().is_some() {
            return Err("the validation side is not in load order".into());
        }
        eprintln!(
            "train {} validation {}",
            split.train.len(),
            split.validation.len()
        );
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1)
    }
}

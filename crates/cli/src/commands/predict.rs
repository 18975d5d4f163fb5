//! `memtune predict --model DIR --data FILE`: classify texts with a Hugging
//! Face classification directory (from `memtune train`, or transformers'
//! `save_pretrained`) on the CPU.
//!
//! Prints one JSON line per record, in input order:
//! `{"index": i, "label": k, "logits": [...], "probabilities": [...]}`,
//! where `i` counts every record of the file from 0. A bad record (no text,
//! malformed, untokenizable) gets no line; it is reported on stderr with its
//! file and line, and the command then exits non-zero.

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;
use trainer::data::{FieldSpec, load_texts};
use trainer::export::{HfClassifier, probabilities};

use super::Context;
use crate::error::{CliError, Result};

#[derive(clap::Args)]
pub struct Args {
    /// The model directory: config.json, model.safetensors, tokenizer.json
    /// (or vocab.txt).
    #[arg(long)]
    model: PathBuf,
    /// The texts: CSV (header row), JSON Lines or a JSON array of objects,
    /// by extension (`.csv`, `.jsonl`/`.ndjson`, `.json`) unless `--format`
    /// (`csv`, `json_lines`, `json_array`) says.
    #[arg(long)]
    data: PathBuf,
    /// The data file's format, for a file whose name does not say it.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Truncate texts to this many tokens (default: the smaller of 512 and
    /// the model's positions).
    #[arg(long)]
    max_length: Option<usize>,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// The field (column) holding the text.
    #[arg(long, default_value = "text")]
    text_field: String,
    /// The field holding a pair's second text, where a record has one.
    #[arg(long, default_value = "text_pair")]
    text_pair_field: String,
}

/// `--format`'s names, as the study file's data `format` spells them.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Format {
    Csv,
    #[value(name = "json_lines")]
    JsonLines,
    #[value(name = "json_array")]
    JsonArray,
}

impl Format {
    fn data_format(self) -> trainer::data::DataFormat {
        match self {
            Format::Csv => trainer::data::DataFormat::Csv,
            Format::JsonLines => trainer::data::DataFormat::JsonLines,
            Format::JsonArray => trainer::data::DataFormat::JsonArray,
        }
    }
}

pub fn run(args: &Args, _ctx: &Context, out: &mut dyn Write) -> Result<()> {
    if args.batch_size == 0 {
        return Err(CliError::Usage("--batch-size must be at least 1".into()));
    }
    let classifier = HfClassifier::load(&args.model, args.max_length)?;
    let fields = FieldSpec {
        text: args.text_field.clone(),
        text_pair: Some(args.text_pair_field.clone()),
        ..FieldSpec::default()
    };
    let records =
        load_texts(&args.data, &fields, args.format.map(Format::data_format)).map_err(|e| {
            match e {
                trainer::data::DataError::UnknownFormat { file } => CliError::Usage(format!(
                    "cannot tell the format of {file}: name it .csv, .jsonl or .json, or pass --format csv|json_lines|json_array"
                )),
                e => e.into(),
            }
        })?;
    let mut indices = Vec::with_capacity(records.len());
    let mut encoded = Vec::with_capacity(records.len());
    let mut bad = 0usize;
    for (index, (location, record)) in records.iter().enumerate() {
        let tokens = record.as_ref().map_err(ToString::to_string).and_then(|r| {
            classifier
                .encode(&r.text, r.text_pair.as_deref())
                .map_err(|e| e.to_string())
        });
        match tokens {
            Ok(tokens) => {
                indices.push(index);
                encoded.push(tokens);
            }
            Err(reason) => {
                bad += 1;
                // A JSON array's location names its record already.
                if location.index.is_some() {
                    eprintln!("memtune: {location}: {reason}");
                } else {
                    eprintln!("memtune: {location} (record {index}): {reason}");
                }
            }
        }
    }
    let logits = classifier.logits(encoded, args.batch_size)?;
    for (index, logits) in indices.into_iter().zip(logits) {
        // The first of equal maxima, as `argmax` does.
        let label =
            (0..logits.len()).fold(0, |best, k| if logits[k] > logits[best] { k } else { best });
        let line = json!({
            "index": index,
            "label": label,
            "logits": logits,
            "probabilities": probabilities(&logits),
        });
        writeln!(out, "{line}")?;
    }
    if bad > 0 {
        return Err(CliError::failed(format!(
            "{bad} of {} record(s) in {} could not be classified (listed above)",
            records.len(),
            args.data.display()
        )));
    }
    Ok(())
}

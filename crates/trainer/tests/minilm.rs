//! all-MiniLM-L6-v2's mean-pooled sentence embeddings from our model against
//! an independent numpy implementation (reference/minilm_reference.py, its
//! output committed as reference/minilm_reference.json), all 8 sentences in
//! one padded batch. Needs MEMTUNE_MINILM_DIR (skips without it, fails
//! under CI).
//!
//! The safetensors reading here is a minimal F32-only test helper; the
//! crate's loader (weights.rs) is what applications use.

use std::path::{Path, PathBuf};

use serde_json::Value;
use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::model::{BertClassifier, DeviceBatch, HeadConfig};
use trainer::weights::{HostTensor, NamedTensors};

fn model_dir() -> Option<PathBuf> {
    match std::env::var("MEMTUNE_MINILM_DIR") {
        Ok(d) => Some(PathBuf::from(d)),
        Err(_) if std::env::var("CI").is_ok() => {
            panic!("MEMTUNE_MINILM_DIR is not set (required under CI)")
        }
        Err(_) => {
            eprintln!(
                "skipping: MEMTUNE_MINILM_DIR is not set (run `cargo xtask fetch-model minilm`)"
            );
            None
        }
    }
}

fn read_f32_safetensors(path: &Path) -> NamedTensors {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = NamedTensors::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" || t["dtype"] != "F32" {
            continue;
        }
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let (a, b) = (
            t["data_offsets"][0].as_u64().unwrap() as usize,
            t["data_offsets"][1].as_u64().unwrap() as usize,
        );
        let values = data[a..b]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        out.insert(
            name.clone(),
            HostTensor {
                shape,
                data: values,
            },
        );
    }
    out
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / n(a) / n(b)
}

#[test]
fn minilm_sentence_embeddings_match_numpy_reference() {
    let Some(dir) = model_dir() else { return };
    let reference: Value =
        serde_json::from_str(include_str!("reference/minilm_reference.json")).unwrap();
    let rows = reference["rows"].as_array().unwrap();
    let ids: Vec<Vec<u32>> = rows
        .iter()
        .map(|r| {
            r["input_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect()
        })
        .collect();
    let seq = ids.iter().map(Vec::len).max().unwrap();
    let b = ids.len();
    let mut batch = Batch {
        batch: b,
        seq,
        input_ids: vec![0; b * seq],
        token_type_ids: vec![0; b * seq],
        attention_mask: vec![0; b * seq],
        labels: vec![0; b],
    };
    for (i, row) in ids.iter().enumerate() {
        batch.input_ids[i * seq..i * seq + row.len()].copy_from_slice(row);
        batch.attention_mask[i * seq..i * seq + row.len()]
            .iter_mut()
            .for_each(|m| *m = 1);
    }

    let config = BertConfig::from_file(dir.join("config.json")).unwrap();
    let be = CpuBackend::<f32>::new();
    let mut model = BertClassifier::new_random(
        &be,
        &config,
        &HeadConfig {
            num_labels: 2,
            hidden: vec![],
        },
        0,
    )
    .unwrap();
    let report = model
        .load(&be, &read_f32_safetensors(&dir.join("model.safetensors")))
        .unwrap();
    assert!(
        report
            .initialised_randomly
            .iter()
            .all(|n| n.starts_with("classifier")),
        "{report:?}"
    );
    let device = DeviceBatch::upload(&be, &config, 2, &batch).unwrap();
    let ours = model.sentence_embeddings(&be, &device);
    let h = config.hidden_size;
    let mut worst = 0.0f64;
    for (i, row) in rows.iter().enumerate() {
        let want: Vec<f64> = row["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let got = &ours[i * h..(i + 1) * h];
        let diff = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>()
            .sqrt();
        let rel = diff / want.iter().map(|x| x * x).sum::<f64>().sqrt();
        worst = worst.max(rel);
        assert!(
            rel < 1e-4,
            "sentence {i} ({}): relative error {rel:e}",
            row["sentence"]
        );
    }
    let cos = cosine(&ours[..h], &ours[h..2 * h]);
    eprintln!("largest relative error {worst:.2e}; cosine {cos:.5}");
    assert!(
        (cos - 0.894).abs() < 5e-4,
        "cosine {cos} (documented 0.894)"
    );
}

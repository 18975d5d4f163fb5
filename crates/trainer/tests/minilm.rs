//! all-MiniLM-L6-v2 end to end through the crate's own seams: the real
//! tokenizer.json ([`TextTokenizer`]), the safetensors loader
//! ([`load_safetensors`]) and our model's mean-pooled sentence embeddings,
//! all sentences in one padded batch, against the independent numpy
//! implementation in benches/reference/minilm_embeddings.py (its output is
//! the committed fixture tests/fixtures/minilm_embeddings.json). Needs
//! MEMTUNE_MINILM_DIR (skips without it, fails under CI).

mod io_support;

use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::model::{BertClassifier, DeviceBatch, HeadConfig};
use trainer::tokenize::TextTokenizer;
use trainer::weights::load_safetensors;

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / n(a) / n(b)
}

fn as_f64s(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn minilm_sentence_embeddings_match_numpy_reference() {
    let Some(dir) = io_support::minilm_dir("minilm_sentence_embeddings_match_numpy_reference")
    else {
        return;
    };
    let fixture = io_support::embeddings_fixture();
    let sentences: Vec<&str> = fixture["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(sentences.len() >= 8);

    // Our tokenizer must give the reference's ids exactly.
    let tokenizer = TextTokenizer::from_model_dir(&dir, 128).unwrap();
    let ids: Vec<Vec<u32>> = sentences
        .iter()
        .map(|s| tokenizer.encode(s, None).unwrap().ids)
        .collect();
    for (i, row) in ids.iter().enumerate() {
        let want: Vec<u32> = as_f64s(&fixture["token_ids"][i])
            .into_iter()
            .map(|x| x as u32)
            .collect();
        assert_eq!(row, &want, "token ids of {:?}", sentences[i]);
    }

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
        batch.attention_mask[i * seq..i * seq + row.len()].fill(1);
    }

    let config = BertConfig::from_file(dir.join("config.json")).unwrap();
    tokenizer
        .check_model(config.vocab_size, config.max_position_embeddings)
        .unwrap();
    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 0).unwrap();
    let weights = dir.join("model.safetensors");
    let tensors = load_safetensors(&weights).unwrap();
    let report = model.load(&be, &tensors, &weights).unwrap();
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
    for (i, sentence) in sentences.iter().enumerate() {
        let want = as_f64s(&fixture["embeddings"][i]);
        let got = &ours[i * h..(i + 1) * h];
        let diff = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>()
            .sqrt();
        let rel = diff / want.iter().map(|x| x * x).sum::<f64>().sqrt();
        worst = worst.max(rel);
        assert!(rel < 1e-4, "{sentence:?}: relative error {rel:e}");
    }
    let pair = as_f64s(&fixture["documented_pair"]);
    let (p, q) = (pair[0] as usize, pair[1] as usize);
    let cos = cosine(&ours[p * h..(p + 1) * h], &ours[q * h..(q + 1) * h]);
    eprintln!("largest relative error {worst:.2e}; cosine {cos:.5} (documented 0.894)");
    assert!(
        (cos - 0.894).abs() < 5e-4,
        "cosine {cos} (documented 0.894)"
    );
}

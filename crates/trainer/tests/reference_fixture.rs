//! The committed MiniLM embeddings fixture: internally consistent, and what
//! benches/reference/minilm_embeddings.py computes.

mod io_support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn floats(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn the_fixture_holds_eight_or_more_sentences_and_the_documented_cosine() {
    let fixture = io_support::embeddings_fixture();
    let sentences: Vec<&str> = fixture["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(sentences.len() >= 8);
    assert_eq!(
        sentences[..2],
        ["The new movie is awesome", "The new movie is so great"]
    );
    let embeddings: Vec<Vec<f64>> = fixture["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(floats)
        .collect();
    let ids = fixture["token_ids"].as_array().unwrap();
    assert_eq!(embeddings.len(), sentences.len());
    assert_eq!(ids.len(), sentences.len());
    for (e, ids) in embeddings.iter().zip(ids) {
        assert_eq!(e.len(), 384);
        let ids = ids.as_array().unwrap();
        assert_eq!(ids.first().unwrap(), 101);
        assert_eq!(ids.last().unwrap(), 102);
    }
    let stored: Vec<Vec<f64>> = fixture["cosine"]
        .as_array()
        .unwrap()
        .iter()
        .map(floats)
        .collect();
    for i in 0..embeddings.len() {
        for j in 0..embeddings.len() {
            let recomputed = cosine(&embeddings[i], &embeddings[j]);
            assert!(
                (recomputed - stored[i][j]).abs() < 1e-12,
                "cosine[{i}][{j}]"
            );
        }
    }
    assert_eq!(
        (stored[0][1] * 1000.0).round() / 1000.0,
        0.894,
        "{}",
        stored[0][1]
    );
}

#[test]
fn the_reference_script_reproduces_the_committed_fixture() {
    let test = "the_reference_script_reproduces_the_committed_fixture";
    let (Some(python), Some(model)) = (io_support::python(test), io_support::minilm_dir(test))
    else {
        return;
    };
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/reference/minilm_embeddings.py");
    let out = tempfile::tempdir().unwrap();
    let out_json = out.path().join("minilm_embeddings.json");
    let run = Command::new(&python)
        .arg(&script)
        .arg(&model)
        .arg(&out_json)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    let fresh: Value = serde_json::from_str(&std::fs::read_to_string(&out_json).unwrap()).unwrap();
    let committed = io_support::embeddings_fixture();
    assert_eq!(fresh["sentences"], committed["sentences"]);
    assert_eq!(fresh["token_ids"], committed["token_ids"]);
    let fresh_embeddings = fresh["embeddings"].as_array().unwrap();
    for (row, (a, b)) in fresh_embeddings
        .iter()
        .zip(committed["embeddings"].as_array().unwrap())
        .enumerate()
    {
        for (x, y) in floats(a).iter().zip(floats(b)) {
            // float64 throughout: only summation order (BLAS) may differ.
            assert!(
                (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
                "sentence {row}: {x} vs {y}"
            );
        }
    }
}

//! DeBERTa-v2 against transformers: the committed fixture (made by
//! benches/reference/make_deberta_fixture.py) holds a tiny random
//! `DebertaV2ForSequenceClassification`, a batch of texts and pairs with
//! padding, and HF's logits, loss and every parameter's gradient; HF's token
//! ids for 200+ strings; HF's bucket of every relative distance. No Python
//! runs here.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::assert_close;
use safetensors::SafeTensors;
use safetensors::tensor::Dtype;
use serde_json::Value;
use trainer::backend::Backend;
use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::model::Mode;
use trainer::model::deberta::positions::log_bucket;
use trainer::model::deberta::{DebertaBatch, DebertaClassifier, DebertaConfig};
use trainer::tokenize::TextTokenizer;

const TOL: f64 = 1e-5;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/families/deberta-v2")
}

fn meta() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("meta.json")).unwrap()).unwrap()
}

/// Every reference tensor as f64 (integers included), with its shape.
fn reference() -> BTreeMap<String, (Vec<usize>, Vec<f64>)> {
    let bytes = std::fs::read(dir().join("reference.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let data: Vec<f64> = match view.dtype() {
                Dtype::F32 => view
                    .data()
                    .chunks(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                    .collect(),
                Dtype::I64 => view
                    .data()
                    .chunks(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64)
                    .collect(),
                other => panic!("{name}: unexpected dtype {other:?}"),
            };
            (name, (view.shape().to_vec(), data))
        })
        .collect()
}

#[test]
fn logits_loss_and_every_gradient_match_transformers() {
    let reference = reference();
    let get = |name: &str| &reference[name].1;
    let (shape, ids) = &reference["input_ids"];
    let (b, s) = (shape[0], shape[1]);
    let batch = Batch {
        batch: b,
        seq: s,
        input_ids: ids.iter().map(|&v| v as u32).collect(),
        token_type_ids: get("token_type_ids").iter().map(|&v| v as u32).collect(),
        attention_mask: get("attention_mask").iter().map(|&v| v as u8).collect(),
        labels: get("labels").iter().map(|&v| v as usize).collect(),
    };
    let be = CpuBackend::<f32>::new();
    let classes = reference["logits"].0[1];
    let (mut model, fresh) = DebertaClassifier::from_dir(&be, dir(), classes, 0).unwrap();
    assert!(fresh.is_empty(), "head in the checkpoint: {fresh:?}");
    let device_batch = DebertaBatch::upload(&be, &model.config, classes, &batch).unwrap();
    assert_close(
        "logits",
        &model.logits(&be, &device_batch),
        get("logits"),
        TOL,
        0,
    );
    model.alloc_grads(&be);
    // HF's CrossEntropyLoss is the batch mean; dropout is 0 in the fixture.
    let mode = Mode::Train { seed: 1, step: 1 };
    let loss = model.forward_backward(&be, &device_batch, None, b as f64, mode, false);
    assert_close("loss", &[loss], get("loss"), TOL, 0);
    let mut compared = 0;
    for (info, grad) in model.params.info.iter().zip(&model.params.grads) {
        let name = format!("grad.{}", info.name);
        let expected = reference
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is not in the fixture"));
        assert_eq!(expected.0, info.shape, "{name}");
        assert_close(&name, &be.download(grad), &expected.1, TOL, 0);
        compared += 1;
    }
    let in_fixture = reference.keys().filter(|k| k.starts_with("grad.")).count();
    assert_eq!(
        compared, in_fixture,
        "every HF parameter has a gradient here"
    );
}

#[test]
fn buckets_equal_transformers_at_every_distance() {
    let meta = meta();
    let config = DebertaConfig::from_file(dir().join("config.json")).unwrap();
    for (which, buckets, max_position) in [
        (
            "tiny",
            config.position_buckets,
            config.max_relative_positions,
        ),
        ("v3", 256, 512),
    ] {
        let row: Vec<i64> = meta["buckets"][which]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let n = (row.len() as i64 + 1) / 2;
        for (k, &expected) in row.iter().enumerate() {
            let rel = k as i64 - (n - 1);
            assert_eq!(
                log_bucket(rel, buckets, max_position),
                expected,
                "{which}: distance {rel}"
            );
        }
    }
}

#[test]
fn tokenizer_ids_equal_transformers() {
    let meta = meta();
    let tok = TextTokenizer::from_tokenizer_json(dir().join("tokenizer.json"), 100_000).unwrap();
    let strings = &meta["tokenizer_strings"];
    let ids = &meta["tokenizer_ids"];
    let as_u32 = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let singles = strings["singles"].as_array().unwrap();
    assert!(singles.len() >= 200);
    for (text, expected) in singles.iter().zip(ids["singles"].as_array().unwrap()) {
        let text = text.as_str().unwrap();
        assert_eq!(
            tok.encode(text, None).unwrap().ids,
            as_u32(expected),
            "{text:?}"
        );
    }
    let pairs = strings["pairs"].as_array().unwrap();
    assert!(!pairs.is_empty());
    for (pair, expected) in pairs.iter().zip(ids["pairs"].as_array().unwrap()) {
        let (a, b) = (pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
        let got = tok.encode(a, Some(b)).unwrap();
        assert_eq!(got.ids, as_u32(&expected[0]), "{a:?} / {b:?}");
        assert_eq!(got.type_ids, as_u32(&expected[1]), "{a:?} / {b:?}");
    }
}

/// The fixture's weights without the `deberta.` prefix and without the
/// head: the backbone loads, the head is initialised and reported; loading
/// the whole checkpoint over it gives the fixture's logits.
#[test]
fn loads_without_the_prefix_and_initialises_a_missing_head() {
    use trainer::weights::{NamedTensors, StoredDtype, load_safetensors, save_safetensors};
    let tensors = load_safetensors(dir().join("model.safetensors")).unwrap();
    let (head, backbone): (NamedTensors, NamedTensors) = tensors
        .into_iter()
        .map(|(name, t)| {
            let bare = name.strip_prefix("deberta.").unwrap_or(&name).to_string();
            (bare, t)
        })
        .partition(|(name, _)| name.starts_with("pooler.") || name.starts_with("classifier."));
    assert_eq!(head.len(), 4);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(dir().join("config.json"), tmp.path().join("config.json")).unwrap();
    save_safetensors(
        tmp.path().join("model.safetensors"),
        &backbone,
        StoredDtype::F32,
    )
    .unwrap();
    let be = CpuBackend::<f32>::new();
    let (mut model, fresh) = DebertaClassifier::from_dir(&be, tmp.path(), 3, 5).unwrap();
    let mut fresh = fresh;
    fresh.sort();
    let mut expected: Vec<String> = head.keys().cloned().collect();
    expected.sort();
    assert_eq!(fresh, expected);
    let bias = model.params.index_of("classifier.bias").unwrap();
    assert!(
        be.download(&model.params.values[bias])
            .iter()
            .all(|&v| v == 0.0)
    );
    let weight = model.params.index_of("pooler.dense.weight").unwrap();
    let w = be.download(&model.params.values[weight]);
    let std = (w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64).sqrt();
    // HF's normal(0, initializer_range); the fixture's range is 0.3.
    assert!((0.27..0.33).contains(&std), "std {std}");

    // The whole checkpoint again, prefixed names and head included.
    let original = dir().join("model.safetensors");
    let fresh = model
        .load(&be, &load_safetensors(&original).unwrap(), &original)
        .unwrap();
    assert!(fresh.is_empty());
    let reference = reference();
    let (shape, ids) = &reference["input_ids"];
    let batch = Batch {
        batch: shape[0],
        seq: shape[1],
        input_ids: ids.iter().map(|&v| v as u32).collect(),
        token_type_ids: vec![0; ids.len()],
        attention_mask: reference["attention_mask"]
            .1
            .iter()
            .map(|&v| v as u8)
            .collect(),
        labels: reference["labels"].1.iter().map(|&v| v as usize).collect(),
    };
    let db = DebertaBatch::upload(&be, &model.config, 3, &batch).unwrap();
    assert_close(
        "logits",
        &model.logits(&be, &db),
        &reference["logits"].1,
        TOL,
        0,
    );
}

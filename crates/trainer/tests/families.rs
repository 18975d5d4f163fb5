//! Parity with transformers for every model family, without Python: the
//! fixtures under `tests/fixtures/families/<family>/` were made by
//! `benches/reference/make_family_fixtures.py` (a tiny random
//! `*ForSequenceClassification` model, its own small tokenizer, one forward
//! and one backward in eval mode). Logits, loss and every parameter's
//! gradient must agree within 1e-5 relative error (by norm) in f32, and the
//! tokenizer must give HF's fast tokenizer's ids on 200+ strings.

mod common;

use std::path::{Path, PathBuf};

use common::rel_err;
use safetensors::SafeTensors;
use safetensors::tensor::Dtype;
use serde_json::Value;
use trainer::backend::Backend;
use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::model::{BertClassifier, DeviceBatch, HeadConfig, Mode};
use trainer::tokenize::TextTokenizer;
use trainer::train::{Control, EpochMetrics, TrainConfig, train};
use trainer::weights::{
    NamedTensors, StoredDtype, canonical_name, load_safetensors, load_safetensors_report,
    save_safetensors,
};

const FAMILIES: [&str; 6] = [
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "electra",
];
const TOL: f64 = 1e-5;

fn dir(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/families")
        .join(family)
}

/// A reference tensor as f64 values (int64 and f32 tensors) and its shape.
fn tensor(file: &SafeTensors<'_>, name: &str) -> Option<(Vec<usize>, Vec<f64>)> {
    let view = file.tensor(name).ok()?;
    let data = match view.dtype() {
        Dtype::F32 => view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        Dtype::I64 => view
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        other => panic!("{name}: unexpected dtype {other:?}"),
    };
    Some((view.shape().to_vec(), data))
}

/// The fixture's padded batch: ids, mask, token types (zeros when the
/// family's tokenizer returns none) and labels.
fn reference_batch(reference: &SafeTensors<'_>) -> Batch {
    let ints = |name: &str| tensor(reference, name);
    let (shape, ids) = ints("input_ids").unwrap();
    let (b, s) = (shape[0], shape[1]);
    let as_u32 = |v: &[f64]| v.iter().map(|&x| x as u32).collect::<Vec<_>>();
    Batch {
        batch: b,
        seq: s,
        input_ids: as_u32(&ids),
        token_type_ids: ints("token_type_ids").map_or(vec![0; b * s], |(_, t)| as_u32(&t)),
        attention_mask: ints("attention_mask")
            .unwrap()
            .1
            .iter()
            .map(|&v| v as u8)
            .collect(),
        labels: ints("labels")
            .unwrap()
            .1
            .iter()
            .map(|&v| v as usize)
            .collect(),
    }
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn parity(family: &str) {
    let d = dir(family);
    let config = BertConfig::from_file(d.join("config.json")).unwrap();
    assert_eq!(config.model_type, family);
    let bytes = std::fs::read(d.join("reference.safetensors")).unwrap();
    let reference = SafeTensors::deserialize(&bytes).unwrap();
    let batch = reference_batch(&reference);
    let (b, s) = (batch.batch, batch.seq);
    let (logit_shape, logits_ref) = tensor(&reference, "logits").unwrap();
    let (_, loss_ref) = tensor(&reference, "loss").unwrap();
    let classes = logit_shape[1];

    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: classes,
        hidden: vec![],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 7).unwrap();
    let weights = d.join("model.safetensors");
    let tensors = load_safetensors(&weights).unwrap();
    let report = model.load(&be, &tensors, &weights).unwrap();
    assert!(
        report.initialised_randomly.is_empty() && report.unused.is_empty(),
        "{family}: {report:?}"
    );

    let device = DeviceBatch::upload(&be, &config, classes, &batch).unwrap();
    let logits = model.logits(&be, &device);
    let logits_err = rel_err(&logits, &logits_ref);
    assert!(
        logits_err <= TOL,
        "{family}: logits relative error {logits_err:.3e}"
    );

    model.alloc_grads(&be);
    let loss = model.forward_backward(&be, &device, None, b as f64, Mode::Eval, false);
    let loss_err = rel_err(&[loss], &loss_ref);
    assert!(
        loss_err <= TOL,
        "{family}: loss {loss} vs {} ({loss_err:.3e})",
        loss_ref[0]
    );

    let grad_scale = reference
        .names()
        .iter()
        .filter(|n| n.starts_with("grad."))
        .map(|n| norm(&tensor(&reference, n).unwrap().1))
        .fold(0.0, f64::max);
    let mut compared = 0;
    let mut worst = (0.0, String::new());
    for name in reference.names() {
        let Some(hf_name) = name.strip_prefix("grad.") else {
            continue;
        };
        let ours = canonical_name(hf_name);
        let i = model
            .params
            .index_of(ours)
            .unwrap_or_else(|| panic!("{family}: no parameter for {hf_name}"));
        let (shape, grad_ref) = tensor(&reference, name).unwrap();
        assert_eq!(shape, model.params.info[i].shape, "{family}: {hf_name}");
        let grad = be.download(&model.params.grads[i]);
        compared += 1;
        if hf_name.ends_with("key.bias") || hf_name.ends_with("k_lin.bias") {
            // Softmax ignores a constant added to a row of scores, so the key
            // bias's gradient is zero in exact arithmetic: both sides hold
            // rounding noise only.
            let noise = norm(&grad).max(norm(&grad_ref));
            assert!(noise <= 1e-6 * grad_scale, "{family}: {hf_name}: {noise:e}");
            continue;
        }
        let err = rel_err(&grad, &grad_ref);
        assert!(
            err <= TOL,
            "{family}: gradient of {hf_name}: relative error {err:.3e}"
        );
        if err > worst.0 {
            worst = (err, hf_name.to_string());
        }
        assert!(
            grad_ref.iter().any(|&g| g != 0.0),
            "{family}: {hf_name}'s gradient is zero"
        );
    }
    assert_eq!(
        compared,
        model.params.info.len(),
        "{family}: every parameter has a reference gradient"
    );
    eprintln!(
        "{family}: relative error logits {logits_err:.2e}, loss {loss_err:.2e}, \
         worst of {compared} gradients {:.2e} ({})",
        worst.0, worst.1
    );

    // Our tokenizer and per-batch padding give the fixture's ids.
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("meta.json")).unwrap()).unwrap();
    let tok = TextTokenizer::from_model_dir(&d, s.max(16)).unwrap();
    let pad = tok.special_tokens().pad;
    for (row, example) in meta["examples"].as_array().unwrap().iter().enumerate() {
        let enc = tok
            .encode(example["text"].as_str().unwrap(), example["pair"].as_str())
            .unwrap();
        let mut padded = enc.ids.clone();
        padded.resize(s, pad);
        assert_eq!(
            padded,
            batch.input_ids[row * s..(row + 1) * s],
            "{family}: example {row}"
        );
    }
}

/// HF's ids (untruncated, and truncated to 16 tokens longest-first) for
/// every string and pair of `tokenizer_cases.json`.
fn tokenizer_ids(family: &str) {
    let d = dir(family);
    let cases: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("tokenizer_cases.json")).unwrap())
            .unwrap();
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 200, "{family}: {} cases", cases.len());
    let full = TextTokenizer::from_model_dir(&d, 1 << 20).unwrap();
    let cut = TextTokenizer::from_model_dir(&d, 16).unwrap();
    let u32s = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let mut pairs = 0;
    for (i, case) in cases.iter().enumerate() {
        let text = case["text"].as_str().unwrap();
        let pair = case["pair"].as_str();
        pairs += pair.is_some() as usize;
        for (tok, ids, types) in [
            (&full, "ids", "type_ids"),
            (&cut, "ids_truncated", "type_ids_truncated"),
        ] {
            let enc = tok.encode(text, pair).unwrap();
            assert_eq!(
                enc.ids,
                u32s(&case[ids]),
                "{family}: case {i} {ids}: {text:?} / {pair:?}"
            );
            assert_eq!(
                enc.type_ids,
                u32s(&case[types]),
                "{family}: case {i} {types}: {text:?} / {pair:?}"
            );
        }
    }
    assert!(pairs >= 40, "{family}: {pairs} pairs");
}

/// The logits of the fixture's model loaded from `tensors` (with `head`
/// parameters left random when absent), and the load report.
fn logits_with(family: &str, tensors: &NamedTensors) -> (Vec<f64>, Vec<String>) {
    let d = dir(family);
    let config = BertConfig::from_file(d.join("config.json")).unwrap();
    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: 3,
        hidden: vec![],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 7).unwrap();
    let report = model
        .load(&be, tensors, &d.join("model.safetensors"))
        .unwrap();
    let batch = Batch {
        batch: 1,
        seq: 5,
        input_ids: vec![0, 9, 10, 11, 2],
        token_type_ids: vec![0; 5],
        attention_mask: vec![1; 5],
        labels: vec![0],
    };
    let device = DeviceBatch::upload(&be, &config, 3, &batch).unwrap();
    (model.logits(&be, &device), report.initialised_randomly)
}

/// Checkpoints with and without the base model's prefix load the same;
/// a base-model checkpoint (no classification head) leaves exactly the
/// family's head at HF's random init.
fn prefixes_and_missing_heads(family: &str) {
    let d = dir(family);
    let loaded = load_safetensors_report(d.join("model.safetensors")).unwrap();
    let (logits, random) = logits_with(family, &loaded.tensors);
    assert!(random.is_empty());

    let tmp = tempfile::tempdir().unwrap();
    let bare = tmp.path().join("model.safetensors");
    save_safetensors(&bare, &loaded.tensors, StoredDtype::F32).unwrap();
    let (bare_logits, _) = logits_with(family, &load_safetensors(&bare).unwrap());
    assert_eq!(bare_logits, logits, "{family}: names without the prefix");

    let config = BertConfig::from_file(d.join("config.json")).unwrap();
    let head = config.family().head;
    let base: NamedTensors = loaded
        .tensors
        .into_iter()
        .filter(|(name, _)| !config.family().is_head_param(name))
        .collect();
    let (_, random) = logits_with(family, &base);
    let mut expected: Vec<String> = [head.dense, head.out]
        .iter()
        .flat_map(|layer| [format!("{layer}.weight"), format!("{layer}.bias")])
        .collect();
    expected.sort();
    let mut random = random;
    random.sort();
    assert_eq!(random, expected, "{family}");
}

#[test]
fn a_classifier_checkpoint_with_other_labels_gets_a_new_output_layer() {
    let d = dir("roberta");
    let config = BertConfig::from_file(d.join("config.json")).unwrap();
    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 7).unwrap();
    let weights = d.join("model.safetensors");
    let tensors = load_safetensors(&weights).unwrap();
    let report = model.load(&be, &tensors, &weights).unwrap();
    assert_eq!(
        report.initialised_randomly,
        ["classifier.out_proj.weight", "classifier.out_proj.bias"]
    );
    assert_eq!(report.head_shape_changed.len(), 2, "{report:?}");
    assert!(report.head_shape_changed[0].contains("[3]"), "{report:?}");
}

/// The training loop (AdamW, dropout on, recomputation) fits the fixture's
/// batch: the loss after 40 epochs is well below the loss before.
fn trains(family: &str) {
    let d = dir(family);
    let config = BertConfig::from_file(d.join("config.json")).unwrap();
    let bytes = std::fs::read(d.join("reference.safetensors")).unwrap();
    let reference = SafeTensors::deserialize(&bytes).unwrap();
    let batch = reference_batch(&reference);
    let b = batch.batch;
    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: 3,
        hidden: vec![8],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 3).unwrap();
    let weights = d.join("model.safetensors");
    model
        .load(&be, &load_safetensors(&weights).unwrap(), &weights)
        .unwrap();
    let device = DeviceBatch::upload(&be, &config, 3, &batch).unwrap();
    let before = model.loss(&be, &device, None, b as f64, Mode::Eval);
    let cfg = TrainConfig {
        epochs: 40,
        lr: 1e-2,
        warmup_ratio: 0.0,
        patience: None,
        recompute: true,
        ..TrainConfig::default()
    };
    let batches = [batch];
    let report = train(
        &be,
        &mut model,
        &batches,
        &batches,
        &cfg,
        &mut |_: &EpochMetrics| Control::Continue,
    )
    .unwrap();
    let after = report.epochs.last().unwrap().valid.loss;
    assert!(after < 0.5 * before, "{family}: loss {before} -> {after}");
}

macro_rules! family_tests {
    ($($module:ident => $family:literal),* $(,)?) => {$(
        mod $module {
            #[test]
            fn training_lowers_the_loss() {
                super::trains($family);
            }
            #[test]
            fn loads_with_or_without_prefix_and_head() {
                super::prefixes_and_missing_heads($family);
            }
            #[test]
            fn logits_loss_and_every_gradient_equal_transformers() {
                super::parity($family);
            }
            #[test]
            fn tokenizer_ids_equal_transformers() {
                super::tokenizer_ids($family);
            }
        }
    )*};
}

family_tests! {
    bert => "bert",
    roberta => "roberta",
    xlm_roberta => "xlm-roberta",
    camembert => "camembert",
    distilbert => "distilbert",
    electra => "electra",
}

#[test]
fn every_family_has_a_fixture_and_they_fit_in_two_megabytes() {
    let mut total = 0;
    for family in FAMILIES {
        for file in [
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "reference.safetensors",
            "tokenizer_cases.json",
            "meta.json",
        ] {
            total += std::fs::metadata(dir(family).join(file))
                .unwrap_or_else(|e| panic!("{family}/{file}: {e}"))
                .len();
        }
    }
    assert!(total <= 2 << 20, "{total} bytes");
}

//! Loading HF-named tensors into the model.

use std::path::Path;

use trainer::backend::Backend;
use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::model::{BertClassifier, DeviceBatch, HeadConfig, LoadError};
use trainer::weights::{HostTensor, NamedTensors};

fn setup() -> (CpuBackend<f32>, BertConfig, NamedTensors) {
    let be = CpuBackend::<f32>::new();
    let config = BertConfig::tiny(16, 2, 2, 32, 30);
    // An encoder checkpoint: the tensors of a model with another seed, minus
    // the classifier head, plus tensors we do not use.
    let donor = BertClassifier::new_random(
        &be,
        &config,
        &HeadConfig {
            num_labels: 2,
            hidden: vec![],
        },
        99,
    )
    .unwrap();
    let mut tensors = NamedTensors::new();
    for (i, info) in donor.params.info.iter().enumerate() {
        if !info.name.starts_with("classifier") {
            let data = be
                .download(&donor.params.values[i])
                .iter()
                .map(|&v| v as f32)
                .collect();
            tensors.insert(
                info.name.clone(),
                HostTensor {
                    shape: info.shape.clone(),
                    data,
                },
            );
        }
    }
    tensors.insert(
        "embeddings.position_ids".into(),
        HostTensor {
            shape: vec![1, 2],
            data: vec![0.0, 1.0],
        },
    );
    (be, config, tensors)
}

/// A randomly initialised model (seed 1) with a two-class head.
fn two_class_model(be: &CpuBackend<f32>, config: &BertConfig) -> BertClassifier<CpuBackend<f32>> {
    BertClassifier::new_random(
        be,
        config,
        &HeadConfig {
            num_labels: 2,
            hidden: vec![],
        },
        1,
    )
    .unwrap()
}

#[test]
fn loads_encoder_and_reports_unused_and_random_head() {
    let (be, config, tensors) = setup();
    let head = HeadConfig {
        num_labels: 3,
        hidden: vec![8],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 1).unwrap();
    let report = model.load(&be, &tensors, Path::new("m")).unwrap();
    assert_eq!(report.unused, vec!["embeddings.position_ids".to_string()]);
    assert_eq!(
        report.initialised_randomly,
        [
            "classifier.hidden.0.weight",
            "classifier.hidden.0.bias",
            "classifier.weight",
            "classifier.bias"
        ]
    );
    let q = &tensors["encoder.layer.1.attention.self.query.weight"];
    let i = model
        .params
        .index_of("encoder.layer.1.attention.self.query.weight")
        .unwrap();
    assert_eq!(model.params.values[i].data, q.data);

    // Loaded encoders give the donor's sentence embeddings.
    let batch = Batch {
        batch: 1,
        seq: 4,
        input_ids: vec![1, 5, 7, 0],
        token_type_ids: vec![0; 4],
        attention_mask: vec![1, 1, 1, 0],
        labels: vec![0],
    };
    let device = DeviceBatch::upload(&be, &config, 3, &batch).unwrap();
    let e = model.sentence_embeddings(&be, &device);
    assert_eq!(e.len(), 16);
    assert!(e.iter().all(|v| v.is_finite()));
}

#[test]
fn old_gamma_beta_names_are_accepted() {
    let (be, config, mut tensors) = setup();
    let t = tensors.remove("embeddings.LayerNorm.weight").unwrap();
    tensors.insert("embeddings.LayerNorm.gamma".into(), t);
    let mut model = two_class_model(&be, &config);
    assert!(
        model
            .load(&be, &tensors, Path::new("m"))
            .unwrap()
            .unused
            .len()
            == 1
    );
}

#[test]
fn missing_and_mismatched_tensors_are_named_and_nothing_changes() {
    let (be, config, mut tensors) = setup();
    tensors.remove("encoder.layer.0.output.dense.bias");
    tensors.get_mut("pooler.dense.weight").unwrap().shape = vec![8, 32];
    let mut model = two_class_model(&be, &config);
    let before: Vec<Vec<f32>> = model.params.values.iter().map(|v| v.data.clone()).collect();
    let err = model
        .load(&be, &tensors, Path::new("m/model.safetensors"))
        .unwrap_err();
    let LoadError::Mismatch {
        path,
        missing,
        mismatched,
    } = &err;
    assert_eq!(path, Path::new("m/model.safetensors"));
    assert!(
        err.to_string().starts_with("m/model.safetensors: "),
        "{err}"
    );
    assert_eq!(
        missing,
        &vec!["encoder.layer.0.output.dense.bias".to_string()]
    );
    assert_eq!(
        mismatched,
        &vec!["pooler.dense.weight: checkpoint [8, 32] vs model [16, 16]".to_string()]
    );
    assert!(
        err.to_string()
            .contains("encoder.layer.0.output.dense.bias")
    );
    let after: Vec<Vec<f32>> = model.params.values.iter().map(|v| v.data.clone()).collect();
    assert_eq!(before, after);
}

/// An encoder tensor present with another shape (its config edited) is a
/// shape mismatch only, never also listed as missing, and the message
/// gives the shapes before anything missing.
#[test]
fn a_tensor_of_another_shape_is_not_called_missing() {
    let (be, config, mut tensors) = setup();
    let name = "encoder.layer.1.intermediate.dense.weight";
    tensors.get_mut(name).unwrap().shape = vec![24, 16];
    let mut model = two_class_model(&be, &config);
    let err = model.load(&be, &tensors, Path::new("m")).unwrap_err();
    let LoadError::Mismatch {
        missing,
        mismatched,
        ..
    } = &err;
    assert!(missing.is_empty(), "{err}");
    assert_eq!(
        mismatched,
        &vec![format!("{name}: checkpoint [24, 16] vs model [32, 16]")]
    );
    let text = err.to_string();
    assert!(
        text.contains("shapes differ") && !text.contains("missing"),
        "{text}"
    );
}

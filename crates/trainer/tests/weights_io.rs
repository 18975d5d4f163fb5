//! Loading and saving safetensors checkpoints: dtypes, names, corrupt files.

mod io_support;

use std::collections::HashMap;
use std::path::Path;

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use trainer::weights::{
    HostTensor, NamedTensors, SkipReason, StoredDtype, WeightsError, load_safetensors,
    load_safetensors_report, save_safetensors,
};

fn tensor(shape: &[usize], data: &[f32]) -> HostTensor {
    HostTensor {
        shape: shape.to_vec(),
        data: data.to_vec(),
    }
}

/// A few tensors with values exactly representable in f16 and bf16.
fn tiny_model() -> NamedTensors {
    let mut tensors = NamedTensors::new();
    tensors.insert(
        "embeddings.word_embeddings.weight".into(),
        tensor(&[3, 2], &[0.5, -1.5, 2.0, 0.0, -0.25, 8.0]),
    );
    tensors.insert("pooler.dense.bias".into(), tensor(&[2], &[1.0, -3.0]));
    tensors.insert("classifier.weight".into(), tensor(&[1, 2], &[0.125, 4.0]));
    tensors
}

/// Writes raw tensors (any dtype, any name) with the safetensors crate.
fn write_raw(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            (
                *name,
                TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn every_float_dtype_round_trips_exactly_representable_values() {
    let dir = tempfile::tempdir().unwrap();
    for dtype in [StoredDtype::F32, StoredDtype::F16, StoredDtype::BF16] {
        let path = dir.path().join(format!("{dtype:?}.safetensors"));
        save_safetensors(&path, &tiny_model(), dtype).unwrap();
        assert_eq!(load_safetensors(&path).unwrap(), tiny_model(), "{dtype:?}");
    }
}

#[test]
fn half_precision_values_are_rounded_as_half_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = NamedTensors::new();
    tensors.insert("x".into(), tensor(&[2], &[0.1, 1.0 / 3.0]));
    let path = dir.path().join("h.safetensors");
    save_safetensors(&path, &tensors, StoredDtype::F16).unwrap();
    let loaded = load_safetensors(&path).unwrap();
    let expected: Vec<f32> = [0.1f32, 1.0 / 3.0]
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect();
    assert_eq!(loaded["x"].data, expected);
    assert_ne!(loaded["x"].data[0], 0.1, "f16 cannot hold 0.1 exactly");
}

#[test]
fn f64_tensors_load_as_f32() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f64.safetensors");
    let bytes: Vec<u8> = [1.5f64, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write_raw(&path, &[("w", Dtype::F64, vec![2], bytes)]);
    assert_eq!(load_safetensors(&path).unwrap()["w"].data, vec![1.5, -2.0]);
}

#[test]
fn prefixes_are_stripped_and_pretraining_heads_and_buffers_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hf.safetensors");
    let ids: Vec<u8> = [0i64, 1, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    write_raw(
        &path,
        &[
            (
                "bert.embeddings.word_embeddings.weight",
                Dtype::F32,
                vec![2],
                f32_bytes(&[1.0, 2.0]),
            ),
            (
                "roberta.pooler.dense.bias",
                Dtype::F32,
                vec![1],
                f32_bytes(&[3.0]),
            ),
            ("bert.embeddings.position_ids", Dtype::I64, vec![1, 3], ids),
            (
                "cls.predictions.bias",
                Dtype::F32,
                vec![1],
                f32_bytes(&[4.0]),
            ),
            (
                "lm_head.dense.weight",
                Dtype::F32,
                vec![1],
                f32_bytes(&[5.0]),
            ),
            ("classifier.weight", Dtype::F32, vec![1], f32_bytes(&[6.0])),
        ],
    );
    let loaded = load_safetensors_report(&path).unwrap();
    let names: Vec<&str> = loaded.tensors.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "classifier.weight",
            "embeddings.word_embeddings.weight",
            "pooler.dense.bias"
        ]
    );
    assert_eq!(loaded.tensors["pooler.dense.bias"].data, vec![3.0]);
    let skipped: HashMap<&str, SkipReason> = loaded
        .skipped
        .iter()
        .map(|(n, r)| (n.as_str(), *r))
        .collect();
    assert_eq!(skipped.len(), 3);
    assert_eq!(skipped["bert.embeddings.position_ids"], SkipReason::Buffer);
    assert_eq!(skipped["cls.predictions.bias"], SkipReason::PretrainingHead);
    assert_eq!(skipped["lm_head.dense.weight"], SkipReason::PretrainingHead);
}

#[test]
fn a_name_present_with_and_without_prefix_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.safetensors");
    write_raw(
        &path,
        &[
            (
                "bert.pooler.dense.bias",
                Dtype::F32,
                vec![1],
                f32_bytes(&[1.0]),
            ),
            ("pooler.dense.bias", Dtype::F32, vec![1], f32_bytes(&[2.0])),
        ],
    );
    let err = load_safetensors(&path).unwrap_err();
    assert!(matches!(err, WeightsError::DuplicateName { .. }), "{err}");
    assert!(err.to_string().contains("pooler.dense.bias"), "{err}");
}

#[test]
fn missing_file_names_the_path() {
    let err = load_safetensors("/nonexistent/model.safetensors").unwrap_err();
    assert!(matches!(err, WeightsError::Read { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/model.safetensors"),
        "{err}"
    );
}

#[test]
fn truncated_files_are_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.safetensors");
    save_safetensors(&path, &tiny_model(), StoredDtype::F32).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // Cut in the data, in the header, and inside the length prefix.
    for keep in [bytes.len() - 1, bytes.len() / 2, 20, 5, 0] {
        let cut = dir.path().join(format!("cut{keep}.safetensors"));
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let err = load_safetensors(&cut).unwrap_err();
        assert!(
            matches!(err, WeightsError::Corrupt { .. }),
            "keep {keep}: {err}"
        );
        assert!(
            err.to_string().contains(&format!("cut{keep}.safetensors")),
            "{err}"
        );
    }
}

#[test]
fn a_damaged_header_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.safetensors");
    save_safetensors(&path, &tiny_model(), StoredDtype::F32).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // Garbage in the JSON header.
    let mut garbled = bytes.clone();
    garbled[9..15].copy_from_slice(b"\xff\x00{{}]");
    // A header length far beyond the file.
    let mut too_long = bytes.clone();
    too_long[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    for (name, damaged) in [("garbled", garbled), ("too_long", too_long)] {
        let bad = dir.path().join(format!("{name}.safetensors"));
        std::fs::write(&bad, damaged).unwrap();
        let err = load_safetensors(&bad).unwrap_err();
        assert!(matches!(err, WeightsError::Corrupt { .. }), "{name}: {err}");
    }
}

#[test]
fn non_finite_weights_name_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nan.safetensors");
    write_raw(
        &path,
        &[(
            "encoder.layer.0.output.dense.bias",
            Dtype::F32,
            vec![3],
            f32_bytes(&[0.0, f32::NAN, 1.0]),
        )],
    );
    let err = load_safetensors(&path).unwrap_err();
    match &err {
        WeightsError::NonFinite { name, index, .. } => {
            assert_eq!(name, "encoder.layer.0.output.dense.bias");
            assert_eq!(*index, 1);
        }
        other => panic!("expected NonFinite, got {other}"),
    }
}

#[test]
fn an_integer_parameter_is_an_unsupported_dtype_naming_file_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("int.safetensors");
    let bytes: Vec<u8> = [1i32, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    write_raw(
        &path,
        &[(
            "bert.encoder.layer.0.attention.self.query.weight",
            Dtype::I32,
            vec![2],
            bytes,
        )],
    );
    let err = load_safetensors(&path).unwrap_err();
    assert!(
        matches!(err, WeightsError::UnsupportedDtype { .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("int.safetensors"), "{message}");
    assert!(
        message.contains("bert.encoder.layer.0.attention.self.query.weight"),
        "{message}"
    );
    assert!(message.contains("I32"), "{message}");
}

#[test]
fn saving_a_tensor_whose_data_does_not_fill_its_shape_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = NamedTensors::new();
    tensors.insert("w".into(), tensor(&[2, 2], &[1.0, 2.0, 3.0]));
    let err =
        save_safetensors(dir.path().join("x.safetensors"), &tensors, StoredDtype::F32).unwrap_err();
    assert!(
        matches!(
            err,
            WeightsError::ShapeMismatch {
                expected: 4,
                actual: 3,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn minilm_loads_with_every_encoder_tensor() {
    let Some(dir) = io_support::minilm_dir("minilm_loads_with_every_encoder_tensor") else {
        return;
    };
    let loaded = load_safetensors_report(dir.join("model.safetensors")).unwrap();
    let tensors = &loaded.tensors;
    // 5 embedding tensors, 16 per layer x 6 layers, 2 pooler tensors.
    assert_eq!(tensors.len(), 5 + 16 * 6 + 2);
    assert_eq!(
        tensors["embeddings.word_embeddings.weight"].shape,
        [30522, 384]
    );
    assert_eq!(
        tensors["encoder.layer.5.intermediate.dense.weight"].shape,
        [1536, 384]
    );
    assert_eq!(tensors["pooler.dense.bias"].shape, [384]);
    for (name, t) in tensors {
        assert_eq!(t.data.len(), t.shape.iter().product::<usize>(), "{name}");
    }
    assert_eq!(
        loaded.skipped,
        vec![("embeddings.position_ids".to_string(), SkipReason::Buffer)]
    );
}

#[test]
fn a_truncated_or_damaged_minilm_file_is_reported_as_corrupt() {
    let Some(dir) =
        io_support::minilm_dir("a_truncated_or_damaged_minilm_file_is_reported_as_corrupt")
    else {
        return;
    };
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let truncated = tmp.path().join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() - 4096]).unwrap();
    let err = load_safetensors(&truncated).unwrap_err();
    assert!(matches!(err, WeightsError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("truncated.safetensors"), "{err}");

    // A data offset in the header changed by one digit.
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
    let at = header.find("\"data_offsets\":[").unwrap() + "\"data_offsets\":[".len();
    let mut damaged = bytes.clone();
    damaged[8 + at] = if damaged[8 + at] == b'9' { b'8' } else { b'9' };
    let damaged_path = tmp.path().join("damaged.safetensors");
    std::fs::write(&damaged_path, damaged).unwrap();
    let err = load_safetensors(&damaged_path).unwrap_err();
    assert!(matches!(err, WeightsError::Corrupt { .. }), "{err}");
}

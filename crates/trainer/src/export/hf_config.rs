//! The JSON files of a Hugging Face classification directory: writing
//! `config.json` and `tokenizer_config.json`, and reading the class names
//! back.

use std::path::Path;

use serde_json::{Map, Value as Json, json};

use super::{ExportError, default_label_names, io_error};
use crate::model::ModelConfig;

/// The source's `config.json` with the classification fields set
/// (`architectures`, labels) and the dropout the model was trained with,
/// under the architecture's own keys.
pub(super) fn classifier_config(
    config: &ModelConfig,
    source_dir: &Path,
    labels: &[String],
) -> Result<String, ExportError> {
    let path = source_dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(io_error(&path))?;
    let mut fields = json_object(&text, &path)?;
    let id2label: Map<String, Json> = labels
        .iter()
        .enumerate()
        .map(|(i, name)| (i.to_string(), json!(name)))
        .collect();
    let label2id: Map<String, Json> = labels
        .iter()
        .enumerate()
        .map(|(i, name)| (name.clone(), json!(i)))
        .collect();
    if label2id.len() != labels.len() {
        return Err(ExportError::Labels {
            path,
            problem: format!("label names {labels:?} are not distinct"),
        });
    }
    let dropout = config
        .dropout_fields()
        .into_iter()
        .map(|(key, p)| (key, json!(p)));
    for (key, value) in [
        ("architectures", json!([config.classifier_class()])),
        ("model_type", json!(config.model_type())),
        ("num_labels", json!(labels.len())),
        ("id2label", Json::Object(id2label)),
        ("label2id", Json::Object(label2id)),
        ("problem_type", json!("single_label_classification")),
        ("dtype", json!("float32")),
    ]
    .into_iter()
    .chain(dropout)
    {
        fields.insert(key.to_string(), value);
    }
    Ok(serde_json::to_string_pretty(&Json::Object(fields)).expect("JSON serialises"))
}

/// `tokenizer_config.json` for a source without one: the longest input the
/// model takes, and no tokenizer class, so transformers uses the
/// `model_type`'s own with `tokenizer.json`. A source with only
/// `vocab.txt` and no `tokenizer_config.json` was read lowercased (see
/// [`crate::tokenize::TextTokenizer::from_model_dir`]), which the written
/// `tokenizer.json` does; `do_lower_case` says so to slow tokenizers too.
/// (A source's own `tokenizer_config.json` is copied, and its
/// `do_lower_case` is the one both were read with.)
pub(super) fn tokenizer_config(max_sequence: usize, source_dir: &Path) -> String {
    let mut fields = Map::new();
    fields.insert("model_max_length".into(), json!(max_sequence));
    if !source_dir.join("tokenizer.json").is_file() {
        fields.insert("do_lower_case".into(), json!(true));
    }
    serde_json::to_string_pretty(&Json::Object(fields)).expect("JSON serialises")
}

/// `text` (the file at `path`) as a JSON object.
pub(super) fn json_object(text: &str, path: &Path) -> Result<Map<String, Json>, ExportError> {
    match serde_json::from_str(text) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(_) => Err(ExportError::Labels {
            path: path.to_path_buf(),
            problem: "config.json is not a JSON object".into(),
        }),
        Err(source) => Err(ExportError::Json {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Which key of a classification `config.json` gives its class count, as
/// [`label_names`] reads it, for messages.
pub(super) fn labels_key(fields: &Map<String, Json>) -> &'static str {
    if fields.contains_key("id2label") {
        "id2label"
    } else if fields.contains_key("num_labels") {
        "num_labels"
    } else {
        "default (no id2label or num_labels)"
    }
}

/// A `problem_type` other than single-label classification, which is the
/// only one memtune's scoring (softmax over the classes) is right for.
pub(super) fn other_problem_type(fields: &Map<String, Json>) -> Option<String> {
    match fields.get("problem_type") {
        None | Some(Json::Null) => None,
        Some(Json::String(t)) if t == "single_label_classification" => None,
        Some(Json::String(t)) => Some(t.clone()),
        Some(other) => Some(other.to_string()),
    }
}

/// The class names of a classification `config.json`: `id2label` in id
/// order, else `LABEL_i` for `num_labels` classes, else HF's default of 2.
pub(super) fn label_names(
    fields: &Map<String, Json>,
    path: &Path,
) -> Result<Vec<String>, ExportError> {
    let bad = |problem: String| ExportError::Labels {
        path: path.to_path_buf(),
        problem,
    };
    if let Some(id2label) = fields.get("id2label") {
        let Json::Object(map) = id2label else {
            return Err(bad("`id2label` is not an object".into()));
        };
        crate::config::check_size(path, "num_labels", map.len() as u64)?;
        let mut names = vec![None; map.len()];
        for (id, name) in map {
            let index = id
                .parse::<usize>()
                .ok()
                .filter(|&i| i < names.len())
                .ok_or_else(|| {
                    bad(format!(
                        "`id2label` key `{id}` is not a class id below {}",
                        map.len()
                    ))
                })?;
            let name = name
                .as_str()
                .ok_or_else(|| bad(format!("`id2label`.`{id}` is not a string")))?;
            // "1" and "01" are distinct keys naming one class.
            if names[index].replace(name.to_string()).is_some() {
                return Err(bad(format!("`id2label` names class {index} twice")));
            }
        }
        if map.len() < 2 {
            return Err(bad(format!(
                "`id2label` names {} class(es); a classifier has at least 2",
                map.len()
            )));
        }
        // Each of the `len` ids below `len` was set once, so none is missing.
        return Ok(names.into_iter().flatten().collect());
    }
    match fields.get("num_labels") {
        None => Ok(default_label_names(2)),
        Some(n) => {
            let n = n
                .as_u64()
                .ok_or_else(|| bad(format!("`num_labels` {n} is not a count")))?;
            crate::config::check_size(path, "num_labels", n)?;
            if n < 2 {
                return Err(bad(format!(
                    "`num_labels` is {n}; a classifier has at least 2"
                )));
            }
            Ok(default_label_names(n as usize))
        }
    }
}

//! Loading Hugging Face tensors by name into the parameter store.

use std::path::{Path, PathBuf};

use super::BertClassifier;
use crate::backend::Backend;
use crate::weights::NamedTensors;

/// What loading did besides copying tensors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Checkpoint tensors the model has no parameter for (e.g. an MLM head,
    /// `embeddings.position_ids`).
    pub unused: Vec<String>,
    /// Classification head parameters absent from the checkpoint (or
    /// replaced, see `head_shape_changed`), left at their random
    /// initialisation.
    pub initialised_randomly: Vec<String>,
    /// Head tensors of a classifier checkpoint whose shape differs from the
    /// model's (another number of labels or hidden layers), as
    /// `name: checkpoint [..] vs model [..]`: re-initialised, as
    /// transformers does with `ignore_mismatched_sizes`.
    pub head_shape_changed: Vec<String>,
}

/// Why a checkpoint could not be loaded into a [`BertClassifier`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LoadError {
    /// The checkpoint lacks encoder or embedding tensors, or holds some in
    /// other shapes; no parameter was changed.
    #[error(
        "{}: the checkpoint does not fit the model its config describes: {}",
        path.display(),
        mismatch(missing, mismatched)
    )]
    Mismatch {
        /// The checkpoint file.
        path: PathBuf,
        /// Encoder/embedding parameters the checkpoint lacks.
        missing: Vec<String>,
        /// `name: checkpoint [..] vs model [..]` (the model's shape is the
        /// one its config implies).
        mismatched: Vec<String>,
    },
}

/// The shapes first: a tensor of another shape is present, not missing.
fn mismatch(missing: &[String], mismatched: &[String]) -> String {
    let mut parts = Vec::new();
    if !mismatched.is_empty() {
        parts.push(format!("shapes differ: {}", mismatched.join(", ")));
    }
    if !missing.is_empty() {
        parts.push(format!("missing {}", missing.join(", ")));
    }
    parts.join("; ")
}

/// Old BERT checkpoints name LayerNorm parameters gamma/beta.
fn canonical(name: &str) -> String {
    if name.contains("LayerNorm.") {
        name.replace("LayerNorm.gamma", "LayerNorm.weight")
            .replace("LayerNorm.beta", "LayerNorm.bias")
    } else {
        name.to_string()
    }
}

impl<B: Backend> BertClassifier<B> {
    /// Copies every tensor whose (canonical HF) name matches a parameter.
    /// Missing encoder tensors and an encoder shape mismatch are an error
    /// (nothing is changed then); head tensors that are missing or of
    /// another shape keep their random init; unknown tensors are reported.
    /// `path` is the checkpoint file the tensors came from, for messages.
    pub fn load(
        &mut self,
        be: &B,
        tensors: &NamedTensors,
        path: &Path,
    ) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let mut missing = Vec::new();
        let mut mismatched = Vec::new();
        let mut found = vec![None; self.params.info.len()];
        let mut present = vec![false; self.params.info.len()];
        for (name, t) in tensors {
            let canon = canonical(name);
            let index = self.params.index_of(&canon);
            if let Some(i) = index {
                present[i] = true;
            }
            match index {
                None => report.unused.push(name.clone()),
                Some(i)
                    if t.shape != self.params.info[i].shape
                        && self.config.family().is_task_param(&canon) =>
                {
                    report.head_shape_changed.push(format!(
                        "{name}: checkpoint {:?} vs model {:?}",
                        t.shape, self.params.info[i].shape
                    ))
                }
                Some(i) if t.shape != self.params.info[i].shape => mismatched.push(format!(
                    "{name}: checkpoint {:?} vs model {:?}",
                    t.shape, self.params.info[i].shape
                )),
                Some(i) if t.data.len() != self.params.info[i].numel() => mismatched.push(format!(
                    "{name}: {} values for shape {:?}",
                    t.data.len(),
                    t.shape
                )),
                Some(i) => found[i] = Some(t),
            }
        }
        for (i, f) in found.iter().enumerate() {
            if f.is_some() {
                continue;
            }
            let name = self.params.info[i].name.clone();
            if self.is_head_param(i) {
                report.initialised_randomly.push(name);
            } else if !present[i] {
                // One of another shape is among the mismatches already.
                missing.push(name);
            }
        }
        if !missing.is_empty() || !mismatched.is_empty() {
            return Err(LoadError::Mismatch {
                path: path.to_path_buf(),
                missing,
                mismatched,
            });
        }
        for (i, f) in found.into_iter().enumerate() {
            if let Some(t) = f {
                be.upload_f32(&mut self.params.values[i], &t.data);
            }
        }
        Ok(report)
    }
}

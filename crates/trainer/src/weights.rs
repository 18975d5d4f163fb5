//! Named host tensors: what a checkpoint loader produces and the model
//! consumes.
//!
//! Names are Hugging Face names with the base model's prefix (`bert.`,
//! `roberta.`, `distilbert.`, `electra.`, ...) removed (`embeddings.word_embeddings.weight`,
//! `encoder.layer.0.attention.self.query.weight`, `pooler.dense.weight`, ...),
//! so a model maps them to parameters without caring where they came from.
//!
//! [`load_safetensors`] reads a Hugging Face `model.safetensors` (f32, f16,
//! bf16 or f64, converted to f32) into that form, leaving out pretraining
//! heads and integer buffers; it does not check that the tensors fit a
//! model (the model reports unknown or missing names). [`save_safetensors`]
//! writes tensors back, for tiny test models and fine-tuned weights.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensorError, SafeTensors, TensorView};

/// A dense row-major f32 tensor on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Size of each dimension, outermost first (`[out, in]` for a linear
    /// layer's weight, as HF stores it).
    pub shape: Vec<usize>,
    /// The elements in row-major order; its length is the product of
    /// `shape`.
    pub data: Vec<f32>,
}

/// Tensors by canonical name.
pub type NamedTensors = BTreeMap<String, HostTensor>;

/// Why a checkpoint could not be read or written. Every variant names the
/// file, and the tensor where one is at fault.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The file could not be read (missing, unreadable).
    #[error("cannot read weights file {}: {source}", path.display())]
    Read {
        /// The weights file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error(
        "{} is not a valid safetensors file (corrupt or truncated?): {source}",
        path.display()
    )]
    /// The file's header or layout is not valid safetensors.
    Corrupt {
        /// The weights file.
        path: PathBuf,
        /// The safetensors parser's error.
        source: SafeTensorError,
    },
    #[error(
        "{}: tensor `{name}` has dtype {dtype}; only F32, F16, BF16 and F64 weights are supported",
        path.display()
    )]
    /// A tensor that is neither a pretraining head nor a buffer is stored
    /// in a dtype other than F32, F16, BF16 or F64.
    UnsupportedDtype {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name in the file, prefix included.
        name: String,
        /// The stored dtype, as safetensors spells it (`I64`, `F8_E4M3`, ...).
        dtype: String,
    },
    #[error(
        "{}: tensor `{name}` holds a non-finite value ({value}) at element {index}: the file is \
         corrupt, or holds a value beyond f32's range",
        path.display()
    )]
    /// A loaded tensor holds a NaN or infinity once converted to f32.
    NonFinite {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name in the file, prefix included.
        name: String,
        /// Row-major index of the first non-finite element.
        index: usize,
        /// That element's value after conversion to f32.
        value: f32,
    },
    #[error(
        "{}: tensors `{first}` and `{second}` both name `{canonical}` once the prefix is removed",
        path.display()
    )]
    /// Two tensors map to the same canonical name (for example `bert.x`
    /// and `x`), so which one the model gets would be ambiguous.
    DuplicateName {
        /// The weights file.
        path: PathBuf,
        /// The name in the file of the tensor seen first (names are read in
        /// sorted order).
        first: String,
        /// The name in the file of the tensor seen second.
        second: String,
        /// The canonical name both map to.
        canonical: String,
    },
    #[error(
        "cannot write {}: tensor `{name}` has shape {shape:?} ({expected} elements) but {actual} values",
        path.display()
    )]
    /// A tensor given to [`save_safetensors`] has a data length that does
    /// not match its shape; nothing is written.
    ShapeMismatch {
        /// The file that was to be written.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// The tensor's shape.
        shape: Vec<usize>,
        /// Elements the shape calls for (the product of its dimensions).
        expected: usize,
        /// Elements the tensor's data holds.
        actual: usize,
    },
    /// Serialising or writing the file failed (I/O errors come wrapped
    /// as `SafeTensorError::IoError`); `path` is left as it was.
    #[error("cannot write weights file {}: {source}", path.display())]
    Write {
        /// The file that was to be written.
        path: PathBuf,
        /// The safetensors or I/O error.
        source: SafeTensorError,
    },
}

/// Why a tensor in a checkpoint was left out of the loaded set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// A pretraining head (`cls.*` for BERT's masked-LM and next-sentence
    /// heads, `lm_head.*` for RoBERTa's): a sequence classifier has no use
    /// for it.
    PretrainingHead,
    /// A registered buffer, not a parameter (`*.position_ids`,
    /// `*.token_type_ids`, stored as integers by HF).
    Buffer,
}

/// A checkpoint's tensors and what was left out, with the reason.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedCheckpoint {
    /// The loaded tensors as f32, by canonical name.
    pub tensors: NamedTensors,
    /// Original (unstripped) names of the tensors not loaded.
    pub skipped: Vec<(String, SkipReason)>,
}

/// Prefixes removed so names are canonical (see the module doc): the base
/// model's attribute in HF's `*For...` classes of each family.
const MODEL_PREFIXES: [&str; 5] = ["bert.", "roberta.", "distilbert.", "electra.", "deberta."];
/// Heads that only pretraining uses; loaded checkpoints drop them: BERT's
/// `cls.*`, RoBERTa's `lm_head.*`, DistilBERT's masked-LM head, ELECTRA's
/// discriminator and generator heads.
const PRETRAINING_HEAD_PREFIXES: [&str; 8] = [
    "cls.",
    "lm_head.",
    "vocab_transform.",
    "vocab_layer_norm.",
    "vocab_projector.",
    "discriminator_predictions.",
    "generator_predictions.",
    "generator_lm_head.",
];
/// HF registered buffers saved beside the parameters.
const BUFFER_SUFFIXES: [&str; 2] = ["position_ids", "token_type_ids"];

/// The canonical name of a checkpoint tensor: `bert.` / `roberta.` (also
/// XLM-RoBERTa's and CamemBERT's) / `distilbert.` / `electra.` / `deberta.`
/// removed.
/// Everything else (`classifier.*`, `pooler.*`, ...) keeps its name.
pub fn canonical_name(name: &str) -> &str {
    MODEL_PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name)
}

/// Loads every parameter of a Hugging Face `model.safetensors` as f32, by
/// canonical name. See [`load_safetensors_report`] for what is skipped.
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<NamedTensors, WeightsError> {
    load_safetensors_report(path).map(|loaded| loaded.tensors)
}

/// Loads a checkpoint and says which tensors were left out and why.
///
/// F32, F16, BF16 and F64 tensors are converted to f32 (`half` for the 16-bit
/// formats). Pretraining heads and integer buffers are skipped
/// ([`SkipReason`]); any other tensor of another dtype is an error, as is a
/// non-finite value (safetensors has no checksum: a NaN or infinity is the
/// one sign of corrupted data bytes we can see; header and length damage are
/// caught by the format's own validation).
pub fn load_safetensors_report(path: impl AsRef<Path>) -> Result<LoadedCheckpoint, WeightsError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| WeightsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|source| WeightsError::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    let mut tensors = NamedTensors::new();
    let mut original_names: HashMap<String, String> = HashMap::new();
    let mut skipped = Vec::new();
    let mut entries = file.tensors();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in entries {
        let canonical = canonical_name(&name).to_string();
        if PRETRAINING_HEAD_PREFIXES
            .iter()
            .any(|prefix| canonical.starts_with(prefix))
        {
            skipped.push((name, SkipReason::PretrainingHead));
            continue;
        }
        if BUFFER_SUFFIXES
            .iter()
            .any(|suffix| canonical.ends_with(suffix))
        {
            skipped.push((name, SkipReason::Buffer));
            continue;
        }
        let data = to_f32(&view).ok_or_else(|| WeightsError::UnsupportedDtype {
            path: path.to_path_buf(),
            name: name.clone(),
            dtype: format!("{:?}", view.dtype()),
        })?;
        if let Some((index, &value)) = data.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(WeightsError::NonFinite {
                path: path.to_path_buf(),
                name,
                index,
                value,
            });
        }
        if let Some(first) = original_names.insert(canonical.clone(), name.clone()) {
            return Err(WeightsError::DuplicateName {
                path: path.to_path_buf(),
                first,
                second: name,
                canonical,
            });
        }
        let shape = view.shape().to_vec();
        tensors.insert(canonical, HostTensor { shape, data });
    }
    Ok(LoadedCheckpoint { tensors, skipped })
}

/// The tensor's values as f32, or `None` for a dtype we do not load.
fn to_f32(view: &TensorView<'_>) -> Option<Vec<f32>> {
    let bytes = view.data();
    let values = match view.dtype() {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::F64 => bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("chunks of 8")) as f32)
            .collect(),
        _ => return None,
    };
    Some(values)
}

/// The element type a tensor is stored as by [`save_safetensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredDtype {
    /// 32-bit IEEE float, stored exactly.
    F32,
    /// 16-bit IEEE half precision, rounded to nearest.
    F16,
    /// bfloat16 (f32's exponent range, a 7-bit mantissa), rounded to nearest.
    BF16,
}

/// Writes tensors to a safetensors file under their given names, converted to
/// `dtype` (rounding to nearest for the 16-bit formats). Used to save tiny
/// models for tests and fine-tuned weights. The file is written whole: a
/// temporary file beside `path` replaces it once complete, so a failed
/// write leaves what `path` held.
pub fn save_safetensors(
    path: impl AsRef<Path>,
    tensors: &NamedTensors,
    dtype: StoredDtype,
) -> Result<(), WeightsError> {
    let path = path.as_ref();
    let mut encoded: Vec<(&str, &[usize], Vec<u8>)> = Vec::with_capacity(tensors.len());
    for (name, tensor) in tensors {
        let expected: usize = tensor.shape.iter().product();
        if expected != tensor.data.len() {
            return Err(WeightsError::ShapeMismatch {
                path: path.to_path_buf(),
                name: name.clone(),
                shape: tensor.shape.clone(),
                expected,
                actual: tensor.data.len(),
            });
        }
        let bytes = match dtype {
            StoredDtype::F32 => tensor.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            StoredDtype::F16 => tensor
                .data
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
            StoredDtype::BF16 => tensor
                .data
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect(),
        };
        encoded.push((name, &tensor.shape, bytes));
    }
    let safetensors_dtype = match dtype {
        StoredDtype::F32 => Dtype::F32,
        StoredDtype::F16 => Dtype::F16,
        StoredDtype::BF16 => Dtype::BF16,
    };
    let write_error = |source| WeightsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let views = encoded
        .iter()
        .map(|(name, shape, bytes)| {
            TensorView::new(safetensors_dtype, shape.to_vec(), bytes).map(|view| (*name, view))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(write_error)?;
    crate::write_whole::write_file_whole(
        path,
        |temporary| {
            let io = |e| write_error(SafeTensorError::IoError(e));
            // safetensors writes through a temporary file of its own, made
            // private (0600); a saved model is to be read by whoever serves
            // it, as the files beside it are, so the file gets the mode
            // `File::create` gives here (under the process's umask).
            let created = std::fs::File::create(temporary).and_then(|f| f.metadata());
            let permissions = created.map_err(io)?.permissions();
            safetensors::serialize_to_file(views, None, temporary).map_err(write_error)?;
            std::fs::set_permissions(temporary, permissions).map_err(io)
        },
        |e| write_error(SafeTensorError::IoError(e)),
    )
}

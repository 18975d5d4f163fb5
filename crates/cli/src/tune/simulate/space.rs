//! The legacy setup's search space, as the simulation samples it.
//!
//! From the notes of the system we replace (its "old behavior", before it
//! shrank the ranges of large models by hand): batch size in {8, 12, 16,
//! 24, 32, 48, 64}, max length 128-512 in steps of 32. Its notes name
//! bert-base-uncased, roberta-base and bert-large-uncased; the models are
//! the seven teams tune: BERT, RoBERTa and DeBERTa-v3 base and large, and
//! XLM-RoBERTa-base (its 250,002-row embeddings and their AdamW state
//! dominate its memory). Their studies ran up to 100 epochs with patience
//! 20 on a 2,058-example data set; the simulation draws the number of
//! epochs a trial actually runs (early stopping included) uniformly from
//! [`EPOCHS`] so a few simulated hours hold a hundred trials or more. The
//! batch size is the effective batch: the baseline runs it as its
//! micro-batch, the packer may split it.

use trainer::model::ModelConfig;

/// The legacy setup's models, by the trainer's preset names ([`model_config`]):
/// a model is one entry here.
pub const MODELS: [&str; 7] = [
    "bert-base",
    "roberta-base",
    "bert-large",
    "roberta-large",
    "xlm-roberta-base",
    "deberta-v3-base",
    "deberta-v3-large",
];
/// Effective batch sizes.
pub const BATCH_SIZES: [usize; 7] = [8, 12, 16, 24, 32, 48, 64];
/// Max lengths 128, 160, ..., 512.
pub const SEQ_LENS: [usize; 13] = [
    128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480, 512,
];
/// Epochs a trial runs (inclusive range).
pub const EPOCHS: (usize, usize) = (3, 10);
/// The legacy setup's data set: 2,058 examples, 80% train, 20% validation.
pub const TRAIN_EXAMPLES: usize = 1646;
pub const VALIDATION_EXAMPLES: usize = 412;

/// The architecture of a model of [`MODELS`]: the trainer's preset, built
/// from the published Hugging Face `config.json`, of whichever family.
pub fn model_config(name: &str) -> Option<ModelConfig> {
    ModelConfig::preset(name)
}

/// One sampled trial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimTrial {
    pub number: u64,
    pub model: &'static str,
    pub batch_size: usize,
    pub seq_len: usize,
    pub epochs: usize,
}

/// SplitMix64: a tiny, well-mixed deterministic generator (no dependency).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in [0, 1) drawn from (seed, number), independent of the trial's
/// parameters (a different stream of the same generator).
pub fn unit_draw(seed: u64, number: u64) -> f64 {
    let mut state = !seed ^ number.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (splitmix64(&mut state) >> 11) as f64 / (1u64 << 53) as f64
}

/// Trial `number` of the sequence for `seed`: a pure function of both, so
/// every policy sees the same trials in the same order.
pub fn sample_trial(seed: u64, number: u64) -> SimTrial {
    let mut state = seed ^ number.wrapping_mul(0xA24B_AED4_963E_E407);
    let mut pick = |n: usize| (splitmix64(&mut state) % n as u64) as usize;
    let model = MODELS[pick(MODELS.len())];
    let batch_size = BATCH_SIZES[pick(BATCH_SIZES.len())];
    let seq_len = SEQ_LENS[pick(SEQ_LENS.len())];
    let epochs = EPOCHS.0 + pick(EPOCHS.1 - EPOCHS.0 + 1);
    SimTrial {
        number,
        model,
        batch_size,
        seq_len,
        epochs,
    }
}

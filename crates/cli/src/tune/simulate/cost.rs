//! How long a trial takes: its floating-point work (the trainer's
//! [`ModelConfig::flops_per_token`]) and how well one trial uses the device
//! at a given micro-batch.

use trainer::model::ModelConfig;

use super::space::{SimTrial, TRAIN_EXAMPLES, VALIDATION_EXAMPLES};

/// All FLOPs of a trial: every epoch trains on the training split and
/// evaluates the validation split, sequences padded to the max length (as
/// the legacy setup's tokenizer did).
pub fn trial_flops(c: &ModelConfig, t: &SimTrial) -> f64 {
    let per_token = c.flops_per_token(t.seq_len);
    let tokens = |examples: usize| (examples * t.seq_len * t.epochs) as f64;
    per_token.train * tokens(TRAIN_EXAMPLES) + per_token.eval * tokens(VALIDATION_EXAMPLES)
}

/// Fraction of the device's peak one trial achieves alone with `tokens`
/// tokens per micro-step: `tokens / (tokens + half)`. A step has a fixed
/// cost (kernel launches, the optimiser, the host loop) worth `half` tokens
/// of arithmetic; small steps spend most of their time on it.
pub fn utilisation(tokens: usize, half: f64) -> f64 {
    let t = tokens as f64;
    t / (t + half)
}

//! How long a trial takes: its floating-point work and how well one trial
//! uses the device at a given micro-batch.

use trainer::config::BertConfig;

use super::space::{SimTrial, TRAIN_EXAMPLES, VALIDATION_EXAMPLES};

/// Parameters in the encoder layers, pooler and a 2-class classifier: the
/// ones that take part in matrix products (embedding rows are looked up).
pub fn matmul_params(c: &BertConfig) -> f64 {
    let (h, i) = (c.hidden_size as f64, c.intermediate_size as f64);
    let layer = 4.0 * (h * h + h) + (h * i + i) + (i * h + h) + 4.0 * h;
    c.num_hidden_layers as f64 * layer + (h * h + h) + (2.0 * h + 2.0)
}

/// FLOPs per token of training (forward + backward: 6 per parameter, plus
/// the attention products QK^T and PV, 2 s h each per layer forward) and of
/// evaluation (forward only).
pub fn flops_per_token(c: &BertConfig, seq_len: usize) -> (f64, f64) {
    let n = matmul_params(c);
    let attention = 4.0 * c.num_hidden_layers as f64 * seq_len as f64 * c.hidden_size as f64;
    (6.0 * n + 3.0 * attention, 2.0 * n + attention)
}

/// All FLOPs of a trial: every epoch trains on the training split and
/// evaluates the validation split, sequences padded to the max length (as
/// the seeds' tokenizer did).
pub fn trial_flops(c: &BertConfig, t: &SimTrial) -> f64 {
    let (train, eval) = flops_per_token(c, t.seq_len);
    let tokens = |examples: usize| (examples * t.seq_len * t.epochs) as f64;
    train * tokens(TRAIN_EXAMPLES) + eval * tokens(VALIDATION_EXAMPLES)
}

/// Fraction of the device's peak one trial achieves alone with `tokens`
/// tokens per micro-step: `tokens / (tokens + half)`. A step has a fixed
/// cost (kernel launches, the optimiser, the host loop) worth `half` tokens
/// of arithmetic; small steps spend most of their time on it.
pub fn utilisation(tokens: usize, half: f64) -> f64 {
    let t = tokens as f64;
    t / (t + half)
}

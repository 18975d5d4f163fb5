//! How long a trial takes: its floating-point work and how well one trial
//! uses the device at a given micro-batch.

use trainer::model::ModelConfig;

use super::space::{SimTrial, TRAIN_EXAMPLES, VALIDATION_EXAMPLES};

/// Hidden width, intermediate width and layers of either family.
fn widths(c: &ModelConfig) -> (f64, f64, f64) {
    let (h, i, l) = match c {
        ModelConfig::Bert(c) => (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
        ModelConfig::Deberta(c) => (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
    };
    (h as f64, i as f64, l as f64)
}

/// Parameters in the encoder layers, pooler and a 2-class classifier: the
/// ones that take part in matrix products (embedding rows are looked up).
/// DeBERTa's relative positions go through the layers' own key and query
/// projections (`share_att_key`), so the count is the same shape.
pub fn matmul_params(c: &ModelConfig) -> f64 {
    let (h, i, layers) = widths(c);
    let layer = 4.0 * (h * h + h) + (h * i + i) + (i * h + h) + 4.0 * h;
    layers * layer + (h * h + h) + (2.0 * h + 2.0)
}

/// FLOPs per token of training (forward + backward: 6 per parameter, plus
/// the attention products, twice the forward's in backward) and of
/// evaluation (forward only). Forward attention per layer is QK^T and PV,
/// 2 s h each; DeBERTa adds each query against the `2 span` projected
/// relative positions and each key against them (c2p, p2c), 4 span h each.
/// Projecting the relative positions themselves (8 span h^2 per layer and
/// micro-step, whatever its rows) is a per-step cost like those
/// [`utilisation`] stands for, and left out.
pub fn flops_per_token(c: &ModelConfig, seq_len: usize) -> (f64, f64) {
    let (h, _, layers) = widths(c);
    let n = matmul_params(c);
    let relative = match c {
        ModelConfig::Bert(_) => 0.0,
        ModelConfig::Deberta(d) => {
            let kinds = d.c2p as usize + d.p2c as usize;
            4.0 * kinds as f64 * d.span() as f64 * h
        }
    };
    let attention = layers * (4.0 * seq_len as f64 * h + relative);
    (6.0 * n + 3.0 * attention, 2.0 * n + attention)
}

/// All FLOPs of a trial: every epoch trains on the training split and
/// evaluates the validation split, sequences padded to the max length (as
/// the legacy setup's tokenizer did).
pub fn trial_flops(c: &ModelConfig, t: &SimTrial) -> f64 {
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

//! Shared helpers for the trainer's integration tests.
#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::rng::RngKey;

/// A fresh seed each run (printed by the failing assertion's message).
pub fn time_seed() -> u64 {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    std::env::var("MEMTUNE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seed)
}

/// A stream of random numbers from a seed.
pub struct Rand {
    key: RngKey,
    i: u64,
}

impl Rand {
    pub fn new(seed: u64, stream: u32) -> Self {
        Self {
            key: RngKey {
                seed,
                step: 12345,
                stream,
            },
            i: 0,
        }
    }
    pub fn normal(&mut self) -> f64 {
        self.i += 1;
        self.key.normal(self.i)
    }
    pub fn uniform(&mut self) -> f64 {
        self.i += 1;
        self.key.uniform(self.i)
    }
    pub fn below(&mut self, n: usize) -> usize {
        ((self.uniform() * n as f64) as usize).min(n - 1)
    }
    pub fn normals(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.normal()).collect()
    }
}

fn norm(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

/// `||a - b|| / max(||a||, ||b||)`, or 0 when both are zero.
pub fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff = norm(a.iter().zip(b).map(|(x, y)| x - y));
    let scale = norm(a.iter().copied()).max(norm(b.iter().copied()));
    if scale == 0.0 { 0.0 } else { diff / scale }
}

/// Passes when the relative error is below `tol`, or when both vectors are
/// zero up to rounding (gradients that vanish in exact arithmetic, e.g. the
/// attention key bias).
pub fn assert_close(what: &str, analytic: &[f64], numeric: &[f64], tol: f64, seed: u64) {
    let diff = norm(analytic.iter().zip(numeric).map(|(x, y)| x - y));
    let scale = norm(analytic.iter().copied()).max(norm(numeric.iter().copied()));
    let ok = diff <= tol * scale || scale < 1e-9;
    assert!(
        ok,
        "{what}: relative error {:.3e} (|analytic| {scale:.3e}) exceeds {tol:e}; seed {seed} \
         (rerun with MEMTUNE_TEST_SEED={seed})\nanalytic {analytic:?}\nnumeric  {numeric:?}",
        diff / scale
    );
}

/// A padded batch of random tokens: sequence `i` has `lens[i]` real tokens
/// (first token id 1 as [CLS]).
pub fn random_batch(
    r: &mut Rand,
    lens: &[usize],
    seq: usize,
    vocab: usize,
    classes: usize,
) -> Batch {
    let b = lens.len();
    let mut input_ids = vec![0u32; b * seq];
    let mut mask = vec![0u8; b * seq];
    let mut types = vec![0u32; b * seq];
    for (i, &len) in lens.iter().enumerate() {
        for t in 0..len {
            input_ids[i * seq + t] = if t == 0 {
                1
            } else {
                2 + r.below(vocab - 2) as u32
            };
            mask[i * seq + t] = 1;
            types[i * seq + t] = (t >= len / 2) as u32;
        }
    }
    Batch {
        batch: b,
        seq,
        input_ids,
        token_type_ids: types,
        attention_mask: mask,
        labels: (0..b).map(|_| r.below(classes)).collect(),
    }
}

/// The fine-tune of the tiny model tests (`testing::write_tiny_model`): 3
/// epochs of micro-batch 32 at length 32 on `data`, split 80/20.
pub fn tiny_finetune_spec(
    dir: &std::path::Path,
    data: trainer::data::DataSource,
) -> trainer::finetune::FinetuneSpec {
    trainer::finetune::FinetuneSpec {
        model_dir: dir.to_path_buf(),
        data,
        validation_fraction: 0.2,
        split_seed: 42,
        max_length: 32,
        micro_batch: 32,
        batch_size: None,
        head_hidden: vec![],
        dropout: None,
        memory_limit: None,
        kernels: trainer::backend::Kernels::Reference,
        matmul_precision: trainer::backend::MatmulPrecision::Fp32,
        train: trainer::train::TrainConfig {
            epochs: 3,
            lr: 2e-3,
            warmup_ratio: 0.1,
            seed: 1,
            ..trainer::train::TrainConfig::default()
        },
    }
}

/// The embedded sentiment data set, bad records skipped.
pub fn embedded() -> trainer::data::DataSource {
    trainer::data::DataSource::EmbeddedSentiment {
        bad_records: trainer::data::BadRecordPolicy::Skip,
    }
}

/// Each parameter's gradient on two backends, within `tol` of a scale that
/// is its own norm but never below 1e-3 of all gradients' norm.
/// Reordering errors scale with the values flowing through the shared ops,
/// not with one small tensor's norm: a tensor far below the gradients'
/// overall size (a bias whose gradient nearly cancels, or the attention
/// key bias, whose gradient vanishes in exact arithmetic) is held to the
/// floor.
pub fn assert_grads_close(
    what: &str,
    reference: &[Vec<f64>],
    other: &[Vec<f64>],
    tol: f64,
    seed: u64,
) {
    assert_eq!(reference.len(), other.len(), "{what}: parameter counts");
    let total = norm(reference.iter().flatten().copied());
    for (i, (a, b)) in reference.iter().zip(other).enumerate() {
        let diff = norm(a.iter().zip(b).map(|(x, y)| x - y));
        let own = norm(a.iter().copied()).max(norm(b.iter().copied()));
        let scale = own.max(1e-3 * total);
        assert!(
            diff <= tol * scale,
            "{what}: grad {i}: error {diff:.3e} against {scale:.3e} (|own| {own:.3e}, all \
             {total:.3e}); seed {seed} (rerun with MEMTUNE_TEST_SEED={seed})"
        );
    }
}

/// Each parameter's gradient on `other` against the exact (f64) one, no
/// further from it than `tol` of its scale (as in [`assert_grads_close`])
/// or 4x the fp32 CPU's own distance from it, whichever is larger.
/// A gradient that cancels inside one op is off by more than its norm
/// suggests in any fp32 order: the classifier bias's is a sum over the
/// batch of softmax-minus-one-hot terms near 0.3 that add up to about
/// 5e-4, and the fp32 CPU sits 6e-5 to 9e-5 relative from the exact sum.
/// Held to the fp32 CPU instead, a correct kernel with another order
/// fails a 1e-4 bar by chance.
pub fn assert_grads_near_exact(
    what: &str,
    exact: &[Vec<f64>],
    cpu32: &[Vec<f64>],
    other: &[Vec<f64>],
    tol: f64,
    seed: u64,
) {
    assert_eq!(exact.len(), other.len(), "{what}: parameter counts");
    assert_eq!(exact.len(), cpu32.len(), "{what}: parameter counts");
    let total = norm(exact.iter().flatten().copied());
    let dist = |a: &[f64], b: &[f64]| norm(a.iter().zip(b).map(|(x, y)| x - y));
    for (i, ((e, c), o)) in exact.iter().zip(cpu32).zip(other).enumerate() {
        let scale = norm(e.iter().copied()).max(1e-3 * total);
        let (err, cpu_err) = (dist(e, o), dist(e, c));
        let bar = (tol * scale).max(4.0 * cpu_err);
        assert!(
            err <= bar,
            "{what}: grad {i}: error {err:.3e} from the f64 gradient against a bar of \
             {bar:.3e} (scale {scale:.3e}, fp32 CPU's error {cpu_err:.3e}); seed {seed} \
             (rerun with MEMTUNE_TEST_SEED={seed})"
        );
    }
}

/// A tiny model of `model_type`'s family: RoBERTa's position offset and
/// one token type, ELECTRA's 16-wide embeddings.
pub fn family_config(model_type: &str, h: usize, l: usize, i: usize, v: usize) -> BertConfig {
    let mut config = BertConfig::tiny(h, l, 4, i, v);
    config.model_type = model_type.into();
    if config.is_roberta() {
        config.pad_token_id = 1;
        config.type_vocab_size = 1;
    }
    if model_type == "electra" {
        config.embedding_size = Some(16);
    }
    config
}

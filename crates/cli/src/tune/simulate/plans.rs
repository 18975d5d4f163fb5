//! The trainer's memory plan for every (model, sequence length, micro-batch)
//! of the search space, fast enough for a simulation.
//!
//! A [`trainer::memory::MemoryPlan`] runs the model's initialisation, which
//! costs about a second per 30 M parameters (40 s for BERT-large on the
//! shared development machine), far too slow to build a plan per trial. But
//! at a fixed sequence length the plan's peak is exactly
//!
//! ```text
//! peak(L layers, V vocabulary rows, m rows) = a + b L + c m + d L m + e V
//! ```
//!
//! (weights, gradients and AdamW state grow with L and V; saved activations
//! with L m; the live workspace at the peak with m). So [`PeakTable`] builds
//! five plans of a one/two-layer copy of each model with a 64-row
//! vocabulary (everything else, sequence length included, unchanged), solves
//! for the coefficients, and evaluates the formula: identical to the full
//! plan's peak, byte for byte (test `plan_decomposition_matches_full_plans`
//! and `cargo xtask bench packing --check-plans`). It is not interpolated in
//! the sequence length: the peak's position changes with it.

use std::collections::HashMap;

use trainer::config::BertConfig;
use trainer::model::HeadConfig;

use crate::tune::packing::plan_peak;

/// Layer counts and vocabulary size of the reduced plans.
const L0: usize = 1;
const L1: usize = 2;
const V0: usize = 64;
const V1: usize = 128;

/// `peak(m) = fixed + per_row * m` for one model at one sequence length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AffinePeak {
    pub fixed: i128,
    pub per_row: i128,
}

impl AffinePeak {
    /// Peak bytes for micro-batch `micro` (at least 1).
    pub fn at(&self, micro: usize) -> u64 {
        let bytes = self.fixed + self.per_row * micro as i128;
        u64::try_from(bytes).expect("a plan's peak is positive")
    }

    /// Solves the decomposition for `config` at `seq_len` from five reduced
    /// plans.
    pub fn from_reduced_plans(config: &BertConfig, head: &HeadConfig, seq_len: usize) -> Self {
        let reduced = |layers: usize, vocab: usize| BertConfig {
            num_hidden_layers: layers,
            vocab_size: vocab,
            ..config.clone()
        };
        let p = |layers: usize, vocab: usize, micro: usize| -> i128 {
            plan_peak(&reduced(layers, vocab), head, seq_len, micro) as i128
        };
        let (p01, p11, p02, p12) = (p(L0, V0, 1), p(L1, V0, 1), p(L0, V0, 2), p(L1, V0, 2));
        let per_vocab_row = (p(L0, V1, 1) - p01) / (V1 - V0) as i128;
        // Differences of the bilinear form in (L, m) at L0/L1 and m = 1/2.
        let per_layer_row = p12 - p11 - p02 + p01;
        let per_layer = p11 - p01 - per_layer_row;
        let per_row = p02 - p01 - per_layer_row * L0 as i128;
        let layers = config.num_hidden_layers as i128;
        let at_l_m1 = p01 + (layers - L0 as i128) * (per_layer + per_layer_row);
        let vocab = (config.vocab_size as i128 - V0 as i128) * per_vocab_row;
        let row = per_row + per_layer_row * layers;
        Self {
            fixed: at_l_m1 - row + vocab,
            per_row: row,
        }
    }
}

/// Affine peaks per (model, sequence length), built on first use.
#[derive(Debug, Default)]
pub struct PeakTable {
    entries: HashMap<(String, usize), AffinePeak>,
}

impl PeakTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds every missing (model, sequence length) entry, on up to
    /// `threads` threads (plans are independent and CPU-bound).
    pub fn fill(
        &mut self,
        models: &[(&str, &BertConfig)],
        head: &HeadConfig,
        seq_lens: &[usize],
        threads: usize,
    ) {
        let mut todo: Vec<(String, &BertConfig, usize)> = Vec::new();
        for &(name, config) in models {
            for &s in seq_lens {
                if !self.entries.contains_key(&(name.to_string(), s)) {
                    todo.push((name.to_string(), config, s));
                }
            }
        }
        let threads = threads.max(1);
        let chunk = todo.len().div_ceil(threads).max(1);
        let built: Vec<((String, usize), AffinePeak)> = std::thread::scope(|scope| {
            let handles: Vec<_> = todo
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .map(|(name, config, s)| {
                                let peak = AffinePeak::from_reduced_plans(config, head, *s);
                                ((name.clone(), *s), peak)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("plan thread panicked"))
                .collect()
        });
        self.entries.extend(built);
    }

    /// Adds (or replaces) an entry, e.g. one read back from a cache file.
    pub fn insert(&mut self, model: &str, seq_len: usize, peak: AffinePeak) {
        self.entries.insert((model.to_string(), seq_len), peak);
    }

    /// Every entry as (model, sequence length, peak), sorted.
    pub fn entries(&self) -> Vec<(String, usize, AffinePeak)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .map(|((m, s), p)| (m.clone(), *s, *p))
            .collect();
        v.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        v
    }

    /// The affine peak of `model` at `seq_len`, if built.
    pub fn get(&self, model: &str, seq_len: usize) -> Option<AffinePeak> {
        self.entries.get(&(model.to_string(), seq_len)).copied()
    }
}

//! The trainer's memory plan for every (model, sequence length) of the
//! search space, built once per run (or read from the bench's cache) so
//! the simulation evaluates a peak in nanoseconds. Each entry is an exact
//! [`AffinePeak`] (see `packing::peaks` for why it is exact).

use std::collections::HashMap;

use trainer::config::BertConfig;
use trainer::model::HeadConfig;

pub use crate::tune::packing::AffinePeak;

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
                                let peak = AffinePeak::from_reduced_plans(*config, head, *s);
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

//! The trainer's memory plan for every (model, sequence length) of the
//! search space, built once per run (or read from the bench's cache) so
//! the simulation evaluates a peak in nanoseconds. Each entry is an exact
//! [`PeakCurve`] (see [`trainer::memory::peaks`] for why it is exact): the
//! runner's own pricing of a trial, [`step_curve`].

use std::collections::HashMap;

use trainer::memory::{PeakCurve, PlanRequest, step_curve};
use trainer::model::{HeadConfig, ModelConfig};

/// One built entry: its (model, sequence length) and curve, or why it
/// could not be built.
type Built = Result<((String, usize), PeakCurve), String>;

/// Peak curves per (model, sequence length), built on first use.
#[derive(Debug, Default)]
pub struct PeakTable {
    entries: HashMap<(String, usize), PeakCurve>,
}

impl PeakTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds every missing (model, sequence length) entry, on up to
    /// `threads` threads (plans are independent and CPU-bound); an error
    /// names the entry whose step could not be priced exactly.
    pub fn fill(
        &mut self,
        models: &[(&str, &ModelConfig)],
        head: &HeadConfig,
        seq_lens: &[usize],
        threads: usize,
    ) -> Result<(), String> {
        let mut todo: Vec<(String, &ModelConfig, usize)> = Vec::new();
        for &(name, config) in models {
            for &s in seq_lens {
                if !self.entries.contains_key(&(name.to_string(), s)) {
                    todo.push((name.to_string(), config, s));
                }
            }
        }
        let threads = threads.max(1).min(todo.len().max(1));
        // Thread t takes entries t, t + threads, ...: costs differ most
        // between models (DeBERTa's are full plans), so each model's
        // lengths are spread over the threads.
        let todo = &todo;
        let built: Vec<Built> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || {
                        todo.iter()
                            .skip(t)
                            .step_by(threads)
                            .map(|(name, config, s)| {
                                let request = PlanRequest::fp32_adamw(*config, head, 1, *s);
                                step_curve(&request)
                                    .map(|curve| ((name.clone(), *s), curve))
                                    .map_err(|e| format!("{name} at length {s}: {e}"))
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
        for entry in built {
            let (key, curve) = entry?;
            self.entries.insert(key, curve);
        }
        Ok(())
    }

    /// Adds (or replaces) an entry, e.g. one read back from a cache file.
    pub fn insert(&mut self, model: &str, seq_len: usize, peak: impl Into<PeakCurve>) {
        self.entries
            .insert((model.to_string(), seq_len), peak.into());
    }

    /// Every entry as (model, sequence length, peak curve), sorted.
    pub fn entries(&self) -> Vec<(String, usize, &PeakCurve)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .map(|((m, s), p)| (m.clone(), *s, p))
            .collect();
        v.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        v
    }

    /// The peak curve of `model` at `seq_len`, if built.
    pub fn get(&self, model: &str, seq_len: usize) -> Option<&PeakCurve> {
        self.entries.get(&(model.to_string(), seq_len))
    }
}

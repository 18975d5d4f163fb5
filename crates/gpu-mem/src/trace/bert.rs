//! A generator of realistic multi-trial BERT fine-tuning traces.
//!
//! Each trial fine-tunes a BERT-style encoder with AdamW at its own batch
//! size and sequence length, the way a hyperparameter study does: weights
//! are allocated, then every step allocates the batch (on a loader stream),
//! the forward activations layer by layer (with matmul workspaces freed at
//! once), frees them in backward order while allocating activation
//! gradients and parameter gradients, allocates the Adam state on the first
//! step, and frees the gradients at `zero_grad(set_to_none=True)`. At the end
//! of a trial everything is freed. Shapes follow the PyTorch eager kernels
//! closely enough for the memory pattern, not byte for byte.

use super::TraceRecord;

/// Model shape, trials and steps of a generated trace.
#[derive(Clone, Debug, PartialEq)]
pub struct BertTraceSpec {
    /// Hidden size.
    pub hidden: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Attention heads per layer.
    pub heads: usize,
    /// Feed-forward inner size.
    pub intermediate: usize,
    /// Vocabulary size (rows of the word embedding).
    pub vocab: usize,
    /// Rows of the position embedding.
    pub max_positions: usize,
    /// Classes of the classification head.
    pub labels: usize,
    /// Bytes per element of weights and activations (4 = fp32).
    pub elem_bytes: usize,
    /// Training steps of each trial.
    pub steps_per_trial: usize,
    /// (batch size, sequence length) of each trial, in order.
    pub trials: Vec<(usize, usize)>,
}

impl Default for BertTraceSpec {
    /// BERT-base in fp32, six trials of a typical study, three steps each.
    fn default() -> Self {
        BertTraceSpec {
            hidden: 768,
            layers: 12,
            heads: 12,
            intermediate: 3072,
            vocab: 30522,
            max_positions: 512,
            labels: 2,
            elem_bytes: 4,
            steps_per_trial: 3,
            trials: vec![
                (32, 128),
                (16, 256),
                (64, 64),
                (8, 512),
                (32, 256),
                (16, 128),
            ],
        }
    }
}

/// The stream of the generated trace's weights, activations and gradients.
pub const COMPUTE_STREAM: u64 = 0;
/// The stream the generated trace's input batches arrive on.
pub const LOADER_STREAM: u64 = 1;

struct Emitter {
    records: Vec<TraceRecord>,
    next_id: u64,
}

impl Emitter {
    fn alloc(&mut self, size: usize, stream: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.records.push(TraceRecord::Alloc { id, size, stream });
        id
    }
    fn free(&mut self, id: u64) {
        self.records.push(TraceRecord::Free { id });
    }
    fn free_all(&mut self, ids: &mut Vec<u64>) {
        while let Some(id) = ids.pop() {
            self.free(id);
        }
    }
    /// A workspace or temporary that lives for one kernel.
    fn transient(&mut self, size: usize) {
        let id = self.alloc(size, COMPUTE_STREAM);
        self.free(id);
    }
}

impl BertTraceSpec {
    /// Element counts of every parameter tensor, in model order.
    pub fn parameter_shapes(&self) -> Vec<usize> {
        let (h, i) = (self.hidden, self.intermediate);
        let mut p = vec![self.vocab * h, self.max_positions * h, 2 * h, h, h];
        for _ in 0..self.layers {
            p.extend([h * h, h, h * h, h, h * h, h, h * h, h, h, h]);
            p.extend([h * i, i, i * h, h, h, h]);
        }
        p.extend([h * h, h, self.labels * h, self.labels]);
        p
    }

    /// The whole trace: every trial, one after the other.
    pub fn generate(&self) -> Vec<TraceRecord> {
        let mut e = Emitter {
            records: Vec::new(),
            next_id: 0,
        };
        for &(batch, seq) in &self.trials {
            self.trial(&mut e, batch, seq);
        }
        e.records
    }

    fn trial(&self, e: &mut Emitter, b: usize, s: usize) {
        let eb = self.elem_bytes;
        let params = self.parameter_shapes();
        let mut weights: Vec<u64> = params
            .iter()
            .map(|&n| e.alloc(n * eb, COMPUTE_STREAM))
            .collect();
        let mut adam: Vec<u64> = Vec::new();
        for step in 0..self.steps_per_trial {
            // The batch arrives on the loader stream: ids, mask, labels (int64).
            let mut batch = vec![
                e.alloc(b * s * 8, LOADER_STREAM),
                e.alloc(b * s * 8, LOADER_STREAM),
                e.alloc(b * 8, LOADER_STREAM),
            ];
            let saved = self.forward(e, b, s);
            let mut grads = self.backward(e, b, s, saved, &params);
            if step == 0 {
                for &n in &params {
                    adam.push(e.alloc(n * eb, COMPUTE_STREAM)); // exp_avg
                    adam.push(e.alloc(n * eb, COMPUTE_STREAM)); // exp_avg_sq
                }
            }
            // The foreach AdamW update's temporaries, one per parameter.
            for &n in &params {
                e.transient(n * eb);
            }
            e.free_all(&mut grads);
            e.free_all(&mut batch);
        }
        e.free_all(&mut adam);
        e.free_all(&mut weights);
    }

    /// Allocate the forward pass; returns the activations kept for backward,
    /// one list per layer (embeddings first, head last).
    fn forward(&self, e: &mut Emitter, b: usize, s: usize) -> Vec<Vec<u64>> {
        let (h, i, nh, eb) = (self.hidden, self.intermediate, self.heads, self.elem_bytes);
        let tokens = b * s;
        let act = tokens * h * eb;
        let mut saved = Vec::new();
        // Embeddings: sum, layer norm (+ stats), dropout mask.
        let sum = e.alloc(act, COMPUTE_STREAM);
        let ln = e.alloc(act, COMPUTE_STREAM);
        let ln_stats = e.alloc(tokens * 2 * 4, COMPUTE_STREAM);
        e.free(sum);
        let mask = e.alloc(tokens * h, COMPUTE_STREAM);
        saved.push(vec![ln, ln_stats, mask]);
        let extended_mask = e.alloc(b * s * 4, COMPUTE_STREAM);
        for _ in 0..self.layers {
            let mut keep = Vec::new();
            e.transient(4 << 20); // cuBLAS workspace
            let qkv = e.alloc(3 * act, COMPUTE_STREAM);
            keep.push(qkv);
            let scores = e.alloc(b * nh * s * s * eb, COMPUTE_STREAM);
            let probs = e.alloc(b * nh * s * s * eb, COMPUTE_STREAM);
            e.free(scores);
            keep.push(probs);
            keep.push(e.alloc(b * nh * s * s, COMPUTE_STREAM)); // dropout mask
            keep.push(e.alloc(act, COMPUTE_STREAM)); // context
            e.transient(4 << 20);
            let proj = e.alloc(act, COMPUTE_STREAM);
            keep.push(e.alloc(tokens * h, COMPUTE_STREAM)); // dropout mask
            keep.push(e.alloc(act, COMPUTE_STREAM)); // residual + layer norm
            keep.push(e.alloc(tokens * 2 * 4, COMPUTE_STREAM));
            e.free(proj);
            e.transient(4 << 20);
            keep.push(e.alloc(tokens * i * eb, COMPUTE_STREAM)); // ffn in
            keep.push(e.alloc(tokens * i * eb, COMPUTE_STREAM)); // gelu out
            let ffn_out = e.alloc(act, COMPUTE_STREAM);
            keep.push(e.alloc(tokens * h, COMPUTE_STREAM)); // dropout mask
            keep.push(e.alloc(act, COMPUTE_STREAM)); // residual + layer norm
            keep.push(e.alloc(tokens * 2 * 4, COMPUTE_STREAM));
            e.free(ffn_out);
            saved.push(keep);
        }
        // Pooler, classifier, loss.
        let pooled = e.alloc(b * h * eb, COMPUTE_STREAM);
        let logits = e.alloc(b * self.labels * eb, COMPUTE_STREAM);
        let loss = e.alloc(4, COMPUTE_STREAM);
        saved.push(vec![extended_mask, pooled, logits, loss]);
        saved
    }

    /// Free the saved activations in backward order while allocating
    /// activation gradients and parameter gradients; returns the latter.
    fn backward(
        &self,
        e: &mut Emitter,
        b: usize,
        s: usize,
        mut saved: Vec<Vec<u64>>,
        params: &[usize],
    ) -> Vec<u64> {
        let (h, i, eb) = (self.hidden, self.intermediate, self.elem_bytes);
        let act = b * s * h * eb;
        let mut grads = Vec::new();
        // Parameters per part, matching `parameter_shapes`: 5 embedding
        // tensors, 16 per layer, 4 in the head; gradients come head first.
        let layer_params = 16;
        let head = &params[params.len() - 4..];
        let mut grad_out = e.alloc(act, COMPUTE_STREAM);
        for &n in head {
            grads.push(e.alloc(n * eb, COMPUTE_STREAM));
        }
        let mut head_saved = saved.pop().expect("head activations");
        e.free_all(&mut head_saved);
        for layer in (0..self.layers).rev() {
            let mut keep = saved.pop().expect("layer activations");
            let start = 5 + layer * layer_params;
            // FFN backward, then attention backward, each with workspaces.
            e.transient(4 << 20);
            let g_inter = e.alloc(b * s * i * eb, COMPUTE_STREAM);
            for &n in &params[start + 10..start + layer_params] {
                grads.push(e.alloc(n * eb, COMPUTE_STREAM));
            }
            e.free(g_inter);
            e.transient(4 << 20);
            let g_scores = e.alloc(b * self.heads * s * s * eb, COMPUTE_STREAM);
            let g_qkv = e.alloc(3 * act, COMPUTE_STREAM);
            for &n in &params[start..start + 10] {
                grads.push(e.alloc(n * eb, COMPUTE_STREAM));
            }
            e.free(g_scores);
            let next = e.alloc(act, COMPUTE_STREAM);
            e.free(g_qkv);
            e.free(grad_out);
            grad_out = next;
            e.free_all(&mut keep);
        }
        let mut emb_saved = saved.pop().expect("embedding activations");
        for &n in &params[..5] {
            grads.push(e.alloc(n * eb, COMPUTE_STREAM));
        }
        e.free(grad_out);
        e.free_all(&mut emb_saved);
        grads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn bert_base_has_110m_parameters() {
        let n: usize = BertTraceSpec::default().parameter_shapes().iter().sum();
        assert!((109_000_000..110_000_000).contains(&n), "{n}");
    }

    #[test]
    fn every_allocation_is_freed_once_and_trials_end_empty() {
        let spec = BertTraceSpec {
            trials: vec![(4, 32), (2, 64)],
            steps_per_trial: 2,
            ..BertTraceSpec::default()
        };
        let mut live = HashSet::new();
        let mut live_at_trial_end = Vec::new();
        let weights = spec.parameter_shapes().len();
        for r in spec.generate() {
            match r {
                TraceRecord::Alloc { id, .. } => assert!(live.insert(id)),
                TraceRecord::Free { id } => {
                    assert!(live.remove(&id));
                    if live.is_empty() {
                        live_at_trial_end.push(id);
                    }
                }
                TraceRecord::EmptyCache => {}
            }
        }
        assert!(live.is_empty());
        assert_eq!(
            live_at_trial_end.len(),
            2,
            "the trace is empty exactly at each trial's end"
        );
        assert!(weights > 190);
    }
}

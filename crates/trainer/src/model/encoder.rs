//! Embeddings and post-LN encoder layers, forward and backward, and the
//! whole-model forward/backward that strings them with the head. A layer
//! is the shared body of [`super::layer`] around BERT's attention scores
//! (`q . k`, scaled in the softmax).
//!
//! Buffer lifetimes are the memory plan: `Activation` buffers live until the
//! backward of their layer, `Workspace` buffers are dropped as soon as the
//! op that reads them has run. Every buffer here is the output of an op that
//! overwrites it whole, so all come from `alloc_overwritten` (no zero fill).

use super::head::HeadActs;
use super::layer::{
    Block, FusedAttention, LayerConfig, LayerDims, LayerIdx, Normed, Qkv, attend, attend_backward,
    attention_backward_fused, attention_forward_fused, block_backward, block_forward,
    context_to_heads, layernorm_back, layernorm_new, projections_backward, qkv_backward,
    qkv_forward, scores_backward, scores_forward,
};
use super::linear::{dropout_back_owned, dropout_new};
use super::{BertClassifier, DeviceBatch, Mode};
use crate::backend::{Backend, Kernels};
use crate::memory::BufKind::{Activation, Workspace};

/// Dropout streams: 0 embeddings, then 3 per layer, then the head's.
pub(crate) fn stream_layer(layer: usize, site: u32) -> u32 {
    1 + 3 * layer as u32 + site
}

/// What the embeddings keep for backward.
pub struct EmbActs<B: Backend> {
    sum: B::Buf,
    mean: B::Buf,
    rstd: B::Buf,
    /// The input of ELECTRA's `embeddings_project` (the dropped LayerNorm
    /// output), when the family projects.
    project_in: Option<B::Buf>,
}

/// What one encoder layer keeps for backward (its output is kept
/// separately as the next layer's input).
pub struct LayerActs<B: Backend> {
    attention: Attention<B>,
    block: Block<B>,
}

/// The attention's saved state, by kernel set.
enum Attention<B: Backend> {
    /// Heads and the stored probabilities.
    Reference {
        qkv: Qkv<B>,
        probs: B::Buf,
    },
    Fused(FusedAttention<B>),
}

/// Everything the forward pass saved, consumed by backward.
pub struct Tape<B: Backend> {
    emb: EmbActs<B>,
    /// `None` for a layer whose activations are recomputed in backward.
    layers: Vec<Option<LayerActs<B>>>,
    /// `outputs[0]` is the embedding output; `outputs[i + 1]` layer i's.
    outputs: Vec<B::Buf>,
    head: HeadActs<B>,
}

impl<B: Backend> Tape<B> {
    /// The logits, `[batch, num_labels]`.
    pub fn logits(&self) -> &B::Buf {
        &self.head.logits
    }
}

impl<B: Backend> BertClassifier<B> {
    pub(crate) fn forward(
        &self,
        be: &B,
        batch: &DeviceBatch<B>,
        mode: Mode,
        recompute: bool,
    ) -> Tape<B> {
        let (emb, (outputs, layers)) = self.encode_with(be, batch, mode, recompute);
        let head = self.head_forward(be, batch, outputs.last().unwrap(), mode);
        Tape {
            emb,
            layers,
            outputs,
            head,
        }
    }

    /// Embeddings and all layers in eval-style (activations dropped).
    pub(crate) fn encode(
        &self,
        be: &B,
        batch: &DeviceBatch<B>,
        mode: Mode,
    ) -> (EmbActs<B>, Vec<B::Buf>) {
        let (emb, (outputs, _)) = self.encode_with(be, batch, mode, true);
        (emb, outputs)
    }

    #[allow(clippy::type_complexity)]
    fn encode_with(
        &self,
        be: &B,
        batch: &DeviceBatch<B>,
        mode: Mode,
        recompute: bool,
    ) -> (EmbActs<B>, (Vec<B::Buf>, Vec<Option<LayerActs<B>>>)) {
        let (emb, x0) = self.embed_forward(be, batch, mode);
        let mut outputs = vec![x0];
        let mut layers = Vec::new();
        for (i, l) in self.idx.layers.iter().enumerate() {
            let (acts, out) = self.layer_forward(be, i, l, outputs.last().unwrap(), batch, mode);
            layers.push(if recompute { None } else { Some(acts) });
            outputs.push(out);
        }
        (emb, (outputs, layers))
    }

    pub(crate) fn backward(
        &mut self,
        be: &B,
        batch: &DeviceBatch<B>,
        tape: Tape<B>,
        dlogits: B::Buf,
        mode: Mode,
    ) {
        let Tape {
            emb,
            mut layers,
            mut outputs,
            head,
        } = tape;
        let mut d = self.head_backward(be, batch, head, dlogits, outputs.last().unwrap(), mode);
        for i in (0..self.idx.layers.len()).rev() {
            drop(outputs.pop()); // layer i's output: its consumers are done.
            let l = self.idx.layers[i];
            let x = outputs.last().unwrap();
            let acts = match layers.pop().unwrap() {
                Some(a) => a,
                None => self.layer_forward(be, i, &l, x, batch, mode).0,
            };
            d = self.layer_backward(be, i, &l, x, acts, d, batch, mode);
        }
        drop(outputs);
        self.embed_backward(be, batch, emb, d, mode);
    }

    fn embed_forward(&self, be: &B, batch: &DeviceBatch<B>, mode: Mode) -> (EmbActs<B>, B::Buf) {
        let (e, n) = (self.config.embedding_size(), batch.batch * batch.seq);
        let v = &self.params.values;
        let mut sum = be.alloc_overwritten("embeddings.sum", Activation, n * e);
        be.embedding_forward(&batch.input_ids, &v[self.idx.word], e, &mut sum, false);
        be.embedding_forward(
            &batch.position_ids,
            &v[self.idx.position],
            e,
            &mut sum,
            true,
        );
        if let Some(token_type) = self.idx.token_type {
            be.embedding_forward(&batch.token_type_ids, &v[token_type], e, &mut sum, true);
        }
        let eps = self.config.layer_norm_eps;
        let Normed { out, mean, rstd } =
            layernorm_new(be, v, self.idx.emb_ln, &sum, (e, eps), "embeddings.ln");
        let p = self.config.hidden_dropout_prob;
        let dropped = match dropout_new(be, &out, p, mode.key(p, 0), "embeddings.out", Activation) {
            Some(d) => d,
            None => out,
        };
        let (project_in, x0) = match &self.idx.emb_project {
            Some(project) => {
                let h = self.config.hidden_size;
                let mut x0 = be.alloc_overwritten("embeddings.projected", Activation, n * h);
                project.forward(be, v, &dropped, n, &mut x0);
                (Some(dropped), x0)
            }
            None => (None, dropped),
        };
        let acts = EmbActs {
            sum,
            mean,
            rstd,
            project_in,
        };
        (acts, x0)
    }

    fn embed_backward(
        &mut self,
        be: &B,
        batch: &DeviceBatch<B>,
        acts: EmbActs<B>,
        d: B::Buf,
        mode: Mode,
    ) {
        let (e, n) = (self.config.embedding_size(), batch.batch * batch.seq);
        let p = self.config.hidden_dropout_prob;
        let (v, g) = (&self.params.values, &mut self.params.grads);
        let EmbActs {
            sum,
            mean,
            rstd,
            project_in,
        } = acts;
        let d = match (&self.idx.emb_project, project_in) {
            (Some(project), Some(x)) => {
                let mut dx = be.alloc_overwritten("d_embeddings.projected", Workspace, n * e);
                project.backward(be, v, g, &d, &x, n, Some((&mut dx, false)));
                drop(d);
                dx
            }
            _ => d,
        };
        let d = dropout_back_owned(be, d, p, mode.key(p, 0), "d_embeddings.ln_out");
        let mut dsum = be.alloc_overwritten("d_embeddings.sum", Workspace, n * e);
        let ln = self.idx.emb_ln;
        layernorm_back(be, v, g, ln, &d, &sum, &mean, &rstd, e, &mut dsum);
        drop(d);
        drop((sum, mean, rstd));
        let rows = self.params.sparse.as_mut().map(|s| &mut s.slots);
        be.embedding_backward(&batch.input_ids, &dsum, e, &mut g[self.idx.word], rows);
        be.embedding_backward(
            &batch.position_ids,
            &dsum,
            e,
            &mut g[self.idx.position],
            None,
        );
        if let Some(token_type) = self.idx.token_type {
            be.embedding_backward(&batch.token_type_ids, &dsum, e, &mut g[token_type], None);
        }
    }

    /// The softmax's scale of BERT's scores.
    fn score_scale(&self) -> f64 {
        1.0 / (self.config.head_dim() as f64).sqrt()
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn layer_forward(
        &self,
        be: &B,
        i: usize,
        l: &LayerIdx,
        x: &B::Buf,
        batch: &DeviceBatch<B>,
        mode: Mode,
    ) -> (LayerActs<B>, B::Buf) {
        let d = LayerDims::new(&self.config, (i, l), (batch.batch, batch.seq));
        let v = &self.params.values;
        let scale = self.score_scale();
        let (attention, ctx) = match be.kernels() {
            Kernels::Reference => {
                let qkv = qkv_forward(be, v, &d, l, x);
                let scores = scores_forward(be, &d, 1.0, &qkv);
                let (probs, ctx) = attend(be, &d, scores, &batch.mask, scale, &qkv.vh, mode);
                (Attention::Reference { qkv, probs }, ctx)
            }
            Kernels::Fused => {
                let (saved, ctx) =
                    attention_forward_fused(be, v, &d, l, x, &batch.mask, scale, mode);
                (Attention::Fused(saved), ctx)
            }
        };
        let (block, out) = block_forward(be, v, &d, l, x, ctx, mode);
        (LayerActs { attention, block }, out)
    }

    /// Consumes the layer's activations and the gradient of its output;
    /// returns the gradient of its input.
    #[allow(clippy::too_many_arguments)]
    fn layer_backward(
        &mut self,
        be: &B,
        i: usize,
        l: &LayerIdx,
        x: &B::Buf,
        a: LayerActs<B>,
        dout: B::Buf,
        batch: &DeviceBatch<B>,
        mode: Mode,
    ) -> B::Buf {
        let d = LayerDims::new(&self.config, (i, l), (batch.batch, batch.seq));
        let scale = self.score_scale();
        let (v, g) = (&self.params.values, &mut self.params.grads);
        let (mut d_x, d_ctx, ctx) = block_backward(be, v, g, &d, l, a.block, dout, mode);
        match a.attention {
            Attention::Reference { qkv, probs } => {
                drop(ctx);
                let d_ctx_heads = context_to_heads(be, &d, d_ctx);
                let (d_scores, d_vh) =
                    attend_backward(be, &d, d_ctx_heads, &probs, &qkv.vh, scale, mode);
                let (d_qh, d_kh) = scores_backward(be, &d, 1.0, &d_scores, &qkv);
                drop((d_scores, qkv, probs));
                qkv_backward(be, v, g, &d, l, x, [d_qh, d_kh, d_vh], &mut d_x);
            }
            Attention::Fused(saved) => {
                let grads =
                    attention_backward_fused(be, &d, &saved, &ctx, d_ctx, &batch.mask, scale, mode);
                drop((saved, ctx));
                projections_backward(be, v, g, &d, l, x, grads, &mut d_x);
            }
        }
        d_x
    }
}

impl LayerConfig for crate::config::BertConfig {
    fn heads_and_eps(&self) -> (usize, f64) {
        (self.num_attention_heads, self.layer_norm_eps)
    }
    fn layer_dropout(&self) -> [f64; 3] {
        let p_attn_out = attention_output_dropout(self);
        [
            self.attention_probs_dropout_prob,
            p_attn_out,
            self.hidden_dropout_prob,
        ]
    }
    fn layer_stream(&self, layer: usize, site: u32) -> u32 {
        stream_layer(layer, site)
    }
}

/// Dropout on the attention output projection (0 for DistilBERT).
fn attention_output_dropout(c: &crate::config::BertConfig) -> f64 {
    if c.family().attention_output_dropout {
        c.hidden_dropout_prob
    } else {
        0.0
    }
}

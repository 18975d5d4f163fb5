//! DeBERTa-v2 / DeBERTa-v3 (`model_type = "deberta-v2"`) sequence
//! classification, computed as Hugging Face transformers'
//! `DebertaV2ForSequenceClassification` computes it.
//!
//! # Disentangled attention
//!
//! A layer's attention scores add three terms, each divided by
//! `sqrt(head_dim * (1 + number of pos_att_type entries))`:
//!
//! - content-to-content `q_i . k_j`, as in BERT;
//! - content-to-position (`c2p`) `q_i . pk[bucket(i - j)]` and
//!   position-to-content (`p2c`) `k_j . pq[bucket(j - i)]`, where `pk`/`pq`
//!   are the layer's key/query projections (`share_att_key`) of the shared
//!   relative-position embeddings (`encoder.rel_embeddings`, normalised by
//!   `encoder.LayerNorm` when `norm_rel_ebd = "layer_norm"`).
//!
//! There are only `2 * span` position embeddings but `s * s` query/key
//! pairs, so HF (and this module) first computes every query (or key)
//! against every position embedding with one matmul (`[s, 2 span]` per
//! head), then *gathers* each pair's column: score `(i, j)` reads column
//! `clamp(bucket(i - j) + span, 0, 2 span - 1)` of the c2p product's row
//! `i`, and column `clamp(-bucket(j - i) + span, ...)` of the p2c product's
//! row `j` (the transpose). The backward of a gather is a scatter-add of
//! score gradients into the product's columns, followed by the two matmuls'
//! backward. Both are [`crate::backend::Backend`] ops
//! (`rel_pos_gather`/`rel_pos_scatter`) over host-built bucket tables.
//!
//! # Buckets
//!
//! `bucket` ([`positions::log_bucket`]) keeps distances below `mid =
//! position_buckets / 2` exact and maps larger ones logarithmically:
//! `sign * (ceil(ln(|d| / mid) / ln((max_relative_positions - 1) / mid) *
//! (mid - 1)) + mid)`, so DeBERTa-v3's 256 buckets cover distances up to
//! 512. `span` is `position_buckets` (or `max_relative_positions` without
//! buckets; `-1` means `max_position_embeddings`).
//!
//! # The rest
//!
//! Embeddings are the word embeddings (plus token types when
//! `type_vocab_size > 0`, plus absolute positions only when
//! `position_biased_input`), LayerNorm, then multiplied by the attention
//! mask. Layers are post-LN like BERT's. The head is HF's `ContextPooler`
//! (dropout, dense, its activation on the first token) then dropout and the
//! classifier. Padded query rows attend to the real keys only (HF's fill
//! makes them uniform over all keys); padded positions never reach the
//! loss, so logits, loss and gradients are the same.
//!
//! Supported: `relative_attention = true`, `share_att_key = true`, `gelu`
//! activations, `embedding_size == hidden_size`, no convolution layer
//! (`conv_kernel_size = 0`): every DeBERTa-v3 checkpoint. Anything else is a
//! [`DebertaError::Unsupported`] naming the field.

mod attention;
mod batch;
mod config;
pub mod positions;

use std::path::Path;

pub use batch::DebertaBatch;
pub use config::{DebertaConfig, DebertaError};

use super::head::loss_and_dlogits;
use super::layer::{Normed, layernorm_new};
use super::linear::{dropout_back_owned, dropout_new};
use super::params::Kind;
use super::{Dense, LayerIdx, LayerNormIdx, Mode, Params};
use crate::backend::{Backend, LossTargets};
use crate::memory::BufKind::{self, Activation, Grad, Workspace};
use crate::weights::{NamedTensors, load_safetensors};

#[derive(Clone, Debug)]
pub(crate) struct DebertaIndices {
    word: usize,
    position: Option<usize>,
    token_type: Option<usize>,
    emb_ln: LayerNormIdx,
    layers: Vec<LayerIdx>,
    rel: usize,
    rel_ln: Option<LayerNormIdx>,
    pooler: Dense,
    classifier: Dense,
}

/// `DebertaV2ForSequenceClassification`; parameters in HF names (with the
/// `deberta.` prefix, head as `pooler.*` and `classifier.*`).
pub struct DebertaClassifier<B: Backend> {
    /// The architecture, as read from `config.json`.
    pub config: DebertaConfig,
    /// Number of classes (rows of `classifier.weight`), at least 2.
    pub num_labels: usize,
    /// Every parameter under its full HF name, in declaration order, with
    /// its gradient once allocated.
    pub params: Params<B>,
    pub(crate) idx: DebertaIndices,
}

fn declare<B: Backend>(be: &B, c: &DebertaConfig, labels: usize) -> (Params<B>, DebertaIndices) {
    let mut p = Params::new();
    let h = c.hidden_size;
    let dense = |p: &mut Params<B>, name: &str, inp: usize, out: usize| Dense {
        w: p.push(be, format!("{name}.weight"), vec![out, inp], Kind::Weight),
        b: p.push(be, format!("{name}.bias"), vec![out], Kind::Bias),
        inp,
        out,
    };
    let ln = |p: &mut Params<B>, name: &str| LayerNormIdx {
        gamma: p.push(be, format!("{name}.weight"), vec![h], Kind::Gamma),
        beta: p.push(be, format!("{name}.bias"), vec![h], Kind::Bias),
    };
    let table = |p: &mut Params<B>, name: &str, rows: usize| {
        p.push(
            be,
            format!("deberta.{name}.weight"),
            vec![rows, h],
            Kind::Weight,
        )
    };
    let word = table(&mut p, "embeddings.word_embeddings", c.vocab_size);
    p.word_table = Some(word);
    let position = c.position_biased_input.then(|| {
        table(
            &mut p,
            "embeddings.position_embeddings",
            c.max_position_embeddings,
        )
    });
    let token_type = (c.type_vocab_size > 0).then(|| {
        table(
            &mut p,
            "embeddings.token_type_embeddings",
            c.type_vocab_size,
        )
    });
    let emb_ln = ln(&mut p, "deberta.embeddings.LayerNorm");
    let layers = (0..c.num_hidden_layers)
        .map(|i| {
            let pre = format!("deberta.encoder.layer.{i}");
            LayerIdx {
                query: dense(&mut p, &format!("{pre}.attention.self.query_proj"), h, h),
                key: dense(&mut p, &format!("{pre}.attention.self.key_proj"), h, h),
                value: dense(&mut p, &format!("{pre}.attention.self.value_proj"), h, h),
                attn_out: dense(&mut p, &format!("{pre}.attention.output.dense"), h, h),
                ln1: ln(&mut p, &format!("{pre}.attention.output.LayerNorm")),
                inter: dense(
                    &mut p,
                    &format!("{pre}.intermediate.dense"),
                    h,
                    c.intermediate_size,
                ),
                out: dense(
                    &mut p,
                    &format!("{pre}.output.dense"),
                    c.intermediate_size,
                    h,
                ),
                ln2: ln(&mut p, &format!("{pre}.output.LayerNorm")),
            }
        })
        .collect();
    let rel = table(&mut p, "encoder.rel_embeddings", 2 * c.span());
    let rel_ln = c
        .norm_rel_ebd
        .then(|| ln(&mut p, "deberta.encoder.LayerNorm"));
    let pooler = dense(&mut p, "pooler.dense", h, h);
    let classifier = dense(&mut p, "classifier", h, labels);
    let idx = DebertaIndices {
        word,
        position,
        token_type,
        emb_ln,
        layers,
        rel,
        rel_ln,
        pooler,
        classifier,
    };
    (p, idx)
}

/// What the forward pass keeps for backward.
pub struct DebertaTape<B: Backend> {
    emb_sum: B::Buf,
    emb_mean: B::Buf,
    emb_rstd: B::Buf,
    /// The relative-embedding LayerNorm's mean and rstd.
    rel_ln: Option<(B::Buf, B::Buf)>,
    /// The normalised relative embeddings every layer reads (`None`: the
    /// table itself, when `norm_rel_ebd` has no LayerNorm).
    rel: Option<B::Buf>,
    /// The relative-embedding table in the activations' type, when that is
    /// not the master type.
    rel_table: Option<B::Buf>,
    /// `None` for a layer whose activations are recomputed in backward.
    layers: Vec<Option<attention::LayerActs<B>>>,
    /// `outputs[0]` is the embedding output; `outputs[i + 1]` layer i's.
    outputs: Vec<B::Buf>,
    cls: B::Buf,
    cls_dropped: Option<B::Buf>,
    dense_out: B::Buf,
    pooled: B::Buf,
    logits: B::Buf,
    /// The mode the forward ran in, which its backward must redraw the
    /// dropout masks of.
    mode: Mode,
}

impl<B: Backend> DebertaTape<B> {
    /// The logits, `[batch, num_labels]`.
    pub fn logits(&self) -> &B::Buf {
        &self.logits
    }
}

/// Dropout streams: 0 embeddings, then [`attention::SITES`] per layer, then
/// the pooler's and the classifier's.
fn head_stream(c: &DebertaConfig, site: u32) -> u32 {
    1 + attention::SITES * c.num_hidden_layers as u32 + site
}

impl<B: Backend> DebertaClassifier<B> {
    /// A model with HF-style random weights (normal(0, initializer_range)
    /// matrices and embeddings, zero biases, unit LayerNorm gains, zero
    /// padding row).
    pub fn new_random(
        be: &B,
        config: &DebertaConfig,
        num_labels: usize,
        seed: u64,
    ) -> Result<Self, DebertaError> {
        if num_labels < 2 {
            return Err(DebertaError::Labels(num_labels));
        }
        let (mut params, idx) = declare(be, config, num_labels);
        params.init_random(
            be,
            seed,
            config.initializer_range,
            config.pad_token_id as usize,
            idx.word,
        );
        Ok(Self {
            config: config.clone(),
            num_labels,
            params,
            idx,
        })
    }

    /// Loads `config.json` and `model.safetensors` from a Hugging Face
    /// directory. Tensors may carry the `deberta.` prefix or not; a missing
    /// `pooler.*`/`classifier.*` head is initialised as HF does (from
    /// `seed`) and listed in the returned names.
    pub fn from_dir(
        be: &B,
        dir: impl AsRef<Path>,
        num_labels: usize,
        seed: u64,
    ) -> Result<(Self, Vec<String>), DebertaError> {
        let dir = dir.as_ref();
        let config = DebertaConfig::from_file(dir.join("config.json"))?;
        let mut model = Self::new_random(be, &config, num_labels, seed)?;
        let weights = dir.join("model.safetensors");
        let tensors = load_safetensors(&weights)?;
        let fresh = model.load(be, &tensors, &weights)?;
        Ok((model, fresh))
    }

    /// Copies `tensors` into the parameters; returns the head parameters
    /// absent from the checkpoint, and the classifier's when the checkpoint
    /// has another number of labels (as transformers'
    /// `ignore_mismatched_sizes`), left at their initialisation.
    pub fn load(
        &mut self,
        be: &B,
        tensors: &NamedTensors,
        path: &Path,
    ) -> Result<Vec<String>, DebertaError> {
        let (mut missing, mut mismatched, mut fresh) = (Vec::new(), Vec::new(), Vec::new());
        let mut found = Vec::new();
        for (i, info) in self.params.info.iter().enumerate() {
            let bare = info.name.strip_prefix("deberta.");
            let t = tensors
                .get(&info.name)
                .or_else(|| bare.and_then(|b| tensors.get(b)))
                .or_else(|| tensors.get(&format!("deberta.{}", info.name)));
            match t {
                None if bare.is_none() => fresh.push(info.name.clone()),
                None => missing.push(info.name.clone()),
                Some(t) if t.shape != info.shape && info.name.starts_with("classifier.") => {
                    fresh.push(info.name.clone())
                }
                Some(t) if t.shape != info.shape => mismatched.push(format!(
                    "{}: checkpoint {:?} vs model {:?}",
                    info.name, t.shape, info.shape
                )),
                Some(t) => found.push((i, t)),
            }
        }
        if !missing.is_empty() || !mismatched.is_empty() {
            return Err(DebertaError::Mismatch {
                path: path.to_path_buf(),
                missing,
                mismatched,
            });
        }
        for (i, t) in found {
            be.upload_f32(&mut self.params.values[i], &t.data);
        }
        Ok(fresh)
    }

    /// Allocates dense gradient buffers (zeroed) unless present; a
    /// row-sparse word-embedding gradient is replaced by a dense one.
    pub fn alloc_grads(&mut self, be: &B) {
        self.params.alloc_grads(be, false);
    }

    /// Zeroes every gradient (allocated by `alloc_grads`); a row-sparse
    /// one gives its slots back.
    pub fn zero_grads(&mut self, be: &B) {
        self.params.zero_grads(be);
    }

    /// Forward, loss and backward of one micro-batch, as
    /// [`super::BertClassifier::forward_backward`]: gradients are
    /// accumulated into `params.grads`, the loss is the weighted
    /// cross-entropy sum divided by `denom`. With `recompute`, forward keeps
    /// only each layer's input and backward runs the layer's forward again
    /// (the same dropout masks) before its backward: the same loss and
    /// gradients, bit for bit, for one layer's activations at a time.
    pub fn forward_backward(
        &mut self,
        be: &B,
        batch: &DebertaBatch<B>,
        class_weights: Option<&B::Buf>,
        denom: f64,
        mode: Mode,
        recompute: bool,
    ) -> f64 {
        assert!(
            !self.params.grads.is_empty(),
            "forward_backward needs alloc_grads first"
        );
        let tape = self.forward(be, batch, mode, recompute);
        let targets = LossTargets::new(&batch.ids.labels, class_weights, self.num_labels, denom);
        let (loss, dlogits) = loss_and_dlogits(be, &tape.logits, &targets, batch.ids.batch);
        self.backward(be, batch, tape, dlogits);
        loss
    }

    /// Logits and the weighted loss (divided by `denom`) in eval mode, from
    /// one forward pass.
    pub fn eval_batch(
        &self,
        be: &B,
        batch: &DebertaBatch<B>,
        class_weights: Option<&B::Buf>,
        denom: f64,
    ) -> (Vec<f64>, f64) {
        let tape = self.forward(be, batch, Mode::Eval, true);
        let targets = LossTargets::new(&batch.ids.labels, class_weights, self.num_labels, denom);
        let loss = be.cross_entropy_forward(&tape.logits, &targets);
        (be.download(&tape.logits), loss)
    }

    /// Logits `[b, num_labels]` in eval mode.
    pub fn logits(&self, be: &B, batch: &DebertaBatch<B>) -> Vec<f64> {
        be.download(&self.forward(be, batch, Mode::Eval, true).logits)
    }

    /// The forward pass; with `recompute` the tape keeps no layer's
    /// activations (what evaluation wants too), only the layers' outputs.
    pub fn forward(
        &self,
        be: &B,
        batch: &DebertaBatch<B>,
        mode: Mode,
        recompute: bool,
    ) -> DebertaTape<B> {
        let c = &self.config;
        let (b, s, h) = (batch.ids.batch, batch.ids.seq, c.hidden_size);
        let n = b * s;
        let v = &self.params.values;
        let eps = c.layer_norm_eps;
        // Embeddings.
        let mut emb_sum = be.alloc_overwritten("embeddings.sum", Activation, n * h);
        be.embedding_forward(
            &batch.ids.input_ids,
            &v[self.idx.word],
            h,
            &mut emb_sum,
            false,
        );
        if let Some(p) = self.idx.position {
            be.embedding_forward(&batch.ids.position_ids, &v[p], h, &mut emb_sum, true);
        }
        if let Some(t) = self.idx.token_type {
            be.embedding_forward(&batch.ids.token_type_ids, &v[t], h, &mut emb_sum, true);
        }
        let Normed {
            out: mut x0,
            mean: emb_mean,
            rstd: emb_rstd,
        } = layernorm_new(be, v, self.idx.emb_ln, &emb_sum, (h, eps), "embeddings.ln");
        be.mask_rows(&mut x0, &batch.ids.mask, h);
        let ph = c.hidden_dropout_prob;
        if let Some(d) = dropout_new(be, &x0, ph, mode.key(ph, 0), "embeddings.out", Activation) {
            x0 = d;
        }
        // Relative embeddings, shared by every layer: the table (a copy in
        // the activations' type when they are 16 bits), normalised when the
        // model says so.
        let rel_table = in_activation_type(be, &v[self.idx.rel], "encoder.rel_table", Activation);
        let (rel, rel_ln) = match self.idx.rel_ln {
            Some(ln) => {
                let table = rel_table.as_ref().unwrap_or(&v[self.idx.rel]);
                let Normed { out, mean, rstd } =
                    layernorm_new(be, v, ln, table, (h, eps), "encoder.rel_ln");
                (Some(out), Some((mean, rstd)))
            }
            None => (None, None),
        };
        let mut outputs = vec![x0];
        let mut layers = Vec::new();
        {
            let table = rel_table.as_ref().unwrap_or(&v[self.idx.rel]);
            let rel_x = rel.as_ref().unwrap_or(table);
            for (i, l) in self.idx.layers.iter().enumerate() {
                let x = outputs.last().unwrap();
                let (acts, out) = attention::layer_forward(c, v, be, i, l, x, rel_x, batch, mode);
                layers.push(if recompute { None } else { Some(acts) });
                outputs.push(out);
            }
        }
        // ContextPooler (dropout, dense, GELU on the first token), then
        // dropout and the classifier.
        let mut cls = be.alloc_overwritten("head.cls", Activation, b * h);
        be.cls_forward(outputs.last().unwrap(), &mut cls, b, s);
        let pp = c.pooler_dropout;
        let key = mode.key(pp, head_stream(c, 0));
        let cls_dropped = dropout_new(be, &cls, pp, key, "head.cls_dropped", Activation);
        let mut dense_out = be.alloc_overwritten("head.pooler_dense", Activation, b * h);
        let pooler_x = cls_dropped.as_ref().unwrap_or(&cls);
        self.idx.pooler.forward(be, v, pooler_x, b, &mut dense_out);
        let mut pooled = be.alloc_overwritten("head.pooled", Activation, b * h);
        be.gelu_forward(&dense_out, &mut pooled);
        let pc = c.cls_dropout;
        let key = mode.key(pc, head_stream(c, 1));
        let classifier_in = dropout_new(be, &pooled, pc, key, "head.pooled_dropped", Workspace);
        let mut logits = be.alloc_overwritten("logits", Activation, b * self.num_labels);
        let x = classifier_in.as_ref().unwrap_or(&pooled);
        self.idx.classifier.forward(be, v, x, b, &mut logits);
        drop(classifier_in);
        DebertaTape {
            emb_sum,
            emb_mean,
            emb_rstd,
            rel_ln,
            rel,
            rel_table,
            layers,
            outputs,
            cls,
            cls_dropped,
            dense_out,
            pooled,
            logits,
            mode,
        }
    }
}

impl<B: Backend> DebertaClassifier<B> {
    fn backward(&mut self, be: &B, batch: &DebertaBatch<B>, tape: DebertaTape<B>, dlogits: B::Buf) {
        let DebertaTape {
            emb_sum,
            emb_mean,
            emb_rstd,
            rel_ln,
            rel,
            rel_table,
            mut layers,
            mut outputs,
            cls,
            cls_dropped,
            dense_out,
            pooled,
            logits,
            mode,
        } = tape;
        drop(logits);
        let c = self.config.clone();
        let (b, s, h) = (batch.ids.batch, batch.ids.seq, c.hidden_size);
        let n = b * s;
        let idx = self.idx.clone();
        // Head.
        let (v, g) = (&self.params.values, &mut self.params.grads);
        let pc = c.cls_dropout;
        let key = mode.key(pc, head_stream(&c, 1));
        let classifier_in = dropout_new(be, &pooled, pc, key, "head.pooled_dropped", Workspace);
        // A dense layer's backward at its input, or at the input's dropped
        // copy where dropout ran: the input's gradient in a new buffer.
        let dense_back = |dense: &Dense,
                          g: &mut [B::Buf],
                          dy: &B::Buf,
                          x: &B::Buf,
                          dropped: &Option<B::Buf>,
                          name: &str| {
            let mut dx = be.alloc_overwritten(name, Workspace, b * dense.inp);
            let x = dropped.as_ref().unwrap_or(x);
            dense.backward(be, v, g, dy, x, b, Some((&mut dx, false)));
            dx
        };
        let d_pooled = dense_back(
            &idx.classifier,
            g,
            &dlogits,
            &pooled,
            &classifier_in,
            "head.d_pooled",
        );
        drop(classifier_in);
        drop(pooled);
        drop(dlogits);
        let d_pooled = dropout_back_owned(be, d_pooled, pc, key, "head.d_pooled_dropped");
        let mut d_dense = be.alloc_overwritten("head.d_pooler_dense", Workspace, b * h);
        be.gelu_backward(&dense_out, &d_pooled, &mut d_dense);
        drop(d_pooled);
        drop(dense_out);
        let d_cls = dense_back(&idx.pooler, g, &d_dense, &cls, &cls_dropped, "head.d_cls");
        drop(d_dense);
        drop(cls_dropped);
        drop(cls);
        let pp = c.pooler_dropout;
        let d_cls = dropout_back_owned(
            be,
            d_cls,
            pp,
            mode.key(pp, head_stream(&c, 0)),
            "head.d_cls_in",
        );
        let mut d = be.alloc_overwritten("head.d_last", Workspace, n * h);
        be.cls_backward(&d_cls, &mut d, b, s);
        drop(d_cls);
        // Layers, accumulating the relative embeddings' gradient.
        let rows = 2 * c.span();
        // The relative embeddings' gradient, summed over layers in the
        // master type.
        let mut d_rel = be.alloc("encoder.d_rel", Grad, rows * h);
        for i in (0..idx.layers.len()).rev() {
            drop(outputs.pop()); // layer i's output: its consumers are done.
            let x = outputs.last().unwrap();
            let (v, g) = (&self.params.values, &mut self.params.grads);
            let table = rel_table.as_ref().unwrap_or(&v[idx.rel]);
            let rel_x = rel.as_ref().unwrap_or(table);
            let l = &idx.layers[i];
            let acts = match layers.pop().unwrap() {
                Some(a) => a,
                None => attention::layer_forward(&c, v, be, i, l, x, rel_x, batch, mode).0,
            };
            d = attention::layer_backward(
                &c, v, g, be, i, l, x, rel_x, acts, d, &mut d_rel, batch, mode,
            );
        }
        drop(outputs);
        let (v, g) = (&self.params.values, &mut self.params.grads);
        match (idx.rel_ln, rel_ln) {
            (Some(ln), Some((mean, rstd))) => {
                drop(rel);
                let d_in = in_activation_type(be, &d_rel, "encoder.d_rel_16bit", Workspace);
                let mut d_table = be.alloc_overwritten("encoder.d_rel_table", Workspace, rows * h);
                crate::model::layer::layernorm_back(
                    be,
                    v,
                    g,
                    ln,
                    d_in.as_ref().unwrap_or(&d_rel),
                    rel_table.as_ref().unwrap_or(&v[idx.rel]),
                    &mean,
                    &rstd,
                    h,
                    &mut d_table,
                );
                drop(d_in);
                be.add_assign(&mut g[idx.rel], &d_table);
            }
            _ => be.add_assign(&mut g[idx.rel], &d_rel),
        }
        drop(d_rel);
        // Embeddings: dropout, mask, LayerNorm, tables.
        let ph = c.hidden_dropout_prob;
        let mut d = dropout_back_owned(be, d, ph, mode.key(ph, 0), "embeddings.d_out");
        be.mask_rows(&mut d, &batch.ids.mask, h);
        let mut d_sum = be.alloc_overwritten("embeddings.d_sum", Workspace, n * h);
        crate::model::layer::layernorm_back(
            be, v, g, idx.emb_ln, &d, &emb_sum, &emb_mean, &emb_rstd, h, &mut d_sum,
        );
        drop(d);
        drop((emb_sum, emb_mean, emb_rstd));
        let rows = self.params.sparse.as_mut().map(|s| &mut s.slots);
        be.embedding_backward(&batch.ids.input_ids, &d_sum, h, &mut g[idx.word], rows);
        if let Some(p) = idx.position {
            be.embedding_backward(&batch.ids.position_ids, &d_sum, h, &mut g[p], None);
        }
        if let Some(t) = idx.token_type {
            be.embedding_backward(&batch.ids.token_type_ids, &d_sum, h, &mut g[t], None);
        }
    }
}

/// `src` (of the master type) copied into a buffer of the activations'
/// type, or `None` when activations are stored in the master type.
fn in_activation_type<B: Backend>(
    be: &B,
    src: &B::Buf,
    name: &str,
    kind: BufKind,
) -> Option<B::Buf> {
    let storage = be.storage();
    if storage.activations == storage.master {
        return None;
    }
    let mut copy = be.alloc_overwritten(name, kind, be.len(src));
    be.cast(src, &mut copy);
    Some(copy)
}

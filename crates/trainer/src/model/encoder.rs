//! Embeddings and post-LN encoder layers, forward and backward, and the
//! whole-model forward/backward that strings them with the head.
//!
//! Buffer lifetimes are the memory plan: `Activation` buffers live until the
//! backward of their layer, `Workspace` buffers are dropped as soon as the
//! op that reads them has run. Every buffer here is the output of an op that
//! overwrites it whole, so all come from `alloc_overwritten` (no zero fill).

use super::head::HeadActs;
use super::linear::{dropout_back_owned, dropout_new};
use super::{BertClassifier, DeviceBatch, LayerIdx, Mode};
use crate::backend::{Backend, MatmulShape};
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
    qh: B::Buf,
    kh: B::Buf,
    vh: B::Buf,
    probs: B::Buf,
    ctx: B::Buf,
    sum1: B::Buf,
    mean1: B::Buf,
    rstd1: B::Buf,
    h1: B::Buf,
    inter: B::Buf,
    gelu: B::Buf,
    sum2: B::Buf,
    mean2: B::Buf,
    rstd2: B::Buf,
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
        let mut mean = be.alloc_overwritten("embeddings.ln_mean", Activation, n);
        let mut rstd = be.alloc_overwritten("embeddings.ln_rstd", Activation, n);
        let mut out = be.alloc_overwritten("embeddings.ln_out", Activation, n * e);
        let ln = self.idx.emb_ln;
        let eps = self.config.layer_norm_eps;
        be.layernorm_forward(
            &sum,
            &v[ln.gamma],
            &v[ln.beta],
            e,
            eps,
            &mut out,
            &mut mean,
            &mut rstd,
        );
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
        be.embedding_backward(&batch.input_ids, &dsum, e, &mut g[self.idx.word]);
        be.embedding_backward(&batch.position_ids, &dsum, e, &mut g[self.idx.position]);
        if let Some(token_type) = self.idx.token_type {
            be.embedding_backward(&batch.token_type_ids, &dsum, e, &mut g[token_type]);
        }
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
        let c = &self.config;
        let (b, s, h, nh) = (batch.batch, batch.seq, c.hidden_size, c.num_attention_heads);
        let (n, dh, inter_dim) = (b * s, c.head_dim(), c.intermediate_size);
        let v = &self.params.values;
        let name = |what: &str| format!("layer{i}.{what}");
        let heads = |which: &super::Dense, what: &str| {
            let mut flat = be.alloc_overwritten(&name(what), Workspace, n * h);
            which.forward(be, v, x, n, &mut flat);
            let mut permuted =
                be.alloc_overwritten(&name(&format!("{what}_heads")), Activation, n * h);
            be.permute_heads(&flat, &mut permuted, b, s, nh);
            permuted
        };
        let qh = heads(&l.query, "q");
        let kh = heads(&l.key, "k");
        let vh = heads(&l.value, "v");
        let scale = 1.0 / (dh as f64).sqrt();
        let mut scores = be.alloc_overwritten(&name("scores"), Workspace, b * nh * s * s);
        let qk = MatmulShape {
            batch: b * nh,
            m: s,
            n: s,
            k: dh,
            trans_a: false,
            trans_b: true,
        };
        be.matmul(&qk, 1.0, &qh, &kh, 0.0, &mut scores);
        let mut probs = be.alloc_overwritten(&name("probs"), Activation, b * nh * s * s);
        be.softmax_forward(&scores, &batch.mask, b, nh, s, scale, &mut probs);
        drop(scores);
        let pa = c.attention_probs_dropout_prob;
        let probs_d = dropout_new(
            be,
            &probs,
            pa,
            mode.key(pa, stream_layer(i, 0)),
            &name("probs_dropped"),
            Workspace,
        );
        let mut ctx_heads = be.alloc_overwritten(&name("ctx_heads"), Workspace, n * h);
        let pv = MatmulShape {
            batch: b * nh,
            m: s,
            n: dh,
            k: s,
            trans_a: false,
            trans_b: false,
        };
        be.matmul(
            &pv,
            1.0,
            probs_d.as_ref().unwrap_or(&probs),
            &vh,
            0.0,
            &mut ctx_heads,
        );
        drop(probs_d);
        let mut ctx = be.alloc_overwritten(&name("ctx"), Activation, n * h);
        be.unpermute_heads(&ctx_heads, &mut ctx, b, s, nh);
        drop(ctx_heads);
        let ph = c.hidden_dropout_prob;
        let p_attn_out = attention_output_dropout(c);
        let mut attn = be.alloc_overwritten(&name("attn_out"), Workspace, n * h);
        l.attn_out.forward(be, v, &ctx, n, &mut attn);
        let attn_d = dropout_new(
            be,
            &attn,
            p_attn_out,
            mode.key(p_attn_out, stream_layer(i, 1)),
            &name("attn_out_dropped"),
            Workspace,
        );
        let mut sum1 = be.alloc_overwritten(&name("sum1"), Activation, n * h);
        be.add(attn_d.as_ref().unwrap_or(&attn), x, &mut sum1);
        drop(attn_d);
        drop(attn);
        let mut h1 = be.alloc_overwritten(&name("ln1_out"), Activation, n * h);
        let mut mean1 = be.alloc_overwritten(&name("ln1_mean"), Activation, n);
        let mut rstd1 = be.alloc_overwritten(&name("ln1_rstd"), Activation, n);
        let eps = c.layer_norm_eps;
        be.layernorm_forward(
            &sum1,
            &v[l.ln1.gamma],
            &v[l.ln1.beta],
            h,
            eps,
            &mut h1,
            &mut mean1,
            &mut rstd1,
        );
        let mut inter = be.alloc_overwritten(&name("ffn_in"), Activation, n * inter_dim);
        l.inter.forward(be, v, &h1, n, &mut inter);
        let mut gelu = be.alloc_overwritten(&name("ffn_gelu"), Activation, n * inter_dim);
        be.gelu_forward(&inter, &mut gelu);
        let mut ffn = be.alloc_overwritten(&name("ffn_out"), Workspace, n * h);
        l.out.forward(be, v, &gelu, n, &mut ffn);
        let ffn_d = dropout_new(
            be,
            &ffn,
            ph,
            mode.key(ph, stream_layer(i, 2)),
            &name("ffn_out_dropped"),
            Workspace,
        );
        let mut sum2 = be.alloc_overwritten(&name("sum2"), Activation, n * h);
        be.add(ffn_d.as_ref().unwrap_or(&ffn), &h1, &mut sum2);
        drop(ffn_d);
        drop(ffn);
        let mut out = be.alloc_overwritten(&name("out"), Activation, n * h);
        let mut mean2 = be.alloc_overwritten(&name("ln2_mean"), Activation, n);
        let mut rstd2 = be.alloc_overwritten(&name("ln2_rstd"), Activation, n);
        be.layernorm_forward(
            &sum2,
            &v[l.ln2.gamma],
            &v[l.ln2.beta],
            h,
            eps,
            &mut out,
            &mut mean2,
            &mut rstd2,
        );
        let acts = LayerActs {
            qh,
            kh,
            vh,
            probs,
            ctx,
            sum1,
            mean1,
            rstd1,
            h1,
            inter,
            gelu,
            sum2,
            mean2,
            rstd2,
        };
        (acts, out)
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
        let c = &self.config;
        let (b, s, h, nh) = (batch.batch, batch.seq, c.hidden_size, c.num_attention_heads);
        let (n, dh, inter_dim) = (b * s, c.head_dim(), c.intermediate_size);
        let (ph, pa) = (c.hidden_dropout_prob, c.attention_probs_dropout_prob);
        let scale = 1.0 / (dh as f64).sqrt();
        let name = |what: &str| format!("layer{i}.d_{what}");
        let (v, g) = (&self.params.values, &mut self.params.grads);

        // out = LN2(sum2), sum2 = dropout(ffn) + h1
        let mut d_sum2 = be.alloc_overwritten(&name("sum2"), Workspace, n * h);
        layernorm_back(
            be,
            v,
            g,
            l.ln2,
            &dout,
            &a.sum2,
            &a.mean2,
            &a.rstd2,
            h,
            &mut d_sum2,
        );
        drop(dout);
        let mut d_ffn_d = None;
        if let Some(key) = mode.key(ph, stream_layer(i, 2)) {
            let mut d = be.alloc_overwritten(&name("ffn_out"), Workspace, n * h);
            be.dropout_backward(&d_sum2, &mut d, ph, key);
            d_ffn_d = Some(d);
        }
        let mut d_gelu = be.alloc_overwritten(&name("ffn_gelu"), Workspace, n * inter_dim);
        l.out.backward(
            be,
            v,
            g,
            d_ffn_d.as_ref().unwrap_or(&d_sum2),
            &a.gelu,
            n,
            Some((&mut d_gelu, false)),
        );
        drop(d_ffn_d);
        let mut d_inter = be.alloc_overwritten(&name("ffn_in"), Workspace, n * inter_dim);
        be.gelu_backward(&a.inter, &d_gelu, &mut d_inter);
        drop(d_gelu);
        // d_h1 = d_sum2 (residual) + d_inter W_i: accumulate in place.
        let mut d_h1 = d_sum2;
        l.inter
            .backward(be, v, g, &d_inter, &a.h1, n, Some((&mut d_h1, true)));
        drop(d_inter);

        // h1 = LN1(sum1), sum1 = dropout(attn) + x
        let mut d_x = be.alloc_overwritten(&name("input"), Workspace, n * h);
        layernorm_back(
            be, v, g, l.ln1, &d_h1, &a.sum1, &a.mean1, &a.rstd1, h, &mut d_x,
        );
        drop(d_h1);
        let mut d_attn_d = None;
        let p_attn_out = attention_output_dropout(c);
        if let Some(key) = mode.key(p_attn_out, stream_layer(i, 1)) {
            let mut d = be.alloc_overwritten(&name("attn_out"), Workspace, n * h);
            be.dropout_backward(&d_x, &mut d, p_attn_out, key);
            d_attn_d = Some(d);
        }
        let mut d_ctx = be.alloc_overwritten(&name("ctx"), Workspace, n * h);
        l.attn_out.backward(
            be,
            v,
            g,
            d_attn_d.as_ref().unwrap_or(&d_x),
            &a.ctx,
            n,
            Some((&mut d_ctx, false)),
        );
        drop(d_attn_d);
        let mut d_ctx_heads = be.alloc_overwritten(&name("ctx_heads"), Workspace, n * h);
        be.permute_heads(&d_ctx, &mut d_ctx_heads, b, s, nh);
        drop(d_ctx);

        // ctx_heads = dropout(probs) @ vh
        let key_a = mode.key(pa, stream_layer(i, 0));
        let probs_d = dropout_new(be, &a.probs, pa, key_a, &name("probs_dropped"), Workspace);
        let mut d_vh = be.alloc_overwritten(&name("v_heads"), Workspace, n * h);
        let dv = MatmulShape {
            batch: b * nh,
            m: s,
            n: dh,
            k: s,
            trans_a: true,
            trans_b: false,
        };
        be.matmul(
            &dv,
            1.0,
            probs_d.as_ref().unwrap_or(&a.probs),
            &d_ctx_heads,
            0.0,
            &mut d_vh,
        );
        drop(probs_d);
        let mut d_probs_d = be.alloc_overwritten(&name("probs_dropped"), Workspace, b * nh * s * s);
        let dp = MatmulShape {
            batch: b * nh,
            m: s,
            n: s,
            k: dh,
            trans_a: false,
            trans_b: true,
        };
        be.matmul(&dp, 1.0, &d_ctx_heads, &a.vh, 0.0, &mut d_probs_d);
        drop(d_ctx_heads);
        let d_probs = dropout_back_owned(be, d_probs_d, pa, key_a, &name("probs"));
        let mut d_scores = be.alloc_overwritten(&name("scores"), Workspace, b * nh * s * s);
        be.softmax_backward(&d_probs, &a.probs, s, scale, &mut d_scores);
        drop(d_probs);

        // scores = qh kh^T
        let mut d_qh = be.alloc_overwritten(&name("q_heads"), Workspace, n * h);
        let dq = MatmulShape {
            batch: b * nh,
            m: s,
            n: dh,
            k: s,
            trans_a: false,
            trans_b: false,
        };
        be.matmul(&dq, 1.0, &d_scores, &a.kh, 0.0, &mut d_qh);
        let mut d_kh = be.alloc_overwritten(&name("k_heads"), Workspace, n * h);
        let dk = MatmulShape {
            batch: b * nh,
            m: s,
            n: dh,
            k: s,
            trans_a: true,
            trans_b: false,
        };
        be.matmul(&dk, 1.0, &d_scores, &a.qh, 0.0, &mut d_kh);
        drop(d_scores);
        drop(a);
        for (d_heads, dense, what) in [
            (d_qh, &l.query, "q"),
            (d_kh, &l.key, "k"),
            (d_vh, &l.value, "v"),
        ] {
            let mut d_flat = be.alloc_overwritten(&name(what), Workspace, n * h);
            be.unpermute_heads(&d_heads, &mut d_flat, b, s, nh);
            drop(d_heads);
            dense.backward(be, v, g, &d_flat, x, n, Some((&mut d_x, true)));
        }
        d_x
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

#[allow(clippy::too_many_arguments)]
pub(crate) fn layernorm_back<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    ln: super::LayerNormIdx,
    dout: &B::Buf,
    x: &B::Buf,
    mean: &B::Buf,
    rstd: &B::Buf,
    h: usize,
    dx: &mut B::Buf,
) {
    let (lo, hi) = g.split_at_mut(ln.beta);
    let (dgamma, dbeta) = (&mut lo[ln.gamma], &mut hi[0]);
    be.layernorm_backward(dout, x, &v[ln.gamma], mean, rstd, h, dx, dgamma, dbeta);
}

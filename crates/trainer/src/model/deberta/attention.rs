//! One DeBERTa encoder layer, forward and backward: disentangled
//! self-attention scores (content-to-content, c2p and p2c), around the
//! layer body every post-LN model shares ([`crate::model::layer`]). The
//! attention stays unfused with every kernel set (the fused kernel does not
//! make the relative-position products its scores gather from); the block
//! after it is fused with [`crate::backend::Kernels::Fused`].

use super::super::Mode;
use super::super::layer::{
    Block, LayerConfig, LayerDims, LayerIdx, Qkv, attend, attend_backward, block_backward,
    block_forward, context_to_heads, project_heads, qkv_backward, qkv_forward, scores_backward,
    scores_forward,
};
use super::super::linear::{dropout_back_owned, dropout_new};
use super::{DebertaBatch, DebertaConfig};
use crate::backend::{Backend, MatmulShape, RelPosShape};
use crate::memory::BufKind::Workspace;

/// Dropout sites per layer: probabilities, attention output, FFN output,
/// relative embeddings (HF's `pos_dropout`).
pub(super) const SITES: u32 = 4;

fn stream(layer: usize, site: u32) -> u32 {
    1 + SITES * layer as u32 + site
}

/// DeBERTa drops the attention output as BERT does, and numbers a fourth
/// stream per layer for the relative embeddings.
impl LayerConfig for DebertaConfig {
    fn heads_and_eps(&self) -> (usize, f64) {
        (self.num_attention_heads, self.layer_norm_eps)
    }
    fn layer_dropout(&self) -> [f64; 3] {
        let p = self.hidden_dropout_prob;
        [self.attention_probs_dropout_prob, p, p]
    }
    fn layer_stream(&self, layer: usize, site: u32) -> u32 {
        stream(layer, site)
    }
}

/// What one layer keeps for backward.
pub struct LayerActs<B: Backend> {
    qkv: Qkv<B>,
    /// Key projection of the relative embeddings, `[heads, 2 span, dh]`.
    pos_k: Option<B::Buf>,
    /// Query projection of the relative embeddings.
    pos_q: Option<B::Buf>,
    probs: B::Buf,
    block: Block<B>,
}

fn rel_shape(c: &DebertaConfig, b: usize, s: usize, transpose: bool) -> RelPosShape {
    RelPosShape {
        b,
        heads: c.num_attention_heads,
        s,
        span2: 2 * c.span(),
        transpose,
    }
}

/// `[b, heads, s, dh] -> [heads, b * s, dh]`, so one matmul per head meets
/// that head's `[2 span, dh]` position projection.
fn heads_major<B: Backend>(be: &B, x: &B::Buf, b: usize, heads: usize, name: &str) -> B::Buf {
    let mut out = be.alloc_overwritten(name, Workspace, be.len(x));
    be.permute_heads(x, &mut out, 1, b, heads);
    out
}

/// `position rows x tokens`: `[heads, b*s, 2 span] = x_t [heads, b*s, dh] .
/// pos [heads, 2 span, dh]^T`.
fn position_scores<B: Backend>(
    be: &B,
    c: &DebertaConfig,
    x_t: &B::Buf,
    pos: &B::Buf,
    n: usize,
    name: &str,
) -> B::Buf {
    let (nh, span2) = (c.num_attention_heads, 2 * c.span());
    let mut out = be.alloc_overwritten(name, Workspace, nh * n * span2);
    let shape = MatmulShape {
        batch: nh,
        m: n,
        n: span2,
        k: c.head_dim(),
        trans_a: false,
        trans_b: true,
    };
    be.matmul(&shape, 1.0, x_t, pos, 0.0, &mut out);
    out
}

#[allow(clippy::too_many_arguments)]
pub(super) fn layer_forward<B: Backend>(
    c: &DebertaConfig,
    v: &[B::Buf],
    be: &B,
    i: usize,
    l: &LayerIdx,
    x: &B::Buf,
    rel: &B::Buf,
    batch: &DebertaBatch<B>,
    mode: Mode,
) -> (LayerActs<B>, B::Buf) {
    let d = LayerDims::new(c, (i, l), (batch.ids.batch, batch.ids.seq));
    let (b, s, nh, n, span2) = (d.b, d.s, d.heads, d.tokens(), 2 * c.span());
    let alpha = c.score_scale();
    let qkv = qkv_forward(be, v, &d, l, x);
    let mut scores = scores_forward(be, &d, alpha, &qkv);

    let ph = c.hidden_dropout_prob;
    let rel_key = mode.key(ph, stream(i, 3));
    let rel_d = dropout_new(be, rel, ph, rel_key, &d.name("rel_dropped"), Workspace);
    let rel_in = rel_d.as_ref().unwrap_or(rel);
    let pos_k = c
        .c2p
        .then(|| project_heads(be, v, &d, &l.key, rel_in, span2, 1, "pos_k"));
    let pos_q = c
        .p2c
        .then(|| project_heads(be, v, &d, &l.query, rel_in, span2, 1, "pos_q"));
    drop(rel_d);
    if let Some(pk) = &pos_k {
        let q_t = heads_major(be, &qkv.qh, b, nh, &d.name("q_heads_major"));
        let c2p = position_scores(be, c, &q_t, pk, n, &d.name("c2p"));
        drop(q_t);
        let shape = rel_shape(c, b, s, false);
        be.rel_pos_gather(&shape, alpha, &c2p, &batch.c2p_idx, &mut scores);
    }
    if let Some(pq) = &pos_q {
        let k_t = heads_major(be, &qkv.kh, b, nh, &d.name("k_heads_major"));
        let p2c = position_scores(be, c, &k_t, pq, n, &d.name("p2c"));
        drop(k_t);
        let shape = rel_shape(c, b, s, true);
        be.rel_pos_gather(&shape, alpha, &p2c, &batch.p2c_idx, &mut scores);
    }

    let (probs, ctx) = attend(be, &d, scores, &batch.ids.mask, 1.0, &qkv.vh, mode);
    let (block, out) = block_forward(be, v, &d, l, x, ctx, mode);
    let acts = LayerActs {
        qkv,
        pos_k,
        pos_q,
        probs,
        block,
    };
    (acts, out)
}

/// Consumes the layer's activations and its output's gradient; returns the
/// input's gradient and adds the relative embeddings' gradient to `d_rel`.
#[allow(clippy::too_many_arguments)]
pub(super) fn layer_backward<B: Backend>(
    c: &DebertaConfig,
    v: &[B::Buf],
    g: &mut [B::Buf],
    be: &B,
    i: usize,
    l: &LayerIdx,
    x: &B::Buf,
    rel: &B::Buf,
    a: LayerActs<B>,
    dout: B::Buf,
    d_rel: &mut B::Buf,
    batch: &DebertaBatch<B>,
    mode: Mode,
) -> B::Buf {
    let d = LayerDims::new(c, (i, l), (batch.ids.batch, batch.ids.seq));
    let (b, s, h, nh) = (d.b, d.s, d.hidden, d.heads);
    let (n, dh, span2) = (d.tokens(), d.head_dim(), 2 * c.span());
    let ph = c.hidden_dropout_prob;
    let alpha = c.score_scale();
    let name = |what: &str| d.grad_name(what);

    let (mut d_x, d_ctx, ctx) = block_backward(be, v, g, &d, l, a.block, dout, mode);
    drop(ctx);
    let d_ctx_heads = context_to_heads(be, &d, d_ctx);
    let (d_scores, d_vh) = attend_backward(be, &d, d_ctx_heads, &a.probs, &a.qkv.vh, 1.0, mode);
    // scores = alpha (qh kh^T + c2p gathered + p2c gathered)
    let (mut d_qh, mut d_kh) = scores_backward(be, &d, alpha, &d_scores, &a.qkv);

    let rel_key = mode.key(ph, stream(i, 3));
    let rel_d = dropout_new(be, rel, ph, rel_key, &name("rel_dropped"), Workspace);
    let rel_in = rel_d.as_ref().unwrap_or(rel);
    let mut d_rel_in = be.alloc_overwritten(&name("rel_in"), Workspace, span2 * h);
    let mut rel_written = false;
    let sides = [
        (a.pos_k.as_ref(), &a.qkv.qh, &mut d_qh, &l.key, false, "c2p"),
        (
            a.pos_q.as_ref(),
            &a.qkv.kh,
            &mut d_kh,
            &l.query,
            true,
            "p2c",
        ),
    ];
    for (pos, xh, d_xh, dense, transpose, what) in sides {
        let Some(pos) = pos else { continue };
        let table = if transpose {
            &batch.p2c_idx
        } else {
            &batch.c2p_idx
        };
        let mut d_pos_scores = be.alloc_overwritten(&name(what), Workspace, nh * n * span2);
        let shape = rel_shape(c, b, s, transpose);
        be.rel_pos_scatter(&shape, alpha, &d_scores, table, &mut d_pos_scores);
        // Content side: d x_t = d_pos_scores . pos, back to [b, heads, s, dh].
        let mut d_x_t = be.alloc_overwritten(&name(&format!("{what}_x_t")), Workspace, n * h);
        let back = MatmulShape {
            batch: nh,
            m: n,
            n: dh,
            k: span2,
            trans_a: false,
            trans_b: false,
        };
        be.matmul(&back, 1.0, &d_pos_scores, pos, 0.0, &mut d_x_t);
        let mut d_x_part = be.alloc_overwritten(&name(&format!("{what}_x")), Workspace, n * h);
        be.permute_heads(&d_x_t, &mut d_x_part, 1, nh, b);
        drop(d_x_t);
        be.add_assign(d_xh, &d_x_part);
        drop(d_x_part);
        // Position side: d pos = d_pos_scores^T . x_t, then the projection.
        let x_t = heads_major(be, xh, b, nh, &name(&format!("{what}_heads_major")));
        let mut d_pos = be.alloc_overwritten(&name(&format!("{what}_pos")), Workspace, span2 * h);
        let dpos = MatmulShape {
            batch: nh,
            m: span2,
            n: dh,
            k: n,
            trans_a: true,
            trans_b: false,
        };
        be.matmul(&dpos, 1.0, &d_pos_scores, &x_t, 0.0, &mut d_pos);
        drop(x_t);
        drop(d_pos_scores);
        let mut d_pos_flat =
            be.alloc_overwritten(&name(&format!("{what}_pos_flat")), Workspace, span2 * h);
        be.unpermute_heads(&d_pos, &mut d_pos_flat, 1, span2, nh);
        drop(d_pos);
        let dx = Some((&mut d_rel_in, rel_written));
        dense.backward(be, v, g, &d_pos_flat, rel_in, span2, dx);
        rel_written = true;
    }
    drop(d_scores);
    drop(rel_d);
    if rel_written {
        let d = dropout_back_owned(be, d_rel_in, ph, rel_key, &name("rel"));
        be.add_assign(d_rel, &d);
    }
    drop((a.qkv, a.pos_k, a.pos_q, a.probs));
    qkv_backward(be, v, g, &d, l, x, [d_qh, d_kh, d_vh], &mut d_x);
    d_x
}

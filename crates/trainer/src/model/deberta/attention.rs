//! One DeBERTa encoder layer, forward and backward: disentangled
//! self-attention (content-to-content, c2p and p2c scores), then BERT's
//! post-LN residual blocks.

use super::super::linear::{dropout_back_owned, dropout_new};
use super::super::{Dense, Mode};
use super::{DebertaBatch, DebertaConfig, DebertaLayerIdx};
use crate::backend::{Backend, MatmulShape, RelPosShape};
use crate::memory::BufKind::{Activation, Workspace};
use crate::model::encoder::layernorm_back;

/// Dropout sites per layer: probabilities, attention output, FFN output,
/// relative embeddings (HF's `pos_dropout`).
pub(super) const SITES: u32 = 4;

fn stream(layer: usize, site: u32) -> u32 {
    1 + SITES * layer as u32 + site
}

/// What one layer keeps for backward.
pub struct LayerActs<B: Backend> {
    qh: B::Buf,
    kh: B::Buf,
    vh: B::Buf,
    /// Key projection of the relative embeddings, `[heads, 2 span, dh]`.
    pos_k: Option<B::Buf>,
    /// Query projection of the relative embeddings.
    pos_q: Option<B::Buf>,
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
    l: &DebertaLayerIdx,
    x: &B::Buf,
    rel: &B::Buf,
    batch: &DebertaBatch<B>,
    mode: Mode,
) -> (LayerActs<B>, B::Buf) {
    let (b, s, h, nh) = (batch.batch, batch.seq, c.hidden_size, c.num_attention_heads);
    let (n, dh, inter_dim, span2) = (b * s, c.head_dim(), c.intermediate_size, 2 * c.span());
    let alpha = c.score_scale();
    let name = |what: &str| format!("layer{i}.{what}");
    let heads = |which: &Dense, input: &B::Buf, rows: usize, bb: usize, what: &str| {
        let mut flat = be.alloc_overwritten(&name(what), Workspace, rows * h);
        which.forward(be, v, input, rows, &mut flat);
        let mut permuted =
            be.alloc_overwritten(&name(&format!("{what}_heads")), Activation, rows * h);
        be.permute_heads(&flat, &mut permuted, bb, rows / bb, nh);
        permuted
    };
    let qh = heads(&l.query, x, n, b, "q");
    let kh = heads(&l.key, x, n, b, "k");
    let vh = heads(&l.value, x, n, b, "v");
    let mut scores = be.alloc_overwritten(&name("scores"), Workspace, b * nh * s * s);
    let qk = MatmulShape {
        batch: b * nh,
        m: s,
        n: s,
        k: dh,
        trans_a: false,
        trans_b: true,
    };
    be.matmul(&qk, alpha, &qh, &kh, 0.0, &mut scores);

    let ph = c.hidden_dropout_prob;
    let rel_key = mode.key(ph, stream(i, 3));
    let rel_d = dropout_new(be, rel, ph, rel_key, &name("rel_dropped"), Workspace);
    let rel_in = rel_d.as_ref().unwrap_or(rel);
    let pos_k = c.c2p.then(|| heads(&l.key, rel_in, span2, 1, "pos_k"));
    let pos_q = c.p2c.then(|| heads(&l.query, rel_in, span2, 1, "pos_q"));
    drop(rel_d);
    if let Some(pk) = &pos_k {
        let q_t = heads_major(be, &qh, b, nh, &name("q_heads_major"));
        let c2p = position_scores(be, c, &q_t, pk, n, &name("c2p"));
        drop(q_t);
        let shape = rel_shape(c, b, s, false);
        be.rel_pos_gather(&shape, alpha, &c2p, &batch.c2p_idx, &mut scores);
    }
    if let Some(pq) = &pos_q {
        let k_t = heads_major(be, &kh, b, nh, &name("k_heads_major"));
        let p2c = position_scores(be, c, &k_t, pq, n, &name("p2c"));
        drop(k_t);
        let shape = rel_shape(c, b, s, true);
        be.rel_pos_gather(&shape, alpha, &p2c, &batch.p2c_idx, &mut scores);
    }

    let mut probs = be.alloc_overwritten(&name("probs"), Activation, b * nh * s * s);
    be.softmax_forward(&scores, &batch.mask, b, nh, s, 1.0, &mut probs);
    drop(scores);
    let pa = c.attention_probs_dropout_prob;
    let key_a = mode.key(pa, stream(i, 0));
    let probs_d = dropout_new(be, &probs, pa, key_a, &name("probs_dropped"), Workspace);
    let mut ctx_heads = be.alloc_overwritten(&name("ctx_heads"), Workspace, n * h);
    let pv = MatmulShape {
        batch: b * nh,
        m: s,
        n: dh,
        k: s,
        trans_a: false,
        trans_b: false,
    };
    let p = probs_d.as_ref().unwrap_or(&probs);
    be.matmul(&pv, 1.0, p, &vh, 0.0, &mut ctx_heads);
    drop(probs_d);
    let mut ctx = be.alloc_overwritten(&name("ctx"), Activation, n * h);
    be.unpermute_heads(&ctx_heads, &mut ctx, b, s, nh);
    drop(ctx_heads);

    let mut attn = be.alloc_overwritten(&name("attn_out"), Workspace, n * h);
    l.attn_out.forward(be, v, &ctx, n, &mut attn);
    let key = mode.key(ph, stream(i, 1));
    let attn_d = dropout_new(be, &attn, ph, key, &name("attn_out_dropped"), Workspace);
    let mut sum1 = be.alloc_overwritten(&name("sum1"), Activation, n * h);
    be.add(attn_d.as_ref().unwrap_or(&attn), x, &mut sum1);
    drop(attn_d);
    drop(attn);
    let eps = c.layer_norm_eps;
    let mut h1 = be.alloc_overwritten(&name("ln1_out"), Activation, n * h);
    let mut mean1 = be.alloc_overwritten(&name("ln1_mean"), Activation, n);
    let mut rstd1 = be.alloc_overwritten(&name("ln1_rstd"), Activation, n);
    let (g1, b1) = (&v[l.ln1.gamma], &v[l.ln1.beta]);
    be.layernorm_forward(&sum1, g1, b1, h, eps, &mut h1, &mut mean1, &mut rstd1);
    let mut inter = be.alloc_overwritten(&name("ffn_in"), Activation, n * inter_dim);
    l.inter.forward(be, v, &h1, n, &mut inter);
    let mut gelu = be.alloc_overwritten(&name("ffn_gelu"), Activation, n * inter_dim);
    be.gelu_forward(&inter, &mut gelu);
    let mut ffn = be.alloc_overwritten(&name("ffn_out"), Workspace, n * h);
    l.out.forward(be, v, &gelu, n, &mut ffn);
    let key = mode.key(ph, stream(i, 2));
    let ffn_d = dropout_new(be, &ffn, ph, key, &name("ffn_out_dropped"), Workspace);
    let mut sum2 = be.alloc_overwritten(&name("sum2"), Activation, n * h);
    be.add(ffn_d.as_ref().unwrap_or(&ffn), &h1, &mut sum2);
    drop(ffn_d);
    drop(ffn);
    let mut out = be.alloc_overwritten(&name("out"), Activation, n * h);
    let mut mean2 = be.alloc_overwritten(&name("ln2_mean"), Activation, n);
    let mut rstd2 = be.alloc_overwritten(&name("ln2_rstd"), Activation, n);
    let (g2, b2) = (&v[l.ln2.gamma], &v[l.ln2.beta]);
    be.layernorm_forward(&sum2, g2, b2, h, eps, &mut out, &mut mean2, &mut rstd2);
    let acts = LayerActs {
        qh,
        kh,
        vh,
        pos_k,
        pos_q,
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

/// Consumes the layer's activations and its output's gradient; returns the
/// input's gradient and adds the relative embeddings' gradient to `d_rel`.
#[allow(clippy::too_many_arguments)]
pub(super) fn layer_backward<B: Backend>(
    c: &DebertaConfig,
    v: &[B::Buf],
    g: &mut [B::Buf],
    be: &B,
    i: usize,
    l: &DebertaLayerIdx,
    x: &B::Buf,
    rel: &B::Buf,
    a: LayerActs<B>,
    dout: B::Buf,
    d_rel: &mut B::Buf,
    batch: &DebertaBatch<B>,
    mode: Mode,
) -> B::Buf {
    let (b, s, h, nh) = (batch.batch, batch.seq, c.hidden_size, c.num_attention_heads);
    let (n, dh, inter_dim, span2) = (b * s, c.head_dim(), c.intermediate_size, 2 * c.span());
    let (ph, pa) = (c.hidden_dropout_prob, c.attention_probs_dropout_prob);
    let alpha = c.score_scale();
    let name = |what: &str| format!("layer{i}.d_{what}");

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
    let key = mode.key(ph, stream(i, 2));
    let d_ffn_d = key.map(|key| {
        let mut d = be.alloc_overwritten(&name("ffn_out"), Workspace, n * h);
        be.dropout_backward(&d_sum2, &mut d, ph, key);
        d
    });
    let mut d_gelu = be.alloc_overwritten(&name("ffn_gelu"), Workspace, n * inter_dim);
    let dy = d_ffn_d.as_ref().unwrap_or(&d_sum2);
    l.out
        .backward(be, v, g, dy, &a.gelu, n, Some((&mut d_gelu, false)));
    drop(d_ffn_d);
    let mut d_inter = be.alloc_overwritten(&name("ffn_in"), Workspace, n * inter_dim);
    be.gelu_backward(&a.inter, &d_gelu, &mut d_inter);
    drop(d_gelu);
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
    let key = mode.key(ph, stream(i, 1));
    let d_attn_d = key.map(|key| {
        let mut d = be.alloc_overwritten(&name("attn_out"), Workspace, n * h);
        be.dropout_backward(&d_x, &mut d, ph, key);
        d
    });
    let mut d_ctx = be.alloc_overwritten(&name("ctx"), Workspace, n * h);
    let dy = d_attn_d.as_ref().unwrap_or(&d_x);
    l.attn_out
        .backward(be, v, g, dy, &a.ctx, n, Some((&mut d_ctx, false)));
    drop(d_attn_d);
    let mut d_ctx_heads = be.alloc_overwritten(&name("ctx_heads"), Workspace, n * h);
    be.permute_heads(&d_ctx, &mut d_ctx_heads, b, s, nh);
    drop(d_ctx);

    // ctx_heads = dropout(probs) @ vh
    let key_a = mode.key(pa, stream(i, 0));
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
    let p = probs_d.as_ref().unwrap_or(&a.probs);
    be.matmul(&dv, 1.0, p, &d_ctx_heads, 0.0, &mut d_vh);
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
    be.softmax_backward(&d_probs, &a.probs, s, 1.0, &mut d_scores);
    drop(d_probs);

    // scores = alpha (qh kh^T + c2p gathered + p2c gathered)
    let mut d_qh = be.alloc_overwritten(&name("q_heads"), Workspace, n * h);
    let dq = MatmulShape {
        batch: b * nh,
        m: s,
        n: dh,
        k: s,
        trans_a: false,
        trans_b: false,
    };
    be.matmul(&dq, alpha, &d_scores, &a.kh, 0.0, &mut d_qh);
    let mut d_kh = be.alloc_overwritten(&name("k_heads"), Workspace, n * h);
    let dk = MatmulShape {
        batch: b * nh,
        m: s,
        n: dh,
        k: s,
        trans_a: true,
        trans_b: false,
    };
    be.matmul(&dk, alpha, &d_scores, &a.qh, 0.0, &mut d_kh);

    let rel_key = mode.key(ph, stream(i, 3));
    let rel_d = dropout_new(be, rel, ph, rel_key, &name("rel_dropped"), Workspace);
    let rel_in = rel_d.as_ref().unwrap_or(rel);
    let mut d_rel_in = be.alloc_overwritten(&name("rel_in"), Workspace, span2 * h);
    let mut rel_written = false;
    let sides = [
        (a.pos_k.as_ref(), &a.qh, &mut d_qh, &l.key, false, "c2p"),
        (a.pos_q.as_ref(), &a.kh, &mut d_kh, &l.query, true, "p2c"),
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

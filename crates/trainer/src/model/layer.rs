//! The body every post-LN transformer layer shares, BERT's families and
//! DeBERTa alike: the Q/K/V projections into heads, the masked softmax over
//! the scores with dropout and the product with the values, and the block
//! after attention (output projection, dropout, residual, LayerNorm, GELU
//! feed-forward, dropout, residual, LayerNorm), each with its backward.
//! What differs is how the attention scores are made: BERT's are `q . k`,
//! DeBERTa's add relative-position terms. Each model writes that part and
//! strings these pieces around it.
//!
//! With [`Kernels::Fused`] the block runs as two fused residual/LayerNorm
//! passes and a fused bias/GELU, and keeps only the GELU's input (its
//! output is recomputed in backward); BERT's attention becomes one fused
//! call on the projections' own layout ([`attention_forward_fused`]), which
//! keeps a log-sum-exp per row instead of the `s x s` probabilities. DeBERTa
//! keeps its unfused attention (its relative-position terms are gathered
//! from products the fused kernel does not make) with the fused block.
//!
//! Buffer lifetimes are the memory plan: `Activation` buffers live until
//! the backward of their layer, `Workspace` buffers are dropped as soon as
//! the op that reads them has run. Every buffer here is the output of an op
//! that overwrites it whole, so all come from `alloc_overwritten`.

use super::linear::{dropout_back_owned, dropout_new, weight_operands};
use super::{Dense, LayerNormIdx, Mode};
use crate::backend::{AttentionInputs, AttentionShape, Backend, Kernels, MatmulShape};
use crate::memory::BufKind::{Activation, Statistic, Workspace};
use crate::rng::RngKey;

/// A layer's parameters in the store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerIdx {
    pub query: Dense,
    pub key: Dense,
    pub value: Dense,
    pub attn_out: Dense,
    pub ln1: LayerNormIdx,
    pub inter: Dense,
    pub out: Dense,
    pub ln2: LayerNormIdx,
}

/// What a layer reads of its model's config. Both families' configs use
/// Hugging Face's names for the sizes; they differ in which outputs are
/// dropped and in how dropout streams are numbered.
pub(crate) trait LayerConfig {
    /// Attention heads and LayerNorm epsilon (the widths are the weights').
    fn heads_and_eps(&self) -> (usize, f64);
    /// Dropout of the probabilities, the attention output and the
    /// feed-forward output.
    fn layer_dropout(&self) -> [f64; 3];
    /// The dropout stream of `layer`'s site `site` (0, 1, 2 in the order of
    /// [`LayerConfig::layer_dropout`]).
    fn layer_stream(&self, layer: usize, site: u32) -> u32;
}

/// One layer's sizes and dropout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerDims {
    /// Layer index (names its buffers).
    pub layer: usize,
    pub b: usize,
    pub s: usize,
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub eps: f64,
    pub p_probs: f64,
    /// Dropout on the attention output projection (0 for DistilBERT).
    pub p_attn_out: f64,
    /// Dropout on the feed-forward output.
    pub p_ffn: f64,
    /// Dropout streams of the probabilities, the attention output and the
    /// feed-forward output.
    pub streams: [u32; 3],
}

impl LayerDims {
    /// Layer `layer`, whose weights are `idx`, of a batch of `b` sequences
    /// of `s` tokens.
    pub fn new(
        config: &impl LayerConfig,
        (layer, idx): (usize, &LayerIdx),
        (b, s): (usize, usize),
    ) -> Self {
        let (hidden, intermediate) = (idx.inter.inp, idx.inter.out);
        let (heads, eps) = config.heads_and_eps();
        let [p_probs, p_attn_out, p_ffn] = config.layer_dropout();
        LayerDims {
            layer,
            b,
            s,
            hidden,
            heads,
            intermediate,
            eps,
            p_probs,
            p_attn_out,
            p_ffn,
            streams: [0, 1, 2].map(|site| config.layer_stream(layer, site)),
        }
    }
    pub fn tokens(&self) -> usize {
        self.b * self.s
    }
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
    /// `layer{i}.{what}`: a forward buffer's name.
    pub fn name(&self, what: &str) -> String {
        format!("layer{}.{what}", self.layer)
    }
    /// `layer{i}.d_{what}`: a gradient's name.
    pub fn grad_name(&self, what: &str) -> String {
        format!("layer{}.d_{what}", self.layer)
    }
    /// The dropout key of the probabilities.
    pub fn probs_key(&self, mode: Mode) -> Option<RngKey> {
        mode.key(self.p_probs, self.streams[0])
    }
    /// The dropout keys of the attention output and the feed-forward output.
    fn block_keys(&self, mode: Mode) -> [Option<RngKey>; 2] {
        [
            mode.key(self.p_attn_out, self.streams[1]),
            mode.key(self.p_ffn, self.streams[2]),
        ]
    }
    /// The fused attention call of this layer, at softmax scale `scale`.
    pub fn attention(&self, scale: f64) -> AttentionShape {
        AttentionShape {
            b: self.b,
            s: self.s,
            heads: self.heads,
            head_dim: self.head_dim(),
            scale,
            dropout: self.p_probs,
        }
    }
    /// `[b * heads, s, s] = [b * heads, s, dh] . [b * heads, s, dh]^T`.
    fn scores_shape(&self) -> MatmulShape {
        MatmulShape {
            batch: self.b * self.heads,
            m: self.s,
            n: self.s,
            k: self.head_dim(),
            trans_a: false,
            trans_b: true,
        }
    }
    /// `[b * heads, s, dh] = [b * heads, s, s] . [b * heads, s, dh]`, with
    /// the first operand transposed when `trans_a`.
    fn context_shape(&self, trans_a: bool) -> MatmulShape {
        MatmulShape {
            batch: self.b * self.heads,
            m: self.s,
            n: self.head_dim(),
            k: self.s,
            trans_a,
            trans_b: false,
        }
    }
}

/// `input W^T + b` for `rows` rows (`bb` sequences), permuted to
/// `[bb, heads, rows / bb, dh]`; the unpermuted product is scratch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn project_heads<B: Backend>(
    be: &B,
    v: &[B::Buf],
    d: &LayerDims,
    dense: &Dense,
    input: &B::Buf,
    rows: usize,
    bb: usize,
    what: &str,
) -> B::Buf {
    let mut flat = be.alloc_overwritten(&d.name(what), Workspace, rows * d.hidden);
    dense.forward(be, v, input, rows, &mut flat);
    let mut permuted = be.alloc_overwritten(
        &d.name(&format!("{what}_heads")),
        Activation,
        rows * d.hidden,
    );
    be.permute_heads(&flat, &mut permuted, bb, rows / bb, d.heads);
    permuted
}

/// The layer input's queries, keys and values, `[b, heads, s, dh]` each.
pub(crate) struct Qkv<B: Backend> {
    pub qh: B::Buf,
    pub kh: B::Buf,
    pub vh: B::Buf,
}

pub(crate) fn qkv_forward<B: Backend>(
    be: &B,
    v: &[B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    x: &B::Buf,
) -> Qkv<B> {
    let (n, b) = (d.tokens(), d.b);
    Qkv {
        qh: project_heads(be, v, d, &l.query, x, n, b, "q"),
        kh: project_heads(be, v, d, &l.key, x, n, b, "k"),
        vh: project_heads(be, v, d, &l.value, x, n, b, "v"),
    }
}

/// `alpha q . k^T`, `[b, heads, s, s]`: the scores before any extra term.
pub(crate) fn scores_forward<B: Backend>(
    be: &B,
    d: &LayerDims,
    alpha: f64,
    qkv: &Qkv<B>,
) -> B::Buf {
    let (b, s, nh) = (d.b, d.s, d.heads);
    let mut scores = be.alloc_overwritten(&d.name("scores"), Workspace, b * nh * s * s);
    be.matmul(&d.scores_shape(), alpha, &qkv.qh, &qkv.kh, 0.0, &mut scores);
    scores
}

/// The gradients of the queries and keys from the scores' gradient, for
/// scores `alpha q . k^T`.
pub(crate) fn scores_backward<B: Backend>(
    be: &B,
    d: &LayerDims,
    alpha: f64,
    d_scores: &B::Buf,
    qkv: &Qkv<B>,
) -> (B::Buf, B::Buf) {
    let n_h = d.tokens() * d.hidden;
    let mut d_qh = be.alloc_overwritten(&d.grad_name("q_heads"), Workspace, n_h);
    be.matmul(
        &d.context_shape(false),
        alpha,
        d_scores,
        &qkv.kh,
        0.0,
        &mut d_qh,
    );
    let mut d_kh = be.alloc_overwritten(&d.grad_name("k_heads"), Workspace, n_h);
    be.matmul(
        &d.context_shape(true),
        alpha,
        d_scores,
        &qkv.qh,
        0.0,
        &mut d_kh,
    );
    (d_qh, d_kh)
}

/// `softmax(scale * scores)` over the keys the mask keeps, dropped out, times
/// the values, unpermuted: returns the probabilities (kept for backward)
/// and the context `[b, s, hidden]`. Consumes the scores.
pub(crate) fn attend<B: Backend>(
    be: &B,
    d: &LayerDims,
    scores: B::Buf,
    mask: &B::Ids,
    scale: f64,
    vh: &B::Buf,
    mode: Mode,
) -> (B::Buf, B::Buf) {
    let (b, s, nh) = (d.b, d.s, d.heads);
    let n_h = d.tokens() * d.hidden;
    let mut probs = be.alloc_overwritten(&d.name("probs"), Activation, b * nh * s * s);
    be.softmax_forward(&scores, mask, b, nh, s, scale, &mut probs);
    drop(scores);
    let key = d.probs_key(mode);
    let probs_d = dropout_new(
        be,
        &probs,
        d.p_probs,
        key,
        &d.name("probs_dropped"),
        Workspace,
    );
    let mut ctx_heads = be.alloc_overwritten(&d.name("ctx_heads"), Workspace, n_h);
    let p = probs_d.as_ref().unwrap_or(&probs);
    be.matmul(&d.context_shape(false), 1.0, p, vh, 0.0, &mut ctx_heads);
    drop(probs_d);
    let mut ctx = be.alloc_overwritten(&d.name("ctx"), Activation, n_h);
    be.unpermute_heads(&ctx_heads, &mut ctx, b, s, nh);
    (probs, ctx)
}

/// Backward of [`attend`] from the context's gradient in heads layout:
/// the scores' gradient and the values'. Consumes `d_ctx_heads`.
pub(crate) fn attend_backward<B: Backend>(
    be: &B,
    d: &LayerDims,
    d_ctx_heads: B::Buf,
    probs: &B::Buf,
    vh: &B::Buf,
    scale: f64,
    mode: Mode,
) -> (B::Buf, B::Buf) {
    let (b, s, nh) = (d.b, d.s, d.heads);
    let (pa, key) = (d.p_probs, d.probs_key(mode));
    // The dropped probabilities, regenerated from their key.
    let probs_d = dropout_new(be, probs, pa, key, &d.name("probs_dropped"), Workspace);
    let mut d_vh = be.alloc_overwritten(&d.grad_name("v_heads"), Workspace, d.tokens() * d.hidden);
    let p = probs_d.as_ref().unwrap_or(probs);
    be.matmul(&d.context_shape(true), 1.0, p, &d_ctx_heads, 0.0, &mut d_vh);
    drop(probs_d);
    let mut d_probs_d =
        be.alloc_overwritten(&d.grad_name("probs_dropped"), Workspace, b * nh * s * s);
    be.matmul(
        &d.scores_shape(),
        1.0,
        &d_ctx_heads,
        vh,
        0.0,
        &mut d_probs_d,
    );
    drop(d_ctx_heads);
    let d_probs = dropout_back_owned(be, d_probs_d, pa, key, &d.grad_name("probs"));
    let mut d_scores = be.alloc_overwritten(&d.grad_name("scores"), Workspace, b * nh * s * s);
    be.softmax_backward(&d_probs, probs, s, scale, &mut d_scores);
    (d_scores, d_vh)
}

/// What the block after attention keeps for backward, by kernel set.
pub(crate) enum Block<B: Backend> {
    Reference(BlockActs<B>),
    Fused(FusedBlockActs<B>),
}

/// `h1 = LN1(dropout(ctx W_o + b_o) + x)`, `out = LN2(dropout(FFN(h1)) +
/// h1)` with the backend's kernels. Takes the context (kept for backward);
/// returns the layer output.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_forward<B: Backend>(
    be: &B,
    v: &[B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    x: &B::Buf,
    ctx: B::Buf,
    mode: Mode,
) -> (Block<B>, B::Buf) {
    match be.kernels() {
        Kernels::Reference => {
            let (acts, out) = block_forward_reference(be, v, d, l, x, ctx, mode);
            (Block::Reference(acts), out)
        }
        Kernels::Fused => {
            let (acts, out) = block_forward_fused(be, v, d, l, x, ctx, mode);
            (Block::Fused(acts), out)
        }
    }
}

/// Backward of [`block_forward`] from the output's gradient (consumed):
/// the residual part of the layer input's gradient (the Q/K/V part is
/// added by [`qkv_backward`]), the context's gradient `[b, s, hidden]`, and
/// the context itself (the fused attention's backward reads it). The
/// block's other saved activations are freed here (the fused block frees
/// each after its last reader), so none is live in the attention's
/// backward that follows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_backward<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    a: Block<B>,
    dout: B::Buf,
    mode: Mode,
) -> (B::Buf, B::Buf, B::Buf) {
    match a {
        Block::Reference(a) => block_backward_reference(be, v, g, d, l, a, dout, mode),
        Block::Fused(a) => block_backward_fused(be, v, g, d, l, a, dout, mode),
    }
}

/// The context's gradient in heads layout, for the unfused attention's
/// backward (consumes the token-layout one).
pub(crate) fn context_to_heads<B: Backend>(be: &B, d: &LayerDims, d_ctx: B::Buf) -> B::Buf {
    let n_h = d.tokens() * d.hidden;
    let mut d_ctx_heads = be.alloc_overwritten(&d.grad_name("ctx_heads"), Workspace, n_h);
    be.permute_heads(&d_ctx, &mut d_ctx_heads, d.b, d.s, d.heads);
    d_ctx_heads
}

/// What the reference block keeps for backward.
pub(crate) struct BlockActs<B: Backend> {
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

/// [`block_forward`] one trait operation at a time.
#[allow(clippy::too_many_arguments)]
fn block_forward_reference<B: Backend>(
    be: &B,
    v: &[B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    x: &B::Buf,
    ctx: B::Buf,
    mode: Mode,
) -> (BlockActs<B>, B::Buf) {
    let (n, h, inter_dim, eps) = (d.tokens(), d.hidden, d.intermediate, d.eps);
    let mut attn = be.alloc_overwritten(&d.name("attn_out"), Workspace, n * h);
    l.attn_out.forward(be, v, &ctx, n, &mut attn);
    let (pa, key) = (d.p_attn_out, mode.key(d.p_attn_out, d.streams[1]));
    let attn_d = dropout_new(be, &attn, pa, key, &d.name("attn_out_dropped"), Workspace);
    let mut sum1 = be.alloc_overwritten(&d.name("sum1"), Activation, n * h);
    be.add(attn_d.as_ref().unwrap_or(&attn), x, &mut sum1);
    drop(attn_d);
    drop(attn);
    let mut h1 = be.alloc_overwritten(&d.name("ln1_out"), Activation, n * h);
    let mut mean1 = be.alloc_overwritten(&d.name("ln1_mean"), Statistic, n);
    let mut rstd1 = be.alloc_overwritten(&d.name("ln1_rstd"), Statistic, n);
    let (g1, b1) = (&v[l.ln1.gamma], &v[l.ln1.beta]);
    be.layernorm_forward(&sum1, g1, b1, h, eps, &mut h1, &mut mean1, &mut rstd1);
    let mut inter = be.alloc_overwritten(&d.name("ffn_in"), Activation, n * inter_dim);
    l.inter.forward(be, v, &h1, n, &mut inter);
    let mut gelu = be.alloc_overwritten(&d.name("ffn_gelu"), Activation, n * inter_dim);
    be.gelu_forward(&inter, &mut gelu);
    let mut ffn = be.alloc_overwritten(&d.name("ffn_out"), Workspace, n * h);
    l.out.forward(be, v, &gelu, n, &mut ffn);
    let (ph, key) = (d.p_ffn, mode.key(d.p_ffn, d.streams[2]));
    let ffn_d = dropout_new(be, &ffn, ph, key, &d.name("ffn_out_dropped"), Workspace);
    let mut sum2 = be.alloc_overwritten(&d.name("sum2"), Activation, n * h);
    be.add(ffn_d.as_ref().unwrap_or(&ffn), &h1, &mut sum2);
    drop(ffn_d);
    drop(ffn);
    let mut out = be.alloc_overwritten(&d.name("out"), Activation, n * h);
    let mut mean2 = be.alloc_overwritten(&d.name("ln2_mean"), Statistic, n);
    let mut rstd2 = be.alloc_overwritten(&d.name("ln2_rstd"), Statistic, n);
    let (g2, b2) = (&v[l.ln2.gamma], &v[l.ln2.beta]);
    be.layernorm_forward(&sum2, g2, b2, h, eps, &mut out, &mut mean2, &mut rstd2);
    let acts = BlockActs {
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

/// [`block_backward`] one trait operation at a time.
#[allow(clippy::too_many_arguments)]
fn block_backward_reference<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    a: BlockActs<B>,
    dout: B::Buf,
    mode: Mode,
) -> (B::Buf, B::Buf, B::Buf) {
    let (n, h, inter_dim) = (d.tokens(), d.hidden, d.intermediate);
    // out = LN2(sum2), sum2 = dropout(ffn) + h1
    let mut d_sum2 = be.alloc_overwritten(&d.grad_name("sum2"), Workspace, n * h);
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
    let (ph, key) = (d.p_ffn, mode.key(d.p_ffn, d.streams[2]));
    let d_ffn_d = key.map(|key| {
        let mut dd = be.alloc_overwritten(&d.grad_name("ffn_out"), Workspace, n * h);
        be.dropout_backward(&d_sum2, &mut dd, ph, key);
        dd
    });
    let mut d_gelu = be.alloc_overwritten(&d.grad_name("ffn_gelu"), Workspace, n * inter_dim);
    let dy = d_ffn_d.as_ref().unwrap_or(&d_sum2);
    l.out
        .backward(be, v, g, dy, &a.gelu, n, Some((&mut d_gelu, false)));
    drop(d_ffn_d);
    let mut d_inter = be.alloc_overwritten(&d.grad_name("ffn_in"), Workspace, n * inter_dim);
    be.gelu_backward(&a.inter, &d_gelu, &mut d_inter);
    drop(d_gelu);
    // d_h1 = d_sum2 (residual) + d_inter W_i: accumulate in place.
    let mut d_h1 = d_sum2;
    l.inter
        .backward(be, v, g, &d_inter, &a.h1, n, Some((&mut d_h1, true)));
    drop(d_inter);

    // h1 = LN1(sum1), sum1 = dropout(attn) + x
    let mut d_x = be.alloc_overwritten(&d.grad_name("input"), Workspace, n * h);
    layernorm_back(
        be, v, g, l.ln1, &d_h1, &a.sum1, &a.mean1, &a.rstd1, h, &mut d_x,
    );
    drop(d_h1);
    let (pa, key) = (d.p_attn_out, mode.key(d.p_attn_out, d.streams[1]));
    let d_attn_d = key.map(|key| {
        let mut dd = be.alloc_overwritten(&d.grad_name("attn_out"), Workspace, n * h);
        be.dropout_backward(&d_x, &mut dd, pa, key);
        dd
    });
    let mut d_ctx = be.alloc_overwritten(&d.grad_name("ctx"), Workspace, n * h);
    let dy = d_attn_d.as_ref().unwrap_or(&d_x);
    l.attn_out
        .backward(be, v, g, dy, &a.ctx, n, Some((&mut d_ctx, false)));
    drop(d_attn_d);
    (d_x, d_ctx, a.ctx)
}

/// What the fused block keeps for backward: the residual sums before each
/// LayerNorm with their statistics, LN1's output, and the GELU's input.
pub(crate) struct FusedBlockActs<B: Backend> {
    ctx: B::Buf,
    sum1: B::Buf,
    mean1: B::Buf,
    rstd1: B::Buf,
    h1: B::Buf,
    pre: B::Buf,
    sum2: B::Buf,
    mean2: B::Buf,
    rstd2: B::Buf,
}

/// [`block_forward`] with the fused operations: each product writes the
/// buffer its residual/LayerNorm pass finishes in place.
#[allow(clippy::too_many_arguments)]
fn block_forward_fused<B: Backend>(
    be: &B,
    v: &[B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    x: &B::Buf,
    ctx: B::Buf,
    mode: Mode,
) -> (FusedBlockActs<B>, B::Buf) {
    let (n, h, inter_dim, eps) = (d.tokens(), d.hidden, d.intermediate, d.eps);
    let [key1, key2] = d.block_keys(mode);
    let mut sum1 = be.alloc_overwritten(&d.name("sum1"), Activation, n * h);
    l.attn_out.project(be, v, None, &ctx, n, &mut sum1);
    let mut h1 = be.alloc_overwritten(&d.name("ln1_out"), Activation, n * h);
    let mut mean1 = be.alloc_overwritten(&d.name("ln1_mean"), Statistic, n);
    let mut rstd1 = be.alloc_overwritten(&d.name("ln1_rstd"), Statistic, n);
    let (g1, b1) = (&v[l.ln1.gamma], &v[l.ln1.beta]);
    let (bias1, p1) = (&v[l.attn_out.b], d.p_attn_out);
    be.residual_layernorm_forward(
        &mut sum1, bias1, x, p1, key1, g1, b1, eps, &mut h1, &mut mean1, &mut rstd1,
    );
    let [w_inter, w_out] = weight_operands(be, v, [&l.inter, &l.out], &h1);
    let mut pre = be.alloc_overwritten(&d.name("ffn_in"), Activation, n * inter_dim);
    l.inter.project(be, v, w_inter, &h1, n, &mut pre);
    let mut gelu = be.alloc_overwritten(&d.name("ffn_gelu"), Workspace, n * inter_dim);
    be.bias_gelu_forward(&mut pre, &v[l.inter.b], &mut gelu);
    let mut sum2 = be.alloc_overwritten(&d.name("sum2"), Activation, n * h);
    l.out.project(be, v, w_out, &gelu, n, &mut sum2);
    drop(gelu);
    let mut out = be.alloc_overwritten(&d.name("out"), Activation, n * h);
    let mut mean2 = be.alloc_overwritten(&d.name("ln2_mean"), Statistic, n);
    let mut rstd2 = be.alloc_overwritten(&d.name("ln2_rstd"), Statistic, n);
    let (g2, b2) = (&v[l.ln2.gamma], &v[l.ln2.beta]);
    let (bias2, p2) = (&v[l.out.b], d.p_ffn);
    be.residual_layernorm_forward(
        &mut sum2, bias2, &h1, p2, key2, g2, b2, eps, &mut out, &mut mean2, &mut rstd2,
    );
    let acts = FusedBlockActs {
        ctx,
        sum1,
        mean1,
        rstd1,
        h1,
        pre,
        sum2,
        mean2,
        rstd2,
    };
    (acts, out)
}

/// The fused LayerNorm backward with the parameters' gradients in the
/// store: the residual sum's gradient, and the branch's (through its
/// dropout) when dropout was on.
#[allow(clippy::too_many_arguments)]
fn residual_layernorm_back<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    d: &LayerDims,
    ln: LayerNormIdx,
    dout: &B::Buf,
    (sum, mean, rstd): (&B::Buf, &B::Buf, &B::Buf),
    (p, key): (f64, Option<RngKey>),
    what: &str,
) -> (B::Buf, Option<B::Buf>) {
    let len = be.len(sum);
    let mut d_sum = be.alloc_overwritten(&d.grad_name(what), Workspace, len);
    let mut d_branch =
        key.map(|_| be.alloc_overwritten(&d.grad_name(&format!("{what}_branch")), Workspace, len));
    let (lo, hi) = g.split_at_mut(ln.beta);
    let (dgamma, dbeta) = (&mut lo[ln.gamma], &mut hi[0]);
    be.residual_layernorm_backward(
        dout,
        sum,
        &v[ln.gamma],
        mean,
        rstd,
        p,
        key,
        &mut d_sum,
        d_branch.as_mut(),
        dgamma,
        dbeta,
    );
    (d_sum, d_branch)
}

/// [`block_backward`] with the fused operations; the GELU's output is
/// recomputed from its input.
#[allow(clippy::too_many_arguments)]
fn block_backward_fused<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    a: FusedBlockActs<B>,
    dout: B::Buf,
    mode: Mode,
) -> (B::Buf, B::Buf, B::Buf) {
    let (n, h, inter_dim) = (d.tokens(), d.hidden, d.intermediate);
    let [key1, key2] = d.block_keys(mode);
    // Each saved activation is freed once its last reader is done.
    let FusedBlockActs {
        ctx,
        sum1,
        mean1,
        rstd1,
        h1,
        pre,
        sum2,
        mean2,
        rstd2,
    } = a;
    // out = LN2(sum2), sum2 = dropout(ffn + b) + h1
    let saved2 = (&sum2, &mean2, &rstd2);
    let (d_sum2, d_ffn) =
        residual_layernorm_back(be, v, g, d, l.ln2, &dout, saved2, (d.p_ffn, key2), "sum2");
    drop((dout, sum2, mean2, rstd2));
    // One scratch buffer of the FFN's width at a time: the recomputed GELU
    // output lives only for the weight's gradient, and the GELU's backward
    // overwrites its incoming gradient.
    let mut gelu = be.alloc_overwritten(&d.grad_name("ffn_gelu_out"), Workspace, n * inter_dim);
    be.gelu_forward(&pre, &mut gelu);
    let dy = d_ffn.as_ref().unwrap_or(&d_sum2);
    l.out.backward(be, v, g, dy, &gelu, n, None);
    drop(gelu);
    let mut d_pre = be.alloc_overwritten(&d.grad_name("ffn_in"), Workspace, n * inter_dim);
    let [w_out, w_inter] = weight_operands(be, v, [&l.out, &l.inter], dy);
    l.out.input_grad(be, v, w_out, dy, n, &mut d_pre, false);
    drop(d_ffn);
    be.gelu_backward_in_place(&pre, &mut d_pre);
    drop(pre);
    let mut d_h1 = d_sum2;
    l.inter
        .backward_cast(be, v, g, w_inter, &d_pre, &h1, n, Some((&mut d_h1, true)));
    drop((d_pre, h1));
    // h1 = LN1(sum1), sum1 = dropout(attn + b) + x
    let saved1 = (&sum1, &mean1, &rstd1);
    let (d_x, d_attn) = residual_layernorm_back(
        be,
        v,
        g,
        d,
        l.ln1,
        &d_h1,
        saved1,
        (d.p_attn_out, key1),
        "input",
    );
    drop((d_h1, sum1, mean1, rstd1));
    let mut d_ctx = be.alloc_overwritten(&d.grad_name("ctx"), Workspace, n * h);
    let dy = d_attn.as_ref().unwrap_or(&d_x);
    l.attn_out
        .backward(be, v, g, dy, &ctx, n, Some((&mut d_ctx, false)));
    drop(d_attn);
    (d_x, d_ctx, ctx)
}

/// The projections `[b, s, hidden]` the fused attention reads, kept for its
/// backward.
pub(crate) struct Projections<B: Backend> {
    pub q: B::Buf,
    pub k: B::Buf,
    pub v: B::Buf,
}

/// What the fused attention keeps: the projections and one log-sum-exp per
/// query row (its output, the context, is kept by the block).
pub(crate) struct FusedAttention<B: Backend> {
    proj: Projections<B>,
    lse: B::Buf,
}

/// Q, K, V in the projections' own layout, then [`Backend::attention_forward`]:
/// the saved state and the context `[b, s, hidden]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_forward_fused<B: Backend>(
    be: &B,
    v: &[B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    x: &B::Buf,
    mask: &B::Ids,
    scale: f64,
    mode: Mode,
) -> (FusedAttention<B>, B::Buf) {
    let n_h = d.tokens() * d.hidden;
    let [w_q, w_k, w_v] = weight_operands(be, v, [&l.query, &l.key, &l.value], x);
    let project = |dense: &Dense, copy, what: &str| {
        let mut out = be.alloc_overwritten(&d.name(what), Activation, n_h);
        dense.forward_cast(be, v, copy, x, d.tokens(), &mut out);
        out
    };
    let proj = Projections {
        q: project(&l.query, w_q, "q"),
        k: project(&l.key, w_k, "k"),
        v: project(&l.value, w_v, "v"),
    };
    let shape = d.attention(scale);
    let mut ctx = be.alloc_overwritten(&d.name("ctx"), Activation, n_h);
    let mut lse = be.alloc_overwritten(&d.name("lse"), Statistic, shape.rows());
    let key = d.probs_key(mode);
    let Projections { q, k, v: vv } = &proj;
    let inputs = AttentionInputs {
        q,
        k,
        v: vv,
        mask,
        key,
    };
    be.attention_forward(&shape, &inputs, &mut ctx, &mut lse);
    (FusedAttention { proj, lse }, ctx)
}

/// Backward of [`attention_forward_fused`] from the context's gradient
/// (consumed; `ctx` is the forward's output): the projections' gradients,
/// `[b, s, hidden]` each, ready for their dense layers.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_backward_fused<B: Backend>(
    be: &B,
    d: &LayerDims,
    a: &FusedAttention<B>,
    ctx: &B::Buf,
    d_ctx: B::Buf,
    mask: &B::Ids,
    scale: f64,
    mode: Mode,
) -> [B::Buf; 3] {
    let n_h = d.tokens() * d.hidden;
    let shape = d.attention(scale);
    let mut delta = be.alloc_overwritten(&d.grad_name("attn_delta"), Statistic, shape.rows());
    let grad = |what: &str| be.alloc_overwritten(&d.grad_name(what), Workspace, n_h);
    let (mut dq, mut dk, mut dv) = (grad("q"), grad("k"), grad("v"));
    let Projections { q, k, v } = &a.proj;
    let inputs = AttentionInputs {
        q,
        k,
        v,
        mask,
        key: d.probs_key(mode),
    };
    be.attention_backward(
        &shape, &inputs, ctx, &d_ctx, &a.lse, &mut delta, &mut dq, &mut dk, &mut dv,
    );
    drop(delta);
    drop(d_ctx);
    [dq, dk, dv]
}

/// Adds the projections' input gradient to `d_x` (and their parameters'
/// gradients to `g`), consuming the `[b, s, hidden]` gradients of Q, K, V.
#[allow(clippy::too_many_arguments)]
pub(crate) fn projections_backward<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    x: &B::Buf,
    grads: [B::Buf; 3],
    d_x: &mut B::Buf,
) {
    let [dq, dk, dv] = grads;
    let [w_q, w_k, w_v] = weight_operands(be, v, [&l.query, &l.key, &l.value], &dq);
    for (dy, dense, copy) in [(dq, &l.query, w_q), (dk, &l.key, w_k), (dv, &l.value, w_v)] {
        dense.backward_cast(be, v, g, copy, &dy, x, d.tokens(), Some((&mut *d_x, true)));
    }
}

/// Adds the Q/K/V projections' input gradient to `d_x` (and their
/// parameters' gradients to `g`), consuming the heads' gradients.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qkv_backward<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    d: &LayerDims,
    l: &LayerIdx,
    x: &B::Buf,
    grads: [B::Buf; 3],
    d_x: &mut B::Buf,
) {
    let (n, h) = (d.tokens(), d.hidden);
    let [d_qh, d_kh, d_vh] = grads;
    for (d_heads, dense, what) in [
        (d_qh, &l.query, "q"),
        (d_kh, &l.key, "k"),
        (d_vh, &l.value, "v"),
    ] {
        let mut d_flat = be.alloc_overwritten(&d.grad_name(what), Workspace, n * h);
        be.unpermute_heads(&d_heads, &mut d_flat, d.b, d.s, d.heads);
        drop(d_heads);
        dense.backward(be, v, g, &d_flat, x, n, Some((&mut *d_x, true)));
    }
}

/// A LayerNorm's output and saved statistics, in new buffers.
pub(crate) struct Normed<B: Backend> {
    pub out: B::Buf,
    pub mean: B::Buf,
    pub rstd: B::Buf,
}

/// LayerNorm `ln` of the store over `x`'s rows of `h`, into buffers named
/// `{name}_out`, `{name}_mean` and `{name}_rstd` (the statistics allocated
/// first).
pub(crate) fn layernorm_new<B: Backend>(
    be: &B,
    v: &[B::Buf],
    ln: LayerNormIdx,
    x: &B::Buf,
    (h, eps): (usize, f64),
    name: &str,
) -> Normed<B> {
    let rows = be.len(x) / h;
    let mut mean = be.alloc_overwritten(&format!("{name}_mean"), Statistic, rows);
    let mut rstd = be.alloc_overwritten(&format!("{name}_rstd"), Statistic, rows);
    let mut out = be.alloc_overwritten(&format!("{name}_out"), Activation, rows * h);
    be.layernorm_forward(
        x,
        &v[ln.gamma],
        &v[ln.beta],
        h,
        eps,
        &mut out,
        &mut mean,
        &mut rstd,
    );
    Normed { out, mean, rstd }
}

/// LayerNorm's backward with the parameters' gradients in the store.
#[allow(clippy::too_many_arguments)]
pub(crate) fn layernorm_back<B: Backend>(
    be: &B,
    v: &[B::Buf],
    g: &mut [B::Buf],
    ln: LayerNormIdx,
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

//! The family's classification head on the first token (see
//! [`super::family::HeadSpec`]): optional dropout, dense + activation (BERT's
//! pooler: tanh; RoBERTa: tanh; ELECTRA: GELU; DistilBERT: ReLU), dropout,
//! 0-3 hidden layers (dense + GELU + dropout) and the output layer
//! producing logits.

use super::family::HeadActivation;
use super::linear::{dropout_back_owned, dropout_new};
use super::{BertClassifier, DeviceBatch, Mode};
use crate::backend::{Backend, LossTargets};
use crate::memory::BufKind::{Activation, Workspace};

/// Dropout stream of the head's j-th dropout (after the encoder's): 0 after
/// the activation, 1-3 after the hidden layers, 4 on the first token.
fn head_stream(layers: usize, j: usize) -> u32 {
    1 + 3 * layers as u32 + j as u32
}
const PRE_DENSE_STREAM: usize = 4;

/// A hidden head layer's GELU input, GELU output and dropped output.
type HiddenActs<B> = (
    <B as Backend>::Buf,
    <B as Backend>::Buf,
    Option<<B as Backend>::Buf>,
);

pub struct HeadActs<B: Backend> {
    cls: B::Buf,
    /// The first token after dropout, for families that drop it.
    cls_dropped: Option<B::Buf>,
    /// The dense layer's output, kept when the activation's backward needs
    /// its input (GELU).
    pre: Option<B::Buf>,
    pooled: B::Buf,
    pooled_dropped: Option<B::Buf>,
    /// Per hidden layer: GELU input, GELU output, dropped output.
    hidden: Vec<HiddenActs<B>>,
    pub(crate) logits: B::Buf,
}

impl<B: Backend> BertClassifier<B> {
    pub(crate) fn head_forward(
        &self,
        be: &B,
        batch: &DeviceBatch<B>,
        x: &B::Buf,
        mode: Mode,
    ) -> HeadActs<B> {
        let (b, h) = (batch.batch, self.config.hidden_size);
        let layers = self.config.num_hidden_layers;
        let spec = self.config.family().head;
        let v = &self.params.values;
        let p = self.config.head_dropout();
        let mut cls = be.alloc("head.cls", Activation, b * h);
        be.cls_forward(x, &mut cls, b, batch.seq);
        let cls_dropped = if spec.dropout_before_dense {
            let key = mode.key(p, head_stream(layers, PRE_DENSE_STREAM));
            dropout_new(be, &cls, p, key, "head.cls_dropped", Activation)
        } else {
            None
        };
        let keep_pre = spec.activation == HeadActivation::Gelu;
        let pre_kind = if keep_pre { Activation } else { Workspace };
        let mut pre = be.alloc("head.pooler_pre", pre_kind, b * h);
        self.idx
            .pooler
            .forward(be, v, cls_dropped.as_ref().unwrap_or(&cls), b, &mut pre);
        let mut pooled = be.alloc("head.pooled", Activation, b * h);
        match spec.activation {
            HeadActivation::Tanh => be.tanh_forward(&pre, &mut pooled),
            HeadActivation::Gelu => be.gelu_forward(&pre, &mut pooled),
            HeadActivation::Relu => be.relu_forward(&pre, &mut pooled),
        }
        let pre = if keep_pre {
            Some(pre)
        } else {
            drop(pre);
            None
        };
        let pooled_dropped = dropout_new(
            be,
            &pooled,
            p,
            mode.key(p, head_stream(layers, 0)),
            "head.pooled_dropped",
            Activation,
        );
        let mut hidden: Vec<HiddenActs<B>> = Vec::new();
        for (j, dense) in self.idx.head_hidden.iter().enumerate() {
            let input = match hidden.last() {
                Some((_, act, dropped)) => dropped.as_ref().unwrap_or(act),
                None => pooled_dropped.as_ref().unwrap_or(&pooled),
            };
            let mut pre = be.alloc(&format!("head.hidden{j}.pre"), Activation, b * dense.out);
            dense.forward(be, v, input, b, &mut pre);
            let mut act = be.alloc(&format!("head.hidden{j}.gelu"), Activation, b * dense.out);
            be.gelu_forward(&pre, &mut act);
            let key = mode.key(p, head_stream(layers, j + 1));
            let dropped = dropout_new(
                be,
                &act,
                p,
                key,
                &format!("head.hidden{j}.dropped"),
                Activation,
            );
            hidden.push((pre, act, dropped));
        }
        let input = match hidden.last() {
            Some((_, act, dropped)) => dropped.as_ref().unwrap_or(act),
            None => pooled_dropped.as_ref().unwrap_or(&pooled),
        };
        let mut logits = be.alloc("head.logits", Activation, b * self.head.num_labels);
        self.idx.classifier.forward(be, v, input, b, &mut logits);
        HeadActs {
            cls,
            cls_dropped,
            pre,
            pooled,
            pooled_dropped,
            hidden,
            logits,
        }
    }

    /// Returns the gradient of the last hidden state `[b, s, h]`.
    pub(crate) fn head_backward(
        &mut self,
        be: &B,
        batch: &DeviceBatch<B>,
        acts: HeadActs<B>,
        dlogits: B::Buf,
        _x: &B::Buf,
        mode: Mode,
    ) -> B::Buf {
        let (b, h) = (batch.batch, self.config.hidden_size);
        let layers = self.config.num_hidden_layers;
        let spec = self.config.family().head;
        let p = self.config.head_dropout();
        let HeadActs {
            cls,
            cls_dropped,
            pre,
            pooled,
            pooled_dropped,
            mut hidden,
            logits,
        } = acts;
        drop(logits);
        let (v, g) = (&self.params.values, &mut self.params.grads);
        let mut d = dlogits;
        // Output layer, then hidden layers in reverse.
        let mut dense = self.idx.classifier;
        for j in (0..=hidden.len()).rev() {
            let input = match j.checked_sub(1).map(|k| &hidden[k]) {
                Some((_, act, dropped)) => dropped.as_ref().unwrap_or(act),
                None => pooled_dropped.as_ref().unwrap_or(&pooled),
            };
            let mut d_in = be.alloc(&format!("head.d_input{j}"), Workspace, b * dense.inp);
            dense.backward(be, v, g, &d, input, b, Some((&mut d_in, false)));
            drop(d);
            if j == 0 {
                d = d_in;
                break;
            }
            let (pre, _act, _dropped) = hidden.pop().unwrap();
            let d_act = dropout_back_owned(
                be,
                d_in,
                p,
                mode.key(p, head_stream(layers, j)),
                "head.d_act",
            );
            let mut d_pre = be.alloc(
                &format!("head.d_hidden{}", j - 1),
                Workspace,
                b * self.idx.head_hidden[j - 1].out,
            );
            be.gelu_backward(&pre, &d_act, &mut d_pre);
            d = d_pre;
            dense = self.idx.head_hidden[j - 1];
        }
        drop(pooled_dropped);
        let d_pooled = dropout_back_owned(
            be,
            d,
            p,
            mode.key(p, head_stream(layers, 0)),
            "head.d_pooled",
        );
        let mut d_pre = be.alloc("head.d_pooler_pre", Workspace, b * h);
        // What the activation's backward reads: GELU its input (kept as
        // `pre`), tanh and ReLU their output.
        let saved = pre.as_ref().unwrap_or(&pooled);
        match spec.activation {
            HeadActivation::Tanh => be.tanh_backward(saved, &d_pooled, &mut d_pre),
            HeadActivation::Relu => be.relu_backward(saved, &d_pooled, &mut d_pre),
            HeadActivation::Gelu => be.gelu_backward(saved, &d_pooled, &mut d_pre),
        }
        drop(d_pooled);
        drop(pre);
        let mut d_cls = be.alloc("head.d_cls", Workspace, b * h);
        let dense_in = cls_dropped.as_ref().unwrap_or(&cls);
        self.idx
            .pooler
            .backward(be, v, g, &d_pre, dense_in, b, Some((&mut d_cls, false)));
        drop(d_pre);
        drop(cls_dropped);
        let key = mode.key(p, head_stream(layers, PRE_DENSE_STREAM));
        let d_cls = if spec.dropout_before_dense {
            dropout_back_owned(be, d_cls, p, key, "head.d_cls_undropped")
        } else {
            d_cls
        };
        let mut dx = be.alloc("head.d_hidden_states", Workspace, b * batch.seq * h);
        be.cls_backward(&d_cls, &mut dx, b, batch.seq);
        dx
    }
}

/// The weighted cross-entropy of `logits` (`[rows, classes]`) divided by
/// `denom`, and its gradient: where every classifier's backward starts.
pub(crate) fn loss_and_dlogits<B: Backend>(
    be: &B,
    logits: &B::Buf,
    targets: &LossTargets<'_, B::Buf, B::Ids>,
    rows: usize,
) -> (f64, B::Buf) {
    let loss = be.cross_entropy_forward(logits, targets);
    let mut dlogits = be.alloc("dlogits", Workspace, rows * targets.classes);
    be.cross_entropy_backward(logits, targets, 1.0, &mut dlogits);
    (loss, dlogits)
}

//! The parameter store: declaration order, names, shapes, init.

use super::{BertClassifier, Dense, HeadConfig, Indices, LayerIdx, LayerNormIdx};
use crate::backend::Backend;
use crate::config::BertConfig;
use crate::memory::BufKind;
use crate::rng::RngKey;

/// A parameter's HF name, shape, and whether weight decay applies.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    pub name: String,
    pub shape: Vec<usize>,
    /// False for biases and LayerNorm parameters.
    pub decay: bool,
    /// LayerNorm gamma: initialised to ones.
    pub ones: bool,
    /// Biases and LayerNorm beta: initialised to zeros.
    pub zeros: bool,
}

impl ParamInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Values and (once training) gradients, index-aligned with `info`.
pub struct Params<B: Backend> {
    pub info: Vec<ParamInfo>,
    pub values: Vec<B::Buf>,
    pub grads: Vec<B::Buf>,
}

impl<B: Backend> Params<B> {
    pub(crate) fn push(&mut self, be: &B, name: String, shape: Vec<usize>, kind: Kind) -> usize {
        let info = ParamInfo {
            decay: kind == Kind::Weight,
            ones: kind == Kind::Gamma,
            zeros: kind == Kind::Bias,
            name,
            shape,
        };
        self.values
            .push(be.alloc(&info.name, BufKind::Weight, info.numel()));
        self.info.push(info);
        self.info.len() - 1
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.info.iter().position(|p| p.name == name)
    }

    pub(crate) fn alloc_grads(&mut self, be: &B) {
        if self.grads.is_empty() {
            self.grads = self
                .info
                .iter()
                .map(|p| be.alloc(&format!("grad.{}", p.name), BufKind::Grad, p.numel()))
                .collect();
        }
    }

    /// Initialises parameter `i` as HF does (see `BertClassifier::new_random`).
    pub(crate) fn init_one(&mut self, be: &B, i: usize, seed: u64, zero_row: Option<usize>) {
        if !be.holds_values() {
            return;
        }
        let info = &self.info[i];
        let n = info.numel();
        let data: Vec<f64> = if info.ones {
            vec![1.0; n]
        } else if info.zeros {
            vec![0.0; n]
        } else {
            let key = RngKey {
                seed,
                step: u64::MAX,
                stream: i as u32,
            };
            let mut d: Vec<f64> = (0..n as u64).map(|j| 0.02 * key.normal(j)).collect();
            if let Some(r) = zero_row {
                let w = info.shape[1];
                d[r * w..(r + 1) * w].iter_mut().for_each(|v| *v = 0.0);
            }
            d
        };
        be.upload(&mut self.values[i], &data);
    }

    pub(crate) fn init_random(&mut self, be: &B, seed: u64, pad: usize, word: usize) {
        for i in 0..self.info.len() {
            self.init_one(be, i, seed, (i == word).then_some(pad));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Weight,
    Bias,
    Gamma,
}

/// Declares every parameter in a fixed order (allocation order too).
pub(crate) fn declare<B: Backend>(
    be: &B,
    c: &BertConfig,
    head: &HeadConfig,
) -> (Params<B>, Indices) {
    let mut p = Params {
        info: Vec::new(),
        values: Vec::new(),
        grads: Vec::new(),
    };
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
    let word = p.push(
        be,
        "embeddings.word_embeddings.weight".into(),
        vec![c.vocab_size, h],
        Kind::Weight,
    );
    let position = p.push(
        be,
        "embeddings.position_embeddings.weight".into(),
        vec![c.max_position_embeddings, h],
        Kind::Weight,
    );
    let token_type = p.push(
        be,
        "embeddings.token_type_embeddings.weight".into(),
        vec![c.type_vocab_size, h],
        Kind::Weight,
    );
    let emb_ln = ln(&mut p, "embeddings.LayerNorm");
    let mut layers = Vec::new();
    for i in 0..c.num_hidden_layers {
        let pre = format!("encoder.layer.{i}");
        layers.push(LayerIdx {
            query: dense(&mut p, &format!("{pre}.attention.self.query"), h, h),
            key: dense(&mut p, &format!("{pre}.attention.self.key"), h, h),
            value: dense(&mut p, &format!("{pre}.attention.self.value"), h, h),
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
        });
    }
    let pooler = dense(&mut p, "pooler.dense", h, h);
    let mut head_hidden = Vec::new();
    let mut width = h;
    for (j, &w) in head.hidden.iter().enumerate() {
        head_hidden.push(dense(&mut p, &format!("classifier.hidden.{j}"), width, w));
        width = w;
    }
    let classifier = dense(&mut p, "classifier", width, head.num_labels);
    let idx = Indices {
        word,
        position,
        token_type,
        emb_ln,
        layers,
        pooler,
        head_hidden,
        classifier,
    };
    (p, idx)
}

impl<B: Backend> BertClassifier<B> {
    /// Whether parameter `i` belongs to the pooler or classifier head (which
    /// a pretrained encoder checkpoint may lack).
    pub fn is_head_param(&self, i: usize) -> bool {
        let name = &self.params.info[i].name;
        name.starts_with("pooler.") || name.starts_with("classifier")
    }
}

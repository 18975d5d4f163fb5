//! The parameter store: declaration order, names, shapes, init.

use super::{BertClassifier, Dense, HeadConfig, Indices, LayerIdx, LayerNormIdx};
use crate::backend::{Backend, RowSlots};
use crate::config::BertConfig;
use crate::memory::BufKind;
use crate::model::family::TokenTypes;
use crate::rng::RngKey;

/// A parameter's HF name, shape, and whether weight decay applies.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    /// The Hugging Face name: without the base model's prefix for the
    /// shared encoder's families (`encoder.layer.0.output.dense.weight`),
    /// in full for DeBERTa (`deberta.embeddings.word_embeddings.weight`).
    pub name: String,
    /// Dimensions, outermost first: `[out, in]` for a dense weight,
    /// `[rows, width]` for an embedding table.
    pub shape: Vec<usize>,
    /// False for biases and LayerNorm parameters.
    pub decay: bool,
    /// LayerNorm gamma: initialised to ones.
    pub ones: bool,
    /// Biases and LayerNorm beta: initialised to zeros.
    pub zeros: bool,
}

impl ParamInfo {
    /// Number of elements: the product of `shape`.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Values and (once training) gradients, index-aligned with `info`.
pub struct Params<B: Backend> {
    /// Each parameter's name, shape, weight decay and initialisation, in
    /// declaration order (which is also the allocation order).
    pub info: Vec<ParamInfo>,
    /// The values, one buffer per entry of `info`.
    pub values: Vec<B::Buf>,
    /// The gradients, one buffer per entry of `info`; empty until
    /// allocated. A row-sparse one (see `sparse`) holds a row per slot.
    pub grads: Vec<B::Buf>,
    /// The word-embedding table's index, whose gradient a training step
    /// with the fused AdamW keeps row-sparse.
    pub word_table: Option<usize>,
    /// Where the word-embedding table's gradient is row-sparse: its rows'
    /// slots.
    pub sparse: Option<SparseGrad<B>>,
}

/// A row-sparse gradient (see [`RowSlots`]): `grads[param]` holds a row
/// per slot.
pub struct SparseGrad<B: Backend> {
    /// The table's index in the store.
    pub param: usize,
    /// Which table row each slot holds, on the host.
    pub slots: RowSlots,
    /// [`RowSlots::slot_of`] on the device, for the optimiser.
    pub device_slots: B::Ids,
}

impl<B: Backend> Params<B> {
    pub(crate) fn new() -> Self {
        Self {
            info: Vec::new(),
            values: Vec::new(),
            grads: Vec::new(),
            word_table: None,
            sparse: None,
        }
    }

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

    /// The index in the store of the parameter named `name`, if any.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.info.iter().position(|p| p.name == name)
    }

    /// Allocates the gradients (zeroed). With `row_sparse_words` the
    /// word-embedding table's is row-sparse where its rows suit the
    /// device's AdamW (a width of whole 4-element groups, fewer than 2^32
    /// elements), with no rows until [`Params::reserve_rows`] makes room.
    /// Gradients already there are kept if of the same kind, else replaced.
    pub(crate) fn alloc_grads(&mut self, be: &B, row_sparse_words: bool) {
        let word = self.word_table.filter(|&w| {
            let info = &self.info[w];
            row_sparse_words
                && info.shape[1] > 0
                && info.shape[1].is_multiple_of(4)
                && info.numel() <= u32::MAX as usize
        });
        if !self.grads.is_empty() && self.sparse.as_ref().map(|s| s.param) == word {
            return;
        }
        self.grads.clear();
        self.sparse = None;
        self.grads = (self.info.iter().enumerate())
            .map(|(i, p)| {
                let len = if Some(i) == word { 0 } else { p.numel() };
                be.alloc(&format!("grad.{}", p.name), BufKind::Grad, len)
            })
            .collect();
        self.sparse = word.map(|param| {
            let rows = self.info[param].shape[0];
            let name = format!("grad.{}.slots", self.info[param].name);
            SparseGrad {
                param,
                slots: RowSlots::new(rows),
                device_slots: be.alloc_ids(&name, rows),
            }
        });
    }

    /// Makes room in a row-sparse gradient for `tokens` more looked-up
    /// rows than it has given slots: a larger gradient, zeroed, the given
    /// rows' values kept. A training step makes room for all of its
    /// micro-batches' tokens before the first, so nothing is copied inside
    /// a step.
    ///
    /// The rows do not depend on the micro-batch a step is split into, so
    /// a refusal here is one that retrying with smaller micro-batches
    /// meets again (the run reports it at a micro-batch of 1).
    ///
    /// A row per token, not capped at the table's rows: a step of more
    /// tokens than the vocabulary (rare: 64 x 512 tokens against BERT's
    /// 30,522 rows) holds a few rows more than a dense gradient would, and
    /// in exchange the step's bytes stay affine in its tokens, which is
    /// what prices every micro-batch exactly from a few plans
    /// ([`crate::memory::PlanPeaks`]).
    pub(crate) fn reserve_rows(&mut self, be: &B, tokens: usize) {
        let Some(sparse) = &self.sparse else {
            return;
        };
        let info = &self.info[sparse.param];
        let len = (sparse.slots.used() + tokens) * info.shape[1];
        let grad = &mut self.grads[sparse.param];
        if be.len(grad) >= len {
            return;
        }
        let name = format!("grad.{}", info.name);
        let kept = (sparse.slots.used() > 0 && be.holds_values()).then(|| be.download(grad));
        // The old gradient goes before the new one comes.
        *grad = be.alloc(&name, BufKind::Grad, 0);
        *grad = be.alloc(&name, BufKind::Grad, len);
        if be.failed() {
            // Refused: no rows and no slots, so that the retry the failure
            // leads to allocates them again.
            *grad = be.alloc(&name, BufKind::Grad, 0);
            if let Some(sparse) = &mut self.sparse {
                sparse.slots.clear();
            }
            return;
        }
        if let Some(mut kept) = kept {
            kept.resize(len, 0.0);
            be.upload(grad, &kept);
        }
    }

    /// Gives a row-sparse gradient's rows and slots back (a step that
    /// follows makes room for its own).
    pub(crate) fn release_rows(&mut self, be: &B) {
        if let Some(sparse) = &mut self.sparse {
            let name = format!("grad.{}", self.info[sparse.param].name);
            self.grads[sparse.param] = be.alloc(&name, BufKind::Grad, 0);
            sparse.slots.clear();
        }
    }

    /// Zeroes every gradient; a row-sparse one gives its slots back.
    pub fn zero_grads(&mut self, be: &B) {
        be.fill_all(&mut self.grads, 0.0);
        if let Some(sparse) = &mut self.sparse {
            sparse.slots.clear();
        }
    }

    /// Parameter `i`'s gradient on the host, as a dense one (a row-sparse
    /// gradient expanded).
    pub fn dense_grad(&self, be: &B, i: usize) -> Vec<f64> {
        let grad = be.download(&self.grads[i]);
        match &self.sparse {
            Some(s) if s.param == i => s.slots.expand(&grad, self.info[i].shape[1]),
            _ => grad,
        }
    }

    /// Initialises parameter `i` as HF does (see `BertClassifier::new_random`):
    /// on the backend, which draws where the values live.
    pub(crate) fn init_one(
        &mut self,
        be: &B,
        i: usize,
        seed: u64,
        std: f64,
        zero_row: Option<usize>,
    ) {
        if !be.holds_values() {
            return;
        }
        let info = &self.info[i];
        if info.ones || info.zeros {
            be.fill(&mut self.values[i], if info.ones { 1.0 } else { 0.0 });
            return;
        }
        let key = RngKey {
            seed,
            step: u64::MAX,
            stream: i as u32,
        };
        let zeroed = match zero_row {
            Some(r) => r * info.shape[1]..(r + 1) * info.shape[1],
            None => 0..0,
        };
        be.fill_normal(&mut self.values[i], &key, std, zeroed);
    }

    /// HF's random weights: normal(0, `std`) matrices and embeddings (the
    /// model's `initializer_range`), zero biases, unit LayerNorm gains, and
    /// the word embeddings' `pad` row zero.
    pub(crate) fn init_random(&mut self, be: &B, seed: u64, std: f64, pad: usize, word: usize) {
        for i in 0..self.info.len() {
            self.init_one(be, i, seed, std, (i == word).then_some(pad));
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
    let mut p = Params::new();
    let (h, e) = (c.hidden_size, c.embedding_size());
    let fam = c.family();
    let dense = |p: &mut Params<B>, name: &str, inp: usize, out: usize| Dense {
        w: p.push(be, format!("{name}.weight"), vec![out, inp], Kind::Weight),
        b: p.push(be, format!("{name}.bias"), vec![out], Kind::Bias),
        inp,
        out,
    };
    let ln = |p: &mut Params<B>, name: &str, width: usize| LayerNormIdx {
        gamma: p.push(be, format!("{name}.weight"), vec![width], Kind::Gamma),
        beta: p.push(be, format!("{name}.bias"), vec![width], Kind::Bias),
    };
    let table = |p: &mut Params<B>, name: &str, rows: usize| {
        p.push(
            be,
            format!("embeddings.{name}.weight"),
            vec![rows, e],
            Kind::Weight,
        )
    };
    let word = table(&mut p, "word_embeddings", c.vocab_size);
    p.word_table = Some(word);
    let position = table(&mut p, "position_embeddings", c.max_position_embeddings);
    let token_type = (fam.token_types != TokenTypes::Absent)
        .then(|| table(&mut p, "token_type_embeddings", c.type_vocab_size));
    let emb_ln = ln(&mut p, "embeddings.LayerNorm", e);
    let emb_project = (e != h).then(|| dense(&mut p, "embeddings_project", e, h));
    let names = &fam.layer;
    let mut layers = Vec::new();
    for i in 0..c.num_hidden_layers {
        let at = |what: &str| format!("{}.{i}.{what}", names.layers);
        let inter = c.intermediate_size;
        layers.push(LayerIdx {
            query: dense(&mut p, &at(names.query), h, h),
            key: dense(&mut p, &at(names.key), h, h),
            value: dense(&mut p, &at(names.value), h, h),
            attn_out: dense(&mut p, &at(names.attn_out), h, h),
            ln1: ln(&mut p, &at(names.attn_norm), h),
            inter: dense(&mut p, &at(names.ffn_in), h, inter),
            out: dense(&mut p, &at(names.ffn_out), inter, h),
            ln2: ln(&mut p, &at(names.ffn_norm), h),
        });
    }
    let pooler = dense(&mut p, fam.head.dense, h, h);
    let mut head_hidden = Vec::new();
    let mut width = h;
    for (j, &w) in head.hidden.iter().enumerate() {
        head_hidden.push(dense(&mut p, &format!("classifier.hidden.{j}"), width, w));
        width = w;
    }
    let classifier = dense(&mut p, fam.head.out, width, head.num_labels);
    let idx = Indices {
        word,
        position,
        token_type,
        emb_ln,
        emb_project,
        layers,
        pooler,
        head_hidden,
        classifier,
    };
    (p, idx)
}

impl<B: Backend> BertClassifier<B> {
    /// Whether parameter `i` belongs to the classification head (BERT's
    /// pooler included), which a pretrained encoder checkpoint may lack.
    pub fn is_head_param(&self, i: usize) -> bool {
        self.config
            .family()
            .is_head_param(&self.params.info[i].name)
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::Backend;
    use crate::backend::cpu::CpuBackend;
    use crate::memory::BufKind;
    use crate::rng::RngKey;

    #[test]
    fn the_cpu_draws_each_element_from_its_own_counter_and_zeroes_the_padding_row() {
        let be = CpuBackend::<f32>::new();
        let key = RngKey {
            seed: 7,
            step: u64::MAX,
            stream: 2,
        };
        let n = 50_001;
        let mut w = be.alloc("w", BufKind::Weight, n);
        be.fill(&mut w, 9.0);
        be.fill_normal(&mut w, &key, 0.02, 100..200);
        let values = be.download(&w);
        for (i, v) in values.iter().enumerate() {
            let expected = if (100..200).contains(&i) {
                0.0
            } else {
                (0.02 * key.normal(i as u64)) as f32 as f64
            };
            assert_eq!(*v, expected, "element {i}");
        }
        let spread = values.iter().map(|v| v * v).sum::<f64>() / n as f64;
        assert!(
            (spread.sqrt() - 0.02).abs() < 0.001,
            "std {}",
            spread.sqrt()
        );
    }
}

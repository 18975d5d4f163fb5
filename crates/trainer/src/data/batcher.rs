//! Tokenize once, then cut micro-batches padded to their longest sequence.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha12Rng;
use rayon::prelude::*;

use super::error::DataError;
use super::record::Example;
use crate::batch::Batch;
use crate::tokenize::{Encoded, TextTokenizer};

/// The order in which examples are cut into batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchOrder {
    /// Input order (evaluation).
    Sequential,
    /// A permutation drawn from `(seed, epoch)`: the same for the same pair,
    /// different each epoch. No sorting by length.
    Shuffled {
        /// The run's seed.
        seed: u64,
        /// The epoch number: each gives its own permutation.
        epoch: u64,
    },
}

/// Examples tokenized (truncated, unpadded) with their validated labels.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenizedDataset {
    encoded: Vec<Encoded>,
    labels: Vec<usize>,
    num_classes: usize,
    pad_id: u32,
}

impl TokenizedDataset {
    /// `rows` examples of `tokens` ids each, all of class 0 (for tests of
    /// what holds data sets).
    #[cfg(test)]
    pub(crate) fn filler(rows: usize, tokens: usize) -> Self {
        let row = Encoded {
            ids: vec![1; tokens],
            type_ids: vec![0; tokens],
        };
        Self {
            encoded: vec![row; rows],
            labels: vec![0; rows],
            num_classes: 2,
            pad_id: 0,
        }
    }

    /// `rows` examples told apart by their tokens (example `i` is `1 + i %
    /// 3` copies of id `i + 1`), labels alternating 0 and 1 (for tests of
    /// which examples share a batch).
    #[cfg(test)]
    pub(crate) fn numbered(rows: usize) -> Self {
        let encoded = (0..rows)
            .map(|i| Encoded {
                ids: vec![i as u32 + 1; 1 + i % 3],
                type_ids: vec![0; 1 + i % 3],
            })
            .collect();
        Self {
            encoded,
            labels: (0..rows).map(|i| i % 2).collect(),
            num_classes: 2,
            pad_id: 0,
        }
    }

    /// Tokenizes every example. Labels are checked against `num_classes`
    /// here, on the host, so a batch can never carry an invalid class index.
    pub fn new(
        tokenizer: &TextTokenizer,
        examples: &[Example],
        num_classes: usize,
    ) -> Result<Self, DataError> {
        validate_labels(examples.iter().map(|e| e.label), num_classes)?;
        // On every core, in order: a trial's long documents take seconds
        // to tokenize on one, and the runner's price and the worker's run
        // both wait for it.
        let encoded = examples
            .par_iter()
            .map(|e| tokenizer.encode(&e.text, e.text_pair.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            encoded,
            labels: examples.iter().map(|e| e.label).collect(),
            num_classes,
            pad_id: tokenizer.special_tokens().pad,
        })
    }

    /// Texts to classify, tokenized by `tokenizer`: there are no labels
    /// (every batch's labels are 0, and [`Self::num_classes`] is 0).
    pub fn unlabelled(tokenizer: &TextTokenizer, encoded: Vec<Encoded>) -> Self {
        Self {
            labels: vec![0; encoded.len()],
            encoded,
            num_classes: 0,
            pad_id: tokenizer.special_tokens().pad,
        }
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no example.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The class count every label is below (0 for [`Self::unlabelled`]).
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// Each example's class index, in input order (all 0 for
    /// [`Self::unlabelled`]).
    pub fn labels(&self) -> &[usize] {
        &self.labels
    }

    /// Each example's tokens, in input order.
    pub fn encoded(&self) -> &[Encoded] {
        &self.encoded
    }

    /// The longest example, in tokens: the widest batch there can be.
    pub fn max_sequence_length(&self) -> usize {
        self.encoded.iter().map(|e| e.ids.len()).max().unwrap_or(0)
    }

    /// Batches per epoch at this micro-batch size (the last may be smaller).
    pub fn num_batches(&self, micro_batch: usize) -> usize {
        self.len().div_ceil(micro_batch.max(1))
    }

    /// The epoch's micro-batches of `micro_batch` examples (the last one
    /// holds the remainder), each padded to its own longest sequence.
    pub fn batches(
        &self,
        micro_batch: usize,
        order: BatchOrder,
    ) -> Result<impl Iterator<Item = Batch> + '_, DataError> {
        if micro_batch == 0 {
            return Err(DataError::ZeroBatchSize);
        }
        let indices = self.in_order(order);
        let chunks: Vec<Vec<usize>> = indices.chunks(micro_batch).map(<[usize]>::to_vec).collect();
        Ok(chunks.into_iter().map(move |chunk| self.batch_of(&chunk)))
    }

    /// The epoch's optimiser steps of `batch_size` examples (the last one
    /// holds the remainder), each cut into as few micro-batches of at most
    /// `micro_batch` examples as it takes, their sizes differing by at most
    /// one: a step of 32 at micro-batch 11 is 11, 11 and 10 examples. Each
    /// micro-batch is padded to its own longest sequence.
    pub fn steps(
        &self,
        batch_size: usize,
        micro_batch: usize,
        order: BatchOrder,
    ) -> Result<Vec<Vec<Batch>>, DataError> {
        if batch_size == 0 || micro_batch == 0 {
            return Err(DataError::ZeroBatchSize);
        }
        let indices = self.in_order(order);
        Ok(indices
            .chunks(batch_size)
            .map(|step| {
                let pieces = step.len().div_ceil(micro_batch);
                let (base, longer) = (step.len() / pieces, step.len() % pieces);
                let mut start = 0;
                (0..pieces)
                    .map(|i| {
                        let rows = base + usize::from(i < longer);
                        start += rows;
                        self.batch_of(&step[start - rows..start])
                    })
                    .collect()
            })
            .collect())
    }

    fn in_order(&self, order: BatchOrder) -> Vec<usize> {
        match order {
            BatchOrder::Shuffled { seed, epoch } => epoch_order(self.len(), seed, epoch),
            BatchOrder::Sequential => (0..self.len()).collect(),
        }
    }

    /// The examples at `indices`, padded to the longest of them.
    pub fn batch_of(&self, indices: &[usize]) -> Batch {
        let seq = indices
            .iter()
            .map(|&i| self.encoded[i].ids.len())
            .max()
            .unwrap_or(0);
        let size = indices.len() * seq;
        let mut batch = Batch {
            batch: indices.len(),
            seq,
            input_ids: Vec::with_capacity(size),
            token_type_ids: Vec::with_capacity(size),
            attention_mask: Vec::with_capacity(size),
            labels: Vec::with_capacity(indices.len()),
        };
        for &i in indices {
            let encoded = &self.encoded[i];
            let padding = seq - encoded.ids.len();
            batch.input_ids.extend(&encoded.ids);
            batch
                .input_ids
                .extend(std::iter::repeat_n(self.pad_id, padding));
            batch.token_type_ids.extend(&encoded.type_ids);
            batch.token_type_ids.extend(std::iter::repeat_n(0, padding));
            batch
                .attention_mask
                .extend(std::iter::repeat_n(1, encoded.ids.len()));
            batch.attention_mask.extend(std::iter::repeat_n(0, padding));
            batch.labels.push(self.labels[i]);
        }
        batch
    }
}

/// Checks every label is a class index below `num_classes`; call it on any
/// labels that did not come through a loader before computing a loss.
pub fn validate_labels(
    labels: impl IntoIterator<Item = usize>,
    num_classes: usize,
) -> Result<(), DataError> {
    match labels
        .into_iter()
        .enumerate()
        .find(|(_, l)| *l >= num_classes)
    {
        Some((index, label)) => Err(DataError::LabelOutOfRange {
            index,
            label,
            num_classes,
        }),
        None => Ok(()),
    }
}

/// The order of `len` examples in `epoch`: a permutation that depends only
/// on (seed, epoch), the same on every machine and every build (ChaCha12 is
/// value-stable, as is rand 0.9's shuffle).
pub fn epoch_order(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut indices: Vec<usize> = (0..len).collect();
    indices.shuffle(&mut ChaCha12Rng::seed_from_u64(epoch_seed(seed, epoch)));
    indices
}

/// One RNG seed per (seed, epoch), well mixed (SplitMix64's finaliser) so
/// nearby seeds and epochs give unrelated permutations.
fn epoch_seed(seed: u64, epoch: u64) -> u64 {
    let mut z = seed ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

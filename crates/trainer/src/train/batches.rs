//! The training batches of each epoch: the same every epoch, or drawn
//! anew from the data set, as a shuffling PyTorch `DataLoader` draws them.

use std::borrow::Cow;

use crate::batch::Batch;
use crate::data::{BatchOrder, DataError, TokenizedDataset};
use crate::rng::RngKey;

/// Where [`super::train`] takes each epoch's training batches from.
#[derive(Clone, Copy, Debug)]
pub enum TrainBatches<'a> {
    /// The same batches every epoch; with `TrainConfig::shuffle` their
    /// order is shuffled per epoch, but which examples share a batch never
    /// changes.
    Fixed(&'a [Batch]),
    /// Micro-batches of `micro_batch` examples cut from `data` anew each
    /// epoch (`BatchOrder::Shuffled { seed, epoch }`, the run's seed), so
    /// which examples share a batch changes from epoch to epoch, as with
    /// Hugging Face's `Trainer`; their order is then shuffled as `Fixed`'s
    /// is. Epoch 0's batches are those of `epoch: 0`, so a one-epoch run is
    /// the run of `Fixed` over them. Without `TrainConfig::shuffle` every
    /// epoch takes epoch 0's batches in their order.
    Redrawn {
        /// The tokenised training set.
        data: &'a TokenizedDataset,
        /// Examples per micro-batch (the last batch holds the rest).
        micro_batch: usize,
    },
}

impl<'a> From<&'a [Batch]> for TrainBatches<'a> {
    fn from(batches: &'a [Batch]) -> Self {
        TrainBatches::Fixed(batches)
    }
}

impl<'a, const N: usize> From<&'a [Batch; N]> for TrainBatches<'a> {
    fn from(batches: &'a [Batch; N]) -> Self {
        TrainBatches::Fixed(batches)
    }
}

impl<'a> From<&'a Vec<Batch>> for TrainBatches<'a> {
    fn from(batches: &'a Vec<Batch>) -> Self {
        TrainBatches::Fixed(batches)
    }
}

impl<'a> TrainBatches<'a> {
    /// The batches of `epoch` in the order it trains on them, each with
    /// its position among the epoch's batches before that order (what an
    /// error names), drawn with `seed` (`shuffle`: `TrainConfig::shuffle`).
    pub(crate) fn epoch(
        &self,
        epoch: usize,
        seed: u64,
        shuffle: bool,
    ) -> Result<Vec<(usize, Cow<'a, Batch>)>, DataError> {
        let mut batches: Vec<(usize, Cow<'a, Batch>)> = match *self {
            TrainBatches::Fixed(batches) => batches.iter().map(Cow::Borrowed).enumerate().collect(),
            TrainBatches::Redrawn { data, micro_batch } => {
                let epoch = if shuffle { epoch as u64 } else { 0 };
                data.batches(micro_batch, BatchOrder::Shuffled { seed, epoch })?
                    .map(Cow::Owned)
                    .enumerate()
                    .collect()
            }
        };
        if shuffle {
            let key = RngKey {
                seed,
                step: epoch as u64,
                stream: u32::MAX,
            };
            for i in (1..batches.len()).rev() {
                let j = (key.word(i as u64) as usize) % (i + 1);
                batches.swap(i, j);
            }
        }
        Ok(batches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::CpuBackend;
    use crate::config::BertConfig;
    use crate::model::{BertClassifier, HeadConfig};
    use crate::train::{Control, TrainConfig, train};

    /// Which examples each batch holds (`TokenizedDataset::numbered`'s
    /// first token of each row, less one), in the epoch's order.
    fn examples(batches: &[(usize, Cow<'_, Batch>)]) -> Vec<Vec<u32>> {
        batches
            .iter()
            .map(|(_, b)| (0..b.batch).map(|r| b.input_ids[r * b.seq] - 1).collect())
            .collect()
    }

    #[test]
    fn redrawn_batches_change_each_epoch_and_hold_every_example_once() {
        let data = TokenizedDataset::numbered(23);
        let source = TrainBatches::Redrawn {
            data: &data,
            micro_batch: 4,
        };
        let mut partitions = Vec::new();
        for epoch in 0..3 {
            let batches = source.epoch(epoch, 7, true).unwrap();
            let mut held: Vec<u32> = examples(&batches).concat();
            held.sort_unstable();
            assert_eq!(held, (0..23).collect::<Vec<_>>(), "epoch {epoch}");
            assert_eq!(batches.len(), 6);
            let mut partition: Vec<Vec<u32>> = examples(&batches)
                .into_iter()
                .map(|mut b| {
                    b.sort_unstable();
                    b
                })
                .collect();
            partition.sort();
            partitions.push(partition);
        }
        assert_ne!(partitions[0], partitions[1]);
        assert_ne!(partitions[1], partitions[2]);
        // The same seed and epoch draw the same batches in the same order.
        assert_eq!(
            examples(&source.epoch(2, 7, true).unwrap()),
            examples(&source.epoch(2, 7, true).unwrap())
        );
    }

    #[test]
    fn epoch_zero_is_the_fixed_run_over_its_draw_and_no_shuffle_keeps_it() {
        let data = TokenizedDataset::numbered(23);
        let source = TrainBatches::Redrawn {
            data: &data,
            micro_batch: 4,
        };
        let draw: Vec<Batch> = data
            .batches(4, BatchOrder::Shuffled { seed: 7, epoch: 0 })
            .unwrap()
            .collect();
        let fixed = TrainBatches::Fixed(&draw);
        let redrawn = source.epoch(0, 7, true).unwrap();
        assert_eq!(redrawn, fixed.epoch(0, 7, true).unwrap());
        // Shuffling reorders the draw: positions name the unshuffled batch.
        let order: Vec<usize> = redrawn.iter().map(|(i, _)| *i).collect();
        assert_ne!(order, (0..draw.len()).collect::<Vec<_>>());
        for (index, batch) in &redrawn {
            assert_eq!(batch.as_ref(), &draw[*index]);
        }
        for epoch in 0..3 {
            let unshuffled = source.epoch(epoch, 7, false).unwrap();
            assert_eq!(unshuffled, fixed.epoch(epoch, 7, false).unwrap(), "{epoch}");
            let order: Vec<usize> = unshuffled.iter().map(|(i, _)| *i).collect();
            assert_eq!(order, (0..draw.len()).collect::<Vec<_>>());
        }
    }

    /// A one-epoch run is the same whether batches are redrawn or fixed to
    /// epoch 0's draw; from the second epoch on they differ.
    #[test]
    fn training_on_redrawn_batches_matches_the_fixed_run_for_one_epoch() {
        let data = TokenizedDataset::numbered(24);
        let draw: Vec<Batch> = data
            .batches(4, BatchOrder::Shuffled { seed: 3, epoch: 0 })
            .unwrap()
            .collect();
        let valid: Vec<Batch> = data.batches(8, BatchOrder::Sequential).unwrap().collect();
        let run = |source: TrainBatches<'_>, epochs: usize| {
            let be = CpuBackend::<f32>::new();
            let head = HeadConfig {
                num_labels: 2,
                hidden: vec![],
            };
            let config = BertConfig::tiny(16, 1, 2, 32, 32);
            let mut model = BertClassifier::new_random(&be, &config, &head, 5).unwrap();
            let cfg = TrainConfig {
                epochs,
                lr: 1e-3,
                seed: 3,
                ..TrainConfig::default()
            };
            let report = train(&be, &mut model, source, &valid, &cfg, &mut |_| {
                Control::Continue
            })
            .unwrap();
            let weights: Vec<Vec<f64>> =
                model.params.values.iter().map(|v| be.download(v)).collect();
            // All but the wall-clock seconds.
            let epochs: Vec<_> = report
                .epochs
                .into_iter()
                .map(|e| (e.train_loss, e.valid, e.steps))
                .collect();
            (epochs, weights)
        };
        let redrawn = TrainBatches::Redrawn {
            data: &data,
            micro_batch: 4,
        };
        assert_eq!(run(redrawn, 1), run(TrainBatches::Fixed(&draw), 1));
        let (two_redrawn, weights_redrawn) = run(redrawn, 2);
        let (two_fixed, weights_fixed) = run(TrainBatches::Fixed(&draw), 2);
        assert_eq!(two_redrawn[0], two_fixed[0]);
        assert_ne!(weights_redrawn, weights_fixed);
    }
}

//! The training batches of each epoch: the same every epoch, or drawn
//! anew from the data set, as a shuffling PyTorch `DataLoader` draws them.

use std::borrow::Cow;

use crate::batch::Batch;
use crate::data::{BatchOrder, DataError, TokenizedDataset};
use crate::rng::RngKey;

/// Where [`super::train`] takes each epoch's training batches from.
#[derive(Clone, Copy, Debug)]
pub enum TrainBatches<'a> {
    /// The same batches every epoch, `TrainConfig::accumulation_steps` of
    /// them a step; with `TrainConfig::shuffle` their order is shuffled per
    /// epoch, but which examples share a batch never changes.
    Fixed(&'a [Batch]),
    /// Steps of `batch_size` examples cut from `data` anew each epoch
    /// (`BatchOrder::Shuffled { seed, epoch }`, the run's seed), so which
    /// examples share a step changes from epoch to epoch, as with Hugging
    /// Face's `Trainer`; each step is split into micro-batches of at most
    /// `micro_batch` examples, as even as they come
    /// ([`TokenizedDataset::steps`]), so every step but an epoch's last
    /// trains on exactly `batch_size` examples whatever the micro-batch.
    /// The steps' order is then shuffled as `Fixed`'s batches are. Epoch
    /// 0's batches are those of `epoch: 0`, so a one-epoch run with one
    /// micro-batch a step is the run of `Fixed` over them. Without
    /// `TrainConfig::shuffle` every epoch takes epoch 0's steps in their
    /// order.
    Redrawn {
        /// The tokenised training set.
        data: &'a TokenizedDataset,
        /// Examples per optimiser step (the last step holds the rest).
        batch_size: usize,
        /// Most examples per forward/backward pass.
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

/// One optimiser step's micro-batches, each with its position among the
/// epoch's micro-batches before the epoch's order (what an error names).
pub(crate) type Step<'a> = Vec<(usize, Cow<'a, Batch>)>;

impl<'a> TrainBatches<'a> {
    /// The steps of `epoch` in the order it trains on them, drawn with
    /// `seed` (`shuffle`: `TrainConfig::shuffle`); `accumulation` groups
    /// `Fixed`'s batches into steps.
    pub(crate) fn epoch(
        &self,
        epoch: usize,
        seed: u64,
        shuffle: bool,
        accumulation: usize,
    ) -> Result<Vec<Step<'a>>, DataError> {
        let mut steps: Vec<Step<'a>> = match *self {
            TrainBatches::Fixed(batches) => {
                let mut batches: Vec<(usize, Cow<'a, Batch>)> =
                    batches.iter().map(Cow::Borrowed).enumerate().collect();
                if shuffle {
                    shuffle_in_place(&mut batches, seed, epoch);
                }
                let steps = batches.chunks(accumulation.max(1)).map(<[_]>::to_vec);
                return Ok(steps.collect());
            }
            TrainBatches::Redrawn {
                data,
                batch_size,
                micro_batch,
            } => {
                let epoch = if shuffle { epoch as u64 } else { 0 };
                let mut position = 0;
                data.steps(
                    batch_size,
                    micro_batch,
                    BatchOrder::Shuffled { seed, epoch },
                )?
                .into_iter()
                .map(|step| {
                    step.into_iter()
                        .map(|b| {
                            position += 1;
                            (position - 1, Cow::Owned(b))
                        })
                        .collect()
                })
                .collect()
            }
        };
        if shuffle {
            shuffle_in_place(&mut steps, seed, epoch);
        }
        Ok(steps)
    }
}

/// The epoch's order of `items`: the same Fisher-Yates draws for batches
/// and for steps, so steps of one batch each are ordered as the batches.
fn shuffle_in_place<T>(items: &mut [T], seed: u64, epoch: usize) {
    let key = RngKey {
        seed,
        step: epoch as u64,
        stream: u32::MAX,
    };
    for i in (1..items.len()).rev() {
        let j = (key.word(i as u64) as usize) % (i + 1);
        items.swap(i, j);
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
    fn examples(steps: &[Step<'_>]) -> Vec<Vec<u32>> {
        steps
            .iter()
            .flatten()
            .map(|(_, b)| (0..b.batch).map(|r| b.input_ids[r * b.seq] - 1).collect())
            .collect()
    }

    fn redrawn(data: &TokenizedDataset, batch_size: usize, micro_batch: usize) -> TrainBatches<'_> {
        TrainBatches::Redrawn {
            data,
            batch_size,
            micro_batch,
        }
    }

    #[test]
    fn redrawn_batches_change_each_epoch_and_hold_every_example_once() {
        let data = TokenizedDataset::numbered(23);
        let source = redrawn(&data, 4, 4);
        let mut partitions = Vec::new();
        for epoch in 0..3 {
            let steps = source.epoch(epoch, 7, true, 1).unwrap();
            let mut held: Vec<u32> = examples(&steps).concat();
            held.sort_unstable();
            assert_eq!(held, (0..23).collect::<Vec<_>>(), "epoch {epoch}");
            assert_eq!(steps.len(), 6);
            let mut partition: Vec<Vec<u32>> = examples(&steps)
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
            examples(&source.epoch(2, 7, true, 1).unwrap()),
            examples(&source.epoch(2, 7, true, 1).unwrap())
        );
    }

    /// Every step but the epoch's last holds exactly `batch_size` examples,
    /// in micro-batches of at most `micro_batch` differing by at most one,
    /// whatever the micro-batch: the sampled batch size is what trains.
    #[test]
    fn a_step_holds_the_batch_size_in_even_micro_batches() {
        let data = TokenizedDataset::numbered(70);
        for (micro, pieces) in [
            (32, vec![32]),
            (11, vec![11, 11, 10]),
            (7, vec![7, 7, 6, 6, 6]),
        ] {
            let steps = redrawn(&data, 32, micro).epoch(1, 5, true, 99).unwrap();
            assert_eq!(steps.len(), 3, "micro {micro}");
            let sizes = |s: &Step<'_>| s.iter().map(|(_, b)| b.batch).collect::<Vec<_>>();
            let full: Vec<Vec<usize>> = steps
                .iter()
                .map(sizes)
                .filter(|s| s.iter().sum::<usize>() == 32)
                .collect();
            assert_eq!(full, [pieces.clone(), pieces.clone()], "micro {micro}");
            let rest: usize = steps
                .iter()
                .map(sizes)
                .map(|s| s.iter().sum::<usize>())
                .filter(|&n| n != 32)
                .sum();
            assert_eq!(rest, 6);
            let mut held: Vec<u32> = examples(&steps).concat();
            held.sort_unstable();
            assert_eq!(held, (0..70).collect::<Vec<_>>());
        }
    }

    #[test]
    fn epoch_zero_is_the_fixed_run_over_its_draw_and_no_shuffle_keeps_it() {
        let data = TokenizedDataset::numbered(23);
        let source = redrawn(&data, 4, 4);
        let draw: Vec<Batch> = data
            .batches(4, BatchOrder::Shuffled { seed: 7, epoch: 0 })
            .unwrap()
            .collect();
        let fixed = TrainBatches::Fixed(&draw);
        let redrawn = source.epoch(0, 7, true, 1).unwrap();
        assert_eq!(redrawn, fixed.epoch(0, 7, true, 1).unwrap());
        // Shuffling reorders the draw: positions name the unshuffled batch.
        let order: Vec<usize> = redrawn.iter().flatten().map(|(i, _)| *i).collect();
        assert_ne!(order, (0..draw.len()).collect::<Vec<_>>());
        for (index, batch) in redrawn.iter().flatten() {
            assert_eq!(batch.as_ref(), &draw[*index]);
        }
        for epoch in 0..3 {
            let unshuffled = source.epoch(epoch, 7, false, 1).unwrap();
            assert_eq!(
                unshuffled,
                fixed.epoch(epoch, 7, false, 1).unwrap(),
                "{epoch}"
            );
            let order: Vec<usize> = unshuffled.iter().flatten().map(|(i, _)| *i).collect();
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
        let redrawn = redrawn(&data, 4, 4);
        assert_eq!(run(redrawn, 1), run(TrainBatches::Fixed(&draw), 1));
        let (two_redrawn, weights_redrawn) = run(redrawn, 2);
        let (two_fixed, weights_fixed) = run(TrainBatches::Fixed(&draw), 2);
        assert_eq!(two_redrawn[0], two_fixed[0]);
        assert_ne!(weights_redrawn, weights_fixed);
    }
}

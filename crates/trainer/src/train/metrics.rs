//! Classification metrics: loss, accuracy, binary F1 (positive class 1) and
//! macro F1, the mean over the classes that occur among the labels or the
//! predictions (a class in neither is skipped, as scikit-learn does with
//! `labels` unspecified; one that occurs and is never predicted right
//! counts as F1 = 0).

/// Loss and scores of a model's predictions on a set of labelled examples.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// Mean cross-entropy per example (the class-weighted mean when class
    /// weights are given); [`Metrics::from_predictions`] stores the figure
    /// it is given.
    pub loss: f64,
    /// Fraction of predictions equal to their label, in `[0, 1]`; 0 for no
    /// examples.
    pub accuracy: f64,
    /// F1 of class 1; `None` unless there are exactly 2 classes.
    pub f1_binary: Option<f64>,
    /// Unweighted mean F1 over the classes that occur among the labels or
    /// the predictions; 0 for no examples.
    pub f1_macro: f64,
    /// Number of labels scored.
    pub examples: usize,
}

/// Metrics after one epoch, as given to the observer.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochMetrics {
    /// 0-based.
    pub epoch: usize,
    /// Mean training loss over the epoch's optimiser steps.
    pub train_loss: f64,
    /// Metrics on the validation batches after the epoch's last update.
    pub valid: Metrics,
    /// Optimiser steps done so far.
    pub steps: u64,
    /// Seconds spent in this epoch (training and evaluation).
    pub seconds: f64,
}

fn f1_of(tp: usize, fp: usize, fn_: usize) -> f64 {
    if tp == 0 {
        0.0
    } else {
        2.0 * tp as f64 / (2 * tp + fp + fn_) as f64
    }
}

/// Predictions that cannot be scored against their labels.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MetricsError {
    /// There is not exactly one prediction per label.
    #[error("{predictions} predictions for {labels} labels")]
    Lengths {
        /// Number of predictions.
        predictions: usize,
        /// Number of labels.
        labels: usize,
    },
    /// A prediction or label is not a class index below `classes`.
    #[error("{what} {value} at position {index} is not one of the {classes} classes")]
    Class {
        /// `"prediction"` or `"label"`.
        what: &'static str,
        /// Position of the value in its slice, 0-based.
        index: usize,
        /// The out-of-range class index.
        value: usize,
        /// Number of classes the model has.
        classes: usize,
    },
}

impl Metrics {
    /// Scores `predictions` against `labels` (class indexes below
    /// `classes`, one prediction per label).
    pub fn from_predictions(
        predictions: &[usize],
        labels: &[usize],
        classes: usize,
        loss: f64,
    ) -> Result<Self, MetricsError> {
        if predictions.len() != labels.len() {
            return Err(MetricsError::Lengths {
                predictions: predictions.len(),
                labels: labels.len(),
            });
        }
        for (what, values) in [("prediction", predictions), ("label", labels)] {
            if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| **v >= classes) {
                return Err(MetricsError::Class {
                    what,
                    index,
                    value,
                    classes,
                });
            }
        }
        let n = labels.len();
        let mut tp = vec![0usize; classes];
        let mut fp = vec![0usize; classes];
        let mut fn_ = vec![0usize; classes];
        let mut correct = 0;
        for (&p, &y) in predictions.iter().zip(labels) {
            if p == y {
                tp[y] += 1;
                correct += 1;
            } else {
                fp[p] += 1;
                fn_[y] += 1;
            }
        }
        let present: Vec<usize> = (0..classes)
            .filter(|&c| tp[c] + fp[c] + fn_[c] > 0)
            .collect();
        let f1_macro = if present.is_empty() {
            0.0
        } else {
            present
                .iter()
                .map(|&c| f1_of(tp[c], fp[c], fn_[c]))
                .sum::<f64>()
                / present.len() as f64
        };
        Ok(Self {
            loss,
            accuracy: if n == 0 {
                0.0
            } else {
                correct as f64 / n as f64
            },
            f1_binary: (classes == 2).then(|| f1_of(tp[1], fp[1], fn_[1])),
            f1_macro,
            examples: n,
        })
    }
}

/// Index of the largest logit per row of `classes` (first on ties); no
/// rows for 0 classes.
pub fn argmax_rows(logits: &[f64], classes: usize) -> Vec<usize> {
    if classes == 0 {
        return Vec::new();
    }
    logits
        .chunks(classes)
        .map(|r| {
            r.iter()
                .enumerate()
                .fold(0, |best, (i, &v)| if v > r[best] { i } else { best })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Predictions and labels that do not fit are named, not indexed.
    #[test]
    fn mismatched_predictions_are_errors() {
        assert_eq!(
            Metrics::from_predictions(&[0], &[], 2, 0.0),
            Err(MetricsError::Lengths {
                predictions: 1,
                labels: 0
            })
        );
        let e = Metrics::from_predictions(&[0, 1], &[0, 2], 2, 0.0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "label 2 at position 1 is not one of the 2 classes"
        );
        assert!(argmax_rows(&[1.0, 2.0], 0).is_empty());
    }

    #[test]
    fn f1_by_hand() {
        // labels 1 1 0 0 1, preds 1 0 0 1 1: class1 tp2 fp1 fn1 -> 2/3; class0 tp1 fp1 fn1 -> 1/2.
        let m = Metrics::from_predictions(&[1, 0, 0, 1, 1], &[1, 1, 0, 0, 1], 2, 0.5).unwrap();
        assert!((m.accuracy - 0.6).abs() < 1e-12);
        assert!((m.f1_binary.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert!((m.f1_macro - (2.0 / 3.0 + 0.5) / 2.0).abs() < 1e-12);
        assert_eq!(argmax_rows(&[0.1, 0.9, 2.0, -1.0], 2), vec![1, 0]);
    }
}

//! A trial's values (one per objective) and constraint values (one per
//! `[[constraint]]`) from what is known of it: its validation metrics and
//! measured costs once it has trained, its predicted costs before.

use super::config::{Constraint, Objective, TrialMetric};

/// What is known of one trial; `None`: not known (yet).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    /// Validation metrics of its best epoch.
    pub accuracy: Option<f64>,
    pub f1_macro: Option<f64>,
    pub loss: Option<f64>,
    /// Bytes its training step peaks at (predicted, then measured).
    pub peak_memory: Option<u64>,
    /// Bytes predicting a batch peaks at (planned).
    pub inference_memory: Option<u64>,
    pub train_seconds: Option<f64>,
    pub params: Option<u64>,
}

impl Figures {
    pub fn get(&self, metric: TrialMetric) -> Option<f64> {
        match metric {
            TrialMetric::Accuracy => self.accuracy,
            TrialMetric::F1Macro => self.f1_macro,
            TrialMetric::Loss => self.loss,
            TrialMetric::PeakMemory => self.peak_memory.map(|b| b as f64),
            TrialMetric::InferenceMemory => self.inference_memory.map(|b| b as f64),
            TrialMetric::TrainSeconds => self.train_seconds,
            TrialMetric::Params => self.params.map(|p| p as f64),
        }
    }
}

/// One value per objective, in the study's order; `Err` names the first
/// metric that is not known.
pub fn values(objective: &Objective, figures: &Figures) -> Result<Vec<f64>, TrialMetric> {
    objective
        .metrics
        .iter()
        .map(|&m| figures.get(m).ok_or(m))
        .collect()
}

/// One value per constraint, as Optuna stores them: `measured - max`,
/// above 0 when violated; a figure not known (the training time of a
/// trial that never trained) counts 0, neither violated nor with room.
pub fn constraint_values(constraints: &[Constraint], figures: &Figures) -> Vec<f64> {
    constraints
        .iter()
        .map(|c| figures.get(c.metric).map_or(0.0, |v| c.value(v)))
        .collect()
}

/// The first constraint that the known figures violate, with its figure.
pub fn violated<'c>(
    constraints: &'c [Constraint],
    figures: &Figures,
) -> Option<(&'c Constraint, f64)> {
    constraints.iter().find_map(|c| {
        figures
            .get(c.metric)
            .filter(|&v| c.value(v) > 0.0)
            .map(|v| (c, v))
    })
}

/// The most a trial's training step may peak at, by its `peak_memory`
/// constraint.
pub fn peak_cap(constraints: &[Constraint]) -> Option<u64> {
    constraints
        .iter()
        .find(|c| c.metric == TrialMetric::PeakMemory)
        .map(|c| c.max as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpo_sampler::StudyDirection;

    fn objective(metrics: &[TrialMetric]) -> Objective {
        Objective {
            metrics: metrics.to_vec(),
            directions: metrics.iter().map(|m| m.natural_direction()).collect(),
            metric: super::super::config::Metric::Accuracy,
            inference_batch: 1,
        }
    }

    #[test]
    fn values_follow_the_objectives_and_name_what_is_missing() {
        let f = Figures {
            accuracy: Some(0.9),
            peak_memory: Some(3 << 30),
            params: Some(22_713_216),
            ..Figures::default()
        };
        let o = objective(&[TrialMetric::PeakMemory, TrialMetric::Accuracy]);
        assert_eq!(values(&o, &f), Ok(vec![(3u64 << 30) as f64, 0.9]));
        assert_eq!(
            o.directions,
            [StudyDirection::Minimize, StudyDirection::Maximize]
        );
        let o = objective(&[TrialMetric::Accuracy, TrialMetric::TrainSeconds]);
        assert_eq!(values(&o, &f), Err(TrialMetric::TrainSeconds));
    }

    #[test]
    fn constraints_are_measured_minus_max_and_unknown_ones_zero() {
        let cs = [
            Constraint {
                metric: TrialMetric::PeakMemory,
                max: 8.0 * (1u64 << 30) as f64,
            },
            Constraint {
                metric: TrialMetric::TrainSeconds,
                max: 60.0,
            },
            Constraint {
                metric: TrialMetric::Params,
                max: 1e8,
            },
        ];
        let before = Figures {
            peak_memory: Some(9 << 30),
            params: Some(50_000_000),
            ..Figures::default()
        };
        assert_eq!(
            constraint_values(&cs, &before),
            vec![(1u64 << 30) as f64, 0.0, -5e7]
        );
        let (c, v) = violated(&cs, &before).expect("peak_memory is over");
        assert_eq!(
            (c.metric, v),
            (TrialMetric::PeakMemory, (9u64 << 30) as f64)
        );
        assert!(
            c.describe(v).contains("> max 8.00 GiB"),
            "{}",
            c.describe(v)
        );
        let fits = Figures {
            peak_memory: Some(1 << 30),
            train_seconds: Some(75.0),
            ..before
        };
        assert_eq!(
            violated(&cs, &fits).map(|(c, _)| c.metric),
            Some(TrialMetric::TrainSeconds)
        );
        assert_eq!(peak_cap(&cs), Some(8 << 30));
        assert_eq!(peak_cap(&cs[1..]), None);
    }
}

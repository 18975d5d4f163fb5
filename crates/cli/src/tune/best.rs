//! The study's best trials as the runner shows them: Optuna's
//! `best_trial` for one objective (the lowest number among ties), its
//! `best_trials` (the Pareto front) for several, and in both only
//! feasible trials when any trial carries constraints; and their lines in
//! the live display and the summary.

use store::{FrozenTrial, StudyDirection};

use super::config::TrialMetric;
use super::record;

/// A trial on the best list: its number, values and params.
#[derive(Clone, Debug, PartialEq)]
pub struct Best {
    pub number: i64,
    pub values: Vec<f64>,
    pub params: String,
}

/// The best trials of `trials` (in number order) for `directions`.
/// One objective is a scan of the trials, without the front's sort: the
/// runner asks on every display update.
pub fn best_trials(trials: &[FrozenTrial], directions: &[StudyDirection]) -> Vec<Best> {
    let front = match directions {
        [direction] => {
            let feasible = trials.iter().filter(|t| t.is_feasible());
            direction.best_trial(feasible).into_iter().collect()
        }
        _ => {
            let constrained = trials.iter().any(|t| t.has_constraints());
            hpo_sampler::multi::pareto_front(trials, directions, constrained)
        }
    };
    front
        .into_iter()
        .map(|t| Best {
            number: t.number as i64,
            values: t.values.clone().unwrap_or_default(),
            params: record::params_text(t),
        })
        .collect()
}

/// `accuracy 0.9123, peak_memory 2.10 GiB`; the bare values without one
/// metric per value, or with one objective.
pub fn values_text(metrics: &[TrialMetric], values: &[f64]) -> String {
    if metrics.len() != values.len() || metrics.len() <= 1 {
        return values
            .iter()
            .map(|v| format!("{v:.4}"))
            .collect::<Vec<_>>()
            .join(", ");
    }
    metrics
        .iter()
        .zip(values)
        .map(|(m, &v)| format!("{} {}", m.name(), m.show(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The live display's best: the best trial's value and params, or the
/// front's size and each objective's best value on it.
pub fn display_text(best: &[Best], metrics: &[TrialMetric]) -> Option<String> {
    match best {
        [] => None,
        [b] if metrics.len() <= 1 => Some(format!(
            "{} (trial {}: {})",
            values_text(&[], &b.values),
            b.number,
            b.params
        )),
        front => {
            let each: Vec<String> = metrics
                .iter()
                .enumerate()
                .filter_map(|(k, m)| {
                    let values = front.iter().filter_map(|b| b.values.get(k).copied());
                    let best = match m.natural_direction() {
                        StudyDirection::Maximize => values.fold(f64::NEG_INFINITY, f64::max),
                        _ => values.fold(f64::INFINITY, f64::min),
                    };
                    best.is_finite()
                        .then(|| format!("{} {}", m.name(), m.show(best)))
                })
                .collect();
            Some(format!("front of {}: {}", front.len(), each.join(", ")))
        }
    }
}

/// The summary's lines: the best trial, or the Pareto front, one trial
/// with its values and params each.
pub fn summary_text(best: &[Best], metrics: &[TrialMetric]) -> String {
    match best {
        [] => "best: none (no feasible trial completed)\n".into(),
        [b] if metrics.len() <= 1 => format!(
            "best: trial {}, value {}\n  {}\n",
            b.number,
            values_text(&[], &b.values),
            b.params
        ),
        front => {
            let mut out = format!("Pareto front: {} trial(s)\n", front.len());
            for b in front {
                out.push_str(&format!(
                    "  trial {}: {}\n    {}\n",
                    b.number,
                    values_text(metrics, &b.values),
                    b.params
                ));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use store::TrialState;

    fn trial(number: u64, values: &[f64], violation: Option<f64>) -> FrozenTrial {
        let mut t = FrozenTrial::new(number);
        t.state = TrialState::Complete;
        t.values = Some(values.to_vec());
        if let Some(v) = violation {
            t.system_attrs.insert("constraints".into(), json!([v]));
        }
        t
    }

    #[test]
    fn one_objective_keeps_the_best_feasible_trial_with_the_lowest_number() {
        let trials = [
            trial(0, &[0.7], None),
            trial(1, &[0.9], Some(0.5)),
            trial(2, &[0.8], Some(-1.0)),
            trial(3, &[0.8], None),
        ];
        let best = best_trials(&trials, &[StudyDirection::Maximize]);
        assert_eq!(best.len(), 1);
        assert_eq!(best[0].number, 2, "trial 1 violates its constraint");
        let text = summary_text(&best, &[TrialMetric::Accuracy]);
        assert!(text.starts_with("best: trial 2, value 0.8000\n"), "{text}");
        assert_eq!(
            summary_text(&[], &[TrialMetric::Accuracy]),
            "best: none (no feasible trial completed)\n"
        );
    }

    #[test]
    fn several_objectives_keep_the_front_and_show_each_objectives_best() {
        let gib = (1u64 << 30) as f64;
        let trials = [
            trial(0, &[0.8, 2.0 * gib], None),
            trial(1, &[0.9, 4.0 * gib], None),
            trial(2, &[0.7, 3.0 * gib], None),
        ];
        let metrics = [TrialMetric::Accuracy, TrialMetric::PeakMemory];
        let directions = [StudyDirection::Maximize, StudyDirection::Minimize];
        let front = best_trials(&trials, &directions);
        assert_eq!(
            front.iter().map(|b| b.number).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(
            display_text(&front, &metrics).unwrap(),
            "front of 2: accuracy 0.9000, peak_memory 2.00 GiB"
        );
        let text = summary_text(&front, &metrics);
        assert!(text.starts_with("Pareto front: 2 trial(s)\n"), "{text}");
        assert!(
            text.contains("  trial 1: accuracy 0.9000, peak_memory 4.00 GiB\n"),
            "{text}"
        );
    }
}

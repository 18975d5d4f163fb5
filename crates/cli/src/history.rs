//! A study's stored trials as a sampler or pruner gets them: the store
//! returns `hpo_sampler::FrozenTrial`s, and this holds them to what a
//! sampler relies on and a storage written by others cannot promise, and
//! keeps them between reads for a reader that asks often ([`Cache`]).

use hpo_sampler::{Distribution, FrozenTrial};
use serde_json::Value as Json;
use std::path::PathBuf;

/// A stored history a sampler cannot use (a value Optuna could not read
/// back, constraints that are not numbers, two trials of one number); the
/// message names the storage, the trial and the parameter or attribute.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}: stored history: {source}", storage.display())]
pub struct HistoryError {
    /// The storage's file, or its URL without the password.
    pub storage: PathBuf,
    pub source: hpo_sampler::Error,
}

impl HistoryError {
    /// `source`, found in what `storage` holds (for `map_err`: the path
    /// is copied only when there is an error).
    pub fn in_storage(storage: &store::Storage) -> impl FnOnce(hpo_sampler::Error) -> Self + '_ {
        move |source| HistoryError {
            storage: storage.path().to_path_buf(),
            source,
        }
    }
}

/// `trials`, read from `storage`, once each passed [`FrozenTrial::check`].
pub fn checked(
    storage: &store::Storage,
    trials: Vec<FrozenTrial>,
) -> Result<Vec<FrozenTrial>, HistoryError> {
    for t in &trials {
        t.check().map_err(HistoryError::in_storage(storage))?;
    }
    Ok(trials)
}

/// An enqueued trial's `fixed_params` value (external, as Optuna's
/// `enqueue_trial` stores it) in `distribution`'s internal form. A value
/// outside the distribution is refused, where Optuna only warns, so that a
/// trial never runs with a value its search space does not allow.
pub fn fixed_internal(
    distribution: &Distribution,
    name: &str,
    value: &Json,
) -> Result<f64, String> {
    let external = store::value_from_json(value)
        .map_err(|why| format!("fixed value {value} for parameter '{name}': {why}"))?;
    distribution
        .internal_of(name, &external)
        .map_err(|e| format!("fixed {e}"))
}

/// A study's trials kept between reads, so a long-running reader (the
/// `tune` runner asks for them on every claim, refill and intermediate
/// report) reads each trial's rows about once rather than the whole
/// history every time: finished trials never change, so only new trials
/// and those last seen RUNNING or WAITING are read again
/// ([`store::Storage::trials_since`]).
#[derive(Debug, Default)]
pub struct Cache {
    /// Ordered by number, as [`store::Storage::trials`] returns them.
    trials: Vec<FrozenTrial>,
    /// Position of each trial id in `trials`.
    index: std::collections::HashMap<i64, usize>,
    /// The largest trial id read so far; `None` before the first read.
    seen_up_to: Option<i64>,
    /// Ids of the trials last read RUNNING or WAITING, to read again.
    unfinished: std::collections::BTreeSet<i64>,
}

impl Cache {
    /// Every trial of the study, as stored now, each [`checked`] once.
    pub fn refresh<E>(
        &mut self,
        storage: &store::Storage,
        study_id: i64,
    ) -> Result<&[FrozenTrial], E>
    where
        E: From<store::StoreError> + From<HistoryError>,
    {
        let unfinished: Vec<i64> = self.unfinished.iter().copied().collect();
        let fresh = checked(
            storage,
            storage.trials_since(study_id, self.seen_up_to, &unfinished)?,
        )?;
        self.merge(fresh);
        Ok(&self.trials)
    }

    /// The trials as of the last [`Cache::refresh`], ordered by number.
    pub fn trials(&self) -> &[FrozenTrial] {
        &self.trials
    }

    /// Replaces the trials read again and appends the new ones.
    fn merge(&mut self, fresh: Vec<FrozenTrial>) {
        let mut appended = false;
        for t in fresh {
            self.seen_up_to = self.seen_up_to.max(Some(t.trial_id));
            if t.state.is_finished() {
                self.unfinished.remove(&t.trial_id);
            } else {
                self.unfinished.insert(t.trial_id);
            }
            match self.index.get(&t.trial_id) {
                Some(&i) => self.trials[i] = t,
                None => {
                    appended = true;
                    self.index.insert(t.trial_id, self.trials.len());
                    self.trials.push(t);
                }
            }
        }
        // Numbers follow ids within a study, so this is rarely a real sort.
        if appended && !self.trials.is_sorted_by_key(|t| (t.number, t.trial_id)) {
            self.trials.sort_by_key(|t| (t.number, t.trial_id));
            self.index = (self.trials.iter().enumerate())
                .map(|(i, t)| (t.trial_id, i))
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpo_sampler::TrialState;

    fn trial(trial_id: i64, number: u64, state: TrialState) -> FrozenTrial {
        let mut t = FrozenTrial::new(number);
        t.trial_id = trial_id;
        t.state = state;
        t
    }

    #[test]
    fn merge_replaces_reread_trials_and_keeps_number_order() {
        let mut c = Cache::default();
        c.merge(vec![
            trial(1, 0, TrialState::Complete),
            trial(2, 1, TrialState::Running),
        ]);
        assert_eq!(c.seen_up_to, Some(2));
        // Trial 2 finished; 4 arrived before 3 (numbered out of id order).
        c.merge(vec![
            trial(2, 1, TrialState::Complete),
            trial(4, 2, TrialState::Waiting),
            trial(3, 3, TrialState::Running),
        ]);
        let got: Vec<(i64, u64, TrialState)> = c
            .trials
            .iter()
            .map(|t| (t.trial_id, t.number, t.state))
            .collect();
        assert_eq!(
            got,
            [
                (1, 0, TrialState::Complete),
                (2, 1, TrialState::Complete),
                (4, 2, TrialState::Waiting),
                (3, 3, TrialState::Running),
            ]
        );
        assert_eq!(c.seen_up_to, Some(4));
        assert_eq!(c.unfinished.iter().copied().collect::<Vec<_>>(), [3, 4]);
        c.merge(vec![trial(3, 3, TrialState::Pruned)]);
        assert_eq!(c.trials[3].state, TrialState::Pruned);
        assert_eq!(c.index[&3], 3);
        assert_eq!(c.unfinished.iter().copied().collect::<Vec<_>>(), [4]);
    }
}

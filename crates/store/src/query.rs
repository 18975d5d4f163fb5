//! Reading trials back: one trial, filtered lists, the best trial(s).

use crate::attrs::{AttrTable, parse_json};
use crate::db::{Tx, Value, vals};
use crate::error::{Result, StoreError};
use crate::model::{FrozenTrial, Param, StudyDirection, TrialFilter, TrialState, decode_float};
use crate::optuna_json::json_to_distribution;
use crate::storage::{Storage, TxError};
use crate::study::{load_by_id, state_counts};
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};

/// Optuna's `best_trial` of one objective over trials already read (what
/// [`Storage::best_trial`] and a report share): the best value of the
/// COMPLETE trials that meet their constraints (no value above 0), an
/// infinite value competing as any other; ties go to the earliest in
/// `trials`' order.
pub fn best_feasible_trial<'a>(
    direction: StudyDirection,
    trials: impl IntoIterator<Item = &'a FrozenTrial>,
) -> Option<&'a FrozenTrial> {
    direction.best_trial(trials.into_iter().filter(|t| t.is_feasible()))
}

impl Storage {
    /// One trial by id, or `TrialNotFound`.
    pub fn trial(&self, trial_id: i64) -> Result<FrozenTrial> {
        self.read(|tx| {
            let mut v = load_trials(tx, "t.trial_id = ?1", trial_id)?;
            v.pop()
                .ok_or_else(|| StoreError::TrialNotFound { trial_id }.into())
        })
    }

    /// The trial numbered `number` in the study, or `None`.
    pub fn trial_by_number(&self, study_id: i64, number: i64) -> Result<Option<FrozenTrial>> {
        self.read(|tx| {
            let rows = tx.query(
                "SELECT trial_id FROM trials WHERE study_id = ?1 AND number = ?2 ORDER BY trial_id",
                vals![study_id, number],
            )?;
            let ids = rows
                .iter()
                .map(|r| r.i64(0))
                .collect::<Result<Vec<i64>, _>>()?;
            match ids[..] {
                [] => Ok(None),
                [id] => Ok(load_trials(tx, "t.trial_id = ?1", id)?.pop()),
                // Optuna refuses it too: which trial is meant is unknown.
                [first, ..] => Err(StoreError::BadRow {
                    path: Default::default(),
                    table: "trials",
                    field: "number",
                    row_id: first,
                    value: format!("{number}, which trial_ids {ids:?} all have"),
                    of: describe_study(tx, study_id),
                }
                .into()),
            }
        })
    }

    /// How many of the study's trials are in one of `states` (all when empty);
    /// one COUNT query, for budgets such as "stop after N complete trials".
    pub fn count_trials(&self, study_id: i64, states: &[TrialState]) -> Result<usize> {
        self.read(|tx| {
            load_by_id(tx, study_id)?;
            Ok(state_counts(tx, study_id)?
                .into_iter()
                .filter(|(s, _)| {
                    states.is_empty() || TrialState::parse(s).is_some_and(|s| states.contains(&s))
                })
                .map(|(_, n)| n as usize)
                .sum())
        })
    }

    /// The study's trials matching `filter`, ordered by number.
    pub fn trials(&self, study_id: i64, filter: &TrialFilter) -> Result<Vec<FrozenTrial>> {
        self.read(|tx| {
            load_by_id(tx, study_id)?;
            let all = load_trials(tx, "t.study_id = ?1", study_id)?;
            Ok(all
                .into_iter()
                .filter(|t| filter.states.is_empty() || filter.states.contains(&t.state))
                .filter(|t| match &filter.attr_key {
                    None => true,
                    Some(k) => t.user_attrs.contains_key(k) || t.system_attrs.contains_key(k),
                })
                .collect())
        })
    }

    /// The study's trials that a reader holding its finished trials up to
    /// id `seen_up_to` must read again: those with a larger id and those
    /// in `unfinished` (the ones it last saw RUNNING or WAITING), ordered
    /// by number; every trial when `seen_up_to` is `None`. A finished
    /// trial never changes (the store refuses writes to it), so a reader
    /// that keeps them reads each trial's rows about once however long the
    /// study grows, as Optuna's `_CachedStorage` does.
    pub fn trials_since(
        &self,
        study_id: i64,
        seen_up_to: Option<i64>,
        unfinished: &[i64],
    ) -> Result<Vec<FrozenTrial>> {
        let cond = match seen_up_to {
            None => "t.study_id = ?1".to_string(),
            // Ids are integers formatted here, never text from outside.
            Some(seen) if unfinished.is_empty() => {
                format!("t.study_id = ?1 AND t.trial_id > {seen}")
            }
            Some(seen) => {
                let ids: Vec<String> = unfinished.iter().map(i64::to_string).collect();
                format!(
                    "t.study_id = ?1 AND (t.trial_id > {seen} OR t.trial_id IN ({}))",
                    ids.join(",")
                )
            }
        };
        self.read(|tx| {
            load_by_id(tx, study_id)?;
            load_trials(tx, &cond, study_id)
        })
    }

    /// The best COMPLETE trial of a single-objective study (`None` if no
    /// trial is complete); ties go to the lowest number. As Optuna's
    /// `best_trial`, a trial that violates a constraint (a value above 0
    /// in its `constraints` system attribute) is passed over for the best
    /// feasible one (`None` if there is none).
    pub fn best_trial(&self, study_id: i64) -> Result<Option<FrozenTrial>> {
        let study = self.study_by_id(study_id)?;
        if study.directions.len() != 1 {
            return Err(StoreError::MultiObjective {
                study_id,
                objectives: study.directions.len(),
            });
        }
        let filter = TrialFilter {
            states: vec![TrialState::Complete],
            attr_key: None,
        };
        let trials = self.trials(study_id, &filter)?;
        Ok(best_feasible_trial(study.directions[0], &trials).cloned())
    }

    /// The Pareto front of COMPLETE trials (for one objective: every trial
    /// tied at the best value), ordered by number. As Optuna's
    /// `best_trials`, only feasible trials (no constraint value above 0)
    /// compete.
    pub fn best_trials(&self, study_id: i64) -> Result<Vec<FrozenTrial>> {
        let study = self.study_by_id(study_id)?;
        let filter = TrialFilter {
            states: vec![TrialState::Complete],
            attr_key: None,
        };
        let trials: Vec<FrozenTrial> = self
            .trials(study_id, &filter)?
            .into_iter()
            .filter(|t| {
                t.values
                    .as_ref()
                    .is_some_and(|v| v.len() == study.directions.len())
            })
            .filter(FrozenTrial::is_feasible)
            .collect();
        // Turn every objective into "smaller is better".
        let key = |t: &FrozenTrial| -> Vec<f64> {
            let v = t.values.as_deref().unwrap_or_default();
            v.iter()
                .zip(&study.directions)
                .map(|(&x, d)| {
                    if *d == StudyDirection::Maximize {
                        -x
                    } else {
                        x
                    }
                })
                .collect()
        };
        let keys: Vec<Vec<f64>> = trials.iter().map(key).collect();
        let dominates = |a: &[f64], b: &[f64]| {
            a.iter().zip(b).all(|(x, y)| x <= y) && a.iter().zip(b).any(|(x, y)| x < y)
        };
        Ok(trials
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !keys.iter().any(|other| dominates(other, &keys[*i])))
            .map(|(_, t)| t)
            .collect())
    }
}

/// Load every trial matching `where_sql` (a condition on `t`, one parameter)
/// with all its rows: six queries however many trials there are.
pub(crate) fn load_trials(
    tx: Tx<'_>,
    where_sql: &str,
    arg: i64,
) -> Result<Vec<FrozenTrial>, TxError> {
    let arg = [Value::Int(arg)];
    let mut trials: Vec<FrozenTrial> = Vec::new();
    let mut index: HashMap<i64, usize> = HashMap::new();
    let sql = format!(
        "SELECT t.trial_id, t.number, t.state, t.datetime_start, t.datetime_complete \
         FROM trials t WHERE {where_sql} ORDER BY t.number, t.trial_id"
    );
    for r in tx.query(&sql, &arg)? {
        let trial_id = r.i64(0)?;
        let bad_row = |field: &'static str, value: String| StoreError::BadRow {
            path: Default::default(),
            table: "trials",
            field,
            row_id: trial_id,
            value,
            of: describe_trial(tx, trial_id),
        };
        let number = r.opt_i64(1)?;
        let number = number
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| bad_row("number", format!("{number:?}")))?;
        let state = r.string(2)?;
        let state = TrialState::parse(&state).ok_or_else(|| bad_row("state", state.clone()))?;
        index.insert(trial_id, trials.len());
        let mut trial = FrozenTrial::new(number);
        trial.trial_id = trial_id;
        trial.state = state;
        trial.datetime_start = r.opt_string(3)?;
        trial.datetime_complete = r.opt_string(4)?;
        trials.push(trial);
    }
    if trials.is_empty() {
        return Ok(trials);
    }
    let child = |table: &str, cols: &str, order: &str| {
        format!(
            "SELECT c.trial_id, {cols} FROM {table} c JOIN trials t ON t.trial_id = c.trial_id WHERE {where_sql} ORDER BY c.trial_id, {order}"
        )
    };

    let sql = child(
        "trial_params",
        "c.param_name, c.param_value, c.distribution_json",
        "c.param_name",
    );
    for r in tx.query(&sql, &arg)? {
        let trial_id = r.i64(0)?;
        if let Some(&i) = index.get(&trial_id) {
            let name = r.opt_string(1)?.unwrap_or_default();
            let bad = |reason: String| StoreError::BadParam {
                path: Default::default(),
                trial: describe_trial(tx, trial_id),
                number: trials[i].number,
                name: name.clone(),
                reason,
            };
            let internal = r
                .opt_f64(2)?
                .ok_or_else(|| bad("trial_params.param_value is NULL".into()))?;
            let json = r.opt_string(3)?.unwrap_or_default();
            let distribution = json_to_distribution(&json).map_err(|e| bad(e.to_string()))?;
            // A categorical's value is an index into its choices: any other
            // would be shown as a choice made up for it. Numbers outside their
            // range are kept, as Optuna stores them for enqueued trials.
            if let hpo_sampler::Distribution::Categorical { choices } = &distribution
                && !distribution.contains(internal)
            {
                return Err(bad(format!(
                    "stored value {internal} (trial_params.param_value) is not the index of \
                     one of its {} choices",
                    choices.len()
                ))
                .into());
            }
            trials[i].params.insert(
                name,
                Param {
                    distribution,
                    internal,
                },
            );
        }
    }

    let sql = child(
        "trial_values",
        "c.trial_value_id, c.objective, c.value, c.value_type",
        "c.objective",
    );
    for r in tx.query(&sql, &arg)? {
        let trial_id = r.i64(0)?;
        if let Some(&i) = index.get(&trial_id) {
            let row = (trial_id, r.i64(1)?);
            let kind = r.string(4)?;
            let v = decode_float(r.opt_f64(3)?, &kind)
                .filter(|_| kind != "NAN")
                .ok_or_else(|| {
                    bad_float(tx, "trial_values", ["value", "value_type"], row, &kind)
                })?;
            trials[i].values.get_or_insert_with(Vec::new).push(v);
        }
    }

    let sql = child(
        "trial_intermediate_values",
        "c.trial_intermediate_value_id, c.step, c.intermediate_value, c.intermediate_value_type",
        "c.step",
    );
    for r in tx.query(&sql, &arg)? {
        let trial_id = r.i64(0)?;
        if let Some(&i) = index.get(&trial_id) {
            let row = (trial_id, r.i64(1)?);
            let kind = r.string(4)?;
            let v = decode_float(r.opt_f64(3)?, &kind).ok_or_else(|| {
                bad_float(
                    tx,
                    "trial_intermediate_values",
                    ["intermediate_value", "intermediate_value_type"],
                    row,
                    &kind,
                )
            })?;
            trials[i].intermediate_values.insert(r.i64(2)?, v);
        }
    }

    for table in [AttrTable::TrialUser, AttrTable::TrialSystem] {
        let sql = child(table.table(), "c.\"key\", c.value_json", "c.\"key\"");
        for r in tx.query(&sql, &arg)? {
            let owner_id = r.i64(0)?;
            if let Some(&i) = index.get(&owner_id) {
                let key = r.opt_string(1)?.unwrap_or_default();
                let text = r.opt_string(2)?.unwrap_or_default();
                let v = parse_json(table, owner_id, &key, &text)?;
                let map = match table {
                    AttrTable::TrialUser => &mut trials[i].user_attrs,
                    _ => &mut trials[i].system_attrs,
                };
                map.insert(key, v);
            }
        }
    }
    Ok(trials)
}

/// A float row [`decode_float`] refused, `(trial_id, row id)`: a FINITE
/// type without a value names the value column, any other the type column.
fn bad_float(
    tx: Tx<'_>,
    table: &'static str,
    [value, kind]: [&'static str; 2],
    (trial_id, row_id): (i64, i64),
    stored_kind: &str,
) -> StoreError {
    let (field, shown) = match stored_kind {
        "FINITE" => (value, "NULL".to_string()),
        other => (kind, other.to_string()),
    };
    StoreError::BadRow {
        path: Default::default(),
        table,
        field,
        row_id,
        value: shown,
        of: describe_trial(tx, trial_id),
    }
}

/// A trial for an error about its rows: `trial 3 of study `s` (trial_id
/// 4)`, as much of it as reads.
pub(crate) fn describe_trial(tx: Tx<'_>, trial_id: i64) -> String {
    let row = tx
        .query_opt(
            "SELECT t.number, s.study_name FROM trials t \
             LEFT JOIN studies s ON s.study_id = t.study_id WHERE t.trial_id = ?1",
            vals![trial_id],
        )
        .ok()
        .flatten();
    let number = row.as_ref().and_then(|r| r.opt_i64(0).ok().flatten());
    let study = row.as_ref().and_then(|r| r.opt_string(1).ok().flatten());
    let mut out = number.map_or_else(|| "a trial".to_string(), |n| format!("trial {n}"));
    if let Some(study) = study {
        out.push_str(&format!(" of study `{}`", study.escape_debug()));
    }
    out + &format!(" (trial_id {trial_id})")
}

/// A study for an error about its rows: `study `s``, or its id where the
/// name does not read.
pub(crate) fn describe_study(tx: Tx<'_>, study_id: i64) -> String {
    tx.query_opt(
        "SELECT study_name FROM studies WHERE study_id = ?1",
        vals![study_id],
    )
    .ok()
    .flatten()
    .and_then(|r| r.opt_string(0).ok().flatten())
    .map_or_else(
        || format!("study id {study_id}"),
        |name| format!("study `{}`", name.escape_debug()),
    )
}

/// One owner's attributes from one of the four attribute tables.
pub(crate) fn load_attrs(
    tx: Tx<'_>,
    table: AttrTable,
    owner_id: i64,
) -> Result<BTreeMap<String, Json>, TxError> {
    let sql = format!(
        "SELECT \"key\", value_json FROM {} WHERE {} = ?1 ORDER BY \"key\"",
        table.table(),
        table.owner()
    );
    let mut out = BTreeMap::new();
    for r in tx.query(&sql, vals![owner_id])? {
        let key = r.opt_string(0)?.unwrap_or_default();
        let text = r.opt_string(1)?.unwrap_or_default();
        let v = parse_json(table, owner_id, &key, &text)?;
        out.insert(key, v);
    }
    Ok(out)
}

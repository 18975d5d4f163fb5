//! Writing trials: create, enqueue, claim, params, intermediate values,
//! attributes, heartbeats and the final state.

use crate::attrs::{AttrTable, set_attr};
use crate::error::{Result, StoreError};
use crate::model::{Param, TrialRef, TrialState, encode_float};
use crate::storage::{Storage, TxError};
use crate::study::load_by_id;
use crate::time;
use rusqlite::{Connection, OptionalExtension};
use serde_json::Value as Json;

/// A trial to enqueue: fixed parameters and attributes, claimed later by one worker.
#[derive(Clone, Debug, Default)]
pub struct NewTrial {
    pub params: Vec<Param>,
    pub user_attrs: Vec<(String, Json)>,
    pub system_attrs: Vec<(String, Json)>,
    pub intermediate_values: Vec<(i64, f64)>,
}

/// Whether `create_or_claim_trial` made a new trial or took a queued one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    Created(TrialRef),
    Claimed(TrialRef),
}

impl Claim {
    pub fn trial(self) -> TrialRef {
        match self {
            Claim::Created(t) | Claim::Claimed(t) => t,
        }
    }
}

impl Storage {
    /// A new RUNNING trial with the next dense number of the study.
    pub fn create_trial(&self, study_id: i64) -> Result<TrialRef> {
        self.write(|conn| {
            load_by_id(conn, study_id)?;
            insert_trial(conn, study_id, TrialState::Running)
        })
    }

    /// A new WAITING trial with fixed parameters, for one worker to claim.
    /// (Optuna's `study.enqueue_trial` instead writes only a `fixed_params`
    /// system attribute; [`Storage::claim_waiting`] claims both kinds.)
    pub fn enqueue_trial(&self, study_id: i64, trial: &NewTrial) -> Result<TrialRef> {
        self.write(|conn| {
            load_by_id(conn, study_id)?;
            insert_full(conn, study_id, trial)
        })
    }

    /// Claim the oldest WAITING trial of the study: it becomes RUNNING with a
    /// start time. Under `BEGIN IMMEDIATE`, exactly one caller gets each one.
    pub fn claim_waiting(&self, study_id: i64) -> Result<Option<TrialRef>> {
        self.write(|conn| claim(conn, study_id))
    }

    /// Claim a WAITING trial if there is one, else create a new RUNNING one;
    /// one transaction, so the queue is always drained first.
    pub fn create_or_claim_trial(&self, study_id: i64) -> Result<Claim> {
        self.write(|conn| {
            load_by_id(conn, study_id)?;
            Ok(match claim(conn, study_id)? {
                Some(t) => Claim::Claimed(t),
                None => Claim::Created(insert_trial(conn, study_id, TrialState::Running)?),
            })
        })
    }

    /// Claim a WAITING trial if there is one, else create a new RUNNING one
    /// if the study holds fewer than `budget` trials that count (see
    /// [`Storage::counted_trials`]); `None` when the budget is spent. The
    /// trial gets its first heartbeat in the same transaction, so a process
    /// killed right after claiming leaves a trial that goes stale instead of
    /// one that looks like an ask/tell client's (which never beats and is
    /// never failed for it). One transaction: any number of processes
    /// sharing a study never overshoot the budget nor claim one trial twice.
    pub fn claim_or_create_within(&self, study_id: i64, budget: usize) -> Result<Option<Claim>> {
        self.write(|conn| {
            load_by_id(conn, study_id)?;
            let claim = match claim(conn, study_id)? {
                Some(t) => Claim::Claimed(t),
                None if counted(conn, study_id)? < budget => {
                    Claim::Created(insert_trial(conn, study_id, TrialState::Running)?)
                }
                None => return Ok(None),
            };
            beat(conn, claim.trial().trial_id)?;
            Ok(Some(claim))
        })
    }

    /// Trials that count toward a study's budget: all of them, except FAIL
    /// trials that were retried (their number is in some trial's
    /// `retry_history` system attribute, as Optuna's
    /// `RetryFailedTrialCallback` writes it): the retry stands for them.
    pub fn counted_trials(&self, study_id: i64) -> Result<usize> {
        self.read(|conn| counted(conn, study_id))
    }

    /// RUNNING trials of the study that have a heartbeat: their owner is
    /// alive, or they go stale after the grace period.
    pub fn beating_trials(&self, study_id: i64) -> Result<usize> {
        self.read(|conn| {
            let n: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM trials t JOIN trial_heartbeats h ON h.trial_id = t.trial_id \
                     WHERE t.study_id = ?1 AND t.state = 'RUNNING'",
                )?
                .query_row([study_id], |r| r.get(0))?;
            Ok(n as usize)
        })
    }

    /// Record one parameter: its internal value and distribution JSON.
    pub fn set_param(
        &self,
        trial_id: i64,
        name: &str,
        internal_value: f64,
        distribution_json: &str,
    ) -> Result<()> {
        self.write(|conn| {
            let t = writable(conn, trial_id)?;
            insert_param(
                conn,
                trial_id,
                t.number,
                name,
                internal_value,
                distribution_json,
            )
        })
    }

    /// Record (or overwrite) the intermediate value of `step`; NaN and
    /// infinities are stored with Optuna's NAN/INF_POS/INF_NEG types.
    pub fn report_intermediate(&self, trial_id: i64, step: i64, value: f64) -> Result<()> {
        self.write(|conn| {
            writable(conn, trial_id)?;
            insert_intermediate(conn, trial_id, step, value)
        })
    }

    /// End a trial: COMPLETE needs one value per objective; PRUNED and FAIL
    /// take values optionally (empty slice for none). Infinite values are
    /// stored as INF_POS/INF_NEG; NaN is rejected as Optuna rejects it.
    pub fn finish(&self, trial_id: i64, state: TrialState, values: &[f64]) -> Result<()> {
        self.write(|conn| {
            let t = writable(conn, trial_id)?;
            if !state.is_finished() {
                return Err(StoreError::NotAFinishedState {
                    number: t.number,
                    state: state.to_string(),
                }
                .into());
            }
            let n_obj = load_by_id(conn, t.study_id)?.directions.len();
            let needs_values = state == TrialState::Complete;
            if (needs_values || !values.is_empty()) && values.len() != n_obj {
                return Err(StoreError::WrongNumberOfValues {
                    number: t.number,
                    expected: n_obj,
                    got: values.len(),
                }
                .into());
            }
            for (objective, &v) in values.iter().enumerate() {
                if v.is_nan() {
                    return Err(StoreError::InvalidValue {
                        number: t.number,
                        what: format!("objective {objective}"),
                        value: v,
                    }
                    .into());
                }
                let (value, kind) = encode_float(v);
                conn.prepare_cached(
                    "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (trial_id, objective) DO UPDATE SET value = excluded.value, value_type = excluded.value_type",
                )?
                .execute(rusqlite::params![trial_id, objective as i64, value, kind])?;
            }
            conn.prepare_cached(
                "UPDATE trials SET state = ?1, datetime_complete = ?2 WHERE trial_id = ?3",
            )?
            .execute(rusqlite::params![state.as_str(), time::now_local(), trial_id])?;
            Ok(())
        })
    }

    /// Set a trial user attribute (JSON), overwriting the key.
    pub fn set_trial_user_attr(&self, trial_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|conn| {
            writable(conn, trial_id)?;
            set_attr(conn, AttrTable::TrialUser, trial_id, key, value)
        })
    }

    /// Set a trial system attribute (JSON), overwriting the key.
    pub fn set_trial_system_attr(&self, trial_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|conn| {
            writable(conn, trial_id)?;
            set_attr(conn, AttrTable::TrialSystem, trial_id, key, value)
        })
    }

    /// Record that the owner of a trial is alive (UTC, as Optuna's heartbeat).
    pub fn heartbeat(&self, trial_id: i64) -> Result<()> {
        self.write(|conn| {
            writable(conn, trial_id)?;
            beat(conn, trial_id)
        })
    }
}

fn beat(conn: &Connection, trial_id: i64) -> Result<(), TxError> {
    conn.prepare_cached(
        "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES (?1, ?2) \
         ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat",
    )?
    .execute(rusqlite::params![trial_id, time::now_utc()])?;
    Ok(())
}

fn counted(conn: &Connection, study_id: i64) -> Result<usize, TxError> {
    let mut retried = std::collections::BTreeSet::new();
    let histories = conn
        .prepare_cached(
            "SELECT a.value_json FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id \
             WHERE t.study_id = ?1 AND a.key = 'retry_history'",
        )?
        .query_map([study_id], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for text in histories {
        // Not a list of numbers: written by someone else; it retries nothing.
        if let Ok(Json::Array(list)) = serde_json::from_str::<Json>(&text) {
            retried.extend(list.iter().filter_map(Json::as_i64));
        }
    }
    let failed: Vec<i64> = conn
        .prepare_cached("SELECT number FROM trials WHERE study_id = ?1 AND state = 'FAIL'")?
        .query_map([study_id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let total: i64 = conn
        .prepare_cached("SELECT count(*) FROM trials WHERE study_id = ?1")?
        .query_row([study_id], |r| r.get(0))?;
    let retried_failures = failed.iter().filter(|n| retried.contains(n)).count();
    Ok(total as usize - retried_failures)
}

pub(crate) struct TrialRow {
    pub study_id: i64,
    pub number: i64,
}

/// The trial, if it may still change (RUNNING or WAITING, as in Optuna).
pub(crate) fn writable(conn: &Connection, trial_id: i64) -> Result<TrialRow, TxError> {
    let row: Option<(i64, i64, String)> = conn
        .prepare_cached("SELECT study_id, number, state FROM trials WHERE trial_id = ?1")?
        .query_row([trial_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((study_id, number, state)) = row else {
        return Err(StoreError::TrialNotFound { trial_id }.into());
    };
    let parsed = TrialState::parse(&state).ok_or_else(|| StoreError::BadRow {
        table: "trials",
        field: "state",
        row_id: trial_id,
        value: state.clone(),
    })?;
    if parsed.is_finished() {
        return Err(StoreError::TrialFinished { number, state }.into());
    }
    Ok(TrialRow { study_id, number })
}

/// Insert a trial numbered by how many the study already has: the caller
/// holds the write lock, so numbers are unique and dense (Optuna numbers a
/// trial by counting the study's trials with a smaller id, the same thing).
pub(crate) fn insert_trial(
    conn: &Connection,
    study_id: i64,
    state: TrialState,
) -> Result<TrialRef, TxError> {
    let number: i64 = conn
        .prepare_cached("SELECT count(*) FROM trials WHERE study_id = ?1")?
        .query_row([study_id], |r| r.get(0))?;
    let start = (state == TrialState::Running).then(time::now_local);
    conn.prepare_cached(
        "INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) VALUES (?1, ?2, ?3, ?4, NULL)",
    )?
    .execute(rusqlite::params![number, study_id, state.as_str(), start])?;
    Ok(TrialRef {
        trial_id: conn.last_insert_rowid(),
        number,
    })
}

/// A WAITING trial with everything in `trial`.
pub(crate) fn insert_full(
    conn: &Connection,
    study_id: i64,
    trial: &NewTrial,
) -> Result<TrialRef, TxError> {
    let t = insert_trial(conn, study_id, TrialState::Waiting)?;
    for p in &trial.params {
        insert_param(
            conn,
            t.trial_id,
            t.number,
            &p.name,
            p.internal_value,
            &p.distribution_json,
        )?;
    }
    for (k, v) in &trial.user_attrs {
        set_attr(conn, AttrTable::TrialUser, t.trial_id, k, v)?;
    }
    for (k, v) in &trial.system_attrs {
        set_attr(conn, AttrTable::TrialSystem, t.trial_id, k, v)?;
    }
    for &(step, v) in &trial.intermediate_values {
        insert_intermediate(conn, t.trial_id, step, v)?;
    }
    Ok(t)
}

fn claim(conn: &Connection, study_id: i64) -> Result<Option<TrialRef>, TxError> {
    let next: Option<(i64, i64)> = conn
        .prepare_cached(
            "SELECT trial_id, number FROM trials WHERE study_id = ?1 AND state = 'WAITING' ORDER BY trial_id LIMIT 1",
        )?
        .query_row([study_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((trial_id, number)) = next else {
        return Ok(None);
    };
    let changed = conn
        .prepare_cached(
            "UPDATE trials SET state = 'RUNNING', datetime_start = ?1 WHERE trial_id = ?2 AND state = 'WAITING'",
        )?
        .execute(rusqlite::params![time::now_local(), trial_id])?;
    // Always 1 under the write lock; checked so a logic slip cannot double-claim.
    Ok((changed == 1).then_some(TrialRef { trial_id, number }))
}

fn insert_param(
    conn: &Connection,
    trial_id: i64,
    number: i64,
    name: &str,
    internal_value: f64,
    distribution_json: &str,
) -> Result<(), TxError> {
    if !internal_value.is_finite() {
        return Err(StoreError::InvalidValue {
            number,
            what: format!("parameter `{name}`"),
            value: internal_value,
        }
        .into());
    }
    if let Err(e) = serde_json::from_str::<Json>(distribution_json) {
        return Err(StoreError::BadDistribution {
            json: distribution_json.to_string(),
            reason: e.to_string(),
        }
        .into());
    }
    let exists: Option<i64> = conn
        .prepare_cached(
            "SELECT param_id FROM trial_params WHERE trial_id = ?1 AND param_name = ?2",
        )?
        .query_row(rusqlite::params![trial_id, name], |r| r.get(0))
        .optional()?;
    if exists.is_some() {
        return Err(StoreError::ParamExists {
            number,
            name: name.to_string(),
        }
        .into());
    }
    conn.prepare_cached(
        "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(rusqlite::params![trial_id, name, internal_value, distribution_json])?;
    Ok(())
}

fn insert_intermediate(conn: &Connection, trial_id: i64, step: i64, v: f64) -> Result<(), TxError> {
    let (value, kind) = encode_float(v);
    conn.prepare_cached(
        "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (trial_id, step) DO UPDATE SET \
         intermediate_value = excluded.intermediate_value, intermediate_value_type = excluded.intermediate_value_type",
    )?
    .execute(rusqlite::params![trial_id, step, value, kind])?;
    Ok(())
}

//! Writing trials: create, enqueue, claim, params, intermediate values,
//! attributes, heartbeats and the final state.

use crate::attrs::{AttrTable, set_attr};
use crate::db::{Tx, vals};
use crate::error::{Result, StoreError};
use crate::model::{Param, TrialRef, TrialState, encode_float};
use crate::optuna_json::distribution_to_json;
use crate::stale::{OWNER_KEY, Owner};
use crate::storage::{Storage, TxError};
use crate::study::{load_by_id, lock_study};
use crate::time;
use hpo_sampler::Distribution;
use serde_json::Value as Json;

/// A trial to enqueue: fixed parameters and attributes, claimed later by one worker.
#[derive(Clone, Debug, Default)]
pub struct NewTrial {
    /// By name; stored with Optuna's `distribution_json`.
    pub params: Vec<(String, Param)>,
    /// User attributes `(key, value)`, stored as Optuna's JSON.
    pub user_attrs: Vec<(String, Json)>,
    /// System attributes `(key, value)`, stored as Optuna's JSON.
    pub system_attrs: Vec<(String, Json)>,
    /// Intermediate values `(step, value)`; a later one of the same step
    /// replaces an earlier one.
    pub intermediate_values: Vec<(i64, f64)>,
}

/// Whether `create_or_claim_trial` made a new trial or took a queued one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// No trial was WAITING: a new RUNNING trial was created.
    Created(TrialRef),
    /// The oldest WAITING trial, now RUNNING, with the parameters and
    /// attributes it was enqueued with.
    Claimed(TrialRef),
}

impl Claim {
    /// The trial, now RUNNING, however it was obtained.
    pub fn trial(self) -> TrialRef {
        match self {
            Claim::Created(t) | Claim::Claimed(t) => t,
        }
    }
}

impl Storage {
    /// A new RUNNING trial with the next dense number of the study.
    pub fn create_trial(&self, study_id: i64) -> Result<TrialRef> {
        self.write(|tx| {
            lock_study(tx, study_id)?;
            insert_trial(tx, study_id, TrialState::Running)
        })
    }

    /// A new WAITING trial with fixed parameters, for one worker to claim.
    /// (Optuna's `study.enqueue_trial` instead writes only a `fixed_params`
    /// system attribute; [`Storage::claim_waiting`] claims both kinds.)
    pub fn enqueue_trial(&self, study_id: i64, trial: &NewTrial) -> Result<TrialRef> {
        self.write(|tx| {
            lock_study(tx, study_id)?;
            insert_full(tx, study_id, trial)
        })
    }

    /// Claim the oldest WAITING trial of the study: it becomes RUNNING with a
    /// start time. Under `BEGIN IMMEDIATE`, exactly one caller gets each one.
    pub fn claim_waiting(&self, study_id: i64) -> Result<Option<TrialRef>> {
        self.write(|tx| {
            lock_study(tx, study_id)?;
            claim(tx, study_id)
        })
    }

    /// Claim a WAITING trial if there is one, else create a new RUNNING one;
    /// one transaction, so the queue is always drained first.
    pub fn create_or_claim_trial(&self, study_id: i64) -> Result<Claim> {
        self.write(|tx| {
            lock_study(tx, study_id)?;
            Ok(match claim(tx, study_id)? {
                Some(t) => Claim::Claimed(t),
                None => Claim::Created(insert_trial(tx, study_id, TrialState::Running)?),
            })
        })
    }

    /// Claim a WAITING trial if there is one, else create a new RUNNING one
    /// if the study holds fewer than `budget` trials that count (see
    /// [`Storage::counted_trials`]); `None` when the budget is spent. The
    /// trial is marked as `owner`'s and gets its first heartbeat in the
    /// same transaction, so a process killed right after claiming leaves a
    /// trial that goes stale instead of one that looks like an ask/tell
    /// client's (which never beats and is never failed for it). One
    /// transaction: any number of processes sharing a study never
    /// overshoot the budget nor claim one trial twice.
    pub fn claim_or_create_within(
        &self,
        study_id: i64,
        budget: usize,
        owner: &Owner,
    ) -> Result<Option<Claim>> {
        self.write(|tx| {
            lock_study(tx, study_id)?;
            let claim = match claim(tx, study_id)? {
                Some(t) => Claim::Claimed(t),
                None if counted(tx, study_id)? < budget => {
                    Claim::Created(insert_trial(tx, study_id, TrialState::Running)?)
                }
                None => return Ok(None),
            };
            let id = claim.trial().trial_id;
            set_attr(tx, AttrTable::TrialSystem, id, OWNER_KEY, &owner.to_json())?;
            beat(tx, id)?;
            Ok(Some(claim))
        })
    }

    /// Trials that count toward a study's budget: those that finished,
    /// except FAIL trials that were retried (their number is in some
    /// trial's `retry_history` system attribute, as Optuna's
    /// `RetryFailedTrialCallback` writes it: the retry stands for them),
    /// and those on their way: WAITING trials, and RUNNING trials an
    /// [`Owner`] claimed. A RUNNING trial of an Optuna client or of `ask`
    /// counts once it is told: one that never is holds no place.
    pub fn counted_trials(&self, study_id: i64) -> Result<usize> {
        self.read(|tx| counted(tx, study_id))
    }

    /// RUNNING trials of the study that an [`Owner`] claimed: their owner
    /// is alive, or they are taken over once its heartbeat is late.
    pub fn owned_running_trials(&self, study_id: i64) -> Result<usize> {
        self.read(|tx| {
            let n = tx
                .query_one(
                    &format!(
                        "SELECT count(*) FROM trials t JOIN trial_system_attributes a \
                         ON a.trial_id = t.trial_id AND a.key = '{OWNER_KEY}' \
                         WHERE t.study_id = ?1 AND t.state = 'RUNNING'"
                    ),
                    vals![study_id],
                )?
                .i64(0)?;
            Ok(n as usize)
        })
    }

    /// The owner that claimed a trial, if one did.
    pub fn trial_owner(&self, trial_id: i64) -> Result<Option<Owner>> {
        self.read(|tx| {
            let row = tx.query_opt(
                "SELECT value_json FROM trial_system_attributes WHERE trial_id = ?1 AND key = ?2",
                vals![trial_id, OWNER_KEY],
            )?;
            Ok(match row {
                Some(r) => r.opt_string(0)?.as_deref().and_then(Owner::from_json),
                None => None,
            })
        })
    }

    /// Record one parameter as Optuna's `set_trial_param` does: its
    /// internal value, and its distribution as Optuna's JSON.
    pub fn set_param(
        &self,
        trial_id: i64,
        name: &str,
        internal_value: f64,
        distribution: &Distribution,
    ) -> Result<()> {
        self.write(|tx| {
            let t = writable(tx, trial_id)?;
            insert_param(tx, trial_id, t.number, name, internal_value, distribution)
        })
    }

    /// Record (or overwrite) the intermediate value of `step`; NaN and
    /// infinities are stored with Optuna's NAN/INF_POS/INF_NEG types.
    pub fn report_intermediate(&self, trial_id: i64, step: i64, value: f64) -> Result<()> {
        self.write(|tx| {
            writable(tx, trial_id)?;
            insert_intermediate(tx, trial_id, step, value)
        })
    }

    /// End a trial: COMPLETE needs one value per objective; PRUNED and FAIL
    /// take values optionally (empty slice for none). Infinite values are
    /// stored as INF_POS/INF_NEG; NaN is rejected as Optuna rejects it.
    pub fn finish(&self, trial_id: i64, state: TrialState, values: &[f64]) -> Result<()> {
        self.write(|tx| {
            let t = writable(tx, trial_id)?;
            if !state.is_finished() {
                return Err(StoreError::NotAFinishedState {
                    number: t.number,
                    state: state.to_string(),
                }
                .into());
            }
            let n_obj = load_by_id(tx, t.study_id)?.directions.len();
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
                tx.execute(
                    "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (trial_id, objective) DO UPDATE SET value = excluded.value, value_type = excluded.value_type",
                    vals![trial_id, objective as i64, value, kind],
                )?;
            }
            tx.execute(
                "UPDATE trials SET state = ?1, datetime_complete = ?2 WHERE trial_id = ?3",
                vals![state.as_str(), time::now_local(), trial_id],
            )?;
            Ok(())
        })
    }

    /// Set a trial user attribute (JSON), overwriting the key.
    pub fn set_trial_user_attr(&self, trial_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|tx| {
            writable(tx, trial_id)?;
            set_attr(tx, AttrTable::TrialUser, trial_id, key, value)
        })
    }

    /// Set a trial system attribute (JSON), overwriting the key.
    pub fn set_trial_system_attr(&self, trial_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|tx| {
            writable(tx, trial_id)?;
            set_attr(tx, AttrTable::TrialSystem, trial_id, key, value)
        })
    }

    /// Record that the owner of a trial is alive (UTC, as Optuna's heartbeat).
    pub fn heartbeat(&self, trial_id: i64) -> Result<()> {
        self.write(|tx| {
            writable(tx, trial_id)?;
            beat(tx, trial_id)
        })
    }

    /// The trial's last heartbeat (UTC, `YYYY-MM-DD HH:MM:SS[.ffffff]`), if
    /// its owner ever sent one.
    pub fn last_heartbeat(&self, trial_id: i64) -> Result<Option<String>> {
        self.read(|tx| {
            let row = tx.query_opt(
                "SELECT heartbeat FROM trial_heartbeats WHERE trial_id = ?1",
                vals![trial_id],
            )?;
            Ok(match row {
                Some(r) => r.opt_string(0)?,
                None => None,
            })
        })
    }
}

/// Record a heartbeat now. SQLite gets the client's UTC clock, as Optuna
/// writes it there; PostgreSQL gets the server's clock (`LOCALTIMESTAMP`,
/// what Optuna's `func.now()` stores), so runners on machines whose clocks
/// disagree still judge staleness on one clock.
fn beat(tx: Tx<'_>, trial_id: i64) -> Result<(), TxError> {
    if tx.is_postgres() {
        tx.execute(
            "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES (?1, LOCALTIMESTAMP) \
             ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat",
            vals![trial_id],
        )?;
    } else {
        tx.execute(
            "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES (?1, ?2) \
             ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat",
            vals![trial_id, time::now_utc()],
        )?;
    }
    Ok(())
}

/// The numbers of the study's trials that some trial's `retry_history`
/// names: retried, so their retry stands for them.
pub(crate) fn retried_numbers(
    tx: Tx<'_>,
    study_id: i64,
) -> Result<std::collections::BTreeSet<i64>, TxError> {
    let mut retried = std::collections::BTreeSet::new();
    let histories = tx.query(
        "SELECT a.value_json FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id \
         WHERE t.study_id = ?1 AND a.key = 'retry_history'",
        vals![study_id],
    )?;
    for row in histories {
        // Not a list of numbers: written by someone else; it retries nothing.
        let text = row.opt_string(0)?.unwrap_or_default();
        if let Ok(Json::Array(list)) = serde_json::from_str::<Json>(&text) {
            retried.extend(list.iter().filter_map(Json::as_i64));
        }
    }
    Ok(retried)
}

fn counted(tx: Tx<'_>, study_id: i64) -> Result<usize, TxError> {
    let retried = retried_numbers(tx, study_id)?;
    let failed: Vec<i64> = tx
        .query(
            "SELECT number FROM trials WHERE study_id = ?1 AND state = 'FAIL'",
            vals![study_id],
        )?
        .iter()
        .filter_map(|r| r.opt_i64(0).transpose())
        .collect::<Result<_, _>>()?;
    let total = tx
        .query_one(
            "SELECT count(*) FROM trials WHERE study_id = ?1",
            vals![study_id],
        )?
        .i64(0)?;
    let unowned_running = tx
        .query_one(
            &format!(
                "SELECT count(*) FROM trials t WHERE t.study_id = ?1 AND t.state = 'RUNNING' \
                 AND NOT EXISTS (SELECT 1 FROM trial_system_attributes a \
                 WHERE a.trial_id = t.trial_id AND a.key = '{OWNER_KEY}')"
            ),
            vals![study_id],
        )?
        .i64(0)?;
    let retried_failures = failed.iter().filter(|n| retried.contains(n)).count();
    Ok(total as usize - retried_failures - unowned_running as usize)
}

pub(crate) struct TrialRow {
    pub study_id: i64,
    pub number: i64,
}

/// The trial, if it may still change (RUNNING or WAITING, as in Optuna).
/// On PostgreSQL its row stays locked until the transaction ends, so no
/// other writer finishes it in between (Optuna locks it the same way).
pub(crate) fn writable(tx: Tx<'_>, trial_id: i64) -> Result<TrialRow, TxError> {
    let sql = if tx.is_postgres() {
        "SELECT study_id, number, state FROM trials WHERE trial_id = ?1 FOR UPDATE"
    } else {
        "SELECT study_id, number, state FROM trials WHERE trial_id = ?1"
    };
    let Some(row) = tx.query_opt(sql, vals![trial_id])? else {
        return Err(StoreError::TrialNotFound { trial_id }.into());
    };
    let (study_id, number, state) = (
        row.opt_i64(0)?.unwrap_or(-1),
        row.opt_i64(1)?.unwrap_or(-1),
        row.string(2)?,
    );
    let parsed = TrialState::parse(&state).ok_or_else(|| StoreError::BadRow {
        path: Default::default(),
        table: "trials",
        field: "state",
        row_id: trial_id,
        value: state.clone(),
        of: crate::query::describe_trial(tx, trial_id),
    })?;
    if parsed.is_finished() {
        return Err(StoreError::TrialFinished { number, state }.into());
    }
    Ok(TrialRow { study_id, number })
}

/// Insert a trial numbered by how many the study already has: the caller
/// holds the study's lock, so numbers are unique and dense (Optuna numbers a
/// trial by counting the study's trials with a smaller id, the same thing).
pub(crate) fn insert_trial(
    tx: Tx<'_>,
    study_id: i64,
    state: TrialState,
) -> Result<TrialRef, TxError> {
    let number = tx
        .query_one(
            "SELECT count(*) FROM trials WHERE study_id = ?1",
            vals![study_id],
        )?
        .i64(0)?;
    let start = (state == TrialState::Running).then(time::now_local);
    let trial_id = tx
        .query_one(
            "INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) \
             VALUES (?1, ?2, ?3, ?4, NULL) RETURNING trial_id",
            vals![number, study_id, state.as_str(), start],
        )?
        .i64(0)?;
    Ok(TrialRef { trial_id, number })
}
/// A WAITING trial with everything in `trial`.
pub(crate) fn insert_full(
    tx: Tx<'_>,
    study_id: i64,
    trial: &NewTrial,
) -> Result<TrialRef, TxError> {
    let t = insert_trial(tx, study_id, TrialState::Waiting)?;
    for (name, p) in &trial.params {
        insert_param(tx, t.trial_id, t.number, name, p.internal, &p.distribution)?;
    }
    for (k, v) in &trial.user_attrs {
        set_attr(tx, AttrTable::TrialUser, t.trial_id, k, v)?;
    }
    for (k, v) in &trial.system_attrs {
        set_attr(tx, AttrTable::TrialSystem, t.trial_id, k, v)?;
    }
    for &(step, v) in &trial.intermediate_values {
        insert_intermediate(tx, t.trial_id, step, v)?;
    }
    Ok(t)
}

/// The oldest WAITING trial of the study, now RUNNING. The caller holds the
/// study's lock; the state is re-checked by the UPDATE itself, so a trial
/// that an Optuna client (which locks only the trial's row) took meanwhile
/// is skipped, never claimed twice.
fn claim(tx: Tx<'_>, study_id: i64) -> Result<Option<TrialRef>, TxError> {
    let waiting = tx.query(
        "SELECT trial_id, number FROM trials WHERE study_id = ?1 AND state = 'WAITING' ORDER BY trial_id",
        vals![study_id],
    )?;
    for row in waiting {
        let (trial_id, number) = (row.i64(0)?, row.opt_i64(1)?.unwrap_or(-1));
        let changed = tx.execute(
            "UPDATE trials SET state = 'RUNNING', datetime_start = ?1 WHERE trial_id = ?2 AND state = 'WAITING'",
            vals![time::now_local(), trial_id],
        )?;
        if changed == 1 {
            return Ok(Some(TrialRef { trial_id, number }));
        }
    }
    Ok(None)
}

/// Optuna's schema stores a parameter's name in `VARCHAR(512)`, as it
/// does a study's name and an attribute's key.
pub const MAX_PARAM_NAME_CHARS: usize = 512;

/// A parameter name Optuna's schema can store: at most
/// [`MAX_PARAM_NAME_CHARS`] characters (PostgreSQL enforces the column's
/// length, SQLite does not; both are held to it).
pub fn check_param_name(name: &str) -> Result<(), StoreError> {
    check_name_length("parameter name", name)
}

/// A study name Optuna's schema can store: at most
/// [`MAX_PARAM_NAME_CHARS`] characters, as a parameter name.
pub fn check_study_name(name: &str) -> Result<(), StoreError> {
    check_name_length("study name", name)
}

/// `name`, a `what` (`study name`, `attribute key`...), fits Optuna's
/// `VARCHAR(512)` columns.
pub(crate) fn check_name_length(what: &'static str, name: &str) -> Result<(), StoreError> {
    let chars = name.chars().count();
    if chars > MAX_PARAM_NAME_CHARS {
        let shown: String = name.chars().take(40).collect();
        return Err(StoreError::NameTooLong {
            what,
            name: format!("{}...", shown.escape_debug()),
            chars,
        });
    }
    Ok(())
}

fn insert_param(
    tx: Tx<'_>,
    trial_id: i64,
    number: i64,
    name: &str,
    internal_value: f64,
    distribution: &Distribution,
) -> Result<(), TxError> {
    check_param_name(name)?;
    if !internal_value.is_finite() {
        return Err(StoreError::InvalidValue {
            number,
            what: format!("parameter `{name}`"),
            value: internal_value,
        }
        .into());
    }
    let exists = tx.query_opt(
        "SELECT param_id FROM trial_params WHERE trial_id = ?1 AND param_name = ?2",
        vals![trial_id, name],
    )?;
    if exists.is_some() {
        return Err(StoreError::ParamExists {
            number,
            name: name.to_string(),
        }
        .into());
    }
    tx.execute(
        "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES (?1, ?2, ?3, ?4)",
        vals![
            trial_id,
            name,
            internal_value,
            distribution_to_json(distribution)
        ],
    )?;
    Ok(())
}

fn insert_intermediate(tx: Tx<'_>, trial_id: i64, step: i64, v: f64) -> Result<(), TxError> {
    let (value, kind) = encode_float(v);
    tx.execute(
        "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (trial_id, step) DO UPDATE SET \
         intermediate_value = excluded.intermediate_value, intermediate_value_type = excluded.intermediate_value_type",
        vals![trial_id, step, value, kind],
    )?;
    Ok(())
}

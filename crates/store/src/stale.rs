//! Failing trials whose owner stopped beating, and re-enqueuing them, as
//! Optuna's `fail_stale_trials` and `RetryFailedTrialCallback` do.

use crate::attrs::{AttrTable, set_attr, set_attr_text, stored_attrs};
use crate::db::{Tx, Value, vals};
use crate::error::{Result, StoreError};
use crate::model::{TrialRef, TrialState};
use crate::query::load_trials;
use crate::storage::{Storage, TxError};
use crate::study::lock_study;
use crate::time;
use crate::trial::{NewTrial, insert_full};
use serde_json::Value as Json;
use std::time::Duration;

/// What to do with a trial after it is failed for a stale heartbeat.
#[derive(Clone, Debug, Default)]
pub struct RetryPolicy {
    /// Re-enqueue at most this many times per original trial (`None`: always).
    pub max_retry: Option<usize>,
    /// Copy the failed trial's intermediate values into the retry.
    pub inherit_intermediate_values: bool,
}

/// One trial moved to FAIL, and the WAITING copy enqueued for it, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleTrial {
    /// The trial now in FAIL.
    pub failed: TrialRef,
    /// Its WAITING copy (same parameters), or `None` when no retry policy
    /// was given or the policy's `max_retry` is spent.
    pub retry: Option<TrialRef>,
    /// The trial had already been failed by another client (Optuna's own
    /// stale check fails trials without retrying them); only its retry is
    /// new.
    pub adopted: bool,
}

/// The system attribute that names a claimed trial's owner (see
/// [`Owner`]).
pub const OWNER_KEY: &str = "memtune:owner";

/// The process that claimed a trial (with
/// [`Storage::claim_or_create_within`]) and beats for it, and how late its
/// heartbeat may be before another process takes the trial over. It is
/// stored with the trial (system attribute [`OWNER_KEY`]), so every
/// process judges a trial by its own owner's promise, and trials that no
/// owner claimed (Optuna clients', `ask`'s) are told apart.
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    /// Unique among the study's processes, e.g. host, pid and start time.
    pub id: String,
    /// A heartbeat older than this means the owner is gone.
    pub stale_after: Duration,
}

impl Owner {
    pub(crate) fn to_json(&self) -> Json {
        serde_json::json!({"id": self.id, "stale_after": self.stale_after.as_secs_f64()})
    }

    /// The owner a stored attribute names, if it reads.
    pub(crate) fn from_json(value: &str) -> Option<Owner> {
        let v: Json = serde_json::from_str(value).ok()?;
        Some(Owner {
            id: v.get("id")?.as_str()?.to_string(),
            stale_after: Duration::try_from_secs_f64(v.get("stale_after")?.as_f64()?).ok()?,
        })
    }
}

impl Storage {
    /// Move every RUNNING trial of the study whose last heartbeat is older
    /// than `grace` to FAIL (trials that never beat are left alone, as in
    /// Optuna). With `retry`, enqueue a WAITING copy of each (same params,
    /// user attrs, system attrs plus `failed_trial` = the first failed
    /// number and `retry_history` = every failed number). One transaction:
    /// when several workers call this at once, each stale trial is failed
    /// and retried exactly once.
    pub fn fail_stale_trials(
        &self,
        study_id: i64,
        grace: Duration,
        retry: Option<&RetryPolicy>,
    ) -> Result<Vec<StaleTrial>> {
        self.fail_stale_trials_marked(study_id, grace, retry, &[])
    }

    /// [`Storage::fail_stale_trials`], also setting `user_attrs` on each
    /// failed trial in the same transaction (a finished trial's attributes
    /// cannot change later, so a label such as `error_kind` must be set
    /// here or never).
    pub fn fail_stale_trials_marked(
        &self,
        study_id: i64,
        grace: Duration,
        retry: Option<&RetryPolicy>,
        user_attrs: &[(&str, Json)],
    ) -> Result<Vec<StaleTrial>> {
        // A heartbeat is stale by the clock that wrote it: the client's
        // UTC on SQLite, the server's on PostgreSQL (see `trial::beat`).
        let (cond, arg) = if self.is_postgres() {
            (
                "h.heartbeat < LOCALTIMESTAMP - make_interval(secs => ?2)",
                Value::Real(grace.as_secs_f64()),
            )
        } else {
            ("h.heartbeat < ?2", Value::Text(time::utc_before_now(grace)))
        };
        self.fail_selected(
            study_id,
            &format!(
                "SELECT t.trial_id FROM trials t JOIN trial_heartbeats h ON h.trial_id = t.trial_id \
                 WHERE t.study_id = ?1 AND t.state = 'RUNNING' AND {cond} ORDER BY t.trial_id"
            ),
            Some(arg),
            retry,
            user_attrs,
        )
    }

    /// Take over the trials of owners that are gone, as `judge`: move to
    /// FAIL every RUNNING trial claimed by another owner whose heartbeat
    /// is older than that owner's `stale_after`, setting `user_attrs`, and
    /// retry each as [`Storage::fail_stale_trials`] does. Trials that no
    /// owner claimed (Optuna clients' and `ask`'s) are left to their
    /// clients, and the judge's own trials are alive by definition.
    ///
    /// Also adopts owned trials that another client already failed for a
    /// stale heartbeat without retrying them (Optuna's `fail_stale_trials`
    /// run by an Optuna client beside us): FAIL with no `error_kind`, not
    /// yet retried; they get `user_attrs` and their retry.
    ///
    /// Judging needs a storage that answered throughout: within the
    /// judge's `stale_after` after this connection came back from an
    /// outage, nothing is judged (the owners' heartbeats were cut off too,
    /// and they need that long to beat again).
    pub fn fail_abandoned_trials(
        &self,
        study_id: i64,
        judge: &Owner,
        retry: Option<&RetryPolicy>,
        user_attrs: &[(&str, Json)],
    ) -> Result<Vec<StaleTrial>> {
        let now_sql = if self.is_postgres() {
            "LOCALTIMESTAMP"
        } else {
            "?2"
        };
        let select = format!(
            "SELECT t.trial_id, a.value_json, h.heartbeat, {now_sql}, t.number FROM trials t \
             JOIN trial_heartbeats h ON h.trial_id = t.trial_id \
             JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = '{OWNER_KEY}' \
             WHERE t.study_id = ?1 AND t.state = 'RUNNING' ORDER BY t.trial_id"
        );
        self.write(|tx| {
            if self
                .recovered_at()
                .is_some_and(|at| at.elapsed() < judge.stale_after)
            {
                return Ok(Vec::new());
            }
            lock_study(tx, study_id)?;
            let params = if tx.is_postgres() {
                vec![Value::Int(study_id)]
            } else {
                vec![Value::Int(study_id), Value::Text(time::now_utc())]
            };
            let mut abandoned = Vec::new();
            for row in tx.query(&select, &params)? {
                let trial_id = row.i64(0)?;
                let owner = row.opt_string(1)?.as_deref().and_then(Owner::from_json);
                let age = match (row.opt_string(2)?, row.opt_string(3)?) {
                    (Some(beat), Some(now)) => {
                        let age = time::seconds_between(&beat, &now);
                        if age.is_none() {
                            // Left alone, as a trial that never beat is: a
                            // time no clock wrote tells nothing of its owner.
                            tracing::warn!(
                                storage = %self.path.display(),
                                "trial {} (trial_id {trial_id}): heartbeat `{}` is not a time; \
                                 judged as never having beaten",
                                row.opt_i64(4)?.unwrap_or(-1),
                                beat.escape_debug()
                            );
                        }
                        age
                    }
                    _ => None,
                };
                let (Some(owner), Some(age)) = (owner, age) else {
                    continue;
                };
                if owner.id != judge.id && age > owner.stale_after.as_secs_f64() {
                    abandoned.push(trial_id);
                }
            }
            let mut out = fail_ids(tx, study_id, &abandoned, retry, user_attrs)?;
            // Failed just now without a label or a retry, a trial looks
            // like one an Optuna client failed; it is reported once.
            let adoptable = orphans(tx, study_id)?
                .into_iter()
                .filter(|id| !abandoned.contains(id));
            for trial_id in adoptable {
                for (key, value) in user_attrs {
                    set_attr(tx, AttrTable::TrialUser, trial_id, key, value)?;
                }
                let Some(t) = Failed::load(tx, trial_id)? else {
                    continue;
                };
                let retry = match retry {
                    Some(policy) => retry_copy(tx, study_id, &t, policy)?,
                    None => None,
                };
                out.push(StaleTrial {
                    failed: t.trial_ref(),
                    retry,
                    adopted: true,
                });
            }
            Ok(out)
        })
    }

    /// Move every RUNNING trial of the study to FAIL, heartbeat or not,
    /// setting `user_attrs` on each, and retry as
    /// [`Storage::fail_stale_trials`] does. For a caller that knows every
    /// process that ran the study's trials is dead (a runner resuming after
    /// its predecessor was killed): a trial created just before the kill may
    /// not have beaten yet, and would otherwise stay RUNNING forever.
    pub fn fail_running_trials(
        &self,
        study_id: i64,
        retry: Option<&RetryPolicy>,
        user_attrs: &[(&str, Json)],
    ) -> Result<Vec<StaleTrial>> {
        self.fail_selected(
            study_id,
            "SELECT t.trial_id FROM trials t \
             WHERE t.study_id = ?1 AND t.state = 'RUNNING' ORDER BY t.trial_id",
            None,
            retry,
            user_attrs,
        )
    }

    /// Move one RUNNING trial to FAIL with `user_attrs` and retry it as
    /// [`Storage::fail_stale_trials`] does, in one transaction: for an owner
    /// that gives a trial up itself (interrupted, or never started). `None`
    /// when the trial is no longer RUNNING.
    pub fn fail_trial_and_retry(
        &self,
        trial: TrialRef,
        retry: &RetryPolicy,
        user_attrs: &[(&str, Json)],
    ) -> Result<Option<StaleTrial>> {
        let study_id = self.read(|tx| {
            let row = tx.query_opt(
                "SELECT study_id FROM trials WHERE trial_id = ?1",
                vals![trial.trial_id],
            )?;
            let row = row.ok_or(StoreError::TrialNotFound {
                trial_id: trial.trial_id,
            })?;
            Ok(row.opt_i64(0)?.unwrap_or(-1))
        })?;
        Ok(self
            .fail_selected(
                study_id,
                "SELECT t.trial_id FROM trials t \
                 WHERE t.study_id = ?1 AND t.state = 'RUNNING' AND t.trial_id = ?2",
                Some(Value::Int(trial.trial_id)),
                Some(retry),
                user_attrs,
            )?
            .pop())
    }

    /// Fails the trials `select` (parameters: study id, then `arg` if any)
    /// returns. Each is moved to FAIL only if it is still RUNNING (an Optuna
    /// client may have finished it since), so it is retried at most once.
    fn fail_selected(
        &self,
        study_id: i64,
        select: &str,
        arg: Option<Value>,
        retry: Option<&RetryPolicy>,
        user_attrs: &[(&str, Json)],
    ) -> Result<Vec<StaleTrial>> {
        let mut params = vec![Value::Int(study_id)];
        params.extend(arg);
        self.write(|tx| {
            lock_study(tx, study_id)?;
            let stale: Vec<i64> = tx
                .query(select, &params)?
                .iter()
                .map(|r| r.i64(0))
                .collect::<Result<_, _>>()?;
            fail_ids(tx, study_id, &stale, retry, user_attrs)
        })
    }
}

/// Fail the trials `ids` that are still RUNNING (an Optuna client may have
/// finished one since), with `user_attrs`, and retry each per `retry`.
/// The caller holds the study's lock.
fn fail_ids(
    tx: Tx<'_>,
    study_id: i64,
    ids: &[i64],
    retry: Option<&RetryPolicy>,
    user_attrs: &[(&str, Json)],
) -> Result<Vec<StaleTrial>, TxError> {
    let mut out = Vec::with_capacity(ids.len());
    for &trial_id in ids {
        let Some(t) = Failed::load(tx, trial_id)? else {
            continue;
        };
        let changed = tx.execute(
            "UPDATE trials SET state = ?1, datetime_complete = ?2 WHERE trial_id = ?3 AND state = 'RUNNING'",
            vals![TrialState::Fail.as_str(), time::now_local(), trial_id],
        )?;
        if changed == 0 {
            continue;
        }
        for (key, value) in user_attrs {
            set_attr(tx, AttrTable::TrialUser, trial_id, key, value)?;
        }
        let retry = match retry {
            Some(policy) => retry_copy(tx, study_id, &t, policy)?,
            None => None,
        };
        out.push(StaleTrial {
            failed: t.trial_ref(),
            retry,
            adopted: false,
        });
    }
    Ok(out)
}

/// Owned FAIL trials that someone else failed without saying why (no
/// `error_kind`; Optuna's stale check) and that nothing retries yet.
fn orphans(tx: Tx<'_>, study_id: i64) -> Result<Vec<i64>, TxError> {
    let retried = crate::trial::retried_numbers(tx, study_id)?;
    let rows = tx.query(
        &format!(
            "SELECT t.trial_id, t.number FROM trials t \
             JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = '{OWNER_KEY}' \
             WHERE t.study_id = ?1 AND t.state = 'FAIL' AND NOT EXISTS \
             (SELECT 1 FROM trial_user_attributes u WHERE u.trial_id = t.trial_id AND u.key = 'error_kind') \
             ORDER BY t.trial_id"
        ),
        vals![study_id],
    )?;
    let mut out = Vec::new();
    for row in rows {
        if !retried.contains(&row.opt_i64(1)?.unwrap_or(-1)) {
            out.push(row.i64(0)?);
        }
    }
    Ok(out)
}

/// A trial being failed, as it was before anything marked it: read, and
/// its attributes as stored, for its retry to copy as they stand.
struct Failed {
    trial: crate::FrozenTrial,
    user_attrs: Vec<(String, String)>,
    system_attrs: Vec<(String, String)>,
}

impl Failed {
    fn load(tx: Tx<'_>, trial_id: i64) -> Result<Option<Failed>, TxError> {
        let Some(trial) = load_trials(tx, "t.trial_id = ?1", trial_id)?.pop() else {
            return Ok(None);
        };
        Ok(Some(Failed {
            trial,
            user_attrs: stored_attrs(tx, AttrTable::TrialUser, trial_id)?,
            system_attrs: stored_attrs(tx, AttrTable::TrialSystem, trial_id)?,
        }))
    }

    fn trial_ref(&self) -> TrialRef {
        TrialRef {
            trial_id: self.trial.trial_id,
            number: self.trial.number as i64,
        }
    }
}

/// The system attributes a retry writes afresh rather than copies.
const RETRY_OWN_KEYS: [&str; 2] = [OWNER_KEY, "retry_history"];

fn retry_copy(
    tx: Tx<'_>,
    study_id: i64,
    failed: &Failed,
    policy: &RetryPolicy,
) -> Result<Option<TrialRef>, TxError> {
    let t = &failed.trial;
    // Exactly Optuna's dict merge: defaults first, the trial's own attrs
    // win. The copy is claimed afresh, by whoever takes it (no owner).
    let mut system = Vec::new();
    if !t.system_attrs.contains_key("failed_trial") {
        system.push(("failed_trial".to_string(), Json::from(t.number)));
    }
    let mut history = match t.system_attrs.get("retry_history") {
        Some(Json::Array(list)) => list.clone(),
        _ => Vec::new(),
    };
    history.push(Json::from(t.number));
    let retries = history.len();
    system.push(("retry_history".to_string(), Json::Array(history)));
    if let Some(max) = policy.max_retry
        && max < retries
    {
        return Ok(None);
    }
    let copy = NewTrial {
        params: t.params.clone().into_iter().collect(),
        user_attrs: Vec::new(),
        system_attrs: system,
        intermediate_values: if policy.inherit_intermediate_values {
            t.intermediate_values
                .iter()
                .map(|(&s, &v)| (s, v))
                .collect()
        } else {
            Vec::new()
        },
    };
    let retry = insert_full(tx, study_id, &copy)?;
    // The stored text, not the values read from it: those hold Python's
    // non-finite floats as strings, which would be written back quoted.
    for (key, json) in &failed.user_attrs {
        set_attr_text(tx, AttrTable::TrialUser, retry.trial_id, key, json)?;
    }
    for (key, json) in &failed.system_attrs {
        if !RETRY_OWN_KEYS.contains(&key.as_str()) {
            set_attr_text(tx, AttrTable::TrialSystem, retry.trial_id, key, json)?;
        }
    }
    Ok(Some(retry))
}

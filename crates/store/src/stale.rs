//! Failing trials whose owner stopped beating, and re-enqueuing them, as
//! Optuna's `fail_stale_trials` and `RetryFailedTrialCallback` do.

use crate::attrs::{AttrTable, set_attr};
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
    pub failed: TrialRef,
    pub retry: Option<TrialRef>,
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
            let mut out = Vec::with_capacity(stale.len());
            for trial_id in stale {
                let Some(t) = load_trials(tx, "t.trial_id = ?1", trial_id)?.pop() else {
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
                    failed: TrialRef {
                        trial_id: t.trial_id,
                        number: t.number as i64,
                    },
                    retry,
                });
            }
            Ok(out)
        })
    }
}

fn retry_copy(
    tx: Tx<'_>,
    study_id: i64,
    t: &crate::FrozenTrial,
    policy: &RetryPolicy,
) -> Result<Option<TrialRef>, TxError> {
    // Exactly Optuna's dict merge: defaults first, the trial's own attrs win.
    let mut system = t.system_attrs.clone();
    system
        .entry("failed_trial".to_string())
        .or_insert(Json::from(t.number));
    let mut history = match system.get("retry_history") {
        Some(Json::Array(list)) => list.clone(),
        _ => Vec::new(),
    };
    history.push(Json::from(t.number));
    let retries = history.len();
    system.insert("retry_history".to_string(), Json::Array(history));
    if let Some(max) = policy.max_retry
        && max < retries
    {
        return Ok(None);
    }
    let copy = NewTrial {
        params: t.params.clone().into_iter().collect(),
        user_attrs: t.user_attrs.clone().into_iter().collect(),
        system_attrs: system.into_iter().collect(),
        intermediate_values: if policy.inherit_intermediate_values {
            t.intermediate_values
                .iter()
                .map(|(&s, &v)| (s, v))
                .collect()
        } else {
            Vec::new()
        },
    };
    Ok(Some(insert_full(tx, study_id, &copy)?))
}

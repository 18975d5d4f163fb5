//! Failing trials whose owner stopped beating, and re-enqueuing them, as
//! Optuna's `fail_stale_trials` and `RetryFailedTrialCallback` do.

use crate::attrs::{AttrTable, set_attr};
use crate::error::Result;
use crate::model::{TrialRef, TrialState};
use crate::query::load_trials;
use crate::storage::Storage;
use crate::study::load_by_id;
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
        let cutoff = time::utc_before_now(grace);
        self.fail_selected(
            study_id,
            "SELECT t.trial_id FROM trials t JOIN trial_heartbeats h ON h.trial_id = t.trial_id \
             WHERE t.study_id = ?1 AND t.state = 'RUNNING' AND h.heartbeat < ?2 ORDER BY t.trial_id",
            &cutoff,
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
             WHERE t.study_id = ?1 AND t.state = 'RUNNING' AND ?2 = ?2 ORDER BY t.trial_id",
            "",
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
        let study_id = self.trial(trial.trial_id)?.study_id;
        Ok(self
            .fail_selected(
                study_id,
                "SELECT t.trial_id FROM trials t \
                 WHERE t.study_id = ?1 AND t.state = 'RUNNING' AND t.trial_id = CAST(?2 AS INTEGER)",
                &trial.trial_id.to_string(),
                Some(retry),
                user_attrs,
            )?
            .pop())
    }

    /// Fails the trials `select` (parameters: study id, `arg`) returns.
    fn fail_selected(
        &self,
        study_id: i64,
        select: &str,
        arg: &str,
        retry: Option<&RetryPolicy>,
        user_attrs: &[(&str, Json)],
    ) -> Result<Vec<StaleTrial>> {
        self.write(|conn| {
            load_by_id(conn, study_id)?;
            let stale: Vec<i64> = conn
                .prepare_cached(select)?
                .query_map(rusqlite::params![study_id, arg], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let mut out = Vec::with_capacity(stale.len());
            for trial_id in stale {
                let Some(t) = load_trials(conn, "t.trial_id = ?1", trial_id)?.pop() else {
                    continue;
                };
                for (key, value) in user_attrs {
                    set_attr(conn, AttrTable::TrialUser, trial_id, key, value)?;
                }
                conn.prepare_cached(
                    "UPDATE trials SET state = ?1, datetime_complete = ?2 WHERE trial_id = ?3 AND state = 'RUNNING'",
                )?
                .execute(rusqlite::params![TrialState::Fail.as_str(), time::now_local(), trial_id])?;
                let retry = match retry {
                    Some(policy) => retry_copy(conn, study_id, &t, policy)?,
                    None => None,
                };
                out.push(StaleTrial {
                    failed: t.trial_ref(),
                    retry,
                });
            }
            Ok(out)
        })
    }
}

fn retry_copy(
    conn: &rusqlite::Connection,
    study_id: i64,
    t: &crate::FrozenTrial,
    policy: &RetryPolicy,
) -> Result<Option<TrialRef>, crate::storage::TxError> {
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
        params: t.params.clone(),
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
    Ok(Some(insert_full(conn, study_id, &copy)?))
}

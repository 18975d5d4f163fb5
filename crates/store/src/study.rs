//! Studies: create, load, list, and study-level attributes.

use crate::attrs::{AttrTable, set_attr};
use crate::db::{Tx, vals};
use crate::error::{Result, StoreError};
use crate::model::{Study, StudyDirection, StudySummary, TrialState};
use crate::query::load_attrs;
use crate::storage::{Storage, TxError};
use serde_json::Value as Json;
use std::collections::BTreeMap;

impl Storage {
    /// Create a new study; `StudyExists` if the name is taken.
    pub fn create_study(&self, name: &str, directions: &[StudyDirection]) -> Result<Study> {
        check_directions(name, directions)?;
        self.write(|tx| {
            if find_id(tx, name)?.is_some() {
                return Err(StoreError::StudyExists {
                    name: name.to_string(),
                }
                .into());
            }
            insert_study(tx, name, directions)
        })
    }

    /// Load the study `name`, creating it with `directions` if it does not
    /// exist (Optuna's `load_if_exists=True`). An existing study with other
    /// directions is `DirectionMismatch`. Safe when many workers race.
    pub fn create_or_load_study(&self, name: &str, directions: &[StudyDirection]) -> Result<Study> {
        check_directions(name, directions)?;
        self.write(|tx| match find_id(tx, name)? {
            Some(id) => {
                let study = load_by_id(tx, id)?;
                if study.directions != directions {
                    return Err(StoreError::DirectionMismatch {
                        name: name.to_string(),
                        stored: study.directions.iter().map(|d| d.to_string()).collect(),
                        requested: directions.iter().map(|d| d.to_string()).collect(),
                    }
                    .into());
                }
                Ok(study)
            }
            None => insert_study(tx, name, directions),
        })
    }

    /// The study called `name`, or `StudyNotFound`.
    pub fn study(&self, name: &str) -> Result<Study> {
        self.read(|tx| match find_id(tx, name)? {
            Some(id) => load_by_id(tx, id),
            None => Err(StoreError::StudyNotFound {
                name: name.to_string(),
            }
            .into()),
        })
    }

    /// The study with this id, or `StudyIdNotFound`.
    pub fn study_by_id(&self, study_id: i64) -> Result<Study> {
        self.read(|tx| load_by_id(tx, study_id))
    }

    /// Every study in the file with its trial counts, ordered by id, read
    /// together; one study that cannot be read fails the whole list (see
    /// [`Storage::study_names`] and [`Storage::study_summary`] to read each
    /// study on its own).
    pub fn studies(&self) -> Result<Vec<StudySummary>> {
        self.read(|tx| {
            let ids = study_ids_and_names(tx)?;
            ids.into_iter()
                .map(|(id, _)| load_summary(tx, id))
                .collect()
        })
    }

    /// Every study's id and name, ordered by id: the rows a list needs,
    /// readable even where a study's directions, trials or attributes are
    /// not.
    pub fn study_names(&self) -> Result<Vec<(i64, String)>> {
        self.read(study_ids_and_names)
    }

    /// One study with its trial counts and user attributes, or
    /// `StudyIdNotFound`.
    pub fn study_summary(&self, study_id: i64) -> Result<StudySummary> {
        self.read(|tx| load_summary(tx, study_id))
    }

    /// Set a study user attribute (stored as JSON, overwriting the key).
    pub fn set_study_user_attr(&self, study_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|tx| {
            load_by_id(tx, study_id)?;
            set_attr(tx, AttrTable::StudyUser, study_id, key, value)
        })
    }

    /// Set a study system attribute (stored as JSON, overwriting the key).
    pub fn set_study_system_attr(&self, study_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|tx| {
            load_by_id(tx, study_id)?;
            set_attr(tx, AttrTable::StudySystem, study_id, key, value)
        })
    }

    /// The study's user attributes.
    pub fn study_user_attrs(&self, study_id: i64) -> Result<BTreeMap<String, Json>> {
        self.read(|tx| load_attrs(tx, AttrTable::StudyUser, study_id))
    }

    /// The study's system attributes.
    pub fn study_system_attrs(&self, study_id: i64) -> Result<BTreeMap<String, Json>> {
        self.read(|tx| load_attrs(tx, AttrTable::StudySystem, study_id))
    }
}

fn study_ids_and_names(tx: Tx<'_>) -> Result<Vec<(i64, String)>, TxError> {
    Ok(tx
        .query(
            "SELECT study_id, study_name FROM studies ORDER BY study_id",
            &[],
        )?
        .iter()
        .map(|r| Ok((r.i64(0)?, r.string(1)?)))
        .collect::<Result<_, crate::db::DbError>>()?)
}

fn load_summary(tx: Tx<'_>, study_id: i64) -> Result<StudySummary, TxError> {
    let study = load_by_id(tx, study_id)?;
    let mut counts = BTreeMap::new();
    let mut n_trials = 0;
    for (state, n) in state_counts(tx, study_id)? {
        let st = TrialState::parse(&state).ok_or(StoreError::BadTrialState {
            study: study.name.clone(),
            state: state.clone(),
        })?;
        counts.insert(st, n as usize);
        n_trials += n as usize;
    }
    let user_attrs = load_attrs(tx, AttrTable::StudyUser, study_id)?;
    Ok(StudySummary {
        study,
        n_trials,
        counts,
        user_attrs,
    })
}

fn check_directions(name: &str, directions: &[StudyDirection]) -> Result<()> {
    if directions.is_empty() {
        return Err(StoreError::NoDirections {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// `(state, count)` of the study's trials, one row per state present.
pub(crate) fn state_counts(tx: Tx<'_>, study_id: i64) -> Result<Vec<(String, i64)>, TxError> {
    Ok(tx
        .query(
            "SELECT state, count(*) FROM trials WHERE study_id = ?1 GROUP BY state",
            vals![study_id],
        )?
        .iter()
        .map(|r| Ok((r.string(0)?, r.i64(1)?)))
        .collect::<Result<_, crate::db::DbError>>()?)
}

fn find_id(tx: Tx<'_>, name: &str) -> Result<Option<i64>, TxError> {
    match tx.query_opt(
        "SELECT study_id FROM studies WHERE study_name = ?1",
        vals![name],
    )? {
        Some(r) => Ok(Some(r.i64(0)?)),
        None => Ok(None),
    }
}

fn insert_study(tx: Tx<'_>, name: &str, directions: &[StudyDirection]) -> Result<Study, TxError> {
    crate::trial::check_study_name(name)?;
    let study_id = tx
        .query_one(
            "INSERT INTO studies (study_name) VALUES (?1) RETURNING study_id",
            vals![name],
        )?
        .i64(0)?;
    for (objective, d) in directions.iter().enumerate() {
        tx.execute(
            "INSERT INTO study_directions (direction, study_id, objective) VALUES (?1, ?2, ?3)",
            vals![d.as_str(), study_id, objective as i64],
        )?;
    }
    Ok(Study {
        study_id,
        name: name.to_string(),
        directions: directions.to_vec(),
    })
}

/// Lock the study's row until the transaction ends, as Optuna does before
/// numbering a new trial: on PostgreSQL every writer that numbers, claims,
/// counts or fails a study's trials (ours and Optuna's) waits here in turn.
/// SQLite's `BEGIN IMMEDIATE` already holds the whole file.
pub(crate) fn lock_study(tx: Tx<'_>, study_id: i64) -> Result<Study, TxError> {
    if tx.is_postgres()
        && tx
            .query_opt(
                "SELECT study_id FROM studies WHERE study_id = ?1 FOR UPDATE",
                vals![study_id],
            )?
            .is_none()
    {
        return Err(StoreError::StudyIdNotFound { study_id }.into());
    }
    load_by_id(tx, study_id)
}

pub(crate) fn load_by_id(tx: Tx<'_>, study_id: i64) -> Result<Study, TxError> {
    let name = tx
        .query_opt(
            "SELECT study_name FROM studies WHERE study_id = ?1",
            vals![study_id],
        )?
        .map(|r| r.string(0))
        .transpose()?;
    let Some(name) = name else {
        return Err(StoreError::StudyIdNotFound { study_id }.into());
    };
    let rows = tx.query(
        "SELECT study_direction_id, direction, objective FROM study_directions WHERE study_id = ?1 ORDER BY objective",
        vals![study_id],
    )?;
    let objectives = rows
        .iter()
        .map(|r| r.i64(2))
        .collect::<Result<Vec<i64>, _>>()?;
    if objectives.is_empty() || objectives.iter().zip(0..).any(|(o, i)| *o != i) {
        return Err(StoreError::BadDirections { name, objectives }.into());
    }
    let mut directions = Vec::with_capacity(rows.len());
    for r in rows {
        let (row_id, d) = (r.i64(0)?, r.string(1)?);
        directions.push(StudyDirection::parse(&d).ok_or_else(|| StoreError::BadRow {
            path: Default::default(),
            table: "study_directions",
            field: "direction",
            row_id,
            value: d.clone(),
            of: format!("study `{}`", name.escape_debug()),
        })?);
    }
    Ok(Study {
        study_id,
        name,
        directions,
    })
}

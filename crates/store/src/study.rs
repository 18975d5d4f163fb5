//! Studies: create, load, list, and study-level attributes.

use crate::attrs::{AttrTable, set_attr};
use crate::error::{Result, StoreError};
use crate::model::{Study, StudyDirection, StudySummary, TrialState};
use crate::query::load_attrs;
use crate::storage::{Storage, TxError};
use rusqlite::{Connection, OptionalExtension};
use serde_json::Value as Json;
use std::collections::BTreeMap;

impl Storage {
    /// Create a new study; `StudyExists` if the name is taken.
    pub fn create_study(&self, name: &str, directions: &[StudyDirection]) -> Result<Study> {
        check_directions(name, directions)?;
        self.write(|conn| {
            if find_id(conn, name)?.is_some() {
                return Err(StoreError::StudyExists {
                    name: name.to_string(),
                }
                .into());
            }
            insert_study(conn, name, directions)
        })
    }

    /// Load the study `name`, creating it with `directions` if it does not
    /// exist (Optuna's `load_if_exists=True`). An existing study with other
    /// directions is `DirectionMismatch`. Safe when many workers race.
    pub fn create_or_load_study(&self, name: &str, directions: &[StudyDirection]) -> Result<Study> {
        check_directions(name, directions)?;
        self.write(|conn| match find_id(conn, name)? {
            Some(id) => {
                let study = load_by_id(conn, id)?;
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
            None => insert_study(conn, name, directions),
        })
    }

    /// The study called `name`, or `StudyNotFound`.
    pub fn study(&self, name: &str) -> Result<Study> {
        self.read(|conn| match find_id(conn, name)? {
            Some(id) => load_by_id(conn, id),
            None => Err(StoreError::StudyNotFound {
                name: name.to_string(),
            }
            .into()),
        })
    }

    /// The study with this id, or `StudyIdNotFound`.
    pub fn study_by_id(&self, study_id: i64) -> Result<Study> {
        self.read(|conn| load_by_id(conn, study_id))
    }

    /// Every study in the file with its trial counts, ordered by id.
    pub fn studies(&self) -> Result<Vec<StudySummary>> {
        self.read(|conn| {
            let ids: Vec<i64> = {
                let mut stmt = conn.prepare("SELECT study_id FROM studies ORDER BY study_id")?;
                stmt.query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?
            };
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let study = load_by_id(conn, id)?;
                let mut counts = BTreeMap::new();
                let mut stmt = conn.prepare_cached(
                    "SELECT state, count(*) FROM trials WHERE study_id = ?1 GROUP BY state",
                )?;
                let rows: Vec<(String, i64)> = stmt
                    .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                let mut n_trials = 0;
                for (state, n) in rows {
                    let st = TrialState::parse(&state).ok_or(StoreError::BadRow {
                        table: "trials",
                        field: "state",
                        row_id: id,
                        value: state.clone(),
                    })?;
                    counts.insert(st, n as usize);
                    n_trials += n as usize;
                }
                let user_attrs = load_attrs(conn, AttrTable::StudyUser, id)?;
                out.push(StudySummary {
                    study,
                    n_trials,
                    counts,
                    user_attrs,
                });
            }
            Ok(out)
        })
    }

    /// Set a study user attribute (stored as JSON, overwriting the key).
    pub fn set_study_user_attr(&self, study_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|conn| {
            load_by_id(conn, study_id)?;
            set_attr(conn, AttrTable::StudyUser, study_id, key, value)
        })
    }

    /// Set a study system attribute (stored as JSON, overwriting the key).
    pub fn set_study_system_attr(&self, study_id: i64, key: &str, value: &Json) -> Result<()> {
        self.write(|conn| {
            load_by_id(conn, study_id)?;
            set_attr(conn, AttrTable::StudySystem, study_id, key, value)
        })
    }

    /// The study's user attributes.
    pub fn study_user_attrs(&self, study_id: i64) -> Result<BTreeMap<String, Json>> {
        self.read(|conn| load_attrs(conn, AttrTable::StudyUser, study_id))
    }

    /// The study's system attributes.
    pub fn study_system_attrs(&self, study_id: i64) -> Result<BTreeMap<String, Json>> {
        self.read(|conn| load_attrs(conn, AttrTable::StudySystem, study_id))
    }
}

fn check_directions(name: &str, directions: &[StudyDirection]) -> Result<()> {
    if directions.is_empty() {
        return Err(StoreError::NoDirections {
            name: name.to_string(),
        });
    }
    Ok(())
}

fn find_id(conn: &Connection, name: &str) -> Result<Option<i64>, TxError> {
    Ok(conn
        .prepare_cached("SELECT study_id FROM studies WHERE study_name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?)
}

fn insert_study(
    conn: &Connection,
    name: &str,
    directions: &[StudyDirection],
) -> Result<Study, TxError> {
    conn.execute("INSERT INTO studies (study_name) VALUES (?1)", [name])?;
    let study_id = conn.last_insert_rowid();
    for (objective, d) in directions.iter().enumerate() {
        conn.execute(
            "INSERT INTO study_directions (direction, study_id, objective) VALUES (?1, ?2, ?3)",
            rusqlite::params![d.as_str(), study_id, objective as i64],
        )?;
    }
    Ok(Study {
        study_id,
        name: name.to_string(),
        directions: directions.to_vec(),
    })
}

pub(crate) fn load_by_id(conn: &Connection, study_id: i64) -> Result<Study, TxError> {
    let name: Option<String> = conn
        .prepare_cached("SELECT study_name FROM studies WHERE study_id = ?1")?
        .query_row([study_id], |r| r.get(0))
        .optional()?;
    let Some(name) = name else {
        return Err(StoreError::StudyIdNotFound { study_id }.into());
    };
    let mut stmt = conn.prepare_cached(
        "SELECT study_direction_id, direction FROM study_directions WHERE study_id = ?1 ORDER BY objective",
    )?;
    let rows: Vec<(i64, String)> = stmt
        .query_map([study_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut directions = Vec::with_capacity(rows.len());
    for (row_id, d) in rows {
        directions.push(StudyDirection::parse(&d).ok_or(StoreError::BadRow {
            table: "study_directions",
            field: "direction",
            row_id,
            value: d.clone(),
        })?);
    }
    Ok(Study {
        study_id,
        name,
        directions,
    })
}

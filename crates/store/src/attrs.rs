//! User and system attributes: JSON values keyed by name, four tables alike.

use crate::db::{Tx, vals};
use crate::error::StoreError;
use crate::storage::TxError;
use serde_json::Value as Json;

#[derive(Clone, Copy, Debug)]
pub(crate) enum AttrTable {
    StudyUser,
    StudySystem,
    TrialUser,
    TrialSystem,
}

impl AttrTable {
    pub(crate) fn table(self) -> &'static str {
        match self {
            AttrTable::StudyUser => "study_user_attributes",
            AttrTable::StudySystem => "study_system_attributes",
            AttrTable::TrialUser => "trial_user_attributes",
            AttrTable::TrialSystem => "trial_system_attributes",
        }
    }

    pub(crate) fn owner(self) -> &'static str {
        match self {
            AttrTable::StudyUser | AttrTable::StudySystem => "study_id",
            AttrTable::TrialUser | AttrTable::TrialSystem => "trial_id",
        }
    }
}

/// Insert or overwrite one attribute, written as Optuna does (`json.dumps`).
pub(crate) fn set_attr(
    tx: Tx<'_>,
    table: AttrTable,
    owner_id: i64,
    key: &str,
    value: &Json,
) -> Result<(), TxError> {
    let json = serde_json::to_string(value).map_err(|e| StoreError::BadJson {
        table: table.table(),
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    let sql = format!(
        "INSERT INTO {t} ({o}, \"key\", value_json) VALUES (?1, ?2, ?3) \
         ON CONFLICT ({o}, \"key\") DO UPDATE SET value_json = excluded.value_json",
        t = table.table(),
        o = table.owner()
    );
    tx.execute(&sql, vals![owner_id, key, json])?;
    Ok(())
}

/// Parse a stored `value_json`. Python's `json.dumps` writes `NaN` and
/// `Infinity` for non-finite floats, which strict JSON lacks; those are read
/// back as strings rather than failing the whole trial.
pub(crate) fn parse_json(table: AttrTable, key: &str, text: &str) -> Result<Json, StoreError> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(_) if matches!(text, "NaN" | "Infinity" | "-Infinity") => {
            Ok(Json::String(text.to_string()))
        }
        Err(e) => Err(StoreError::BadJson {
            table: table.table(),
            key: key.to_string(),
            reason: e.to_string(),
        }),
    }
}

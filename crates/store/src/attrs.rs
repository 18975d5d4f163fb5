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
    crate::trial::check_name_length("attribute key", key)?;
    let json = serde_json::to_string(value).map_err(|e| StoreError::BadJson {
        path: Default::default(),
        table: table.table(),
        owner: format!("{} {owner_id}", table.owner()),
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    set_attr_text(tx, table, owner_id, key, &json)
}

/// Insert or overwrite one attribute with `json`, a `value_json` text as
/// it stands (copied from another row: Python's `NaN` and `Infinity`
/// tokens stay tokens).
pub(crate) fn set_attr_text(
    tx: Tx<'_>,
    table: AttrTable,
    owner_id: i64,
    key: &str,
    json: &str,
) -> Result<(), TxError> {
    let sql = format!(
        "INSERT INTO {t} ({o}, \"key\", value_json) VALUES (?1, ?2, ?3) \
         ON CONFLICT ({o}, \"key\") DO UPDATE SET value_json = excluded.value_json",
        t = table.table(),
        o = table.owner()
    );
    tx.execute(&sql, vals![owner_id, key, json])?;
    Ok(())
}

/// One owner's attributes as stored: each key with its `value_json` text.
pub(crate) fn stored_attrs(
    tx: Tx<'_>,
    table: AttrTable,
    owner_id: i64,
) -> Result<Vec<(String, String)>, TxError> {
    let sql = format!(
        "SELECT \"key\", value_json FROM {} WHERE {} = ?1 ORDER BY \"key\"",
        table.table(),
        table.owner()
    );
    tx.query(&sql, vals![owner_id])?
        .iter()
        .map(|r| {
            Ok((
                r.opt_string(0)?.unwrap_or_default(),
                r.opt_string(1)?.unwrap_or_default(),
            ))
        })
        .collect()
}

/// Parse a stored `value_json`, as Python's `json.loads` reads it
/// ([`crate::python_json::from_str`]: `NaN`, `Infinity` and `-Infinity`
/// anywhere in a value, read as those strings, rather than failing the
/// whole trial or study).
pub(crate) fn parse_json(
    table: AttrTable,
    owner_id: i64,
    key: &str,
    text: &str,
) -> Result<Json, StoreError> {
    crate::python_json::from_str(text).map_err(|e| StoreError::BadJson {
        path: Default::default(),
        table: table.table(),
        owner: format!("{} {owner_id}", table.owner()),
        key: key.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_non_finite_floats_are_read_anywhere_in_a_value() {
        let read = |text: &str| parse_json(AttrTable::TrialUser, 7, "k", text).unwrap();
        assert_eq!(read("NaN"), Json::from("NaN"));
        assert_eq!(
            read(r#"[0.5, NaN, {"best": -Infinity, "s": "NaN, \"Infinity\""}]"#),
            serde_json::json!([0.5, "NaN", {"best": "-Infinity", "s": "NaN, \"Infinity\""}])
        );
        assert_eq!(
            read(r#"{"a\\": Infinity}"#),
            serde_json::json!({"a\\": "Infinity"})
        );
        let err = parse_json(AttrTable::TrialUser, 7, "k", "[1, nan]").unwrap_err();
        assert!(err.to_string().contains("trial_id 7"), "{err}");
    }
}

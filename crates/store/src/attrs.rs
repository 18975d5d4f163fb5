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
        owner: format!("{} {owner_id}", table.owner()),
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

/// Parse a stored `value_json`. Python's `json.dumps` writes `NaN`,
/// `Infinity` and `-Infinity` for non-finite floats, anywhere in a value,
/// which strict JSON lacks; each is read back as that string (which
/// `hpo_sampler::json_f64` reads as the float) rather than failing the
/// whole trial or study.
pub(crate) fn parse_json(
    table: AttrTable,
    owner_id: i64,
    key: &str,
    text: &str,
) -> Result<Json, StoreError> {
    serde_json::from_str(text)
        .or_else(|e| serde_json::from_str(&quote_python_floats(text)).map_err(|_| e))
        .map_err(|e| StoreError::BadJson {
            table: table.table(),
            owner: format!("{} {owner_id}", table.owner()),
            key: key.to_string(),
            reason: e.to_string(),
        })
}

/// `text` with each `NaN`, `Infinity` and `-Infinity` outside a string
/// quoted, so that strict JSON reads it as a string. (The trainer's data
/// reader does the same for JSON Lines records, `quote_non_finite` in
/// trainer's `data/json.rs`; the two crates share no dependency.)
fn quote_python_floats(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            (in_string, escaped) = (escaped || c != '"', !escaped && c == '\\');
        } else if c == '"' {
            in_string = true;
        } else if let Some(token) = ["NaN", "Infinity", "-Infinity"]
            .into_iter()
            .find(|t| rest.starts_with(t))
        {
            out.push('"');
            out.push_str(token);
            out.push('"');
            rest = &rest[token.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
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

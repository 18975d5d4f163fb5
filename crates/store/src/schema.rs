//! Optuna's RDBStorage schema (version 12, alembic head `v3.2.0.a`), as
//! optuna 5.0.0 creates it through SQLAlchemy: byte for byte on SQLite, and
//! on PostgreSQL with the same tables, native ENUM types, `SERIAL` keys,
//! constraints and indexes (`pg_dump --schema-only` prints the same).

use crate::db::{Tx, vals};
use crate::error::{Result, StoreError, from_db};
use crate::storage::TxError;
use std::path::Path;

/// `version_info.schema_version` of every Optuna release since 2.x.
pub const SCHEMA_VERSION: i64 = 12;
/// The alembic revision optuna 5.0.0 writes (the head of its migrations).
pub const ALEMBIC_VERSION: &str = "v3.2.0.a";
/// `version_info.library_version`: the Optuna release whose schema we write.
pub const LIBRARY_VERSION: &str = "5.0.0";

/// The tables Optuna needs, in creation order.
pub const TABLES: [&str; 13] = [
    "studies",
    "version_info",
    "study_directions",
    "study_user_attributes",
    "study_system_attributes",
    "trials",
    "trial_user_attributes",
    "trial_system_attributes",
    "trial_params",
    "trial_values",
    "trial_intermediate_values",
    "trial_heartbeats",
    "alembic_version",
];

/// The DDL exactly as `sqlite3 .schema` prints an Optuna 5.0.0 file.
pub const DDL: &str = r#"CREATE TABLE studies (
	study_id INTEGER NOT NULL, 
	study_name VARCHAR(512) NOT NULL, 
	PRIMARY KEY (study_id)
);
CREATE UNIQUE INDEX ix_studies_study_name ON studies (study_name);
CREATE TABLE version_info (
	version_info_id INTEGER NOT NULL, 
	schema_version INTEGER, 
	library_version VARCHAR(256), 
	PRIMARY KEY (version_info_id), 
	CHECK (version_info_id=1)
);
CREATE TABLE study_directions (
	study_direction_id INTEGER NOT NULL, 
	direction VARCHAR(8) NOT NULL, 
	study_id INTEGER NOT NULL, 
	objective INTEGER NOT NULL, 
	PRIMARY KEY (study_direction_id), 
	UNIQUE (study_id, objective), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_user_attributes (
	study_user_attribute_id INTEGER NOT NULL, 
	study_id INTEGER, 
	"key" VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (study_user_attribute_id), 
	UNIQUE (study_id, "key"), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_system_attributes (
	study_system_attribute_id INTEGER NOT NULL, 
	study_id INTEGER, 
	"key" VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (study_system_attribute_id), 
	UNIQUE (study_id, "key"), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE trials (
	trial_id INTEGER NOT NULL, 
	number INTEGER, 
	study_id INTEGER, 
	state VARCHAR(8) NOT NULL, 
	datetime_start DATETIME, 
	datetime_complete DATETIME, 
	PRIMARY KEY (trial_id), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE INDEX ix_trials_study_id ON trials (study_id);
CREATE TABLE trial_user_attributes (
	trial_user_attribute_id INTEGER NOT NULL, 
	trial_id INTEGER, 
	"key" VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (trial_user_attribute_id), 
	UNIQUE (trial_id, "key"), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_system_attributes (
	trial_system_attribute_id INTEGER NOT NULL, 
	trial_id INTEGER, 
	"key" VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (trial_system_attribute_id), 
	UNIQUE (trial_id, "key"), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_params (
	param_id INTEGER NOT NULL, 
	trial_id INTEGER, 
	param_name VARCHAR(512), 
	param_value FLOAT, 
	distribution_json TEXT, 
	PRIMARY KEY (param_id), 
	UNIQUE (trial_id, param_name), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_values (
	trial_value_id INTEGER NOT NULL, 
	trial_id INTEGER NOT NULL, 
	objective INTEGER NOT NULL, 
	value FLOAT, 
	value_type VARCHAR(7) NOT NULL, 
	PRIMARY KEY (trial_value_id), 
	UNIQUE (trial_id, objective), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_intermediate_values (
	trial_intermediate_value_id INTEGER NOT NULL, 
	trial_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	intermediate_value FLOAT, 
	intermediate_value_type VARCHAR(7) NOT NULL, 
	PRIMARY KEY (trial_intermediate_value_id), 
	UNIQUE (trial_id, step), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_heartbeats (
	trial_heartbeat_id INTEGER NOT NULL, 
	trial_id INTEGER NOT NULL, 
	heartbeat DATETIME NOT NULL, 
	PRIMARY KEY (trial_heartbeat_id), 
	UNIQUE (trial_id), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);"#;

/// The ENUM types of Optuna 5.0.0's models on PostgreSQL, named after the
/// Python enums, with their labels in order. SQLAlchemy creates them before
/// the tables ([`PG_DDL`]), and only where missing: dropping Optuna's
/// tables leaves them behind, and Optuna makes its tables again beside them.
pub const PG_ENUMS: [(&str, &[&str]); 4] = [
    ("studydirection", &["NOT_SET", "MINIMIZE", "MAXIMIZE"]),
    (
        "trialstate",
        &["RUNNING", "COMPLETE", "PRUNED", "FAIL", "WAITING"],
    ),
    ("trialvaluetype", &["FINITE", "INF_POS", "INF_NEG"]),
    (
        "trialintermediatevaluetype",
        &["FINITE", "INF_POS", "INF_NEG", "NAN"],
    ),
];

/// The tables SQLAlchemy creates for Optuna 5.0.0's models on PostgreSQL,
/// after the [`PG_ENUMS`] types.
pub const PG_DDL: &str = r#"CREATE TABLE studies (
	study_id SERIAL NOT NULL, 
	study_name VARCHAR(512) NOT NULL, 
	PRIMARY KEY (study_id)
);
CREATE UNIQUE INDEX ix_studies_study_name ON studies (study_name);
CREATE TABLE version_info (
	version_info_id INTEGER NOT NULL, 
	schema_version INTEGER, 
	library_version VARCHAR(256), 
	PRIMARY KEY (version_info_id), 
	CHECK (version_info_id=1)
);
CREATE TABLE study_directions (
	study_direction_id SERIAL NOT NULL, 
	direction studydirection NOT NULL, 
	study_id INTEGER NOT NULL, 
	objective INTEGER NOT NULL, 
	PRIMARY KEY (study_direction_id), 
	UNIQUE (study_id, objective), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_user_attributes (
	study_user_attribute_id SERIAL NOT NULL, 
	study_id INTEGER, 
	key VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (study_user_attribute_id), 
	UNIQUE (study_id, key), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE study_system_attributes (
	study_system_attribute_id SERIAL NOT NULL, 
	study_id INTEGER, 
	key VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (study_system_attribute_id), 
	UNIQUE (study_id, key), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE TABLE trials (
	trial_id SERIAL NOT NULL, 
	number INTEGER, 
	study_id INTEGER, 
	state trialstate NOT NULL, 
	datetime_start TIMESTAMP WITHOUT TIME ZONE, 
	datetime_complete TIMESTAMP WITHOUT TIME ZONE, 
	PRIMARY KEY (trial_id), 
	FOREIGN KEY(study_id) REFERENCES studies (study_id)
);
CREATE INDEX ix_trials_study_id ON trials (study_id);
CREATE TABLE trial_user_attributes (
	trial_user_attribute_id SERIAL NOT NULL, 
	trial_id INTEGER, 
	key VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (trial_user_attribute_id), 
	UNIQUE (trial_id, key), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_system_attributes (
	trial_system_attribute_id SERIAL NOT NULL, 
	trial_id INTEGER, 
	key VARCHAR(512), 
	value_json TEXT, 
	PRIMARY KEY (trial_system_attribute_id), 
	UNIQUE (trial_id, key), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_params (
	param_id SERIAL NOT NULL, 
	trial_id INTEGER, 
	param_name VARCHAR(512), 
	param_value FLOAT, 
	distribution_json TEXT, 
	PRIMARY KEY (param_id), 
	UNIQUE (trial_id, param_name), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_values (
	trial_value_id SERIAL NOT NULL, 
	trial_id INTEGER NOT NULL, 
	objective INTEGER NOT NULL, 
	value FLOAT, 
	value_type trialvaluetype NOT NULL, 
	PRIMARY KEY (trial_value_id), 
	UNIQUE (trial_id, objective), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_intermediate_values (
	trial_intermediate_value_id SERIAL NOT NULL, 
	trial_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	intermediate_value FLOAT, 
	intermediate_value_type trialintermediatevaluetype NOT NULL, 
	PRIMARY KEY (trial_intermediate_value_id), 
	UNIQUE (trial_id, step), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE trial_heartbeats (
	trial_heartbeat_id SERIAL NOT NULL, 
	trial_id INTEGER NOT NULL, 
	heartbeat TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
	PRIMARY KEY (trial_heartbeat_id), 
	UNIQUE (trial_id), 
	FOREIGN KEY(trial_id) REFERENCES trials (trial_id)
);
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);"#;

/// Whether Optuna's schema is still to be made: an SQLite file with no
/// tables at all (one with others is some other program's); on PostgreSQL,
/// a database where the session sees none of Optuna's tables by their
/// unqualified names, in any schema on its `search_path`, as Optuna's
/// queries and ours name them (as Optuna, which shares a database with
/// other tables). Looking in the first schema only would miss Optuna's
/// tables in `public` when a schema named after the user comes first, and
/// creating them again there would hide Optuna's from Optuna itself.
pub fn is_empty(tx: Tx<'_>, path: &Path) -> Result<bool> {
    let names = TABLES.join(",");
    let (sql, params) = if tx.is_postgres() {
        (
            // Read from `pg_class` itself, not by `to_regclass`: after
            // waiting for `lock_creation` the session's catalog cache may
            // still hold "no such table" from before another session made
            // the tables, where a scan sees what was committed.
            "SELECT count(*) FROM pg_catalog.pg_class c \
             WHERE c.relname = ANY (string_to_array(CAST(?1 AS text), ',')) \
             AND c.relkind IN ('r', 'p') AND pg_catalog.pg_table_is_visible(c.oid)",
            vals![names],
        )
    } else {
        ("SELECT count(*) FROM sqlite_master", vals![])
    };
    let n = tx
        .query_one(sql, params)
        .and_then(|r| r.i64(0))
        .map_err(|e| from_db(path, e))?;
    Ok(n == 0)
}

/// Serialise schema creation between processes; the caller holds a write
/// transaction. SQLite's write lock already does; on PostgreSQL an
/// advisory lock held until the transaction ends.
pub fn lock_creation(tx: Tx<'_>) -> Result<(), TxError> {
    if tx.is_postgres() {
        // Any constant: the key of "creating Optuna's schema".
        tx.query("SELECT pg_advisory_xact_lock(7310155244210862)::text", &[])?;
    }
    Ok(())
}

/// Create every table and the version rows. The caller holds a write transaction.
pub fn create(tx: Tx<'_>, path: &Path) -> Result<(), TxError> {
    if tx.is_postgres() {
        create_enums(tx, path)?;
    }
    tx.batch(if tx.is_postgres() { PG_DDL } else { DDL })?;
    tx.execute(
        "INSERT INTO version_info (version_info_id, schema_version, library_version) VALUES (1, ?1, ?2)",
        vals![SCHEMA_VERSION, LIBRARY_VERSION],
    )?;
    tx.execute(
        "INSERT INTO alembic_version (version_num) VALUES (?1)",
        vals![ALEMBIC_VERSION],
    )?;
    Ok(())
}

/// Create each of [`PG_ENUMS`] the session does not see by its
/// unqualified name (see [`is_empty`]); one it sees must have Optuna's
/// labels in Optuna's order, or Optuna's states would be stored as other
/// values or refused.
fn create_enums(tx: Tx<'_>, path: &Path) -> Result<(), TxError> {
    // The type the unqualified name finds (the visible one): an enum's
    // labels in order, or one NULL label for a type of another kind.
    let labels_of = "SELECT e.enumlabel::text FROM pg_catalog.pg_type t \
         LEFT JOIN pg_catalog.pg_enum e ON e.enumtypid = t.oid \
         WHERE t.typname = ?1 AND pg_catalog.pg_type_is_visible(t.oid) \
         ORDER BY e.enumsortorder";
    for (name, labels) in PG_ENUMS {
        let rows = tx.query(labels_of, vals![name])?;
        if rows.is_empty() {
            let quoted: Vec<String> = labels.iter().map(|l| format!("'{l}'")).collect();
            tx.batch(&format!(
                "CREATE TYPE {name} AS ENUM ({})",
                quoted.join(", ")
            ))?;
            continue;
        }
        let found = rows
            .iter()
            .map(|r| r.opt_string(0))
            .collect::<Result<Vec<_>, _>>()?;
        if found
            .iter()
            .map(Option::as_deref)
            .ne(labels.iter().copied().map(Some))
        {
            let found = found.iter().flatten().cloned().collect();
            return Err(StoreError::ForeignType {
                path: path.to_path_buf(),
                name,
                found,
            }
            .into());
        }
    }
    Ok(())
}

/// The columns of one of [`TABLES`], as [`DDL`] creates them.
fn columns(table: &str) -> impl Iterator<Item = &'static str> {
    let start = format!("CREATE TABLE {table} (\n");
    let body = DDL
        .split_once(start.as_str())
        .map_or("", |(_, rest)| rest.split(");").next().unwrap_or(""));
    body.lines().filter_map(|line| {
        // `"key"` is quoted in the DDL, a reserved word.
        let name = line.split_whitespace().next()?.trim_matches('"');
        let constraint = ["PRIMARY", "UNIQUE", "FOREIGN", "CONSTRAINT", "CHECK"].contains(&name);
        (!constraint).then_some(name)
    })
}

/// Check, by reading only, that the database holds Optuna's schema version 12.
pub fn verify(tx: Tx<'_>, path: &Path) -> Result<()> {
    // On PostgreSQL, the table an unqualified name finds on the session's
    // `search_path` (see `is_empty`).
    let exists = if tx.is_postgres() {
        "SELECT pg_catalog.to_regclass(CAST(?1 AS text))::text \
         WHERE pg_catalog.to_regclass(CAST(?1 AS text)) IS NOT NULL"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1"
    };
    for table in TABLES {
        let found = tx
            .query_opt(exists, vals![table])
            .map_err(|e| from_db(path, e))?;
        if found.is_none() {
            return Err(StoreError::NotAnOptunaStorage {
                path: path.to_path_buf(),
                table,
            });
        }
    }
    let schema = tx
        .query_opt(
            "SELECT schema_version FROM version_info WHERE version_info_id = 1",
            &[],
        )
        .and_then(|r| r.map(|r| r.opt_i64(0)).transpose())
        .map_err(|e| from_db(path, e))?
        .flatten();
    let alembic: Vec<String> = tx
        .query("SELECT version_num FROM alembic_version", &[])
        .and_then(|rows| rows.iter().map(|r| r.string(0)).collect())
        .map_err(|e| from_db(path, e))?;
    if schema != Some(SCHEMA_VERSION) || alembic != [ALEMBIC_VERSION] {
        let schema = schema.map_or("none".to_string(), |v| v.to_string());
        return Err(StoreError::UnknownSchemaVersion {
            path: path.to_path_buf(),
            found: format!("schema_version {schema}, alembic {alembic:?}"),
        });
    }
    // After the version: an older Optuna's tables lack columns added since,
    // and its version says so better.
    let columns_of = if tx.is_postgres() {
        "SELECT a.attname::text FROM pg_catalog.pg_attribute a \
         WHERE a.attrelid = pg_catalog.to_regclass(CAST(?1 AS text)) \
         AND a.attnum > 0 AND NOT a.attisdropped"
    } else {
        "SELECT name FROM pragma_table_info(?1)"
    };
    for table in TABLES {
        let stored: Vec<String> = tx
            .query(columns_of, vals![table])
            .and_then(|rows| rows.iter().map(|r| r.string(0)).collect())
            .map_err(|e| from_db(path, e))?;
        if let Some(column) = columns(table).find(|c| !stored.iter().any(|s| s == c)) {
            return Err(StoreError::MissingColumn {
                path: path.to_path_buf(),
                table,
                column,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_its_columns_from_the_ddl() {
        let trials: Vec<&str> = columns("trials").collect();
        assert_eq!(
            trials,
            [
                "trial_id",
                "number",
                "study_id",
                "state",
                "datetime_start",
                "datetime_complete"
            ]
        );
        assert_eq!(
            columns("alembic_version").collect::<Vec<_>>(),
            ["version_num"]
        );
        for table in TABLES {
            assert!(columns(table).count() >= 1, "{table}");
        }
    }
}

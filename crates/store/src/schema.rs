//! Optuna's RDBStorage schema (version 12, alembic head `v3.2.0.a`), byte for
//! byte as optuna 5.0.0 creates it on SQLite through SQLAlchemy.

use crate::error::{Result, StoreError, from_sqlite};
use rusqlite::{Connection, OptionalExtension};
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

/// Whether the database has no tables at all (a new or empty file).
pub fn is_empty(conn: &Connection, path: &Path) -> Result<bool> {
    let n: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| from_sqlite(path, e))?;
    Ok(n == 0)
}

/// Create every table and the version rows. The caller holds a write transaction.
pub fn create(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(DDL)?;
    conn.execute(
        "INSERT INTO version_info (version_info_id, schema_version, library_version) VALUES (1, ?1, ?2)",
        rusqlite::params![SCHEMA_VERSION, LIBRARY_VERSION],
    )?;
    conn.execute(
        "INSERT INTO alembic_version (version_num) VALUES (?1)",
        [ALEMBIC_VERSION],
    )?;
    Ok(())
}

/// Check, by reading only, that the file holds Optuna's schema version 12.
pub fn verify(conn: &Connection, path: &Path) -> Result<()> {
    for table in TABLES {
        let found: Option<String> = conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| from_sqlite(path, e))?;
        if found.is_none() {
            return Err(StoreError::NotAnOptunaStorage {
                path: path.to_path_buf(),
                table,
            });
        }
    }
    let schema: Option<Option<i64>> = conn
        .query_row(
            "SELECT schema_version FROM version_info WHERE version_info_id = 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| from_sqlite(path, e))?;
    let alembic: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT version_num FROM alembic_version")
            .map_err(|e| from_sqlite(path, e))?;
        stmt.query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| from_sqlite(path, e))?
    };
    let schema = schema.flatten();
    if schema != Some(SCHEMA_VERSION) || alembic != [ALEMBIC_VERSION] {
        let schema = schema.map_or("none".to_string(), |v| v.to_string());
        return Err(StoreError::UnknownSchemaVersion {
            path: path.to_path_buf(),
            found: format!("schema_version {schema}, alembic {alembic:?}"),
        });
    }
    Ok(())
}

//! The typed errors of every storage operation.

use std::path::PathBuf;

/// Everything that can go wrong when reading or writing a study.
///
/// Each variant names the file, study, trial or field involved, so the caller
/// can print it as-is. Nothing here is ever raised by a panic.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but is not an SQLite database (or its header is damaged).
    #[error("{path}: not an SQLite database ({detail})")]
    NotADatabase {
        /// The storage file.
        path: PathBuf,
        /// SQLite's own message.
        detail: String,
    },

    /// A writer died mid-transaction and left its journal, which this
    /// process, without write access to the file or its folder, cannot
    /// roll back.
    #[error(
        "{path}: a writer stopped in the middle of a transaction and left its journal \
         ({path}-journal); reading the file needs write access to it and its folder once, \
         to roll that transaction back (any memtune or Optuna command that writes does it)"
    )]
    HotJournal {
        /// The storage file; its journal is this path with `-journal` appended.
        path: PathBuf,
    },

    /// The file may be written but its folder may not: SQLite creates its
    /// journal (`-journal`, or `-wal` and `-shm`) beside the file.
    #[error(
        "{path}: cannot write: its folder is read-only, and SQLite creates its journal \
         beside the file (read-only commands still work)"
    )]
    ReadOnlyFolder {
        /// The storage file.
        path: PathBuf,
    },

    /// The file is SQLite but damaged (truncated, malformed pages).
    #[error("{path}: the database is corrupt ({detail})")]
    Corrupt {
        /// The storage file.
        path: PathBuf,
        /// SQLite's own message.
        detail: String,
    },

    /// The file is SQLite but does not hold Optuna's tables.
    #[error("{path}: not an Optuna RDB storage (missing table `{table}`)")]
    NotAnOptunaStorage {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
        /// The first of Optuna's tables found missing, e.g. `trials`.
        table: &'static str,
    },

    /// A table of Optuna's lacks one of its columns (altered by hand, or
    /// another program's table of the same name).
    #[error("{path}: not an Optuna RDB storage (table `{table}` has no column `{column}`)")]
    MissingColumn {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
        /// The Optuna table that lacks the column.
        table: &'static str,
        /// The column Optuna's schema version 12 gives that table.
        column: &'static str,
    },

    /// A PostgreSQL database without Optuna's tables holds a type by the
    /// name of one of Optuna's ENUM types (`trialstate`, ...) that is not
    /// that enum: another program's, or an enum with other labels.
    #[error(
        "{path}: type `{name}` exists {}, not as Optuna's enum; \
         drop it (DROP TYPE {name}) or use another database",
        if found.is_empty() {
            "and is not an enum".to_string()
        } else {
            format!("with labels {found:?}")
        }
    )]
    ForeignType {
        /// The server's URL without its password.
        path: PathBuf,
        /// The type's name, as Optuna's schema names it.
        name: &'static str,
        /// Its labels in order (none when it is not an enum).
        found: Vec<String>,
    },

    /// The database (an SQLite file, or a PostgreSQL database) has no
    /// tables at all and was opened without leave to create the schema
    /// (read-only, or `create: false`): new, or being created by another
    /// process this very moment.
    #[error("{path}: an empty database (no Optuna tables yet)")]
    EmptyDatabase {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
    },

    /// The file holds Optuna's tables at a schema version we do not know.
    #[error(
        "{path}: unknown Optuna schema version {found} (this build reads schema_version 12, alembic v3.2.0.a)"
    )]
    UnknownSchemaVersion {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
        /// The stored versions, e.g. `schema_version 11, alembic ["v3.0.0.d"]`.
        found: String,
    },

    /// The storage file does not exist (and we were asked not to create it).
    #[error("{path}: no such storage file")]
    NoSuchFile {
        /// The path that was asked for.
        path: PathBuf,
    },

    /// The storage path names a directory.
    #[error("{path}: is a directory, not a storage file (name the .db file)")]
    IsADirectory {
        /// The directory's path.
        path: PathBuf,
    },

    /// The storage path names something other than a file or a directory.
    #[error("{path}: is a {kind}, not a storage file (name the .db file)")]
    NotAFile {
        /// The path that was asked for.
        path: PathBuf,
        /// What it is instead: `FIFO`, `socket`, `device` or `special file`.
        kind: &'static str,
    },

    /// A storage URL that is neither `sqlite:///PATH` nor
    /// `postgresql://USER@HOST[:PORT]/DB`.
    #[error("bad storage URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given, with any password hidden.
        url: String,
        /// What is wrong with it, and the form expected.
        reason: String,
    },

    /// No study of this name is stored.
    #[error("study `{}` not found", name.escape_debug())]
    StudyNotFound {
        /// The name asked for.
        name: String,
    },

    /// No study of this id is stored.
    #[error("study id {study_id} not found")]
    StudyIdNotFound {
        /// The id asked for (`studies.study_id`).
        study_id: i64,
    },

    /// A study of this name is already stored, and creating it again was
    /// asked for.
    #[error("study `{}` already exists", name.escape_debug())]
    StudyExists {
        /// The name taken.
        name: String,
    },

    /// A study needs at least one direction.
    #[error("study `{name}`: at least one objective direction is required")]
    NoDirections {
        /// The study's name.
        name: String,
    },

    /// An existing study was opened with other directions than it was created with.
    #[error("study `{name}` has directions {stored:?}, not {requested:?}")]
    DirectionMismatch {
        /// The study's name.
        name: String,
        /// The stored directions, one per objective (`MINIMIZE`, `MAXIMIZE`).
        stored: Vec<String>,
        /// The directions the caller gave, spelled the same way.
        requested: Vec<String>,
    },

    /// The stored directions are not one per objective `0..n` (a row
    /// deleted or duplicated): which objective is which is unknown.
    #[error(
        "study `{}`: study_directions holds objectives {objectives:?}, not 0 to n - 1",
        name.escape_debug()
    )]
    BadDirections {
        /// The study's name.
        name: String,
        /// The `objective` column of the study's direction rows, ascending.
        objectives: Vec<i64>,
    },

    /// A trial of the study holds a state Optuna does not have (counted
    /// by state, so no one row is named).
    #[error(
        "corrupt row: a trial of study `{}` has trials.state = `{state}`",
        study.escape_debug()
    )]
    BadTrialState {
        /// The study's name.
        study: String,
        /// The stored `trials.state` text.
        state: String,
    },

    /// No trial of this id is stored.
    #[error("trial id {trial_id} not found")]
    TrialNotFound {
        /// The id asked for (`trials.trial_id`, global to the storage).
        trial_id: i64,
    },

    /// A write to a trial that is no longer RUNNING (or WAITING where allowed).
    #[error("trial {number} is already {state} and cannot be changed")]
    TrialFinished {
        /// The trial's number in its study (-1 where the row has none).
        number: i64,
        /// Its stored state, e.g. `COMPLETE`.
        state: String,
    },

    /// `finish` was called with a state that does not end a trial.
    #[error("trial {number}: `{state}` is not a finished state (COMPLETE, PRUNED or FAIL)")]
    NotAFinishedState {
        /// The trial's number in its study.
        number: i64,
        /// The state given, `RUNNING` or `WAITING`.
        state: String,
    },

    /// A name longer than Optuna's schema stores (`VARCHAR(512)`): a
    /// parameter name, a study name or an attribute key.
    #[error("{what} `{name}` is {chars} characters long; Optuna's schema stores at most 512")]
    NameTooLong {
        /// `parameter name`, `study name` or `attribute key`.
        what: &'static str,
        /// The name's first 40 characters, escaped, and `...`.
        name: String,
        /// The whole name's length, in characters (Unicode scalar values).
        chars: usize,
    },

    /// The same parameter set twice on one trial.
    #[error("trial {number}: parameter `{name}` is already set")]
    ParamExists {
        /// The trial's number in its study.
        number: i64,
        /// The parameter's name.
        name: String,
    },

    /// A value Optuna cannot store (NaN objective value).
    #[error("trial {number}: {what} is {value}, which Optuna cannot store")]
    InvalidValue {
        /// The trial's number in its study.
        number: i64,
        /// Which value: `objective 0`, or ``parameter `lr` `` for a parameter's
        /// internal value.
        what: String,
        /// The value refused (NaN).
        value: f64,
    },

    /// A COMPLETE trial needs one value per objective.
    #[error("trial {number}: {got} values given, the study has {expected} objectives")]
    WrongNumberOfValues {
        /// The trial's number in its study.
        number: i64,
        /// The study's number of objectives (directions).
        expected: usize,
        /// The number of values given.
        got: usize,
    },

    /// Asked for the single best trial of a multi-objective study.
    #[error("study id {study_id} has {objectives} objectives; use best_trials (Pareto front)")]
    MultiObjective {
        /// The study asked about.
        study_id: i64,
        /// Its number of objectives (directions).
        objectives: usize,
    },

    /// A stored row holds a value outside Optuna's vocabulary.
    #[error(
        "{}corrupt row: {table}.{field} = `{value}` (row id {row_id}, {of})",
        storage_prefix(path)
    )]
    BadRow {
        /// The storage (empty until the error leaves its transaction).
        path: PathBuf,
        /// The table holding the row, e.g. `trials`.
        table: &'static str,
        /// The column holding the value, e.g. `state`.
        field: &'static str,
        /// The row's primary key in `table`.
        row_id: i64,
        /// The value as stored (`NULL` for a missing one), with why it is wrong where
        /// the value alone does not say.
        value: String,
        /// Whose row it is: `trial 3 of study `s` (trial_id 4)`, `study `s``.
        of: String,
    },

    /// A stored parameter whose `distribution_json` does not read as a
    /// distribution Optuna would make.
    #[error("{}{trial}, parameter `{name}`: {reason}", storage_prefix(path))]
    BadParam {
        /// The storage (empty until the error leaves its transaction).
        path: PathBuf,
        /// The trial: `trial 3 of study `s` (trial_id 4)`.
        trial: String,
        /// The trial's number in its study.
        number: u64,
        /// The parameter's name.
        name: String,
        /// Why the distribution does not read.
        reason: String,
    },

    /// A `distribution_json` we cannot decode.
    #[error("bad distribution_json `{json}`: {reason}")]
    BadDistribution {
        /// The `distribution_json` text as stored or given.
        json: String,
        /// Why it does not decode.
        reason: String,
    },

    /// A distribution in Optuna's JSON whose attributes Optuna's
    /// constructors refuse (`low > high`, no choices...); names the parameter.
    #[error(transparent)]
    InvalidDistribution(hpo_sampler::Error),

    /// A distribution or search space in Optuna's JSON that does not read;
    /// `path` names the field (`lr.attributes.low`).
    #[error("invalid Optuna JSON at {path}: {reason}")]
    BadOptunaJson {
        /// Where in the JSON: a dotted field path, or `search space` for the whole.
        path: String,
        /// What is wrong there.
        reason: String,
    },

    /// An attribute value that is not valid JSON.
    #[error(
        "{}bad JSON in {table}.{key} of {owner}: {reason}",
        storage_prefix(path)
    )]
    BadJson {
        /// The storage (empty until the error leaves its transaction).
        path: PathBuf,
        /// The attribute table, e.g. `trial_user_attributes`.
        table: &'static str,
        /// The owning row, e.g. `trial_id 12`.
        owner: String,
        /// The attribute's key.
        key: String,
        /// The JSON parser's message.
        reason: String,
    },

    /// Other writers kept the storage busy for longer than every retry
    /// waited: an SQLite file stayed locked, or kept changing under a
    /// read-only reader, or PostgreSQL kept aborting the transaction as a
    /// deadlock or serialisation failure.
    #[error("{path}: still busy with other writers after {attempts} attempts")]
    Busy {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
        /// How many times the operation was tried within `OpenOptions::max_wait`.
        attempts: u32,
    },

    /// Any other error from SQLite (a write on a read-only storage among them).
    #[error("{path}: {source}")]
    Sqlite {
        /// The storage file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },

    /// The storage stopped answering (a PostgreSQL server unreachable, or
    /// SQLite's I/O errors) and did not come back while we kept trying.
    #[error("{path}: unavailable for {seconds:.0} s, gave up after {attempts} attempts ({cause})")]
    Unavailable {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
        /// How long it was unavailable before we gave up, in seconds
        /// (at least `OpenOptions::reconnect_for`).
        seconds: f64,
        /// How many attempts were made to reach it.
        attempts: u32,
        /// The error that began the outage, or the commit whose outcome stayed unknown.
        cause: String,
    },

    /// Connecting to a PostgreSQL server did not finish within the
    /// deadline (the URL's `connect_timeout`, default 10 s, per host and
    /// once more for the startup).
    #[error(
        "{path}: connecting did not finish within {seconds:.0} s (a server stopped or hung, \
         not PostgreSQL, or addresses that do not answer; `connect_timeout` in the URL sets \
         the wait)"
    )]
    Unanswered {
        /// The server's URL without its password.
        path: PathBuf,
        /// The deadline that passed, in seconds.
        seconds: f64,
    },

    /// An error from the PostgreSQL server or the connection to it (the
    /// path is the storage URL without its password), with the server's
    /// SQLSTATE, message, detail and hint.
    #[error("{path}: {}", crate::pg::describe(source))]
    Postgres {
        /// The server's URL without its password.
        path: PathBuf,
        /// The client library's error.
        #[source]
        source: postgres::Error,
    },

    /// A value does not fit Optuna's schema: a stored column holds another
    /// type than the schema gives it, a query that always returns a row
    /// returned none, or a value to write is beyond PostgreSQL's 32-bit
    /// columns.
    #[error("{path}: unexpected stored value ({detail})")]
    Decode {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
        /// What did not read, e.g. the column, the type expected and the value found.
        detail: String,
    },

    /// An operating-system error: reading the storage path's metadata, or
    /// starting the thread a PostgreSQL connection is opened on.
    #[error("{path}: {source}")]
    Io {
        /// The storage file, or the server's URL without its password.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The result of a storage operation: [`StoreError`] by default.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// `PATH: ` before an error about stored data, once the storage is known.
fn storage_prefix(path: &std::path::Path) -> String {
    if path.as_os_str().is_empty() {
        String::new()
    } else {
        format!("{}: ", path.display())
    }
}

/// The SQLite error code of an error, if it is one.
pub(crate) fn sqlite_code(e: &rusqlite::Error) -> Option<rusqlite::ErrorCode> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.code),
        _ => None,
    }
}

/// Wrap a database error with the storage's file or URL.
pub(crate) fn from_db(path: &std::path::Path, e: crate::db::DbError) -> StoreError {
    use crate::db::DbError;
    match e {
        DbError::Sqlite(e) => from_sqlite(path, e),
        DbError::Pg(source) => StoreError::Postgres {
            path: path.to_path_buf(),
            source,
        },
        DbError::Decode(detail) => StoreError::Decode {
            path: path.to_path_buf(),
            detail,
        },
    }
}

impl StoreError {
    /// The error, naming `storage` where it is about a stored row that
    /// was read without knowing which storage held it.
    pub(crate) fn in_storage(mut self, storage: &std::path::Path) -> StoreError {
        if let StoreError::BadRow { path, .. }
        | StoreError::BadParam { path, .. }
        | StoreError::BadJson { path, .. } = &mut self
            && path.as_os_str().is_empty()
        {
            *path = storage.to_path_buf();
        }
        self
    }

    /// SQLite could not create a journal or WAL index in the file's
    /// read-only folder.
    pub(crate) fn is_read_only_folder(&self) -> bool {
        matches!(self, StoreError::ReadOnlyFolder { .. })
    }

    /// SQLite's lock held by another connection past `busy_timeout`: worth
    /// waiting for.
    pub(crate) fn is_locked(&self) -> bool {
        matches!(self, StoreError::Sqlite { source, .. } if sqlite_is_locked(source))
    }
}

/// Whether SQLite refused for a lock another connection holds.
pub(crate) fn sqlite_is_locked(e: &rusqlite::Error) -> bool {
    matches!(
        sqlite_code(e),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Wrap a raw SQLite error with the file, mapping the codes callers care about.
pub(crate) fn from_sqlite(path: &std::path::Path, e: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    match sqlite_code(&e) {
        Some(rusqlite::ErrorCode::NotADatabase) => StoreError::NotADatabase {
            path,
            detail: e.to_string(),
        },
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path,
            detail: e.to_string(),
        },
        _ if matches!(&e, rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK) =>
        {
            StoreError::HotJournal { path }
        }
        _ if matches!(&e, rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_READONLY_DIRECTORY) =>
        {
            StoreError::ReadOnlyFolder { path }
        }
        _ => StoreError::Sqlite { path, source: e },
    }
}

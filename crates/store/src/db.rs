//! One SQL surface over SQLite and PostgreSQL: dynamically typed values and
//! rows, and a transaction handle that runs the same statement text on either.
//!
//! Statements are written once, with SQLite's `?1`, `?2` placeholders; on
//! PostgreSQL they become `$1`, `$2`. Values convert to whatever type the
//! server inferred for a parameter (`INTEGER`, `double precision`,
//! `timestamp`, Optuna's native ENUM types) and back, so callers never see
//! the two type systems. Where the dialects differ (catalog queries, server
//! time) callers ask [`Tx::is_postgres`].

use crate::pg::PgConn;
use rusqlite::Connection;
use std::cell::RefCell;
use std::rc::Rc;

/// A value as a statement takes it and a row returns it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    /// Text, enum labels and timestamps (`YYYY-MM-DD HH:MM:SS.ffffff`).
    Text(String),
}

impl Value {
    /// As an error shows it: `NULL`, a number, or quoted text.
    fn shown(&self) -> String {
        match self {
            Value::Null => "NULL".into(),
            Value::Int(v) => v.to_string(),
            Value::Real(v) => v.to_string(),
            Value::Text(v) => format!("{v:?}"),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Real(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(v.clone())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// `vals![a, b]`: statement parameters of mixed types.
macro_rules! vals {
    ($($v:expr),* $(,)?) => {
        &[$($crate::db::Value::from($v)),*][..]
    };
}
pub(crate) use vals;

/// An error from either database, or a column that did not hold the type
/// the statement expects.
#[derive(Debug)]
pub(crate) enum DbError {
    Sqlite(rusqlite::Error),
    Pg(postgres::Error),
    Decode(String),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        DbError::Pg(e)
    }
}

impl DbError {
    /// Whether running the whole transaction again may succeed: SQLite's
    /// lock conflicts; PostgreSQL's serialization failures, deadlocks, lock
    /// timeouts, and unique violations from a concurrent insert of the same
    /// key (the retry then finds the row and takes the other path).
    pub(crate) fn is_retryable(&self) -> bool {
        use postgres::error::SqlState;
        match self {
            DbError::Sqlite(e) => crate::error::sqlite_is_locked(e),
            DbError::Pg(e) => e.code().is_some_and(|c| {
                [
                    SqlState::T_R_SERIALIZATION_FAILURE,
                    SqlState::T_R_DEADLOCK_DETECTED,
                    SqlState::LOCK_NOT_AVAILABLE,
                    SqlState::UNIQUE_VIOLATION,
                ]
                .contains(c)
            }),
            DbError::Decode(_) => false,
        }
    }

    /// Whether the connection to the server is gone (PostgreSQL), so a
    /// new one may carry on.
    pub(crate) fn is_connection_lost(&self) -> bool {
        match self {
            DbError::Pg(e) => crate::pg::is_connection_lost(e),
            _ => false,
        }
    }

    /// Whether SQLite met an I/O error (a storage hiccup: a network file
    /// system's blip, a full journal device that frees up): the
    /// transaction was rolled back and running it again may succeed.
    pub(crate) fn is_io_error(&self) -> bool {
        match self {
            DbError::Sqlite(e) => matches!(
                crate::error::sqlite_code(e),
                Some(rusqlite::ErrorCode::SystemIoFailure)
            ),
            _ => false,
        }
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Sqlite(e) => write!(f, "{e}"),
            DbError::Pg(e) => write!(f, "{}", crate::pg::describe(e)),
            DbError::Decode(d) => write!(f, "{d}"),
        }
    }
}

/// One result row, with its statement's column names (for errors).
#[derive(Debug)]
pub(crate) struct Row(pub(crate) Vec<Value>, pub(crate) Rc<[String]>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value, DbError> {
        self.0
            .get(i)
            .ok_or_else(|| DbError::Decode(format!("no column {i}")))
    }

    /// Names the column, and the row by its first column (the table's id
    /// in the queries that read stored rows).
    fn mismatch(&self, i: usize, want: &str) -> DbError {
        let name = |i: usize| self.1.get(i).map_or(format!("column {i}"), String::clone);
        let row = match self.0.first() {
            Some(first) if i > 0 => format!(", in the row with {} = {}", name(0), first.shown()),
            _ => String::new(),
        };
        DbError::Decode(format!(
            "{}: expected {want}, found {}{row}",
            name(i),
            self.0[i].shown()
        ))
    }

    pub(crate) fn opt_i64(&self, i: usize) -> Result<Option<i64>, DbError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            _ => Err(self.mismatch(i, "an integer")),
        }
    }

    pub(crate) fn i64(&self, i: usize) -> Result<i64, DbError> {
        self.opt_i64(i)?
            .ok_or_else(|| self.mismatch(i, "an integer"))
    }

    pub(crate) fn opt_f64(&self, i: usize) -> Result<Option<f64>, DbError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Real(v) => Ok(Some(*v)),
            // SQLite keeps a whole REAL as an integer only when asked; accept it.
            Value::Int(v) => Ok(Some(*v as f64)),
            _ => Err(self.mismatch(i, "a number")),
        }
    }

    pub(crate) fn opt_string(&self, i: usize) -> Result<Option<String>, DbError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            _ => Err(self.mismatch(i, "text")),
        }
    }

    pub(crate) fn string(&self, i: usize) -> Result<String, DbError> {
        self.opt_string(i)?.ok_or_else(|| self.mismatch(i, "text"))
    }
}

/// The connection a transaction runs on.
#[derive(Clone, Copy)]
pub(crate) enum Tx<'a> {
    Sqlite(&'a Connection),
    Pg(&'a RefCell<PgConn>),
}

impl Tx<'_> {
    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self, Tx::Pg(_))
    }

    /// Start a transaction with `begin`; on PostgreSQL, also its id and
    /// server process (see `PgConn::begin`).
    pub(crate) fn begin(&self, begin: &str) -> Result<Option<crate::pg::PgTx>, DbError> {
        match self {
            Tx::Sqlite(conn) => {
                conn.execute_batch(begin)?;
                Ok(None)
            }
            Tx::Pg(conn) => conn.borrow_mut().begin(begin).map(Some),
        }
    }

    /// Every row `sql` returns.
    pub(crate) fn query(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
        match self {
            Tx::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql)?;
                let n = stmt.column_count();
                let names: Rc<[String]> = stmt.column_names().map(String::from).collect();
                let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    let row = (0..n)
                        .map(|i| r.get_ref(i).map(from_sqlite))
                        .collect::<rusqlite::Result<_>>()?;
                    out.push(Row(row, Rc::clone(&names)));
                }
                Ok(out)
            }
            Tx::Pg(conn) => conn.borrow_mut().query(sql, params),
        }
    }

    /// The first row `sql` returns, if any.
    pub(crate) fn query_opt(&self, sql: &str, params: &[Value]) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The first row of a statement that always returns one (`count(*)`,
    /// `INSERT ... RETURNING`).
    pub(crate) fn query_one(&self, sql: &str, params: &[Value]) -> Result<Row, DbError> {
        self.query_opt(sql, params)?
            .ok_or_else(|| DbError::Decode(format!("no row from `{sql}`")))
    }

    /// Run a statement; the number of rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        match self {
            Tx::Sqlite(conn) => Ok(conn
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(params))?
                as u64),
            Tx::Pg(conn) => conn.borrow_mut().execute(sql, params),
        }
    }

    /// Run statements without parameters (DDL, session settings).
    pub(crate) fn batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Tx::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            Tx::Pg(conn) => Ok(conn.borrow_mut().client.batch_execute(sql)?),
        }
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as V, ValueRef};
        Ok(match self {
            Value::Null => ToSqlOutput::Owned(V::Null),
            Value::Int(v) => ToSqlOutput::Owned(V::Integer(*v)),
            Value::Real(v) => ToSqlOutput::Owned(V::Real(*v)),
            Value::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
        })
    }
}

fn from_sqlite(v: rusqlite::types::ValueRef<'_>) -> Value {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) | ValueRef::Blob(t) => Value::Text(String::from_utf8_lossy(t).into()),
    }
}

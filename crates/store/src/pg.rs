//! The PostgreSQL side: parsing `postgresql://` URLs, connecting, cached
//! prepared statements, and converting [`Value`]s to and from the types
//! Optuna's schema uses on PostgreSQL (`integer`, `double precision`,
//! `timestamp without time zone`, `text`/`varchar` and its native ENUM types).

use crate::db::{DbError, Row, Value};
use crate::statement_cache::StatementCache;
use crate::tls::{SslMode, TlsSettings};
use bytes::BytesMut;
use postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};
use std::collections::BTreeSet;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type BoxError = Box<dyn Error + Sync + Send>;

/// A parsed `postgresql://` storage URL.
#[derive(Clone, Debug)]
pub struct PgUrl {
    pub(crate) config: postgres::Config,
    /// The URL without its password, for messages.
    pub(crate) shown: String,
    /// The TLS client configuration; `None`: `sslmode=disable`.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl PgUrl {
    /// The URL as shown in messages: scheme, user, host, port and database,
    /// never the password.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// Parse `postgresql://user[:password]@host[:port]/db[?k=v...]`, also in
/// SQLAlchemy's spellings `postgres://` and `postgresql+DRIVER://`
/// (`+psycopg2`, `+psycopg`, ...): the driver names a Python library and
/// means nothing here. Without a user, `$PGUSER` or `$USER` (as libpq);
/// without a password, `$PGPASSWORD`. `sslmode` and `sslrootcert` mean
/// what they mean to libpq (see [`crate::tls`]). `None` when the URL is
/// not a PostgreSQL one.
pub(crate) fn parse_url(url: &str) -> Option<Result<PgUrl, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let base = scheme.split('+').next().unwrap_or(scheme);
    if base != "postgresql" && base != "postgres" {
        return None;
    }
    Some(parse_rest(rest))
}

fn parse_rest(rest: &str) -> Result<PgUrl, String> {
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut tls = TlsSettings {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => tls.mode = SslMode::parse(&percent_decode(value)?)?,
            "sslrootcert" => tls.root_cert = Some(percent_decode(value)?.into()),
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" => {
                return Err(format!(
                    "{key} is not supported (client certificates and revocation lists); \
                     authenticate with a password"
                ));
            }
            _ => kept.push(pair),
        }
    }
    let plain = if kept.is_empty() {
        format!("postgresql://{location}")
    } else {
        format!("postgresql://{location}?{}", kept.join("&"))
    };
    let mut config = plain.parse::<postgres::Config>().map_err(|e| {
        // The driver's own text is "invalid connection string"; what is
        // wrong (an unknown parameter, a bad port) is its source's.
        match std::error::Error::source(&e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        }
    })?;
    if config.get_hosts().is_empty() {
        return Err("no host (write postgresql://USER@HOST[:PORT]/DB)".into());
    }
    if config.get_dbname().is_none() {
        return Err("no database name after the host (…/DB)".into());
    }
    if config.get_user().is_none() {
        // libpq's default, which Optuna's drivers use too.
        match std::env::var("PGUSER").or_else(|_| std::env::var("USER")) {
            Ok(user) => {
                config.user(&user);
            }
            Err(_) => return Err("no user (write postgresql://USER@HOST/DB)".into()),
        }
    }
    if config.get_password().is_none()
        && let Ok(password) = std::env::var("PGPASSWORD")
    {
        // Keeps the password out of command lines and study files.
        config.password(password);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    // A server that vanishes without closing the connection (a network
    // partition, a powered-off host) is noticed within a minute instead
    // of the system's two hours, so the connection is re-established.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(Duration::from_secs(30));
    }
    config.ssl_mode(match tls.mode {
        SslMode::Disable => postgres::config::SslMode::Disable,
        SslMode::Prefer => postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            postgres::config::SslMode::Require
        }
    });
    let tls = match tls.mode {
        SslMode::Disable => None,
        _ => Some(Arc::new(tls.client_config()?)),
    };
    let shown = shown_url(&config);
    Ok(PgUrl { config, shown, tls })
}

/// `%XX` escapes in a URL's query value.
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in `{text}`"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` is not UTF-8"))
}

fn shown_url(config: &postgres::Config) -> String {
    use postgres::config::Host;
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => String::new(),
    };
    let port = config
        .get_ports()
        .first()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    let db = config.get_dbname().unwrap_or_default();
    format!("postgresql://{user}{host}{port}/{db}")
}

/// How long a TCP connect may take where the URL sets no
/// `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A transaction begun on PostgreSQL: its id and its server process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PgTx {
    pub(crate) txid: i64,
    pub(crate) pid: i64,
}

/// One client and the statements it has prepared, keyed by their text.
pub(crate) struct PgConn {
    pub(crate) client: postgres::Client,
    statements: StatementCache<postgres::Statement>,
    url: PgUrl,
    /// Session settings (`SET ...`), run again on every new connection.
    session: String,
    /// A reconnection still under way past its deadline: the next attempt
    /// waits on it instead of starting another beside it.
    pending: Option<Attempt>,
}

/// A connection being opened on a thread of its own.
type Attempt = std::sync::mpsc::Receiver<Result<postgres::Client, postgres::Error>>;

/// Why a connection could not be opened.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Pg(postgres::Error),
    /// Connecting (TCP, TLS, startup, authentication) did not finish within
    /// this time: a server stopped or hung, not PostgreSQL, or addresses
    /// that do not answer.
    Unanswered(Duration),
    /// No thread could be started to connect on.
    Spawn(std::io::Error),
}

impl From<postgres::Error> for ConnectError {
    fn from(e: postgres::Error) -> Self {
        ConnectError::Pg(e)
    }
}

impl ConnectError {
    /// Whether a later attempt may succeed: the connection was lost or cut
    /// while opening, or the server did not answer in time. Not a server
    /// that refuses us (a changed password, a dropped database).
    pub(crate) fn may_pass(&self) -> bool {
        match self {
            ConnectError::Pg(e) => is_connection_lost(e),
            ConnectError::Unanswered(_) => true,
            ConnectError::Spawn(_) => false,
        }
    }

    /// The storage's error for `path` (the URL without its password).
    pub(crate) fn into_store_error(self, path: &std::path::Path) -> crate::StoreError {
        let path = path.to_path_buf();
        match self {
            ConnectError::Pg(source) => crate::StoreError::Postgres { path, source },
            ConnectError::Unanswered(after) => crate::StoreError::Unanswered {
                path,
                seconds: after.as_secs_f64(),
            },
            ConnectError::Spawn(source) => crate::StoreError::Io { path, source },
        }
    }
}

impl PgConn {
    pub(crate) fn connect(url: &PgUrl) -> Result<PgConn, ConnectError> {
        let client = Self::within_deadline(url, &mut None)?;
        lock_reached().insert(url.shown.clone());
        Ok(PgConn {
            client,
            statements: StatementCache::new(),
            url: url.clone(),
            session: String::new(),
            pending: None,
        })
    }

    /// [`Self::client`] on a thread of its own, waited for up to
    /// `connect_timeout` for each host (or address) plus one more for the
    /// startup: the driver's own timeout covers each TCP connect alone, so
    /// a server that accepts and never answers would hold the caller
    /// forever, as libpq's would not. An attempt past its deadline is kept
    /// in `pending` and waited on by the next call, so an outage leaves at
    /// most one connecting thread behind (it ends when the server answers
    /// or closes the socket).
    fn within_deadline(
        url: &PgUrl,
        pending: &mut Option<Attempt>,
    ) -> Result<postgres::Client, ConnectError> {
        let each = url
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let addresses = url
            .config
            .get_hosts()
            .len()
            .max(url.config.get_hostaddrs().len())
            .max(1);
        // A `connect_timeout` may be any number of seconds.
        let deadline = each
            .checked_mul(addresses as u32 + 1)
            .unwrap_or(Duration::MAX);
        let attempt = match pending.take() {
            Some(attempt) => attempt,
            None => {
                let (tx, rx) = std::sync::mpsc::channel();
                let url = url.clone();
                std::thread::Builder::new()
                    .name("pg-connect".into())
                    .spawn(move || {
                        let _ = tx.send(Self::client(&url));
                    })
                    .map_err(ConnectError::Spawn)?;
                rx
            }
        };
        match attempt.recv_timeout(deadline) {
            Ok(result) => Ok(result?),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                *pending = Some(attempt);
                Err(ConnectError::Unanswered(deadline))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(ConnectError::Unanswered(Duration::ZERO))
            }
        }
    }

    fn client(url: &PgUrl) -> Result<postgres::Client, postgres::Error> {
        match &url.tls {
            None => url.config.connect(postgres::NoTls),
            Some(tls) => url
                .config
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(
                    (**tls).clone(),
                )),
        }
    }

    /// Run `sql` now and after every reconnection.
    pub(crate) fn set_session(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)?;
        self.session = sql.to_string();
        Ok(())
    }

    /// A new connection in place of a lost one, with the session's
    /// settings; prepared statements are prepared again as they are used.
    pub(crate) fn reconnect(&mut self) -> Result<(), ConnectError> {
        let mut client = Self::within_deadline(&self.url, &mut self.pending)?;
        if !self.session.is_empty() {
            client.batch_execute(&self.session)?;
        }
        self.client = client;
        self.statements.clear();
        Ok(())
    }

    /// `BEGIN`, the transaction's id and its server process, in one round
    /// trip: after a connection is lost during `COMMIT`, the id tells
    /// whether it committed ([`PgConn::commit_status`]), and the two name
    /// the process to end if it still waits ([`PgConn::end_abandoned`]).
    pub(crate) fn begin(&mut self, begin: &str) -> Result<PgTx, DbError> {
        let messages = self
            .client
            .simple_query(&format!("{begin}; SELECT txid_current(), pg_backend_pid()"))?;
        messages
            .iter()
            .find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(row) => Some(PgTx {
                    txid: row.get(0)?.parse().ok()?,
                    pid: row.get(1)?.parse().ok()?,
                }),
                _ => None,
            })
            .ok_or_else(|| DbError::Decode("txid_current() returned no id".into()))
    }

    /// What became of transaction `txid`: `Some(true)` committed,
    /// `Some(false)` rolled back (or forgotten), `None` still in progress.
    pub(crate) fn commit_status(&mut self, txid: i64) -> Result<Option<bool>, DbError> {
        let rows = self.query("SELECT txid_status(?1)::text", &[Value::Int(txid)])?;
        let status = rows.first().map(|r| r.opt_string(0)).transpose()?.flatten();
        Ok(match status.as_deref() {
            Some("committed") => Some(true),
            Some("in progress") => None,
            _ => Some(false),
        })
    }

    /// Ends the server process still holding transaction `txid` open
    /// after its client's connection was lost before it sent or the server
    /// read `COMMIT`, so the transaction rolls back now rather than when the
    /// server's keepalive notices the dead socket (hours, by default), its
    /// row locks blocking every writer meanwhile. Only a process whose
    /// transaction is `txid` and that waits for its client is ended; one
    /// already committing finishes, and [`PgConn::commit_status`] tells the
    /// outcome either way. Whether a process was ended.
    pub(crate) fn end_abandoned(&mut self, tx: PgTx) -> Result<bool, DbError> {
        // `txid_current()` is the 32-bit xid with an epoch above it. Both
        // the process and the xid must match: a reconnection that reached
        // another server (a failover) may find the xid reused there.
        let xid = (tx.txid & 0xFFFF_FFFF).to_string();
        let rows = self.query(
            "SELECT pg_terminate_backend(pid)::int::int8 FROM pg_stat_activity \
             WHERE pid::int8 = ?2 AND backend_xid::text = ?1 \
             AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
            &[Value::Text(xid), Value::Int(tx.pid)],
        )?;
        Ok(!rows.is_empty())
    }

    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, DbError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s);
        }
        let s = self.client.prepare(&dollar_placeholders(sql))?;
        // An evicted statement is closed on the server as it drops.
        drop(self.statements.insert(sql, s.clone()));
        Ok(s)
    }

    pub(crate) fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
        let stmt = self.statement(sql)?;
        let mut params = std::borrow::Cow::Borrowed(params);
        while let Some(out) = out_of_column_range(&stmt, &params) {
            // Every integer parameter of our SELECTs is compared with `=`
            // to a column of its type, so a value that type cannot hold
            // matches no row, as NULL matches none: the answer SQLite's
            // 64-bit integers give ("not found", a count of 0), not an
            // error binding it.
            if !sql.trim_start().starts_with("SELECT") {
                return Err(out.error(sql));
            }
            params.to_mut()[out.at] = Value::Null;
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        let rows = self.client.query(&stmt, &refs)?;
        let names: std::rc::Rc<[String]> = stmt
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.try_get::<_, Value>(i))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|values| Row(values, std::rc::Rc::clone(&names)))
                    .map_err(DbError::from)
            })
            .collect()
    }

    pub(crate) fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        let stmt = self.statement(sql)?;
        if let Some(out) = out_of_column_range(&stmt, params) {
            return Err(out.error(sql));
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        Ok(self.client.execute(&stmt, &refs)?)
    }
}

/// The servers (URLs without their passwords) this process has
/// connected to. One of them that now refuses connections is restarting,
/// not a mistyped address: opening it waits as for a lost connection.
static REACHED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn lock_reached() -> std::sync::MutexGuard<'static, BTreeSet<String>> {
    REACHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether this process has connected to `url`'s server and database.
pub(crate) fn was_reached(url: &PgUrl) -> bool {
    lock_reached().contains(&url.shown)
}

/// Whether the connection was refused: nothing listens on the port (a
/// wrong URL, or a server restarting). Not a TLS or authentication
/// failure, which a wait does not mend.
pub(crate) fn is_refused(e: &postgres::Error) -> bool {
    socket_error(e).is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// The socket's error beneath a driver error without a server code, if any.
fn socket_error(e: &postgres::Error) -> Option<&std::io::Error> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        source = s.source();
    }
    None
}

/// Whether opening a connection met a server that is going down or
/// coming up, or that cut the new connection off (a restart, an
/// administrator's `pg_terminate_backend`): worth waiting for. Not a
/// refused TCP connection (nothing listens: more often a wrong URL, unless
/// [`was_reached`]), nor a TLS or authentication failure.
pub(crate) fn is_cut_while_opening(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ]
        .contains(code);
    }
    use std::io::ErrorKind::*;
    socket_error(e).is_some_and(|io| {
        matches!(
            io.kind(),
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
        )
    })
}

/// Whether a connection error is the connection's end (terminated by an
/// administrator, a server restart or crash, a broken socket), after
/// which a new connection may succeed; not a refused statement.
pub(crate) fn is_connection_lost(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return code.code().starts_with("08")
            || [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
                SqlState::TOO_MANY_CONNECTIONS,
            ]
            .contains(code);
    }
    // No server code: the socket failed, or the connection could not be made.
    socket_error(e).is_some()
}

/// A server error with what the server said (severity, SQLSTATE, message,
/// detail, hint); the driver's own text for anything else.
pub(crate) fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            text
        }
    }
}

/// An integer parameter its column's type cannot hold: Optuna's schema
/// has 32-bit `INTEGER` ids, numbers and steps, which PostgreSQL keeps as
/// `int4` (SQLite's are 64-bit).
struct OutOfRange {
    at: usize,
    value: i64,
    ty: Type,
}

impl OutOfRange {
    fn error(&self, sql: &str) -> DbError {
        DbError::Decode(format!(
            "{} does not fit PostgreSQL's {} (parameter {} of `{sql}`): Optuna's schema \
             keeps ids, numbers and steps in 32 bits",
            self.value,
            self.ty,
            self.at + 1
        ))
    }
}

fn out_of_column_range(stmt: &postgres::Statement, params: &[Value]) -> Option<OutOfRange> {
    let mut types = stmt.params().iter().zip(params).enumerate();
    types.find_map(|(at, (ty, value))| {
        let Value::Int(v) = *value else { return None };
        let fits = match *ty {
            Type::INT2 => i16::try_from(v).is_ok(),
            Type::INT4 => i32::try_from(v).is_ok(),
            _ => true,
        };
        (!fits).then(|| OutOfRange {
            at,
            value: v,
            ty: ty.clone(),
        })
    })
}

/// `?1` → `$1`. Our statements hold no `?` inside string literals.
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

fn is_text(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN
    ) || matches!(ty.kind(), Kind::Enum(_))
}

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match (self, ty) {
            (Value::Null, _) => return Ok(IsNull::Yes),
            (Value::Int(v), &Type::INT2) => i16::try_from(*v)?.to_sql(ty, out)?,
            (Value::Int(v), &Type::INT4) => i32::try_from(*v)?.to_sql(ty, out)?,
            (Value::Int(v), &Type::INT8) => v.to_sql(ty, out)?,
            (Value::Int(v), &Type::FLOAT8) => (*v as f64).to_sql(ty, out)?,
            (Value::Real(v), &Type::FLOAT8) => v.to_sql(ty, out)?,
            (Value::Real(v), &Type::FLOAT4) => (*v as f32).to_sql(ty, out)?,
            (Value::Text(v), &Type::TIMESTAMP) => parse_timestamp(v)?.to_sql(&Type::INT8, out)?,
            (Value::Text(v), ty) if is_text(ty) => {
                // Text and enum labels travel as their UTF-8 bytes.
                out.extend_from_slice(v.as_bytes());
                IsNull::No
            }
            (v, ty) => return Err(format!("cannot send {v:?} as {ty}").into()),
        };
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(match *ty {
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::TIMESTAMP => Value::Text(format_timestamp(i64::from_sql(&Type::INT8, raw)?)),
            _ if is_text(ty) => Value::Text(std::str::from_utf8(raw)?.to_string()),
            _ => return Err(format!("unexpected column type {ty}").into()),
        })
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(Value::Null)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Days from 1970-01-01 to the proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// PostgreSQL counts timestamps in microseconds from 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// `YYYY-MM-DD HH:MM:SS[.ffffff]` (or with `T`) as PostgreSQL's microseconds.
/// Every field is checked against the calendar, years against Python's
/// `datetime` (1 to 9999, what Optuna can write or read back): a file may
/// hold any text here, and a time out of range is an error, not an
/// overflow.
pub(crate) fn parse_timestamp(s: &str) -> Result<i64, BoxError> {
    let bad = || -> BoxError {
        format!("bad timestamp `{s}` (want YYYY-MM-DD HH:MM:SS, years 1 to 9999)").into()
    };
    let (date, time) = s.split_once([' ', 'T']).ok_or_else(bad)?;
    let d: Vec<&str> = date.split('-').collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = hms.split(':').collect();
    if d.len() != 3 || t.len() != 3 || frac.len() > 6 {
        return Err(bad());
    }
    // Digits only (no sign), each field within its calendar range.
    let field = |text: &str, range: std::ops::RangeInclusive<i64>| {
        let digits =
            !text.is_empty() && text.len() <= 6 && text.bytes().all(|b| b.is_ascii_digit());
        digits
            .then(|| text.parse::<i64>().ok())
            .flatten()
            .filter(|v| range.contains(v))
            .ok_or_else(bad)
    };
    let (y, m) = (field(d[0], 1..=9999)?, field(d[1], 1..=12)?);
    let day = field(d[2], 1..=days_in_month(y, m))?;
    let secs = field(t[0], 0..=23)? * 3600 + field(t[1], 0..=59)? * 60 + field(t[2], 0..=59)?;
    let micros = if frac.is_empty() {
        0
    } else {
        field(frac, 0..=999_999)? * 10_i64.pow(6 - frac.len() as u32)
    };
    let days = days_from_civil(y, m, day) - PG_EPOCH_DAYS;
    Ok(days * MICROS_PER_DAY + secs * 1_000_000 + micros)
}

/// Days in month `m` (1 to 12) of proleptic Gregorian year `y`.
fn days_in_month(y: i64, m: i64) -> i64 {
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// PostgreSQL's microseconds as `YYYY-MM-DD HH:MM:SS.ffffff`, the form
/// Optuna's SQLite files hold.
fn format_timestamp(micros: i64) -> String {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let rest = micros.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days + PG_EPOCH_DAYS);
    let secs = rest / 1_000_000;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        rest % 1_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway server and the URL of its new database `db`; `None`
    /// (skip) where none can be started outside CI.
    #[cfg(feature = "testing")]
    fn test_server(db: &str) -> Option<(crate::pg_server::PgServer, PgUrl)> {
        match crate::pg_server::PgServer::start() {
            Ok(server) => {
                let url = server.create_database(db).unwrap();
                Some((server, parse_url(&url).unwrap().unwrap()))
            }
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
                panic!("CI must run the PostgreSQL tests, but no server could be started: {e}")
            }
            Err(e) => {
                eprintln!("skipping: no PostgreSQL server could be started: {e}");
                None
            }
        }
    }

    /// Statements whose text carries ids (a reader's trials to read again)
    /// are new texts for as long as a study grows; the connection keeps at
    /// most the cache's capacity of them, here and on the server.
    #[cfg(feature = "testing")]
    #[test]
    fn a_connection_keeps_a_bounded_number_of_prepared_statements() {
        use crate::statement_cache::CAPACITY;
        let Some((_server, url)) = test_server("statements") else {
            return;
        };
        let mut conn = PgConn::connect(&url).unwrap();
        for i in 0..3 * CAPACITY {
            let rows = conn.query(&format!("SELECT {i}::int8 AS n"), &[]).unwrap();
            assert_eq!(rows.len(), 1);
        }
        let kept: i64 = conn
            .client
            .query_one("SELECT count(*) FROM pg_prepared_statements", &[])
            .unwrap()
            .get(0);
        assert!(
            kept as usize <= CAPACITY + 1,
            "{kept} statements on the server"
        );
        // The one used last is still kept, and still answers.
        let again = conn
            .query(&format!("SELECT {}::int8 AS n", 3 * CAPACITY - 1), &[])
            .unwrap();
        assert_eq!(again.len(), 1);
    }

    /// A transaction whose client is gone before its `COMMIT` reached the
    /// server is ended from another connection and reads as rolled back;
    /// another client's open transaction is left alone.
    #[cfg(feature = "testing")]
    #[test]
    fn a_transaction_cut_off_before_commit_is_ended_and_rolls_back() {
        let Some((_server, url)) = test_server("abandoned") else {
            return;
        };
        let mut cut_off = PgConn::connect(&url).unwrap();
        let mut bystander = PgConn::connect(&url).unwrap();
        let mut asker = PgConn::connect(&url).unwrap();
        bystander.begin("BEGIN").unwrap();
        let tx = cut_off.begin("BEGIN").unwrap();
        let txid = tx.txid;
        cut_off
            .client
            .batch_execute("CREATE TABLE t (x int)")
            .unwrap();
        assert_eq!(asker.commit_status(txid).unwrap(), None);
        // The xid alone on another process (as after a failover) is not it.
        let elsewhere = PgTx {
            pid: tx.pid + 1,
            ..tx
        };
        assert!(!asker.end_abandoned(elsewhere).unwrap());
        assert_eq!(asker.commit_status(txid).unwrap(), None);
        assert!(asker.end_abandoned(tx).unwrap());
        let start = std::time::Instant::now();
        let outcome = loop {
            if let Some(done) = asker.commit_status(txid).unwrap() {
                break done;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "still in progress"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!outcome, "an ended transaction does not commit");
        assert!(cut_off.client.batch_execute("COMMIT").is_err());
        // The other open transaction is not touched.
        bystander.client.batch_execute("SELECT 1").unwrap();
        bystander.client.batch_execute("COMMIT").unwrap();
        // And nothing is ended twice.
        assert!(!asker.end_abandoned(tx).unwrap());
    }

    #[test]
    fn timestamps_round_trip() {
        for s in [
            "2000-01-01 00:00:00.000000",
            "1999-12-31 23:59:59.999999",
            "2026-11-25 13:45:07.123456",
            "2400-02-29 12:00:00.000001",
        ] {
            assert_eq!(format_timestamp(parse_timestamp(s).unwrap()), s);
        }
        assert_eq!(parse_timestamp("2000-01-01 00:00:01").unwrap(), 1_000_000);
        assert_eq!(
            parse_timestamp("2000-01-02T00:00:00.5").unwrap(),
            MICROS_PER_DAY + 500_000
        );
        assert!(parse_timestamp("2000-01-01").is_err());
        assert!(parse_timestamp("2000-01-01 00:00:00.1234567").is_err());
    }

    #[test]
    fn timestamps_out_of_the_calendar_are_errors_not_overflows() {
        for s in [
            "300000-01-01 00:00:00",
            "9223372036854775807-01-01 00:00:00",
            "0000-01-01 00:00:00",
            "2001-13-01 00:00:00",
            "2001-02-29 00:00:00",
            "2001-04-31 00:00:00",
            "2001-01-01 24:00:00",
            "2001-01-01 00:60:00",
            "2001-01-01 00:00:60",
            "2001-01-01 99999999999:00:00",
            "-2001-01-01 00:00:00",
            "2001-+1-01 00:00:00",
            "2001-01-01 00:00:00.-1",
        ] {
            let e = parse_timestamp(s).unwrap_err();
            assert!(e.to_string().contains(s), "{e}");
        }
        assert!(parse_timestamp("2000-02-29 23:59:59.999999").is_ok());
        assert!(parse_timestamp("9999-12-31 23:59:59.999999").is_ok());
        assert!(parse_timestamp("0001-01-01 00:00:00").is_ok());
    }

    #[test]
    fn passwords_never_show() {
        use crate::redact_url;
        for (url, shown) in [
            (
                "postgresql://me:s3cret@db:5432/x?sslmode=require",
                "postgresql://me:***@db:5432/x?sslmode=require",
            ),
            ("postgresql://me:p@ss:w@rd@db/x", "postgresql://me:***@db/x"),
            (
                "postgres://db/x?user=me&password=s3cret&sslmode=verify-full",
                "postgres://db/x?user=me&password=***&sslmode=verify-full",
            ),
            ("sqlite:///study.db", "sqlite:///study.db"),
            (
                "host=db password=s3cret user=me",
                "host=db password=*** user=me",
            ),
            ("postgresql://me@db/x", "postgresql://me@db/x"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        let e = crate::StorageUrl::parse("postgresql://me:s3cret@db").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn placeholders_and_urls() {
        assert_eq!(
            dollar_placeholders("a = ?1 AND b = ?12"),
            "a = $1 AND b = $12"
        );
        let u = parse_url("postgresql+psycopg2://me:secret@db.example:5433/optuna")
            .unwrap()
            .unwrap();
        assert_eq!(u.shown(), "postgresql://me@db.example:5433/optuna");
        assert_eq!(u.config.get_password(), Some(&b"secret"[..]));
        assert!(parse_url("sqlite:///x.db").is_none());
        assert!(parse_url("postgresql://me@host").unwrap().is_err());
        assert!(parse_url("postgresql:///db").unwrap().is_err());
        // The driver's reason, not only "invalid connection string".
        let e = parse_url("postgresql://me@h/db?foo=bar")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("foo"), "{e}");
    }
}

//! Opening a storage (an SQLite file or a PostgreSQL database), and the
//! transaction discipline every write uses.
//!
//! On PostgreSQL the server arbitrates: writes run in READ COMMITTED
//! transactions that lock the study row (`SELECT ... FOR UPDATE`, as
//! Optuna's own trial creation does) before numbering, claiming, counting or
//! failing its trials, and the trial row before changing a trial; lock
//! timeouts, deadlocks, serialization failures and concurrent inserts of the
//! same key are rolled back and retried like SQLITE_BUSY below.
//!
//! Many processes write one SQLite file. SQLite in WAL mode lets readers run beside
//! one writer; a busy timeout makes a writer wait for the lock inside SQLite;
//! every read-modify-write runs in `BEGIN IMMEDIATE` (the write lock is taken
//! up front, so two writers never both read then collide on upgrade); and a
//! transaction that still meets SQLITE_BUSY/LOCKED is rolled back and retried
//! with jittered exponential backoff. No "database is locked" reaches callers
//! unless the lock is held longer than [`OpenOptions::max_wait`].

use crate::db::{DbError, Tx, Value};
use crate::error::{Result, StoreError, from_db, from_sqlite};
use crate::pg::{PgConn, PgTx, PgUrl};
use crate::schema;
use rusqlite::{Connection, OpenFlags};
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How hard a commit is pushed to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: every commit is fsynced; a committed trial
    /// survives process kills, OS crashes and power loss. The default.
    Full,
    /// `synchronous=NORMAL`: a committed trial survives process kills (the
    /// case that matters for OOM-killed workers); the last commits may roll
    /// back after an OS crash or power loss. Never corrupts the file.
    Normal,
}

/// How a storage is opened.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Create the file and Optuna's schema when the file is missing or empty.
    pub create: bool,
    /// Open read-only: no pragma, journal-mode change or write ever touches
    /// the file (for listing and export), except that a transaction a dead
    /// writer left half done is rolled back first, as any SQLite reader
    /// must. Writes then fail with `Sqlite`.
    pub read_only: bool,
    /// How hard each commit is pushed to disk; [`Durability::Full`] by default.
    pub durability: Durability,
    /// SQLite's own busy timeout per lock attempt.
    pub busy_timeout: Duration,
    /// Total time one operation keeps retrying SQLITE_BUSY before `Busy`.
    pub max_wait: Duration,
    /// How long an operation keeps trying after the storage stopped
    /// answering (PostgreSQL: the connection was lost, and new ones are
    /// refused while the server restarts; SQLite: I/O errors) before it
    /// fails with [`StoreError::Unavailable`]. Every attempt is logged.
    pub reconnect_for: Duration,
    /// The longest pause between two such attempts (they start at 50 ms
    /// and double).
    pub max_backoff: Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            create: true,
            read_only: false,
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(5),
            max_wait: Duration::from_secs(120),
            reconnect_for: Duration::from_secs(15 * 60),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// One connection to one storage: an SQLite file or a PostgreSQL database.
/// Cheap to open; open one per process or thread (it is `Send`, not `Sync`).
pub struct Storage {
    backend: Backend,
    /// The file, or for a server the URL without its password: named in
    /// every error.
    pub(crate) path: PathBuf,
    max_wait: Duration,
    reconnect_for: Duration,
    max_backoff: Duration,
    /// When the storage last came back after an outage.
    recovered_at: Cell<Option<Instant>>,
    /// I/O errors still to stage (see [`Storage::inject_io_errors`]).
    #[cfg(feature = "testing")]
    injected_io_errors: Cell<u32>,
}

enum Backend {
    Sqlite(SqliteConn),
    Pg(Box<RefCell<PgConn>>),
}

struct SqliteConn {
    conn: Connection,
    /// The file was in rollback-journal mode when this writer opened it
    /// (a writer that finds it marked [`SWITCHED_TO_WAL`] learns so when it
    /// closes).
    restore_rollback: bool,
    /// The connection may write (not a read-only open).
    writer: bool,
    /// The file is read with `immutable=1` (see [`Storage::read_unlocked`]);
    /// each read opens its own connection, with this busy timeout.
    unlocked_reads: Option<Duration>,
}

/// Writers work in WAL mode (readers beside one writer, no fsync of a
/// rollback journal per commit). A file that came in rollback-journal mode
/// (Optuna's default) is returned to it by the last writer to close, so
/// writing with memtune does not switch someone's Optuna file to WAL for
/// good (a WAL file can only be read by someone allowed to create its
/// `-shm` beside it; memtune's own read-only opens cope, Optuna's do not).
/// SQLite allows the switch only when no other connection has the file
/// open: while others work it fails at once and the file stays in WAL mode
/// for them. A writer that switches such a file to WAL marks it so
/// ([`SWITCHED_TO_WAL`]), and every writer that finds the mark when it
/// closes restores the file too, so whichever writer closes last returns
/// it to rollback mode.
impl Drop for SqliteConn {
    fn drop(&mut self) {
        if !self.writer {
            return;
        }
        let _ = self.conn.busy_timeout(Duration::ZERO);
        // Asked now, not at open: a writer that opened while another was
        // between its switch to WAL and its mark finds the mark by now.
        let marked = user_version(&self.conn) == Ok(SWITCHED_TO_WAL.into());
        if !(self.restore_rollback || marked) {
            return;
        }
        let mode: rusqlite::Result<String> =
            self.conn
                .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0));
        if mode.is_ok_and(|m| m.eq_ignore_ascii_case("delete")) {
            // Left in place when this fails: in rollback mode the mark
            // only says what the mode already says.
            let _ = clear_mark(&self.conn);
        }
    }
}

/// Clears [`SWITCHED_TO_WAL`] if the file is still in rollback mode, in
/// one transaction with that check: a writer that switched it to WAL again
/// meanwhile keeps its mark.
fn clear_mark(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let clear = || -> rusqlite::Result<()> {
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if mode.eq_ignore_ascii_case("delete") && user_version(conn)? == i64::from(SWITCHED_TO_WAL)
        {
            conn.execute_batch("PRAGMA user_version = 0")?;
        }
        Ok(())
    };
    match clear() {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// SQLite's `user_version` while a file that came in rollback-journal mode
/// is in WAL mode for memtune's writers ("mtwl"). Optuna's schema does not
/// use `user_version`; a file with a value of its own there is not marked.
const SWITCHED_TO_WAL: i32 = 0x6d74_776c;

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("path", &self.path).finish()
    }
}

/// Where a storage URL points.
#[derive(Clone, Debug)]
pub enum StorageUrl {
    /// `sqlite:///PATH`: a file.
    Sqlite(PathBuf),
    /// `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`: a database on a server.
    Postgres(Box<PgUrl>),
}

impl StorageUrl {
    /// Parse Optuna's URL forms: `sqlite:///relative.db`,
    /// `sqlite:////abs/x.db`, `postgresql://user[:password]@host[:port]/db`
    /// (also `postgres://` and SQLAlchemy's `postgresql+psycopg2://`).
    pub fn parse(url: &str) -> Result<StorageUrl> {
        match crate::pg::parse_url(url) {
            Some(Ok(pg)) => Ok(StorageUrl::Postgres(Box::new(pg))),
            Some(Err(reason)) => Err(StoreError::InvalidUrl {
                url: redact_url(url),
                reason,
            }),
            None => parse_sqlite_url(url).map(StorageUrl::Sqlite),
        }
    }
}

/// `url` fit to print or log: a password in it (`user:PASSWORD@host`, or a
/// `password=` parameter) replaced by `***`, everything else as given.
/// Works on any text, a URL that does not parse included.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_params(url);
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    format!("{scheme}://{authority}{}", redact_params(tail))
}

/// `password=VALUE` (in a query string or a key=value connection string)
/// with the value replaced.
fn redact_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password=") {
        let start = at + "password=".len();
        out.push_str(&rest[..start]);
        out.push_str("***");
        let end = rest[start..]
            .find(['&', ' ', ';'])
            .map_or(rest.len(), |e| start + e);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Turn Optuna's URL form `sqlite:///relative.db` or `sqlite:////abs/x.db`
/// into a path. A `%XX` escape in the path is an error: SQLAlchemy 2.1
/// decodes it and 1.4 and 2.0 do not, so `sqlite:///my%20study.db` names a
/// file Optuna may not open, either way. So are query parameters
/// (SQLAlchemy's `?mode=ro`, `?timeout=30`): this crate opens the file
/// itself, with its own locking and waits, and honours none of them. Any
/// other scheme is an error.
pub fn parse_sqlite_url(url: &str) -> Result<PathBuf> {
    let bad = |reason: &str| StoreError::InvalidUrl {
        url: redact_url(url),
        reason: reason.to_string(),
    };
    let Some(rest) = url.strip_prefix("sqlite:///") else {
        return Err(if url.contains("://") {
            bad("only sqlite:///PATH and postgresql://USER@HOST[:PORT]/DB storages are supported")
        } else {
            bad("expected sqlite:///PATH (e.g. sqlite:///study.db or sqlite:////abs/study.db)")
        });
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() {
        return Err(bad(
            "the path after sqlite:/// is empty (in-memory storages are not persistent)",
        ));
    }
    if path == ":memory:" {
        return Err(bad("in-memory storages are not persistent"));
    }
    let escape = path
        .as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit());
    if escape {
        return Err(bad(
            "the path has a %-escape, which Optuna's SQLAlchemy decodes in some versions \
             (2.1) and not in others (1.4, 2.0), so the two could open different files: \
             write the path's characters as they are",
        ));
    }
    if !query.is_empty() {
        return Err(bad(&format!(
            "URL parameters (`?{query}`) are not supported: the storage opens the file \
             itself, with its own locking and waits; remove them"
        )));
    }
    Ok(PathBuf::from(path))
}

impl Storage {
    fn new(backend: Backend, path: PathBuf, opts: &OpenOptions) -> Storage {
        Storage {
            backend,
            path,
            max_wait: opts.max_wait,
            reconnect_for: opts.reconnect_for,
            max_backoff: opts.max_backoff,
            recovered_at: Cell::new(None),
            #[cfg(feature = "testing")]
            injected_io_errors: Cell::new(0),
        }
    }

    /// For tests (feature `testing`): the next `n` write transactions on
    /// an SQLite storage fail with SQLITE_IOERR before they begin, as a
    /// storage hiccup would make them fail.
    #[cfg(feature = "testing")]
    pub fn inject_io_errors(&self, n: u32) {
        self.injected_io_errors.set(n);
    }

    fn staged_io_error(&self) -> Result<(), DbError> {
        #[cfg(feature = "testing")]
        if self.injected_io_errors.get() > 0 && !self.is_postgres() {
            self.injected_io_errors
                .set(self.injected_io_errors.get() - 1);
            return Err(DbError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some("disk I/O error (injected)".into()),
            )));
        }
        Ok(())
    }

    /// When the storage last answered again after an outage (a lost
    /// PostgreSQL connection re-established, SQLite's I/O errors over);
    /// `None` if it never failed. Someone judging other processes'
    /// heartbeats waits a grace period after this: their writers were cut
    /// off too.
    pub fn recovered_at(&self) -> Option<Instant> {
        self.recovered_at.get()
    }

    /// Open `path`, creating the file and schema if it is missing or empty.
    pub fn open(path: impl AsRef<Path>) -> Result<Storage> {
        Storage::open_with(path, &OpenOptions::default())
    }

    /// Open an existing storage; a missing file is `NoSuchFile`, never created.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Storage> {
        let opts = OpenOptions {
            create: false,
            ..OpenOptions::default()
        };
        Storage::open_with(path, &opts)
    }

    /// Open a storage URL (see [`StorageUrl::parse`]). On PostgreSQL the
    /// database must exist (as for Optuna); `create` creates Optuna's
    /// tables in it when it has none.
    pub fn open_url(url: &str, opts: &OpenOptions) -> Result<Storage> {
        match StorageUrl::parse(url)? {
            StorageUrl::Sqlite(path) => Storage::open_with(path, opts),
            StorageUrl::Postgres(pg) => Storage::open_postgres(&pg, opts),
        }
    }

    /// Open a PostgreSQL database. The session waits at most
    /// `busy_timeout` for each row lock (`lock_timeout`) and retries whole
    /// transactions for up to `max_wait`; `read_only` makes every
    /// transaction read-only; [`Durability::Normal`] turns off
    /// `synchronous_commit` (a server crash may lose the last commits).
    ///
    /// A server that answers but is starting up or shutting down, or that
    /// cuts the new connection off, is waited for as a lost connection is
    /// (`reconnect_for`, logged backoff); so is one that refuses the
    /// connection once such a wait has begun or once this process has
    /// connected to it before (it is restarting). A server never reached
    /// where nothing listens, and TLS or authentication failures, are
    /// immediate errors, as libpq's are.
    pub fn open_postgres(url: &PgUrl, opts: &OpenOptions) -> Result<Storage> {
        let mut outage: Option<Outage> = None;
        loop {
            match Storage::try_open_postgres(url, opts) {
                Err(StoreError::Postgres { path, source })
                    if crate::pg::is_cut_while_opening(&source)
                        || (crate::pg::is_refused(&source)
                            && (outage.is_some() || crate::pg::was_reached(url))) =>
                {
                    let o = outage.get_or_insert_with(Outage::new);
                    o.attempts += 1;
                    if o.since.elapsed() >= opts.reconnect_for {
                        return Err(StoreError::Postgres { path, source });
                    }
                    let wait = jitter(o.backoff);
                    tracing::warn!(
                        storage = %path.display(),
                        attempt = o.attempts,
                        "cannot open the storage ({}); retrying in {:.2} s",
                        crate::pg::describe(&source),
                        wait.as_secs_f64()
                    );
                    std::thread::sleep(wait);
                    o.backoff = (o.backoff * 2).min(opts.max_backoff.max(Duration::from_millis(1)));
                }
                other => return other,
            }
        }
    }

    fn try_open_postgres(url: &PgUrl, opts: &OpenOptions) -> Result<Storage> {
        let path = PathBuf::from(url.shown());
        let conn = PgConn::connect(url).map_err(|e| e.into_store_error(&path))?;
        let storage = Storage::new(Backend::Pg(Box::new(RefCell::new(conn))), path, opts);
        let mut session = format!(
            "SET lock_timeout = {}; ",
            opts.busy_timeout.as_millis().max(1)
        );
        if opts.read_only {
            session.push_str("SET default_transaction_read_only = on; ");
        }
        if opts.durability == Durability::Normal {
            session.push_str("SET synchronous_commit = off; ");
        }
        if let Backend::Pg(conn) = &storage.backend {
            conn.borrow_mut()
                .set_session(&session)
                .map_err(|e| from_db(&storage.path, e.into()))?;
        }
        if storage.check_existing(opts)? {
            storage.create_schema()?;
        }
        Ok(storage)
    }

    /// Open with explicit options.
    ///
    /// An existing file is checked by reading only (SQLite header, Optuna's
    /// tables, version rows) before any pragma or write touches it, so a file
    /// that is not ours is left byte-for-byte unchanged (but for the rollback
    /// of a dead writer's transaction, which SQLite does on any read). A
    /// file another process holds locked is waited for up to `max_wait`, as
    /// a transaction would be.
    pub fn open_with(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<Storage> {
        let path = path.as_ref();
        let start = Instant::now();
        let mut backoff = Duration::from_millis(20);
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Storage::try_open_with(path, opts) {
                // A reader in a read-only folder finds the side files of a
                // writer that has just closed gone: at rest now, it opens
                // the file so on the next attempt.
                Err(e)
                    if e.is_locked()
                        || (e.is_read_only_folder() && opts.read_only && wal_at_rest(path)) =>
                {
                    if start.elapsed() >= opts.max_wait {
                        return Err(StoreError::Busy {
                            path: path.to_path_buf(),
                            attempts,
                        });
                    }
                    std::thread::sleep(jitter(backoff));
                    backoff = (backoff * 2).min(opts.max_backoff.max(Duration::from_millis(1)));
                }
                other => return other,
            }
        }
    }

    fn try_open_with(path: &Path, opts: &OpenOptions) -> Result<Storage> {
        let path = path.to_path_buf();
        let len = match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => return Err(StoreError::IsADirectory { path }),
            // A FIFO or a device has no length to tell an empty file by, and
            // SQLite cannot keep a database in it.
            Ok(m) if !m.is_file() => {
                return Err(StoreError::NotAFile {
                    path,
                    kind: special_file_kind(&m),
                });
            }
            Ok(m) => Some(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::Io { path, source: e }),
        };
        let fresh = len.unwrap_or(0) == 0;
        if fresh && (!opts.create || opts.read_only) {
            return Err(match len {
                None => StoreError::NoSuchFile { path },
                // Created (by `touch`, or a runner about to write the
                // schema) but empty: there, and not yet a storage.
                Some(_) => StoreError::EmptyDatabase { path },
            });
        }
        let mut flags = if opts.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if len.is_none() && !opts.read_only {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        if opts.read_only && !fresh {
            roll_back_a_hot_journal(&path, opts.busy_timeout);
        }
        // A WAL file is read through its `-shm` index, which SQLite creates
        // beside the file (and `-wal` with it) if no writer has it open.
        let at_rest = opts.read_only && wal_at_rest(&path);
        let unlocked = at_rest && !may_write_beside(&path);
        let conn = if unlocked {
            // Creating them is impossible in a read-only folder, and
            // elsewhere they would stay behind (a read-only connection
            // cannot remove them), owned by this user, locking the file's
            // owner out. So the file is read as it stands, with no lock,
            // and each read is checked against writers that come meanwhile.
            open_immutable(&path)
        } else if at_rest {
            // One who may write the file takes part in WAL's locking as any
            // reader does, so no writer checkpoints under its reads; as the
            // last connection to close it removes the `-wal` and `-shm` it
            // made, and the file is left as it was. `query_only` keeps the
            // storage read-only.
            Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .and_then(|c| c.execute_batch("PRAGMA query_only = ON").map(|()| c))
        } else {
            Connection::open_with_flags(&path, flags)
        }
        .map_err(|e| from_sqlite(&path, e))?;
        conn.busy_timeout(opts.busy_timeout)
            .map_err(|e| from_sqlite(&path, e))?;
        // Asked of SQLite, not read from the file: closing a descriptor of
        // the file would drop every POSIX lock this process holds on it,
        // its other connections' included (see `wal_at_rest`).
        let restore_rollback = !opts.read_only
            && !fresh
            && conn
                .query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))
                .map_err(|e| from_sqlite(&path, e))?
                != "wal";
        let storage = Storage::new(
            Backend::Sqlite(SqliteConn {
                conn,
                restore_rollback,
                writer: !opts.read_only,
                unlocked_reads: unlocked.then_some(opts.busy_timeout),
            }),
            path,
            opts,
        );
        // Read-only checks first, so a file that is not ours is left
        // byte-for-byte unchanged. An empty SQLite file has no tables.
        let empty = storage.check_existing(opts)?;
        if opts.read_only {
            return Ok(storage);
        }
        storage.set_pragmas(opts.durability)?;
        if empty {
            storage.create_schema()?;
        }
        Ok(storage)
    }

    /// Verify Optuna's schema by reading only; `Ok(true)` for a database
    /// with no tables that `opts` allow us to create the schema in.
    fn check_existing(&self, opts: &OpenOptions) -> Result<bool> {
        let empty = schema::is_empty(self.tx(), &self.path)?;
        if !empty {
            schema::verify(self.tx(), &self.path)?;
        } else if !opts.create || opts.read_only {
            return Err(StoreError::EmptyDatabase {
                path: self.path.clone(),
            });
        }
        Ok(empty)
    }

    /// Create the schema in one write transaction that re-checks emptiness:
    /// another process may be creating it at the same moment.
    fn create_schema(&self) -> Result<()> {
        self.write(|tx| {
            schema::lock_creation(tx)?;
            if schema::is_empty(tx, &self.path)? {
                schema::create(tx, &self.path)?;
            }
            Ok(())
        })?;
        schema::verify(self.tx(), &self.path)
    }

    fn set_pragmas(&self, durability: Durability) -> Result<()> {
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        let Backend::Sqlite(sqlite) = &self.backend else {
            return Ok(());
        };
        let conn = &sqlite.conn;
        self.retry_tx(|| {
            let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                // e.g. a file system without shared memory; still correct, only slower.
                warn_not_wal(&self.path, &mode);
            } else if sqlite.restore_rollback && user_version(conn)? == 0 {
                // After the switch, not before: a last writer restoring
                // the file in between clears a mark set before it.
                conn.execute_batch(&format!("PRAGMA user_version = {SWITCHED_TO_WAL}"))?;
            }
            conn.execute_batch(&format!(
                "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON;"
            ))?;
            Ok(())
        })
    }

    /// The file this storage reads and writes; for a PostgreSQL storage,
    /// its URL without the password.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this storage is a PostgreSQL database (else an SQLite file).
    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Pg(_))
    }

    /// The raw SQLite connection, for checks such as `PRAGMA
    /// integrity_check`; `None` on PostgreSQL.
    pub fn connection(&self) -> Option<&Connection> {
        match &self.backend {
            Backend::Sqlite(s) => Some(&s.conn),
            Backend::Pg(_) => None,
        }
    }

    /// Run SQL statements without parameters, outside any transaction of
    /// ours, on either backend (maintenance and tests).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        self.tx().batch(sql).map_err(|e| from_db(&self.path, e))
    }

    /// Run a query without parameters and return its rows, every value as
    /// text (`None` for NULL), on either backend (maintenance and tests).
    pub fn query_text(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        let rows = self
            .tx()
            .query(sql, &[])
            .map_err(|e| from_db(&self.path, e))?;
        Ok(rows
            .into_iter()
            .map(|r| {
                r.0.into_iter()
                    .map(|v| match v {
                        Value::Null => None,
                        Value::Int(i) => Some(i.to_string()),
                        Value::Real(f) => Some(f.to_string()),
                        Value::Text(t) => Some(t),
                    })
                    .collect()
            })
            .collect())
    }

    /// The connection as a transaction handle.
    pub(crate) fn tx(&self) -> Tx<'_> {
        match &self.backend {
            Backend::Sqlite(s) => Tx::Sqlite(&s.conn),
            Backend::Pg(c) => Tx::Pg(c),
        }
    }

    /// Run `f` in a write transaction and commit, retrying the whole
    /// transaction on lock conflicts. On SQLite that is `BEGIN IMMEDIATE`
    /// (the file's write lock, taken up front); on PostgreSQL a READ
    /// COMMITTED transaction in which the callers lock the rows they decide
    /// on (`SELECT ... FOR UPDATE`, as Optuna does). `f` may run more than
    /// once, so it must not have effects outside the database.
    ///
    /// A connection lost before `COMMIT` rolled the transaction back, so it
    /// runs again on a new one. Lost during `COMMIT`, the transaction may
    /// or may not have committed: the server is asked (`txid_status`), so
    /// a committed one is neither lost nor applied twice.
    pub(crate) fn write<T>(&self, mut f: impl FnMut(Tx<'_>) -> Result<T, TxError>) -> Result<T> {
        let tx = self.tx();
        // Named, not left to the database's default: under REPEATABLE READ
        // or SERIALIZABLE a transaction's snapshot predates the row lock it
        // then waits for, and numbering reads a stale maximum.
        let begin = if tx.is_postgres() {
            "BEGIN ISOLATION LEVEL READ COMMITTED"
        } else {
            "BEGIN IMMEDIATE"
        };
        self.retry_tx(|| {
            self.staged_io_error()?;
            let pg_tx = tx.begin(begin)?;
            match f(tx) {
                Ok(v) => match tx.batch("COMMIT") {
                    Ok(()) => Ok(v),
                    Err(e) if e.is_connection_lost() && pg_tx.is_some() => {
                        if self.committed(pg_tx.expect("checked"), &e)? {
                            Ok(v)
                        } else {
                            Err(TxError::Db(e))
                        }
                    }
                    Err(e) => {
                        let _ = tx.batch("ROLLBACK");
                        Err(TxError::Db(e))
                    }
                },
                Err(e) => {
                    let _ = tx.batch("ROLLBACK");
                    Err(e)
                }
            }
        })
    }

    /// Run `f` inside a read transaction (one consistent snapshot).
    pub(crate) fn read<T>(&self, mut f: impl FnMut(Tx<'_>) -> Result<T, TxError>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite(SqliteConn {
                unlocked_reads: Some(busy_timeout),
                ..
            }) => self.read_unlocked(*busy_timeout, f),
            _ => self.read_on(self.tx(), &mut f),
        }
    }

    /// Run `f` inside a read transaction on `tx`.
    fn read_on<T>(
        &self,
        tx: Tx<'_>,
        f: &mut impl FnMut(Tx<'_>) -> Result<T, TxError>,
    ) -> Result<T> {
        let begin = if tx.is_postgres() {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        } else {
            "BEGIN DEFERRED"
        };
        self.retry_tx(|| {
            tx.batch(begin)?;
            let out = f(tx);
            let _ = tx.batch("COMMIT");
            out
        })
    }

    /// A read of a file opened with `immutable=1`, which takes no lock:
    /// SQLite trusts such a file never to change, so a writer that opens
    /// it meanwhile could checkpoint its commits into it under the read
    /// (a read mixing two commits, or a "malformed" page), and pages an
    /// earlier read cached could be stale. So each read runs on a new
    /// connection, and is kept only if the file looks the same after it as
    /// before ([`FileStamp`]); otherwise it runs again. A file that a writer
    /// has open (its `-wal` is there) is read through WAL's own locking.
    fn read_unlocked<T>(
        &self,
        busy_timeout: Duration,
        mut f: impl FnMut(Tx<'_>) -> Result<T, TxError>,
    ) -> Result<T> {
        let start = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let before = FileStamp::at_rest(&self.path);
            let out = match before {
                Some(_) => open_immutable(&self.path),
                None => Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                ),
            }
            .and_then(|c| c.busy_timeout(busy_timeout).map(|()| c))
            .map_err(|e| from_sqlite(&self.path, e))
            .and_then(|conn| self.read_on(Tx::Sqlite(&conn), &mut f));
            let after = FileStamp::at_rest(&self.path);
            // Read at rest: kept if nothing changed. Read beside a writer:
            // kept unless it failed because the writer left meanwhile
            // (its side files gone, which a reader in a read-only folder
            // cannot make again); at rest now, it is read so.
            let kept = match before {
                Some(_) => after == before,
                None => out.is_ok() || after.is_none(),
            };
            if kept {
                return out;
            }
            if start.elapsed() >= self.max_wait {
                return Err(StoreError::Busy {
                    path: self.path.clone(),
                    attempts,
                });
            }
            tracing::debug!(
                storage = %self.path.display(),
                "the file changed during a read; reading it again"
            );
        }
    }

    fn retry_tx<T>(&self, mut f: impl FnMut() -> Result<T, TxError>) -> Result<T> {
        let start = Instant::now();
        let mut attempts = 0u32;
        let mut backoff = Duration::from_millis(1);
        let mut outage: Option<Outage> = None;
        loop {
            attempts += 1;
            match f() {
                Ok(v) => {
                    if let Some(o) = outage {
                        self.recovered(&o);
                    }
                    return Ok(v);
                }
                Err(TxError::Store(e)) => return Err(e.in_storage(&self.path)),
                Err(TxError::Db(e)) if e.is_connection_lost() || e.is_io_error() => {
                    let o = outage.get_or_insert_with(Outage::new);
                    self.recover(o, &e)?;
                }
                Err(TxError::Db(e)) => {
                    if !e.is_retryable() {
                        return Err(from_db(&self.path, e));
                    }
                    if start.elapsed() >= self.max_wait {
                        return Err(StoreError::Busy {
                            path: self.path.clone(),
                            attempts,
                        });
                    }
                    std::thread::sleep(jitter(backoff));
                    backoff = (backoff * 2).min(Duration::from_millis(100));
                }
            }
        }
    }

    /// After `cause` (a lost connection or an I/O error): wait the
    /// outage's next backoff, then, on PostgreSQL, connect again, until a
    /// connection is made or `reconnect_for` has passed since the outage
    /// began. Each attempt is logged.
    fn recover(&self, o: &mut Outage, cause: &DbError) -> Result<()> {
        loop {
            o.attempts += 1;
            if o.attempts == 1 {
                tracing::warn!(
                    storage = %self.path.display(),
                    "storage unavailable ({cause}); retrying for up to {:?}",
                    self.reconnect_for
                );
            }
            if o.since.elapsed() >= self.reconnect_for {
                return Err(StoreError::Unavailable {
                    path: self.path.clone(),
                    seconds: o.since.elapsed().as_secs_f64(),
                    attempts: o.attempts,
                    cause: cause.to_string(),
                });
            }
            let wait = jitter(o.backoff);
            tracing::info!(
                storage = %self.path.display(),
                attempt = o.attempts,
                "retrying in {:.2} s",
                wait.as_secs_f64()
            );
            std::thread::sleep(wait);
            o.backoff = (o.backoff * 2).min(self.max_backoff.max(Duration::from_millis(1)));
            let Backend::Pg(conn) = &self.backend else {
                return Ok(());
            };
            match conn.borrow_mut().reconnect() {
                Ok(()) => return Ok(()),
                Err(e) if e.may_pass() => {
                    let e = e.into_store_error(&self.path);
                    tracing::info!(storage = %self.path.display(), "reconnecting failed: {e}");
                }
                Err(e) => return Err(e.into_store_error(&self.path)),
            }
        }
    }

    fn recovered(&self, o: &Outage) {
        self.recovered_at.set(Some(Instant::now()));
        tracing::warn!(
            storage = %self.path.display(),
            "storage available again after {:.1} s ({} attempt(s))",
            o.since.elapsed().as_secs_f64(),
            o.attempts
        );
    }

    /// Whether transaction `pg_tx`, whose `COMMIT` met a lost connection,
    /// committed: asked on a new connection once the old one's server
    /// process has finished with it. One still waiting for the `COMMIT`
    /// that never came is ended ([`PgConn::end_abandoned`]), so the answer
    /// comes at once; one that stays in progress past `reconnect_for` is
    /// the storage unavailable.
    fn committed(&self, pg_tx: PgTx, cause: &DbError) -> Result<bool, TxError> {
        let txid = pg_tx.txid;
        let Backend::Pg(conn) = &self.backend else {
            return Ok(false);
        };
        let mut outage = Outage::new();
        self.recover(&mut outage, cause)?;
        let mut last_end: Option<Instant> = None;
        loop {
            let status = conn.borrow_mut().commit_status(txid);
            if matches!(status, Ok(None)) {
                if outage.since.elapsed() >= self.reconnect_for {
                    return Err(TxError::Store(StoreError::Unavailable {
                        path: self.path.clone(),
                        seconds: outage.since.elapsed().as_secs_f64(),
                        attempts: outage.attempts,
                        cause: format!(
                            "transaction {txid}, cut off at COMMIT, is still in progress on the server"
                        ),
                    }));
                }
                // Once a second: ending the process takes effect at its
                // next wait for its client, and a failure here (a role not
                // allowed to end it) leaves only the wait.
                if last_end.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    last_end = Some(Instant::now());
                    if let Err(e) = conn.borrow_mut().end_abandoned(pg_tx) {
                        tracing::info!(
                            storage = %self.path.display(),
                            "cannot end the transaction cut off at COMMIT: {e}"
                        );
                    }
                }
            }
            match status {
                Ok(Some(done)) => {
                    self.recovered(&outage);
                    tracing::info!(
                        storage = %self.path.display(),
                        "the transaction cut off at COMMIT {}",
                        if done { "had committed" } else { "had not committed; running it again" }
                    );
                    return Ok(done);
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) if e.is_connection_lost() => self.recover(&mut outage, &e)?,
                Err(e) => return Err(TxError::Db(e)),
            }
        }
    }
}

/// A storage outage in progress: when it began, attempts so far, the next
/// pause.
struct Outage {
    since: Instant,
    attempts: u32,
    backoff: Duration,
}

impl Outage {
    fn new() -> Outage {
        Outage {
            since: Instant::now(),
            attempts: 0,
            backoff: Duration::from_millis(50),
        }
    }
}

/// Inside a transaction: either a typed error that ends the operation, or a
/// raw database error that may be a retryable lock conflict.
#[derive(Debug)]
pub(crate) enum TxError {
    Store(StoreError),
    Db(DbError),
}

impl From<DbError> for TxError {
    fn from(e: DbError) -> Self {
        TxError::Db(e)
    }
}

impl From<rusqlite::Error> for TxError {
    fn from(e: rusqlite::Error) -> Self {
        TxError::Db(DbError::Sqlite(e))
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

/// A writer that died between its first change and its commit left a hot
/// `-journal` beside the file: the transaction's original pages, which a
/// reader must put back before it reads. Only a connection that may write
/// can (a read-only one fails with SQLITE_READONLY_ROLLBACK), so one
/// opened for writing reads once, which rolls the journal back as any
/// SQLite reader, Optuna's included, would. Where this process may not
/// write, the read-only open that follows reports the journal
/// ([`StoreError::HotJournal`]). A journal of a live writer is not hot:
/// SQLite leaves it, and the read waits for that writer as any read does.
fn roll_back_a_hot_journal(path: &Path, busy_timeout: std::time::Duration) {
    let journal = side_file(path, "-journal");
    // `metadata`, not an open: closing a descriptor of the file would drop
    // this process's locks on it (see `wal_at_rest`).
    if !std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0) {
        return;
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if let Ok(conn) = Connection::open_with_flags(path, flags) {
        let _ = conn.busy_timeout(busy_timeout);
        let _ = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        });
    }
}

/// Whether `path` is an SQLite file in WAL mode (header bytes 18 and 19 are
/// 2) with no `-wal` or `-shm` beside it: at rest, no connection open.
///
/// The header is read only once the side files are known to be absent: a
/// file descriptor of the database closed by this process releases every
/// POSIX lock the process holds on it, so reading it while one of our
/// WAL connections is open would let other processes checkpoint under
/// that connection's readers (they then see a "malformed" database).
fn wal_at_rest(path: &Path) -> bool {
    !any_side_file(path, &["-wal", "-shm"]) && journal_mode_byte(path) == Some(2)
}

/// The side file `ext` (`-wal`, `-shm`, `-journal`) of the database at
/// `path`: SQLite keeps it beside the file a link points to.
fn side_file(path: &Path, ext: &str) -> PathBuf {
    let mut side = std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .into_os_string();
    side.push(ext);
    PathBuf::from(side)
}

/// Whether any of the side files `exts` of the database at `path` exists.
fn any_side_file(path: &Path, exts: &[&str]) -> bool {
    let base = side_file(path, "");
    exts.iter().any(|ext| {
        let mut side = base.clone().into_os_string();
        side.push(ext);
        Path::new(&side).exists()
    })
}

/// What a path that is neither a file nor a directory is, for an error.
fn special_file_kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "FIFO";
        }
        if t.is_socket() {
            return "socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "device";
        }
    }
    let _ = meta;
    "special file"
}

/// The SQLite header's file-format byte (offset 18): 1 in rollback-journal
/// mode, 2 in WAL mode; `None` for a missing, empty or non-SQLite file.
fn journal_mode_byte(path: &Path) -> Option<u8> {
    use std::io::Read;
    let mut header = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .ok()?;
    header
        .starts_with(b"SQLite format 3\0")
        .then_some(header[18])
}

/// A read-only connection to `path` with `immutable=1`: no lock, no side
/// file, and nothing SQLite would check for changes.
fn open_immutable(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        immutable_uri(path),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )
}

/// `file:PATH?immutable=1`, the path percent-encoded as SQLite's URI
/// filenames require.
fn immutable_uri(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    #[cfg(not(unix))]
    let lossy = path.to_string_lossy();
    #[cfg(not(unix))]
    let bytes = lossy.as_bytes();
    let mut uri = String::from("file:");
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"/._-~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Whether this process may make `path`'s side files: it owns the file (or
/// is root, whom SQLite makes them for as the file's owner), and may write
/// it and create files in its folder (`faccessat(2)` with the effective
/// ids, as `open(2)` checks; a read-only mount answers no). Side files a
/// reader of another user made would be that user's, and a writer of the
/// file's own could not write them while they exist.
fn may_write_beside(path: &Path) -> bool {
    // SQLite keeps its side files beside the file a link points to.
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    owned_here(&path) && writable(&path) && writable(folder)
}

#[cfg(unix)]
fn owned_here(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    std::fs::metadata(path).is_ok_and(|m| euid == 0 || m.uid() == euid)
}

#[cfg(not(unix))]
fn owned_here(_: &Path) -> bool {
    false
}

#[cfg(unix)]
fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call, which
    // only reads it.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

#[cfg(not(unix))]
fn writable(_: &Path) -> bool {
    false
}

/// What a file read without locks is checked by: a writer that opened,
/// changed and closed it during the read changed its length or its
/// modification and change times (nanoseconds), or replaced it. Taken
/// from `stat` alone: opening the file to read its header would drop
/// this process's locks on it when closed (see [`wal_at_rest`]), and in
/// WAL mode the header's change counter is not bumped by every commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    changed: (i64, i64),
    #[cfg(unix)]
    inode: (u64, u64),
}

impl FileStamp {
    /// The file's stamp, or `None` when it is not at rest: missing, or
    /// with a `-wal`, `-shm` or `-journal` beside it (a writer has it open).
    fn at_rest(path: &Path) -> Option<FileStamp> {
        if any_side_file(path, &["-wal", "-shm", "-journal"]) {
            return None;
        }
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Some(FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            changed: (meta.ctime(), meta.ctime_nsec()),
            #[cfg(unix)]
            inode: (meta.dev(), meta.ino()),
        })
    }
}

/// A random wait in [d/2, d) so that colliding writers spread out; no RNG
/// dependency needed, the clock and pid are random enough here.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    let mix = (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) % 1024;
    let half = d / 2;
    half + half * mix / 1024
}

fn warn_not_wal(path: &Path, mode: &str) {
    tracing::warn!(
        "store: {}: journal_mode is {mode}, not WAL; concurrent writers will wait longer",
        path.display()
    );
}

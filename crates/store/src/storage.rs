//! Opening a storage file, and the transaction discipline every write uses.
//!
//! Many processes write one file. SQLite in WAL mode lets readers run beside
//! one writer; a busy timeout makes a writer wait for the lock inside SQLite;
//! every read-modify-write runs in `BEGIN IMMEDIATE` (the write lock is taken
//! up front, so two writers never both read then collide on upgrade); and a
//! transaction that still meets SQLITE_BUSY/LOCKED is rolled back and retried
//! with jittered exponential backoff. No "database is locked" reaches callers
//! unless the lock is held longer than [`OpenOptions::max_wait`].

use crate::error::{Result, StoreError, from_sqlite, sqlite_code};
use crate::schema;
use rusqlite::{Connection, ErrorCode, OpenFlags};
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
    /// the file (for listing and export). Writes then fail with `Sqlite`.
    pub read_only: bool,
    pub durability: Durability,
    /// SQLite's own busy timeout per lock attempt.
    pub busy_timeout: Duration,
    /// Total time one operation keeps retrying SQLITE_BUSY before `Busy`.
    pub max_wait: Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            create: true,
            read_only: false,
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(5),
            max_wait: Duration::from_secs(120),
        }
    }
}

/// One connection to one storage file. Cheap to open; open one per process
/// or thread (it is `Send`, not `Sync`).
pub struct Storage {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
    max_wait: Duration,
    /// The file was in rollback-journal mode when this writer opened it.
    restore_rollback: bool,
}

/// Writers work in WAL mode (readers beside one writer, no fsync of a
/// rollback journal per commit). A file that came in rollback-journal mode
/// (Optuna's default) is returned to it by the last writer to close, so
/// writing with memtune does not switch someone's Optuna file to WAL for
/// good (a WAL file can only be read by someone allowed to create its
/// `-shm` beside it; memtune's own read-only opens cope, Optuna's do not).
/// SQLite allows the switch only when no other connection has the file
/// open: while others work it fails at once and the file stays in WAL mode
/// for them.
impl Drop for Storage {
    fn drop(&mut self) {
        if self.restore_rollback {
            let _ = self.conn.busy_timeout(Duration::ZERO);
            let _: rusqlite::Result<String> =
                self.conn
                    .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0));
        }
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("path", &self.path).finish()
    }
}

/// Turn Optuna's URL form `sqlite:///relative.db` or `sqlite:////abs/x.db`
/// into a path. Any other scheme is an error.
pub fn parse_sqlite_url(url: &str) -> Result<PathBuf> {
    let bad = |reason: &str| StoreError::InvalidUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let Some(rest) = url.strip_prefix("sqlite:///") else {
        return Err(if url.contains("://") {
            bad("only sqlite:///PATH storages are supported")
        } else {
            bad("expected sqlite:///PATH (e.g. sqlite:///study.db or sqlite:////abs/study.db)")
        });
    };
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() {
        return Err(bad(
            "the path after sqlite:/// is empty (in-memory storages are not persistent)",
        ));
    }
    if path == ":memory:" {
        return Err(bad("in-memory storages are not persistent"));
    }
    Ok(PathBuf::from(path))
}

impl Storage {
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

    /// Open Optuna's URL form `sqlite:///PATH`.
    pub fn open_url(url: &str, opts: &OpenOptions) -> Result<Storage> {
        Storage::open_with(parse_sqlite_url(url)?, opts)
    }

    /// Open with explicit options.
    ///
    /// An existing file is checked by reading only (SQLite header, Optuna's
    /// tables, version rows) before any pragma or write touches it, so a file
    /// that is not ours is left byte-for-byte unchanged.
    pub fn open_with(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<Storage> {
        let path = path.as_ref().to_path_buf();
        let len = match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => return Err(StoreError::IsADirectory { path }),
            Ok(m) => Some(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::Io { path, source: e }),
        };
        let fresh = len.unwrap_or(0) == 0;
        if fresh && (!opts.create || opts.read_only) {
            return Err(StoreError::NoSuchFile { path });
        }
        let mut flags = if opts.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if len.is_none() && !opts.read_only {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let restore_rollback = !opts.read_only && journal_mode_byte(&path) == Some(1);
        let conn = if opts.read_only && wal_at_rest(&path) {
            // A WAL file needs its `-shm` index to be read, and SQLite
            // creates it (and `-wal`) beside the file: impossible in a
            // read-only directory, and elsewhere they would stay behind,
            // owned by this user, locking the file's owner out. With neither
            // present no writer has the file open and the main file holds
            // every committed transaction, so it is read as it stands.
            Connection::open_with_flags(immutable_uri(&path), flags | OpenFlags::SQLITE_OPEN_URI)
        } else {
            Connection::open_with_flags(&path, flags)
        }
        .map_err(|e| from_sqlite(&path, e))?;
        conn.busy_timeout(opts.busy_timeout)
            .map_err(|e| from_sqlite(&path, e))?;
        let storage = Storage {
            conn,
            path,
            max_wait: opts.max_wait,
            restore_rollback,
        };
        // Read-only checks first. An empty SQLite file has no tables.
        let empty = schema::is_empty(&storage.conn, &storage.path)?;
        if !empty {
            schema::verify(&storage.conn, &storage.path)?;
        } else if !opts.create || opts.read_only {
            return Err(StoreError::EmptyDatabase {
                path: storage.path.clone(),
            });
        }
        if opts.read_only {
            return Ok(storage);
        }
        storage.set_pragmas(opts.durability)?;
        if empty {
            // Another process may create the schema at the same moment: the
            // write lock serialises us, and we re-check inside it.
            storage.write(|conn| {
                let n: i64 =
                    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
                if n == 0 {
                    schema::create(conn)?;
                }
                Ok(())
            })?;
            schema::verify(&storage.conn, &storage.path)?;
        }
        Ok(storage)
    }

    fn set_pragmas(&self, durability: Durability) -> Result<()> {
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        self.retry(|| {
            let mode: String = self
                .conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                // e.g. a file system without shared memory; still correct, only slower.
                tracing_free_warn(&self.path, &mode);
            }
            self.conn.execute_batch(&format!(
                "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON;"
            ))
        })
    }

    /// The file this storage reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw connection, for checks such as `PRAGMA integrity_check`.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Run `f` inside `BEGIN IMMEDIATE ... COMMIT`, retrying the whole
    /// transaction on SQLITE_BUSY/LOCKED. `f` may run more than once, so it
    /// must not have effects outside the database.
    pub(crate) fn write<T>(
        &self,
        mut f: impl FnMut(&Connection) -> Result<T, TxError>,
    ) -> Result<T> {
        self.retry_tx(|| {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            let out = f(&self.conn);
            match out {
                Ok(v) => match self.conn.execute_batch("COMMIT") {
                    Ok(()) => Ok(v),
                    Err(e) => {
                        let _ = self.conn.execute_batch("ROLLBACK");
                        Err(TxError::Sqlite(e))
                    }
                },
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        })
    }

    /// Run `f` inside a read transaction (one consistent snapshot).
    pub(crate) fn read<T>(
        &self,
        mut f: impl FnMut(&Connection) -> Result<T, TxError>,
    ) -> Result<T> {
        self.retry_tx(|| {
            self.conn.execute_batch("BEGIN DEFERRED")?;
            let out = f(&self.conn);
            let _ = self.conn.execute_batch("COMMIT");
            out
        })
    }

    fn retry<T>(&self, mut f: impl FnMut() -> rusqlite::Result<T>) -> Result<T> {
        self.retry_tx(|| f().map_err(TxError::Sqlite))
    }

    fn retry_tx<T>(&self, mut f: impl FnMut() -> Result<T, TxError>) -> Result<T> {
        let start = Instant::now();
        let mut attempts = 0u32;
        let mut backoff = Duration::from_millis(1);
        loop {
            attempts += 1;
            match f() {
                Ok(v) => return Ok(v),
                Err(TxError::Store(e)) => return Err(e),
                Err(TxError::Sqlite(e)) => {
                    let busy = matches!(
                        sqlite_code(&e),
                        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                    );
                    if !busy {
                        return Err(from_sqlite(&self.path, e));
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
}

/// Inside a transaction: either a typed error that ends the operation, or a
/// raw SQLite error that may be a retryable lock conflict.
#[derive(Debug)]
pub(crate) enum TxError {
    Store(StoreError),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for TxError {
    fn from(e: rusqlite::Error) -> Self {
        TxError::Sqlite(e)
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

/// Whether `path` is an SQLite file in WAL mode (header bytes 18 and 19 are
/// 2) with no `-wal` or `-shm` beside it: at rest, no connection open.
fn wal_at_rest(path: &Path) -> bool {
    let side = |ext: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(ext);
        Path::new(&p).exists()
    };
    journal_mode_byte(path) == Some(2) && !side("-wal") && !side("-shm")
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

fn tracing_free_warn(path: &Path, mode: &str) {
    eprintln!(
        "store: {}: journal_mode is {mode}, not WAL; concurrent writers will wait longer",
        path.display()
    );
}

//! The two backends every storage test runs on: a fresh SQLite file, or a
//! fresh database on a throwaway PostgreSQL server (one server per test
//! binary, started on first use). Without a server the PostgreSQL variants
//! skip with a message, except under `CI=true`, where they fail.
//!
//! `backends!(a, b)` (with `#[macro_use] mod common;`) makes `sqlite::a`, `postgres::a`, ... calling
//! `a(Backend::Sqlite)` and `a(Backend::Postgres)`.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use store::pg_server::PgServer;
use store::{OpenOptions, Storage};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// One empty storage for one test: its URL, and the temporary directory
/// (files, logs) that lives as long as it does.
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl TestDb {
    /// Open (creating the schema) with default options.
    pub fn open(&self) -> Storage {
        Storage::open_url(&self.url, &OpenOptions::default()).unwrap()
    }

    /// Open without leave to create anything.
    pub fn open_existing(&self) -> store::Result<Storage> {
        let opts = OpenOptions {
            create: false,
            ..OpenOptions::default()
        };
        Storage::open_url(&self.url, &opts)
    }

    /// The server's binaries (`pg_dump`), on PostgreSQL.
    pub fn pg_bin(&self) -> Option<&std::path::Path> {
        match self.backend {
            Backend::Postgres => server().ok().map(PgServer::bin_dir),
            Backend::Sqlite => None,
        }
    }
}

fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn server() -> Result<&'static PgServer, &'static String> {
    static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
    SERVER.get_or_init(PgServer::start).as_ref()
}

/// A new empty storage named after `name`, or `None` (after saying why)
/// when the backend is unavailable here. Under `CI=true` an unavailable
/// backend panics instead.
pub fn fresh(backend: Backend, name: &str) -> Option<TestDb> {
    let dir = tempfile::tempdir().unwrap();
    let url = match backend {
        Backend::Sqlite => format!(
            "sqlite:///{}",
            dir.path().join(format!("{name}.db")).display()
        ),
        Backend::Postgres => {
            let server = match server() {
                Ok(s) => s,
                Err(e) if on_ci() => panic!("CI must run the PostgreSQL tests: {e}"),
                Err(e) => {
                    eprintln!("skipping: no PostgreSQL server could be started: {e}");
                    return None;
                }
            };
            static SEQ: AtomicUsize = AtomicUsize::new(0);
            let db = format!(
                "{}_{}",
                name.to_lowercase(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            );
            server.create_database(&db).unwrap()
        }
    };
    Some(TestDb { backend, url, dir })
}

/// `backends!(f, g)`: run each `fn f(Backend)` on SQLite and on PostgreSQL.
macro_rules! backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                super::$name(crate::common::Backend::Sqlite)
            })*
        }
        mod postgres {
            $(#[test]
            fn $name() {
                super::$name(crate::common::Backend::Postgres)
            })*
        }
    };
}

//! The two backends every storage test runs on: a fresh SQLite file, or a
//! fresh database on a throwaway PostgreSQL server (one server per test
//! binary, started on first use). Without a server the PostgreSQL variants
//! skip with a message, except under `CI=true`, where they fail.
//!
//! `backends!(a, b)` (with `#[macro_use] mod common;`) makes `sqlite::a`, `postgres::a`, ... calling
//! `a(Backend::Sqlite)` and `a(Backend::Postgres)`.

#![allow(dead_code)]

use store::pg_server::{self, PgServer};
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

    /// Wait until no other client is connected to this database. A
    /// PostgreSQL backend whose client was SIGKILLed still finishes the
    /// statement it was running (a COMMIT included) and only then notices
    /// the closed socket, so a check made right after the kill could miss
    /// a row that appears a moment later. SQLite has no server: a no-op.
    pub fn wait_for_other_sessions(&self) {
        if self.backend != Backend::Postgres {
            return;
        }
        let mut client = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let others: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                    &[],
                )
                .unwrap()
                .get(0);
            if others == 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{others} sessions still on {} after 30 s",
                self.url
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// On PostgreSQL, the database as `pg_dump` prints it (`--schema-only`:
    /// types, tables, sequences, defaults, constraints, indexes), without
    /// the per-run `\restrict` key; `None` on SQLite.
    pub fn pg_dump(&self, schema_only: bool) -> Option<Vec<String>> {
        let bin = match self.backend {
            Backend::Postgres => pg_server::shared().ok().map(PgServer::bin_dir)?,
            Backend::Sqlite => return None,
        };
        let mut cmd = std::process::Command::new(bin.join("pg_dump"));
        if schema_only {
            cmd.arg("--schema-only");
        }
        let out = cmd.args(["--dbname", &self.url]).output().unwrap();
        assert!(
            out.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
                .map(String::from)
                .collect(),
        )
    }
}

/// A new empty storage named after `name`, or `None` (after saying why)
/// when the backend is unavailable here; under `CI=true` an unavailable
/// backend panics instead (see [`pg_server::test_database`]).
pub fn fresh(backend: Backend, name: &str) -> Option<TestDb> {
    let dir = tempfile::tempdir().unwrap();
    let url = match backend {
        Backend::Sqlite => format!(
            "sqlite:///{}",
            dir.path().join(format!("{name}.db")).display()
        ),
        Backend::Postgres => pg_server::test_database(name)?,
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

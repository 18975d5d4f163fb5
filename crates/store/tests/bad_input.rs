//! Bad files, databases and calls: each is a clear typed error, never a
//! panic, and a storage that is not ours is left unchanged (an SQLite file
//! byte for byte; a PostgreSQL database as `pg_dump` prints it). The
//! file-format cases (not SQLite at all, truncated files, sidecar files)
//! are SQLite's alone; the rest run on both backends.

#[macro_use]
mod common;

use common::{Backend, TestDb};
use std::path::Path;
use store::{OpenOptions, Storage, StoreError, StudyDirection, TrialState};

backends!(
    unknown_schema_version,
    optuna_tables_missing,
    missing_storage_and_unknown_study,
    empty_database_without_leave_to_create,
    read_only_open_never_changes_the_storage,
    unreadable_params_name_the_trial_and_parameter,
    corrupt_rows_are_errors_not_made_up_values,
    one_broken_study_leaves_the_others_readable,
);

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

/// Sidecar files SQLite would create if it had written anything.
fn no_sidecars(p: &Path) {
    for ext in ["-wal", "-shm", "-journal"] {
        let side = format!("{}{ext}", p.display());
        assert!(!Path::new(&side).exists(), "{side} was created");
    }
}

/// Everything stored: an SQLite file's bytes, or a PostgreSQL database's
/// schema and rows as `pg_dump` prints them (without its per-run key).
fn snapshot(db: &TestDb) -> Vec<u8> {
    match db.pg_dump(false) {
        Some(lines) => lines.join("\n").into_bytes(),
        None => bytes(&store::parse_sqlite_url(&db.url).unwrap()),
    }
}

/// A storage with one study of 50 trials, closed. An SQLite file is left in
/// rollback-journal mode, like Optuna's files.
fn sample(backend: Backend) -> Option<TestDb> {
    let db = common::fresh(backend, "good")?;
    fill(&db.open());
    Some(db)
}

fn sample_db(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("good.db");
    fill(&Storage::open(&db).unwrap());
    db
}

fn fill(s: &Storage) {
    let study = s.create_study("s", &[StudyDirection::Minimize]).unwrap();
    for i in 0..50 {
        let t = s.create_trial(study.study_id).unwrap();
        s.report_intermediate(t.trial_id, 0, i as f64).unwrap();
        s.finish(t.trial_id, TrialState::Complete, &[i as f64])
            .unwrap();
    }
    // Fold the WAL back into the main file so it stands alone.
    if !s.is_postgres() {
        s.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")
            .unwrap();
    }
}

/// SQL run with the store's own connection, which is then closed; on
/// SQLite the file is left in rollback-journal mode.
fn alter(db: &TestDb, sql: &str) {
    let s = db.open();
    s.execute_batch(sql).unwrap();
    if !s.is_postgres() {
        s.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")
            .unwrap();
    }
}

/// Sidecars of an SQLite storage; nothing to check on a server.
fn no_sidecars_of(db: &TestDb) {
    if db.backend == Backend::Sqlite {
        no_sidecars(&store::parse_sqlite_url(&db.url).unwrap());
    }
}

#[test]
fn not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.db");
    let text = b"these are my notes, not a database\n".repeat(200);
    std::fs::write(&p, &text).unwrap();
    let err = Storage::open(&p).unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    assert!(err.to_string().contains("notes.db"), "{err}");
    assert_eq!(bytes(&p), text);
    no_sidecars(&p);
}

/// A FIFO or a device: before, a FIFO was "an empty database" and opening
/// one to write would block on it.
#[test]
fn special_files_are_not_storages() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("study.db");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let read_only = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    for opts in [OpenOptions::default(), read_only] {
        let err = Storage::open_with(&fifo, &opts).unwrap_err();
        assert!(matches!(err, StoreError::NotAFile { .. }), "{err}");
        assert!(err.to_string().contains("study.db: is a FIFO"), "{err}");
    }
    let err = Storage::open(Path::new("/dev/null")).unwrap_err();
    assert!(err.to_string().contains("/dev/null: is a device"), "{err}");
}

#[test]
fn truncated_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_db(dir.path());
    let full = bytes(&db);
    assert!(full.len() > 8192, "sample too small to truncate");
    for cut in [50, 100, 4096 + 10, full.len() / 2] {
        let p = dir.path().join(format!("cut{cut}.db"));
        std::fs::write(&p, &full[..cut]).unwrap();
        let result = Storage::open(&p).and_then(|s| {
            let study = s.study("s")?;
            s.trials(study.study_id, &Default::default())
        });
        let err = result.expect_err("a truncated file must not read back as whole");
        assert!(
            matches!(
                err,
                StoreError::NotADatabase { .. }
                    | StoreError::Corrupt { .. }
                    | StoreError::NotAnOptunaStorage { .. }
            ),
            "cut at {cut}: {err}"
        );
        assert_eq!(bytes(&p), &full[..cut], "cut at {cut}: file changed");
    }
}

fn unknown_schema_version(backend: Backend) {
    let Some(db) = sample(backend) else { return };
    alter(
        &db,
        "UPDATE version_info SET schema_version = 13; \
         UPDATE alembic_version SET version_num = 'v9.0.0.a';",
    );
    let before = snapshot(&db);
    let err = db.open_existing().unwrap_err();
    match &err {
        StoreError::UnknownSchemaVersion { found, .. } => assert!(found.contains("13"), "{err}"),
        other => panic!("expected UnknownSchemaVersion, got {other}"),
    }
    assert_eq!(snapshot(&db), before);
    no_sidecars_of(&db);
}

fn optuna_tables_missing(backend: Backend) {
    let Some(db) = sample(backend) else { return };
    alter(&db, "DROP TABLE trial_heartbeats;");
    let before = snapshot(&db);
    let err = db.open_existing().unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotAnOptunaStorage {
                table: "trial_heartbeats",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(snapshot(&db), before);

    // A table without one of its columns is named with the column.
    let Some(db) = common::fresh(backend, "dropped_column") else {
        return;
    };
    fill(&db.open());
    alter(&db, "ALTER TABLE trials DROP COLUMN datetime_complete;");
    let before = snapshot(&db);
    let err = db.open_existing().unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::MissingColumn {
                table: "trials",
                column: "datetime_complete",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(snapshot(&db), before);
}

fn missing_storage_and_unknown_study(backend: Backend) {
    let Some(db) = sample(backend) else { return };
    let (server, _) = db.url.rsplit_once('/').unwrap();
    let missing = format!("{server}/missing_storage");
    let existing = OpenOptions {
        create: false,
        ..OpenOptions::default()
    };
    let err = Storage::open_url(&missing, &existing).unwrap_err();
    match backend {
        Backend::Sqlite => {
            assert!(matches!(err, StoreError::NoSuchFile { .. }), "{err}");
            assert!(!Path::new(&store::parse_sqlite_url(&missing).unwrap()).exists());
        }
        Backend::Postgres => {
            // The server's own words, with the storage named (no password).
            assert!(matches!(err, StoreError::Postgres { .. }), "{err}");
            let text = format!("{err}: {:?}", std::error::Error::source(&err));
            assert!(text.contains("missing_storage"), "{text}");
            assert!(text.contains("does not exist"), "{text}");
        }
    }

    let s = db.open_existing().unwrap();
    let err = s.study("nope").unwrap_err();
    assert!(
        matches!(&err, StoreError::StudyNotFound { name } if name == "nope"),
        "{err}"
    );
    assert_eq!(err.to_string(), "study `nope` not found");
    assert!(matches!(
        s.create_trial(999).unwrap_err(),
        StoreError::StudyIdNotFound { study_id: 999 }
    ));
    assert!(matches!(
        s.trial(12345).unwrap_err(),
        StoreError::TrialNotFound { trial_id: 12345 }
    ));
    // Past PostgreSQL's 32-bit ids too: not found, as on SQLite.
    let far = 1_i64 << 31;
    assert!(matches!(
        s.trial(far).unwrap_err(),
        StoreError::TrialNotFound { trial_id } if trial_id == far
    ));
    assert!(matches!(
        s.create_trial(-far - 1).unwrap_err(),
        StoreError::StudyIdNotFound { study_id } if study_id == -far - 1
    ));
    assert!(matches!(
        s.finish(far, TrialState::Complete, &[1.0]).unwrap_err(),
        StoreError::TrialNotFound { .. }
    ));
    let study = s.create_study("far", &[StudyDirection::Minimize]).unwrap();
    assert!(s.trial_by_number(study.study_id, far).unwrap().is_none());
    assert_eq!(s.counted_trials(far).unwrap(), 0);
    // A value to store that PostgreSQL's column cannot hold is refused, named.
    let t = s.create_trial(study.study_id).unwrap();
    match (backend, s.report_intermediate(t.trial_id, far, 1.0)) {
        (Backend::Sqlite, result) => result.unwrap(),
        (Backend::Postgres, result) => {
            let err = result.unwrap_err().to_string();
            assert!(
                err.contains("2147483648 does not fit PostgreSQL's int4"),
                "{err}"
            );
        }
    }
}

/// A `distribution_json` that another writer left unreadable, or that no
/// Optuna constructor accepts, fails the read with the trial and the
/// parameter named; the row is kept as it was.
fn unreadable_params_name_the_trial_and_parameter(backend: Backend) {
    let Some(db) = sample(backend) else { return };
    for (json, words) in [
        (
            r#"{"name": "Nope", "attributes": {}}"#,
            "unknown distribution class 'Nope'",
        ),
        (
            r#"{"name": "FloatDistribution", "attributes": {"low": 2.0, "high": 1.0}}"#,
            "`low <= high` must hold",
        ),
        (
            r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["a", [1]]}}"#,
            "choices[1]: [1] is not a parameter value",
        ),
        // Python's json.dumps writes an infinite bound so, and Optuna's
        // constructor takes it; memtune's ranges are finite.
        (
            r#"{"name": "FloatDistribution", "attributes": {"step": null, "low": 0.0, "high": Infinity, "log": false}}"#,
            "low and high must be finite, got low=0.0, high=inf",
        ),
    ] {
        alter(
            &db,
            &format!(
                "DELETE FROM trial_params; INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
                 SELECT trial_id, 'lr', 0.0, '{json}' FROM trials WHERE number = 7"
            ),
        );
        let s = db.open_existing().unwrap();
        let study = s.study("s").unwrap();
        let err = s
            .trials(study.study_id, &store::TrialFilter::default())
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::BadParam { number: 7, name, .. } if name == "lr"),
            "{err}"
        );
        let text = err.to_string();
        let storage = s.path().display().to_string();
        assert!(
            text.starts_with(&format!(
                "{storage}: trial 7 of study `s` (trial_id 8), parameter `lr`: "
            )) && text.contains(words),
            "{text}"
        );
        let kept = s
            .query_text("SELECT distribution_json FROM trial_params")
            .unwrap();
        assert_eq!(kept, vec![vec![Some(json.to_string())]]);
    }
}

/// A database with no tables yet (as another process leaves it between
/// creating the file and committing the schema) is told apart from a foreign
/// one when it may not be created here, and is left as it was.
fn empty_database_without_leave_to_create(backend: Backend) {
    let Some(db) = common::fresh(backend, "empty") else {
        return;
    };
    match backend {
        Backend::Sqlite => {
            let path = store::parse_sqlite_url(&db.url).unwrap();
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute_batch("PRAGMA user_version = 1;")
                .unwrap();
            assert!(!bytes(&path).is_empty());
        }
        // A new database: no tables, as `createdb` leaves it.
        Backend::Postgres => {}
    }
    let before = snapshot(&db);
    let read_only = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let name = if backend == Backend::Sqlite {
        "empty.db"
    } else {
        "/empty_"
    };
    for err in [
        db.open_existing().unwrap_err(),
        Storage::open_url(&db.url, &read_only).unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::EmptyDatabase { .. }), "{err}");
        assert!(err.to_string().contains(name), "{err}");
    }
    assert_eq!(snapshot(&db), before);
    db.open()
        .create_study("s", &[StudyDirection::Minimize])
        .unwrap();
}

#[test]
fn bad_urls() {
    for url in [
        "postgresql://x/y",
        "mysql://u@h/db",
        "sqlite://",
        "sqlite:///",
        "study.db",
        "sqlite:///:memory:",
        "sqlite:///ro.db?mode=ro",
    ] {
        let err = store::parse_sqlite_url(url).unwrap_err();
        assert!(matches!(err, StoreError::InvalidUrl { .. }), "{url}: {err}");
        assert!(err.to_string().contains(url), "{err}");
    }
    let err = store::parse_sqlite_url("sqlite:///x.db?timeout=30").unwrap_err();
    assert!(
        err.to_string()
            .contains("(`?timeout=30`) are not supported"),
        "{err}"
    );
    assert_eq!(
        store::parse_sqlite_url("sqlite:////abs/x.db").unwrap(),
        Path::new("/abs/x.db")
    );
    assert_eq!(
        store::parse_sqlite_url("sqlite:///rel.db").unwrap(),
        Path::new("rel.db")
    );
    // A %-escape is refused (SQLAlchemy versions disagree on it); a `%`
    // that escapes nothing is a character of the name, as everywhere.
    for url in [
        "sqlite:///my%20study.db",
        "sqlite:///a%3Fb.db?mode=ro",
        "sqlite:///%e6.db",
    ] {
        let err = store::parse_sqlite_url(url).unwrap_err().to_string();
        assert!(err.contains("%-escape"), "{url}: {err}");
    }
    for (url, path) in [
        ("sqlite:///100%.db", "100%.db"),
        ("sqlite:///a%+1.db", "a%+1.db"),
    ] {
        assert_eq!(
            store::parse_sqlite_url(url).unwrap(),
            Path::new(path),
            "{url}"
        );
    }
    for url in [
        "postgresql://u@host",
        "postgresql://u@host:notaport/db",
        "postgresql+psycopg2://u@host:5432/db?sslmode=bogus",
        "mysql://u@h/db",
        "study.db",
    ] {
        let err = store::StorageUrl::parse(url).unwrap_err();
        assert!(matches!(err, StoreError::InvalidUrl { .. }), "{url}: {err}");
        assert!(err.to_string().contains(url), "{err}");
    }
    // A server nobody listens on: a clear error naming the storage, without
    // its password, well before any long timeout.
    let url = "postgresql://me:hunter2@127.0.0.1:1/optuna";
    let err = Storage::open_url(url, &OpenOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("postgresql://me@127.0.0.1:1/optuna: "),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

fn read_only_open_never_changes_the_storage(backend: Backend) {
    let Some(db) = sample(backend) else { return };
    let before = snapshot(&db);
    let opts = OpenOptions {
        create: false,
        read_only: true,
        ..Default::default()
    };
    let s = Storage::open_url(&db.url, &opts).unwrap();
    let study = s.study("s").unwrap();
    assert_eq!(
        s.trials(study.study_id, &Default::default()).unwrap().len(),
        50
    );
    assert!(s.create_trial(study.study_id).is_err());
    drop(s);
    assert_eq!(snapshot(&db), before);
    no_sidecars_of(&db);
}

#[test]
fn read_only_open_of_a_wal_file() {
    let dir = tempfile::tempdir().unwrap();
    let opts = OpenOptions {
        create: false,
        read_only: true,
        ..Default::default()
    };
    // A WAL-mode file (what we write) opens read-only too.
    let wal = dir.path().join("wal.db");
    let w = Storage::open(&wal).unwrap();
    w.create_study("w", &[StudyDirection::Minimize]).unwrap();
    drop(w);
    let s = Storage::open_with(&wal, &opts).unwrap();
    assert_eq!(s.studies().unwrap().len(), 1);
    let missing = dir.path().join("missing.db");
    assert!(matches!(
        Storage::open_with(&missing, &opts).unwrap_err(),
        StoreError::NoSuchFile { .. }
    ));
    // A file of no bytes is there, and not yet a storage.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let err = Storage::open_with(&empty, &opts).unwrap_err();
    assert!(matches!(err, StoreError::EmptyDatabase { .. }), "{err}");
    assert!(err.to_string().contains("empty"), "{err}");
}

/// A writer that died between its first change and its commit leaves a hot
/// journal, which only a connection with write access can roll back (a
/// read-only one fails with SQLITE_READONLY_ROLLBACK). A read-only open
/// rolls it back where it may write, as SQLite and Optuna's readers do,
/// and reads the storage as it was before that transaction.
#[test]
fn a_read_only_open_rolls_back_a_dead_writers_journal() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_db(dir.path());
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_store-writer"))
        .arg("die-mid-transaction")
        .arg(&db)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the writer was to abort");
    let journal = format!("{}-journal", db.display());
    assert!(Path::new(&journal).exists(), "no journal was left");
    let opts = OpenOptions {
        create: false,
        read_only: true,
        ..Default::default()
    };
    let s = Storage::open_with(&db, &opts).unwrap();
    let study = s.study("s").unwrap();
    let trials = s.trials(study.study_id, &Default::default()).unwrap();
    assert_eq!(trials.len(), 50);
    assert!(trials.iter().all(|t| t.state == TrialState::Complete));
    drop(s);
    assert!(!Path::new(&journal).exists(), "the journal is still there");
}

/// Rows Optuna itself would refuse to read are errors naming the row, not
/// values made up for them: a NULL parameter value or a categorical index
/// beyond the choices (shown before as a clamped choice), a FINITE objective value
/// of NULL (read as NaN, which `best` could pick), directions missing an
/// objective, two trials of one number (`tell` took the first), an
/// attribute that is not JSON. Each names the storage it was read from.
fn corrupt_rows_are_errors_not_made_up_values(backend: Backend) {
    let categorical =
        r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["a", "b"]}}"#;
    let param = |value: &str| {
        format!(
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
             SELECT trial_id, 'c', {value}, '{categorical}' FROM trials WHERE number = 7"
        )
    };
    let cases: [(String, &str); 6] = [
        (param("NULL"), "param_value is NULL"),
        (
            "INSERT INTO trial_user_attributes (trial_id, key, value_json) \
             SELECT trial_id, 'k', '{\"a\": ' FROM trials WHERE number = 3"
                .into(),
            "bad JSON in trial_user_attributes.k of trial_id 4",
        ),
        (
            param("7.0"),
            "stored value 7 (trial_params.param_value) is not the index",
        ),
        (
            "UPDATE trial_values SET value = NULL WHERE trial_id = \
             (SELECT trial_id FROM trials WHERE number = 3)"
                .into(),
            "trial_values.value = `NULL` (row id 4, trial 3 of study `s` (trial_id 4))",
        ),
        (
            "DELETE FROM study_directions".into(),
            "study_directions holds objectives []",
        ),
        (
            "UPDATE trials SET number = 4 WHERE number = 5".into(),
            "trials.number = `4, which trial_ids",
        ),
    ];
    let mut cases = cases.to_vec();
    if backend == Backend::Sqlite {
        // A type outside Optuna's enum (PostgreSQL's enum types refuse it
        // at the write) names the trial the row belongs to.
        for table in ["trial_values", "trial_intermediate_values"] {
            let column = table
                .replacen("trial_", "", 1)
                .replacen("values", "value_type", 1);
            cases.push((
                format!(
                    "UPDATE {table} SET {column} = 'BOGUS' WHERE trial_id = \
                     (SELECT trial_id FROM trials WHERE number = 3)"
                ),
                "`BOGUS` (row id 4, trial 3 of study `s` (trial_id 4))",
            ));
        }
        // A value of another type (SQLite's columns take any) names its
        // column and row.
        cases.push((
            "UPDATE trial_values SET value = 'abc' WHERE trial_id = \
             (SELECT trial_id FROM trials WHERE number = 3)"
                .into(),
            "value: expected a number, found \"abc\", in the row with trial_id =",
        ));
    }
    for (i, (sql, words)) in cases.iter().enumerate() {
        let Some(db) = common::fresh(backend, &format!("corrupt{i}")) else {
            return;
        };
        fill(&db.open());
        alter(&db, sql);
        let s = db.open_existing().unwrap();
        let err = match s.study("s") {
            Err(e) => e,
            Ok(study) => match s.trial_by_number(study.study_id, 4) {
                Err(e) => e,
                Ok(_) => s
                    .trials(study.study_id, &store::TrialFilter::default())
                    .expect_err(sql),
            },
        };
        assert!(err.to_string().contains(words), "{sql}: {err}");
        if let StoreError::BadRow { .. }
        | StoreError::BadParam { .. }
        | StoreError::BadJson { .. } = err
        {
            let storage = s.path().display().to_string();
            assert!(err.to_string().starts_with(&storage), "{sql}: {err}");
        }
    }

    // A number outside its range or grid is what Optuna stores for an
    // enqueued trial (it warns and keeps it): read as stored.
    let Some(db) = common::fresh(backend, "enqueued") else {
        return;
    };
    fill(&db.open());
    let stepped = r#"{"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0, "step": 0.1, "log": false}}"#;
    alter(
        &db,
        &format!(
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
             SELECT trial_id, 'x', 5.05, '{stepped}' FROM trials WHERE number = 7"
        ),
    );
    let s = db.open_existing().unwrap();
    let study = s.study("s").unwrap();
    let t = s.trial_by_number(study.study_id, 7).unwrap().unwrap();
    assert_eq!(t.params["x"].internal, 5.05);
}

/// A study whose rows are broken fails `studies()`, which reads all
/// together, but not the names or another study's summary.
fn one_broken_study_leaves_the_others_readable(backend: Backend) {
    let Some(db) = common::fresh(backend, "broken_study") else {
        return;
    };
    fill(&db.open());
    let s = db.open();
    s.create_study("other", &[StudyDirection::Maximize])
        .unwrap();
    drop(s);
    alter(
        &db,
        "INSERT INTO study_user_attributes (study_id, key, value_json) \
         SELECT study_id, 'note', '{not json' FROM studies WHERE study_name = 's'",
    );
    let s = db.open_existing().unwrap();
    let err = s.studies().unwrap_err();
    assert!(
        err.to_string()
            .contains("bad JSON in study_user_attributes.note"),
        "{err}"
    );
    let names = s.study_names().unwrap();
    let names: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["s", "other"]);
    let (broken, other) = (s.study("s").unwrap(), s.study("other").unwrap());
    assert!(s.study_summary(broken.study_id).is_err());
    let summary = s.study_summary(other.study_id).unwrap();
    assert_eq!(
        (summary.study.name.as_str(), summary.n_trials),
        ("other", 0)
    );
    assert!(matches!(
        s.study_summary(other.study_id + 100),
        Err(StoreError::StudyIdNotFound { .. })
    ));
}

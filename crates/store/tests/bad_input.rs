//! Bad files and bad calls: each is a clear typed error, never a panic, and
//! a file that is not ours is left byte-for-byte unchanged.

use std::path::Path;
use store::{Storage, StoreError, StudyDirection, TrialState};

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

fn sample_db(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("good.db");
    let s = Storage::open(&db).unwrap();
    let study = s.create_study("s", &[StudyDirection::Minimize]).unwrap();
    for i in 0..50 {
        let t = s.create_trial(study.study_id).unwrap();
        s.report_intermediate(t.trial_id, 0, i as f64).unwrap();
        s.finish(t.trial_id, TrialState::Complete, &[i as f64])
            .unwrap();
    }
    // Fold the WAL back into the main file so it stands alone.
    s.connection()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")
        .unwrap();
    drop(s);
    db
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

#[test]
fn unknown_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_db(dir.path());
    bump_schema_version(&db);
    let before = bytes(&db);
    let err = Storage::open(&db).unwrap_err();
    match &err {
        StoreError::UnknownSchemaVersion { found, .. } => assert!(found.contains("13"), "{err}"),
        other => panic!("expected UnknownSchemaVersion, got {other}"),
    }
    assert_eq!(bytes(&db), before);
    no_sidecars(&db);
}

/// Bump the schema version with the store's own connection, then close it.
fn bump_schema_version(db: &Path) {
    let s = Storage::open(db).unwrap();
    s.connection()
        .execute_batch(
            "UPDATE version_info SET schema_version = 13; \
             UPDATE alembic_version SET version_num = 'v9.0.0.a'; \
             PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;",
        )
        .unwrap();
}

#[test]
fn sqlite_but_not_optuna() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_db(dir.path());
    let s = Storage::open(&db).unwrap();
    s.connection()
        .execute_batch("DROP TABLE trial_heartbeats; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")
        .unwrap();
    drop(s);
    let before = bytes(&db);
    let err = Storage::open(&db).unwrap_err();
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
    assert_eq!(bytes(&db), before);
}

#[test]
fn missing_file_and_unknown_study() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let err = Storage::open_existing(&missing).unwrap_err();
    assert!(matches!(err, StoreError::NoSuchFile { .. }), "{err}");
    assert!(!missing.exists());

    let db = sample_db(dir.path());
    let s = Storage::open_existing(&db).unwrap();
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
}

/// A database with no tables yet (as another process leaves it between
/// creating the file and committing the schema) is told apart from a foreign
/// one when it may not be created here, and is left as it was.
#[test]
fn empty_database_without_leave_to_create() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA user_version = 1;")
        .unwrap();
    let before = bytes(&db);
    assert!(!before.is_empty());
    let read_only = store::OpenOptions {
        read_only: true,
        ..store::OpenOptions::default()
    };
    for err in [
        Storage::open_existing(&db).unwrap_err(),
        Storage::open_with(&db, &read_only).unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::EmptyDatabase { .. }), "{err}");
        assert!(err.to_string().contains("empty.db"), "{err}");
    }
    assert_eq!(bytes(&db), before);
    Storage::open(&db)
        .unwrap()
        .create_study("s", &[store::StudyDirection::Minimize])
        .unwrap();
}

#[test]
fn bad_urls() {
    for url in [
        "postgresql://x/y",
        "sqlite://",
        "sqlite:///",
        "study.db",
        "sqlite:///:memory:",
    ] {
        let err = store::parse_sqlite_url(url).unwrap_err();
        assert!(matches!(err, StoreError::InvalidUrl { .. }), "{url}: {err}");
        assert!(err.to_string().contains(url), "{err}");
    }
    assert_eq!(
        store::parse_sqlite_url("sqlite:////abs/x.db").unwrap(),
        Path::new("/abs/x.db")
    );
    assert_eq!(
        store::parse_sqlite_url("sqlite:///rel.db").unwrap(),
        Path::new("rel.db")
    );
}

#[test]
fn read_only_open_never_changes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_db(dir.path()); // rollback-journal mode, like Optuna's files
    let before = bytes(&db);
    let opts = store::OpenOptions {
        create: false,
        read_only: true,
        ..Default::default()
    };
    let s = Storage::open_with(&db, &opts).unwrap();
    let study = s.study("s").unwrap();
    assert_eq!(
        s.trials(study.study_id, &Default::default()).unwrap().len(),
        50
    );
    assert!(s.create_trial(study.study_id).is_err());
    drop(s);
    assert_eq!(bytes(&db), before);
    no_sidecars(&db);

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
}

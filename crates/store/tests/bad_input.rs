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

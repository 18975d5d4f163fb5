//! 8 processes x 250 trials x 10 intermediate values on one storage (an
//! SQLite file, a PostgreSQL database): every trial and value lands, numbers
//! are dense and unique, and no writer ever sees "database is locked" or a
//! serialization failure (a writer exits non-zero on any error).

#[macro_use]
mod common;

use common::Backend;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use store::{OpenOptions, Storage, StudyDirection, TrialFilter, TrialState};

backends!(
    eight_processes_lose_nothing,
    claims_within_a_budget_never_overshoot
);

const WORKERS: usize = 8;
const TRIALS: usize = 250;
const STEPS: i64 = 10;

fn eight_processes_lose_nothing(backend: Backend) {
    let Some(db) = common::fresh(backend, "load") else {
        return;
    };
    let storage = db.open();
    let study = storage
        .create_study("load", &[StudyDirection::Minimize])
        .unwrap();

    // synchronous=NORMAL keeps the test fast on slow CI disks; durability
    // against process kills is the same (see the crash test).
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_store-writer"))
                .args(["load"])
                .arg(&db.url)
                .args(["load", &TRIALS.to_string(), &STEPS.to_string(), "normal"])
                .output_async()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "worker {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("worker {i}: {}", String::from_utf8_lossy(&out.stdout));
    }

    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    assert_eq!(trials.len(), WORKERS * TRIALS);
    let numbers: BTreeSet<i64> = trials.iter().map(|t| t.number as i64).collect();
    assert_eq!(numbers, (0..(WORKERS * TRIALS) as i64).collect());
    for t in &trials {
        assert_eq!(t.state, TrialState::Complete, "trial {}", t.number);
        assert_eq!(t.values, Some(vec![t.number as f64 + 0.25]));
        assert_eq!(t.params.len(), 1);
        let expected: Vec<(i64, f64)> = (0..STEPS)
            .map(|s| (s, (t.number as i64 * 1000 + s) as f64))
            .collect();
        let got: Vec<(i64, f64)> = t
            .intermediate_values
            .iter()
            .map(|(&s, &v)| (s, v))
            .collect();
        assert_eq!(got, expected, "trial {}", t.number);
    }
}

/// How many trials the file of the torn-read tests holds: enough that one
/// read of them is still running when a checkpoint rewrites the file.
const FLIPPED_TRIALS: usize = 10_000;
const FLIPPED_PARAMS: [&str; 3] = ["a", "b", "c"];

/// An SQLite file in WAL mode with one study of [`FLIPPED_TRIALS`]
/// COMPLETE trials, each with [`FLIPPED_PARAMS`] and one objective value,
/// every value 0.25; closed, so no `-wal` or `-shm` is beside it.
fn file_at_rest(dir: &Path) -> PathBuf {
    let path = dir.join("flip.db");
    let storage = Storage::open(&path).unwrap();
    let study = storage
        .create_study("flip", &[StudyDirection::Minimize])
        .unwrap();
    let last = FLIPPED_TRIALS - 1;
    let names = FLIPPED_PARAMS
        .map(|n| format!("SELECT '{n}' AS name"))
        .join(" UNION ALL ");
    storage
        .execute_batch(&format!(
            "BEGIN; \
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last}) \
             INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) \
             SELECT i, {id}, 'COMPLETE', '2025-01-01 00:00:00.000000', '2025-01-01 00:00:01.000000' FROM n; \
             INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
             SELECT t.trial_id, p.name, 0.25, \
             '{{\"name\": \"FloatDistribution\", \"attributes\": {{\"step\": null, \"low\": 0.0, \"high\": 1.0, \"log\": false}}}}' \
             FROM trials t, ({names}) p; \
             INSERT INTO trial_values (trial_id, objective, value, value_type) \
             SELECT trial_id, 0, 0.25, 'FINITE' FROM trials; COMMIT;",
            id = study.study_id
        ))
        .unwrap();
    drop(storage);
    for side in ["-wal", "-shm"] {
        let side = format!("{}{side}", path.display());
        assert!(!Path::new(&side).exists(), "{side} left behind");
    }
    path
}

/// While another program opens the file, rewrites every value in one
/// transaction and closes it (checkpointing into the file) over and over,
/// `reader` reads the study through `store-writer read-uniform` (a new
/// read-only storage per read, as memtune's read commands open one): every
/// read must see all values of one commit.
fn reads_see_one_commit_while_a_writer_comes_and_goes(reader: impl Fn(&Path) -> Command) {
    reads_see_one_commit(reader, false)
}

/// [`reads_see_one_commit_while_a_writer_comes_and_goes`], the reader
/// given the file through a symbolic link in another folder (SQLite's side
/// files are beside the link's target) when `through_link`.
fn reads_see_one_commit(reader: impl Fn(&Path) -> Command, through_link: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = file_at_rest(dir.path());
    let read_path = if through_link {
        let links = dir.path().join("links");
        std::fs::create_dir(&links).unwrap();
        let link = links.join("study.db");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        link
    } else {
        path.clone()
    };
    let mut flipper = Command::new(env!("CARGO_BIN_EXE_store-writer"))
        .arg("flip")
        .arg(&path)
        .stdin(Stdio::piped())
        .output_async();
    let read = reader(dir.path())
        .args(["read-uniform"])
        .arg(&read_path)
        .args(["flip", "10"])
        .output()
        .unwrap();
    drop(flipper.stdin.take());
    let flipped = flipper.wait_with_output().unwrap();
    assert!(
        flipped.status.success(),
        "flip: {}",
        String::from_utf8_lossy(&flipped.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&flipped.stdout));
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
}

/// A reader that may write the file and its directory (the file's owner).
#[test]
fn sqlite_reads_by_the_owner_see_one_commit_while_a_writer_comes_and_goes() {
    reads_see_one_commit_while_a_writer_comes_and_goes(|_| {
        Command::new(env!("CARGO_BIN_EXE_store-writer"))
    });
}

/// A reader that may not write the file (user `nobody`; the test must run
/// as root to be someone else).
#[test]
fn sqlite_reads_by_another_user_see_one_commit_while_a_writer_comes_and_goes() {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can read as another user");
        return;
    }
    reads_see_one_commit_while_a_writer_comes_and_goes(as_nobody);
}

/// The same through a symbolic link: the side files that tell a writer is
/// there are beside the link's target, not beside the link.
#[test]
fn sqlite_reads_by_another_user_through_a_link_see_one_commit() {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can read as another user");
        return;
    }
    reads_see_one_commit(as_nobody, true);
}

/// `store-writer` run as user `nobody`, copied into `dir` (the build
/// directory may sit where only root enters).
fn as_nobody(dir: &Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    let exe = dir.join("store-writer");
    std::fs::copy(env!("CARGO_BIN_EXE_store-writer"), &exe).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(exe);
    c
}

trait SpawnPiped {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnPiped for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Eight connections claiming from one study with a budget of 40, while
/// two trials wait in the queue and one FAIL was retried (it does not
/// count): every WAITING trial is claimed exactly once, exactly 40 trials
/// count, and every claimed trial has its first heartbeat.
fn claims_within_a_budget_never_overshoot(backend: Backend) {
    const BUDGET: usize = 40;
    let Some(db) = common::fresh(backend, "budget") else {
        return;
    };
    let storage = db.open();
    let study = storage
        .create_study("budget", &[StudyDirection::Maximize])
        .unwrap();
    let failed = storage.create_trial(study.study_id).unwrap();
    storage.heartbeat(failed.trial_id).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let policy = store::RetryPolicy {
        max_retry: Some(1),
        inherit_intermediate_values: false,
    };
    let stale = storage
        .fail_stale_trials(
            study.study_id,
            std::time::Duration::from_millis(1),
            Some(&policy),
        )
        .unwrap();
    assert_eq!(stale.len(), 1);
    storage
        .enqueue_trial(study.study_id, &store::NewTrial::default())
        .unwrap();
    assert_eq!(storage.counted_trials(study.study_id).unwrap(), 2);

    let claimed: Vec<Vec<store::Claim>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|_| {
                let url = &db.url;
                scope.spawn(move || {
                    let s = Storage::open_url(url, &OpenOptions::default()).unwrap();
                    let owner = store::Owner {
                        id: format!("{:?}", std::thread::current().id()),
                        stale_after: std::time::Duration::from_secs(60),
                    };
                    let mut mine = Vec::new();
                    while let Some(c) = s
                        .claim_or_create_within(study.study_id, BUDGET, &owner)
                        .unwrap()
                    {
                        s.finish(c.trial().trial_id, TrialState::Complete, &[1.0])
                            .unwrap();
                        mine.push(c);
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<store::Claim> = claimed.into_iter().flatten().collect();
    let queued = all
        .iter()
        .filter(|c| matches!(c, store::Claim::Claimed(_)))
        .count();
    assert_eq!(queued, 2, "each WAITING trial claimed once");
    // The retried FAIL does not count; its WAITING retry does.
    assert_eq!(all.len(), BUDGET);
    assert_eq!(storage.counted_trials(study.study_id).unwrap(), BUDGET);
    assert_eq!(storage.owned_running_trials(study.study_id).unwrap(), 0);
    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    assert_eq!(trials.len(), BUDGET + 1);
    let hb = storage
        .query_text("SELECT count(*) FROM trial_heartbeats")
        .unwrap();
    assert_eq!(
        hb,
        vec![vec![Some((BUDGET + 1).to_string())]],
        "every claim beats at once"
    );
}

/// A file in rollback-journal mode (Optuna's default) returns to it when
/// its writers have all closed, whichever of two overlapping writers closes
/// last. A file with a `user_version` of its own is not marked, so there
/// only a single writer restores it; a file in WAL mode before memtune
/// stays in WAL mode.
#[test]
fn overlapping_writers_leave_a_rollback_file_in_rollback_mode() {
    let dir = tempfile::tempdir().unwrap();
    let header = |path: &Path| std::fs::read(path).unwrap();
    let user_version = |path: &Path| u32::from_be_bytes(header(path)[60..64].try_into().unwrap());
    let rollback_file = |name: &str, own_version: u32| {
        let db = dir.path().join(name);
        let s = Storage::open(&db).unwrap();
        s.create_study("s", &[StudyDirection::Minimize]).unwrap();
        s.execute_batch(&format!(
            "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE; \
             PRAGMA user_version={own_version};"
        ))
        .unwrap();
        drop(s);
        assert_eq!(header(&db)[18], 1);
        db
    };

    let db = rollback_file("plain.db", 0);
    let first = Storage::open(&db).unwrap();
    let second = Storage::open(&db).unwrap();
    let study = second.study("s").unwrap();
    drop(first);
    assert_eq!(header(&db)[18], 2, "WAL while the second writes");
    second.create_trial(study.study_id).unwrap();
    drop(second);
    assert_eq!(header(&db)[18], 1, "left in WAL mode");
    assert!(!dir.path().join("plain.db-wal").exists());
    assert_eq!(user_version(&db), 0);
    let trials = Storage::open(&db)
        .unwrap()
        .trials(study.study_id, &TrialFilter::default());
    assert_eq!(trials.unwrap().len(), 1);

    // A writer that opened between another's switch to WAL and its mark
    // (here: the mark taken away while it opens) still finds the mark when
    // it closes last.
    let db = rollback_file("window.db", 0);
    let first = Storage::open(&db).unwrap();
    let set_mark = |value: u32| {
        first
            .execute_batch(&format!("PRAGMA user_version = {value}"))
            .unwrap()
    };
    // In WAL mode the header in the file is not yet the latest.
    let mark = first.query_text("PRAGMA user_version").unwrap()[0][0].clone();
    let mark: u32 = mark.unwrap().parse().unwrap();
    assert_ne!(mark, 0, "a rollback file in WAL mode is marked");
    set_mark(0);
    let second = Storage::open(&db).unwrap();
    set_mark(mark);
    drop(first);
    drop(second);
    assert_eq!(header(&db)[18], 1, "left in WAL mode");
    assert_eq!(user_version(&db), 0);

    let db = rollback_file("versioned.db", 7);
    let s = Storage::open(&db).unwrap();
    s.create_trial(s.study("s").unwrap().study_id).unwrap();
    drop(s);
    assert_eq!(header(&db)[18], 1, "left in WAL mode");
    assert_eq!(user_version(&db), 7);

    let db = dir.path().join("wal.db");
    drop(Storage::open(&db).unwrap());
    drop(Storage::open(&db).unwrap());
    assert_eq!(
        header(&db)[18],
        2,
        "a WAL file was switched to rollback mode"
    );
}

/// Runs `sql` on the database of `url` through a connection of its own.
fn admin(url: &str, sql: &str) {
    let mut client = ::postgres::Client::connect(url, ::postgres::NoTls).unwrap();
    client.batch_execute(sql).unwrap();
}

/// A database whose default isolation is REPEATABLE READ or SERIALIZABLE
/// (`ALTER DATABASE ... SET default_transaction_isolation`): writes name
/// READ COMMITTED, so two first writers creating the schema at once both
/// succeed, and eight connections creating trials at once number them
/// 0..n, each once.
#[test]
fn postgres_writes_number_trials_once_whatever_the_default_isolation() {
    for (i, level) in ["repeatable read", "serializable"].iter().enumerate() {
        let Some(db) = common::fresh(Backend::Postgres, &format!("isolation{i}")) else {
            return;
        };
        admin(
            &db.url,
            &format!(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET \
                 default_transaction_isolation = %L', current_database(), '{level}'); END $$"
            ),
        );
        let opened: Vec<Storage> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2).map(|_| scope.spawn(|| db.open())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let study = opened[0]
            .create_study("iso", &[StudyDirection::Minimize])
            .unwrap();
        let mut numbers: Vec<i64> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..WORKERS)
                .map(|_| {
                    scope.spawn(|| {
                        let s = db.open();
                        (0..10)
                            .map(|_| s.create_trial(study.study_id).unwrap().number)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        numbers.sort();
        let want: Vec<i64> = (0..(WORKERS as i64 * 10)).collect();
        assert_eq!(numbers, want, "{level}");
    }
}

/// Optuna's tables are found where the session's unqualified names find
/// them: with an empty schema of its own first on the `search_path` (as a
/// schema named after the user is by default), a storage still opens the
/// study whose tables are in `public`, and creates none in the other
/// schema, which would hide Optuna's tables from Optuna.
#[test]
fn postgres_finds_optunas_tables_anywhere_on_the_search_path() {
    let Some(db) = common::fresh(Backend::Postgres, "search_path") else {
        return;
    };
    db.open()
        .create_study("in_public", &[StudyDirection::Minimize])
        .unwrap();
    admin(
        &db.url,
        "CREATE SCHEMA other; DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET \
         search_path = other, public', current_database()); END $$",
    );
    let storage = db.open();
    assert!(storage.study("in_public").is_ok());
    assert!(db.open_existing().unwrap().study("in_public").is_ok());
    let mut client = ::postgres::Client::connect(&db.url, ::postgres::NoTls).unwrap();
    let schema: String = client
        .query_one("SELECT current_schema()::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(schema, "other");
    let in_other: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'other'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(in_other, 0);
}

/// A database shared with another program's tables takes Optuna's schema
/// beside them, as Optuna's own `create_study` does.
#[test]
fn postgres_makes_optunas_tables_beside_other_tables() {
    let Some(db) = common::fresh(Backend::Postgres, "shared") else {
        return;
    };
    admin(&db.url, "CREATE TABLE customers (id int)");
    let storage = db.open();
    storage
        .create_study("beside", &[StudyDirection::Minimize])
        .unwrap();
    assert!(db.open_existing().unwrap().study("beside").is_ok());
}

/// Dropping Optuna's tables leaves its ENUM types behind, and Optuna's own
/// `create_study` then makes the tables again beside them; so does ours.
#[test]
fn postgres_makes_optunas_tables_again_beside_its_left_enum_types() {
    let Some(db) = common::fresh(Backend::Postgres, "left_enums") else {
        return;
    };
    db.open()
        .create_study("dropped", &[StudyDirection::Minimize])
        .unwrap();
    admin(
        &db.url,
        "DO $$ DECLARE t text; BEGIN FOR t IN SELECT tablename FROM pg_tables \
         WHERE schemaname = 'public' LOOP EXECUTE format('DROP TABLE %I CASCADE', t); \
         END LOOP; END $$",
    );
    let storage = db.open();
    let study = storage
        .create_study("again", &[StudyDirection::Maximize])
        .unwrap();
    let trial = storage.create_trial(study.study_id).unwrap();
    storage
        .finish(trial.trial_id, TrialState::Complete, &[1.0])
        .unwrap();
    assert!(storage.study("dropped").is_err());
    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    assert_eq!(trials.len(), 1);
    assert!(db.open_existing().unwrap().study("again").is_ok());
}

/// A type by the name of one of Optuna's enums that is not that enum (other
/// labels, or a table's row type) is refused by name before any table is
/// made, and the database is left as it was.
#[test]
fn postgres_refuses_a_foreign_type_by_the_name_of_optunas_enum() {
    let cases = [
        (
            "CREATE TYPE trialstate AS ENUM ('RUNNING', 'DONE')",
            r#"type `trialstate` exists with labels ["RUNNING", "DONE"]"#,
        ),
        (
            "CREATE TABLE trialvaluetype (id int)",
            "type `trialvaluetype` exists and is not an enum",
        ),
    ];
    for (i, (sql, message)) in cases.into_iter().enumerate() {
        let Some(db) = common::fresh(Backend::Postgres, &format!("foreign_type{i}")) else {
            return;
        };
        admin(&db.url, sql);
        let Err(err) = Storage::open_url(&db.url, &OpenOptions::default()) else {
            panic!("a foreign type `{sql}` was not refused");
        };
        assert!(
            matches!(err, store::StoreError::ForeignType { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(message), "{err}");
        let mut client = ::postgres::Client::connect(&db.url, ::postgres::NoTls).unwrap();
        let made: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_type WHERE typname IN ('studydirection', 'studies')",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(made, 0, "nothing made before the refusal");
    }
}

//! The exit-code table (`cli::error`): 0 ok, 1 a failure while working,
//! 2 a wrong command line, study file, model directory or data file, 130
//! interrupted. 130 is checked
//! where a run is interrupted (`tune_faults.rs` for Ctrl-C, `misuse.rs` for
//! SIGTERM); this file covers the rest, and `-q`, `MEMTUNE_LOG` and the
//! shell completions.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{memtune, ok};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.args(args).env_remove("MEMTUNE_STORAGE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn code_and_stderr(out: Output) -> (Option<i32>, String) {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    (out.status.code(), err)
}

const SIM_STUDY: &str = r#"
[study]
name = "codes"
n_trials = 2

[models.bert-base]
sim = "bert-base"

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4

[fixed]
model = "bert-base"
batch_size = 8
max_length = 128
epochs = 1

[sampler]
kind = "random"
seed = 3

[runner]
device = "sim"
max_workers = 1
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// What is tried, the arguments, extra environment, the exit code wanted
/// and a text stderr must hold.
type Case<'a> = (
    &'a str,
    Vec<&'a str>,
    &'a [(&'a str, &'a str)],
    i32,
    &'a str,
);

#[test]
fn each_kind_of_outcome_has_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let url = common::url(&db);
    ok(memtune(&db, &["create-study", "--study-name", "s"]));
    let good_study = write(dir.path(), "good.toml", SIM_STUDY);
    let bad_toml = write(dir.path(), "bad.toml", "[study\nname = 1\n");
    let missing_data = write(
        dir.path(),
        "missing-data.toml",
        &SIM_STUDY
            .replace("device = \"sim\"", "device = \"cpu\"")
            .replace(
                "[models.bert-base]\nsim = \"bert-base\"",
                "[models.bert-base]\ndir = \"/nowhere/model\"",
            ),
    );
    let missing_file = write(
        dir.path(),
        "missing-file.toml",
        &SIM_STUDY
            .replace("device = \"sim\"", "device = \"cpu\"")
            .replace(
                "[models.bert-base]\nsim = \"bert-base\"",
                "[data]\nfiles = [\"/nowhere/data.csv\"]\nnum_classes = 2\n\n[models.bert-base]\ndir = \"/nowhere/model\"",
            ),
    );
    let texts = write(dir.path(), "texts.jsonl", "{\"text\": \"fine\"}\n");
    let out_dir = dir.path().join("retrained").display().to_string();
    let missing_db = dir.path().join("missing.db");
    let missing_url = common::url(&missing_db);

    let table: &[Case] = &[
        ("success", vec!["--storage", &url, "studies"], &[], 0, ""),
        (
            "a study run to the end",
            vec![
                "--storage",
                &url,
                "tune",
                "--no-progress",
                "--config",
                &good_study,
            ],
            &[],
            0,
            "",
        ),
        (
            "no storage given",
            vec!["studies"],
            &[],
            2,
            "no storage given",
        ),
        (
            "an unknown flag",
            vec!["studies", "--bogus"],
            &[],
            2,
            "--bogus",
        ),
        (
            "a bad study file",
            vec!["--storage", &url, "tune", "--config", &bad_toml],
            &[],
            2,
            "bad.toml:1",
        ),
        (
            "a bad MEMTUNE_LOG",
            vec!["--storage", &url, "studies"],
            &[("MEMTUNE_LOG", "[[[")],
            2,
            "MEMTUNE_LOG",
        ),
        (
            "telling a trial never asked",
            vec![
                "--storage",
                &url,
                "tell",
                "--study-name",
                "s",
                "--trial-number",
                "0",
                "--state",
                "fail",
                "--values",
                "1.0",
            ],
            &[],
            2,
            "has not been created",
        ),
        (
            "a storage file that does not exist",
            vec!["--storage", &missing_url, "studies"],
            &[],
            1,
            "missing.db",
        ),
        (
            "a study that does not exist",
            vec!["--storage", &url, "best", "--study-name", "nosuch"],
            &[],
            1,
            "nosuch",
        ),
        (
            "a model that cannot be read",
            vec![
                "--storage",
                &url,
                "tune",
                "--no-progress",
                "--config",
                &missing_data,
            ],
            &[],
            2,
            "/nowhere/model",
        ),
        (
            "a data file that cannot be read",
            vec![
                "--storage",
                &url,
                "tune",
                "--no-progress",
                "--config",
                &missing_file,
            ],
            &[],
            2,
            "/nowhere/data.csv",
        ),
        (
            "predicting with a model directory that cannot be read",
            vec!["predict", "--model", "/nowhere/model", "--data", &texts],
            &[],
            2,
            "/nowhere/model",
        ),
        (
            "retraining with a study file whose model cannot be read",
            vec![
                "--storage",
                &url,
                "train",
                "--study",
                "codes",
                "--config",
                &missing_data,
                "--output",
                &out_dir,
            ],
            &[],
            2,
            "/nowhere/model",
        ),
    ];
    for (what, args, env, want, says) in table {
        let (code, err) = code_and_stderr(run(args, env));
        assert_eq!(code, Some(*want), "{what}: {err}");
        assert!(
            err.contains(says),
            "{what}: stderr does not name `{says}`:\n{err}"
        );
    }
    assert!(
        !missing_db.exists(),
        "a read command created the storage file"
    );
}

#[test]
fn quiet_prints_nothing_but_the_result_and_verbose_adds_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let url = common::url(&db);
    let tune = |flags: &[&str], study_name: &str| {
        let text = SIM_STUDY.replace("name = \"codes\"", &format!("name = \"{study_name}\""));
        let cfg = write(dir.path(), &format!("{study_name}.toml"), &text);
        let mut args = vec!["--storage", url.as_str()];
        args.extend_from_slice(flags);
        args.extend(["tune", "--no-progress", "--config", cfg.as_str()]);
        run(&args, &[])
    };

    let plain = tune(&[], "plain");
    let (code, plain_err) = code_and_stderr(plain);
    assert_eq!(code, Some(0), "{plain_err}");
    assert!(plain_err.contains("memtune: study `plain`"), "{plain_err}");

    let quiet = tune(&["-q"], "quiet");
    let quiet_out = String::from_utf8_lossy(&quiet.stdout).to_string();
    let (code, quiet_err) = code_and_stderr(quiet);
    assert_eq!(code, Some(0), "{quiet_err}");
    assert_eq!(quiet_err, "", "-q printed on stderr");
    assert!(
        quiet_out.contains("best"),
        "the summary still goes to stdout: {quiet_out}"
    );

    let verbose = tune(&["-v"], "verbose");
    let (code, verbose_err) = code_and_stderr(verbose);
    assert_eq!(code, Some(0), "{verbose_err}");
    assert!(
        verbose_err.contains(" INFO ") && verbose_err.len() > plain_err.len(),
        "-v adds the structured log:\n{verbose_err}"
    );
}

#[test]
fn memtune_log_filters_the_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let url = common::url(&db);
    let cfg = write(dir.path(), "l.toml", SIM_STUDY);
    let log_lines = |filter: Option<&str>| {
        let log = dir.path().join("codes.log");
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&db);
        let env: Vec<(&str, &str)> = filter.map(|f| ("MEMTUNE_LOG", f)).into_iter().collect();
        let (code, err) = code_and_stderr(run(
            &[
                "--storage",
                &url,
                "-q",
                "tune",
                "--no-progress",
                "--config",
                &cfg,
            ],
            &env,
        ));
        assert_eq!(code, Some(0), "{err}");
        std::fs::read_to_string(&log).unwrap()
    };
    let all = log_lines(None);
    assert!(
        all.contains("DEBUG"),
        "the default keeps debug events:\n{all}"
    );
    let warn = log_lines(Some("warn"));
    assert!(
        !warn.contains("DEBUG") && !warn.contains(" INFO "),
        "{warn}"
    );
    assert!(warn.len() < all.len());
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completions", shell], &[]);
        let script = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        assert!(
            script.contains("memtune") && script.contains("tune"),
            "{shell}"
        );
    }
    let (code, err) = code_and_stderr(run(&["completions", "cmd.exe"], &[]));
    assert_eq!(code, Some(2), "{err}");
}

/// Output to a reader that left (`| head -1`) ends every command quietly
/// with 0, whichever writer met the broken pipe (a CSV writer, the shell
/// completions); output that cannot be written otherwise is an error, 1,
/// never a panic.
#[test]
fn a_reader_that_left_is_no_failure_and_an_unwritable_output_is() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pipe.db");
    let storage = store::Storage::open(&db).unwrap();
    let study = storage
        .create_study("s", &[store::StudyDirection::Minimize])
        .unwrap();
    for value in [1.0, 2.0] {
        let t = storage.create_trial(study.study_id).unwrap();
        storage
            .finish(t.trial_id, store::TrialState::Complete, &[value])
            .unwrap();
    }
    drop(storage);
    let url = common::url(&db);
    let commands: [&[&str]; 5] = [
        &["completions", "bash"],
        &["export", "--study", "s", "--format", "csv"],
        &["export", "--study", "s", "--format", "json"],
        &["trials", "--study", "s"],
        &["best", "--study", "s"],
    ];
    let run_into = |args: &[&str], stdout: std::process::Stdio| {
        Command::new(env!("CARGO_BIN_EXE_memtune"))
            .args(["--storage", &url])
            .args(args)
            .env_remove("MEMTUNE_STORAGE")
            .stdout(stdout)
            .output()
            .unwrap()
    };
    for args in commands {
        // The read end is closed before the command starts: its first
        // write meets a broken pipe.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let (code, err) = code_and_stderr(run_into(args, writer.into()));
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
    let (_reader, full) = full_pipe();
    let (code, err) = code_and_stderr(run_into(&["completions", "bash"], full.into()));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot write output"), "{err}");
}

/// A pipe whose buffer is full and whose writing end does not block: every
/// write to it fails (with `WouldBlock`) while the reader stays, as a full
/// disk's would. (A closed stdout is no such output: Rust's stdout ignores
/// a bad descriptor.)
fn full_pipe() -> (std::io::PipeReader, std::io::PipeWriter) {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let (reader, mut writer) = std::io::pipe().unwrap();
    // SAFETY: fcntl on a descriptor this function owns, with no pointers.
    unsafe {
        let fd = writer.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        assert!(flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0);
    }
    let block = [0u8; 4096];
    loop {
        match writer.write(&block) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
    (reader, writer)
}

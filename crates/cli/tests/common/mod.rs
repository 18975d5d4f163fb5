//! Running the `memtune` binary in integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Optuna's URL form of a SQLite file.
pub fn url(db: &Path) -> String {
    format!("sqlite:///{}", db.display())
}

/// Runs `memtune --storage sqlite:///DB ARGS...`, ignoring any MEMTUNE_STORAGE.
pub fn memtune(db: &Path, args: &[&str]) -> Output {
    memtune_command(&url(db), args).output().unwrap()
}

/// Runs `memtune --storage URL ARGS...`, ignoring any MEMTUNE_STORAGE.
pub fn memtune_on(url: &str, args: &[&str]) -> Output {
    memtune_command(url, args).output().unwrap()
}

/// Runs `memtune --storage URL ARGS...` in `dir`, where a study on a
/// server writes its log and report.
pub fn memtune_in(dir: &Path, url: &str, args: &[&str]) -> Output {
    memtune_command(url, args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn memtune_command(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.arg("--storage")
        .arg(url)
        .args(args)
        .env_remove("MEMTUNE_STORAGE");
    cmd
}

/// Runs `cmd` to its end, capturing its output; a run still going after
/// `limit` is killed (with its process group, when it leads one) and the
/// test fails: a hang fails rather than blocks the suite.
pub fn output_within(cmd: &mut Command, limit: std::time::Duration) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read as it comes, so a full pipe never passes for a hang.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: signalling our own child's process group (none when
            // it leads none: a group's id is its leader's pid) and the child.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&stdout.join().unwrap()),
                String::from_utf8_lossy(&stderr.join().unwrap())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// The stdout of a command that must succeed.
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "memtune failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The stderr of a command that must be refused cleanly: non-zero exit, no
/// panic, nothing on stdout.
pub fn fails(out: Output) -> String {
    assert!(!out.status.success(), "expected failure");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty(), "a refused command printed output");
    err
}

/// Trials of the file's only study that the runner leased memory for.
pub fn started_trials(db: &Path) -> usize {
    let storage = store::Storage::open_existing(db).unwrap();
    let studies = storage.studies().unwrap();
    assert_eq!(studies.len(), 1);
    storage
        .trials(studies[0].study.study_id, &store::TrialFilter::default())
        .unwrap()
        .iter()
        .filter(|t| t.user_attrs.contains_key("lease_bytes"))
        .count()
}

/// A test resource is missing: under `CI` that fails the test (CI must run
/// it); elsewhere the test says so and skips.
pub fn skip_or_fail(what: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} is missing; CI must run this test");
    }
    eprintln!("skipping: {what} is missing");
}

/// `MEMTUNE_PYTHON`, the reference venv's Python (Optuna 5.0 and the peers
/// of `benches/requirements.txt`), or `None` after [`skip_or_fail`].
pub fn reference_python() -> Option<PathBuf> {
    let py = std::env::var_os("MEMTUNE_PYTHON").map(PathBuf::from);
    if py.is_none() {
        skip_or_fail("MEMTUNE_PYTHON (a Python with optuna==5.0.0)");
    }
    py
}

/// `MEMTUNE_TORCH_PYTHON`, the torch venv's Python (torch, transformers and
/// Optuna 5.0, `benches/reference/requirements-torch.txt`), or `None` after
/// [`skip_or_fail`].
pub fn torch_python() -> Option<PathBuf> {
    let py = std::env::var_os("MEMTUNE_TORCH_PYTHON").map(PathBuf::from);
    if py.is_none() {
        skip_or_fail("MEMTUNE_TORCH_PYTHON (`cargo xtask python torch`)");
    }
    py
}

/// A `memtune tune` study of the legacy setup's kind of space (bert-base
/// or bert-large, learning rate, batch size, max length; two epochs) on a
/// simulated device of `device` bytes, three workers; `extra` goes at the
/// end of `[runner]`.
pub fn sim_study(name: &str, n_trials: usize, device: &str, extra: &str) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = {n_trials}

[objective]
metric = "accuracy"

[models.bert-base]
sim = "bert-base"

[models.bert-large]
sim = "bert-large"

[[param]]
name = "model"
type = "categorical"
choices = ["bert-base", "bert-large"]

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4
log = true

[[param]]
name = "batch_size"
type = "categorical"
choices = [8, 16, 32, 64]

[[param]]
name = "max_length"
type = "categorical"
choices = [128, 256]

[fixed]
epochs = 2
warmup_ratio = 0.1

[sampler]
kind = "tpe"
seed = 7

[pruner]
kind = "none"

[runner]
device = "sim"
sim_memory = "{device}"
heartbeat = "200ms"
stale_after = "2s"
max_workers = 3
{extra}
"#
    )
}

/// A study of bert-base on the simulated device: learning rate and batch
/// size (8, 16, 32) searched, length 128 and `epochs` fixed, no pruner;
/// `sampler` and `runner` are the bodies of `[sampler]` and `[runner]`
/// (`device = "sim"` is set). A trial takes a fraction of a second.
pub fn bert_base_sim_study(
    name: &str,
    n_trials: usize,
    epochs: usize,
    sampler: &str,
    runner: &str,
) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = {n_trials}

[objective]
metric = "accuracy"

[models.bert-base]
sim = "bert-base"

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4
log = true

[[param]]
name = "batch_size"
type = "categorical"
choices = [8, 16, 32]

[fixed]
model = "bert-base"
max_length = 128
epochs = {epochs}
warmup_ratio = 0.1

[sampler]
{sampler}

[pruner]
kind = "none"

[runner]
device = "sim"
{runner}
"#
    )
}

/// An Optuna client for `python -c`, with args URL STUDY N SLEEP
/// HEARTBEAT GRACE: `study.optimize` of N trials over
/// [`bert_base_sim_study`]'s space, each sleeping SLEEP seconds, with
/// `RDBStorage(heartbeat_interval=HEARTBEAT, grace_period=GRACE)`; prints
/// the numbers of its trials.
pub const OPTUNA_HEARTBEAT_CLIENT: &str = r#"
import sys, time, optuna
url, name, n, sleep = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
heartbeat, grace = int(sys.argv[5]), int(sys.argv[6])
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat, grace_period=grace)
study = optuna.load_study(study_name=name, storage=storage,
                          sampler=optuna.samplers.RandomSampler(seed=1))
numbers = []
def objective(trial):
    trial.suggest_float("learning_rate", 1e-5, 1e-4, log=True)
    trial.suggest_categorical("batch_size", [8, 16, 32])
    numbers.append(trial.number)
    time.sleep(sleep)
    return 0.5
study.optimize(objective, n_trials=n)
print(" ".join(map(str, numbers)))
"#;

/// Runs `python -c SCRIPT ARGS...`; its stdout, or a panic with its stderr.
pub fn run_python(py: &Path, script: &str, args: &[&str]) -> String {
    let out = Command::new(py)
        .args(["-c", script])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

//! The read-side commands run as the real binary over a study written with
//! the store, checking what they print.

mod common;

use common::{fails, memtune, ok};
use serde_json::{Value as Json, json};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;
use store::{Distribution, Storage, StudyDirection, TrialState};

/// batch size, optimizer, final state, attribute, values.
type SampleTrial = (
    i64,
    &'static str,
    TrialState,
    Option<(&'static str, Json)>,
    &'static [f64],
);

/// A study with one COMPLETE, two OOM FAILs, one CUDA-error FAIL, one PRUNED.
fn sample(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("study.db");
    let s = Storage::open(&db).unwrap();
    let st = s
        .create_study("bert-sst2", &[StudyDirection::Maximize])
        .unwrap();
    s.create_study(
        "other",
        &[StudyDirection::Minimize, StudyDirection::Minimize],
    )
    .unwrap();
    let bs = Distribution::Int {
        low: 8,
        high: 128,
        log: true,
        step: 1,
    };
    let opt = Distribution::Categorical {
        choices: vec!["adamw".into(), "sgd".into()],
    };
    let rows: [SampleTrial; 5] = [
        (16, "adamw", TrialState::Complete, None, &[0.91]),
        (
            128,
            "adamw",
            TrialState::Fail,
            Some(("oom", json!(true))),
            &[],
        ),
        (
            64,
            "sgd",
            TrialState::Fail,
            Some(("cuda_error", json!("device-side assert"))),
            &[],
        ),
        (96, "sgd", TrialState::Fail, Some(("oom", json!(true))), &[]),
        (8, "sgd", TrialState::Pruned, None, &[0.5]),
    ];
    for (batch, o, state, attr, values) in rows {
        let t = s.create_trial(st.study_id).unwrap();
        s.set_param(t.trial_id, "batch_size", batch as f64, &bs)
            .unwrap();
        let idx = opt.to_internal(&o.into()).unwrap();
        s.set_param(t.trial_id, "optimizer", idx, &opt).unwrap();
        s.report_intermediate(t.trial_id, 0, 0.25).unwrap();
        if let Some((k, v)) = attr {
            s.set_trial_user_attr(t.trial_id, k, &v).unwrap();
        }
        s.finish(t.trial_id, state, values).unwrap();
    }
    db
}

#[test]
fn studies_lists_counts() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample(dir.path());
    let before = std::fs::read(&db).unwrap();
    let text = ok(memtune(&db, &["studies"]));
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "a read command changed the file"
    );
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0][0], "study");
    assert_eq!(
        lines[1],
        ["bert-sst2", "MAXIMIZE", "5", "1", "1", "3", "0", "0"]
    );
    assert_eq!(
        lines[2],
        ["other", "MINIMIZE,MINIMIZE", "0", "0", "0", "0", "0", "0"]
    );
}

#[test]
fn trials_lists_oom_failures_with_their_configs() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample(dir.path());
    let text = ok(memtune(
        &db,
        &[
            "trials",
            "--study",
            "bert-sst2",
            "--state",
            "fail",
            "--attr",
            "oom",
        ],
    ));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let row = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        row(lines[1]),
        [
            "1",
            "FAIL",
            "-",
            "true",
            "batch_size=128",
            "optimizer=adamw"
        ]
    );
    assert_eq!(
        row(lines[2]),
        ["3", "FAIL", "-", "true", "batch_size=96", "optimizer=sgd"]
    );
    assert_eq!(lines[3], "2 trials");

    let text = ok(memtune(
        &db,
        &["trials", "--study", "bert-sst2", "--attr", "cuda_error"],
    ));
    assert!(text.contains("device-side assert"), "{text}");
    assert!(text.contains("batch_size=64"), "{text}");

    let text = ok(memtune(
        &db,
        &[
            "trials",
            "--study",
            "bert-sst2",
            "--state",
            "complete,pruned",
        ],
    ));
    assert!(text.ends_with("2 trials\n"), "{text}");
    assert!(text.contains("0.91"), "{text}");
}

#[test]
fn best_shows_the_best_complete_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample(dir.path());
    let text = ok(memtune(&db, &["best", "--study", "bert-sst2"]));
    assert_eq!(
        text,
        "trial 0: values 0.91\n  batch_size = 16\n  optimizer = adamw\n"
    );
    let text = ok(memtune(&db, &["best", "--study", "other"]));
    assert_eq!(text, "study `other` has no COMPLETE trial yet\n");
    // One COMPLETE trial, infeasible (a constraint above 0).
    {
        let s = Storage::open_existing(&db).unwrap();
        let id = s.study("other").unwrap().study_id;
        let t = s.create_trial(id).unwrap();
        s.set_trial_system_attr(t.trial_id, "constraints", &json!([1.0]))
            .unwrap();
        s.finish(t.trial_id, TrialState::Complete, &[1.0, 2.0])
            .unwrap();
    }
    let text = ok(memtune(&db, &["best", "--study", "other"]));
    assert_eq!(
        text,
        "study `other` has no COMPLETE trial that meets its constraints yet\n"
    );
}

#[test]
fn export_csv_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample(dir.path());
    let text = ok(memtune(
        &db,
        &["export", "--study", "bert-sst2", "--format", "csv"],
    ));
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header,
        [
            "number",
            "value",
            "datetime_start",
            "datetime_complete",
            "params_batch_size",
            "params_optimizer",
            "user_attrs_cuda_error",
            "user_attrs_oom",
            "state"
        ]
    );
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 5);
    assert_eq!(&rows[0][1], "0.91");
    assert_eq!(&rows[1][4], "128");
    assert_eq!(&rows[2][6], "device-side assert");
    assert_eq!(&rows[4][8], "PRUNED");

    let text = ok(memtune(
        &db,
        &["export", "--study", "bert-sst2", "--format", "json"],
    ));
    let doc: Json = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["directions"], json!(["MAXIMIZE"]));
    let t = &doc["trials"];
    assert_eq!(t.as_array().unwrap().len(), 5);
    assert_eq!(
        t[0]["params"],
        json!({"batch_size": 16, "optimizer": "adamw"})
    );
    assert_eq!(t[0]["values"], json!([0.91]));
    assert_eq!(t[0]["intermediate_values"], json!({"0": 0.25}));
    assert_eq!(t[1]["user_attrs"], json!({"oom": true}));
    assert_eq!(doc["metric_names"], Json::Null);

    // Named metrics (Optuna's `set_metric_names`, which `memtune tune`
    // sets) name the value columns as `trials_dataframe()` does.
    {
        let s = Storage::open_existing(&db).unwrap();
        for (study, names) in [
            ("bert-sst2", json!(["accuracy"])),
            ("other", json!(["loss", "peak_memory"])),
        ] {
            let id = s.study(study).unwrap().study_id;
            s.set_study_system_attr(id, "study:metric_names", &names)
                .unwrap();
        }
    }
    for (study, columns) in [
        ("bert-sst2", vec!["number", "value_accuracy"]),
        ("other", vec!["number", "values_loss", "values_peak_memory"]),
    ] {
        let text = ok(memtune(
            &db,
            &["export", "--study", study, "--format", "csv"],
        ));
        let header = text.lines().next().unwrap();
        assert!(
            header.starts_with(&format!("{},datetime_start", columns.join(","))),
            "{header}"
        );
    }
    let text = ok(memtune(
        &db,
        &["export", "--study", "other", "--format", "json"],
    ));
    let doc: Json = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["metric_names"], json!(["loss", "peak_memory"]));
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample(dir.path());
    let err = fails(memtune(&db, &["trials", "--study", "nope"]));
    assert!(err.contains("study `nope` not found"), "{err}");

    let missing = dir.path().join("missing.db");
    let err = fails(memtune(&missing, &["studies"]));
    assert!(err.contains("no such storage file"), "{err}");
    assert!(!missing.exists(), "a read command created the file");

    let out = Command::new(env!("CARGO_BIN_EXE_memtune"))
        .args(["--storage", "postgresql://me@host", "studies"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a wrong command line");
    let err = fails(out);
    assert!(
        err.contains("bad storage URL `postgresql://me@host`: no database name"),
        "{err}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_memtune"))
        .arg("studies")
        .env_remove("MEMTUNE_STORAGE")
        .output()
        .unwrap();
    assert!(fails(out).contains("no storage given"));

    let notes = dir.path().join("notes.txt");
    std::fs::write(
        &notes,
        "not a database at all, just some text\n".repeat(100),
    )
    .unwrap();
    let err = fails(memtune(&notes, &["studies"]));
    assert!(err.contains("not an SQLite database"), "{err}");
}

/// Values near `f64::MAX` (Optuna stores any finite float) give a report,
/// of one objective and of two: a chart's range is clamped so that its
/// width stays finite, where an infinite width never ended the axis' tick
/// loop.
#[test]
fn a_report_of_values_near_the_largest_float_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("huge.db");
    let s = Storage::open(&db).unwrap();
    let x = Distribution::Float {
        low: -1e308,
        high: 1e308,
        log: false,
        step: None,
    };
    let one = [StudyDirection::Maximize];
    let two = [StudyDirection::Maximize, StudyDirection::Minimize];
    for (name, directions) in [("one", &one[..]), ("two", &two[..])] {
        let st = s.create_study(name, directions).unwrap();
        for (i, value) in [0.0f64, 1.7e308, -1.7e308, 1e300].into_iter().enumerate() {
            let t = s.create_trial(st.study_id).unwrap();
            s.set_param(t.trial_id, "x", value.clamp(-1e308, 1e308), &x)
                .unwrap();
            s.report_intermediate(t.trial_id, 0, -value).unwrap();
            s.report_intermediate(t.trial_id, 1, value).unwrap();
            let state = if i == 3 {
                TrialState::Pruned
            } else {
                TrialState::Complete
            };
            let values = [value, -value];
            s.finish(t.trial_id, state, &values[..directions.len()])
                .unwrap();
        }
    }
    drop(s);
    for name in ["one", "two"] {
        let page = dir.path().join(format!("{name}.html"));
        report_within_a_minute(&db, name, &page);
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.contains("<svg"), "no chart in the report of {name}");
        assert!(
            !html.contains("NaN"),
            "a NaN coordinate in the report of {name}"
        );
    }
}

/// Runs `memtune report --study NAME -o PAGE`, which must succeed within a
/// minute (a chart's axis that never ends its tick loop would hang it).
fn report_within_a_minute(db: &Path, name: &str, page: &Path) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtune"))
        .arg("--storage")
        .arg(common::url(db))
        .args(["report", "--study", name, "-o", page.to_str().unwrap()])
        .env_remove("MEMTUNE_STORAGE")
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("memtune report of study {name} ran for a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "memtune report of study {name} failed");
}

/// A lease start that is no time (`inf`, `nan`, an hour of 1e300: what a
/// hand-edited or foreign study may hold) falls back to the trial's own
/// start, and the timeline is drawn and exported.
#[test]
fn a_report_of_lease_starts_that_are_no_time_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("times.db");
    let s = Storage::open(&db).unwrap();
    let st = s.create_study("s", &[StudyDirection::Minimize]).unwrap();
    let starts = [
        "2026-01-01 00:00:inf",
        "2026-01-01 00:00:nan",
        "2026-01-01 1e300:00:00",
        "2026-01-01 00:00:05",
    ];
    for (i, start) in starts.into_iter().enumerate() {
        let t = s.create_trial(st.study_id).unwrap();
        for (key, value) in [
            ("worker_pid", json!(100 + i)),
            ("micro_batch", json!(8)),
            ("device", json!("cuda:0")),
            ("lease_bytes", json!(1u64 << 30)),
            ("device_capacity_bytes", json!(8u64 << 30)),
            ("lease_start", json!(start)),
        ] {
            s.set_trial_user_attr(t.trial_id, key, &value).unwrap();
        }
        s.finish(t.trial_id, TrialState::Complete, &[i as f64])
            .unwrap();
    }
    drop(s);
    let page = dir.path().join("times.html");
    report_within_a_minute(&db, "s", &page);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("data-chart=\"timeline\""), "no timeline");
    assert!(
        !html.contains("NaN") && !html.contains("inf"),
        "a non-finite coordinate"
    );

    let trace = dir.path().join("trace.json");
    ok(memtune(
        &db,
        &["report", "--study", "s", "--trace", trace.to_str().unwrap()],
    ));
    let trace: Json = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    for event in trace["traceEvents"].as_array().unwrap() {
        for key in ["ts", "dur"] {
            assert!(event.get(key).is_none_or(Json::is_number), "{event}");
        }
    }
}

/// `report -o` writes only the file it names: never the study's own
/// database (named directly, through `..` or a link, or its WAL), never a
/// bystander beside the output, through a link rather than over it, into
/// a FIFO in place, and a directory is a clear error that leaves nothing.
#[test]
fn report_output_writes_only_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample(dir.path());
    let report = |output: &Path| {
        memtune(
            &db,
            &[
                "report",
                "--study",
                "bert-sst2",
                "-o",
                output.to_str().unwrap(),
            ],
        )
    };
    let stored = std::fs::read(&db).unwrap();
    std::os::unix::fs::symlink(&db, dir.path().join("db-link.html")).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for output in [
        db.clone(),
        dir.path().join("sub/../study.db"),
        dir.path().join("db-link.html"),
        dir.path().join("study.db-wal"),
    ] {
        let out = report(&output);
        assert_eq!(out.status.code(), Some(2), "{}", output.display());
        let err = fails(out);
        assert!(err.contains("the study's storage file"), "{err}");
        assert_eq!(std::fs::read(&db).unwrap(), stored, "{}", output.display());
    }

    let bystander = dir.path().join("sub/study.tmp");
    std::fs::write(&bystander, "someone else's").unwrap();
    ok(report(&dir.path().join("sub/study.html")));
    assert_eq!(
        std::fs::read_to_string(&bystander).unwrap(),
        "someone else's"
    );

    let page = dir.path().join("sub/page.html");
    let link = dir.path().join("link.html");
    std::os::unix::fs::symlink("sub/page.html", &link).unwrap();
    ok(report(&link));
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(std::fs::read_to_string(&page).unwrap().contains("<html"));

    let fifo = dir.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader = std::thread::spawn({
        let fifo = fifo.clone();
        move || std::fs::read_to_string(fifo).unwrap()
    });
    ok(report(&fifo));
    assert!(reader.join().unwrap().contains("<html"));
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );

    let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    for output in ["sub", "sub/"] {
        let err = fails(report(&dir.path().join(output)));
        assert!(err.contains("is a directory; give a file name"), "{err}");
    }
    let after: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(
        before.len(),
        after.len(),
        "a temporary file was left behind"
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
        3
    );
}

/// A study's name, each trial's value and constraint, and the number of
/// the best trial.
type BestCase = (&'static str, &'static [(f64, f64)], u64);

/// The report's best trial is the one `memtune best` names (Optuna's
/// `best_trial`): a better value that violates a constraint is passed
/// over, and an infinite value competes as any other.
#[test]
fn the_report_names_the_best_trial_that_best_names() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("best.db");
    let s = Storage::open(&db).unwrap();
    let studies: [BestCase; 2] = [
        ("constrained", &[(1.0, 0.0), (0.5, 1.0), (2.0, -1.0)], 0),
        (
            "infinite",
            &[(1.0, 0.0), (f64::NEG_INFINITY, 0.0), (0.5, 0.0)],
            1,
        ),
    ];
    for (name, trials, _) in studies {
        let st = s.create_study(name, &[StudyDirection::Minimize]).unwrap();
        for &(value, constraint) in trials {
            let t = s.create_trial(st.study_id).unwrap();
            s.set_trial_system_attr(t.trial_id, "constraints", &json!([constraint]))
                .unwrap();
            s.finish(t.trial_id, TrialState::Complete, &[value])
                .unwrap();
        }
    }
    drop(s);
    for (name, _, best) in studies {
        let named = ok(memtune(&db, &["best", "--study", name]));
        assert!(named.starts_with(&format!("trial {best}:")), "{named}");
        let page = dir.path().join(format!("{name}.html"));
        ok(memtune(
            &db,
            &["report", "--study", name, "-o", page.to_str().unwrap()],
        ));
        let html = std::fs::read_to_string(&page).unwrap();
        let shown = html.split("<h3>Best trial</h3>").nth(1).unwrap();
        let shown = &shown[..shown.find("</table>").unwrap()];
        assert!(
            shown.contains(&format!("<td>trial</td><td>{best}</td>")),
            "{name}: {shown}"
        );
    }
}

/// The Pareto section counts the front and the COMPLETE trials alike: a
/// trial with an infinite value may be on the front (as in Optuna's
/// best_trials), so it counts in the total too, and the page says it is
/// not drawn.
#[test]
fn the_pareto_front_is_counted_among_the_same_trials() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("front.db");
    let s = Storage::open(&db).unwrap();
    let both = [StudyDirection::Minimize, StudyDirection::Minimize];
    let st = s.create_study("mo", &both).unwrap();
    let inf = f64::INFINITY;
    for values in [[1.0, 2.0], [-inf, 5.0], [5.0, -inf], [2.0, 3.0]] {
        let t = s.create_trial(st.study_id).unwrap();
        s.finish(t.trial_id, TrialState::Complete, &values).unwrap();
    }
    drop(s);
    let page = dir.path().join("mo.html");
    ok(memtune(
        &db,
        &["report", "--study", "mo", "-o", page.to_str().unwrap()],
    ));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("3 of 4 COMPLETE trials are on the front"),
        "{html}"
    );
    assert!(html.contains("2 trials with an infinite value are not drawn"));
}

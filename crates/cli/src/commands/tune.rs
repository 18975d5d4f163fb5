//! `memtune tune --config study.toml`: run (or resume) a study.

use std::io::Write;
use std::path::PathBuf;

use crate::error::{CliError, Result};
use crate::tune::config::StudyConfig;
use crate::tune::fault::Faults;
use crate::tune::runner::{Runner, TuneOptions, current_exe, handle_stop_signals, summary_table};
use crate::tune::setup::RunPlan;

use super::Context;

#[derive(clap::Args)]
pub struct Args {
    /// The study file (TOML). Without it: the default study (the embedded
    /// sentiment data set and all-MiniLM-L6-v2).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Continue an existing study; an error if it does not exist. (Running
    /// the same command again also continues it.)
    #[arg(long)]
    resume: bool,
    /// Override the study file's `study.n_trials`.
    #[arg(long)]
    n_trials: Option<usize>,
    /// No live display, only a line per trial.
    #[arg(long)]
    no_progress: bool,
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let cfg = match &args.config {
        Some(path) => StudyConfig::from_path(path),
        None => Ok(StudyConfig::default_study()),
    }?;
    // Checked before the plan: the plan reads the data and every model.
    if args.n_trials == Some(0) {
        return Err(CliError::Usage("--n-trials must be at least 1".into()));
    }
    let faults = Faults::from_env().map_err(CliError::Usage)?;
    let mut plan = RunPlan::new(&cfg, ctx.storage_url.as_deref())?;
    if args.config.is_some() && cfg.study.storage_given && plan.storage_url != cfg.study.storage {
        // The environment wins over the file, as usual; said, because a
        // MEMTUNE_STORAGE left set from another study is easy to miss. The
        // embedded default study's storage is only a default (`cargo xtask
        // tune` gives its own), so nothing is said without --config.
        crate::logging::note(&format!(
            "memtune: storage from --storage or MEMTUNE_STORAGE: {}; {}'s `{}` is not used",
            store::redact_url(&plan.storage_url),
            cfg.origin,
            store::redact_url(&cfg.study.storage),
        ));
    }
    if let Some(n) = args.n_trials {
        plan.n_trials = n;
    }
    if args.resume {
        let storage = store::Storage::open_url(
            &plan.storage_url,
            &store::OpenOptions {
                create: false,
                ..store::OpenOptions::default()
            },
        )?;
        storage.study(&plan.study_name)?;
    }
    crate::tune::setup::check_lengths_against_models(&cfg, &plan).map_err(CliError::Usage)?;
    crate::tune::setup::check_heads_against_models(&cfg, &plan).map_err(CliError::Usage)?;
    crate::tune::setup::check_space_against_stored(&cfg, &plan).map_err(CliError::Usage)?;
    let worker_exe = current_exe()?;
    if !worker_exe.is_file() {
        return Err(CliError::Failed(format!(
            "the worker binary {} is missing (rebuilt or removed while starting?)",
            worker_exe.display()
        )));
    }
    crate::logging::to_file(&plan.log_file).map_err(CliError::Failed)?;
    // From here the run writes to the study; before, a signal ends the
    // process at once (nothing is stored yet), as a user expects.
    let interrupted = handle_stop_signals()?;
    let (study, storage) = (plan.study_name.clone(), plan.storage_url.clone());
    // The URL may hold a password: never printed nor logged.
    let shown = store::redact_url(&storage);
    crate::logging::note(&format!(
        "memtune: study `{}` in {shown}: {} trials on {}; log in {}",
        crate::render::printable(&study),
        plan.n_trials,
        plan.device_names(),
        plan.log_file.display()
    ));
    let runner = Runner::new(
        &cfg,
        plan,
        TuneOptions {
            worker_exe,
            faults,
            progress: !args.no_progress,
            interrupted,
        },
    )?;
    let summary = runner.run()?;
    write!(out, "{}", summary_table(&summary, &study, &shown))?;
    if cfg.study.report {
        // The study is stored whatever happens here: a report that cannot
        // be written is a warning, not a failed run.
        match write_report(&storage, &study) {
            Ok(path) => crate::logging::note(&format!("memtune: report in {}", path.display())),
            Err(e) => crate::logging::stderr_line(&format!("memtune: warning: no report: {e}")),
        }
    }
    if let Some(e) = &summary.environment_error {
        return Err(CliError::Failed(format!(
            "stopped: a trial could not read the data or model ({e}); its trial and those in flight are re-enqueued, so fix it and run the same command again"
        )));
    }
    if let Some(e) = &summary.systematic_error {
        return Err(CliError::Failed(format!(
            "stopped: the first {} trials all failed with the same error, so the data or a model is at fault, not a trial: {e} (the trials in flight are re-enqueued; fix it and run the same command again)",
            cfg.runner.systematic_failures
        )));
    }
    if summary.interrupted {
        return Err(CliError::Interrupted);
    }
    let counts = &summary.counts;
    let ruled_out = counts.infeasible + counts.over_constraint;
    if counts.complete == 0 && counts.over_constraint > 0 && ruled_out == counts.finished() {
        return Err(CliError::Failed(format!(
            "no trial met the study's constraints: {} of {} finished trials are over a [[constraint]] max before training ({} did not fit the device); raise the max or narrow the search space (see `memtune trials --attr error_kind`)",
            counts.over_constraint,
            counts.finished(),
            counts.infeasible
        )));
    }
    if counts.complete == 0 && counts.infeasible > 0 && counts.infeasible == counts.finished() {
        return Err(CliError::Failed(format!(
            "no trial fitted the device: all {} finished trials are infeasible (they need more memory at micro-batch 1 than the {} a trial has on the largest device, after its safety margin and process overhead); see `memtune trials --attr oom`",
            counts.infeasible,
            summary_device(&summary)
        )));
    }
    Ok(())
}

fn summary_device(s: &crate::tune::runner::Summary) -> String {
    gpu_mem::human_bytes(s.largest_device)
}

fn write_report(storage_url: &str, study: &str) -> Result<PathBuf> {
    let storage = store::Storage::open_url(
        storage_url,
        &store::OpenOptions {
            create: false,
            read_only: true,
            ..store::OpenOptions::default()
        },
    )?;
    let input = crate::report::read(&storage, study)?;
    super::report::write_html(&storage, &input, None)
}

//! The study runner's loop: one thread that asks the sampler, places trials
//! onto its devices by predicted memory (`super::placement`; one device is
//! the case N = 1), hands them to worker processes (each bound to one
//! device),
//! reacts to what the workers say (epochs for the pruner, results, deaths),
//! and records everything in the store as it happens, so a kill at any
//! moment loses at most the trials in flight, which the next run retries.
//!
//! Counting toward `n_trials`: COMPLETE, PRUNED and FAIL trials of the
//! study, except FAIL trials that were retried (their number is in some
//! trial's `retry_history`): the retry stands for them. While the study
//! runs, WAITING trials and RUNNING trials a runner claimed hold their
//! place too; an ask/tell client's trial counts once it is told.
//!
//! Any number of runners, on any number of machines, may work one study;
//! they cooperate through the store alone, by rules that need no runner to
//! know of another:
//! - a trial is claimed (a WAITING one first, else a new one while fewer
//!   than `n_trials` count) in one transaction, with its first heartbeat;
//! - a claimed trial carries its owner (this runner) and the owner's
//!   `stale_after`; it is stale only when its heartbeat is older than that
//!   (Optuna's rule, with the owner's grace). Any other runner then fails
//!   it and enqueues its retry, in one transaction, and only after it has
//!   itself been awake and connected for a whole `stale_after` (a runner
//!   that was stopped, or cut off from the storage, first gives the
//!   owners time to beat again). A runner never judges its own trials;
//!   trials no runner claimed (`memtune ask`, Optuna clients, with or
//!   without heartbeats) are left to their clients;
//! - a trial interrupted (its runner killed, stopped, cut off, or told to
//!   stop) is retried until it finishes on its own: COMPLETE, PRUNED, or
//!   FAIL for its own reason. `n_trials` counts those;
//! - a runner leaves when the budget is spent, nothing is WAITING and no
//!   claimed trial is still RUNNING, so a trial whose runner dies is
//!   always retried by a runner that is still there;
//! - each runner packs its own devices.
//!
//! A device whose trials fail with device errors twice in a row is drained
//! while another device is left: its running trials are failed and
//! re-enqueued (retried on the devices left, counted in the summary), and
//! it takes no more. The last device is never drained.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant, SystemTime};

use gpu_mem::human_bytes;
use hpo_sampler::{Pruner, Sampler, StudyView};
use serde_json::{Value as Json, json};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use store::{Claim, Owner, RetryPolicy, Storage, TrialRef, TrialState};

use super::best::{self, Best};
use super::config::{Recompute, StudyConfig, TrialMetric, TrialSettings};
use super::fault::Faults;
use super::packing::{FitPolicy, Lease, Price, micro_floor_for_tokens};
use super::placement::{DeviceSet, Placement};
use super::pricing::{PriceError, Pricer};
use super::progress::{Counts, Progress};
use super::protocol::{FailureKind, Job, ModelSource, RunnerMsg, WorkerMsg};
use super::record;
use super::scoring::{self, Figures};
use super::setup::RunPlan;
use super::workers::{Event, WorkerProc, describe_exit};
use crate::history;

/// The user attribute naming the preset of a trial that trained from
/// random weights (`[models.NAME] preset = ...`).
pub const RANDOM_WEIGHTS_KEY: &str = "random_weights_preset";
/// User attribute: whether the trial recomputed its layers' activations
/// in backward (`[runner] recompute`); its predicted peak is priced so.
pub const RECOMPUTE_KEY: &str = "recompute";

/// How often the loop wakes without events (timeout, Ctrl-C/SIGTERM, display).
const TICK: Duration = Duration::from_millis(200);

/// How long a finished run waits for its idle workers to exit.
const WORKER_EXIT_WAIT: Duration = Duration::from_secs(30);

/// Trials in a row retried because their worker died before taking the
/// job; past this the deaths are the workers' own (a binary or machine
/// that kills every worker), recorded as such rather than retried forever.
const UNSTARTED_RETRIES: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{0}")]
    History(#[from] history::HistoryError),
    #[error("{0}")]
    Setup(String),
    #[error("starting a worker process ({exe}): {source}")]
    Spawn {
        exe: PathBuf,
        source: std::io::Error,
    },
}

pub struct TuneOptions {
    /// The `memtune` binary to run workers with.
    pub worker_exe: PathBuf,
    pub faults: Faults,
    /// Draw the live display (on a terminal).
    pub progress: bool,
    /// Set by SIGINT, SIGTERM or SIGHUP ([`handle_stop_signals`]).
    pub interrupted: Arc<AtomicBool>,
}

/// Ctrl-C, SIGTERM (`kill`, systemd, a batch scheduler's stop) and SIGHUP
/// (the terminal or SSH session closed) mean the same: fail the trials in
/// flight as interrupted, re-enqueue them, and exit with the summary. Set
/// up before the run opens its storage, so a signal while it is still
/// starting (connecting to a database that is restarting, say) ends it the
/// same way rather than killing the process. A second signal ends the
/// process at once (exit 130): a run stuck in a call that does not return
/// (a database server that hangs mid-query) can still be stopped, and what
/// it leaves RUNNING is taken up by the next run as after `kill -9`.
pub fn handle_stop_signals() -> Result<Arc<AtomicBool>, TuneError> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        let cannot =
            |e: std::io::Error| TuneError::Setup(format!("cannot handle signal {signal}: {e}"));
        // First, so it sees the flag as the previous signal left it.
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&interrupted))
            .map_err(cannot)?;
        signal_hook::flag::register(signal, Arc::clone(&interrupted)).map_err(cannot)?;
    }
    Ok(interrupted)
}

/// What a run did, for the summary table.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub counts: Counts,
    pub started_here: usize,
    pub oom_retries: usize,
    pub infeasible: usize,
    /// Trials a `[[constraint]]` ruled out before they trained.
    pub over_constraint: usize,
    pub worker_deaths: usize,
    pub cuda_errors: usize,
    pub errors: usize,
    /// Trials of gone runners this one failed and re-enqueued.
    pub retried_from_before: usize,
    /// Retries of interrupted trials that this run started.
    pub reruns: usize,
    /// This run's trials that another runner took over (this one was
    /// stopped or cut off too long); their retries redo them.
    pub taken_over: usize,
    /// The best trial (one objective) or the Pareto front (several).
    pub best: Vec<Best>,
    /// What each objective is (`accuracy`, `peak_memory`, ...).
    pub metrics: Vec<TrialMetric>,
    pub wall: Duration,
    pub peak_leased: u64,
    /// Every device's bytes together.
    pub capacity: u64,
    /// The most bytes a trial has on any device when it is alone there,
    /// after the safety margin and the process overhead (what an
    /// infeasible trial did not fit).
    pub largest_device: u64,
    /// Devices drained, each with why.
    pub drained: Vec<String>,
    /// Trials stopped by a drained device and re-enqueued.
    pub device_retries: usize,
    pub interrupted: bool,
    /// The run stopped because a trial could not read the data or model
    /// (its trial is re-enqueued, so it does not count).
    pub environment_error: Option<String>,
    /// The run stopped because its first trials all failed with this one
    /// error (`[runner] systematic_failures`).
    pub systematic_error: Option<String>,
}

struct Candidate {
    trial: TrialRef,
    settings: TrialSettings,
    /// A retry of an interrupted trial.
    rerun: bool,
    /// What is known before it trains (for its constraints and objectives).
    known: Figures,
    /// It recomputes its layers' activations in backward (`[runner]
    /// recompute`), and is priced so.
    recompute: bool,
}

struct Running {
    trial: TrialRef,
    settings: TrialSettings,
    /// Index of its device in the plan.
    device: usize,
    lease: Lease,
    /// Compute threads the trial was given (0: its worker's default).
    threads: usize,
    oom_retries: Vec<Json>,
    failure: Option<(FailureKind, String, Option<u64>, Option<u64>)>,
    last_value: Option<f64>,
    known: Figures,
    recompute: bool,
    /// When its job was sent ([`StudySection::trial_timeout`] counts from it).
    started: Instant,
    /// The worker said it took the job ([`WorkerMsg::Started`]): what it
    /// writes from then on is this trial's.
    taken: bool,
}

pub struct Runner<'a> {
    cfg: &'a StudyConfig,
    plan: RunPlan,
    opts: TuneOptions,
    // Before `storage`: the heartbeat connection closes first, so the
    // main one is the last to close (it restores a file's journal mode).
    beats: super::heartbeat::Heartbeats,
    storage: Storage,
    study: store::Study,
    /// The study's trials as last read; see [`history::Cache`].
    history: history::Cache,
    /// This runner, as the owner of the trials it claims.
    owner: Owner,
    sampler: Box<dyn Sampler + Send>,
    pruner: Box<dyn Pruner + Send>,
    /// The leases on every device, and the trials waiting for one.
    devices: DeviceSet,
    events_tx: Sender<Event>,
    events: Receiver<Event>,
    workers: BTreeMap<usize, WorkerProc>,
    /// The device each worker serves: a CUDA worker holds a context there,
    /// so it only ever takes that device's trials.
    bound: BTreeMap<usize, usize>,
    idle: BTreeSet<usize>,
    running: BTreeMap<usize, Running>,
    next_worker_id: usize,
    /// Trials claimed that wait for a device, in the order they came.
    pending: Vec<Candidate>,
    /// Prices runs as the trainer would run them (cached per job), one
    /// per kind of device (a CUDA device with or without virtual memory,
    /// the CPU, the simulated device).
    pricers: Vec<Pricer>,
    /// Per device: its pricer in `pricers`.
    pricer_of: Vec<usize>,
    /// Parameters of each (model, head) the trials asked for.
    param_counts: HashMap<(String, Vec<usize>), Result<u64, String>>,
    /// Planned prediction peaks by (model, head, length).
    inference_peaks: HashMap<(String, Vec<usize>, usize), Result<u64, String>>,
    progress: Progress,
    summary: Summary,
    dirty: bool,
    /// How this run's first trials ended (`Some(error)` for a failure),
    /// for `[runner] systematic_failures`.
    first_outcomes: Vec<Option<String>>,
    /// Trials retried in a row because their worker died before taking
    /// the job (see [`UNSTARTED_RETRIES`]).
    unstarted_in_a_row: usize,
}

impl<'a> Runner<'a> {
    pub fn new(cfg: &'a StudyConfig, plan: RunPlan, opts: TuneOptions) -> Result<Self, TuneError> {
        let open = store::OpenOptions {
            max_backoff: plan.heartbeat,
            ..store::OpenOptions::default()
        };
        let storage = Storage::open_url(&plan.storage_url, &open)?;
        let study = storage.create_or_load_study(&plan.study_name, &plan.directions)?;
        {
            // Stored for one objective too, so a later run of another
            // metric, or of other constraints, is refused
            // (`setup::check_space_against_stored`).
            let names: Vec<&str> = cfg.objective.metrics.iter().map(|m| m.name()).collect();
            if let Some((key, stored)) =
                record::name_metrics(&storage, study.study_id, &names, &cfg.constraints)?
            {
                return Err(TuneError::Setup(format!(
                    "study `{}` has {key} {stored}, but the study file has {} and {}: \
                     use another study name",
                    study.name,
                    json!(names),
                    record::constraints_json(&cfg.constraints)
                )));
            }
        }
        let beats = super::heartbeat::Heartbeats::start(&plan.storage_url, plan.heartbeat)?;
        let owner = Owner {
            id: owner_id(),
            stale_after: plan.stale_after,
        };
        let (events_tx, events) = channel();
        let progress = Progress::new(plan.n_trials, opts.progress);
        // A trial's peak as an objective must not depend on what else
        // runs: it waits for the micro-batch that fits the empty device.
        let policy = if cfg.objective.metrics.contains(&TrialMetric::PeakMemory) {
            FitPolicy::Alone
        } else {
            FitPolicy::default()
        };
        let devices = DeviceSet::new(plan.devices.iter().map(|d| d.budget), policy);
        let mut pricers: Vec<Pricer> = Vec::new();
        let mut pricer_of = Vec::with_capacity(plan.devices.len());
        for d in &plan.devices {
            match pricers.iter().position(|p| p.device() == d.priced_device) {
                Some(i) => pricer_of.push(i),
                None => {
                    pricer_of.push(pricers.len());
                    pricers.push(
                        Pricer::new(d.priced_device).stopped_by(Arc::clone(&opts.interrupted)),
                    );
                }
            }
        }
        // A resumed seeded study continues with fresh random draws.
        let existing = storage.count_trials(study.study_id, &[])? as u64;
        Ok(Self {
            sampler: cfg.make_sampler_at(existing),
            pruner: cfg.make_pruner(),
            summary: Summary {
                metrics: cfg.objective.metrics.clone(),
                capacity: plan.total_capacity(),
                largest_device: plan
                    .devices
                    .iter()
                    .map(|d| d.budget.alone().unwrap_or(0))
                    .max()
                    .unwrap_or(0),
                ..Summary::default()
            },
            cfg,
            plan,
            opts,
            storage,
            study,
            history: history::Cache::default(),
            owner,
            devices,
            beats,
            events_tx,
            events,
            workers: BTreeMap::new(),
            bound: BTreeMap::new(),
            idle: BTreeSet::new(),
            running: BTreeMap::new(),
            next_worker_id: 0,
            pending: Vec::new(),
            pricers,
            pricer_of,
            param_counts: HashMap::new(),
            inference_peaks: HashMap::new(),
            progress,
            dirty: true,
            first_outcomes: Vec::new(),
            unstarted_in_a_row: 0,
        })
    }

    /// Runs the study until `n_trials` are finished, the timeout passes, or
    /// Ctrl-C.
    pub fn run(mut self) -> Result<Summary, TuneError> {
        let start = Instant::now();
        let interrupted = Arc::clone(&self.opts.interrupted);
        let mut vigil = Vigil::new(self.plan.stale_after);
        self.fail_stale_trials()?;
        let mut last_stale_check = Instant::now();
        let mut stopping = false;
        loop {
            vigil.tick();
            if interrupted.load(Ordering::SeqCst)
                || self.summary.environment_error.is_some()
                || self.summary.systematic_error.is_some()
            {
                let interrupted = self.interrupt();
                self.taken_over_meanwhile(interrupted)?;
                break;
            }
            self.drop_lost_trials()?;
            self.end_overdue_trials()?;
            if !stopping
                && self
                    .plan
                    .timeout
                    .is_some_and(|limit| start.elapsed() >= limit)
            {
                self.progress
                    .line("timeout reached: finishing the trials in flight");
                stopping = true;
                for c in std::mem::take(&mut self.pending) {
                    self.devices.withdraw(c.trial.trial_id as u64);
                    self.requeue(&c.trial, "timeout before the trial could start")?;
                }
            }
            if !stopping && last_stale_check.elapsed() >= self.plan.heartbeat {
                // Another runner may have died, or a trial been enqueued.
                last_stale_check = Instant::now();
                if vigil.may_judge() {
                    self.fail_stale_trials()?;
                }
                self.dirty = true;
            }
            let refilled = !stopping && self.dirty;
            if refilled {
                self.dirty = false;
                let refill = self.refill();
                self.taken_over_meanwhile(refill)?;
            }
            // Judged after a refill only (an event or a stale check), not on
            // every tick: it reads the whole study.
            if self.running.is_empty()
                && self.pending.is_empty()
                && (stopping || (refilled && self.study_done()?))
            {
                break;
            }
            match self.events.recv_timeout(TICK) {
                Ok(event) => {
                    let handled = self.handle(event);
                    self.taken_over_meanwhile(handled)?;
                    self.dirty = true;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => unreachable!("the runner holds a sender"),
            }
        }
        // Every input closed first, so the workers exit side by side.
        let mut workers = std::mem::take(&mut self.workers);
        workers.values_mut().for_each(WorkerProc::close_input);
        let deadline = Instant::now() + WORKER_EXIT_WAIT;
        for (_, w) in workers {
            w.retire_by(deadline);
        }
        self.progress.finish();
        self.summary.counts = self.counts()?;
        self.summary.best = self.best();
        self.summary.wall = start.elapsed();
        Ok(self.summary)
    }

    /// Trials of other runners whose heartbeat is older than their
    /// owner's `stale_after` (the runner died, here or on another machine,
    /// or was stopped or cut off that long) are failed and retried; so are
    /// runners' trials that an Optuna client failed as stale without a
    /// retry. The WAITING copies are claimed before anything new is asked.
    fn fail_stale_trials(&mut self) -> Result<(), TuneError> {
        let label = [
            ("error_kind", json!("stale")),
            (
                "error_msg",
                json!(
                    "the process running this trial stopped beating (killed, stopped or cut off)"
                ),
            ),
        ];
        let stale = self.storage.fail_abandoned_trials(
            self.study.study_id,
            &self.owner,
            Some(&interruption_retry()),
            &label,
        )?;
        for s in &stale {
            let retry = s.retry.map_or("not retried".to_string(), |r| {
                format!("retried as trial {}", r.number)
            });
            let how = if s.adopted {
                "was failed as stale by another client"
            } else {
                "stopped beating (its runner is gone)"
            };
            self.progress
                .line(&format!("trial {} {how}: failed, {retry}", s.failed.number));
        }
        self.summary.retried_from_before += stale.len();
        Ok(())
    }

    /// Trials of this run that the heartbeat thread found taken over by
    /// another runner (this one was stopped or cut off longer than
    /// `stale_after`): their workers are stopped at once, so no trial runs
    /// twice; their retries redo them.
    fn drop_lost_trials(&mut self) -> Result<(), TuneError> {
        for trial_id in self.beats.take_lost() {
            if let Some(i) = self
                .pending
                .iter()
                .position(|c| c.trial.trial_id == trial_id)
            {
                let c = self.pending.remove(i);
                self.devices.withdraw(trial_id as u64);
                self.report_taken_over(c.trial.number);
                continue;
            }
            let Some(worker) = self
                .running
                .iter()
                .find(|(_, r)| r.trial.trial_id == trial_id)
                .map(|(&w, _)| w)
            else {
                continue;
            };
            let r = self.running.remove(&worker).expect("found above");
            self.idle.remove(&worker);
            if let Some(w) = self.workers.remove(&worker) {
                w.kill();
            }
            self.release(&r);
            self.report_taken_over(r.trial.number);
            self.dirty = true;
        }
        Ok(())
    }

    /// `done`, unless it failed because another runner took one of this
    /// runner's trials over between the heartbeat thread's last look and a
    /// write (this process was stopped or cut off): that trial is dropped
    /// here as [`Runner::drop_lost_trials`] drops it, and the run goes on.
    fn taken_over_meanwhile(&mut self, done: Result<(), TuneError>) -> Result<(), TuneError> {
        let Err(TuneError::Store(store::StoreError::TrialFinished { number, state })) = done else {
            return done;
        };
        tracing::warn!(
            trial = number,
            "the trial was already {state} (taken over by another runner); dropped here"
        );
        if let Some(i) = self.pending.iter().position(|c| c.trial.number == number) {
            let c = self.pending.remove(i);
            self.devices.withdraw(c.trial.trial_id as u64);
            self.beats.remove(c.trial.trial_id);
        }
        let worker = self
            .running
            .iter()
            .find(|(_, r)| r.trial.number == number)
            .map(|(&w, _)| w);
        if let Some(worker) = worker {
            let r = self.running.remove(&worker).expect("found above");
            self.idle.remove(&worker);
            if let Some(w) = self.workers.remove(&worker) {
                w.kill();
            }
            self.release(&r);
        }
        self.report_taken_over(number);
        self.dirty = true;
        Ok(())
    }

    fn report_taken_over(&mut self, number: i64) {
        self.summary.taken_over += 1;
        self.progress.line(&format!(
            "trial {number} was taken over by another runner (this one was stopped or cut off for longer than stale_after): stopped here, its retry redoes it"
        ));
    }

    /// A trial of this run ended on its own (`error`: how it failed). When
    /// the first `systematic_failures` trials all failed with one error,
    /// the study stops: the data or a model is at fault, not a trial.
    fn note_outcome(&mut self, error: Option<&str>) {
        let k = self.cfg.runner.systematic_failures;
        if k == 0 || self.first_outcomes.len() >= k {
            return;
        }
        self.first_outcomes.push(error.map(str::to_string));
        if self.first_outcomes.len() == k
            && let Some(Some(first)) = self.first_outcomes.first()
            && self
                .first_outcomes
                .iter()
                .all(|o| o.as_deref() == Some(first.as_str()))
        {
            self.progress.line(&format!(
                "the first {k} trials all failed with the same error; stopping: {first}"
            ));
            self.summary.systematic_error = Some(first.clone());
        }
    }

    /// Nothing left for any runner: the budget is spent, nothing is
    /// WAITING, and no runner's trial is still RUNNING (one whose runner
    /// dies would be retried).
    fn study_done(&mut self) -> Result<bool, TuneError> {
        let counts = self.counts()?;
        Ok(
            self.storage.counted_trials(self.study.study_id)? >= self.plan.n_trials
                && counts.waiting == 0
                && self.storage.owned_running_trials(self.study.study_id)? == 0,
        )
    }

    /// The study's trials, read again where they may have changed.
    fn trials(&mut self) -> Result<&[store::FrozenTrial], TuneError> {
        self.history.refresh(&self.storage, self.study.study_id)
    }

    fn counts(&mut self) -> Result<Counts, TuneError> {
        Ok(record::count(self.trials()?))
    }

    /// The best trials as of the last read of the trials.
    fn best(&self) -> Vec<Best> {
        best::best_trials(self.history.trials(), &self.study.directions)
    }

    /// One value per `[[constraint]]` from `figures`; `None` for a study
    /// without constraints.
    fn constraint_values(&self, figures: &Figures) -> Option<Vec<f64>> {
        (!self.cfg.constraints.is_empty())
            .then(|| scoring::constraint_values(&self.cfg.constraints, figures))
    }

    /// Whether the study needs `metric` as an objective or a constraint.
    fn needs(&self, metric: TrialMetric) -> bool {
        self.cfg.objective.metrics.contains(&metric)
            || self.cfg.constraints.iter().any(|c| c.metric == metric)
    }

    /// `c` with what is known of it before it trains (its model's
    /// parameters, its peak at micro-batch 1, where the study needs them),
    /// or `None` when a constraint rules it out: it is then recorded
    /// PRUNED, never trained (Optuna's constraint values on it, one above
    /// 0), and counts toward `n_trials` as an infeasible trial does.
    fn within_constraints(&mut self, mut c: Candidate) -> Result<Option<Candidate>, TuneError> {
        let params = self
            .needs(TrialMetric::Params)
            .then(|| self.param_count(&c.settings));
        let inference = self
            .needs(TrialMetric::InferenceMemory)
            .then(|| self.inference_peak(&c.settings));
        for (known, figure) in [
            (&mut c.known.params, params),
            (&mut c.known.inference_memory, inference),
        ] {
            match figure {
                None => {}
                Some(Ok(n)) => *known = Some(n),
                Some(Err(e)) => {
                    let message = format!("model `{}`: {e}", c.settings.model);
                    record::error(&self.storage, &c.trial, "config", &message, None)?;
                    self.beats.remove(c.trial.trial_id);
                    self.note_outcome(Some(&message));
                    return Ok(None);
                }
            }
        }
        if let Some(cap) = scoring::peak_cap(&self.cfg.constraints) {
            c.known.peak_memory = self.peak_at_one(&c)?;
            // Over the peak_memory max: recomputing may bring it under,
            // unless another constraint rules the trial out anyway.
            let ruled_out = scoring::violated(
                &self.cfg.constraints,
                &Figures {
                    peak_memory: None,
                    ..c.known
                },
            )
            .is_some();
            if self.may_recompute(&c) && !ruled_out && c.known.peak_memory.is_some_and(|p| p > cap)
            {
                c.recompute = true;
                c.known.peak_memory = self.peak_at_one(&c)?;
            }
        }
        let Some((constraint, figure)) = scoring::violated(&self.cfg.constraints, &c.known) else {
            return Ok(Some(c));
        };
        let recomputed = c.recompute && constraint.metric == TrialMetric::PeakMemory;
        let why = format!(
            "{}, predicted before training{}: not trained",
            constraint.describe(figure),
            if recomputed {
                " with layer activations recomputed"
            } else {
                ""
            }
        );
        self.note_recompute(&c)?;
        let values = scoring::constraint_values(&self.cfg.constraints, &c.known);
        self.summary.over_constraint += 1;
        self.note_outcome(None);
        record::over_constraint(&self.storage, &c.trial, &c.settings, &values, &why)?;
        self.beats.remove(c.trial.trial_id);
        self.progress.line(&format!(
            "trial {}: {why} (pruned, constraint recorded)",
            c.trial.number
        ));
        self.update_display()?;
        Ok(None)
    }

    /// Parameters of the model and head `settings` train (cached).
    fn param_count(&mut self, settings: &TrialSettings) -> Result<u64, String> {
        let key = (settings.model.clone(), settings.head_hidden.clone());
        if let Some(known) = self.param_counts.get(&key) {
            return known.clone();
        }
        let head = trainer::model::HeadConfig {
            num_labels: self.plan.num_classes,
            hidden: settings.head_hidden.clone(),
        };
        let counted = self.plan.model(&settings.model).and_then(|m| {
            m.config
                .parameter_count(&head)
                .map(|n| n as u64)
                .map_err(|e| e.to_string())
        });
        self.param_counts.insert(key, counted.clone());
        counted
    }

    /// Bytes predicting a batch of `[objective] inference_batch` sequences
    /// of `settings`' length peaks at with its model and head (cached).
    fn inference_peak(&mut self, settings: &TrialSettings) -> Result<u64, String> {
        let key = (
            settings.model.clone(),
            settings.head_hidden.clone(),
            settings.max_length,
        );
        if let Some(known) = self.inference_peaks.get(&key) {
            return known.clone();
        }
        let head = trainer::model::HeadConfig {
            num_labels: self.plan.num_classes,
            hidden: settings.head_hidden.clone(),
        };
        let batch = self.cfg.objective.inference_batch;
        let planned = self.plan.model(&settings.model).and_then(|m| {
            trainer::memory::inference_peak(&m.config, &head, batch, settings.max_length)
                .map(|n| n as u64)
                .map_err(|e| e.to_string())
        });
        self.inference_peaks.insert(key, planned.clone());
        planned
    }

    /// Whether `c`'s micro-batch 1 fits some live device when it is empty
    /// (and its `peak_memory` max), as the packer decides feasibility. A run
    /// that cannot be priced counts as fitting: placing it records why.
    fn fits_an_empty_device(&mut self, c: &Candidate) -> Result<bool, TuneError> {
        let cap = scoring::peak_cap(&self.cfg.constraints).unwrap_or(u64::MAX);
        for device in self.devices.live().collect::<Vec<_>>() {
            let job = self.job(c, device, 1, c.settings.batch_size, None, 0)?;
            let alone = self.devices.budget(device).alone();
            match self.pricers[self.pricer_of[device]].price(&job) {
                Ok(price) => {
                    if price.peak <= cap && alone.is_some_and(|a| price.limit <= a) {
                        return Ok(true);
                    }
                }
                Err(_) => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Records whether `c` recomputes, on a trial about to be recorded
    /// without running (a retry's copy may carry its first run's answer).
    fn note_recompute(&self, c: &Candidate) -> Result<(), TuneError> {
        Ok(self.storage.set_trial_user_attr(
            c.trial.trial_id,
            RECOMPUTE_KEY,
            &json!(c.recompute),
        )?)
    }

    /// Whether `c`, which keeps its activations, may recompute them instead
    /// to start at all (`[runner] recompute = "auto"`).
    fn may_recompute(&self, c: &Candidate) -> bool {
        !c.recompute && self.cfg.runner.recompute == Recompute::Auto
    }

    /// The smallest peak `c` can train at: its micro-batch 1's predicted
    /// peak on the live device where that is least (`None` when it cannot
    /// be priced: placing it then records why).
    fn peak_at_one(&mut self, c: &Candidate) -> Result<Option<u64>, TuneError> {
        let mut least: Option<u64> = None;
        for device in self.devices.live().collect::<Vec<_>>() {
            let job = self.job(c, device, 1, c.settings.batch_size, None, 0)?;
            if let Ok(price) = self.pricers[self.pricer_of[device]].price(&job) {
                least = Some(least.map_or(price.peak, |l| l.min(price.peak)));
            }
        }
        Ok(least)
    }

    /// Asks and places trials while the study wants more and they fit:
    /// the trials waiting for a device first, in order, then new ones while
    /// one could start somewhere ([`DeviceSet::may_offer_more`]).
    fn refill(&mut self) -> Result<(), TuneError> {
        for c in std::mem::take(&mut self.pending) {
            // Trials that fail before a worker gets them (a price that
            // cannot be planned) count toward a systematic failure too.
            if self.summary.systematic_error.is_some() {
                self.pending.push(c);
                continue;
            }
            self.offer(c)?;
        }
        // Told to stop: no new trial (a price given up placed it in line).
        while self.summary.systematic_error.is_none()
            && self.devices.may_offer_more()
            && !self.opts.interrupted.load(Ordering::SeqCst)
        {
            let Some(claim) = self.storage.claim_or_create_within(
                self.study.study_id,
                self.plan.n_trials,
                &self.owner,
            )?
            else {
                return Ok(());
            };
            self.beats.add(claim.trial().trial_id);
            let Some(c) = self.next_candidate(claim)? else {
                continue;
            };
            if let Some(c) = self.within_constraints(c)? {
                self.offer(c)?;
            }
        }
        Ok(())
    }

    /// Places `c`: it starts, waits in `pending`, or is recorded
    /// (infeasible on every device, or a run that cannot be priced).
    fn offer(&mut self, mut c: Candidate) -> Result<(), TuneError> {
        // Decided before placing, so a trial waiting in line keeps its place.
        if self.may_recompute(&c) && !self.fits_an_empty_device(&c)? {
            c.recompute = true;
            if scoring::peak_cap(&self.cfg.constraints).is_some() {
                c.known.peak_memory = self.peak_at_one(&c)?;
            }
        }
        let placement = match self.admit(&c)? {
            Ok(placement) => placement,
            // Waits with the others, which the interruption re-enqueues.
            Err(e) if e.interrupted => Placement::Wait,
            Err(e) if e.environment => {
                let message = format!("model `{}`: {e}", c.settings.model);
                return self.stop_for_environment(&c.trial, &message);
            }
            Err(e) => {
                let message = format!("model `{}`: {e}", c.settings.model);
                return self.not_run(&c.trial, "config", &message);
            }
        };
        match placement {
            Placement::Admit { device, lease } => self.start(c, device, lease),
            Placement::Wait => {
                self.pending.push(c);
                Ok(())
            }
            Placement::Infeasible { needed, capacity } => {
                self.summary.infeasible += 1;
                self.note_outcome(None);
                self.note_recompute(&c)?;
                record::infeasible(
                    &self.storage,
                    &c.trial,
                    &c.settings,
                    needed,
                    capacity,
                    if c.recompute {
                        "predicted by the memory plan before starting, with layer activations recomputed"
                    } else {
                        "predicted by the memory plan before starting"
                    },
                    self.constraint_values(&c.known).as_deref(),
                )?;
                self.beats.remove(c.trial.trial_id);
                self.progress.line(&format!(
                    "trial {}: infeasible, needs {} at micro-batch 1, device has {} (pruned, constraint recorded)",
                    c.trial.number,
                    human_bytes(needed),
                    human_bytes(capacity)
                ));
                self.update_display()
            }
        }
    }

    /// The settings of a trial just claimed: a WAITING trial keeps the
    /// params it stores, then takes its `fixed_params` (Optuna's
    /// `enqueue_trial`); the sampler draws the rest (everything, for a new
    /// trial). `None`: the trial could not be set up and was recorded as
    /// failed.
    fn next_candidate(&mut self, claim: Claim) -> Result<Option<Candidate>, TuneError> {
        let trial = claim.trial();
        // Read after the claim, so a retry enqueued a moment ago is here.
        let frozen = self
            .history
            .refresh::<TuneError>(&self.storage, self.study.study_id)?;
        let me = frozen
            .iter()
            .find(|t| t.trial_id == trial.trial_id)
            .expect("a claimed trial is stored");
        let mut values: BTreeMap<String, hpo_sampler::ParamValue> = me
            .params
            .iter()
            .map(|(k, p)| (k.clone(), p.value()))
            .collect();
        let already: BTreeSet<String> = values.keys().cloned().collect();
        let fixed = match me.system_attrs.get("fixed_params") {
            Some(Json::Object(map)) => map.clone(),
            _ => serde_json::Map::new(),
        };
        let rerun = me.system_attrs.contains_key("failed_trial");
        if let Claim::Claimed(_) = claim
            && fixed.is_empty()
            && let Ok(settings) = self.cfg.settings(&values)
        {
            return Ok(Some(Candidate {
                trial,
                settings,
                rerun,
                known: Figures::default(),
                recompute: self.cfg.runner.recompute == Recompute::Always,
            }));
        }
        let view = StudyView::with_directions(&self.study.name, &self.study.directions, frozen);
        let mut t = hpo_sampler::Trial::new(self.sampler.as_mut(), view, trial.number as u64);
        let sampled = self
            .cfg
            .sample(&mut t)
            .map_err(|e| e.to_string())
            .map(|()| t.into_params());
        // What the sampler keeps on the trial (NSGA-II's generation), so
        // a resumed run or another runner reads it.
        let kept = self.sampler.system_attrs(&view, trial.number as u64);
        let sampled = match sampled {
            Ok(p) => p,
            Err(message) => {
                self.not_run(&trial, "sampler", &message)?;
                return Ok(None);
            }
        };
        for (key, value) in kept {
            self.storage
                .set_trial_system_attr(trial.trial_id, &key, &value)?;
        }
        for (name, mut p) in sampled {
            if already.contains(&name) {
                continue;
            }
            if let Some(value) = fixed.get(&name) {
                match history::fixed_internal(&p.distribution, &name, value) {
                    Ok(internal) => p.internal = internal,
                    Err(message) => {
                        let message = format!("enqueued trial {}: {message}", trial.number);
                        self.not_run(&trial, "config", &message)?;
                        return Ok(None);
                    }
                }
            }
            self.storage
                .set_param(trial.trial_id, &name, p.internal, &p.distribution)?;
            values.insert(name, p.value());
        }
        // A head the model cannot carry (DeBERTa has no hidden head layers)
        // is this trial's configuration error, found before it is planned.
        let checked = self.cfg.settings(&values).map_err(|e| e.to_string());
        let checked = checked.and_then(|settings| {
            let model = self.plan.model(&settings.model)?;
            let head = trainer::model::HeadConfig {
                num_labels: self.plan.num_classes,
                hidden: settings.head_hidden.clone(),
            };
            match model.config.check_head(&head) {
                Ok(()) => Ok(settings),
                Err(e) => Err(format!("model `{}`: {e}", settings.model)),
            }
        });
        match checked {
            Ok(settings) => Ok(Some(Candidate {
                trial,
                settings,
                rerun,
                known: Figures::default(),
                recompute: self.cfg.runner.recompute == Recompute::Always,
            })),
            Err(e) => {
                self.not_run(&trial, "config", &e)?;
                Ok(None)
            }
        }
    }

    /// `trial` met data or a model that became unreadable: not its fault,
    /// so it is re-enqueued, and the study stops.
    fn stop_for_environment(&mut self, trial: &TrialRef, message: &str) -> Result<(), TuneError> {
        record::fail_and_retry(&self.storage, trial, "environment", message)?;
        self.beats.remove(trial.trial_id);
        self.progress.line(&format!(
            "trial {}: cannot read the data or model: {message}; stopping",
            trial.number
        ));
        self.summary.environment_error = Some(message.to_string());
        Ok(())
    }

    /// Records `trial` as failed before it ran, as `kind`, and says so on
    /// the console: its params cannot be drawn or fixed (a sampler's
    /// error, an enqueued value outside the space) or its settings cannot
    /// run (a model that takes no such head, a run that cannot be priced).
    fn not_run(&mut self, trial: &TrialRef, kind: &str, message: &str) -> Result<(), TuneError> {
        record::error(&self.storage, trial, kind, message, None)?;
        self.beats.remove(trial.trial_id);
        self.summary.errors += 1;
        self.progress
            .line(&format!("trial {}: not run: {message}", trial.number));
        // A configuration's error is not the data's or a model's: it does
        // not stop the study (a space where only some draws cannot run
        // would stop or not by the seed's luck). A sampler's error comes
        // from the history, and would fail every trial alike.
        self.note_outcome((kind == "sampler").then_some(message));
        Ok(())
    }

    /// Where `c` goes, or why its run cannot be priced (the trial is then
    /// recorded as failed, not placed).
    fn admit(&mut self, c: &Candidate) -> Result<Result<Placement, PriceError>, TuneError> {
        let jobs = (0..self.plan.devices.len())
            .map(|d| self.job(c, d, 1, 1, None, 0))
            .collect::<Result<Vec<Job>, TuneError>>()?;
        let batch = c.settings.batch_size;
        // The packers ask for prices they compare; a micro-batch whose run
        // cannot be replayed reads as one that never fits, and the first
        // such error fails the trial instead of its placement.
        let mut refused = None;
        let id = c.trial.trial_id as u64;
        // A `peak_memory` constraint caps the micro-batch: a larger one
        // reads as one that never fits.
        let cap = scoring::peak_cap(&self.cfg.constraints).unwrap_or(u64::MAX);
        let floor = micro_floor_for_tokens(c.settings.max_length, self.plan.min_micro_tokens);
        let (pricers, pricer_of) = (&mut self.pricers, &self.pricer_of);
        let placement =
            self.devices
                .place_priced(id, batch, floor..=batch, &mut |device, micro| {
                    let job = Job {
                        micro_batch: micro,
                        accumulation_steps: batch.div_ceil(micro),
                        ..jobs[device].clone()
                    };
                    match pricers[pricer_of[device]].price(&job) {
                        Ok(price) if price.peak <= cap => price,
                        Ok(_) => Price::NEVER,
                        Err(e) => {
                            refused.get_or_insert(e);
                            Price::NEVER
                        }
                    }
                });
        match refused {
            None => Ok(Ok(placement)),
            Some(e) => {
                self.devices.release(id);
                self.devices.withdraw(id);
                Ok(Err(e))
            }
        }
    }

    /// The job a worker runs for `c` on `device` at `micro_batch` rows and
    /// `accumulation` passes per step, under `memory_limit`.
    fn job(
        &self,
        c: &Candidate,
        device: usize,
        micro_batch: usize,
        accumulation: usize,
        memory_limit: Option<u64>,
        threads: usize,
    ) -> Result<Job, TuneError> {
        let model = self
            .plan
            .model(&c.settings.model)
            .map_err(TuneError::Setup)?;
        let on = &self.plan.devices[device];
        // A simulated model runs on its own device's simulated memory.
        let source = match (&model.source, on.sim_bytes) {
            (ModelSource::Sim { preset, .. }, Some(device_bytes)) => ModelSource::Sim {
                preset: preset.clone(),
                device_bytes,
            },
            (source, _) => source.clone(),
        };
        Ok(Job {
            trial_number: c.trial.number,
            model: source,
            data: self.plan.data.clone(),
            validation_fraction: self.plan.validation_fraction,
            split_seed: self.plan.split_seed,
            metric: self.plan.metric,
            settings: c.settings.clone(),
            micro_batch,
            accumulation_steps: accumulation,
            recompute: c.recompute,
            memory_limit,
            fault: self.opts.faults.per_trial.get(&c.trial.number).cloned(),
            threads,
            cuda_device: on.cuda_device,
            matmul_precision: self.plan.matmul_precision,
            kernels: self.plan.kernels,
        })
    }

    fn start(&mut self, c: Candidate, device: usize, lease: Lease) -> Result<(), TuneError> {
        let idle = self
            .idle
            .iter()
            .copied()
            .find(|w| self.bound.get(w) == Some(&device));
        let worker = match idle {
            Some(id) => {
                self.idle.remove(&id);
                id
            }
            None => self.spawn_worker(device)?,
        };
        let threads = self.threads_for_next_trial()?;
        // The allocator's share of the lease (what the run reserves); the
        // process overhead is outside it.
        let job = self.job(
            &c,
            device,
            lease.micro_batch,
            lease.accumulation,
            Some(lease.limit),
            threads,
        )?;
        let pid = self.workers[&worker].pid;
        let on = &self.plan.devices[device];
        let record = record::DeviceRecord {
            name: &on.name,
            matmul_precision: self.plan.matmul_precision,
            kernels: self.plan.kernels,
            capacity: on.budget.capacity,
            usable: on.budget.usable(),
        };
        let started = record::started(
            &self.storage,
            &c.trial,
            &c.settings,
            &lease,
            &record,
            pid,
            threads,
        );
        let started = started.and_then(|()| {
            self.storage
                .set_trial_user_attr(c.trial.trial_id, RECOMPUTE_KEY, &json!(c.recompute))
        });
        // A random-weight preset says so: its value measures the
        // architecture's speed and memory, not what a checkpoint learns.
        let started = match (
            started,
            &self
                .plan
                .model(&c.settings.model)
                .map_err(TuneError::Setup)?
                .random_weights,
        ) {
            (Ok(()), Some(preset)) => self.storage.set_trial_user_attr(
                c.trial.trial_id,
                RANDOM_WEIGHTS_KEY,
                &json!(preset),
            ),
            (started, _) => started,
        };
        if !taken_over(started, c.trial.number)? {
            self.devices.release(c.trial.trial_id as u64);
            self.beats.remove(c.trial.trial_id);
            self.idle.insert(worker);
            return Ok(());
        }
        let leased = self.devices.total_leased();
        self.summary.peak_leased = self.summary.peak_leased.max(leased);
        tracing::info!(
            trial = c.trial.number,
            worker,
            device = self.plan.devices[device].name,
            micro_batch = lease.micro_batch,
            accumulation = lease.accumulation,
            recompute = c.recompute,
            lease_bytes = lease.bytes,
            "started: {:?}",
            c.settings
        );
        let sent = self
            .workers
            .get_mut(&worker)
            .expect("worker exists")
            .send_job(&job);
        self.summary.started_here += 1;
        self.summary.reruns += usize::from(c.rerun);
        self.running.insert(
            worker,
            Running {
                trial: c.trial,
                settings: c.settings,
                device,
                lease,
                threads,
                oom_retries: Vec::new(),
                failure: None,
                last_value: None,
                known: c.known,
                recompute: c.recompute,
                started: Instant::now(),
                taken: false,
            },
        );
        if let Err(e) = sent {
            // The worker had died idle; its Closed event retries the trial.
            tracing::warn!(worker, "sending a job failed: {e}");
        }
        if self.opts.faults.kill_runner_after_start_of == Some(c.trial.number) {
            // SAFETY: sending a signal to ourselves.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        if self.opts.faults.stall_runner_after_start_of == Some(c.trial.number) {
            // As a storage call that never returns.
            std::thread::sleep(Duration::from_secs(3600));
        }
        self.update_display()
    }

    /// The CPU threads for the trial being started (already RUNNING in the
    /// store): the cores the running trials do not hold, shared with the
    /// trials that could still start beside it. A lone trial (a 1-trial
    /// study, the last of a study) gets every core; a full study gets
    /// `threads_per_worker` each. An explicit `[runner]
    /// threads_per_worker`, and the simulated device, keep the workers'
    /// own count (0).
    fn threads_for_next_trial(&mut self) -> Result<usize, TuneError> {
        if self.cfg.runner.threads_per_worker.is_some()
            || matches!(self.cfg.runner.device, super::config::DeviceKind::Sim)
        {
            return Ok(0);
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let held: usize = self
            .running
            .values()
            .map(|r| r.threads.max(self.plan.threads_per_worker))
            .sum();
        let counts = self.counts()?;
        // This trial is among `running`; those not yet claimed may start
        // beside it while workers are free.
        let unclaimed = self
            .plan
            .n_trials
            .saturating_sub(counts.finished() + counts.running);
        let slots = self.devices.live().fold(0usize, |n, d| {
            n.saturating_add(self.devices.budget(d).max_workers)
        });
        let free_workers = slots.saturating_sub(self.running.len());
        Ok(share_cores(
            cores,
            held,
            unclaimed + 1,
            free_workers,
            self.plan.threads_per_worker,
        ))
    }

    /// A new worker process, bound to `device`.
    fn spawn_worker(&mut self, device: usize) -> Result<usize, TuneError> {
        let id = self.next_worker_id;
        self.next_worker_id += 1;
        let w = WorkerProc::spawn(
            id,
            &self.opts.worker_exe,
            self.plan.threads_per_worker,
            self.events_tx.clone(),
        )
        .map_err(|source| TuneError::Spawn {
            exe: self.opts.worker_exe.clone(),
            source,
        })?;
        tracing::info!(worker = id, pid = w.pid, device, "worker started");
        self.workers.insert(id, w);
        self.bound.insert(id, device);
        Ok(id)
    }

    fn handle(&mut self, event: Event) -> Result<(), TuneError> {
        match event {
            Event::Msg { worker, msg } => self.on_message(worker, msg),
            Event::Garbage { worker, line } => self.on_garbage(worker, &line),
            Event::Closed { worker } => self.on_closed(worker),
        }
    }

    fn on_message(&mut self, worker: usize, msg: WorkerMsg) -> Result<(), TuneError> {
        tracing::debug!(worker, "{msg:?}");
        match msg {
            WorkerMsg::Ready { .. } => Ok(()),
            WorkerMsg::Started { trial_number } => {
                if let Some(r) = self.running.get_mut(&worker)
                    && r.trial.number == trial_number
                {
                    r.taken = true;
                    self.unstarted_in_a_row = 0;
                }
                Ok(())
            }
            WorkerMsg::Epoch { epoch, value, .. } => {
                let Some(r) = self.running.get_mut(&worker) else {
                    return Ok(());
                };
                r.last_value = Some(value);
                let trial = r.trial;
                // Several objectives: no intermediate values and no pruner,
                // as Optuna's `Trial.report` refuses such studies.
                let prune = if self.cfg.objective.is_multi() {
                    false
                } else {
                    let reported =
                        self.storage
                            .report_intermediate(trial.trial_id, epoch as i64, value);
                    // Failed as stale by another runner: stop training it.
                    !taken_over(reported, trial.number)? || self.ask_pruner(&trial)?
                };
                let answer = if prune {
                    RunnerMsg::Prune
                } else {
                    RunnerMsg::Continue
                };
                if let Some(w) = self.workers.get_mut(&worker)
                    && let Err(e) = w.answer(answer)
                {
                    tracing::warn!(worker, "answering failed: {e}");
                }
                Ok(())
            }
            WorkerMsg::OomRetry {
                step,
                from_micro_batch,
                to_micro_batch,
                message,
            } => {
                self.summary.oom_retries += 1;
                if let Some(r) = self.running.get_mut(&worker) {
                    self.progress.line(&format!(
                        "trial {}: out of memory at step {step}, retried with micro-batch {to_micro_batch} (was {from_micro_batch})",
                        r.trial.number
                    ));
                    r.oom_retries.push(json!({
                        "step": step, "from_micro_batch": from_micro_batch,
                        "to_micro_batch": to_micro_batch, "error": message,
                    }));
                }
                self.now_runs_at(worker, to_micro_batch)
            }
            WorkerMsg::Finished {
                value,
                best_epoch,
                epochs_run,
                pruned,
                peak_bytes,
                requested_peak_bytes,
                skipped_steps,
                accuracy,
                f1_macro,
                valid_loss,
                train_seconds,
                startup,
            } => {
                let Some(r) = self.running.remove(&worker) else {
                    return Ok(());
                };
                let figures = Figures {
                    accuracy: Some(accuracy),
                    f1_macro: Some(f1_macro),
                    loss: Some(valid_loss),
                    peak_memory: Some(requested_peak_bytes),
                    inference_memory: r.known.inference_memory,
                    train_seconds: Some(train_seconds),
                    params: r.known.params,
                };
                let state = if pruned {
                    TrialState::Pruned
                } else {
                    TrialState::Complete
                };
                let value = if pruned {
                    r.last_value.unwrap_or(value)
                } else {
                    value
                };
                let values = if self.cfg.objective.is_multi() {
                    match scoring::values(&self.cfg.objective, &figures) {
                        Ok(values) => values,
                        Err(missing) => {
                            let message = format!("{} was not measured", missing.name());
                            let recorded =
                                record::error(&self.storage, &r.trial, "error", &message, None);
                            taken_over(recorded, r.trial.number)?;
                            self.release(&r);
                            self.recycle_or_idle(worker);
                            return self.update_display();
                        }
                    }
                } else {
                    vec![value]
                };
                let constraints = self.constraint_values(&figures);
                let mut details = json!({
                    "best_epoch": best_epoch, "epochs_run": epochs_run,
                    "peak_bytes": peak_bytes, "requested_peak_bytes": requested_peak_bytes,
                    "oom_retries": r.oom_retries, "skipped_steps": skipped_steps,
                    "train_seconds": train_seconds,
                });
                if let Some(s) = startup {
                    details["startup_seconds"] = json!(s);
                }
                if !r.oom_retries.is_empty() {
                    // The record says what ran last: the smaller micro-batch,
                    // its price, under the lease the trial kept.
                    details["micro_batch"] = json!(r.lease.micro_batch);
                    details["accumulation_steps"] = json!(r.lease.accumulation);
                    details["predicted_peak_bytes"] = json!(r.lease.predicted_peak);
                    details["lease_bytes"] = json!(r.lease.bytes);
                }
                let recorded = record::finished(
                    &self.storage,
                    &r.trial,
                    state,
                    &values,
                    &details,
                    constraints.as_deref(),
                );
                if !taken_over(recorded, r.trial.number)? {
                    self.release(&r);
                    self.recycle_or_idle(worker);
                    return Ok(());
                }
                self.note_outcome(None);
                self.devices.device_ok(r.device);
                let over = scoring::violated(&self.cfg.constraints, &figures)
                    .map(|(c, v)| format!(" (infeasible: {})", c.describe(v)))
                    .unwrap_or_default();
                self.progress.line(&format!(
                    "trial {} {}: {}{over} after {epochs_run} epoch(s) | {}",
                    r.trial.number,
                    if pruned { "pruned" } else { "complete" },
                    best::values_text(&self.cfg.objective.metrics, &values),
                    record::settings_text(&r.settings)
                ));
                self.release(&r);
                self.recycle_or_idle(worker);
                self.update_display()
            }
            WorkerMsg::Failed {
                kind,
                message,
                needed_bytes,
                limit_bytes,
            } => {
                if let Some(r) = self.running.get_mut(&worker) {
                    r.failure = Some((kind, message, needed_bytes, limit_bytes));
                }
                if kind == FailureKind::CudaError {
                    // A device error ends its worker: a sticky one poisoned
                    // the context and the worker exits by itself; after
                    // another (a missing library, a context that could not
                    // be created) the process's device state is not worth
                    // trusting, and closing its input ends it once idle.
                    // Its Closed event records the trial with the exit.
                    if let Some(w) = self.workers.get_mut(&worker) {
                        w.close_input();
                    }
                    return Ok(());
                }
                let Some(r) = self.running.remove(&worker) else {
                    return Ok(());
                };
                self.record_failure(&r, None)?;
                self.release(&r);
                self.recycle_or_idle(worker);
                self.update_display()
            }
        }
    }

    /// The trial on `worker` runs at `micro_batch` rows from now on (the
    /// trainer halved it after an out-of-memory): its lease keeps its
    /// bytes, and says what runs and its price.
    fn now_runs_at(&mut self, worker: usize, micro_batch: usize) -> Result<(), TuneError> {
        let Some(r) = self.running.get(&worker) else {
            return Ok(());
        };
        let c = Candidate {
            trial: r.trial,
            settings: r.settings.clone(),
            rerun: false,
            known: r.known,
            recompute: r.recompute,
        };
        let device = r.device;
        let accumulation = c.settings.batch_size.div_ceil(micro_batch);
        let job = self.job(&c, device, micro_batch, accumulation, None, 0)?;
        let peak = self.pricers[self.pricer_of[device]]
            .price(&job)
            .map(|p| p.peak);
        let r = self.running.get_mut(&worker).expect("looked up above");
        r.lease.micro_batch = micro_batch;
        r.lease.accumulation = accumulation;
        match peak {
            Ok(peak) => r.lease.predicted_peak = peak,
            Err(e) => tracing::warn!("cannot price micro-batch {micro_batch}: {e}"),
        }
        Ok(())
    }

    /// A line from `worker` that is not a protocol message. One that looks
    /// like a message (a JSON object) but cannot be read, from a worker
    /// running a trial, may leave the worker waiting for an answer that
    /// never comes: its trial fails and the worker is ended. Other lines
    /// (a native library printing to stdout, say), an idle worker's, and
    /// one written before the worker took its trial (after its previous
    /// trial's end, which is not this trial's doing) are only logged.
    fn on_garbage(&mut self, worker: usize, line: &str) -> Result<(), TuneError> {
        tracing::warn!(worker, "unexpected output: {line}");
        let taken = self.running.get(&worker).is_some_and(|r| r.taken);
        if !taken || !line.trim_start().starts_with('{') {
            return Ok(());
        }
        // Enough to see what went wrong; a runaway line is not stored whole.
        let shown: String = line.chars().take(500).collect();
        let message = format!("the worker wrote a line the runner cannot read: {shown}");
        self.end_trial_and_worker(worker, "worker_protocol", &message)
    }

    /// Trials running longer than `[study] trial_timeout` are ended with
    /// their workers: a worker stuck in a driver call, or stopped, sends
    /// nothing and would hold its trial and its device share forever.
    fn end_overdue_trials(&mut self) -> Result<(), TuneError> {
        let Some(limit) = self.cfg.study.trial_timeout else {
            return Ok(());
        };
        let overdue: Vec<usize> = self
            .running
            .iter()
            .filter(|(_, r)| r.started.elapsed() > limit)
            .map(|(&worker, _)| worker)
            .collect();
        for worker in overdue {
            let message = format!(
                "the trial ran longer than trial_timeout ({}); its worker was ended",
                crate::report::summary::duration(limit.as_secs_f64())
            );
            self.end_trial_and_worker(worker, "timeout", &message)?;
        }
        Ok(())
    }

    /// Fails the trial on `worker` (`kind`, `message`) and ends the worker;
    /// a fresh one takes the next trial. Nothing when it runs no trial.
    fn end_trial_and_worker(
        &mut self,
        worker: usize,
        kind: &str,
        message: &str,
    ) -> Result<(), TuneError> {
        let Some(r) = self.running.remove(&worker) else {
            return Ok(());
        };
        self.idle.remove(&worker);
        self.bound.remove(&worker);
        if let Some(w) = self.workers.remove(&worker) {
            w.kill();
        }
        let recorded = record::error(&self.storage, &r.trial, kind, message, Some(&r.settings));
        if taken_over(recorded, r.trial.number)? {
            self.summary.errors += 1;
            self.progress.line(&format!(
                "trial {}: failed: {message}; a fresh worker takes the next trial",
                r.trial.number
            ));
            // A trial's time depends on its settings (model, length,
            // epochs), as its memory does: slow draws in a row say nothing
            // of the data or a model.
            self.note_outcome((kind != "timeout").then_some(message));
        }
        self.release(&r);
        self.update_display()
    }

    /// A worker's output closed: it exited. A trial still on it died with it.
    fn on_closed(&mut self, worker: usize) -> Result<(), TuneError> {
        self.idle.remove(&worker);
        self.bound.remove(&worker);
        let Some(w) = self.workers.remove(&worker) else {
            return Ok(());
        };
        let (status, stderr) = w.reap();
        let exit = describe_exit(&status);
        tracing::info!(worker, "worker exited: {exit}");
        if let Some(r) = self.running.remove(&worker) {
            if !r.taken && self.unstarted_in_a_row < UNSTARTED_RETRIES {
                // It died idle (killed, out of host memory) before it took
                // the job: the trial never ran, so it is retried and counts
                // as nothing of its own.
                self.unstarted_in_a_row += 1;
                let message = format!("its worker ended ({exit}) before taking the job");
                if self.requeue(&r.trial, &message)? {
                    self.progress.line(&format!(
                        "trial {}: {message}; retried on a fresh worker",
                        r.trial.number
                    ));
                }
            } else {
                self.record_failure(&r, Some((exit, stderr)))?;
            }
            self.release(&r);
            self.update_display()?;
        }
        Ok(())
    }

    /// Records why a trial failed, unless another runner already failed it
    /// as stale.
    fn record_failure(
        &mut self,
        r: &Running,
        died: Option<(String, String)>,
    ) -> Result<(), TuneError> {
        let recorded = self.record_failure_now(r, died);
        match recorded {
            Err(TuneError::Store(e)) => taken_over(Err(e), r.trial.number).map(|_| ()),
            other => other,
        }
    }

    fn record_failure_now(
        &mut self,
        r: &Running,
        died: Option<(String, String)>,
    ) -> Result<(), TuneError> {
        let number = r.trial.number;
        match (&r.failure, died) {
            (Some((FailureKind::Oom, message, needed, limit)), _) => {
                self.summary.infeasible += 1;
                self.note_outcome(None);
                record::infeasible(
                    &self.storage,
                    &r.trial,
                    &r.settings,
                    needed.unwrap_or(r.lease.predicted_peak),
                    limit.unwrap_or(r.lease.bytes),
                    message,
                    self.constraint_values(&r.known).as_deref(),
                )?;
                self.progress.line(&format!(
                    "trial {number}: out of memory at micro-batch 1 ({message}): pruned as infeasible"
                ));
            }
            (Some((FailureKind::CudaError, message, _, _)), exit) => {
                self.summary.cuda_errors += 1;
                let exit = exit.map(|(e, _)| e).unwrap_or_default();
                record::cuda_error(&self.storage, &r.trial, &r.settings, message, &exit)?;
                self.progress.line(&format!(
                    "trial {number}: device error, worker replaced: {message}"
                ));
                // The last device is never drained: a run goes on there
                // as on one device, each device error costing its trial.
                if self.devices.device_error(r.device) && self.devices.live().count() > 1 {
                    self.drain(r.device, message)?;
                }
            }
            (Some((FailureKind::Environment, message, _, _)), _) => {
                self.stop_for_environment(&r.trial, message)?;
            }
            (Some((_, message, _, _)), _) => {
                self.summary.errors += 1;
                record::error(&self.storage, &r.trial, "error", message, Some(&r.settings))?;
                self.progress
                    .line(&format!("trial {number}: failed: {message}"));
                self.note_outcome(Some(message));
            }
            (None, Some((exit, stderr))) => {
                self.summary.worker_deaths += 1;
                let message = if stderr.is_empty() {
                    format!("worker {exit}")
                } else {
                    format!("worker {exit}; last stderr lines:\n{stderr}")
                };
                record::error(
                    &self.storage,
                    &r.trial,
                    "worker_died",
                    &message,
                    Some(&r.settings),
                )?;
                self.progress.line(&format!(
                    "trial {number}: worker died ({exit}); a fresh worker takes the next trial"
                ));
                self.note_outcome(Some(&message));
            }
            (None, None) => unreachable!("a failure is recorded with a reason"),
        }
        Ok(())
    }

    /// Takes `device` out of service (device errors in a row: the device,
    /// not a trial, is failing): its running trials are stopped, failed
    /// and re-enqueued, so they run again on the devices left; its workers
    /// are stopped.
    fn drain(&mut self, device: usize, why: &str) -> Result<(), TuneError> {
        let name = self.plan.devices[device].name.clone();
        self.devices.drain(device, why);
        let workers: Vec<usize> = self
            .bound
            .iter()
            .filter(|&(_, &d)| d == device)
            .map(|(&w, _)| w)
            .collect();
        let mut retried = 0;
        for w in workers {
            self.bound.remove(&w);
            self.idle.remove(&w);
            if let Some(p) = self.workers.remove(&w) {
                p.kill();
            }
            if let Some(r) = self.running.remove(&w) {
                let message = format!("its device {name} was drained: {why}");
                let recorded =
                    record::fail_and_retry(&self.storage, &r.trial, "device_lost", &message);
                self.beats.remove(r.trial.trial_id);
                retried += usize::from(retried_here(recorded, r.trial.number)?);
            }
        }
        self.summary.device_retries += retried;
        self.summary.drained.push(format!("{name}: {why}"));
        self.progress.line(&format!(
            "{name}: drained after device errors in a row ({why}); {retried} trial(s) retried on the other devices"
        ));
        self.dirty = true;
        Ok(())
    }

    fn release(&mut self, r: &Running) {
        self.devices.release(r.trial.trial_id as u64);
        self.beats.remove(r.trial.trial_id);
    }

    fn recycle_or_idle(&mut self, worker: usize) {
        let Some(w) = self.workers.get(&worker) else {
            return;
        };
        if w.served >= self.plan.recycle_after {
            let w = self.workers.remove(&worker).expect("present");
            self.bound.remove(&worker);
            tracing::info!(worker, served = w.served, "recycling worker");
            // Waited for on a thread of its own: a worker slow to exit (a
            // driver's teardown) must not stop the loop and every trial.
            std::thread::spawn(move || w.retire());
        } else {
            self.idle.insert(worker);
        }
    }

    fn ask_pruner(&mut self, trial: &TrialRef) -> Result<bool, TuneError> {
        let frozen = self
            .history
            .refresh::<TuneError>(&self.storage, self.study.study_id)?;
        let Some(me) = frozen.iter().find(|t| t.number == trial.number as u64) else {
            return Ok(false);
        };
        let view = StudyView::with_directions(&self.study.name, &self.study.directions, frozen);
        let decision = self.pruner.prune(&view, me);
        for (key, value) in &decision.system_attrs {
            self.storage
                .set_trial_system_attr(trial.trial_id, key, &json!(value))?;
        }
        Ok(decision.prune)
    }

    /// Fails a trial that never started and enqueues a copy for a later
    /// run; `false` when another runner had already failed it as stale.
    fn requeue(&mut self, trial: &TrialRef, why: &str) -> Result<bool, TuneError> {
        let recorded = record::fail_and_retry(&self.storage, trial, "not_started", why);
        self.beats.remove(trial.trial_id);
        retried_here(recorded, trial.number)
    }

    /// Ctrl-C, or a stop for an error every trial would meet: stop the
    /// workers, fail their trials and enqueue retries, so running the same
    /// command again continues where this one stopped. Each trial says
    /// which stopped it.
    fn interrupt(&mut self) -> Result<(), TuneError> {
        let why = match (
            &self.summary.systematic_error,
            &self.summary.environment_error,
        ) {
            (Some(e), _) => {
                format!("the run stopped: its first trials all failed with the same error ({e})")
            }
            (None, Some(e)) => {
                format!("the run stopped: a trial could not read the data or model ({e})")
            }
            (None, None) => "the run was interrupted (Ctrl-C, SIGTERM or SIGHUP)".to_string(),
        };
        let why = why.as_str();
        self.summary.interrupted =
            self.summary.environment_error.is_none() && self.summary.systematic_error.is_none();
        if self.summary.interrupted {
            self.progress
                .line("interrupted: stopping workers; run the same command again to resume");
        }
        // Every worker is stopped, and every trial's record tried, whatever
        // the storage says to one of them (a server gone): a trial not
        // recorded here stays RUNNING and is retried once it is stale.
        let mut first_error = Ok(());
        for (id, w) in std::mem::take(&mut self.workers) {
            w.kill();
            if let Some(r) = self.running.remove(&id) {
                let recorded = record::fail_and_retry(&self.storage, &r.trial, "interrupted", why);
                first_error = first_error.and(recorded.map(drop).map_err(TuneError::from));
                self.devices.release(r.trial.trial_id as u64);
            }
        }
        for c in std::mem::take(&mut self.pending) {
            self.devices.withdraw(c.trial.trial_id as u64);
            first_error = first_error.and(self.requeue(&c.trial, why).map(drop));
        }
        first_error
    }

    fn update_display(&mut self) -> Result<(), TuneError> {
        let counts = self.counts()?;
        let best = best::display_text(&self.best(), &self.cfg.objective.metrics);
        // Each device: what is leased there, and what is free to lease.
        let memory: Vec<String> = self
            .plan
            .devices
            .iter()
            .enumerate()
            .map(|(d, on)| match self.devices.drained(d) {
                Some(_) => format!("{} drained", on.name),
                None => format!(
                    "{} {} leased, {} free of {}",
                    on.name,
                    human_bytes(self.devices.leased_bytes(d)),
                    human_bytes(
                        on.budget
                            .usable()
                            .saturating_sub(self.devices.leased_bytes(d))
                    ),
                    human_bytes(on.budget.capacity)
                ),
            })
            .collect();
        let memory = memory.join("; ");
        self.progress.update(&counts, best.as_deref(), &memory);
        Ok(())
    }
}

/// The summary table printed at the end of `memtune tune`.
pub fn summary_table(s: &Summary, study: &str, storage: &str) -> String {
    let hours = s.wall.as_secs_f64() / 3600.0;
    let per_hour = if hours > 0.0 {
        s.started_here as f64 / hours
    } else {
        0.0
    };
    let mut out = String::new();
    out.push_str(&format!(
        "study `{}` in {storage}\n",
        crate::render::printable(study)
    ));
    let rows = [
        (
            "trials finished (toward n_trials)",
            s.counts.finished().to_string(),
        ),
        ("  complete", s.counts.complete.to_string()),
        ("  pruned (incl. infeasible)", s.counts.pruned.to_string()),
        ("  failed", s.counts.failed.to_string()),
        ("started in this run", s.started_here.to_string()),
        ("trials/hour in this run", format!("{per_hour:.1}")),
        (
            "OOM steps retried with a smaller micro-batch",
            s.oom_retries.to_string(),
        ),
        (
            "infeasible (do not fit at micro-batch 1)",
            s.infeasible.to_string(),
        ),
        (
            "over a [[constraint]] (never trained)",
            s.over_constraint.to_string(),
        ),
        ("worker deaths", s.worker_deaths.to_string()),
        ("device errors", s.cuda_errors.to_string()),
        ("other errors", s.errors.to_string()),
        (
            "stale trials (their runner gone), failed and retried",
            s.retried_from_before.to_string(),
        ),
        (
            "interrupted trials re-run in this run",
            s.reruns.to_string(),
        ),
        (
            "trials taken over by another runner",
            s.taken_over.to_string(),
        ),
        (
            "peak memory leased",
            format!(
                "{} of {}",
                human_bytes(s.peak_leased),
                human_bytes(s.capacity)
            ),
        ),
        ("wall time", format!("{:.1} s", s.wall.as_secs_f64())),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        out.push_str(&format!("  {k:<width$}  {v}\n"));
    }
    out.push_str(&best::summary_text(&s.best, &s.metrics));
    // Only a run with a failing device has these lines.
    for d in &s.drained {
        out.push_str(&format!("device drained: {d}\n"));
    }
    if s.device_retries > 0 {
        out.push_str(&format!(
            "trials retried after their device was drained: {}\n",
            s.device_retries
        ));
    }
    if s.interrupted {
        out.push_str("interrupted: run the same command again to resume\n");
    }
    out
}

/// How interrupted work is retried: until it finishes on its own. The
/// retry history grows with each interruption, and no limit applies to it:
/// the trial's own failures end it (they are not retried).
fn interruption_retry() -> RetryPolicy {
    RetryPolicy {
        max_retry: None,
        inherit_intermediate_values: false,
    }
}

/// This process as a trial owner: host, pid and start time, unique among
/// every runner of a study on any machine.
fn owner_id() -> String {
    let mut host = [0u8; 256];
    // SAFETY: the buffer and its length are valid; gethostname writes a
    // NUL-terminated name into it (truncated if longer).
    let ok = unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0;
    let end = host.iter().position(|&b| b == 0).unwrap_or(0);
    let host = if ok {
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        "unknown".into()
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{host}:{}:{started}", std::process::id())
}

/// Whether this runner has watched long enough, awake and connected, to
/// judge other runners' heartbeats: a runner that was stopped (SIGSTOP, a
/// suspended machine, a starved process) resumes with every heartbeat
/// looking old, its own machine's runners' included, and waits one
/// `stale_after` before judging; so does one whose wall clock was stepped
/// forward (heartbeats are wall-clock times); the storage does the same
/// after an outage (`Storage::fail_abandoned_trials`).
struct Vigil {
    since: Instant,
    last: Instant,
    last_wall: SystemTime,
    watch: Duration,
}

impl Vigil {
    fn new(watch: Duration) -> Vigil {
        let now = Instant::now();
        Vigil {
            since: now.checked_sub(watch).unwrap_or(now),
            last: now,
            last_wall: SystemTime::now(),
            watch,
        }
    }

    /// Called every turn of the loop, which turns at least every `TICK`
    /// unless this process was stopped.
    fn tick(&mut self) {
        self.tick_at(Instant::now(), SystemTime::now());
    }

    fn tick_at(&mut self, now: Instant, wall: SystemTime) {
        let gap = now.duration_since(self.last);
        // Linux's monotonic clock stands still while the machine is
        // suspended, where the wall clock goes on; an NTP step moves the
        // wall clock alone too.
        let wall_gap = wall.duration_since(self.last_wall).unwrap_or_default();
        let stall = gap.max(wall_gap);
        if stall > (self.watch / 2).max(4 * TICK) {
            tracing::warn!(
                "the runner's loop was stalled, or its clock moved, for {:.1} s; \
                 judging other runners' heartbeats again in {:.1} s",
                stall.as_secs_f64(),
                self.watch.as_secs_f64()
            );
            self.since = now;
        }
        (self.last, self.last_wall) = (now, wall);
    }

    fn may_judge(&self) -> bool {
        self.may_judge_at(Instant::now())
    }

    fn may_judge_at(&self, now: Instant) -> bool {
        now.duration_since(self.since) >= self.watch
    }
}

/// The process's own `memtune` binary, for spawning workers.
pub fn current_exe() -> Result<PathBuf, TuneError> {
    std::env::current_exe()
        .map_err(|e| TuneError::Setup(format!("cannot find the memtune binary: {e}")))
}

/// `Ok(true)` when a write to one of this runner's trials went through;
/// `Ok(false)` when another runner had already failed the trial as stale
/// (its heartbeat came late, say on an overloaded machine): the trial is
/// lost to this runner, which moves on; its retry carries the work.
fn taken_over(written: store::Result<()>, number: i64) -> Result<bool, TuneError> {
    match written {
        Ok(()) => Ok(true),
        Err(store::StoreError::TrialFinished { state, .. }) => {
            tracing::warn!(
                trial = number,
                "the trial was already {state} (failed as stale by another runner); its result is dropped"
            );
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// [`taken_over`] for [`record::fail_and_retry`]: `Ok(true)` when this
/// call failed the trial and queued its retry.
fn retried_here(written: store::Result<bool>, number: i64) -> Result<bool, TuneError> {
    match written {
        Ok(retried) => Ok(retried),
        Err(e) => taken_over(Err(e), number),
    }
}

/// Threads for a trial starting now: the `cores` that running trials do
/// not hold (`held`), split among this trial and the others that could
/// start beside it (`could_start`, this one included, at most
/// `free_workers`); never fewer than `base`.
fn share_cores(
    cores: usize,
    held: usize,
    could_start: usize,
    free_workers: usize,
    base: usize,
) -> usize {
    let sharing = could_start.min(free_workers).max(1);
    (cores.saturating_sub(held) / sharing).max(base)
}

#[cfg(test)]
mod tests {
    use super::{Summary, TICK, Vigil, share_cores, summary_table};
    use std::time::Duration;

    /// A study name is any string: its control characters are shown
    /// escaped, never sent to the terminal.
    #[test]
    fn the_summary_escapes_the_study_name() {
        let table = summary_table(&Summary::default(), "x\u{1b}[31m", "s.db");
        assert!(
            table.starts_with("study `x\\u{1b}[31m` in s.db\n"),
            "{table}"
        );
        assert!(!table.contains('\u{1b}'), "{table}");
    }

    #[test]
    fn a_lone_trial_gets_every_free_core() {
        // A 1-trial study on 16 cores.
        assert_eq!(share_cores(16, 0, 1, 16, 1), 16);
        // The last trial of a study while one of 4 threads still runs.
        assert_eq!(share_cores(16, 4, 1, 15, 1), 12);
        // A study with more trials than workers: the base share.
        assert_eq!(share_cores(2, 0, 6, 2, 1), 1);
        assert_eq!(share_cores(16, 0, 40, 4, 1), 4);
        // Every core held: still the base.
        assert_eq!(share_cores(2, 2, 3, 1, 1), 1);
    }

    /// A runner judges other runners' heartbeats only after a whole
    /// `stale_after` awake: after a stall of its loop, and after its wall
    /// clock jumped while the monotonic clock did not (a suspended laptop).
    #[test]
    fn judging_waits_a_stale_after_past_a_stall_or_a_clock_jump() {
        let watch = Duration::from_secs(10);
        let mut v = Vigil::new(watch);
        let (t0, w0) = (v.last, v.last_wall);
        assert!(v.may_judge_at(t0));
        let step = |v: &mut Vigil, at: Duration, wall: Duration| {
            v.tick_at(t0 + at, w0 + wall);
            v.may_judge_at(t0 + at)
        };
        // Turning every tick, the clocks together: judging all along.
        assert!(step(&mut v, TICK, TICK));
        // Suspended 60 s: the wall clock went on, the monotonic did not.
        let jump = Duration::from_secs(60);
        assert!(!step(&mut v, 2 * TICK, 2 * TICK + jump));
        assert!(!step(
            &mut v,
            2 * TICK + watch / 2,
            2 * TICK + jump + watch / 2
        ));
        assert!(step(&mut v, 2 * TICK + watch, 2 * TICK + jump + watch));
        // The loop stalled (SIGSTOP): both clocks moved.
        let (at, wall) = (3 * watch, 3 * watch + jump);
        assert!(!step(&mut v, at, wall));
        assert!(!step(&mut v, at + watch / 2, wall + watch / 2));
        assert!(step(&mut v, at + watch, wall + watch));
        // A wall clock stepped back makes no heartbeat look old.
        assert!(step(&mut v, at + watch + TICK, wall));
    }
}

//! A simulation of a study on one GPU or several: memory-aware packing with
//! micro-batch fitting against the legacy setup's fixed parallelism, on its
//! search space with the trainer's real memory plan. `cargo xtask bench
//! packing` runs it.
//!
//! The model, every number a parameter of [`SimParams`]:
//! - Trials come from [`space::sample_trial`]: a pure function of (seed,
//!   number), so both policies see the same trials in the same order.
//! - Memory: a trial's peak is the trainer's [`trainer::memory::MemoryPlan`]
//!   peak at its micro-batch ([`plans::PeakTable`], exact, priced as the
//!   runner prices it for every family, DeBERTa included), plus the
//!   per-process overhead (CUDA context, cuBLAS workspace). The baseline's
//!   PyTorch caching allocator adds fragmentation: at a point of the trial
//!   drawn uniformly from its progress, its reserved memory grows from the
//!   peak to the peak times `1 + fragmentation_slack` (the legacy setup saw OOMs
//!   well into trials, "1.41 GiB reserved by PyTorch but unallocated").
//! - Time: a trial first spends `startup_s` (process start, data, model
//!   load) holding only the process overhead, then its FLOPs
//!   ([`cost::trial_flops`]). Alone it runs at `device_flops x
//!   utilisation(micro x seq)`. With others ([`Sharing`]) it gets `1/n` of
//!   the device's time among `n` training trials (separate processes on a
//!   CUDA device take turns), or, side by side, is slowed in proportion
//!   when the running trials' utilisations sum past 1.
//! - Baseline (the legacy setup after its last fix): `baseline_parallel` trials
//!   at once, each at its batch size as micro-batch. When a trial takes
//!   memory (its first step, or fragmentation growing) and the sum of what
//!   the running trials hold exceeds the device, it dies of OOM: lost
//!   (pruned), the time it ran wasted.
//! - Packing: a [`crate::tune::placement::DeviceSet`] (one
//!   [`crate::tune::packing::Packer`] per device, as the runner uses it)
//!   places the trials in order (on one device a trial that must wait
//!   blocks the ones behind it), with the lease's micro-batch and
//!   accumulation, and the token floor the runner sets on CUDA
//!   ([`SimParams::micro_token_floor`]). Its lease is what it holds, so
//!   nothing is ever lost; the simulation checks no device is ever
//!   over-committed.
//! - Several devices ([`SimParams::devices`]): each shares its compute among
//!   its own trials only. The baseline runs its fixed parallelism on each
//!   (one legacy process per card). A device can be drained at a chosen
//!   time ([`SimParams::drain`], packing only): its trials are stopped,
//!   counted in [`SimReport::retried`] and placed again, from the start, on
//!   the devices left.
//!
//! Deliberately not modelled: the sampler learning to avoid OOM regions,
//! pruning, CPU-side data loading, and PyTorch's device-side asserts taking
//! down every trial in a process (which would only make the baseline worse).

pub mod cost;
pub mod plans;
mod report;
pub mod space;

pub use report::{DeviceReport, SimReport, Start};

use trainer::model::{HeadConfig, ModelConfig};

use std::collections::VecDeque;

use crate::tune::packing::{
    CUDA_MIN_MICRO_TOKENS, DeviceBudget, FitPolicy, GIB, GPU_MEM_ALLOCATOR_FLOOR,
    GPU_MEM_ALLOCATOR_SLACK, MIB, micro_cap_for_tokens, micro_floor_for_tokens,
};
use crate::tune::placement::{DeviceSet, Placement};
use plans::PeakTable;
use space::{SimTrial, model_config, sample_trial};

/// Everything the simulation assumes.
#[derive(Clone, Debug, PartialEq)]
pub struct SimParams {
    /// Each device's memory in bytes, one entry per device (at least one).
    /// Default: one card of 23.56 GiB, what PyTorch reported for the legacy
    /// setup's 24 GB card.
    pub devices: Vec<u64>,
    /// CUDA context + cuBLAS workspace per process (both policies).
    pub process_overhead: u64,
    /// Packing: bytes never leased.
    pub safety_margin: u64,
    /// Packing: allowance on each predicted peak for the worker's
    /// allocator (the worker holds its whole lease).
    pub allocator_slack: f64,
    /// Packing: at most this many trials at once.
    pub max_workers: usize,
    /// Packing: micro-batch choice when the device is shared.
    pub fit_policy: FitPolicy,
    /// Packing: never lease more tokens per micro-step than this (`None`:
    /// up to the effective batch).
    pub micro_token_cap: Option<usize>,
    /// Baseline: trials at once.
    pub baseline_parallel: usize,
    /// Baseline: reserved / requested of PyTorch's caching allocator.
    pub fragmentation_slack: f64,
    /// Achieved FLOP/s of one fully used device.
    pub device_flops: f64,
    /// Tokens per micro-step at which a trial alone uses half the device.
    pub half_tokens: f64,
    /// How trials on one device share its compute.
    pub sharing: Sharing,
    /// Packing: a trial whose fit is fewer tokens per micro-step than this
    /// waits for memory, unless the empty device fits no more (0: it starts
    /// at whatever fits), as the runner's `min_micro_tokens`.
    pub micro_token_floor: usize,
    /// Seconds from a trial's start to its first training step.
    pub startup_s: f64,
    /// Simulated wall-clock seconds.
    pub horizon_s: f64,
    /// Skip (for both policies) the sampled trials that do not fit the
    /// largest device alone at their batch size: compares the policies on
    /// the work the baseline can do at all.
    pub only_fitting_alone: bool,
    /// Packing: take device `.0` out of service at `.1` simulated seconds,
    /// as the runner drains a failing device. `None`: every device works
    /// throughout.
    pub drain: Option<(usize, f64)>,
}

impl SimParams {
    /// What the packer may lease on `device`.
    pub fn budget(&self, device: usize) -> DeviceBudget {
        DeviceBudget {
            capacity: self.devices[device],
            safety_margin: self.safety_margin,
            process_overhead: self.process_overhead,
            max_workers: self.max_workers,
            allocator_slack: self.allocator_slack,
            allocator_floor: GPU_MEM_ALLOCATOR_FLOOR,
        }
    }
}

impl Default for SimParams {
    fn default() -> Self {
        Self {
            devices: vec![(23.56 * GIB as f64) as u64],
            process_overhead: 550 * MIB,
            safety_margin: GIB / 2,
            allocator_slack: GPU_MEM_ALLOCATOR_SLACK,
            max_workers: 8,
            fit_policy: FitPolicy::FreeNow,
            micro_token_cap: None,
            baseline_parallel: 2,
            fragmentation_slack: 0.21,
            device_flops: 20e12,
            half_tokens: 1024.0,
            sharing: Sharing::TimeSliced,
            micro_token_floor: CUDA_MIN_MICRO_TOKENS,
            startup_s: 20.0,
            horizon_s: 6.0 * 3600.0,
            only_fitting_alone: false,
            drain: None,
        }
    }
}

/// How the trials training on one device share its compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Their kernels run side by side (MPS, or one process): each trial
    /// runs at its utilisation alone until the utilisations sum past 1,
    /// then all slow in proportion.
    Concurrent,
    /// Each process has the device to itself for a time slice (CUDA's
    /// default for separate processes, which memtune's workers are): `n`
    /// training trials each get `1/n` of the time, at their utilisation
    /// alone, so a small micro-batch wastes its share.
    TimeSliced,
}

/// Which runner is simulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Fixed parallelism, batch as micro-batch, OOM loses the trial.
    Baseline,
    /// Memory-aware packing with micro-batch fitting.
    Packing,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Baseline => "fixed PAR (seeds)",
            Policy::Packing => "packing",
        }
    }
}

/// The models, head and plans a simulation needs.
pub struct SimSpace {
    models: Vec<(&'static str, ModelConfig)>,
    peaks: PeakTable,
}

impl SimSpace {
    /// The space's models with `peaks`, completed (on `threads` threads)
    /// for every model and sequence length of the space that it lacks
    /// (five small plans per BERT-shaped entry, three full plans per
    /// DeBERTa one); an error names an entry that could not be priced.
    pub fn build(mut peaks: PeakTable, threads: usize) -> Result<Self, String> {
        let models: Vec<(&'static str, ModelConfig)> = space::MODELS
            .iter()
            .map(|&m| (m, model_config(m).expect("a model of the space")))
            .collect();
        let refs: Vec<(&str, &ModelConfig)> = models.iter().map(|(n, c)| (*n, c)).collect();
        peaks.fill(&refs, &sim_head(), &space::SEQ_LENS, threads)?;
        Ok(Self { models, peaks })
    }

    pub fn peaks(&self) -> &PeakTable {
        &self.peaks
    }

    pub fn config(&self, model: &str) -> &ModelConfig {
        &self
            .models
            .iter()
            .find(|(n, _)| *n == model)
            .expect("a model of the space")
            .1
    }

    /// The plan's peak in bytes for `trial` at `micro` rows.
    pub fn peak(&self, trial: &SimTrial, micro: usize) -> u64 {
        self.peaks
            .get(trial.model, trial.seq_len)
            .expect("plans are built for the whole space")
            .at(micro)
    }
}

/// The classifier head of the simulated trials: two labels, no hidden
/// layers. The legacy setup's 0-3 hidden layers of at most 1,024 units add under
/// 20 MiB to a peak of gigabytes, so the head is not sampled.
pub fn sim_head() -> HeadConfig {
    HeadConfig {
        num_labels: 2,
        hidden: vec![],
    }
}

/// A trial on a simulated device.
struct Running {
    trial: SimTrial,
    device: usize,
    start: f64,
    startup_end: f64,
    /// FLOPs left (counted from the end of start-up).
    remaining: f64,
    /// Utilisation alone at its micro-batch.
    utilisation: f64,
    /// Bytes held from the first step on.
    reserved: u64,
    /// Bytes held once fragmentation has set in (baseline).
    fragmented: u64,
    /// Fragmentation sets in when `remaining` falls to this (baseline).
    grow_at: Option<f64>,
    /// Bytes held now (process overhead during start-up).
    held: u64,
    /// Past start-up.
    training: bool,
}

/// What happens next to a running trial.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Event {
    FirstStep,
    Fragments,
    Finishes,
    /// The drained device ([`SimParams::drain`]) fails.
    Drain,
}

/// Runs `policy` for `params.horizon_s` simulated seconds on trial sequence
/// `seed`. Deterministic.
///
/// # Panics
/// With no device, or a drain of a device that does not exist.
pub fn simulate(params: &SimParams, space: &SimSpace, policy: Policy, seed: u64) -> SimReport {
    let n = params.devices.len();
    assert!(n > 0, "the simulation needs a device");
    if let Some((device, _)) = params.drain {
        assert!(device < n, "drain of device {device}, which does not exist");
    }
    let mut sim = Sim {
        params,
        space,
        policy,
        seed,
        now: 0.0,
        next_number: 0,
        queue: VecDeque::new(),
        running: Vec::new(),
        devices: DeviceSet::new((0..n).map(|d| params.budget(d)), params.fit_policy),
        drain: params.drain.filter(|_| policy == Policy::Packing),
        report: SimReport {
            policy,
            seed,
            horizon_s: params.horizon_s,
            completed: 0,
            lost_oom: 0,
            infeasible: 0,
            started: 0,
            running_at_end: 0,
            retried: 0,
            completed_flops: 0.0,
            wasted_s: 0.0,
            mean_memory_utilisation: 0.0,
            mean_concurrency: 0.0,
            max_memory: 0,
            mean_compute_utilisation: 0.0,
            devices: vec![
                DeviceReport {
                    live_s: 0.0,
                    compute_utilisation: 0.0,
                    training: 0.0,
                    occupied: 0.0,
                    max_memory: 0,
                };
                n
            ],
            starts: Vec::new(),
        },
    };
    sim.run();
    sim.report
}

struct Sim<'a> {
    params: &'a SimParams,
    space: &'a SimSpace,
    policy: Policy,
    seed: u64,
    now: f64,
    next_number: u64,
    /// Packing: trials offered that wait for a device, or were stopped by a
    /// drain, in the order they are offered again.
    queue: VecDeque<SimTrial>,
    running: Vec<Running>,
    devices: DeviceSet,
    /// The drain still to come.
    drain: Option<(usize, f64)>,
    report: SimReport,
}

impl Sim<'_> {
    fn run(&mut self) {
        let horizon = self.params.horizon_s;
        let n = self.params.devices.len();
        let (mut memory_area, mut count_area) = (0.0, 0.0);
        // Per device: compute in use, occupied and live seconds.
        let mut compute_area = vec![0.0; n];
        let mut occupied_area = vec![0.0; n];
        let mut training_area = vec![0.0; n];
        let mut live = vec![0.0; n];
        self.fill();
        while self.now < horizon && !self.running.is_empty() {
            let mut total_util = vec![0.0; n];
            let mut training = vec![0usize; n];
            for r in self.running.iter().filter(|r| r.training) {
                total_util[r.device] += r.utilisation;
                training[r.device] += 1;
            }
            // Each device is shared by its own trials, never more than
            // fully busy.
            let share: Vec<f64> = match self.params.sharing {
                Sharing::Concurrent => total_util
                    .iter()
                    .map(|&u| if u > 1.0 { 1.0 / u } else { 1.0 })
                    .collect(),
                Sharing::TimeSliced => training.iter().map(|&k| 1.0 / k.max(1) as f64).collect(),
            };
            // The fraction of each device's arithmetic in use.
            let busy: Vec<f64> = (0..n)
                .map(|d| match self.params.sharing {
                    Sharing::Concurrent => total_util[d].min(1.0),
                    Sharing::TimeSliced => total_util[d] * share[d],
                })
                .collect();
            let rate = |r: &Running| self.params.device_flops * r.utilisation * share[r.device];
            let (next, mut event, mut dt) = self
                .running
                .iter()
                .enumerate()
                .map(|(i, r)| match (r.training, r.grow_at) {
                    (false, _) => (i, Event::FirstStep, r.startup_end - self.now),
                    (true, Some(at)) => (i, Event::Fragments, (r.remaining - at) / rate(r)),
                    (true, None) => (i, Event::Finishes, r.remaining / rate(r)),
                })
                .min_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)))
                .expect("running is not empty");
            if let Some((_, at)) = self.drain
                && at - self.now <= dt
            {
                (event, dt) = (Event::Drain, at - self.now);
            }
            let dt = dt.max(0.0).min(horizon - self.now);
            let held: u64 = self.running.iter().map(|r| r.held).sum();
            memory_area += held as f64 * dt;
            count_area += self.running.len() as f64 * dt;
            for d in self.devices.live() {
                live[d] += dt;
                compute_area[d] += busy[d] * dt;
                if training[d] > 0 {
                    training_area[d] += dt;
                }
                if self.running.iter().any(|r| r.device == d) {
                    occupied_area[d] += dt;
                }
            }
            for r in &mut self.running {
                if r.training {
                    r.remaining -= self.params.device_flops * r.utilisation * share[r.device] * dt;
                }
            }
            self.now += dt;
            if self.now >= horizon {
                break;
            }
            match event {
                Event::FirstStep => {
                    let r = &mut self.running[next];
                    r.training = true;
                    r.held = r.reserved;
                    self.check_memory(next);
                }
                Event::Fragments => {
                    let r = &mut self.running[next];
                    r.grow_at = None;
                    r.held = r.fragmented;
                    self.check_memory(next);
                }
                Event::Finishes => self.finish(next),
                Event::Drain => self.drain_device(),
            }
            self.fill();
        }
        let h = horizon.max(f64::MIN_POSITIVE);
        let capacity: u64 = self.params.devices.iter().sum();
        self.report.mean_memory_utilisation = memory_area / (capacity as f64 * h);
        self.report.mean_concurrency = count_area / h;
        self.report.mean_compute_utilisation = compute_area.iter().sum::<f64>() / (n as f64 * h);
        self.report.running_at_end = self.running.len();
        for (d, device) in self.report.devices.iter_mut().enumerate() {
            device.live_s = live[d];
            let l = live[d].max(f64::MIN_POSITIVE);
            device.compute_utilisation = compute_area[d] / l;
            device.training = training_area[d] / l;
            device.occupied = occupied_area[d] / l;
        }
    }

    /// The next trial of the sampled sequence.
    fn next_trial(&mut self) -> SimTrial {
        let largest = self.params.devices.iter().copied().max().unwrap_or(0);
        loop {
            let t = sample_trial(self.seed, self.next_number);
            self.next_number += 1;
            let alone = self.space.peak(&t, t.batch_size) + self.params.process_overhead;
            if !self.params.only_fitting_alone || alone <= largest {
                return t;
            }
        }
    }

    /// Starts trials while the policy allows.
    fn fill(&mut self) {
        match self.policy {
            Policy::Baseline => {
                for device in 0..self.params.devices.len() {
                    let on =
                        |running: &[Running]| running.iter().filter(|r| r.device == device).count();
                    while on(&self.running) < self.params.baseline_parallel.max(1) {
                        let trial = self.next_trial();
                        let peak = self.space.peak(&trial, trial.batch_size);
                        let overhead = self.params.process_overhead;
                        let slack = (peak as f64 * self.params.fragmentation_slack) as u64;
                        let onset = space::unit_draw(self.seed, trial.number);
                        let micro = trial.batch_size;
                        let tokens = micro * trial.seq_len;
                        let r = self.running_trial(trial, device, micro, tokens, overhead + peak);
                        let grow_at = (slack > 0).then_some(r.remaining * (1.0 - onset));
                        self.running.push(Running {
                            fragmented: overhead + peak + slack,
                            grow_at,
                            ..r
                        });
                    }
                }
            }
            Policy::Packing => {
                // The trials already offered keep their order; new ones
                // are sampled while one could start somewhere.
                for trial in std::mem::take(&mut self.queue) {
                    self.offer(trial);
                }
                while self.devices.may_offer_more() {
                    let trial = self.next_trial();
                    self.offer(trial);
                }
            }
        }
        self.note_memory();
    }

    /// Packing: places `trial`, which starts, waits in the queue, or is
    /// counted infeasible.
    fn offer(&mut self, trial: SimTrial) {
        let space = self.space;
        let cap = self
            .params
            .micro_token_cap
            .map_or(trial.batch_size, |t| micro_cap_for_tokens(trial.seq_len, t));
        let floor = micro_floor_for_tokens(trial.seq_len, self.params.micro_token_floor);
        // The simulated devices differ only in size: a trial's peak is the
        // same on each.
        let mut peak_of = |_device: usize, micro: usize| space.peak(&trial, micro);
        match self
            .devices
            .place(trial.number, trial.batch_size, floor..=cap, &mut peak_of)
        {
            Placement::Admit { device, lease } => {
                let tokens = lease.micro_batch * trial.seq_len;
                let r = self.running_trial(trial, device, lease.micro_batch, tokens, lease.bytes);
                self.running.push(r);
            }
            Placement::Wait => self.queue.push_back(trial),
            Placement::Infeasible { .. } => self.report.infeasible += 1,
        }
    }

    /// A trial starting now on `device`, holding the process overhead until
    /// its first step, then `reserved` bytes.
    fn running_trial(
        &mut self,
        trial: SimTrial,
        device: usize,
        micro_batch: usize,
        tokens_per_step: usize,
        reserved: u64,
    ) -> Running {
        let config = self.space.config(trial.model);
        self.report.started += 1;
        self.report.starts.push(Start {
            trial: trial.number,
            device,
            micro_batch,
            at_s: self.now as u64,
        });
        Running {
            start: self.now,
            startup_end: self.now + self.params.startup_s,
            remaining: cost::trial_flops(config, &trial),
            utilisation: cost::utilisation(tokens_per_step, self.params.half_tokens),
            reserved,
            fragmented: reserved,
            grow_at: None,
            held: self.params.process_overhead,
            training: false,
            trial,
            device,
        }
    }

    /// Trial `i` has just taken more memory: in the baseline it dies of OOM
    /// if its device cannot give it (it is the one allocating).
    fn check_memory(&mut self, i: usize) {
        let device = self.running[i].device;
        if self.policy == Policy::Baseline && self.held_on(device) > self.params.devices[device] {
            let r = self.running.swap_remove(i);
            self.report.lost_oom += 1;
            self.report.wasted_s += self.now - r.start;
            return;
        }
        self.note_memory();
    }

    fn finish(&mut self, i: usize) {
        let r = self.running.swap_remove(i);
        self.devices.release(r.trial.number);
        self.report.completed += 1;
        self.report.completed_flops +=
            cost::trial_flops(self.space.config(r.trial.model), &r.trial);
    }

    /// The drained device fails: its trials stop, their time is wasted,
    /// and they are offered again ahead of every other trial.
    fn drain_device(&mut self) {
        let Some((device, _)) = self.drain.take() else {
            return;
        };
        let stopped = self.devices.drain(device, "drained by the simulation");
        for &id in stopped.iter().rev() {
            let i = self
                .running
                .iter()
                .position(|r| r.trial.number == id)
                .expect("a leased trial is running");
            let r = self.running.swap_remove(i);
            self.report.retried += 1;
            self.report.wasted_s += self.now - r.start;
            self.queue.push_front(r.trial);
        }
    }

    /// Bytes held on `device` now.
    fn held_on(&self, device: usize) -> u64 {
        self.running
            .iter()
            .filter(|r| r.device == device)
            .map(|r| r.held)
            .sum()
    }

    fn note_memory(&mut self) {
        for device in 0..self.params.devices.len() {
            let held = self.held_on(device);
            let max = &mut self.report.devices[device].max_memory;
            *max = (*max).max(held);
            self.report.max_memory = self.report.max_memory.max(held);
            if self.policy == Policy::Packing {
                assert!(
                    held <= self.devices.budget(device).usable(),
                    "packing over-committed device {device}: {held} bytes held"
                );
            }
        }
    }
}

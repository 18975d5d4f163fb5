//! Memory-aware packing: which trials may run side by side on one device,
//! and with which micro-batch, so that the sum of what they can ever hold
//! stays within the device's memory.
//!
//! The legacy setup fixed the number of parallel trials (4, then 3, then 2) and lost
//! trials whenever the sum of their peaks crossed the device's memory. Here
//! every trial gets a *lease* before it starts: the [`Price`] of its run
//! (its peak of requested bytes, and the limit its allocator needs to reach
//! it; the study runner asks the trainer, `super::pricing`), plus the
//! per-process overhead (the CUDA context, which no allocator sees). The
//! [`Packer`] admits a
//! trial only while the sum of the leases fits the device minus a safety
//! margin, and the runner hands [`Lease::limit`] to the worker as its
//! `gpu-mem` limit, so a trial can never take memory another trial was
//! promised.
//!
//! Micro-batch fitting: the search space speaks of the *effective* batch; the
//! packer picks the largest micro-batch that fits what is free now (the step
//! then runs as `accumulation` micro-batches of equal size), so a large
//! model with a large batch runs instead of being forbidden. A trial whose
//! micro-batch 1 cannot fit even the whole empty device is
//! [`Admission::Infeasible`]; one that would fit an emptier device is
//! [`Admission::Wait`].
//!
//! This module is pure: no processes, no clocks, no device. The simulation
//! in `super::simulate` (feature `sim`) measures the policy; the runner
//! drives it for real.
//! Deliberately not here: which trial to try next (the runner asks the
//! sampler), what a worker does when an OOM happens anyway (the trainer
//! halves the micro-batch).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// One MiB in bytes.
pub const MIB: u64 = 1 << 20;
/// One GiB in bytes.
pub const GIB: u64 = 1 << 30;

/// Per-process memory outside the trainer's allocator on a CUDA device:
/// the CUDA context with its loaded modules (lazy loading, CUDA >= 11.7).
/// Typical values on Ampere/Hopper are 300-600 MiB; the simulated device
/// assumes the upper end, and a CUDA device's is measured
/// (`crate::devices::measure_process_overhead`).
pub const CUDA_PROCESS_OVERHEAD: u64 = 550 * MIB;

/// Tokens per micro-batch below which a trial on a CUDA device waits for
/// memory rather than start small ([`micro_floor_for_tokens`]). memtune's
/// workers are separate processes, which a CUDA device runs in turns (time
/// slices, unless MPS joins them): a trial whose steps are too small to
/// fill the device wastes its turns instead of leaving the rest to others.
/// In the packing simulation with time slices, waiting below 4,096 tokens
/// does 1.20x the useful work of the legacy setup where starting at
/// whatever fits does 0.87x (docs/benchmarks.md, "study runner").
pub const CUDA_MIN_MICRO_TOKENS: usize = 4096;

/// Allocator allowance of the packing simulation (`super::simulate`), which
/// prices a step rather than a whole run: its peak reserved was 0.4% over
/// the peak requested on a multi-trial BERT trace (docs/benchmarks.md); 1%
/// leaves room. The study runner prices whole runs instead, reserved bytes
/// included (`super::pricing`).
pub const GPU_MEM_ALLOCATOR_SLACK: f64 = 0.01;

/// The allocator allowance's floor in bytes: what a small model's 1% cannot
/// cover, the unused rest of the large pool's last 2 MiB page and of the
/// small pool's 2 MiB segments.
pub const GPU_MEM_ALLOCATOR_FLOOR: u64 = 8 * MIB;

/// What the packer may hand out on one device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceBudget {
    /// Total device memory in bytes (or RAM available to trials on CPU).
    pub capacity: u64,
    /// Bytes never leased: absorbs allocator rounding and anything else
    /// running on the device.
    pub safety_margin: u64,
    /// Bytes each worker process holds besides its trainer's allocations.
    pub process_overhead: u64,
    /// At most this many trials at once (at least 1).
    pub max_workers: usize,
    /// Fraction added to a predicted peak for the allocator's rounding and
    /// fragmentation ([`GPU_MEM_ALLOCATOR_SLACK`] on a GPU, 0 on the CPU
    /// backend, which allocates exactly).
    pub allocator_slack: f64,
    /// The allocator allowance's floor in bytes
    /// ([`GPU_MEM_ALLOCATOR_FLOOR`] on a GPU, 0 on the CPU backend).
    pub allocator_floor: u64,
}

impl DeviceBudget {
    /// Bytes that leases may sum to.
    pub fn usable(&self) -> u64 {
        self.capacity.saturating_sub(self.safety_margin)
    }

    /// Bytes one trial's allocator may reach on the empty device: what is
    /// usable less the process overhead (`None`: not even the process fits).
    pub fn alone(&self) -> Option<u64> {
        self.usable().checked_sub(self.process_overhead)
    }

    /// A predicted peak with the allocator allowance (the slack, at least
    /// the floor): the worker's limit.
    pub fn limit_for(&self, predicted_peak: u64) -> u64 {
        let slack = self.allocator_slack.max(0.0);
        let allowance = ((predicted_peak as f64 * slack).ceil() as u64).max(self.allocator_floor);
        predicted_peak.saturating_add(allowance)
    }
}

/// What a trial at one micro-batch costs: the peak bytes it asks its
/// allocator for, and the limit that allocator needs to give them (its
/// rounding and fragmentation on a device; the peak itself on the CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Price {
    pub peak: u64,
    pub limit: u64,
}

impl Price {
    /// A micro-batch that can never run.
    pub const NEVER: Price = Price {
        peak: u64::MAX,
        limit: u64::MAX,
    };
}

/// What one admitted trial may use: the worker's memory limit and the
/// micro-batch it trains with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The worker's whole share: `limit + process_overhead`.
    pub bytes: u64,
    /// The worker's `gpu-mem` limit (or tracker limit on the CPU): the
    /// predicted peak plus the allocator allowance.
    pub limit: u64,
    /// Rows per forward/backward pass.
    pub micro_batch: usize,
    /// Micro-batches per optimiser step (`micro_batch * accumulation` covers
    /// the effective batch; the trainer splits the step as evenly as
    /// possible).
    pub accumulation: usize,
    /// The run's predicted peak of requested bytes at `micro_batch`
    /// ([`Price::peak`]).
    pub predicted_peak: u64,
}

/// The packer's answer for one trial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Start it now with this lease.
    Admit(Lease),
    /// It fits the empty device but not what is free now (or all worker
    /// slots are taken): try again after a release.
    Wait,
    /// Even micro-batch 1 does not fit the whole usable device: never
    /// runnable here. `needed` is micro-batch 1's lease (peak, allowance and
    /// process overhead), `capacity` the usable bytes (capacity minus
    /// margin).
    Infeasible { needed: u64, capacity: u64 },
}

/// The micro-batch for each accumulation count `a`: `ceil(effective / a)`,
/// so that `a` micro-batches cover the effective batch with sizes differing
/// by at most one. Returned from the largest micro-batch down, each once.
fn micro_batch_candidates(effective_batch: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for accumulation in 1..=effective_batch {
        let micro = effective_batch.div_ceil(accumulation);
        // The smallest accumulation giving this micro-batch wastes least.
        if out.last().is_none_or(|&(m, _)| m != micro) {
            out.push((micro, accumulation));
        }
    }
    out
}

/// The largest micro-batch whose predicted peak fits `available` bytes, with
/// the accumulation that covers `effective_batch`, and that peak. `None`
/// when micro-batch 1 does not fit (or `effective_batch` is 0).
///
/// Assumes the peak does not shrink as the micro-batch grows (activations
/// scale with rows; everything else is fixed), so it binary-searches the
/// candidates and calls `peak_of` about log2(2 sqrt(batch)) times.
pub fn fit_micro_batch(
    effective_batch: usize,
    available: u64,
    peak_of: &mut dyn FnMut(usize) -> u64,
) -> Option<(usize, usize, u64)> {
    let candidates = micro_batch_candidates(effective_batch);
    // candidates[i].0 decreases with i: find the first index that fits.
    let (mut lo, mut hi) = (0usize, candidates.len());
    let mut best: Option<(usize, usize, u64)> = None;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let (micro, accumulation) = candidates[mid];
        let peak = peak_of(micro);
        if peak <= available {
            best = Some((micro, accumulation, peak));
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    best
}

/// Which micro-batch a trial is leased when the device is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FitPolicy {
    /// The largest micro-batch that fits what is free now: the trial starts
    /// at a smaller, slower micro-batch when the device is busy, down to
    /// the floor its caller sets (the start of the micro-batch range; see
    /// [`Packer::try_admit_within`]), under which it waits for memory. The
    /// default: with the runner's floor on CUDA ([`CUDA_MIN_MICRO_TOKENS`])
    /// it does as much work per hour as `Alone` in the simulation of a
    /// device that takes turns, and more where trials run side by side
    /// (docs/benchmarks.md, "study runner").
    #[default]
    FreeNow,
    /// The micro-batch the trial would get on the empty device: it waits
    /// until that fits. A large trial then holds everything ahead of it in
    /// the queue until the device is nearly empty.
    Alone,
}

/// Leases on one device. Admission is first come, first served among the
/// trials the runner offers; the runner decides the order (offering the
/// same waiting trial again after each release keeps large trials from
/// starving behind small ones).
#[derive(Debug)]
pub struct Packer {
    budget: DeviceBudget,
    policy: FitPolicy,
    leases: BTreeMap<u64, Lease>,
    leased: u64,
}

impl Packer {
    pub fn new(budget: DeviceBudget) -> Self {
        Self::with_policy(budget, FitPolicy::default())
    }

    pub fn with_policy(budget: DeviceBudget, policy: FitPolicy) -> Self {
        Self {
            budget,
            policy,
            leases: BTreeMap::new(),
            leased: 0,
        }
    }

    pub fn budget(&self) -> &DeviceBudget {
        &self.budget
    }

    pub fn policy(&self) -> FitPolicy {
        self.policy
    }

    /// Admits trial `id` with effective batch `effective_batch` if its
    /// micro-batch fits what is free now. `peak_of(micro)` is the trainer's
    /// predicted peak in bytes (see [`trainer::memory::PlanPeaks`]). Admitting an `id` that
    /// holds a lease replaces that lease.
    pub fn try_admit(
        &mut self,
        id: u64,
        effective_batch: usize,
        peak_of: &mut dyn FnMut(usize) -> u64,
    ) -> Admission {
        self.try_admit_within(id, effective_batch, 1..=effective_batch, peak_of)
    }

    /// [`Packer::try_admit`] with the micro-batch chosen in `micro`: never
    /// above its end (e.g. [`micro_cap_for_tokens`]: beyond some tokens per
    /// step a larger micro-batch buys no speed, only memory), and below its
    /// start only when the empty device fits no more (e.g.
    /// [`micro_floor_for_tokens`]: a smaller one waits for memory instead).
    /// Micro-batch 1 is priced first: a trial it does not fit on the empty
    /// device is infeasible whatever else is running.
    pub fn try_admit_within(
        &mut self,
        id: u64,
        effective_batch: usize,
        micro: RangeInclusive<usize>,
        peak_of: &mut dyn FnMut(usize) -> u64,
    ) -> Admission {
        let budget = self.budget;
        let mut price_of = |micro: usize| {
            let peak = peak_of(micro);
            Price {
                peak,
                limit: budget.limit_for(peak),
            }
        };
        let smallest = price_of(1).limit.saturating_add(budget.process_overhead);
        if effective_batch == 0 || smallest > budget.usable() {
            self.release(id);
            return Admission::Infeasible {
                needed: smallest,
                capacity: budget.usable(),
            };
        }
        self.try_admit_priced(id, effective_batch, micro, &mut price_of)
    }

    /// Admits trial `id` at the largest micro-batch (at most `micro`'s end)
    /// whose [`Price`] limit fits what is free now (or, under
    /// [`FitPolicy::Alone`], the empty device), with the accumulation that
    /// covers `effective_batch`. A fit below `micro`'s start waits while
    /// the empty device would fit a larger one. `price_of` may be costly
    /// (the study runner replays the run): it is asked about the few
    /// micro-batches of a binary search or two, and about micro-batch 1
    /// only when nothing fits the empty device, which makes the trial
    /// infeasible. Admitting an `id` that holds a lease replaces that
    /// lease.
    pub fn try_admit_priced(
        &mut self,
        id: u64,
        effective_batch: usize,
        micro: RangeInclusive<usize>,
        price_of: &mut dyn FnMut(usize) -> Price,
    ) -> Admission {
        self.release(id);
        let budget = self.budget;
        let usable = budget.usable();
        let overhead = budget.process_overhead;
        if effective_batch == 0 {
            return Admission::Infeasible {
                needed: overhead,
                capacity: usable,
            };
        }
        if self.leases.len() >= budget.max_workers.max(1) {
            return Admission::Wait;
        }
        let mut limit_of = |micro: usize| price_of(micro).limit;
        let max_micro = (*micro.end()).clamp(1, effective_batch);
        // Fit within the capped batch, then the accumulation that covers the
        // whole effective batch.
        let fit = |available: u64, limit_of: &mut dyn FnMut(usize) -> u64| {
            fit_micro_batch(max_micro, available, limit_of)
                .map(|(micro, _, _)| (micro, effective_batch.div_ceil(micro)))
        };
        let alone = budget.alone();
        let free = usable.saturating_sub(self.leased).checked_sub(overhead);
        let chosen = match (self.policy, free) {
            (FitPolicy::FreeNow, Some(available)) => {
                fit(available, &mut limit_of).filter(|&(fitted, _)| {
                    // Below the floor: worth it only when the empty device
                    // fits no more.
                    fitted >= *micro.start()
                        || alone
                            .and_then(|a| fit(a, &mut limit_of))
                            .is_none_or(|(most, _)| most <= fitted)
                })
            }
            (FitPolicy::Alone, Some(available)) => alone
                .and_then(|a| fit(a, &mut limit_of))
                .filter(|&(micro, _)| limit_of(micro) <= available),
            (_, None) => None,
        };
        let Some((micro, accumulation)) = chosen else {
            // Nothing fits now: wait, unless nothing would fit the empty
            // device either.
            if alone.and_then(|a| fit(a, &mut limit_of)).is_some() {
                return Admission::Wait;
            }
            return Admission::Infeasible {
                needed: limit_of(1).saturating_add(overhead),
                capacity: usable,
            };
        };
        // Even sizes: `accumulation` micro-batches of at most
        // ceil(effective / accumulation) rows (never more than fitted).
        let micro_batch = micro.min(effective_batch.div_ceil(accumulation));
        let price = price_of(micro_batch);
        let lease = Lease {
            bytes: price.limit + overhead,
            limit: price.limit,
            micro_batch,
            accumulation,
            predicted_peak: price.peak,
        };
        self.leases.insert(id, lease);
        self.leased += lease.bytes;
        Admission::Admit(lease)
    }

    /// Returns trial `id`'s lease (no-op when it holds none).
    pub fn release(&mut self, id: u64) {
        if let Some(lease) = self.leases.remove(&id) {
            self.leased -= lease.bytes;
        }
    }

    /// Sum of the current leases in bytes.
    pub fn leased_bytes(&self) -> u64 {
        self.leased
    }

    /// Number of trials holding a lease.
    pub fn running(&self) -> usize {
        self.leases.len()
    }

    /// Trial `id`'s lease, if it holds one.
    pub fn lease(&self, id: u64) -> Option<&Lease> {
        self.leases.get(&id)
    }
}

/// The smallest micro-batch with at least `tokens_per_step` tokens at
/// `seq_len` tokens a row: below it a step's fixed costs (launches, the
/// optimiser, the host loop) dominate, and on a device that time-slices
/// between processes (CUDA without MPS) the trial wastes its slices. A
/// `tokens_per_step` of 0 gives 1: no floor.
pub fn micro_floor_for_tokens(seq_len: usize, tokens_per_step: usize) -> usize {
    tokens_per_step.div_ceil(seq_len.max(1)).max(1)
}

/// The largest micro-batch with at most `tokens_per_step` tokens at
/// `seq_len` (at least 1).
pub fn micro_cap_for_tokens(seq_len: usize, tokens_per_step: usize) -> usize {
    (tokens_per_step / seq_len.max(1)).max(1)
}

/// A budget for CPU workers: one worker per `threads_per_worker` cores (at
/// least one) and the RAM that `/proc/meminfo` reports available (1 GiB per
/// worker where it cannot be read; at most `memory_limit`), less a 10%
/// margin. No per-process overhead: a worker's own heap is small next to a
/// model, and the margin covers it.
pub fn cpu_budget(threads_per_worker: usize, memory_limit: Option<u64>) -> DeviceBudget {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max_workers = (cores / threads_per_worker.max(1)).max(1);
    let available = mem_available().unwrap_or(max_workers as u64 * GIB);
    let capacity = memory_limit.map_or(available, |limit| available.min(limit));
    DeviceBudget {
        capacity,
        // The system's share (`setup::cpu_safety_margin` keeps it as a floor).
        safety_margin: capacity / 10,
        process_overhead: 0,
        max_workers,
        allocator_slack: 0.0,
        allocator_floor: 0,
    }
}

/// `MemAvailable` from `/proc/meminfo` in bytes (Linux), if readable.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut parts = line.split_whitespace().skip(1);
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(value * 1024),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_cover_the_batch_evenly() {
        for e in 1..=130 {
            let c = micro_batch_candidates(e);
            assert_eq!(c[0], (e, 1));
            assert_eq!(*c.last().unwrap(), (1, e));
            for w in c.windows(2) {
                assert!(w[0].0 > w[1].0);
            }
            for &(m, a) in &c {
                assert!(m * a >= e && m * (a - 1) < e, "e={e} m={m} a={a}");
            }
        }
    }

    #[test]
    fn meminfo_is_parsed_in_kib() {
        let text = "MemTotal:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn a_device_allowance_is_one_percent_but_never_below_the_floor() {
        let device = DeviceBudget {
            capacity: 80 * GIB,
            safety_margin: 0,
            process_overhead: 0,
            max_workers: 4,
            allocator_slack: GPU_MEM_ALLOCATOR_SLACK,
            allocator_floor: GPU_MEM_ALLOCATOR_FLOOR,
        };
        assert_eq!(device.limit_for(4 * GIB), 4 * GIB + (4 * GIB).div_ceil(100));
        assert_eq!(device.limit_for(20 * MIB), 28 * MIB);
        let cpu = DeviceBudget {
            allocator_slack: 0.0,
            allocator_floor: 0,
            ..device
        };
        assert_eq!(cpu.limit_for(20 * MIB), 20 * MIB);
    }

    #[test]
    fn cpu_budget_has_a_worker_and_memory() {
        let b = cpu_budget(2, None);
        assert!(cpu_budget(2, Some(GIB)).capacity <= GIB);
        assert!(b.max_workers >= 1);
        assert!(b.usable() > 0);
    }
}

//! What a simulated run reports: totals, per device, and every start.

use super::Policy;

/// What one simulated run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    pub policy: Policy,
    pub seed: u64,
    pub horizon_s: f64,
    /// Trials that ran to the end within the horizon.
    pub completed: usize,
    /// Trials killed by an OOM.
    pub lost_oom: usize,
    /// Trials whose micro-batch 1 cannot fit the device (never started).
    pub infeasible: usize,
    /// Trial starts (a retried trial counts once per start): each one
    /// completed, lost, retried, or still running at the end.
    pub started: usize,
    /// Trials still running at the end of the horizon.
    pub running_at_end: usize,
    /// Trials stopped by a drained device, to be placed again.
    pub retried: usize,
    /// FLOPs of the completed trials.
    pub completed_flops: f64,
    /// Trial-seconds spent on trials that were then lost.
    pub wasted_s: f64,
    /// Time-average of the memory held by running trials over the
    /// devices' summed capacity.
    pub mean_memory_utilisation: f64,
    /// Time-average of the number of running trials.
    pub mean_concurrency: f64,
    /// Most memory ever held at once on one device, in bytes.
    pub max_memory: u64,
    /// Time-average of the devices' arithmetic in use (per device: the sum
    /// of its training trials' utilisations, at most 1, when they run side
    /// by side; their mean when they take turns), averaged over the
    /// devices.
    pub mean_compute_utilisation: f64,
    /// Per device, in [`SimParams::devices`] order.
    pub devices: Vec<DeviceReport>,
    /// Every start, in order.
    pub starts: Vec<Start>,
}

/// One device's share of a [`SimReport`].
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceReport {
    /// Seconds of the horizon the device took trials (until its drain).
    pub live_s: f64,
    /// Its arithmetic in use (as [`SimReport::mean_compute_utilisation`])
    /// averaged over `live_s`: below 1 when the device idles and when its
    /// trials' steps are too small to fill it.
    pub compute_utilisation: f64,
    /// Fraction of `live_s` with at least one trial training on the device.
    /// The simulation samples trials on demand, so work is queued the
    /// whole time: this is how busy the device is kept while work waits.
    pub training: f64,
    /// Fraction of `live_s` with at least one trial on the device (in
    /// start-up or training).
    pub occupied: f64,
    /// Most memory held on it at once, in bytes.
    pub max_memory: u64,
}

/// A trial started on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    /// The trial's number in the sampled sequence.
    pub trial: u64,
    pub device: usize,
    /// Its micro-batch there (packing) or its batch size (baseline).
    pub micro_batch: usize,
    /// Simulated second it started at.
    pub at_s: u64,
}

impl SimReport {
    pub fn completed_per_hour(&self) -> f64 {
        self.completed as f64 / (self.horizon_s / 3600.0)
    }

    /// Useful work per hour: the completed trials' FLOPs in hours of the
    /// fully used device (so 1.0 is the device's ceiling).
    pub fn useful_device_hours_per_hour(&self, device_flops: f64) -> f64 {
        self.completed_flops / device_flops / self.horizon_s
    }
}

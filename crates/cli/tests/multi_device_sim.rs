//! Placement over several devices, in the packing simulation: the legacy
//! seven-model space with the trainer's memory plans on two 24 GiB cards
//! and one 80 GiB card for six simulated hours. Nothing is lost to OOM,
//! every device is kept busy, a trial that fits only the big card runs
//! there, and a device drained mid-study loses no trial: its trials are
//! counted as retried and start again on the others.

use std::collections::BTreeMap;

use cli::tune::packing::GIB;
use cli::tune::simulate::plans::PeakTable;
use cli::tune::simulate::{Policy, SimParams, SimReport, SimSpace, simulate, space};

const HOURS: f64 = 6.0;

fn legacy_space() -> SimSpace {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    SimSpace::build(PeakTable::new(), threads).expect("the legacy space prices")
}

fn three_devices() -> SimParams {
    SimParams {
        devices: vec![24 * GIB, 24 * GIB, 80 * GIB],
        horizon_s: HOURS * 3600.0,
        ..SimParams::default()
    }
}

/// The devices on which trial `number`'s micro-batch 1 fits the empty
/// device, by the budget the packer leases against.
fn fitting_devices(params: &SimParams, space: &SimSpace, number: u64, seed: u64) -> Vec<usize> {
    let trial = space::sample_trial(seed, number);
    (0..params.devices.len())
        .filter(|&d| {
            let b = params.budget(d);
            b.limit_for(space.peak(&trial, 1)) + b.process_overhead <= b.usable()
        })
        .collect()
}

/// Every start accounted for: each ended (completed, lost, retried) or is
/// still running.
fn assert_conserved(r: &SimReport) {
    assert_eq!(
        r.started,
        r.completed + r.lost_oom + r.retried + r.running_at_end,
        "{r:?}"
    );
    assert_eq!(r.started, r.starts.len());
}

#[test]
fn three_devices_lose_nothing_stay_busy_and_keep_big_trials_on_the_big_card() {
    let space = legacy_space();
    let params = three_devices();
    let mut big_only = 0;
    for seed in 1..=3 {
        let r = simulate(&params, &space, Policy::Packing, seed);
        assert_eq!(r, simulate(&params, &space, Policy::Packing, seed));
        assert_conserved(&r);
        let busy: Vec<String> = r
            .devices
            .iter()
            .map(|d| {
                format!(
                    "{:.1}% training, {:.1}% arithmetic",
                    100.0 * d.training,
                    100.0 * d.compute_utilisation
                )
            })
            .collect();
        eprintln!(
            "seed {seed}: {} completed, {} lost to OOM, {} infeasible, busy {busy:?}",
            r.completed, r.lost_oom, r.infeasible
        );
        assert_eq!(r.lost_oom, 0);
        assert_eq!(r.retried, 0);
        for (d, device) in r.devices.iter().enumerate() {
            assert!(device.max_memory <= params.budget(d).usable());
            assert!(
                device.training >= 0.90,
                "seed {seed}: device {d} trains {:.3} of the time",
                device.training
            );
            assert!((device.live_s - params.horizon_s).abs() < 1e-6);
        }
        // Trials whose whole batch fits only the big card: there they run
        // unsplit; elsewhere (when it is full) split.
        let (mut whole_batch_big, mut on_big) = (0, 0);
        for start in &r.starts {
            let fits = fitting_devices(&params, &space, start.trial, seed);
            assert!(fits.contains(&start.device), "{start:?} fits only {fits:?}");
            if fits == [2] {
                big_only += 1;
            }
            let trial = space::sample_trial(seed, start.trial);
            let whole = |d: usize| {
                let b = params.budget(d);
                b.limit_for(space.peak(&trial, trial.batch_size)) + b.process_overhead <= b.usable()
            };
            if whole(2) && !whole(0) {
                whole_batch_big += 1;
                on_big += usize::from(start.device == 2);
            }
        }
        eprintln!(
            "seed {seed}: {whole_batch_big} starts whose whole batch fits only the 80 GiB card, {on_big} of them there"
        );
        // Every device took trials, the big card the most memory.
        let mut per_device = BTreeMap::new();
        for s in &r.starts {
            *per_device.entry(s.device).or_insert(0) += 1;
        }
        assert_eq!(per_device.len(), 3, "{per_device:?}");
        assert!(r.devices[2].max_memory > 24 * GIB);
    }
    eprintln!("trials that fit only the 80 GiB card: {big_only}");
}

/// The same space on two 6 GiB cards and one 80 GiB card: the large models
/// fit only the big card, so many trials do, and each waits for it while
/// the small cards go on with the rest.
#[test]
fn trials_that_fit_only_the_big_card_all_run_there() {
    let space = legacy_space();
    let params = SimParams {
        devices: vec![6 * GIB, 6 * GIB, 80 * GIB],
        ..three_devices()
    };
    let r = simulate(&params, &space, Policy::Packing, 1);
    assert_conserved(&r);
    assert_eq!(r.lost_oom, 0);
    let mut big_only = 0;
    for start in &r.starts {
        let fits = fitting_devices(&params, &space, start.trial, 1);
        assert!(fits.contains(&start.device), "{start:?} fits only {fits:?}");
        if fits == [2] {
            big_only += 1;
        }
    }
    eprintln!("two 6 GiB cards and one 80 GiB card: {big_only} trials fit only the 80 GiB card");
    assert!(big_only >= 10, "{big_only} trials fit only the big card");
    assert!(r.starts.iter().any(|s| s.device != 2));
}

#[test]
fn a_device_drained_mid_study_loses_no_trial() {
    let space = legacy_space();
    let drain_at = HOURS * 3600.0 / 2.0;
    for seed in 1..=3 {
        let params = SimParams {
            drain: Some((0, drain_at)),
            ..three_devices()
        };
        let r = simulate(&params, &space, Policy::Packing, seed);
        assert_conserved(&r);
        eprintln!(
            "seed {seed}, device 0 drained at {drain_at} s: {} retried, {} completed, {} lost to OOM",
            r.retried, r.completed, r.lost_oom
        );
        assert_eq!(r.lost_oom, 0);
        assert!(r.retried > 0, "seed {seed}: device 0 was running trials");
        assert!((r.devices[0].live_s - drain_at).abs() < 1e-6);
        // The trials on device 0 at the drain: each starts again elsewhere.
        let mut starts: BTreeMap<u64, Vec<_>> = BTreeMap::new();
        for s in &r.starts {
            starts.entry(s.trial).or_default().push(*s);
        }
        let drained = starts.values().filter(|v| v.len() > 1).count();
        assert_eq!(drained, r.retried, "seed {seed}");
        for v in starts.values().filter(|v| v.len() > 1) {
            assert_eq!(v.len(), 2);
            assert_eq!(v[0].device, 0);
            assert_ne!(v[1].device, 0);
            assert!(v[1].at_s as f64 >= drain_at - 1.0);
        }
        assert!(
            r.starts
                .iter()
                .all(|s| s.device != 0 || (s.at_s as f64) < drain_at)
        );
        // The devices left stay busy and finish more than the one drained.
        for d in [1, 2] {
            assert!(r.devices[d].training >= 0.90, "{:?}", r.devices);
        }
        let undrained = simulate(&three_devices(), &space, Policy::Packing, seed);
        assert!(r.completed < undrained.completed);
    }
}

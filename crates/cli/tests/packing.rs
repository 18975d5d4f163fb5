//! Memory-aware packing: the packer never promises more memory than the
//! device has, fits the largest micro-batch, calls a trial infeasible only
//! when micro-batch 1 cannot fit the empty device; the peaks the runner and
//! the simulation price (`trainer::memory::step_curve`, whose exactness on
//! small shapes the trainer's `plan_peaks` tests show) equal the full plan
//! and the simulated device's peak for every model of the simulated space;
//! the simulation is deterministic and loses nothing with packing.

use cli::tune::packing::{
    Admission, DeviceBudget, FitPolicy, GIB, Lease, MIB, Packer, fit_micro_batch,
};
use cli::tune::simulate::plans::PeakTable;
use cli::tune::simulate::{Policy, SimParams, SimSpace, sim_head, simulate, space};
use proptest::prelude::*;
use trainer::finetune::{SimSpec, finetune_sim};
use trainer::memory::{AffinePeak, PlanRequest, plan_peak, step_curve};
use trainer::train::Control;

/// An affine peak like the memory plan's: fixed bytes plus bytes per row.
fn affine(fixed: u64, per_row: u64) -> impl FnMut(usize) -> u64 {
    move |m| fixed + per_row * m as u64
}

fn budget(capacity: u64, margin: u64, overhead: u64, workers: usize) -> DeviceBudget {
    DeviceBudget {
        capacity,
        safety_margin: margin,
        process_overhead: overhead,
        max_workers: workers,
        allocator_slack: 0.0,
        allocator_floor: 0,
    }
}

/// The largest `ceil(e / a)` whose peak fits, by brute force.
fn brute_force_fit(e: usize, available: u64, peak: &mut dyn FnMut(usize) -> u64) -> Option<usize> {
    (1..=e)
        .map(|a| e.div_ceil(a))
        .filter(|&m| peak(m) <= available)
        .max()
}

#[test]
fn fit_takes_the_largest_micro_batch_that_fits() {
    let mut peak = affine(1000, 100);
    // 64 rows need 7,400 bytes; 6,000 fit 50 rows, and the largest
    // ceil(64 / a) <= 50 is 32 (a = 2).
    assert_eq!(fit_micro_batch(64, 6000, &mut peak), Some((32, 2, 4200)));
    assert_eq!(fit_micro_batch(64, 7400, &mut peak), Some((64, 1, 7400)));
    // 24 rows, 3,300 bytes: 23 rows fit, ceil(24 / 2) = 12 is the largest.
    assert_eq!(fit_micro_batch(24, 3300, &mut peak), Some((12, 2, 2200)));
    assert_eq!(fit_micro_batch(64, 1100, &mut peak), Some((1, 64, 1100)));
    assert_eq!(fit_micro_batch(64, 1099, &mut peak), None);
    assert_eq!(fit_micro_batch(0, u64::MAX, &mut peak), None);
}

#[test]
fn admission_waits_when_busy_and_is_infeasible_only_when_micro_one_cannot_fit() {
    // Usable 9,000 bytes; a trial needs 500 + 1,000 + 100 m.
    let mut packer = Packer::with_policy(budget(10_000, 1000, 500, 8), FitPolicy::Alone);
    let mut peak = affine(1000, 100);
    let Admission::Admit(first) = packer.try_admit(1, 40, &mut peak) else {
        panic!("the empty device fits micro-batch 40");
    };
    assert_eq!(
        first,
        Lease {
            bytes: 5500,
            limit: 5000,
            micro_batch: 40,
            accumulation: 1,
            predicted_peak: 5000
        }
    );
    // 3,500 bytes free: under `Alone` the second trial waits for the
    // micro-batch 64 it gets alone rather than run at 16.
    assert_eq!(packer.try_admit(2, 64, &mut peak), Admission::Wait);
    assert_eq!(packer.running(), 1);
    packer.release(1);
    assert_eq!(packer.leased_bytes(), 0);
    let Admission::Admit(second) = packer.try_admit(2, 64, &mut peak) else {
        panic!("the empty device fits micro-batch 64");
    };
    assert_eq!((second.micro_batch, second.accumulation), (64, 1));
    // Micro-batch 1 needs 9,100 > 9,000: infeasible whatever is running
    // (it could never run here).
    let mut huge = affine(8500, 100);
    assert_eq!(
        packer.try_admit(3, 8, &mut huge),
        Admission::Infeasible {
            needed: 9100,
            capacity: 9000
        }
    );
}

#[test]
fn free_now_policy_shrinks_the_micro_batch_instead_of_waiting() {
    let mut packer = Packer::new(budget(10_000, 1000, 500, 8));
    assert_eq!(packer.policy(), FitPolicy::FreeNow);
    let mut peak = affine(1000, 100);
    assert!(matches!(
        packer.try_admit(1, 40, &mut peak),
        Admission::Admit(_)
    ));
    // 3,500 free, 3,000 for the peak: 20 rows, so ceil(64 / 4) = 16.
    // (`FreeNow` is the default policy.)
    let Admission::Admit(second) = packer.try_admit(2, 64, &mut peak) else {
        panic!("FreeNow admits at a smaller micro-batch");
    };
    assert_eq!((second.micro_batch, second.accumulation), (16, 4));
    assert_eq!(packer.leased_bytes(), 5500 + 3100);
}

#[test]
fn a_fit_below_the_floor_waits_while_the_empty_device_fits_more() {
    let mut packer = Packer::new(budget(10_000, 1000, 500, 8));
    let mut peak = affine(1000, 100);
    assert!(matches!(
        packer.try_admit(1, 40, &mut peak),
        Admission::Admit(_)
    ));
    // 3,500 free fit 20 rows (16 x 4 for 64): under the floor of 32, while
    // the empty device would fit 64 at once.
    assert_eq!(
        packer.try_admit_within(2, 64, 32..=64, &mut peak),
        Admission::Wait
    );
    // At or under what is free, the floor changes nothing.
    let Admission::Admit(small) = packer.try_admit_within(2, 64, 16..=64, &mut peak) else {
        panic!("16 rows are at the floor");
    };
    assert_eq!((small.micro_batch, small.accumulation), (16, 4));
    packer.release(2);
    packer.release(1);
    let Admission::Admit(alone) = packer.try_admit_within(2, 64, 32..=64, &mut peak) else {
        panic!("the empty device fits the whole batch");
    };
    assert_eq!((alone.micro_batch, alone.accumulation), (64, 1));
}

#[test]
fn a_trial_the_empty_device_fits_only_under_the_floor_starts_there() {
    // 8,500 usable - 500 overhead: 70 rows alone, under a floor of 100.
    let mut packer = Packer::new(budget(10_000, 1500, 500, 8));
    let mut peak = affine(1000, 100);
    let Admission::Admit(lease) = packer.try_admit_within(1, 128, 100..=128, &mut peak) else {
        panic!("the most the device can ever give");
    };
    assert_eq!((lease.micro_batch, lease.accumulation), (64, 2));
}

#[test]
fn worker_slots_and_token_caps_are_respected() {
    let mut packer = Packer::new(budget(100 * GIB, 0, 500 * MIB, 2));
    let mut peak = affine(GIB, MIB);
    assert!(matches!(
        packer.try_admit(1, 8, &mut peak),
        Admission::Admit(_)
    ));
    assert!(matches!(
        packer.try_admit(2, 8, &mut peak),
        Admission::Admit(_)
    ));
    assert_eq!(packer.try_admit(3, 8, &mut peak), Admission::Wait);
    packer.release(2);
    let Admission::Admit(capped) = packer.try_admit_within(3, 64, 1..=20, &mut peak) else {
        panic!("room for one more");
    };
    // At most 20 rows: 16 x 4 covers 64 evenly.
    assert_eq!((capped.micro_batch, capped.accumulation), (16, 4));
}

#[test]
fn the_allocator_allowance_is_part_of_the_lease() {
    let b = DeviceBudget {
        allocator_slack: 0.01,
        ..budget(10_500, 0, 500, 4)
    };
    let mut packer = Packer::new(b);
    // 1,000 + 100 m bytes planned, 1% allowance: 64 rows need 7,474 + 500.
    let Admission::Admit(lease) = packer.try_admit(1, 64, &mut affine(1000, 100)) else {
        panic!("fits");
    };
    assert_eq!(
        (lease.predicted_peak, lease.limit, lease.bytes),
        (7400, 7474, 7974)
    );
    // 2,526 left: 2,026 for a limit, i.e. 10 rows (2,020): ceil(64 / 7) = 10.
    let Admission::Admit(second) = packer.try_admit(2, 64, &mut affine(1000, 100)) else {
        panic!("fits at a smaller micro-batch");
    };
    assert_eq!(
        (second.micro_batch, second.accumulation, second.limit),
        (10, 7, 2020)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random admissions and releases on random budgets: the leases never
    /// sum past the usable memory, every lease covers its batch and holds
    /// its predicted peak plus the overhead, and the answer is Infeasible
    /// exactly when micro-batch 1 does not fit the empty device.
    #[test]
    fn packer_never_over_commits(
        capacity in 1u64..64 * GIB,
        margin_frac in 0.0f64..0.3,
        overhead in 0u64..GIB,
        workers in 1usize..10,
        free_now in any::<bool>(),
        slack in 0.0f64..0.3,
        ops in proptest::collection::vec(
            (any::<bool>(), 0u64..12, 1usize..80, 1u64..8 * GIB, 1u64..200 * MIB, 1usize..100),
            1..120,
        ),
    ) {
        let margin = (capacity as f64 * margin_frac) as u64;
        let b = DeviceBudget { allocator_slack: slack, ..budget(capacity, margin, overhead, workers) };
        let policy = if free_now { FitPolicy::FreeNow } else { FitPolicy::Alone };
        let mut packer = Packer::with_policy(b, policy);
        let mut leases = std::collections::BTreeMap::new();
        for (admit, id, batch, fixed, per_row, cap) in ops {
            if admit {
                let mut peak = affine(fixed, per_row);
                let free_before = b.usable() - packer.leased_bytes() + leases.get(&id).map_or(0, |l: &Lease| l.bytes);
                let answer = packer.try_admit_within(id, batch, 1..=cap, &mut peak);
                leases.remove(&id);
                let needed = b.limit_for(fixed + per_row) + overhead;
                match answer {
                    Admission::Admit(l) => {
                        prop_assert!(l.micro_batch >= 1 && l.micro_batch <= batch.min(cap.max(1)));
                        prop_assert!(l.micro_batch * l.accumulation >= batch);
                        prop_assert!(l.micro_batch * (l.accumulation - 1) < batch);
                        prop_assert_eq!(l.predicted_peak, peak(l.micro_batch));
                        prop_assert_eq!(l.limit, b.limit_for(l.predicted_peak));
                        prop_assert!(l.limit >= l.predicted_peak);
                        prop_assert_eq!(l.bytes, l.limit + overhead);
                        prop_assert!(l.bytes <= free_before);
                        leases.insert(id, l);
                    }
                    Admission::Infeasible { needed: n, capacity: c } => {
                        prop_assert_eq!((n, c), (needed, b.usable()));
                        prop_assert!(needed > b.usable());
                    }
                    Admission::Wait => prop_assert!(needed <= b.usable()),
                }
            } else {
                packer.release(id);
                leases.remove(&id);
            }
            let sum: u64 = leases.values().map(|l| l.bytes).sum();
            prop_assert_eq!(packer.leased_bytes(), sum);
            prop_assert!(sum <= b.usable());
            prop_assert!(packer.running() <= workers);
            prop_assert_eq!(packer.running(), leases.len());
        }
    }

    /// The binary search agrees with brute force for monotone peaks.
    #[test]
    fn fit_agrees_with_brute_force(
        batch in 1usize..300,
        fixed in 0u64..1000,
        per_row in 0u64..100,
        available in 0u64..40_000,
    ) {
        let mut peak = affine(fixed, per_row);
        let fast = fit_micro_batch(batch, available, &mut peak).map(|(m, a, p)| {
            assert_eq!(a, batch.div_ceil(m));
            assert_eq!(p, peak(m));
            m
        });
        prop_assert_eq!(fast, brute_force_fit(batch, available, &mut peak));
    }
}

/// Every model of the simulated space at a few (micro-batch, length)
/// points: the runner's price ([`step_curve`]), the full memory plan and
/// the peak a simulated trial requested through `gpu-mem` (the real
/// training loop: two micro-batches a step, a short last one, evaluation)
/// are one number. DeBERTa-v3's points below 512 tokens straddle micro-batch
/// 4, where the buffers live at its peak change.
#[test]
fn plan_equals_the_simulated_peak_for_every_model_of_the_space() {
    let head = sim_head();
    for model in space::MODELS {
        let config = space::model_config(model).unwrap();
        for seq in [128, 256, 512] {
            let curve = step_curve(&PlanRequest::fp32_adamw(&config, &head, 1, seq)).unwrap();
            for micro in [1, 3, 4, 5, 16] {
                let plan = plan_peak(&config, &head, seq, micro).unwrap();
                assert_eq!(curve.at(micro), plan, "{model} seq {seq} micro {micro}");
                let sim = finetune_sim(
                    &SimSpec {
                        config: config.clone(),
                        head: head.clone(),
                        micro_batch: micro,
                        accumulation_steps: 2,
                        seq_len: seq,
                        train_examples: 3 * micro - 1,
                        validation_examples: micro,
                        epochs: 1,
                        device_capacity: 80 << 30,
                        ..SimSpec::default()
                    },
                    &mut |_| Control::Continue,
                )
                .unwrap();
                assert_eq!(sim.peak_requested, plan, "{model} seq {seq} micro {micro}");
                assert!(sim.oom_retries.is_empty());
            }
        }
    }
}

/// The space's peaks from a formula in the plan's form (the real plans
/// are checked against the simulated device in
/// `plan_equals_the_simulated_peak_for_every_model_of_the_space`).
fn synthetic_space() -> SimSpace {
    let mut table = PeakTable::new();
    for (i, model) in space::MODELS.iter().enumerate() {
        let weights = [1_800, 2_000, 5_400, 5_700, 4_400, 2_900, 7_000][i] as i128 * MIB as i128;
        for &seq in &space::SEQ_LENS {
            let per_row = (seq as i128) * [320, 320, 900, 900, 320, 400, 1_100][i] * 1024
                + (seq * seq) as i128 * 600;
            table.insert(
                model,
                seq,
                AffinePeak {
                    fixed: weights,
                    per_row,
                },
            );
        }
    }
    SimSpace::build(table, 1).unwrap()
}

#[test]
fn simulation_is_deterministic_and_packing_loses_nothing() {
    let space = synthetic_space();
    let params = SimParams {
        horizon_s: 3.0 * 3600.0,
        ..SimParams::default()
    };
    for seed in [1, 7] {
        let ours = simulate(&params, &space, Policy::Packing, seed);
        assert_eq!(ours, simulate(&params, &space, Policy::Packing, seed));
        assert_eq!(ours.lost_oom, 0);
        assert!(ours.completed > 0);
        assert!(ours.max_memory <= params.devices[0] - params.safety_margin);
        let base = simulate(&params, &space, Policy::Baseline, seed);
        assert_eq!(base, simulate(&params, &space, Policy::Baseline, seed));
        assert!(base.mean_concurrency <= params.baseline_parallel as f64 + 1e-9);
    }
    // Another seed is another trial sequence.
    assert_ne!(
        simulate(&params, &space, Policy::Packing, 1),
        simulate(&params, &space, Policy::Packing, 2)
    );
}

#[test]
fn baseline_loses_trials_that_do_not_fit_and_packing_runs_them() {
    let space = synthetic_space();
    // On a 12 GiB device many trials do not fit alone at their batch size:
    // the baseline loses them, the packer splits their batches.
    let params = SimParams {
        devices: vec![12 * GIB],
        horizon_s: 3600.0,
        ..SimParams::default()
    };
    let base = simulate(&params, &space, Policy::Baseline, 3);
    let ours = simulate(&params, &space, Policy::Packing, 3);
    assert!(base.lost_oom > 0);
    assert!(base.wasted_s > 0.0);
    assert_eq!(ours.lost_oom, 0);
    assert!(ours.completed > 0);
}

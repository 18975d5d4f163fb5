//! The GP sampler: every sample lies in its distribution; the posterior
//! equals a direct O(n^3) computation; fitted hyperparameters match
//! Optuna 5.0's on recorded data (tests/fixtures/gp/optuna_fit.json,
//! written by benches/sampler/gp_fixtures.py); running trials push
//! concurrent asks apart; on two objectives both ParEGO and expected
//! hypervolume improvement come near the front.

use hpo_sampler::internals::{GpRegressor, KernelParams, Noise, OPTUNA_MINIMUM_NOISE, fit_gp};
use hpo_sampler::{
    Distribution, FrozenTrial, GpConfig, GpSampler, ParamValue, StudyDirection, StudyView,
    TrialState, ask,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn matern52(d2: f64) -> f64 {
    let s = (5.0 * d2).sqrt();
    (1.0 + s + 5.0 / 3.0 * d2) * (-s).exp()
}

/// `A^-1 b` by Gauss-Jordan elimination with partial pivoting.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for c in 0..n {
        let p = (c..n)
            .max_by(|i, j| a[*i][c].abs().total_cmp(&a[*j][c].abs()))
            .unwrap();
        a.swap(c, p);
        b.swap(c, p);
        let pivot = a[c].clone();
        for r in 0..n {
            if r != c {
                let f = a[r][c] / pivot[c];
                for (v, p) in a[r].iter_mut().zip(&pivot).skip(c) {
                    *v -= f * p;
                }
                b[r] -= f * b[c];
            }
        }
    }
    (0..n).map(|i| b[i] / a[i][i]).collect()
}

fn reference_posterior(
    x: &[Vec<f64>],
    y: &[f64],
    cat: &[bool],
    p: &KernelParams,
    q: &[f64],
) -> (f64, f64) {
    let k = |a: &[f64], b: &[f64]| {
        let d2: f64 = (0..a.len())
            .map(|d| {
                let s = if cat[d] {
                    f64::from(a[d] != b[d])
                } else {
                    (a[d] - b[d]).powi(2)
                };
                s * p.inverse_squared_lengthscales[d]
            })
            .sum();
        p.kernel_scale * matern52(d2)
    };
    let n = x.len();
    let c: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| k(&x[i], &x[j]) + if i == j { p.noise_var } else { 0.0 })
                .collect()
        })
        .collect();
    let kq: Vec<f64> = x.iter().map(|xi| k(q, xi)).collect();
    let alpha = solve(c.clone(), y.to_vec());
    let v = solve(c, kq.clone());
    let mean = kq.iter().zip(&alpha).map(|(a, b)| a * b).sum();
    let var = p.kernel_scale - kq.iter().zip(&v).map(|(a, b)| a * b).sum::<f64>();
    (mean, var.max(0.0))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn posterior_matches_direct_reference(
        n in 1usize..8,
        seed in 0u64..1000,
        cat1 in any::<bool>(),
        scale in 0.1f64..3.0,
        noise in 1e-6f64..0.5,
        t0 in 0.05f64..20.0,
        t1 in 0.05f64..20.0,
    ) {
        let mut r = hpo_sampler::internals::Rng::seed_from(seed);
        let cat = vec![false, cat1];
        let point = |r: &mut hpo_sampler::internals::Rng| {
            vec![r.next_f64(), if cat1 { r.below(3) as f64 } else { r.next_f64() }]
        };
        let x: Vec<Vec<f64>> = (0..n).map(|_| point(&mut r)).collect();
        let y: Vec<f64> = (0..n).map(|_| r.uniform(-2.0, 2.0)).collect();
        let p = KernelParams { inverse_squared_lengthscales: vec![t0, t1], kernel_scale: scale, noise_var: noise };
        let gp = GpRegressor::new(x.concat(), y.clone(), cat.clone(), p.clone()).unwrap();
        for _ in 0..4 {
            let q = point(&mut r);
            let (m, v) = gp.posterior(&q);
            let (rm, rv) = reference_posterior(&x, &y, &cat, &p, &q);
            prop_assert!((m - rm).abs() <= 1e-7 * (1.0 + rm.abs()), "mean {m} vs {rm}");
            prop_assert!((v - rv).abs() <= 1e-7 * (1.0 + scale), "var {v} vs {rv}");
            let batch = gp.posterior_batch(std::slice::from_ref(&q))[0];
            prop_assert!((batch.0 - m).abs() <= 1e-9 * (1.0 + m.abs()) && (batch.1 - v).abs() <= 1e-9);
        }
    }
}

fn s(v: &str) -> ParamValue {
    ParamValue::Str(v.into())
}

fn mixed_space() -> BTreeMap<String, Distribution> {
    BTreeMap::from([
        (
            "a".into(),
            Distribution::float(-3.0, 2.0, false, None).unwrap(),
        ),
        (
            "b".into(),
            Distribution::float(1e-4, 10.0, true, None).unwrap(),
        ),
        (
            "c".into(),
            Distribution::float(0.0, 1.0, false, Some(0.15)).unwrap(),
        ),
        ("d".into(), Distribution::int(-7, 40, false, 3).unwrap()),
        ("e".into(), Distribution::int(1, 1000, true, 1).unwrap()),
        (
            "f".into(),
            Distribution::categorical(vec![s("x"), s("y"), s("z")]).unwrap(),
        ),
    ])
}

fn run_study(
    sampler: &mut GpSampler,
    n: usize,
    f: impl Fn(&BTreeMap<String, hpo_sampler::Param>) -> f64,
) -> Vec<FrozenTrial> {
    run_study_on(&mixed_space(), sampler, n, f)
}

/// `n` trials of `sampler` on `space`, each sample checked to lie in its
/// distribution, the objective `f` told.
fn run_study_on(
    space: &BTreeMap<String, Distribution>,
    sampler: &mut GpSampler,
    n: usize,
    f: impl Fn(&BTreeMap<String, hpo_sampler::Param>) -> f64,
) -> Vec<FrozenTrial> {
    let mut trials: Vec<FrozenTrial> = Vec::new();
    for number in 0..n as u64 {
        let study = StudyView {
            name: "s",
            direction: StudyDirection::Minimize,
            directions: &[],
            trials: &trials,
        };
        let params = ask(sampler, study, number, space).unwrap();
        for (k, p) in &params {
            assert!(
                space[k].contains(p.internal),
                "{k} = {} outside {}",
                p.internal,
                space[k]
            );
        }
        let mut t = FrozenTrial::new(number);
        t.values = Some(vec![f(&params)]);
        t.params = params;
        t.state = TrialState::Complete;
        trials.push(t);
    }
    trials
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn every_sample_lies_in_its_distribution(seed in 0u64..10_000, deterministic in any::<bool>()) {
        let mut sampler = GpSampler::new(GpConfig {
            seed: Some(seed),
            n_startup_trials: 4,
            deterministic_objective: deterministic,
            n_preliminary_samples: 256,
            ..GpConfig::default()
        });
        run_study(&mut sampler, 14, |p| {
            let v = |k: &str| p[k].internal;
            (v("a") - 0.3).powi(2) + v("b").ln().abs() + v("c") + (v("d") - 5.0).abs() / 10.0
                + v("e").ln() / 5.0 + v("f")
        });
    }
}

#[test]
fn fitted_hyperparameters_match_optuna() {
    let text = include_str!("fixtures/gp/optuna_fit.json");
    let fixture: serde_json::Value = serde_json::from_str(text).unwrap();
    let floats = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    for case in fixture["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let x: Vec<f64> = case["x"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(floats)
            .collect();
        let y = floats(&case["y"]);
        let cat: Vec<bool> = case["categorical"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        let deterministic = case["deterministic"].as_bool().unwrap();
        // The fixtures are Optuna's fits, at Optuna's noise floor.
        let noise = Noise {
            minimum: OPTUNA_MINIMUM_NOISE,
            fixed: deterministic,
        };
        let gp = fit_gp(x, y, cat, None, noise).expect("finite inputs fit");
        let theirs = floats(&case["inverse_squared_lengthscales"]);
        // Both stop at a projected gradient of 1e-2 in log space, so the
        // fits agree to a few percent in log space, not to the last digit.
        for (a, b) in gp.params.inverse_squared_lengthscales.iter().zip(&theirs) {
            assert!(
                (a.ln() - b.ln()).abs() < 0.15,
                "{name}: isl {a} vs Optuna's {b}"
            );
        }
        let ks = case["kernel_scale"].as_f64().unwrap();
        assert!(
            (gp.params.kernel_scale.ln() - ks.ln()).abs() < 0.15,
            "{name}: scale {} vs {ks}",
            gp.params.kernel_scale
        );
        let nv = case["noise_var"].as_f64().unwrap();
        assert!(
            (gp.params.noise_var.ln() - nv.ln()).abs() < 0.5,
            "{name}: noise {} vs {nv}",
            gp.params.noise_var
        );
        for ((q, m), v) in case["queries"]
            .as_array()
            .unwrap()
            .iter()
            .zip(floats(&case["mean"]))
            .zip(floats(&case["var"]))
        {
            let (om, ov) = gp.posterior(&floats(q));
            assert!(
                (om - m).abs() < 0.05 * (1.0 + m.abs()),
                "{name}: mean {om} vs {m}"
            );
            assert!((ov - v).abs() < 0.05 * (0.1 + v), "{name}: var {ov} vs {v}");
        }
    }
}

/// Two workers: the second asks while the first's trial is RUNNING. With
/// the kriging believer the second lands away from the first.
#[test]
fn running_trials_push_concurrent_asks_apart() {
    let space = BTreeMap::from([
        (
            "x".to_string(),
            Distribution::float(0.0, 1.0, false, None).unwrap(),
        ),
        (
            "y".to_string(),
            Distribution::float(0.0, 1.0, false, None).unwrap(),
        ),
    ]);
    let mut apart = [0.0; 2];
    for (slot, believer) in [false, true].into_iter().enumerate() {
        for seed in 0..8 {
            let config = GpConfig {
                seed: Some(seed),
                kriging_believer: believer,
                ..GpConfig::default()
            };
            let mut trials: Vec<FrozenTrial> = Vec::new();
            let mut r = hpo_sampler::internals::Rng::seed_from(seed + 100);
            for number in 0..12u64 {
                let (x, y) = (r.next_f64(), r.next_f64());
                let mut t = FrozenTrial::new(number);
                t.params = BTreeMap::from([
                    (
                        "x".to_string(),
                        hpo_sampler::Param {
                            distribution: space["x"].clone(),
                            internal: x,
                        },
                    ),
                    (
                        "y".to_string(),
                        hpo_sampler::Param {
                            distribution: space["y"].clone(),
                            internal: y,
                        },
                    ),
                ]);
                t.values = Some(vec![(x - 0.3).powi(2) + (y - 0.7).powi(2)]);
                t.state = TrialState::Complete;
                trials.push(t);
            }
            let first = ask(
                &mut GpSampler::new(config.clone()),
                StudyView {
                    name: "s",
                    direction: StudyDirection::Minimize,
                    directions: &[],
                    trials: &trials,
                },
                12,
                &space,
            )
            .unwrap();
            let mut running = FrozenTrial::new(12);
            running.params = first.clone();
            trials.push(running);
            let second = ask(
                &mut GpSampler::new(config),
                StudyView {
                    name: "s",
                    direction: StudyDirection::Minimize,
                    directions: &[],
                    trials: &trials,
                },
                13,
                &space,
            )
            .unwrap();
            let d = ((first["x"].internal - second["x"].internal).powi(2)
                + (first["y"].internal - second["y"].internal).powi(2))
            .sqrt();
            apart[slot] += d / 8.0;
        }
    }
    assert!(
        apart[1] > 2.0 * apart[0] && apart[1] > 0.01,
        "mean distance without {} / with {} the believer",
        apart[0],
        apart[1]
    );
}

/// Two objectives, `(x^2 + y^2, (x - 2)^2 + y^2)` over `[-5, 5]^2`
/// (front: `y = 0`, `x` in `[0, 2]`), minimised for `n` trials; the
/// hypervolume of the losses below `(10, 10)`.
fn two_objective_hypervolume(sampler: &mut dyn hpo_sampler::Sampler, n: u64) -> f64 {
    let space: BTreeMap<String, Distribution> = ["x", "y"]
        .into_iter()
        .map(|k| {
            (
                k.to_string(),
                Distribution::float(-5.0, 5.0, false, None).unwrap(),
            )
        })
        .collect();
    let directions = [StudyDirection::Minimize, StudyDirection::Minimize];
    let mut trials: Vec<FrozenTrial> = Vec::new();
    for number in 0..n {
        let study = StudyView::with_directions("s", &directions, &trials);
        let params = ask(sampler, study, number, &space).unwrap();
        let (x, y) = (params["x"].internal, params["y"].internal);
        let mut t = FrozenTrial::new(number);
        t.values = Some(vec![x * x + y * y, (x - 2.0) * (x - 2.0) + y * y]);
        t.params = params;
        t.state = TrialState::Complete;
        trials.push(t);
    }
    let losses: Vec<Vec<f64>> = trials.iter().filter_map(|t| t.values.clone()).collect();
    hpo_sampler::multi::hypervolume(&losses, &[10.0, 10.0])
}

/// Both ways of sampling two objectives (ParEGO and expected hypervolume
/// improvement) come far closer to the front's hypervolume (97.33)
/// than random sampling of as many trials, on the same seeds.
#[test]
fn two_objectives_approach_the_front() {
    for seed in 0..3 {
        let random =
            two_objective_hypervolume(&mut hpo_sampler::RandomSampler::new(Some(seed)), 30);
        for hypervolume_improvement in [false, true] {
            let mut gp = GpSampler::new(GpConfig {
                seed: Some(seed),
                hypervolume_improvement,
                ..GpConfig::default()
            });
            let hv = two_objective_hypervolume(&mut gp, 30);
            assert!(
                hv > 95.5 && hv > random + 3.0,
                "seed {seed}, hypervolume improvement {hypervolume_improvement}: {hv} (random {random})"
            );
        }
    }
}

/// Integer ranges as wide as an i64 (plain, stepped and log; beyond 2^53
/// each value is the float that holds it) are searched without listing
/// every value: each ask returns a value in range, on the grid.
#[test]
fn the_widest_integer_ranges_are_searched() {
    let limit = 1i64 << 53;
    let space: BTreeMap<String, Distribution> = [
        ("plain", Distribution::int(0, limit, false, 1)),
        ("stepped", Distribution::int(-limit, limit, false, 2)),
        ("log", Distribution::int(1, limit, true, 1)),
        ("i64", Distribution::int(i64::MIN, i64::MAX, false, 1)),
        (
            "i64_thirds",
            Distribution::int(i64::MIN, i64::MAX, false, 3),
        ),
        ("i64_log", Distribution::int(1, i64::MAX, true, 1)),
    ]
    .into_iter()
    .map(|(k, d)| (k.to_string(), d.unwrap()))
    .collect();
    let mut sampler = GpSampler::new(GpConfig {
        seed: Some(3),
        n_startup_trials: 2,
        n_preliminary_samples: 64,
        ..GpConfig::default()
    });
    run_study_on(&space, &mut sampler, 5, |p| {
        (p["plain"].internal / limit as f64 - 0.3).abs()
    });
}

/// Named constraints (`Trial.set_constraint`) are matched by name: a trial
/// that set only `b` of {a, b} asks as if it had set `a` to 0 (a missing
/// constraint counts as 0), whichever of the two it lacks.
#[test]
fn a_missing_named_constraint_counts_as_zero() {
    use hpo_sampler::{NAMED_CONSTRAINT_PREFIX, Param};
    let x = Distribution::float(0.0, 1.0, false, None).unwrap();
    // Feasible for 0.2 <= x <= 0.6; trial 3 lacks `missing`, or has it at 0.
    let history = |missing: &str, zero: bool| -> Vec<FrozenTrial> {
        (0..14u64)
            .map(|i| {
                let v = ((i * 37) % 14) as f64 / 14.0 + 0.02;
                let mut t = FrozenTrial::new(i);
                t.state = TrialState::Complete;
                t.values = Some(vec![(v - 0.3).powi(2)]);
                let param = Param {
                    distribution: x.clone(),
                    internal: v,
                };
                t.params.insert("x".into(), param);
                for (name, c) in [("a", v - 0.6), ("b", 0.2 - v)] {
                    let c = match (i == 3 && name == missing, zero) {
                        (false, _) => c,
                        (true, true) => 0.0,
                        (true, false) => continue,
                    };
                    let key = format!("{NAMED_CONSTRAINT_PREFIX}{name}");
                    t.system_attrs.insert(key, serde_json::json!(c));
                }
                t
            })
            .collect()
    };
    let space = BTreeMap::from([("x".to_string(), x.clone())]);
    let sample = |trials: &[FrozenTrial]| -> f64 {
        let mut sampler = GpSampler::new(GpConfig {
            seed: Some(5),
            n_preliminary_samples: 256,
            ..GpConfig::default()
        });
        let view = StudyView::new("s", StudyDirection::Minimize, trials);
        ask(&mut sampler, view, 14, &space).unwrap()["x"].internal
    };
    for missing in ["a", "b"] {
        assert_eq!(
            sample(&history(missing, false)),
            sample(&history(missing, true)),
            "missing {missing}"
        );
    }
}

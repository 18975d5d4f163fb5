//! Sampler behaviour on whole studies: values always inside their
//! distributions (property test), determinism, conditional spaces, and a
//! small-budget check that TPE beats random.

use hpo_sampler::{
    Distribution, FrozenTrial, Param, ParamValue, RandomSampler, Sampler, SearchSpace,
    StudyDirection, StudyView, TpeConfig, TpeSampler, Trial, TrialState, ask,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn distribution() -> impl Strategy<Value = Distribution> {
    prop_oneof![
        (-100.0f64..100.0, 0.0f64..50.0).prop_map(|(low, w)| Distribution::float(
            low,
            low + w,
            false,
            None
        )
        .unwrap()),
        (1e-6f64..10.0, 1.0f64..1e4).prop_map(|(low, f)| Distribution::float(
            low,
            low * f,
            true,
            None
        )
        .unwrap()),
        (-10.0f64..10.0, 0.0f64..20.0, 0.01f64..3.0).prop_map(|(low, w, s)| Distribution::float(
            low,
            low + w,
            false,
            Some(s)
        )
        .unwrap()),
        (-50i64..50, 0i64..100, 1i64..7).prop_map(|(low, w, s)| Distribution::int(
            low,
            low + w,
            false,
            s
        )
        .unwrap()),
        (1i64..100, 0i64..5000)
            .prop_map(|(low, w)| Distribution::int(low, low + w, true, 1).unwrap()),
        (1usize..5).prop_map(|n| {
            let choices = (0..n)
                .map(|i| match i % 4 {
                    0 => ParamValue::Str(format!("c{i}")),
                    1 => ParamValue::Int(i as i64),
                    2 => ParamValue::Bool(true),
                    _ => ParamValue::None,
                })
                .collect();
            Distribution::categorical(choices).unwrap()
        }),
    ]
}

fn state() -> impl Strategy<Value = TrialState> {
    prop_oneof![
        6 => Just(TrialState::Complete),
        2 => Just(TrialState::Pruned),
        1 => Just(TrialState::Running),
        1 => Just(TrialState::Fail),
    ]
}

/// A history over `space` where each trial has a random subset of the
/// parameters (so conditional spaces occur), a state, a value, maybe a
/// constraint violation and a learning curve.
fn history(space: SearchSpace) -> impl Strategy<Value = (SearchSpace, Vec<FrozenTrial>)> {
    let n_params = space.len();
    proptest::collection::vec(
        (
            state(),
            -10.0f64..10.0,
            proptest::collection::vec(any::<bool>(), n_params),
            any::<u64>(),
            0.0f64..2.0,
            0usize..4,
        ),
        0..40,
    )
    .prop_map(move |rows| {
        let mut rs = RandomSampler::new(Some(7));
        let trials = rows
            .into_iter()
            .enumerate()
            .map(|(i, (state, value, present, _, violation, n_steps))| {
                let mut t = FrozenTrial::new(i as u64);
                t.state = state;
                for ((name, d), keep) in space.iter().zip(&present) {
                    if *keep || i % 3 == 0 {
                        t.params.insert(
                            name.clone(),
                            Param {
                                distribution: d.clone(),
                                internal: rs.draw(d),
                            },
                        );
                    }
                }
                if state == TrialState::Complete {
                    t.values = Some(vec![value]);
                }
                if i % 5 == 0 {
                    t.system_attrs.insert(
                        hpo_sampler::CONSTRAINTS_KEY.into(),
                        serde_json::json!([violation - 1.0]),
                    );
                }
                for s in 0..n_steps {
                    t.intermediate_values.insert(s as i64, value + s as f64);
                }
                t
            })
            .collect();
        (space.clone(), trials)
    })
}

fn space_and_history() -> impl Strategy<Value = (SearchSpace, Vec<FrozenTrial>)> {
    proptest::collection::btree_map("[a-e]", distribution(), 1..5).prop_flat_map(history)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn sampled_values_lie_in_their_distribution(
        (space, trials) in space_and_history(),
        seed in any::<u64>(),
        group in any::<bool>(),
        startup in 0usize..4,
        maximize in any::<bool>(),
    ) {
        let mut tpe = TpeSampler::new(TpeConfig {
            seed: Some(seed),
            n_startup_trials: startup,
            group,
            n_ei_candidates: 8,
            ..TpeConfig::default()
        });
        let study = StudyView {
            name: "prop",
            direction: if maximize { StudyDirection::Maximize } else { StudyDirection::Minimize },
            directions: &[],
            trials: &trials,
        };
        let params = ask(&mut tpe, study, trials.len() as u64, &space).unwrap();
        prop_assert_eq!(params.len(), space.len());
        for (name, p) in &params {
            let d = &space[name];
            prop_assert!(d.contains(p.internal), "{} = {} not in {}", name, p.internal, d);
            // The external value converts back to the same internal one.
            let back = d.to_internal(&p.value()).unwrap();
            prop_assert!(d.contains(back), "{} external {} not in {}", name, p.value(), d);
        }
    }
}

type Objective = fn(&mut Trial<'_, dyn Sampler>) -> hpo_sampler::Result<f64>;

fn optimise(
    sampler: &mut (dyn Sampler + 'static),
    objective: Objective,
    n: u64,
) -> Vec<FrozenTrial> {
    let mut trials = Vec::new();
    for number in 0..n {
        let study = StudyView {
            name: "t",
            direction: StudyDirection::Minimize,
            directions: &[],
            trials: &trials,
        };
        let mut trial = Trial::new(&mut *sampler, study, number);
        let value = objective(&mut trial).unwrap();
        let mut t = FrozenTrial::new(number);
        t.params = trial.into_params();
        t.state = TrialState::Complete;
        t.values = Some(vec![value]);
        trials.push(t);
    }
    trials
}

fn best(trials: &[FrozenTrial]) -> f64 {
    trials
        .iter()
        .filter_map(FrozenTrial::value)
        .fold(f64::INFINITY, f64::min)
}

fn sphere(t: &mut Trial<'_, dyn Sampler>) -> hpo_sampler::Result<f64> {
    let x = t.suggest_float("x", -5.0, 5.0)?;
    let y = t.suggest_float_with("y", 1e-3, 1e3, true, None)?;
    let n = t.suggest_int("n", -10, 10)?;
    Ok((x - 1.0).powi(2) + (y.log10() - 1.0).powi(2) + ((n - 3) as f64).powi(2) / 10.0)
}

/// A conditional space: the branch decides which parameters exist.
fn conditional(t: &mut Trial<'_, dyn Sampler>) -> hpo_sampler::Result<f64> {
    let choices = [ParamValue::Str("a".into()), ParamValue::Str("b".into())];
    let branch = t.suggest_categorical("branch", &choices)?;
    if branch == choices[0] {
        let x = t.suggest_float("xa", 0.0, 1.0)?;
        Ok((x - 0.3).powi(2))
    } else {
        let k = t.suggest_int_with("kb", 0, 100, false, 5)?;
        Ok(1.0 + (k as f64 - 50.0).abs() / 50.0)
    }
}

#[test]
fn tpe_beats_random_on_a_small_budget() {
    let (mut tpe_total, mut random_total) = (0.0, 0.0);
    for seed in 0..5 {
        tpe_total += best(&optimise(&mut TpeSampler::with_seed(seed), sphere, 40));
        random_total += best(&optimise(&mut RandomSampler::new(Some(seed)), sphere, 40));
    }
    assert!(
        tpe_total < random_total,
        "TPE {tpe_total} vs random {random_total}"
    );
}

#[test]
fn a_seed_fixes_the_whole_study() {
    let a = optimise(&mut TpeSampler::with_seed(3), sphere, 25);
    let b = optimise(&mut TpeSampler::with_seed(3), sphere, 25);
    let c = optimise(&mut TpeSampler::with_seed(4), sphere, 25);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn conditional_spaces_work_with_and_without_groups() {
    for group in [false, true] {
        let mut tpe = TpeSampler::new(TpeConfig {
            seed: Some(1),
            group,
            ..TpeConfig::default()
        });
        let trials = optimise(&mut tpe, conditional, 40);
        for t in &trials {
            let has_a = t.params.contains_key("xa");
            let has_b = t.params.contains_key("kb");
            assert!(
                has_a != has_b,
                "exactly one branch's parameter: {:?}",
                t.params
            );
        }
        // The good branch ("a", best 0) is found and exploited.
        let late_a = trials[20..]
            .iter()
            .filter(|t| t.params.contains_key("xa"))
            .count();
        assert!(
            late_a > 10,
            "group={group}: branch a chosen {late_a}/20 times late"
        );
        assert!(
            best(&trials) < 0.01,
            "group={group}: best {}",
            best(&trials)
        );
    }
}

#[test]
fn suggesting_twice_returns_the_same_value_or_a_clear_error() {
    let trials = Vec::new();
    let mut rs = RandomSampler::new(Some(0));
    let study = StudyView {
        name: "t",
        direction: StudyDirection::Minimize,
        directions: &[],
        trials: &trials,
    };
    let mut trial = Trial::new(&mut rs, study, 0);
    let x = trial.suggest_float("x", 0.0, 1.0).unwrap();
    assert_eq!(trial.suggest_float("x", 0.0, 1.0).unwrap(), x);
    let err = trial.suggest_int("x", 0, 3).unwrap_err();
    assert!(err.to_string().contains("'x'"), "{err}");
    let err = trial.suggest_float("bad", 2.0, 1.0).unwrap_err();
    assert!(err.to_string().contains("'bad'"), "{err}");
    let _ = BTreeMap::<String, f64>::new();
}

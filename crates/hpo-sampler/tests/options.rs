//! A sampler built by a library user with options out of range, or with a
//! user function that returns unusable values, answers every ask with an
//! error naming the option: never a panic, a hang or a silent NaN.

use hpo_sampler::study::space_of;
use hpo_sampler::{
    AutoConfig, AutoSampler, Distribution, Error, GpConfig, GpSampler, NopPruner, NsgaIIConfig,
    NsgaIISampler, Sampler, Study, StudyDirection, TpeConfig, TpeSampler, TrialState,
};

/// Asks and tells `n` trials of `x` in `distribution` (value `x^2`), and
/// returns the first ask's error.
fn first_error<S: Sampler>(sampler: S, distribution: Distribution, n: usize) -> Option<Error> {
    let mut study = Study::new("s", StudyDirection::Minimize, sampler, NopPruner).unwrap();
    let space = space_of("x", distribution);
    for _ in 0..n {
        let trial = match study.ask(&space) {
            Ok(trial) => trial,
            Err(e) => return Some(e),
        };
        let x = study.param(trial, "x").unwrap().as_f64().unwrap();
        study
            .tell(trial, TrialState::Complete, Some(x * x))
            .unwrap();
    }
    None
}

fn float() -> Distribution {
    Distribution::float(-1.0, 1.0, false, None).unwrap()
}

fn names(e: Option<Error>, option: &str) {
    match e {
        Some(Error::InvalidOption { option: o, reason }) => {
            assert_eq!(o, option, "{reason}")
        }
        other => panic!("expected an error naming {option}, got {other:?}"),
    }
}

#[test]
fn tpe_options_out_of_range_are_errors() {
    let optuna = TpeConfig {
        seed: Some(1),
        ..TpeConfig::optuna()
    };
    for (config, option) in [
        (
            TpeConfig {
                n_ei_candidates: usize::MAX,
                ..optuna.clone()
            },
            "n_ei_candidates",
        ),
        (
            TpeConfig {
                n_ei_candidates: TpeConfig::MAX_EI_CANDIDATES + 1,
                ..TpeConfig::default()
            },
            "n_ei_candidates",
        ),
        (
            TpeConfig {
                prior_weight: f64::NAN,
                ..optuna.clone()
            },
            "prior_weight",
        ),
        (
            TpeConfig {
                prior_weight: 0.0,
                ..optuna.clone()
            },
            "prior_weight",
        ),
        (
            TpeConfig {
                prior_weight: -1.0,
                ..optuna.clone()
            },
            "prior_weight",
        ),
        (
            TpeConfig {
                group: true,
                multivariate: false,
                ..optuna.clone()
            },
            "group",
        ),
    ] {
        assert!(config.check().is_err(), "{option}");
        names(first_error(TpeSampler::new(config), float(), 15), option);
    }
    // A rule of its own (continuous spaces) is held to the same bound.
    let mut config = TpeConfig::default();
    config.continuous.as_mut().unwrap().n_ei_candidates = usize::MAX;
    names(
        first_error(TpeSampler::new(config), float(), 15),
        "continuous.n_ei_candidates",
    );
    assert!(TpeConfig::default().check().is_ok());
    assert!(first_error(TpeSampler::new(optuna), float(), 15).is_none());
}

fn negative(n: usize) -> Vec<f64> {
    vec![-1.0; n]
}

fn nan(n: usize) -> Vec<f64> {
    vec![f64::NAN; n]
}

fn zeros(n: usize) -> Vec<f64> {
    vec![0.0; n]
}

fn too_few(n: usize) -> Vec<f64> {
    vec![1.0; n / 2]
}

fn too_many(n: usize) -> Vec<f64> {
    vec![1.0; n + 3]
}

/// As Optuna's `_call_weights_func`, checked at each call: the asks after
/// the startup trials are errors naming `weights`.
#[test]
fn unusable_weights_are_an_error_at_use() {
    for weights in [negative, nan, zeros, too_few] {
        let config = TpeConfig {
            weights,
            seed: Some(2),
            ..TpeConfig::optuna()
        };
        // The function is only called once there are observations.
        assert!(config.check().is_ok());
        names(first_error(TpeSampler::new(config), float(), 15), "weights");
    }
    // More values than observations are cut, as Optuna does.
    let config = TpeConfig {
        weights: too_many,
        seed: Some(2),
        ..TpeConfig::optuna()
    };
    assert!(first_error(TpeSampler::new(config), float(), 15).is_none());
}

#[test]
fn gp_options_out_of_range_are_errors() {
    let int = Distribution::int(0, 3, false, 1).unwrap();
    for (config, option) in [
        // With a deterministic objective the noise is fixed there: an int
        // space's repeated values made the covariance singular forever.
        (
            GpConfig {
                minimum_noise: 0.0,
                deterministic_objective: true,
                ..GpConfig::default()
            },
            "minimum_noise",
        ),
        (
            GpConfig {
                minimum_noise: f64::NAN,
                ..GpConfig::default()
            },
            "minimum_noise",
        ),
        (
            GpConfig {
                minimum_noise: f64::INFINITY,
                ..GpConfig::default()
            },
            "minimum_noise",
        ),
        (
            GpConfig {
                n_preliminary_samples: usize::MAX,
                ..GpConfig::default()
            },
            "n_preliminary_samples",
        ),
        (
            GpConfig {
                tol: f64::NAN,
                ..GpConfig::default()
            },
            "tol",
        ),
    ] {
        let config = GpConfig {
            seed: Some(3),
            n_startup_trials: 3,
            ..config
        };
        assert!(config.check().is_err(), "{option}");
        names(
            first_error(GpSampler::new(config.clone()), int.clone(), 6),
            option,
        );
        let auto = AutoSampler::new(AutoConfig::default(), config, TpeConfig::default());
        names(first_error(auto, int.clone(), 6), option);
    }
    assert!(GpConfig::default().check().is_ok());
}

#[test]
fn nsga2_probabilities_outside_0_1_are_errors() {
    for (config, option) in [
        (
            NsgaIIConfig {
                crossover_prob: f64::NAN,
                ..NsgaIIConfig::default()
            },
            "crossover_prob",
        ),
        (
            NsgaIIConfig {
                swapping_prob: 1.5,
                ..NsgaIIConfig::default()
            },
            "swapping_prob",
        ),
        (
            NsgaIIConfig {
                mutation_prob: Some(-0.1),
                ..NsgaIIConfig::default()
            },
            "mutation_prob",
        ),
    ] {
        let config = NsgaIIConfig {
            population_size: 4,
            seed: Some(4),
            ..config
        };
        names(NsgaIISampler::try_new(config.clone()).err(), option);
        names(first_error(NsgaIISampler::new(config), float(), 12), option);
    }
    assert!(NsgaIIConfig::default().check().is_ok());
}

/// Called directly, past the asks' checks, a misconfigured sampler draws
/// at random rather than panic, and says why through `check`.
#[test]
fn a_misconfigured_sampler_called_directly_draws_at_random() {
    use hpo_sampler::StudyView;
    let mut study = Study::new(
        "s",
        StudyDirection::Minimize,
        TpeSampler::with_seed(5),
        NopPruner,
    )
    .unwrap();
    let space = space_of("x", float());
    for _ in 0..15 {
        let trial = study.ask(&space).unwrap();
        let x = study.param(trial, "x").unwrap().as_f64().unwrap();
        study.tell(trial, TrialState::Complete, Some(x)).unwrap();
    }
    let view = StudyView::new("s", StudyDirection::Minimize, study.trials());
    let tpe = TpeSampler::new(TpeConfig {
        n_ei_candidates: usize::MAX,
        ..TpeConfig::optuna()
    });
    let gp = GpSampler::new(GpConfig {
        n_preliminary_samples: usize::MAX,
        ..GpConfig::default()
    });
    let samplers: [Box<dyn Sampler>; 2] = [Box::new(tpe), Box::new(gp)];
    for mut sampler in samplers {
        assert!(sampler.check().is_err());
        let relative = sampler.infer_relative_search_space(&view, 15);
        assert!(sampler.sample_relative(&view, 15, &relative).is_empty());
        let x = sampler.sample_independent(&view, 15, "x", &float());
        assert!((-1.0..=1.0).contains(&x), "{x}");
    }
}

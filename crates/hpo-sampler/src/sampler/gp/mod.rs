//! Optuna 5.0's `GPSampler`: Gaussian-process Bayesian optimisation for
//! studies whose trials are expensive (20 to a few hundred trials).
//!
//! - **Inputs**: the intersection search space of the COMPLETE trials
//!   (single-valued distributions left out), normalised onto `[0, 1]`
//!   (log first where the distribution is log, widened by half a step for
//!   grids); categoricals as choice indices compared by equality.
//! - **Outputs**: the objective, sign-flipped to be maximised, infinities
//!   clipped to the finite range, standardised; on one objective then
//!   warped by a Yeo-Johnson power transform of maximum likelihood and
//!   standardised again ([`GpConfig::warp_objective`]).
//! - **Model**: Matérn-5/2 with one lengthscale per dimension, a kernel
//!   scale and a noise variance of at least [`GpConfig::minimum_noise`]
//!   (fixed there with [`GpConfig::deterministic_objective`]), fitted by
//!   maximising the marginal likelihood times Optuna's priors (Gamma(2, 1)
//!   on the scale, Gamma(1.1, 30) on the noise, `-(0.1/t + 0.1 t)` on each
//!   inverse squared lengthscale `t`), warm-started from the previous
//!   ask's fit.
//! - **Several objectives**: one GP of a random ParEGO scalarisation per
//!   ask (Knowles 2006: each objective normalised onto `[0, 1]` over the
//!   trials, an augmented Chebyshev sum under weights drawn from the
//!   simplex). On two objectives [`GpConfig::hypervolume_improvement`]
//!   instead fits one GP per objective and maximises the log expected
//!   hypervolume improvement over the front, Optuna's acquisition, computed
//!   exactly (`ehvi.rs`); it is not the default because it does worse
//!   here (docs/benchmarks.md): on ZDT1-3 its GP of the first objective
//!   is unsure in the unexplored corners of the box, so the improvement
//!   below the front's end outweighs the rest and it keeps asking at
//!   `x0 = 0` (Optuna's `GPSampler` stops on ZDT2's end point the same way).
//! - **Acquisition**: log expected improvement over the best value; with
//!   constraints ([`crate::FrozenTrial::constraints`], feasible when all
//!   `<= 0`), plus the log probability of feasibility from one GP per
//!   constraint, and the improvement counts over the best feasible value
//!   only. It is maximised by 2,048 quasi-random candidates, then local
//!   searches (L-BFGS on continuous coordinates, the grid of each discrete
//!   one) from the best candidate, 8 roulette-drawn ones and the best
//!   trial.
//! - **Startup, pruned, failed**: fewer than
//!   [`GpConfig::n_startup_trials`] COMPLETE trials: a Latin hypercube over
//!   the startup trials (each parameter's range cut into one stratum per
//!   startup trial, each trial drawing in a stratum the history has used
//!   least); a parameter outside the intersection space: uniform random
//!   sampling. PRUNED and FAILED trials
//!   do not enter the model, as in Optuna.
//! - **Running trials** (several workers asking at once): each RUNNING
//!   trial with the whole space is added to the GP at its posterior mean
//!   ("kriging believer", Ginsbourger et al. 2010), which shrinks the
//!   variance around it, so the next ask lands elsewhere. Optuna 5.0
//!   instead averages log EI over 128 quasi-random fantasies of the
//!   running trials (`qLogEI`); the believer needs one Cholesky instead.
//!   [`GpConfig::kriging_believer`] turns it off.
//!
//! # Numerics, and which crates
//!
//! Cholesky factorisation and triangular solves come from `nalgebra`
//! (pure Rust, maintained by dimforge, no BLAS or system library, fast
//! enough for the few hundred points a GP study has). The optimiser is a
//! small projected L-BFGS (`lbfgs.rs`) of our own: the maintained Rust
//! optimisation crates either lack bounds (argmin's L-BFGS is
//! unconstrained; the acquisition is maximised over a box) or wrap the
//! Fortran L-BFGS-B, which would need a Fortran toolchain.
//!
//! # Where we differ from Optuna 5.0
//!
//! - A randomly shifted Halton sequence instead of scrambled Sobol for
//!   the candidates; our own RNG, so seeds do not reproduce Optuna's numbers.
//! - Running trials by kriging believer instead of `qLogEI` (above).
//! - Startup trials from a Latin hypercube instead of independently
//!   uniform ([`GpConfig::latin_hypercube_startup`]): on Hartmann6 the
//!   best value after 20 trials improves clearly (docs/benchmarks.md),
//!   later ones are unchanged.
//! - Grids of more than 64 values are searched at 64 evenly spaced values
//!   plus the neighbours of the current one, instead of Brent's method on
//!   the interpolated acquisition.
//! - A trial missing a constraint (a list entry, or a named one other
//!   trials set) counts that constraint as 0 (feasible); Optuna raises.
//! - Two objectives by ParEGO (above) unless
//!   [`GpConfig::hypervolume_improvement`]; Optuna's hypervolume
//!   improvement by quasi-Monte Carlo, ours in closed form.
//! - On one objective the noise variance may fall to 1e-10 instead of
//!   1e-6 ([`GpConfig::minimum_noise`]): on COCO's bbob at 10 and 20
//!   evaluations per dimension the median best `f - f_opt` is 0.76x (the
//!   geometric mean over cells) and on bbob-mixint 0.32x
//!   (docs/benchmarks.md).
//! - The objective is warped (HEBO's output transform) before the fit
//!   ([`GpConfig::warp_objective`]): on COCO's bbob at 10 and 20
//!   evaluations per dimension the median best `f - f_opt` is smaller in
//!   about two cells of three than without it (docs/benchmarks.md).

mod acquisition;
pub(crate) mod auto;
mod ehvi;
mod lbfgs;
mod optimize;
pub(crate) mod regressor;
pub(crate) mod space;
mod startup;
mod warp;

use super::Sampler;
use super::random::sample_uniform;
use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::trial::{FrozenTrial, SearchSpace, StudyDirection, StudyView, TrialState};
use acquisition::Acquisition;
pub use auto::{AutoConfig, AutoPick, AutoSampler};
pub use regressor::{GpRegressor, KernelParams};
use space::Dim;
use std::collections::BTreeMap;

/// [`GpSampler`]'s options; [`Default`] is Optuna 5.0's `GPSampler()`,
/// but for the Latin-hypercube startup, the warped objective, the
/// smaller noise floor and ParEGO on several objectives.
#[derive(Debug, Clone)]
pub struct GpConfig {
    /// Optuna's `seed`: the same seed and history give the same samples;
    /// `None` (the default): a different seed each run.
    pub seed: Option<u64>,
    /// COMPLETE trials sampled at random before the GP is used (10).
    pub n_startup_trials: usize,
    /// Draw the startup trials as a Latin hypercube (true; `false`:
    /// independently uniform, as Optuna).
    pub latin_hypercube_startup: bool,
    /// Fix the noise at [`GpConfig::minimum_noise`] instead of fitting it
    /// (false).
    pub deterministic_objective: bool,
    /// The smallest noise variance of the fit, on the standardised (and
    /// warped) objective of a single-objective study (1e-10; Optuna:
    /// 1e-6). A noise of 1e-6 is 0.001 of the objective's spread, more
    /// than what separates the good trials of a smooth objective after a
    /// few dozen: the GP then sees the region of the best trials as flat
    /// and keeps asking in it (on COCO's bbob-mixint it stopped on the
    /// same plateau of Rosenbrock in three of five runs). A noisy
    /// objective fits its noise far above either floor. The objectives'
    /// GPs under [`GpConfig::hypervolume_improvement`] take it too;
    /// constraints and ParEGO's scalarisation keep Optuna's floor (on
    /// ParEGO the smaller one moved nothing beyond what seeds move), unless
    /// this is larger. Positive and finite: at 0 a covariance of repeated
    /// points is singular.
    pub minimum_noise: f64,
    /// Quasi-random candidates scored before the local searches (2,048;
    /// at most [`GpConfig::MAX_PRELIMINARY_SAMPLES`]).
    pub n_preliminary_samples: usize,
    /// Local searches, the best candidate and the best trial included (10).
    pub n_local_search: usize,
    /// Tolerance of the local search (1e-4; L-BFGS stops at a projected
    /// gradient of `sqrt(tol)`; finite, not negative).
    pub tol: f64,
    /// Add RUNNING trials to the GP at its posterior mean (true).
    pub kriging_believer: bool,
    /// On two objectives, one GP per objective and the log expected
    /// hypervolume improvement over the front, as Optuna's `GPSampler`
    /// (false: one GP of a random ParEGO scalarisation per ask, as on
    /// three or more objectives; see the module documentation for why).
    pub hypervolume_improvement: bool,
    /// Warp the objective by a fitted Yeo-Johnson power transform before
    /// the GP sees it (true; one objective only: ParEGO's scalarisation is
    /// already on one normalised scale).
    pub warp_objective: bool,
}

impl Default for GpConfig {
    fn default() -> Self {
        GpConfig {
            seed: None,
            n_startup_trials: 10,
            latin_hypercube_startup: true,
            deterministic_objective: false,
            minimum_noise: 1e-10,
            n_preliminary_samples: 2048,
            n_local_search: 10,
            tol: 1e-4,
            kriging_believer: true,
            hypervolume_improvement: false,
            warp_objective: true,
        }
    }
}

impl GpConfig {
    /// The most quasi-random candidates an ask may score
    /// (`n_preliminary_samples`): each is a point of every parameter and
    /// its acquisition value, so a mistyped count would exhaust memory
    /// rather than search better.
    pub const MAX_PRELIMINARY_SAMPLES: usize = 1 << 20;

    /// Checks the options a sampler cannot use: a `minimum_noise` that is
    /// not positive and finite, `n_preliminary_samples` above
    /// [`GpConfig::MAX_PRELIMINARY_SAMPLES`], a negative or non-finite
    /// `tol`. The error names the option. A [`GpSampler`] built with such
    /// options returns this error from [`Sampler::check`], so from every
    /// ask, and draws at random.
    ///
    /// ```
    /// use hpo_sampler::GpConfig;
    /// assert!(GpConfig::default().check().is_ok());
    /// let bad = GpConfig { minimum_noise: 0.0, ..GpConfig::default() };
    /// assert!(bad.check().unwrap_err().to_string().contains("minimum_noise"));
    /// ```
    pub fn check(&self) -> crate::Result<()> {
        use crate::pruner::require;
        require(
            self.minimum_noise > 0.0 && self.minimum_noise.is_finite(),
            "minimum_noise",
            || format!("must be positive and finite, got {}", self.minimum_noise),
        )?;
        require(
            self.n_preliminary_samples <= Self::MAX_PRELIMINARY_SAMPLES,
            "n_preliminary_samples",
            || {
                format!(
                    "must be at most {}, got {}",
                    Self::MAX_PRELIMINARY_SAMPLES,
                    self.n_preliminary_samples
                )
            },
        )?;
        require(self.tol >= 0.0 && self.tol.is_finite(), "tol", || {
            format!("must be finite and not negative, got {}", self.tol)
        })
    }
}

/// Gaussian-process sampler (see the module documentation).
///
/// ```
/// use hpo_sampler::{GpConfig, GpSampler, StudyDirection, StudyView, Trial, FrozenTrial, TrialState};
///
/// let mut sampler = GpSampler::new(GpConfig { seed: Some(1), ..GpConfig::default() });
/// let mut trials: Vec<FrozenTrial> = Vec::new();
/// for number in 0..15u64 {
///     let study = StudyView::new("s", StudyDirection::Minimize, &trials);
///     let mut trial = Trial::new(&mut sampler, study, number);
///     let x = trial.suggest_float("x", -3.0, 3.0).unwrap();
///     let mut done = FrozenTrial::new(number);
///     done.params = trial.into_params();
///     done.state = TrialState::Complete;
///     done.values = Some(vec![(x - 1.0).powi(2)]);
///     trials.push(done);
/// }
/// ```
#[derive(Debug, Clone)]
pub struct GpSampler {
    config: GpConfig,
    rng: Rng,
    /// The last fit's hyperparameters (one per objective GP), the next
    /// fit's start.
    cache: Vec<KernelParams>,
    constraint_cache: Vec<KernelParams>,
    /// Its configuration's error ([`GpConfig::check`]).
    error: Option<crate::Error>,
}

/// ParEGO's augmented Chebyshev scalarisation of the COMPLETE trials'
/// losses, each objective normalised onto `[0, 1]` over them, under
/// weights drawn uniformly from the simplex: `max_k w_k f_k + 0.05 sum_k
/// w_k f_k` by trial number (smaller is better).
fn parego(study: &StudyView<'_>, rng: &mut Rng) -> std::collections::HashMap<u64, f64> {
    let directions = study.objectives();
    let losses: Vec<(u64, Vec<f64>)> = study
        .trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .filter_map(|t| crate::multi::loss_values(t, directions).map(|l| (t.number, l)))
        .filter(|(_, l)| l.iter().all(|v| v.is_finite()))
        .collect();
    let m = directions.len();
    let mut w: Vec<f64> = (0..m).map(|_| -(1.0 - rng.next_f64()).ln()).collect();
    let total: f64 = w.iter().sum();
    w.iter_mut().for_each(|x| *x /= total);
    let (mut lo, mut hi) = (vec![f64::INFINITY; m], vec![f64::NEG_INFINITY; m]);
    for (_, l) in &losses {
        for k in 0..m {
            lo[k] = lo[k].min(l[k]);
            hi[k] = hi[k].max(l[k]);
        }
    }
    losses
        .into_iter()
        .map(|(n, l)| {
            let f: Vec<f64> = (0..m)
                .map(|k| {
                    let span = hi[k] - lo[k];
                    if span > 0.0 {
                        w[k] * (l[k] - lo[k]) / span
                    } else {
                        0.0
                    }
                })
                .collect();
            let max = f.iter().copied().fold(0.0, f64::max);
            (n, max + 0.05 * f.iter().sum::<f64>())
        })
        .collect()
}

/// Values clipped into their finite range, standardised (population std).
fn standardize(values: &[f64]) -> (Vec<f64>, f64, f64) {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let (lo, hi) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let clipped: Vec<f64> = if finite.is_empty() {
        vec![0.0; values.len()]
    } else {
        values.iter().map(|v| v.clamp(lo, hi)).collect()
    };
    let n = clipped.len() as f64;
    let mean = clipped.iter().sum::<f64>() / n;
    let std = (clipped.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    let scale = std.max(1e-10);
    (
        clipped.iter().map(|v| (v - mean) / scale).collect(),
        mean,
        scale,
    )
}

/// What the acquisition rewards, from the objective GPs and their
/// standardised targets, and the warm start of its search: on one GP, log
/// EI over the best feasible target (the warm start its trial); on two,
/// log EHVI over the feasible front below Optuna's reference point (the
/// worst loss of each objective, 10% further out).
fn goal(
    gps: Vec<GpRegressor>,
    targets: &[Vec<f64>],
    feasible: &[bool],
    x: &[f64],
    dim: usize,
) -> (acquisition::Goal, Option<Vec<f64>>) {
    let feasible_rows = (0..feasible.len()).filter(|i| feasible[*i]);
    match <[GpRegressor; 2]>::try_from(gps) {
        Ok(gps) => {
            let front: Vec<[f64; 2]> = feasible_rows
                .map(|i| [targets[0][i], targets[1][i]])
                .collect();
            let reference = [0, 1].map(|k| {
                let worst = targets[k].iter().copied().fold(f64::MIN, f64::max);
                (1.1 * worst).max(0.9 * worst).next_up()
            });
            let strips = (!front.is_empty()).then(|| ehvi::Strips::new(&front, reference));
            (
                acquisition::Goal::Hypervolume {
                    gps: Box::new(gps),
                    strips,
                },
                None,
            )
        }
        Err(mut gps) => {
            let y = &targets[0];
            let best = feasible_rows.max_by(|a, b| y[*a].total_cmp(&y[*b]));
            let goal = acquisition::Goal::Improvement {
                gp: gps.remove(0),
                threshold: best.map(|i| y[i]),
            };
            (goal, best.map(|i| x[i * dim..(i + 1) * dim].to_vec()))
        }
    }
}

impl GpSampler {
    /// The sampler of `config`. Options out of range
    /// ([`GpConfig::check`]) do not panic: [`Sampler::check`] returns
    /// their error and the sampler draws at random.
    pub fn new(config: GpConfig) -> Self {
        GpSampler {
            error: config.check().err(),
            rng: config.seed.map_or_else(Rng::from_entropy, Rng::seed_from),
            config,
            cache: Vec::new(),
            constraint_cache: Vec::new(),
        }
    }

    /// The options it was built with.
    pub fn config(&self) -> &GpConfig {
        &self.config
    }

    /// The hyperparameters of the last fit (none before the first).
    pub fn last_fit(&self) -> Option<&KernelParams> {
        self.cache.first()
    }

    /// The noise model of a fit: the configured floor for an objective's
    /// own GP, Optuna's (or the configured, if larger) for ParEGO's
    /// scalarisation and for constraints.
    fn noise(&self, objective: bool) -> regressor::Noise {
        let minimum = if objective {
            self.config.minimum_noise
        } else {
            self.config
                .minimum_noise
                .max(regressor::OPTUNA_MINIMUM_NOISE)
        };
        regressor::Noise {
            minimum,
            fixed: self.config.deterministic_objective,
        }
    }

    /// One GP per column of `targets`, each fitted from its previous fit,
    /// with the RUNNING trials' rows added at its own posterior mean
    /// (kriging believer); `None` when one cannot be fitted.
    fn objective_gps(
        &mut self,
        x: &[f64],
        targets: &[Vec<f64>],
        categorical: &[bool],
        running: &[Vec<f64>],
        noise: regressor::Noise,
    ) -> Option<Vec<GpRegressor>> {
        if self.cache.len() != targets.len() {
            self.cache.clear();
        }
        let gps: Vec<GpRegressor> = targets
            .iter()
            .enumerate()
            .map(|(k, y)| {
                let start = self.cache.get(k);
                regressor::fit(x.to_vec(), y.clone(), categorical.to_vec(), start, noise)
            })
            .collect::<Option<_>>()?;
        self.cache = gps.iter().map(|gp| gp.params.clone()).collect();
        if !self.config.kriging_believer || running.is_empty() {
            return Some(gps);
        }
        let xs: Vec<f64> = running.concat();
        let gps = gps
            .into_iter()
            .map(|gp| {
                let fantasy: Vec<f64> = running.iter().map(|r| gp.posterior(r).0).collect();
                gp.with_fantasies(&xs, &fantasy).unwrap_or(gp)
            })
            .collect();
        Some(gps)
    }

    /// One GP per constraint, on the negated standardised values, with the
    /// standardised value of 0 above which the constraint holds; `None`
    /// when one cannot be fitted.
    fn constraint_gps(
        &mut self,
        x: &[f64],
        rows: &[Vec<f64>],
        categorical: &[bool],
    ) -> Option<Vec<(GpRegressor, f64)>> {
        let n_constraints = rows.first().map_or(0, Vec::len);
        if self.constraint_cache.len() != n_constraints {
            self.constraint_cache.clear();
        }
        let noise = self.noise(false);
        let gps: Vec<(GpRegressor, f64)> = (0..n_constraints)
            .map(|c| {
                let neg: Vec<f64> = rows.iter().map(|r| -r[c]).collect();
                let (y, mean, scale) = standardize(&neg);
                let start = self.constraint_cache.get(c);
                let gp = regressor::fit(x.to_vec(), y, categorical.to_vec(), start, noise)?;
                Some((gp, -mean / scale))
            })
            .collect::<Option<_>>()?;
        self.constraint_cache = gps.iter().map(|(gp, _)| gp.params.clone()).collect();
        Some(gps)
    }

    fn n_complete(study: &StudyView<'_>) -> usize {
        study
            .trials
            .iter()
            .filter(|t| t.state == TrialState::Complete)
            .count()
    }

    /// The normalised row of `t` over `space`, if it has every parameter
    /// with the same distribution.
    fn row(t: &FrozenTrial, space: &[(&String, &Distribution)], dims: &[Dim]) -> Option<Vec<f64>> {
        space
            .iter()
            .zip(dims)
            .map(|((name, dist), dim)| {
                let p = t.params.get(*name)?;
                let v = p
                    .internal_in_distribution()
                    .filter(|_| &p.distribution == *dist)?;
                Some(dim.normalize(v))
            })
            .collect()
    }
}

/// One row per trial, one column per constraint any of them set, matched
/// by name (a list entry's is its position); a trial that did not set one
/// counts it as 0, satisfied.
fn constraint_rows(trials: &[Vec<(String, f64)>]) -> Vec<Vec<f64>> {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in trials.iter().flatten() {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    let value = |t: &[(String, f64)], name: &str| {
        t.iter().find(|(n, _)| n == name).map_or(0.0, |(_, v)| *v)
    };
    trials
        .iter()
        .map(|t| names.iter().map(|name| value(t, name)).collect())
        .collect()
}

impl Sampler for GpSampler {
    fn check(&self) -> crate::Result<()> {
        self.error.clone().map_or(Ok(()), Err)
    }

    fn infer_relative_search_space(
        &mut self,
        study: &StudyView<'_>,
        _trial_number: u64,
    ) -> SearchSpace {
        crate::search_space::complete_intersection(study.trials)
            .into_iter()
            .filter(|(_, d)| !d.single())
            .collect()
    }

    fn sample_relative(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        space: &SearchSpace,
    ) -> BTreeMap<String, f64> {
        if self.error.is_some()
            || space.is_empty()
            || Self::n_complete(study) < self.config.n_startup_trials
        {
            return BTreeMap::new();
        }
        let space: Vec<(&String, &Distribution)> = space.iter().collect();
        let dims: Vec<Dim> = space.iter().map(|(_, d)| Dim::new(d)).collect();
        let categorical: Vec<bool> = dims.iter().map(Dim::is_categorical).collect();
        let sign = match study.direction {
            StudyDirection::Minimize | StudyDirection::NotSet => -1.0,
            StudyDirection::Maximize => 1.0,
        };
        // Several objectives: on two, a GP per objective (hypervolume
        // improvement); on more, one random scalarisation per ask (ParEGO),
        // minimised.
        let directions = study.objectives();
        let hypervolume = directions.len() == 2 && self.config.hypervolume_improvement;
        let scalarised =
            (study.is_multi_objective() && !hypervolume).then(|| parego(study, &mut self.rng));
        let sign = if scalarised.is_some() { -1.0 } else { sign };
        let mut x = Vec::new();
        // Per COMPLETE trial: the value to maximise (one objective, ParEGO)
        // or the two losses (hypervolume).
        let mut values: Vec<Vec<f64>> = Vec::new();
        let mut trial_constraints: Vec<Vec<(String, f64)>> = Vec::new();
        let mut running = Vec::new();
        for t in study.trials {
            match t.state {
                TrialState::Complete => {
                    let v = if hypervolume {
                        crate::multi::loss_values(t, directions)
                            .filter(|l| l.iter().all(|v| v.is_finite()))
                    } else {
                        match &scalarised {
                            Some(by_number) => by_number.get(&t.number).copied(),
                            None => t.value(),
                        }
                        .map(|v| vec![sign * v])
                    };
                    let (Some(row), Some(v)) = (Self::row(t, &space, &dims), v) else {
                        continue;
                    };
                    x.extend(row);
                    values.push(v);
                    trial_constraints.push(t.constraints_by_name());
                }
                TrialState::Running if t.number != trial_number => {
                    if let Some(row) = Self::row(t, &space, &dims) {
                        running.push(row);
                    }
                }
                _ => {}
            }
        }
        if values.len() < self.config.n_startup_trials.max(1) {
            return BTreeMap::new();
        }
        let constraint_rows = constraint_rows(&trial_constraints);
        let dim = dims.len();
        let feasible: Vec<bool> = constraint_rows
            .iter()
            .map(|r| r.iter().all(|c| *c <= 0.0))
            .collect();
        // Each objective GP's standardised targets.
        let targets: Vec<Vec<f64>> = (0..values[0].len())
            .map(|k| {
                let column: Vec<f64> = values.iter().map(|v| v[k]).collect();
                let (y, _, _) = standardize(&column);
                // ParEGO's scalarisation is already one normalised scale;
                // the hypervolume's strips are cut from the losses as seen.
                if self.config.warp_objective && !study.is_multi_objective() {
                    standardize(&warp::power_warp(&y)).0
                } else {
                    y
                }
            })
            .collect();
        let noise = self.noise(scalarised.is_none());
        // A GP that cannot be fitted (no covariance of the inputs is
        // positive definite): the parameters are drawn independently.
        let Some(gps) = self.objective_gps(&x, &targets, &categorical, &running, noise) else {
            return BTreeMap::new();
        };
        let (goal, warm_start) = goal(gps, &targets, &feasible, &x, dim);
        let Some(constraints) = self.constraint_gps(&x, &constraint_rows, &categorical) else {
            return BTreeMap::new();
        };
        let acq = Acquisition { goal, constraints };
        let search = optimize::Search {
            n_candidates: self.config.n_preliminary_samples.max(1),
            n_local_search: self.config.n_local_search.max(2),
            tol: self.config.tol,
        };
        let point = optimize::maximize(&acq, &dims, warm_start.as_deref(), search, &mut self.rng);
        space
            .iter()
            .zip(&dims)
            .zip(&point)
            .map(|(((name, _), dim), v)| ((*name).clone(), dim.unnormalize(*v)))
            .collect()
    }

    fn sample_independent(
        &mut self,
        study: &StudyView<'_>,
        _trial_number: u64,
        name: &str,
        distribution: &Distribution,
    ) -> f64 {
        let n = self.config.n_startup_trials;
        if self.config.latin_hypercube_startup
            && self.error.is_none()
            && Self::n_complete(study) < n
        {
            return startup::draw(&mut self.rng, n, study, name, distribution);
        }
        sample_uniform(&mut self.rng, distribution)
    }
}

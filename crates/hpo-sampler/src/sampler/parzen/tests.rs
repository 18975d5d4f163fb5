use super::*;
use crate::special::log_gauss_mass;

const P: ParzenParams = ParzenParams {
    prior_weight: 1.0,
    consider_magic_clip: true,
    consider_endpoints: false,
};

/// A random space of every kind of dimension.
fn random_space(rng: &mut Rng) -> Vec<Distribution> {
    let mut dims = Vec::new();
    for _ in 0..1 + rng.below(6) {
        let d = match rng.below(8) {
            6 => Distribution::int(-5, 5, false, 1),
            7 => Distribution::float(-5.0, 5.0, false, None),
            0 => Distribution::float(-2.0, 3.0, false, None),
            1 => Distribution::float(1e-5, 1e-1, true, None),
            2 => Distribution::float(0.0, 1.0, false, Some(0.125)),
            3 => Distribution::int(16, 256, false, 16),
            4 => Distribution::int(1, 1000, true, 1),
            _ => Distribution::categorical(
                (0..2 + rng.below(4))
                    .map(|i| crate::ParamValue::Int(i as i64))
                    .collect(),
            ),
        };
        dims.push(d.unwrap());
    }
    dims
}

/// Observations clustered near a few centres (so kernels overlap and
/// repeat, as in a converging study) plus uniform ones.
fn random_obs(rng: &mut Rng, dists: &[Distribution], n: usize) -> Vec<Vec<f64>> {
    use crate::sampler::random::sample_uniform;
    let centres: Vec<Vec<f64>> = (0..3)
        .map(|_| dists.iter().map(|d| sample_uniform(rng, d)).collect())
        .collect();
    let mut obs = vec![Vec::with_capacity(n); dists.len()];
    for _ in 0..n {
        let c = &centres[rng.below(3)];
        let uniform = rng.next_f64() < 0.3;
        for (j, d) in dists.iter().enumerate() {
            let v = if uniform || rng.next_f64() < 0.2 {
                sample_uniform(rng, d)
            } else {
                c[j]
            };
            obs[j].push(v);
        }
    }
    obs
}

/// The log-density straight from the formulas, with the estimator's
/// kernels: truncated normal densities, exact (erfc) cell masses, the
/// categoricals' probabilities, and a plain log-sum-exp.
fn reference_log_pdf(p: &Parzen, samples: &[Vec<f64>], i: usize) -> f64 {
    let terms: Vec<f64> = (0..p.n_kernels())
        .map(|k| {
            let mut t = p.w.weights[k].ln();
            for (dim, xs) in p.dims.iter().zip(samples) {
                let x = xs[i];
                t += match dim {
                    Dim::Categorical(c) => {
                        c.templates[c.template[k] as usize * c.n_choices + x as usize].ln()
                    }
                    Dim::Numeric(d) => {
                        let (m, s) = (d.mu[k], d.sigma[k]);
                        let norm =
                            log_gauss_mass((d.adapted_low - m) / s, (d.adapted_high - m) / s);
                        match d.step {
                            None => {
                                let z = (d.transform(x) - m) / s;
                                -0.5 * z * z - s.ln() - NORM_PDF_LOG_C - norm
                            }
                            Some(step) => {
                                let c = cells::Cell::new(x, step, d.log);
                                log_gauss_mass((c.l - m) / s, (c.r - m) / s) - norm
                            }
                        }
                    }
                };
            }
            t
        })
        .collect();
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln() + max
}

/// On random spaces and clustered histories, the fast density equals the
/// formulas; kernel terms are never above the density; and an estimator
/// that inherits a warm cell cache from another gives the same bits as a
/// fresh one.
#[test]
fn log_pdf_matches_the_formulas_and_cached_cells_change_nothing() {
    use crate::sampler::random::sample_uniform;
    let mut rng = Rng::seed_from(42);
    let mut compared = 0;
    for case in 0..1500 {
        let dists = if case % 10 == 0 {
            vec![Distribution::float(0.0, 1.0, false, None).unwrap(); 6]
        } else {
            random_space(&mut rng)
        };
        let refs: Vec<&Distribution> = dists.iter().collect();
        let n = [0, 1, 2, 5, 30, 120, 400][case % 7];
        let obs = random_obs(&mut rng, &dists, n);
        let weights = crate::sampler::default_weights(n);
        let params = ParzenParams {
            prior_weight: [1.0, 0.3, 2.0][case % 3],
            consider_magic_clip: case % 5 != 0,
            consider_endpoints: case % 4 == 0,
        };
        let mut p = Parzen::new(&refs, &obs, &weights, params);
        let mut points = p.sample(&mut rng, 24);
        for (col, d) in points.iter_mut().zip(&dists) {
            col.extend((0..8).map(|_| sample_uniform(&mut rng, d)));
        }
        let fast = p.log_pdf(&points);
        for (i, &a) in fast.iter().enumerate() {
            let b = reference_log_pdf(&p, &points, i);
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                "case {case}: {a} vs {b} ({dists:?}, n = {n})"
            );
            compared += 1;
        }
        // Terms one at a time, on a fresh evaluator (cells not expanded).
        let mut ev = p.evaluator(&points);
        for i in [0, 5, 31] {
            let terms: Vec<f64> = (0..n + 1).map(|k| ev.kernel_term(i, k)).collect();
            let (bound, top) = ev.screen(i);
            let carriers = ev.carriers(i, bound - 30.0);
            let density = ev.log_pdf(i);
            assert_eq!(density.to_bits(), fast[i].to_bits());
            let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert!(density >= max || density.is_nan(), "case {case}");
            assert!(top as usize <= n && carriers.iter().all(|&k| k as usize <= n));
            assert!(
                carriers.len() <= MAX_CARRIERS && carriers.contains(&top) || !bound.is_finite()
            );
            // The carriers never prove more than the density.
            let margin = 1e-9 * (1.0 + density.abs());
            assert!(!ev.exceeds(i, &carriers, density + margin), "case {case}");
        }
        // Inherit the cells of another estimator (other observations,
        // same distributions), then of this one.
        let other = Parzen::new(&refs, &random_obs(&mut rng, &dists, 50), &[1.0; 50], params);
        let mut warm = other.recycle();
        for _ in 0..2 {
            let (centres, orders) = centres_and_orders(&refs, &obs);
            let ids: Vec<u64> = (0..n as u64).collect();
            let mut q =
                Parzen::from_centres(&refs, &centres, &orders, &ids, &weights, params, warm);
            let again = q.log_pdf(&points);
            assert_eq!(
                again.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "case {case}"
            );
            warm = q.recycle();
        }
    }
    assert_eq!(compared, 1500 * 32);
}

/// Every per-kernel number of two estimators, as bits (cell-cache pair
/// ids aside: each cache numbers its own).
fn kernel_arrays(p: &Parzen) -> Vec<Vec<u64>> {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    let mut out = vec![bits(&p.w.weights), bits(&p.w.cum_weights), p.ids.to_vec()];
    for dim in &p.dims {
        match dim {
            Dim::Categorical(c) => {
                out.push(bits(&c.templates));
                out.push(c.template.iter().map(|&t| u64::from(t)).collect());
                out.extend(c.log_probs_by_choice.iter().map(|column| bits(column)));
            }
            Dim::Numeric(d) => {
                for v in [&d.mu, &d.sigma, &d.inv_sigma, &d.konst, &d.peak] {
                    out.push(bits(v));
                }
                out.push(d.sorted.iter().flat_map(|&(k, id)| [k, id]).collect());
            }
        }
    }
    out
}

/// An estimator updated through random removals and additions is the one
/// built from scratch on the same observations, bit for bit, on random
/// spaces and options, across the magic clip's moving range (fewer than
/// 98 kernels) and far beyond it, down to no observations at all.
#[test]
fn updated_estimators_are_the_rebuilt_ones() {
    let mut rng = Rng::seed_from(7);
    for case in 0..300 {
        let dists = random_space(&mut rng);
        let refs: Vec<&Distribution> = dists.iter().collect();
        let pool = [6, 40, 150, 400][case % 4];
        let obs = random_obs(&mut rng, &dists, pool);
        // Observation i is trial number 3 i (so ids leave gaps).
        let params = ParzenParams {
            prior_weight: [1.0, 0.3][case % 2],
            consider_magic_clip: case % 5 != 0,
            consider_endpoints: case % 3 == 0,
        };
        let build = |members: &[usize], warm: Recycled| {
            let sub: Vec<Vec<f64>> = obs
                .iter()
                .map(|col| members.iter().map(|&i| col[i]).collect())
                .collect();
            let (centres, orders) = centres_and_orders(&refs, &sub);
            let ids: Vec<u64> = members.iter().map(|&i| 3 * i as u64).collect();
            let w = crate::sampler::default_weights(members.len());
            Parzen::from_centres(&refs, &centres, &orders, &ids, &w, params, warm)
        };
        let mut members: Vec<usize> = (0..pool).filter(|_| rng.next_f64() < 0.5).collect();
        let mut p = build(&members, Recycled::default());
        let (all_centres, _) = centres_and_orders(&refs, &obs);
        for step in 0..12 {
            let (n_gone, n_new) = (1 + rng.below(4), rng.below(4));
            let mut removed: Vec<usize> = (0..members.len())
                .filter(|_| rng.below(members.len().max(1) / 4 + 2) == 0)
                .take(n_gone)
                .collect();
            if step == 11 {
                removed = (0..members.len()).collect();
            }
            let kept: Vec<usize> = (0..members.len())
                .filter(|k| !removed.contains(k))
                .map(|k| members[k])
                .collect();
            let mut added: Vec<usize> = (0..pool)
                .filter(|i| !members.contains(i) && rng.below(pool / 3 + 1) == 0)
                .take(n_new)
                .collect();
            if step == 11 {
                added.clear();
            }
            let joined: Vec<(u64, Box<[f64]>)> = added
                .iter()
                .map(|&i| (3 * i as u64, all_centres.iter().map(|c| c[i]).collect()))
                .collect();
            members = kept.into_iter().chain(added).collect();
            members.sort_unstable();
            let w = crate::sampler::default_weights(members.len());
            p.update(&removed, &joined, &w, params);
            let fresh = build(&members, Recycled::default());
            assert!(
                kernel_arrays(&p) == kernel_arrays(&fresh),
                "case {case} step {step}: {dists:?}"
            );
            let points = {
                use crate::sampler::random::sample_uniform;
                let mut points = p.sample(&mut rng, 8);
                for (col, d) in points.iter_mut().zip(&dists) {
                    col.extend((0..8).map(|_| sample_uniform(&mut rng, d)));
                }
                points
            };
            let mut fresh = fresh;
            let (a, b) = (p.log_pdf(&points), fresh.log_pdf(&points));
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "case {case} step {step}"
            );
        }
    }
}

#[test]
fn sigmas_follow_optuna() {
    // mus 0.2, 0.5, 0.6 in [0, 1]: gaps with endpoints, extremes use the
    // inner neighbour, min sigma = 1 / (1 + 4) = 0.2.
    let mus = [0.5, 0.2, 0.6];
    let s = kernel_sigmas(&mus, &centre_order(&mus), 0.0, 1.0, P);
    assert_eq!(s, vec![0.3, 0.3, 0.2]);
}

#[test]
fn density_integrates_to_one() {
    let d = Distribution::float(0.0, 2.0, false, None).unwrap();
    let mut p = Parzen::new(&[&d], &[vec![0.1, 1.5, 1.9]], &[1.0, 1.0, 1.0], P);
    let n = 20_000;
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 + 0.5) * 2.0 / n as f64).collect();
    let integral: f64 = p
        .log_pdf(&[xs])
        .iter()
        .map(|l| l.exp() * 2.0 / n as f64)
        .sum();
    assert!((integral - 1.0).abs() < 1e-6, "{integral}");

    let i = Distribution::int(1, 9, false, 2).unwrap();
    let mut p = Parzen::new(&[&i], &[vec![3.0, 3.0, 9.0]], &[1.0, 1.0, 1.0], P);
    let mass: f64 = p
        .log_pdf(&[vec![1.0, 3.0, 5.0, 7.0, 9.0]])
        .iter()
        .map(|l| l.exp())
        .sum();
    assert!((mass - 1.0).abs() < 1e-12, "{mass}");
}

//! Exact hypervolume (`optuna/_hypervolume/wfg.py`: a sweep in two
//! dimensions, the WFG algorithm beyond) and greedy hypervolume subset
//! selection (`hssp.py`), on loss vectors.

use super::pareto::{lex, pareto_front_indices, unique_lexsorted};

/// Optuna's `1e-12`: a reference coordinate of exactly 0 becomes this.
const EPS: f64 = 1e-12;

/// The volume of the region dominated by `points` (loss vectors) and
/// bounded by `reference`: Optuna's `compute_hypervolume`. Points that do
/// not dominate the reference in every coordinate bound nothing and are
/// ignored (Optuna refuses them), as are points with a NaN. A reference
/// with an infinite coordinate gives infinity when any point counts.
///
/// ```
/// use hpo_sampler::multi::hypervolume;
/// // Three objectives: two unit boxes overlapping in half a unit.
/// let points = [vec![0.0, 0.0, 0.5], vec![0.0, 0.5, 0.0]];
/// assert_eq!(hypervolume(&points, &[1.0, 1.0, 1.0]), 0.75);
/// // Outside the reference box: nothing.
/// assert_eq!(hypervolume(&[vec![2.0, 0.0, 0.0]], &[1.0, 1.0, 1.0]), 0.0);
/// ```
pub fn hypervolume(points: &[Vec<f64>], reference: &[f64]) -> f64 {
    let inside: Vec<Vec<f64>> = points
        .iter()
        .filter(|p| p.len() == reference.len() && p.iter().zip(reference).all(|(x, r)| x <= r))
        .cloned()
        .collect();
    if inside.is_empty() {
        return 0.0;
    }
    if reference.iter().any(|r| !r.is_finite()) {
        return f64::INFINITY;
    }
    let mut front: Vec<Vec<f64>> = pareto_front_indices(&inside)
        .into_iter()
        .map(|i| inside[i].clone())
        .collect();
    front.sort_by(|a, b| lex(a, b));
    front.dedup();
    let hv = if reference.len() == 2 {
        hv_2d(&front, reference)
    } else {
        hv_sorted(&front, reference)
    };
    if hv.is_finite() { hv } else { f64::INFINITY }
}

/// Two objectives, a front sorted by the first loss (so the second
/// decreases): a sum of rectangles (`_compute_2d`).
fn hv_2d(front: &[Vec<f64>], reference: &[f64]) -> f64 {
    let mut top = reference[1];
    let mut hv = 0.0;
    for p in front {
        hv += (reference[0] - p[0]) * (top - p[1]);
        top = p[1];
    }
    hv
}

/// The product of `reference - p`.
fn inclusive(p: &[f64], reference: &[f64]) -> f64 {
    p.iter().zip(reference).map(|(x, r)| r - x).product()
}

/// WFG (`_compute_hv`) on points sorted by their first loss: each point's
/// box minus what the later points cover of it.
fn hv_sorted(sorted: &[Vec<f64>], reference: &[f64]) -> f64 {
    match sorted {
        [] => 0.0,
        [a] => inclusive(a, reference),
        [a, b] => {
            let meet: Vec<f64> = a.iter().zip(b).map(|(x, y)| x.max(*y)).collect();
            inclusive(a, reference) + inclusive(b, reference) - inclusive(&meet, reference)
        }
        _ => {
            let last = sorted.len() - 1;
            let mut hv = inclusive(&sorted[last], reference);
            for i in 0..last {
                // The later points limited to point i's box.
                let limited: Vec<Vec<f64>> = sorted[i + 1..]
                    .iter()
                    .map(|q| q.iter().zip(&sorted[i]).map(|(x, y)| x.max(*y)).collect())
                    .collect();
                hv += exclusive(&limited, inclusive(&sorted[i], reference), reference);
            }
            hv
        }
    }
}

/// A box's volume minus the part the (first-loss sorted) `limited`
/// points cover; dominated points are dropped first, which changes nothing
/// but the cost (`_compute_exclusive_hv`).
fn exclusive(limited: &[Vec<f64>], inclusive_hv: f64, reference: &[f64]) -> f64 {
    if limited.len() <= 3 {
        return inclusive_hv - hv_sorted(limited, reference);
    }
    // Sorted by the first loss, a point cannot be dominated by a later
    // one; the first remaining point removes every point it weakly
    // dominates (duplicates included).
    let mut kept: Vec<Vec<f64>> = Vec::new();
    let mut remaining: Vec<usize> = (0..limited.len()).collect();
    while let Some(&top) = remaining.first() {
        let p = &limited[top];
        kept.push(p.clone());
        remaining.retain(|&k| limited[k].iter().zip(p).skip(1).any(|(x, y)| x < y));
    }
    inclusive_hv - hv_sorted(&kept, reference)
}

/// Optuna's `_get_reference_point` for multi-objective TPE: the worst loss
/// of each objective pushed 10% further out (away from zero), a
/// coordinate of exactly 0 made `1e-12`.
///
/// ```
/// use hpo_sampler::multi::reference_point;
/// let r = reference_point(&[vec![1.0, -2.0], vec![3.0, -4.0]]);
/// assert!((r[0] - 3.3).abs() < 1e-12 && (r[1] + 1.8).abs() < 1e-12);
/// ```
///
/// # Panics
///
/// When the loss vectors differ in length (a history mixing studies of
/// different objective counts).
pub fn reference_point(points: &[Vec<f64>]) -> Vec<f64> {
    let m = points.first().map_or(0, Vec::len);
    (0..m)
        .map(|k| {
            let worst = points
                .iter()
                .map(|p| p[k])
                .fold(f64::NEG_INFINITY, f64::max);
            let r = (1.1 * worst).max(0.9 * worst);
            if r == 0.0 { EPS } else { r }
        })
        .collect()
}

/// Greedy hypervolume subset selection (Optuna's `_solve_hssp`): the
/// indices (into `points`) of `k` points chosen one at a time by largest
/// hypervolume contribution (ties to the lexicographically first),
/// distinct points first; when fewer than `k` are distinct, every distinct
/// point and then the earliest duplicates, in index order. `points` are
/// mutually non-dominated loss vectors (one non-domination rank); where a
/// point has another length than `reference`, or the reference is not
/// finite, no volume is measured and the first `k` distinct points in
/// lexicographic order are chosen.
///
/// ```
/// use hpo_sampler::multi::select_by_hypervolume;
/// let front = [vec![0.0, 3.0], vec![1.0, 1.0], vec![3.0, 0.0], vec![0.9, 1.2]];
/// // (1, 1) adds the most volume under (4, 4), then an extreme.
/// assert_eq!(select_by_hypervolume(&front, 2, &[4.0, 4.0]), vec![1, 0]);
/// // Points of another dimension than the reference: no volume to measure.
/// let flat = [vec![2.0], vec![0.0], vec![1.0]];
/// assert_eq!(select_by_hypervolume(&flat, 1, &[4.0, 4.0]), vec![1]);
/// ```
pub fn select_by_hypervolume(points: &[Vec<f64>], k: usize, reference: &[f64]) -> Vec<usize> {
    let n = points.len();
    if k >= n {
        return (0..n).collect();
    }
    // The first occurrence of each distinct point, in lexicographic order.
    let (unique, _) = unique_lexsorted(points);
    if unique.len() < k {
        let mut chosen = vec![false; n];
        unique.iter().for_each(|&i| chosen[i] = true);
        let mut extra = k - unique.len();
        for c in chosen.iter_mut() {
            if extra > 0 && !*c {
                *c = true;
                extra -= 1;
            }
        }
        return (0..n).filter(|&i| chosen[i]).collect();
    }
    if unique.len() == k
        || reference.iter().any(|r| !r.is_finite())
        || points.iter().any(|p| p.len() != reference.len())
    {
        return unique[..k].to_vec();
    }
    if reference.len() == 2 {
        return hssp_2d(points, &unique, k, reference);
    }
    // Contributions H(S + {i}) - H(S), recomputed after each choice.
    let mut left = unique;
    let mut selected: Vec<Vec<f64>> = Vec::with_capacity(k);
    let mut chosen = Vec::with_capacity(k);
    let mut hv = 0.0;
    for _ in 0..k {
        let mut best: Option<(usize, f64)> = None;
        for (pos, &i) in left.iter().enumerate() {
            selected.push(points[i].clone());
            let c = hypervolume(&selected, reference) - hv;
            selected.pop();
            if best.is_none_or(|(_, b)| nan_lowest(c) > nan_lowest(b)) {
                best = Some((pos, c));
            }
        }
        let (pos, c) = best.expect("fewer chosen than distinct points");
        if c.is_finite() {
            hv += c;
        }
        let i = left.remove(pos);
        selected.push(points[i].clone());
        chosen.push(i);
    }
    chosen
}

/// A contribution as the selection compares it: a NaN one (from a NaN
/// loss) below every other, so such a point is chosen last, once.
fn nan_lowest(c: f64) -> f64 {
    if c.is_nan() { f64::NEG_INFINITY } else { c }
}

/// `_solve_hssp_2d`: on a two-objective front sorted by the first loss,
/// each point's contribution is a rectangle up to its nearest chosen
/// neighbours. Choosing a point shrinks only the rectangles between it and
/// those neighbours, so only they are rescored; the choice is the first
/// largest contribution in sorted order, from one flat array (a TPE ask
/// on 2 objectives at 1,000 trials selects 100 of about 600 points here).
fn hssp_2d(points: &[Vec<f64>], sorted: &[usize], k: usize, reference: &[f64]) -> Vec<usize> {
    let front: Vec<[f64; 2]> = sorted
        .iter()
        .map(|&i| [points[i][0], points[i][1]])
        .collect();
    let mut diag: Vec<[f64; 2]> = vec![[reference[0], reference[1]]; front.len()];
    let score = |p: &[f64; 2], d: &[f64; 2]| (d[0] - p[0]) * (d[1] - p[1]);
    // The contribution of each point; a NaN one (a NaN loss) ranks below
    // every other, so every point is chosen once.
    let mut contribution: Vec<f64> = front.iter().zip(&diag).map(|(p, d)| score(p, d)).collect();
    let mut taken = vec![false; front.len()];
    let mut chosen = Vec::with_capacity(k);
    for _ in 0..k {
        let mut pos = None;
        for q in (0..front.len()).filter(|q| !taken[*q]) {
            if pos.is_none_or(|b: usize| nan_lowest(contribution[q]) > nan_lowest(contribution[b]))
            {
                pos = Some(q);
            }
        }
        let pos = pos.expect("fewer chosen than distinct points");
        taken[pos] = true;
        chosen.push(sorted[pos]);
        let p = front[pos];
        let mut q = pos;
        while q > 0 && !taken[q - 1] {
            q -= 1;
            diag[q][0] = diag[q][0].min(p[0]);
            contribution[q] = score(&front[q], &diag[q]);
        }
        let mut q = pos + 1;
        while q < front.len() && !taken[q] {
            diag[q][1] = diag[q][1].min(p[1]);
            contribution[q] = score(&front[q], &diag[q]);
            q += 1;
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Points with a NaN loss are chosen last and once, in two dimensions
    /// and in three.
    #[test]
    fn nan_points_are_chosen_last_and_never_twice() {
        let nan = f64::NAN;
        let two = [vec![0.0, 0.0], vec![1.0, nan], vec![2.0, nan]];
        assert_eq!(select_by_hypervolume(&two, 2, &[4.0, 4.0])[0], 0);
        for k in 1..=2 {
            let mut picked = select_by_hypervolume(&two, k, &[4.0, 4.0]);
            picked.sort_unstable();
            picked.dedup();
            assert_eq!(picked.len(), k, "{picked:?}");
        }
        let three = [
            vec![1.0, 1.0, nan],
            vec![0.0, 2.0, 1.0],
            vec![2.0, 0.0, 1.0],
        ];
        let picked = select_by_hypervolume(&three, 2, &[4.0, 4.0, 4.0]);
        assert!(!picked.contains(&0), "{picked:?}");
    }

    /// The dominated volume by inclusion-exclusion over every subset.
    fn brute(points: &[Vec<f64>], reference: &[f64]) -> f64 {
        let n = points.len();
        let mut hv = 0.0;
        for mask in 1u32..(1 << n) {
            let mut corner = vec![f64::NEG_INFINITY; reference.len()];
            for (i, p) in points.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    for (c, x) in corner.iter_mut().zip(p) {
                        *c = c.max(*x);
                    }
                }
            }
            let sign = if mask.count_ones() % 2 == 1 {
                1.0
            } else {
                -1.0
            };
            hv += sign * inclusive(&corner, reference);
        }
        hv
    }

    #[test]
    fn hypervolume_is_inclusion_exclusion_on_random_points() {
        let mut rng = Rng::seed_from(9);
        for case in 0..400 {
            let m = 2 + case % 4;
            let n = 1 + case % 9;
            let points: Vec<Vec<f64>> = (0..n)
                .map(|_| {
                    (0..m)
                        .map(|_| (rng.below(6) as f64 + rng.next_f64()) / 6.0)
                        .collect()
                })
                .collect();
            let reference = vec![1.0; m];
            let got = hypervolume(&points, &reference);
            let want = brute(&points, &reference);
            assert!((got - want).abs() < 1e-12, "case {case}: {got} vs {want}");
        }
    }

    #[test]
    fn subset_selection_is_greedy_by_contribution() {
        let mut rng = Rng::seed_from(4);
        for case in 0..200 {
            let m = 2 + case % 2;
            // A non-dominated set: points on a simplex-like surface.
            let n = 3 + case % 12;
            let points: Vec<Vec<f64>> = (0..n)
                .map(|_| {
                    let raw: Vec<f64> = (0..m).map(|_| rng.next_f64() + 0.01).collect();
                    let s: f64 = raw.iter().sum();
                    raw.iter().map(|x| x / s).collect()
                })
                .collect();
            let reference = reference_point(&points);
            let k = 1 + case % (n - 1);
            let got = select_by_hypervolume(&points, k, &reference);
            // Greedy by recomputing every contribution from scratch.
            let mut chosen: Vec<usize> = Vec::new();
            for _ in 0..k {
                let base: Vec<Vec<f64>> = chosen.iter().map(|&i| points[i].clone()).collect();
                let hv0 = hypervolume(&base, &reference);
                let best = (0..n)
                    .filter(|i| !chosen.contains(i))
                    .map(|i| {
                        let mut s = base.clone();
                        s.push(points[i].clone());
                        (i, hypervolume(&s, &reference) - hv0)
                    })
                    .fold(None, |b: Option<(usize, f64)>, (i, c)| match b {
                        Some((_, bc)) if bc >= c - 1e-12 => b,
                        _ => Some((i, c)),
                    })
                    .unwrap();
                chosen.push(best.0);
            }
            let hv = |s: &[usize]| {
                let pts: Vec<Vec<f64>> = s.iter().map(|&i| points[i].clone()).collect();
                hypervolume(&pts, &reference)
            };
            assert!(
                (hv(&got) - hv(&chosen)).abs() < 1e-9,
                "case {case}: {got:?} vs {chosen:?}"
            );
        }
    }

    #[test]
    fn duplicates_fill_the_subset_last() {
        let points = [vec![1.0, 1.0], vec![1.0, 1.0], vec![0.0, 2.0]];
        assert_eq!(
            select_by_hypervolume(&points, 3, &[3.0, 3.0]),
            vec![0, 1, 2]
        );
        let dup = [vec![1.0, 1.0], vec![1.0, 1.0], vec![1.0, 1.0]];
        assert_eq!(select_by_hypervolume(&dup, 2, &[3.0, 3.0]), vec![0, 1]);
    }

    /// The greedy selection rescanning every point per choice.
    fn hssp_2d_rescan(
        points: &[Vec<f64>],
        sorted: &[usize],
        k: usize,
        reference: &[f64],
    ) -> Vec<usize> {
        let mut left: Vec<usize> = sorted.to_vec();
        let mut diag: Vec<[f64; 2]> = vec![[reference[0], reference[1]]; left.len()];
        let mut chosen = Vec::with_capacity(k);
        for _ in 0..k {
            let mut best = (0, f64::NEG_INFINITY);
            for (pos, (&i, d)) in left.iter().zip(&diag).enumerate() {
                let c = (d[0] - points[i][0]) * (d[1] - points[i][1]);
                if c > best.1 {
                    best = (pos, c);
                }
            }
            let pos = best.0;
            let p = &points[left[pos]];
            chosen.push(left.remove(pos));
            diag.remove(pos);
            for d in &mut diag[..pos] {
                d[0] = d[0].min(p[0]);
            }
            for d in &mut diag[pos..] {
                d[1] = d[1].min(p[1]);
            }
        }
        chosen
    }

    /// The flat array's choices are the rescan's, in order, on 2-D fronts with
    /// repeated coordinates (ties in contribution) and on random ones.
    #[test]
    fn two_objective_selection_equals_the_rescan() {
        let mut rng = Rng::seed_from(11);
        for case in 0..300 {
            let n = 2 + case % 40;
            let mut front: Vec<Vec<f64>> = (0..n)
                .map(|_| {
                    let x = if case % 3 == 0 {
                        (rng.below(8) as f64) / 8.0
                    } else {
                        rng.next_f64()
                    };
                    vec![x, 1.0 - x]
                })
                .collect();
            front.sort_by(|a, b| a[0].total_cmp(&b[0]));
            front.dedup();
            let sorted: Vec<usize> = (0..front.len()).collect();
            let reference = [1.1, 1.1 + (case % 5) as f64];
            for k in 1..=front.len() {
                assert_eq!(
                    hssp_2d(&front, &sorted, k, &reference),
                    hssp_2d_rescan(&front, &sorted, k, &reference),
                    "case {case}, k {k}"
                );
            }
        }
    }
}

//! Dominance, non-dominated sorting and the Pareto front
//! (`optuna/study/_multi_objective.py` and NSGA-II's
//! `_constraints_evaluation.py`).

use crate::sampler::parzen::total_key;
use crate::trial::{FrozenTrial, StudyDirection, TrialState};
use std::cmp::Ordering;

/// A trial's values as losses (smaller is better): maximised objectives
/// negated. `None` unless the trial has one value per direction.
///
/// ```
/// use hpo_sampler::multi::loss_values;
/// use hpo_sampler::{FrozenTrial, StudyDirection, TrialState};
///
/// let mut t = FrozenTrial::new(0);
/// t.state = TrialState::Complete;
/// t.values = Some(vec![0.9, 3.0]);
/// let directions = [StudyDirection::Maximize, StudyDirection::Minimize];
/// assert_eq!(loss_values(&t, &directions), Some(vec![-0.9, 3.0]));
/// ```
pub fn loss_values(trial: &FrozenTrial, directions: &[StudyDirection]) -> Option<Vec<f64>> {
    Some(losses(trial, directions)?.collect())
}

/// [`loss_values`] without a vector of its own.
pub(crate) fn losses<'a>(
    trial: &'a FrozenTrial,
    directions: &'a [StudyDirection],
) -> Option<impl Iterator<Item = f64> + 'a> {
    let values = trial.values.as_ref()?;
    if values.len() != directions.len() {
        return None;
    }
    Some(values.iter().zip(directions).map(|(&v, d)| {
        if *d == StudyDirection::Maximize {
            -v
        } else {
            v
        }
    }))
}

/// Whether loss vector `a` dominates `b`: no worse in every objective and
/// not equal (Optuna's `_dominates` on COMPLETE trials).
///
/// ```
/// use hpo_sampler::multi::dominates;
/// assert!(dominates(&[1.0, 2.0], &[1.0, 3.0]));
/// assert!(!dominates(&[1.0, 2.0], &[1.0, 2.0]));
/// assert!(!dominates(&[1.0, 4.0], &[2.0, 3.0]));
/// ```
pub fn dominates(a: &[f64], b: &[f64]) -> bool {
    a != b && a.iter().zip(b).all(|(x, y)| x <= y)
}

/// Optuna's `_constrained_dominates` between two trials: a COMPLETE trial
/// dominates one that is not; a feasible trial (every constraint `<= 0`)
/// dominates an infeasible one; of two infeasible trials the one of
/// smaller total violation dominates; two feasible ones compare by
/// [`dominates`].
pub fn constrained_dominates(
    a: &FrozenTrial,
    b: &FrozenTrial,
    directions: &[StudyDirection],
) -> bool {
    if a.state != TrialState::Complete {
        return false;
    }
    if b.state != TrialState::Complete {
        return true;
    }
    match (a.is_feasible(), b.is_feasible()) {
        (true, true) => match (loss_values(a, directions), loss_values(b, directions)) {
            (Some(x), Some(y)) => dominates(&x, &y),
            _ => false,
        },
        (true, false) => true,
        (false, true) => false,
        (false, false) => a.violation() < b.violation(),
    }
}

/// Lexicographic order of loss vectors (numpy's `np.unique(axis=0)`,
/// which holds `-0.0` and `0.0` equal: adding `0.0` makes them one).
pub(crate) fn lex(a: &[f64], b: &[f64]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x + 0.0).total_cmp(&(y + 0.0)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// The distinct rows of `points` in lexicographic order (each row is its
/// points' first), and for each point the position of its row.
pub(super) fn unique_lexsorted(points: &[Vec<f64>]) -> (Vec<usize>, Vec<usize>) {
    if points.iter().all(|p| p.len() == 2) {
        let pairs: Vec<(f64, f64)> = points.iter().map(|p| (p[0], p[1])).collect();
        return unique_lexsorted_pairs(&pairs);
    }
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| lex(&points[a], &points[b]).then(a.cmp(&b)));
    let mut unique: Vec<usize> = Vec::with_capacity(points.len());
    let mut row_of = vec![0; points.len()];
    for &i in &order {
        match unique.last() {
            Some(&u) if lex(&points[u], &points[i]).is_eq() => {}
            _ => unique.push(i),
        }
        row_of[i] = unique.len() - 1;
    }
    (unique, row_of)
}

/// [`unique_lexsorted`] of 2-D points (the common case): they sort as
/// integer keys in [`lex`]'s order, ties by index, which is the same order
/// without comparing through slices.
fn unique_lexsorted_pairs(pairs: &[(f64, f64)]) -> (Vec<usize>, Vec<usize>) {
    let mut keyed: Vec<(u64, u64, usize)> = pairs
        .iter()
        .enumerate()
        .map(|(i, &(x, y))| (total_key(x + 0.0), total_key(y + 0.0), i))
        .collect();
    keyed.sort_unstable();
    let mut unique: Vec<usize> = Vec::with_capacity(pairs.len());
    let mut row_of = vec![0; pairs.len()];
    let mut last = None;
    for (x, y, i) in keyed {
        if last != Some((x, y)) {
            unique.push(i);
            last = Some((x, y));
        }
        row_of[i] = unique.len() - 1;
    }
    (unique, row_of)
}

/// Which of the distinct, lexicographically sorted rows `rows` (indices into
/// `points`) are on their Pareto front (`_is_pareto_front_for_unique_sorted`).
fn front_of_sorted(points: &[Vec<f64>], rows: &[usize]) -> Vec<bool> {
    let mut on = vec![false; rows.len()];
    let Some(&first) = rows.first() else {
        return on;
    };
    match points[first].len() {
        0 | 1 => on[0] = true,
        2 => {
            // Sorted by the first loss: a row is on the front when its
            // second loss is a new minimum.
            let mut best = f64::INFINITY;
            for (k, &r) in rows.iter().enumerate() {
                let y = points[r][1];
                if k == 0 || y < best {
                    on[k] = true;
                    best = y;
                }
            }
        }
        _ => {
            // A row cannot be dominated by a later one; the first remaining
            // row is on the front, and removes every row it weakly dominates.
            let mut remaining: Vec<usize> = (0..rows.len()).collect();
            while let Some(&top) = remaining.first() {
                on[top] = true;
                let p = &points[rows[top]];
                remaining.retain(|&k| points[rows[k]].iter().zip(p).skip(1).any(|(x, y)| x < y));
            }
        }
    }
    on
}

/// The indices of the points on the Pareto front of loss vectors `points`,
/// in index order; equal points are all on it or all off it.
///
/// ```
/// use hpo_sampler::multi::pareto_front_indices;
/// let points = [vec![2.0, 2.0], vec![1.0, 3.0], vec![2.0, 2.0], vec![3.0, 3.0]];
/// assert_eq!(pareto_front_indices(&points), vec![0, 1, 2]);
/// ```
///
/// # Panics
///
/// When the loss vectors differ in length (a history mixing studies of
/// different objective counts).
pub fn pareto_front_indices(points: &[Vec<f64>]) -> Vec<usize> {
    let (unique, row_of) = unique_lexsorted(points);
    let on = front_of_sorted(points, &unique);
    (0..points.len()).filter(|&i| on[row_of[i]]).collect()
}

/// Non-domination ranks of loss vectors (0: the Pareto front), Optuna's
/// `_calculate_nondomination_rank`. With `n_below`, fronts are peeled only
/// until at least that many distinct points are ranked; every point after
/// shares the next rank.
///
/// ```
/// use hpo_sampler::multi::non_domination_ranks;
/// let points = [vec![3.0, 3.0], vec![1.0, 1.0], vec![2.0, 2.0], vec![1.0, 1.0]];
/// assert_eq!(non_domination_ranks(&points, None), vec![2, 0, 1, 0]);
/// assert_eq!(non_domination_ranks(&points, Some(1)), vec![1, 0, 1, 0]);
/// ```
///
/// # Panics
///
/// When the loss vectors differ in length (a history mixing studies of
/// different objective counts).
pub fn non_domination_ranks(points: &[Vec<f64>], n_below: Option<usize>) -> Vec<usize> {
    if points.is_empty() || n_below == Some(0) {
        return vec![0; points.len()];
    }
    if points.iter().all(|p| p.len() == 2 && !p[1].is_nan()) {
        let pairs: Vec<(f64, f64)> = points.iter().map(|p| (p[0], p[1])).collect();
        return ranks_of_pairs(&pairs, n_below);
    }
    let (unique, row_of) = unique_lexsorted(points);
    if points[0].len() == 1 {
        // Ranks by distinct value.
        return row_of;
    }
    let n_below = n_below.unwrap_or(unique.len()).min(unique.len());
    let mut rank_of_row = vec![0; unique.len()];
    let mut left: Vec<usize> = (0..unique.len()).collect();
    let mut rank = 0;
    while unique.len() - left.len() < n_below {
        let rows: Vec<usize> = left.iter().map(|&k| unique[k]).collect();
        let on = front_of_sorted(points, &rows);
        let mut rest = Vec::with_capacity(left.len());
        for (k, &row) in left.iter().enumerate() {
            if on[k] {
                rank_of_row[row] = rank;
            } else {
                rest.push(row);
            }
        }
        left = rest;
        rank += 1;
    }
    for &row in &left {
        rank_of_row[row] = rank;
    }
    row_of.iter().map(|&r| rank_of_row[r]).collect()
}

/// [`non_domination_ranks`] of 2-D points with no NaN second loss, in one
/// pass over their distinct rows instead of a pass per front. An earlier
/// row (in lexicographic order) is never dominated by a later one, and it
/// dominates a later row exactly when its second loss is not larger; so a
/// row joins the first front whose smallest second loss so far is larger
/// than its own, and those smallest losses rise from front to front (a
/// binary search finds it). Fronts after the one that brings the ranked
/// rows to `n_below` merge into the next rank, as the peeling stops there.
pub(crate) fn ranks_of_pairs(pairs: &[(f64, f64)], n_below: Option<usize>) -> Vec<usize> {
    if pairs.is_empty() || n_below == Some(0) {
        return vec![0; pairs.len()];
    }
    let (unique, row_of) = unique_lexsorted_pairs(pairs);
    let n_below = n_below.unwrap_or(unique.len()).min(unique.len());
    let mut smallest: Vec<f64> = Vec::new();
    let mut rank_of_row: Vec<usize> = unique
        .iter()
        .map(|&i| {
            let y = pairs[i].1;
            let k = smallest.partition_point(|&s| s <= y);
            if k == smallest.len() {
                smallest.push(y);
            } else {
                smallest[k] = y;
            }
            k
        })
        .collect();
    let mut count = vec![0usize; smallest.len()];
    rank_of_row.iter().for_each(|&r| count[r] += 1);
    let (mut last, mut ranked) = (0, count[0]);
    while ranked < n_below {
        last += 1;
        ranked += count[last];
    }
    rank_of_row.iter_mut().for_each(|r| *r = (*r).min(last + 1));
    row_of.iter().map(|&r| rank_of_row[r]).collect()
}

/// Optuna's `_fast_non_domination_rank` with penalties: feasible points
/// (penalty `<= 0`) ranked by [`non_domination_ranks`], then infeasible
/// ones after them by their penalty (the total violation); a NaN penalty
/// (a constraint that could not be measured) is infeasible and ranks with
/// the largest, as in Optuna.
///
/// # Panics
///
/// When `penalties` and the points differ in length, or the loss vectors
/// do among themselves.
pub fn constrained_ranks(
    points: &[Vec<f64>],
    penalty: &[f64],
    n_below: Option<usize>,
) -> Vec<usize> {
    assert_eq!(points.len(), penalty.len(), "one penalty per point");
    let n_below = n_below.unwrap_or(points.len());
    let feasible: Vec<usize> = (0..points.len()).filter(|&i| penalty[i] <= 0.0).collect();
    let infeasible: Vec<usize> = (0..points.len())
        .filter(|&i| penalty[i] > 0.0 || penalty[i].is_nan())
        .collect();
    let mut ranks = vec![0; points.len()];
    let f_points: Vec<Vec<f64>> = feasible.iter().map(|&i| points[i].clone()).collect();
    let f_ranks = non_domination_ranks(&f_points, Some(n_below));
    for (&i, &r) in feasible.iter().zip(&f_ranks) {
        ranks[i] = r;
    }
    let top = f_ranks.iter().max().map_or(0, |r| r + 1);
    let left = n_below.saturating_sub(feasible.len());
    let violation = |p: f64| if p.is_nan() { f64::INFINITY } else { p };
    let i_points: Vec<Vec<f64>> = infeasible
        .iter()
        .map(|&i| vec![violation(penalty[i])])
        .collect();
    let i_ranks = non_domination_ranks(&i_points, Some(left));
    for (&i, &r) in infeasible.iter().zip(&i_ranks) {
        ranks[i] = top + r;
    }
    ranks
}

/// The Pareto front of a study's COMPLETE trials, in trial order (Optuna's
/// `study.best_trials`: with `consider_constraints`, only feasible trials
/// compete, as Optuna does for a study whose trials carry constraints).
/// Trials without one value per direction are skipped.
pub fn pareto_front<'a>(
    trials: &'a [FrozenTrial],
    directions: &[StudyDirection],
    consider_constraints: bool,
) -> Vec<&'a FrozenTrial> {
    let candidates: Vec<(&FrozenTrial, Vec<f64>)> = trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .filter(|t| !consider_constraints || t.is_feasible())
        .filter_map(|t| loss_values(t, directions).map(|l| (t, l)))
        .collect();
    let points: Vec<Vec<f64>> = candidates.iter().map(|(_, l)| l.clone()).collect();
    pareto_front_indices(&points)
        .into_iter()
        .map(|i| candidates[i].0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Ranks from the definition: a point's rank is the length of the
    /// longest chain of points dominating it.
    fn brute_ranks(points: &[Vec<f64>]) -> Vec<usize> {
        let n = points.len();
        let mut rank = vec![usize::MAX; n];
        let mut assigned = 0;
        let mut r = 0;
        while assigned < n {
            let front: Vec<usize> = (0..n)
                .filter(|&i| rank[i] == usize::MAX)
                .filter(|&i| {
                    !(0..n).any(|j| rank[j] == usize::MAX && dominates(&points[j], &points[i]))
                })
                .collect();
            for i in front {
                rank[i] = r;
                assigned += 1;
            }
            r += 1;
        }
        rank
    }

    #[test]
    fn ranks_match_the_definition_on_random_points() {
        let mut rng = Rng::seed_from(3);
        for case in 0..300 {
            let m = 2 + case % 3;
            let n = 1 + case % 40;
            // Coarse grids, so ties and duplicates are common.
            let points: Vec<Vec<f64>> = (0..n)
                .map(|_| (0..m).map(|_| rng.below(5) as f64).collect())
                .collect();
            let want = brute_ranks(&points);
            assert_eq!(non_domination_ranks(&points, None), want, "case {case}");
            let front: Vec<usize> = (0..n).filter(|&i| want[i] == 0).collect();
            assert_eq!(pareto_front_indices(&points), front, "case {case}");
            // Peeled only until `k` distinct points are ranked: the ranks
            // below the cut are exact, the rest share one larger rank.
            let partial = non_domination_ranks(&points, Some(1 + case % n));
            // `n_below` counts distinct points, at most all of them.
            let mut distinct = points.clone();
            distinct.sort_by(|a, b| lex(a, b));
            distinct.dedup();
            let k = (1 + case % n).min(distinct.len());
            let cut = {
                // The smallest rank whose fronts hold at least k distinct points.
                let mut count = 0;
                let mut r = 0;
                loop {
                    let mut seen: Vec<&Vec<f64>> = (0..n)
                        .filter(|&i| want[i] == r)
                        .map(|i| &points[i])
                        .collect();
                    seen.sort_by(|a, b| lex(a, b));
                    seen.dedup();
                    count += seen.len();
                    if count >= k {
                        break r;
                    }
                    r += 1;
                }
            };
            for i in 0..n {
                if want[i] <= cut {
                    assert_eq!(partial[i], want[i], "case {case} point {i}");
                } else {
                    assert_eq!(partial[i], cut + 1, "case {case} point {i}");
                }
            }
        }
    }

    /// `-0.0` and `0.0` are one point, as numpy's `unique` holds them:
    /// neither dominates the other.
    #[test]
    fn negative_zero_is_zero() {
        for m in [2, 3] {
            let a = [vec![-0.0; m - 1], vec![1.0]].concat();
            let b = [vec![0.0; m - 1], vec![1.0]].concat();
            let points = [a.clone(), b.clone(), vec![2.0; m]];
            assert_eq!(
                non_domination_ranks(&points, None),
                vec![0, 0, 1],
                "m = {m}"
            );
            assert_eq!(pareto_front_indices(&points), vec![0, 1], "m = {m}");
            let swapped = [b, a, vec![2.0; m]];
            assert_eq!(
                non_domination_ranks(&swapped, None),
                vec![0, 0, 1],
                "m = {m}"
            );
        }
    }

    #[test]
    fn infeasible_points_rank_after_feasible_ones_by_violation() {
        let points = [
            vec![0.0, 0.0],
            vec![1.0, 1.0],
            vec![5.0, 0.0],
            vec![-1.0, -1.0],
            vec![-2.0, -2.0],
        ];
        let penalty = [0.0, 0.0, 0.0, 2.0, 1.0];
        assert_eq!(
            constrained_ranks(&points, &penalty, None),
            vec![0, 1, 1, 3, 2]
        );
        // A NaN penalty is infeasible, after every measured violation.
        let penalty = [0.0, f64::NAN, 0.0, 2.0, 1.0];
        assert_eq!(
            constrained_ranks(&points, &penalty, None),
            vec![0, 4, 1, 3, 2]
        );
    }

    #[test]
    fn the_front_of_a_study_skips_what_optuna_skips() {
        let dirs = [StudyDirection::Maximize, StudyDirection::Minimize];
        let mut trials = Vec::new();
        for (n, (state, values, violation)) in [
            (TrialState::Complete, Some(vec![0.9, 8.0]), 0.0),
            (TrialState::Complete, Some(vec![0.8, 4.0]), 0.0),
            (TrialState::Complete, Some(vec![0.7, 6.0]), 0.0), // dominated by 1
            (TrialState::Complete, Some(vec![0.95, 1.0]), 1.0), // infeasible
            (TrialState::Pruned, Some(vec![1.0, 0.0]), 0.0),
            (TrialState::Complete, Some(vec![0.5]), 0.0), // wrong length
        ]
        .into_iter()
        .enumerate()
        {
            let mut t = FrozenTrial::new(n as u64);
            t.state = state;
            t.values = values;
            t.system_attrs.insert(
                crate::trial::CONSTRAINTS_KEY.into(),
                serde_json::json!([violation]),
            );
            trials.push(t);
        }
        let numbers = |front: Vec<&FrozenTrial>| front.iter().map(|t| t.number).collect::<Vec<_>>();
        assert_eq!(numbers(pareto_front(&trials, &dirs, true)), vec![0, 1]);
        assert_eq!(numbers(pareto_front(&trials, &dirs, false)), vec![3]);
        assert!(constrained_dominates(&trials[0], &trials[3], &dirs));
        assert!(!constrained_dominates(&trials[2], &trials[0], &dirs));
        assert!(constrained_dominates(&trials[1], &trials[2], &dirs));
        assert!(!constrained_dominates(&trials[4], &trials[2], &dirs));
    }
}

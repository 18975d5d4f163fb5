//! A random forest of regression trees, grown as scikit-learn's
//! `RandomForestRegressor` grows them with the options Optuna's fANOVA
//! passes: bootstrap samples, every feature considered at each split,
//! squared-error splits at midpoints between distinct values, leaves of one
//! sample, depth at most `max_depth`.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// Values closer than this count as one (scikit-learn's `FEATURE_THRESHOLD`).
const FEATURE_THRESHOLD: f64 = 1e-7;

/// One node; children come after their parent in [`Tree::nodes`].
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The split feature, `None` for a leaf.
    pub feature: Option<usize>,
    /// Samples with `x[feature] <= threshold` go left.
    pub threshold: f64,
    pub left: usize,
    pub right: usize,
    /// The (bootstrap-weighted) mean target of the node's samples.
    pub value: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

impl Tree {
    #[cfg(test)]
    pub fn predict(&self, x: &[f64]) -> f64 {
        let mut i = 0;
        loop {
            let n = &self.nodes[i];
            match n.feature {
                None => return n.value,
                Some(f) => i = if x[f] <= n.threshold { n.left } else { n.right },
            }
        }
    }
}

/// Grows `n_trees` trees on rows `x` (one `Vec` per sample) and targets
/// `y`; tree `i` draws its bootstrap and feature order from `seed + i`.
pub fn fit(x: &[Vec<f64>], y: &[f64], n_trees: usize, max_depth: usize, seed: u64) -> Vec<Tree> {
    (0..n_trees)
        .into_par_iter()
        .map(|i| {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_add(i as u64));
            let mut weights = vec![0.0; y.len()];
            for _ in 0..y.len() {
                weights[rng.random_range(0..y.len())] += 1.0;
            }
            let samples: Vec<usize> = (0..y.len()).filter(|&s| weights[s] > 0.0).collect();
            let mut grower = Grower {
                x,
                y,
                weights: &weights,
                max_depth,
                rng,
                nodes: Vec::new(),
            };
            grower.grow(samples, 0);
            Tree {
                nodes: grower.nodes,
            }
        })
        .collect()
}

struct Grower<'a> {
    x: &'a [Vec<f64>],
    y: &'a [f64],
    weights: &'a [f64],
    max_depth: usize,
    rng: StdRng,
    nodes: Vec<Node>,
}

struct Split {
    feature: usize,
    threshold: f64,
    proxy: f64,
}

impl Grower<'_> {
    /// Adds the subtree of `samples` and returns its root's index.
    fn grow(&mut self, samples: Vec<usize>, depth: usize) -> usize {
        let (w, sum, sum_sq) = samples.iter().fold((0.0, 0.0, 0.0), |(w, s, q), &i| {
            let (wi, yi) = (self.weights[i], self.y[i]);
            (w + wi, s + wi * yi, q + wi * yi * yi)
        });
        let mean = sum / w;
        let impurity = sum_sq / w - mean * mean;
        let index = self.nodes.len();
        self.nodes.push(Node {
            feature: None,
            threshold: 0.0,
            left: 0,
            right: 0,
            value: mean,
        });
        if depth >= self.max_depth || samples.len() < 2 || impurity <= f64::EPSILON {
            return index;
        }
        let Some(split) = self.best_split(&samples, sum * sum / w) else {
            return index;
        };
        let (left, right): (Vec<usize>, Vec<usize>) = samples
            .into_iter()
            .partition(|&i| self.x[i][split.feature] <= split.threshold);
        let l = self.grow(left, depth + 1);
        let r = self.grow(right, depth + 1);
        let node = &mut self.nodes[index];
        node.feature = Some(split.feature);
        node.threshold = split.threshold;
        node.left = l;
        node.right = r;
        index
    }

    /// The split with the largest decrease of the squared error (its proxy
    /// `sum_l^2 / w_l + sum_r^2 / w_r` above the parent's), features tried
    /// in a random order and the first best kept, as scikit-learn does.
    fn best_split(&mut self, samples: &[usize], parent_proxy: f64) -> Option<Split> {
        let n_features = self.x[samples[0]].len();
        let mut features: Vec<usize> = (0..n_features).collect();
        features.shuffle(&mut self.rng);
        let mut best: Option<Split> = None;
        let mut order = samples.to_vec();
        let total_w: f64 = samples.iter().map(|&i| self.weights[i]).sum();
        let total_s: f64 = samples.iter().map(|&i| self.weights[i] * self.y[i]).sum();
        for f in features {
            order.sort_by(|&a, &b| self.x[a][f].total_cmp(&self.x[b][f]));
            let (lo, hi) = (self.x[order[0]][f], self.x[order[order.len() - 1]][f]);
            if hi <= lo + FEATURE_THRESHOLD {
                continue;
            }
            let (mut wl, mut sl) = (0.0, 0.0);
            for p in 1..order.len() {
                let prev = order[p - 1];
                wl += self.weights[prev];
                sl += self.weights[prev] * self.y[prev];
                let (a, b) = (self.x[prev][f], self.x[order[p]][f]);
                if b <= a + FEATURE_THRESHOLD {
                    continue;
                }
                let (wr, sr) = (total_w - wl, total_s - sl);
                let proxy = sl * sl / wl + sr * sr / wr;
                if best.as_ref().is_none_or(|s| proxy > s.proxy) {
                    let mid = a / 2.0 + b / 2.0;
                    let threshold = if mid == b || !mid.is_finite() { a } else { mid };
                    best = Some(Split {
                        feature: f,
                        threshold,
                        proxy,
                    });
                }
            }
        }
        best.filter(|s| s.proxy > parent_proxy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deep_forest_fits_a_step_exactly() {
        let x: Vec<Vec<f64>> = (0..40)
            .map(|i| vec![i as f64, (i * 7 % 13) as f64])
            .collect();
        let y: Vec<f64> = x
            .iter()
            .map(|r| if r[0] < 20.0 { 1.0 } else { 5.0 })
            .collect();
        let forest = fit(&x, &y, 8, 64, 3);
        assert_eq!(forest.len(), 8);
        for t in &forest {
            assert_eq!(t.predict(&[3.0, 0.0]), 1.0);
            assert_eq!(t.predict(&[35.0, 0.0]), 5.0);
            // The root splits on the feature that explains the step.
            assert_eq!(t.nodes[0].feature, Some(0));
        }
        assert_eq!(forest, fit(&x, &y, 8, 64, 3), "seeded: the same forest");
    }

    #[test]
    fn constant_targets_grow_a_single_leaf() {
        let x: Vec<Vec<f64>> = (0..10).map(|i| vec![i as f64]).collect();
        let forest = fit(&x, &[2.0; 10], 2, 64, 0);
        assert!(
            forest
                .iter()
                .all(|t| t.nodes.len() == 1 && t.nodes[0].value == 2.0)
        );
    }
}

//! fANOVA on one regression tree (Hutter et al., 2014), as Optuna's
//! `_FanovaTree` computes it: the tree cuts the search space into boxes;
//! the marginal prediction of some features is the volume-weighted average
//! of the boxes they fall into, and the variance of that marginal over the
//! features' own cells is their share of the tree's variance.

use super::forest::Tree;

pub struct FanovaTree<'a> {
    tree: &'a Tree,
    /// `[low, high]` of every encoded column.
    bounds: Vec<(f64, f64)>,
    /// Per node: the volume-weighted mean prediction of its subtree, and
    /// the volume of its box.
    stats: Vec<(f64, f64)>,
    /// Per feature: the midpoints and widths of the cells its split values
    /// cut its range into.
    midpoints: Vec<Vec<f64>>,
    sizes: Vec<Vec<f64>>,
    /// `n_nodes * n_features`: whether a node's subtree splits on a feature.
    subtree_splits: Vec<bool>,
    /// The variance of the tree's prediction over the whole space.
    pub variance: f64,
}

fn volume(space: &[(f64, f64)]) -> f64 {
    space.iter().map(|(lo, hi)| hi - lo).product()
}

fn weighted_variance(values: &[f64], weights: &[f64]) -> f64 {
    let w: f64 = weights.iter().sum();
    if w <= 0.0 {
        return 0.0;
    }
    let mean = values.iter().zip(weights).map(|(v, w)| v * w).sum::<f64>() / w;
    values
        .iter()
        .zip(weights)
        .map(|(v, wi)| wi * (v - mean) * (v - mean))
        .sum::<f64>()
        / w
}

impl<'a> FanovaTree<'a> {
    pub fn new(tree: &'a Tree, bounds: &[(f64, f64)]) -> Self {
        let n = tree.nodes.len();
        let d = bounds.len();
        // Boxes from the root down (children follow their parent).
        let mut boxes: Vec<Option<Vec<(f64, f64)>>> = vec![None; n];
        boxes[0] = Some(bounds.to_vec());
        let mut stats = vec![(0.0, 0.0); n];
        for i in 0..n {
            let space = boxes[i].take().expect("a parent sets its children's boxes");
            let node = &tree.nodes[i];
            match node.feature {
                None => stats[i] = (node.value, volume(&space)),
                Some(f) => {
                    let mut left = space.clone();
                    left[f].1 = node.threshold;
                    let mut right = space;
                    right[f].0 = node.threshold;
                    boxes[node.left] = Some(left);
                    boxes[node.right] = Some(right);
                }
            }
        }
        for i in (0..n).rev() {
            let node = &tree.nodes[i];
            if node.feature.is_some() {
                let (l, r) = (stats[node.left], stats[node.right]);
                let w = l.1 + r.1;
                let v = if w > 0.0 {
                    (l.0 * l.1 + r.0 * r.1) / w
                } else {
                    (l.0 + r.0) / 2.0
                };
                stats[i] = (v, w);
            }
        }
        let mut splits: Vec<Vec<f64>> = vec![Vec::new(); d];
        for node in &tree.nodes {
            if let Some(f) = node.feature {
                splits[f].push(node.threshold);
            }
        }
        let (mut midpoints, mut sizes) = (Vec::with_capacity(d), Vec::with_capacity(d));
        for (f, mut s) in splits.into_iter().enumerate() {
            s.sort_by(f64::total_cmp);
            s.dedup();
            let mut edges = vec![bounds[f].0];
            edges.extend(s);
            edges.push(bounds[f].1);
            midpoints.push(edges.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect());
            sizes.push(edges.windows(2).map(|w| w[1] - w[0]).collect());
        }
        let mut subtree_splits = vec![false; n * d];
        for i in (0..n).rev() {
            let node = &tree.nodes[i];
            if let Some(f) = node.feature {
                subtree_splits[i * d + f] = true;
                for c in [node.left, node.right] {
                    for k in 0..d {
                        subtree_splits[i * d + k] |= subtree_splits[c * d + k];
                    }
                }
            }
        }
        let (values, weights): (Vec<f64>, Vec<f64>) = tree
            .nodes
            .iter()
            .zip(&stats)
            .filter(|(node, _)| node.feature.is_none())
            .map(|(_, s)| *s)
            .unzip();
        FanovaTree {
            variance: weighted_variance(&values, &weights),
            tree,
            bounds: bounds.to_vec(),
            stats,
            midpoints,
            sizes,
            subtree_splits,
        }
    }

    /// The variance of the marginal prediction of `features` (the encoded
    /// columns of one parameter), over every combination of their cells.
    pub fn marginal_variance(&self, features: &[usize]) -> f64 {
        let d = self.bounds.len();
        let mut sample = vec![f64::NAN; d];
        let (mut values, mut weights) = (Vec::new(), Vec::new());
        let mut cell = vec![0usize; features.len()];
        loop {
            let mut size = 1.0;
            for (k, &f) in features.iter().enumerate() {
                sample[f] = self.midpoints[f][cell[k]];
                size *= self.sizes[f][cell[k]];
            }
            let (v, w) = self.marginalized(&sample);
            values.push(v);
            weights.push(w * size);
            // The next combination, odometer-style.
            let mut k = 0;
            loop {
                if k == features.len() {
                    return weighted_variance(&values, &weights).max(0.0);
                }
                cell[k] += 1;
                if cell[k] < self.midpoints[features[k]].len() {
                    break;
                }
                cell[k] = 0;
                k += 1;
            }
        }
    }

    /// The prediction at `sample` averaged over its NaN (marginalised)
    /// features, and the weight of that average.
    fn marginalized(&self, sample: &[f64]) -> (f64, f64) {
        let d = self.bounds.len();
        let active: Vec<usize> = (0..d).filter(|&f| !sample[f].is_nan()).collect();
        // Marginalised features span [0, 1]: only active widths count.
        let start: Vec<(f64, f64)> = (0..d)
            .map(|f| {
                if sample[f].is_nan() {
                    (0.0, 1.0)
                } else {
                    self.bounds[f]
                }
            })
            .collect();
        let mut stack = vec![(0usize, start)];
        let (mut sum, mut total) = (0.0, 0.0);
        while let Some((i, space)) = stack.pop() {
            let node = &self.tree.nodes[i];
            if let Some(f) = node.feature {
                let x = sample[f];
                if !x.is_nan() {
                    let mut next = space;
                    if x <= node.threshold {
                        next[f].1 = node.threshold;
                        stack.push((node.left, next));
                    } else {
                        next[f].0 = node.threshold;
                        stack.push((node.right, next));
                    }
                    continue;
                }
                if active.iter().any(|&a| self.subtree_splits[i * d + a]) {
                    stack.push((node.right, space.clone()));
                    stack.push((node.left, space));
                    continue;
                }
            }
            let (v, w) = self.stats[i];
            let weight = w / volume(&space);
            sum += v * weight;
            total += weight;
        }
        if total > 0.0 {
            (sum / total, total)
        } else {
            (0.0, 0.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::forest::{Node, Tree};
    use super::*;

    fn leaf(value: f64) -> Node {
        Node {
            feature: None,
            threshold: 0.0,
            left: 0,
            right: 0,
            value,
        }
    }

    #[test]
    fn a_tree_of_one_feature_explains_all_its_variance() {
        // x0 <= 0.5 -> 0, else 2: the variance over [0, 1]^2 is 1, all of it x0's.
        let tree = Tree {
            nodes: vec![
                Node {
                    feature: Some(0),
                    threshold: 0.5,
                    left: 1,
                    right: 2,
                    value: 1.0,
                },
                leaf(0.0),
                leaf(2.0),
            ],
        };
        let f = FanovaTree::new(&tree, &[(0.0, 1.0), (0.0, 1.0)]);
        assert!((f.variance - 1.0).abs() < 1e-12);
        assert!((f.marginal_variance(&[0]) - 1.0).abs() < 1e-12);
        assert_eq!(f.marginal_variance(&[1]), 0.0);
    }

    #[test]
    fn uneven_cells_are_weighted_by_their_width() {
        // x0 <= 0.25 -> 4, else 0 on [0, 1]: mean 1, variance 0.25*9 + 0.75*1 = 3.
        let tree = Tree {
            nodes: vec![
                Node {
                    feature: Some(0),
                    threshold: 0.25,
                    left: 1,
                    right: 2,
                    value: 2.0,
                },
                leaf(4.0),
                leaf(0.0),
            ],
        };
        let f = FanovaTree::new(&tree, &[(0.0, 1.0)]);
        assert!((f.variance - 3.0).abs() < 1e-12);
        assert!((f.marginal_variance(&[0]) - 3.0).abs() < 1e-12);
    }
}

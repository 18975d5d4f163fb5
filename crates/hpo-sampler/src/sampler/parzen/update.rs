//! An estimator updated in place when a few observations leave or join.
//!
//! In a running study the "above" set changes by a trial or two per ask (a
//! new trial joins, the oldest leaves, one crosses the split) while it holds
//! hundreds. Rebuilding its estimator re-reads every observation, re-sorts
//! every dimension and looks every kernel up again; an update touches only
//! what a change can reach. A kernel's width depends on its neighbours in
//! centre order (and, through the magic clip, on the number of kernels),
//! so a change re-derives the kernels next to each edit, and every kernel
//! only when the clip itself moves. The result is the estimator
//! [`Parzen::from_centres`] builds from the new set, bit for bit: the same
//! formulas ([`rank_gap`], [`sigma_bounds`], [`continuous_konst`], the cell
//! cache) on the same numbers, in the same kernel order (ascending ids).

use super::{
    Categorical, CellCache, Dim, Kernels, Numeric, Parzen, ParzenParams, Weights, categorical,
    continuous_konst, rank_gap, sigma_bounds, total_key,
};

impl Parzen {
    /// The estimator of this one's observations without the kernels at
    /// `removed` (indices, ascending) and with `added` (ids, ascending,
    /// none already present, each with its centres per dimension), weighted
    /// by `obs_weights` (the new set's, in id order). `params` must be
    /// the ones it was built with.
    pub fn update(
        &mut self,
        removed: &[usize],
        added: &[(u64, Box<[f64]>)],
        obs_weights: &[f64],
        params: ParzenParams,
    ) {
        debug_assert!(removed.is_sorted_by(|a, b| a < b));
        debug_assert!(added.is_sorted_by(|a, b| a.0 < b.0));
        // The new ids, and where each added one lands among them (in
        // ascending order, so a later insertion never moves an earlier one).
        let mut ids = std::mem::take(&mut self.ids);
        let old_n = ids.len();
        let removed_ids: Vec<u64> = removed.iter().map(|&i| ids[i]).collect();
        for &i in removed.iter().rev() {
            ids.remove(i);
        }
        let mut inserted = Vec::with_capacity(added.len());
        for &(id, _) in added {
            let at = ids.partition_point(|&other| other < id);
            debug_assert!(ids.get(at) != Some(&id), "an added id was present");
            ids.insert(at, id);
            inserted.push(at);
        }
        for (d, (dim, cells)) in self.dims.iter_mut().zip(&mut self.cells).enumerate() {
            let centre = |j: usize| added[j].1[d];
            match dim {
                Dim::Categorical(c) => {
                    splice(&mut c.template, removed, &inserted, |j| centre(j) as u32);
                    if old_n == ids.len() && old_n > 0 {
                        // As many kernels as before: the same templates, so
                        // only the edited kernels' probabilities move.
                        update_categorical(c, removed, &inserted);
                    } else {
                        let obs: Vec<f64> = c.template[..ids.len()]
                            .iter()
                            .map(|&t| f64::from(t))
                            .collect();
                        let n_choices = c.n_choices;
                        *dim = categorical(n_choices, &obs, params);
                    }
                }
                Dim::Numeric(num) => {
                    let edit = Edit {
                        removed,
                        inserted: &inserted,
                        removed_ids: &removed_ids,
                        ids: &ids,
                        old_n,
                    };
                    update_numeric(num, &edit, centre, params, cells);
                }
            }
        }
        self.ids = ids;
        if !self.w.made_from(obs_weights, params.prior_weight) {
            self.w = Weights::new(obs_weights, params.prior_weight);
        }
    }

    /// Whether a cell cache has outgrown its bound: an update would keep
    /// it growing (only a rebuild starts it over), so rebuild instead.
    pub fn needs_rebuild(&self) -> bool {
        self.cells.iter().any(CellCache::over_bound)
    }

    /// The index of the kernel of observation `id`, if it has one.
    pub fn kernel_of(&self, id: u64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }
}

/// One update's change of kernels, for each dimension.
struct Edit<'a> {
    /// Old indices leaving, ascending.
    removed: &'a [usize],
    /// New indices of the joining kernels, ascending.
    inserted: &'a [usize],
    /// The ids of the kernels at `removed`.
    removed_ids: &'a [u64],
    ids: &'a [u64],
    old_n: usize,
}

/// Removes the elements at `removed` (ascending indices), then inserts
/// `value(j)` at index `inserted[j]` of the result (ascending).
fn splice<T: Copy>(
    v: &mut Kernels<T>,
    removed: &[usize],
    inserted: &[usize],
    value: impl Fn(usize) -> T,
) {
    for &i in removed.iter().rev() {
        v.remove(i);
    }
    for (j, &i) in inserted.iter().enumerate() {
        v.insert(i, value(j));
    }
}

/// Edits each choice's column of `log_probs_by_choice` as `template` was
/// edited (the kernel count unchanged): `ln` of the template's probability,
/// as [`categorical`] computes it.
fn update_categorical(c: &mut Categorical, removed: &[usize], inserted: &[usize]) {
    let n_choices = c.n_choices;
    for (choice, column) in c.log_probs_by_choice.iter_mut().enumerate() {
        splice(column, removed, inserted, |j| {
            let t = c.template[inserted[j]] as usize;
            c.templates[t * n_choices + choice].ln()
        });
    }
}

fn update_numeric(
    d: &mut Numeric,
    edit: &Edit<'_>,
    centre: impl Fn(usize) -> f64,
    params: ParzenParams,
    cells: &mut CellCache,
) {
    let n = edit.ids.len();
    let (a_low, a_high) = (d.adapted_low, d.adapted_high);
    let gone: Vec<(u64, u64)> = edit
        .removed
        .iter()
        .zip(edit.removed_ids)
        .map(|(&i, &id)| (total_key(d.mu[i]), id))
        .collect();
    for entry in &gone {
        let at = d
            .sorted
            .binary_search(entry)
            .expect("a kernel's sorted entry");
        d.sorted.remove(at);
    }
    splice(&mut d.mu, edit.removed, edit.inserted, centre);
    for &i in edit.inserted {
        let entry = (total_key(d.mu[i]), edit.ids[i]);
        let at = d.sorted.partition_point(|e| *e < entry);
        d.sorted.insert(at, entry);
    }
    // Ranks whose width may have changed: every width is a gap between
    // ranks at most one apart (the range ends at ranks -1 and n), so those
    // next to an edit; all when the clip moved.
    let bounds = sigma_bounds(n, a_low, a_high, params);
    let old_bounds = sigma_bounds(edit.old_n, a_low, a_high, params);
    let ranks: Vec<usize> = if bounds != old_bounds || n < 4 {
        (0..n).collect()
    } else {
        let mut r = Vec::with_capacity(3 * (gone.len() + edit.inserted.len()));
        for entry in &gone {
            let at = d.sorted.partition_point(|e| e < entry);
            r.extend([at.saturating_sub(1), at]);
        }
        for &i in edit.inserted {
            let entry = (total_key(d.mu[i]), edit.ids[i]);
            let at = d.sorted.binary_search(&entry).expect("just inserted");
            r.extend([at.saturating_sub(1), at, at + 1]);
        }
        r.retain(|&r| r < n);
        r.sort_unstable();
        r.dedup();
        r
    };
    let index = |r: usize| {
        edit.ids
            .binary_search(&d.sorted[r].1)
            .expect("a kernel's id")
    };
    let sorted_mu = |j: usize| match j {
        0 => a_low,
        j if j == n + 1 => a_high,
        j => d.mu[index(j - 1)],
    };
    let nan = |_| f64::NAN;
    splice(&mut d.sigma, edit.removed, edit.inserted, nan);
    let widths: Vec<(usize, f64)> = ranks
        .into_iter()
        .map(|r| {
            let gap = rank_gap(sorted_mu, r, n, params.consider_endpoints);
            (index(r), gap.clamp(bounds.0, bounds.1))
        })
        .collect();
    splice(&mut d.inv_sigma, edit.removed, edit.inserted, nan);
    let discrete = d.step.is_some();
    if discrete {
        splice(&mut d.pair, edit.removed, edit.inserted, |_| 0);
        splice(&mut d.peak, edit.removed, edit.inserted, nan);
    } else {
        splice(&mut d.konst, edit.removed, edit.inserted, nan);
    }
    for (k, s) in widths {
        if s.to_bits() == d.sigma[k].to_bits() {
            continue;
        }
        let m = d.mu[k];
        d.sigma[k] = s;
        d.inv_sigma[k] = 1.0 / s;
        if discrete {
            (d.pair[k], d.peak[k]) = cells.pair(m, s, a_low, a_high);
        } else {
            d.konst[k] = continuous_konst(m, s, (a_low, a_high), || s.ln(), cells);
        }
    }
    debug_assert!(d.sigma.iter().all(|s| !s.is_nan()), "every width set");
    if discrete {
        d.distinct_pairs = cells.distinct(&d.pair);
    }
    d.tails.clear();
}

//! What finished trials contribute to the Parzen estimators of one search
//! space, kept across asks.
//!
//! A finished trial never changes, so its kernel centres (one per
//! dimension, see [`kernel_centre`]) are computed once. For each numeric
//! dimension the cache also keeps every cached trial in increasing centre
//! order: an ask then gets the order of its "below" and "above" sets by
//! filtering those lists, in linear time, instead of sorting each set in
//! each dimension (the largest cost of building the estimators at 1,000
//! trials). The orders equal [`centre_order`] of the sets' centres exactly,
//! so the estimators are the same bit for bit as built from scratch (a
//! fresh sampler per ask, as `memtune ask` runs, gives the same result as
//! a long-lived one).
//!
//! Each cached row records its trial's state and value; a trial that no
//! longer matches (an edited or replaced history) is recomputed and
//! re-indexed rather than misread. When the cache holds far more trials
//! than the history it is asked about, it starts over.

use super::parzen::{centre_order, kernel_centre, total_key};
use crate::distribution::Distribution;
use crate::trial::{FrozenTrial, TrialState};
use rustc_hash::FxHashMap;

/// One search space's cache (the space is the cache's key in the sampler).
#[derive(Default)]
pub(crate) struct SpaceCache {
    /// By trial number (a map: numbers may be sparse and as large as
    /// `u64::MAX`, so they cannot size a vector).
    rows: FxHashMap<u64, CachedRow>,
    /// Per dimension: `(centre key, trial number)` of every cached trial
    /// that has the whole space, sorted; empty for categoricals.
    sorted: Vec<Vec<(u64, u64)>>,
    /// Which dimensions have sorted lists (the numeric ones).
    numeric: Vec<bool>,
    /// Entries to add to `sorted`, merged in before it is read (so that
    /// filling an empty cache sorts once instead of inserting one by one).
    pending: Vec<Vec<(u64, u64)>>,
}

/// A finished trial's kernel centres for the space (`None`: it lacks a
/// parameter), with what identifies the trial.
struct CachedRow {
    state: TrialState,
    value_bits: u64,
    centres: Option<Box<[f64]>>,
}

fn identity(t: &FrozenTrial) -> u64 {
    t.value().unwrap_or(0.0).to_bits() ^ t.params.len() as u64
}

/// A set of trials' observations: `centres[d][i]` for observation `i`,
/// `orders[d]`, [`centre_order`] of `centres[d]` for numeric dimensions
/// (empty for categoricals), and each observation's trial number.
pub(crate) struct Observations {
    pub centres: Vec<Vec<f64>>,
    pub orders: Vec<Vec<u32>>,
    pub numbers: Vec<u64>,
}

impl Observations {
    pub fn len(&self) -> usize {
        self.centres.first().map_or(0, Vec::len)
    }
}

/// Below this many observations, sorting them directly is as cheap as
/// filtering the cache's sorted lists.
const SORT_DIRECTLY_BELOW: usize = 64;

impl SpaceCache {
    /// Start over if the cache holds many trials the history no longer has
    /// (so filtering its sorted lists stays linear in the history).
    pub fn fit_history(&mut self, history_len: usize) {
        if self.rows.len() > 2 * history_len + SORT_DIRECTLY_BELOW {
            *self = SpaceCache::default();
        }
    }

    /// The observations of `trials` (in their order) that have all of
    /// `space`. A stored value whose distribution differs is converted
    /// through its external value and skipped if it falls outside the
    /// current distribution.
    pub fn observations(
        &mut self,
        trials: &[&FrozenTrial],
        space: &[(&String, &Distribution)],
    ) -> Observations {
        self.shape(space);
        // (Not `vec![Vec::with_capacity(..); n]`: clones drop the capacity.)
        let mut centres: Vec<Vec<f64>> = (0..space.len())
            .map(|_| Vec::with_capacity(trials.len()))
            .collect();
        // Trial number of each observation, and whether the sorted lists
        // hold it (RUNNING trials are not cached).
        let mut numbers: Vec<(u64, bool)> = Vec::with_capacity(trials.len());
        for t in trials {
            let cached = self.refresh(t, space);
            let uncached;
            let row = if cached {
                self.rows.get(&t.number).and_then(|c| c.centres.as_deref())
            } else {
                uncached = centre_row(t, space);
                uncached.as_deref()
            };
            if let Some(row) = row {
                for (col, v) in centres.iter_mut().zip(row) {
                    col.push(*v);
                }
                numbers.push((t.number, cached));
            }
        }
        self.merge_pending();
        let orders = space
            .iter()
            .enumerate()
            .map(|(d, (_, dist))| match dist {
                Distribution::Categorical { .. } => Vec::new(),
                _ => self.order(d, &centres[d], &numbers),
            })
            .collect();
        let numbers = numbers.iter().map(|&(number, _)| number).collect();
        Observations {
            centres,
            orders,
            numbers,
        }
    }

    /// One trial's kernel centres for `space` (as [`SpaceCache::observations`]
    /// would read them), or `None` if it lacks a parameter.
    pub fn centres_of(
        &mut self,
        t: &FrozenTrial,
        space: &[(&String, &Distribution)],
    ) -> Option<Box<[f64]>> {
        self.shape(space);
        if !self.refresh(t, space) {
            return centre_row(t, space);
        }
        // Entries wait in `pending` until the next full read merges them:
        // keep that list short when only single trials are asked for.
        if self.pending.iter().any(|p| p.len() > 64) {
            self.merge_pending();
        }
        self.rows.get(&t.number)?.centres.clone()
    }

    /// Give a new cache its per-dimension lists.
    fn shape(&mut self, space: &[(&String, &Distribution)]) {
        if self.sorted.len() != space.len() {
            self.sorted = vec![Vec::new(); space.len()];
            self.pending = vec![Vec::new(); space.len()];
            self.numeric = space
                .iter()
                .map(|(_, d)| !matches!(d, Distribution::Categorical { .. }))
                .collect();
        }
    }

    /// Makes the cache hold trial `t`'s centres if it is finished (keeping
    /// them when they still match); returns whether it does.
    fn refresh(&mut self, t: &FrozenTrial, space: &[(&String, &Distribution)]) -> bool {
        if let Some(c) = self.rows.get(&t.number)
            && c.state == t.state
            && c.value_bits == identity(t)
        {
            return true;
        }
        if !t.state.is_finished() {
            return false;
        }
        let centres = centre_row(t, space);
        if let Some(old) = self.rows.remove(&t.number) {
            self.unindex(t.number, old.centres.as_deref());
        }
        self.index(t.number, centres.as_deref());
        self.rows.insert(
            t.number,
            CachedRow {
                state: t.state,
                value_bits: identity(t),
                centres,
            },
        );
        true
    }

    fn index(&mut self, number: u64, centres: Option<&[f64]>) {
        let Some(centres) = centres else { return };
        for ((pending, &c), _) in self
            .pending
            .iter_mut()
            .zip(centres)
            .zip(&self.numeric)
            .filter(|(_, n)| **n)
        {
            pending.push((total_key(c), number));
        }
    }

    fn unindex(&mut self, number: u64, centres: Option<&[f64]>) {
        let Some(centres) = centres else { return };
        let lists = self.sorted.iter_mut().zip(&mut self.pending).zip(centres);
        for (((list, pending), &c), _) in lists.zip(&self.numeric).filter(|(_, n)| **n) {
            let entry = (total_key(c), number);
            if let Some(at) = pending.iter().position(|e| *e == entry) {
                pending.swap_remove(at);
            } else if let Ok(at) = list.binary_search(&entry) {
                list.remove(at);
            }
        }
    }

    /// Add the pending entries to the sorted lists: a few by insertion,
    /// many by sorting them and merging.
    fn merge_pending(&mut self) {
        for (list, pending) in self.sorted.iter_mut().zip(&mut self.pending) {
            if pending.len() <= 8 {
                for entry in pending.drain(..) {
                    let at = list.partition_point(|e| *e < entry);
                    list.insert(at, entry);
                }
                continue;
            }
            pending.sort_unstable();
            let old = std::mem::take(list);
            list.reserve(old.len() + pending.len());
            let (mut a, mut b) = (old.into_iter().peekable(), pending.drain(..).peekable());
            while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
                list.push(if x <= y { a.next() } else { b.next() }.expect("peeked"));
            }
            list.extend(a);
            list.extend(b);
        }
    }

    /// [`centre_order`] of `centres` (dimension `d` of the observations
    /// numbered `numbers`, in increasing trial-number order), from the
    /// sorted list when the set is large.
    fn order(&self, d: usize, centres: &[f64], numbers: &[(u64, bool)]) -> Vec<u32> {
        let order = self.filtered_order(d, centres, numbers);
        // Each observation exactly once, or the lists are out of step with
        // the rows (a bug): never build an estimator on that.
        if order.len() == centres.len() {
            return order;
        }
        debug_assert!(false, "sorted lists out of step with the cached rows");
        centre_order(centres)
    }

    fn filtered_order(&self, d: usize, centres: &[f64], numbers: &[(u64, bool)]) -> Vec<u32> {
        let list = &self.sorted[d];
        let lo = numbers.first().map_or(0, |n| n.0);
        let hi = numbers.last().map_or(0, |n| n.0);
        // (Sparse numbers would size `pos` by their span, not their count.)
        if centres.len() < SORT_DIRECTLY_BELOW
            || list.len() > 4 * centres.len()
            || hi.saturating_sub(lo) >= 4 * centres.len() as u64
            || !numbers.is_sorted_by(|a, b| a.0 < b.0)
        {
            return centre_order(centres);
        }
        // Position of each cached observation by trial number (offset by
        // the smallest), NONE for trials outside the set.
        const NONE: u32 = u32::MAX;
        let mut pos = vec![NONE; (hi - lo + 1) as usize];
        let mut extra: Vec<(u64, u32)> = Vec::new();
        for (k, &(number, cached)) in numbers.iter().enumerate() {
            if cached {
                pos[(number - lo) as usize] = k as u32;
            } else {
                extra.push((total_key(centres[k]), k as u32));
            }
        }
        let cached = list.iter().filter_map(|&(_, number)| {
            let p = *pos.get(number.checked_sub(lo)? as usize)?;
            (p != NONE).then_some(p)
        });
        if extra.is_empty() {
            return cached.collect();
        }
        // Merge the uncached (RUNNING) ones in: under (key, index), which
        // is (key, trial number) since the set is in number order.
        extra.sort_unstable();
        let mut out = Vec::with_capacity(centres.len());
        let mut extra = extra.into_iter().peekable();
        for k in cached {
            let key = (total_key(centres[k as usize]), k);
            while let Some(&e) = extra.peek().filter(|e| **e < key) {
                out.push(e.1);
                extra.next();
            }
            out.push(k);
        }
        out.extend(extra.map(|e| e.1));
        out
    }
}

/// One trial's kernel centres for `space`, or `None` if it lacks a
/// parameter (or has one that the current distribution cannot hold).
fn centre_row(t: &FrozenTrial, space: &[(&String, &Distribution)]) -> Option<Box<[f64]>> {
    let mut row = Vec::with_capacity(space.len());
    for (name, dist) in space {
        let p = t.params.get(name.as_str())?;
        let v = if p.distribution == **dist {
            p.internal_in_distribution()?
        } else {
            match dist.to_internal(&p.value()) {
                Ok(v) if in_range(dist, v) => v,
                _ => return None,
            }
        };
        row.push(kernel_centre(dist, v));
    }
    Some(row.into_boxed_slice())
}

fn in_range(dist: &Distribution, v: f64) -> bool {
    match dist {
        Distribution::Float { low, high, .. } => *low <= v && v <= *high,
        Distribution::Int { low, high, .. } => *low as f64 <= v && v <= *high as f64,
        Distribution::Categorical { .. } => true,
    }
}

//! The free-block index of one (stream, pool): keys `size << 64 | address`
//! mapped to block indices, with "first key at or after" for best fit.
//!
//! Pools usually hold a handful of free blocks, where a sorted vector beats
//! a B-tree several times over (a binary search and a short `memmove`, no
//! node rebalancing). Past [`PROMOTE_AT`] entries the index switches to a
//! `BTreeMap`, so fragmented pools with thousands of blocks stay O(log n);
//! it switches back below [`DEMOTE_AT`] (the gap avoids flapping).

use std::collections::BTreeMap;

const PROMOTE_AT: usize = 128;
const DEMOTE_AT: usize = 32;

#[derive(Debug)]
pub(crate) enum FreeIndex {
    Sorted(Vec<(u128, u32)>),
    Tree(BTreeMap<u128, u32>),
}

impl Default for FreeIndex {
    fn default() -> Self {
        FreeIndex::Sorted(Vec::new())
    }
}

impl FreeIndex {
    #[inline]
    pub fn insert(&mut self, key: u128, idx: u32) {
        match self {
            FreeIndex::Sorted(v) => {
                let at = v.partition_point(|&(k, _)| k < key);
                v.insert(at, (key, idx));
                if v.len() > PROMOTE_AT {
                    *self = FreeIndex::Tree(v.drain(..).collect());
                }
            }
            FreeIndex::Tree(t) => {
                t.insert(key, idx);
            }
        }
    }

    /// Remove `key`; returns its block index.
    #[inline]
    pub fn remove(&mut self, key: u128) -> Option<u32> {
        match self {
            FreeIndex::Sorted(v) => {
                let at = v.partition_point(|&(k, _)| k < key);
                (v.get(at).is_some_and(|&(k, _)| k == key)).then(|| v.remove(at).1)
            }
            FreeIndex::Tree(t) => {
                let removed = t.remove(&key);
                if t.len() < DEMOTE_AT {
                    *self = FreeIndex::Sorted(std::mem::take(t).into_iter().collect());
                }
                removed
            }
        }
    }

    /// The first entry with a key at or after `key`.
    #[inline]
    pub fn first_at_or_after(&self, key: u128) -> Option<(u128, u32)> {
        match self {
            FreeIndex::Sorted(v) => v.get(v.partition_point(|&(k, _)| k < key)).copied(),
            FreeIndex::Tree(t) => t.range(key..).next().map(|(&k, &i)| (k, i)),
        }
    }

    pub fn get(&self, key: u128) -> Option<u32> {
        self.first_at_or_after(key)
            .filter(|&(k, _)| k == key)
            .map(|(_, i)| i)
    }

    pub fn len(&self) -> usize {
        match self {
            FreeIndex::Sorted(v) => v.len(),
            FreeIndex::Tree(t) => t.len(),
        }
    }

    pub fn keys(&self) -> Box<dyn Iterator<Item = u128> + '_> {
        match self {
            FreeIndex::Sorted(v) => Box::new(v.iter().map(|&(k, _)| k)),
            FreeIndex::Tree(t) => Box::new(t.keys().copied()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_btreemap_across_promotion_and_demotion() {
        let mut index = FreeIndex::default();
        let mut model = BTreeMap::new();
        let mut x: u64 = 12345;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = (x % 400) as u128;
            // Grow for a while, then shrink, so both representations are used.
            let grow = (step / 2000) % 2 == 0;
            if grow || x.is_multiple_of(4) {
                if model.insert(key, step).is_some() {
                    index.remove(key);
                }
                index.insert(key, step);
            } else {
                assert_eq!(index.remove(key), model.remove(&key));
            }
            assert_eq!(index.len(), model.len());
            let probe = ((x >> 20) % 420) as u128;
            assert_eq!(
                index.first_at_or_after(probe),
                model.range(probe..).next().map(|(&k, &v)| (k, v))
            );
        }
        assert!(index.keys().eq(model.keys().copied()));
    }
}

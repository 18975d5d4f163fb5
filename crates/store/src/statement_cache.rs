//! Prepared statements kept by their SQL text, at most [`CAPACITY`] of them.
//!
//! Some queries carry ids in their text (the trials a reader must read
//! again), so a long-lived connection meets new texts for as long as its
//! study grows. Each statement kept holds a plan on the server too; an
//! unbounded cache grew both without end. The least recently used one
//! leaves when the cache is full (dropping a `postgres::Statement` closes it
//! on the server), as rusqlite's `prepare_cached` keeps SQLite's bounded.

use std::collections::HashMap;

/// How many statements a connection keeps: every fixed text the store runs
/// fits, with room for a few texts of the moment.
pub(crate) const CAPACITY: usize = 64;

/// Statements (`S`) by SQL text, the least recently used evicted first.
#[derive(Debug)]
pub(crate) struct StatementCache<S> {
    entries: HashMap<String, (S, u64)>,
    /// Uses so far; an entry's stamp is the use that last touched it.
    clock: u64,
}

impl<S: Clone> StatementCache<S> {
    pub(crate) fn new() -> Self {
        StatementCache {
            entries: HashMap::with_capacity(CAPACITY),
            clock: 0,
        }
    }

    /// The statement for `sql`, if kept; it becomes the most recently used.
    pub(crate) fn get(&mut self, sql: &str) -> Option<S> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(sql).map(|(s, used)| {
            *used = clock;
            s.clone()
        })
    }

    /// Keeps `statement` for `sql`, evicting the least recently used
    /// statement when full (it is returned, to be dropped by the caller).
    pub(crate) fn insert(&mut self, sql: &str, statement: S) -> Option<S> {
        self.clock += 1;
        let evicted = if self.entries.len() >= CAPACITY && !self.entries.contains_key(sql) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            oldest.and_then(|k| self.entries.remove(&k)).map(|(s, _)| s)
        } else {
            None
        };
        self.entries
            .insert(sql.to_string(), (statement, self.clock));
        evicted
    }

    /// Forgets every statement (their connection is gone).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_statement_leaves_a_full_cache() {
        let mut cache = StatementCache::new();
        for i in 0..CAPACITY {
            assert_eq!(cache.insert(&format!("SELECT {i}"), i), None);
        }
        // "SELECT 0" is used again, so "SELECT 1" is now the oldest.
        assert_eq!(cache.get("SELECT 0"), Some(0));
        assert_eq!(cache.insert("SELECT new", 1000), Some(1));
        assert_eq!(cache.len(), CAPACITY);
        assert_eq!(cache.get("SELECT 1"), None);
        assert_eq!(cache.get("SELECT 0"), Some(0));
        assert_eq!(cache.get("SELECT new"), Some(1000));
        // Replacing a kept text evicts nothing.
        assert_eq!(cache.insert("SELECT new", 1001), None);
        assert_eq!(cache.get("SELECT new"), Some(1001));
        for i in 0..10 * CAPACITY {
            cache.insert(&format!("SELECT {i} + 1"), i);
        }
        assert_eq!(cache.len(), CAPACITY);
        cache.clear();
        assert_eq!(cache.len(), 0);
    }
}

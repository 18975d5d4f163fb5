//! Heartbeats for the runner's trials, from a thread with its own
//! connection, so a long epoch (the runner's loop is waiting on a worker)
//! never lets a live trial look stale, and a killed runner's trials stop
//! beating at once.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use store::{OpenOptions, Storage};

pub struct Heartbeats {
    ids: Arc<Mutex<BTreeSet<i64>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeats {
    /// Beats every `interval` for the trials in the set, through a second
    /// connection to the storage at `url`.
    pub fn start(url: &str, interval: Duration) -> store::Result<Self> {
        let storage = Storage::open_url(url, &OpenOptions::default())?;
        let ids = Arc::new(Mutex::new(BTreeSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ids2, stop2) = (Arc::clone(&ids), Arc::clone(&stop));
        let thread = std::thread::spawn(move || beat(storage, ids2, stop2, interval));
        Ok(Self {
            ids,
            stop,
            thread: Some(thread),
        })
    }

    pub fn add(&self, trial_id: i64) {
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(trial_id);
    }

    pub fn remove(&self, trial_id: i64) {
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&trial_id);
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn beat(
    storage: Storage,
    ids: Arc<Mutex<BTreeSet<i64>>>,
    stop: Arc<AtomicBool>,
    interval: Duration,
) {
    let tick = Duration::from_millis(50).min(interval);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        waited += tick;
        if waited < interval {
            continue;
        }
        waited = Duration::ZERO;
        let now: Vec<i64> = ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        for id in now {
            if let Err(e) = storage.heartbeat(id) {
                tracing::warn!(trial_id = id, "heartbeat failed: {e}");
            }
        }
    }
}

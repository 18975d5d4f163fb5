//! Heartbeats for the runner's trials, from a thread with its own
//! connection, so nothing the runner's loop does (a long epoch, a slow
//! sampler, a storage write waiting for a lock) delays them, and a killed
//! runner's trials stop beating at once.
//!
//! The connection commits without waiting for the disk
//! ([`store::Durability::Normal`]): a heartbeat lost to a power cut is
//! harmless, and an fsync that a busy disk makes slow must not make a
//! live trial look dead. A lost connection is re-established within one
//! interval, and a trial that another process took over meanwhile (its
//! heartbeat write finds it finished) is reported as lost, so the runner
//! stops working on it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use store::{OpenOptions, Storage};

pub struct Heartbeats {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    ids: Mutex<BTreeSet<i64>>,
    /// Trials found finished by someone else.
    lost: Mutex<BTreeSet<i64>>,
    stop: AtomicBool,
}

impl Heartbeats {
    /// Beats every `interval` for the trials in the set, through a second
    /// connection to the storage at `url`.
    pub fn start(url: &str, interval: Duration) -> store::Result<Self> {
        let opts = OpenOptions {
            durability: store::Durability::Normal,
            max_backoff: interval,
            ..OpenOptions::default()
        };
        let storage = Storage::open_url(url, &opts)?;
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("heartbeats".into())
                .spawn(move || beat(&storage, &shared, interval))
                .expect("a thread can be started")
        };
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    pub fn add(&self, trial_id: i64) {
        lock(&self.shared.ids).insert(trial_id);
    }

    pub fn remove(&self, trial_id: i64) {
        lock(&self.shared.ids).remove(&trial_id);
        lock(&self.shared.lost).remove(&trial_id);
    }

    /// Trials whose heartbeat found them finished by another process (taken
    /// over as stale); each reported once, and no longer beaten.
    pub fn take_lost(&self) -> BTreeSet<i64> {
        std::mem::take(&mut *lock(&self.shared.lost))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn beat(storage: &Storage, shared: &Shared, interval: Duration) {
    let tick = Duration::from_millis(50).min(interval);
    let mut next = Instant::now() + interval;
    let mut last_round = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        let now = Instant::now();
        if now < next {
            continue;
        }
        // Deadlines, not sleeps: a round that ran late is not followed by
        // a full interval of silence.
        next = (next + interval).max(now);
        let late = now.duration_since(last_round);
        if late > 2 * interval {
            tracing::warn!(
                "heartbeats were {:.1} s apart (interval {:.1} s): this process was stopped or starved",
                late.as_secs_f64(),
                interval.as_secs_f64()
            );
        }
        last_round = now;
        let ids: Vec<i64> = lock(&shared.ids).iter().copied().collect();
        for id in ids {
            match storage.heartbeat(id) {
                Ok(()) => {}
                Err(store::StoreError::TrialFinished { number, state }) => {
                    if !lock(&shared.ids).remove(&id) {
                        // The runner finished it meanwhile.
                        continue;
                    }
                    tracing::warn!(
                        trial = number,
                        "trial {number} is already {state}: another process took it over"
                    );
                    lock(&shared.lost).insert(id);
                }
                Err(e) => tracing::warn!(trial_id = id, "heartbeat failed: {e}"),
            }
        }
    }
}

//! Shared by the criterion bench and the `sampler_bench` (which `cargo
//! xtask bench sampler` runs) and `ask_latency` examples: the 6-parameter
//! `space6` (a fine-tuning space), histories, one ask-and-tell step, and the quality
//! test functions. The Python side
//! (benches/sampler/optuna_bench.py) defines the same ones.
#![allow(dead_code)]

use hpo_sampler::{
    Distribution, FrozenTrial, Param, ParamValue, RandomSampler, Sampler, SearchSpace,
    StudyDirection, StudyView, TrialState, ask,
};
use std::collections::BTreeMap;

/// lr (float, log), weight_decay (float), batch_size (int, step 16),
/// warmup_steps (int, log), optimizer and scheduler (categoricals).
pub fn space6() -> SearchSpace {
    let s = |v: &str| ParamValue::Str(v.into());
    BTreeMap::from([
        (
            "lr".into(),
            Distribution::float(1e-5, 1e-1, true, None).unwrap(),
        ),
        (
            "weight_decay".into(),
            Distribution::float(0.0, 0.3, false, None).unwrap(),
        ),
        (
            "batch_size".into(),
            Distribution::int(16, 256, false, 16).unwrap(),
        ),
        (
            "warmup_steps".into(),
            Distribution::int(1, 1000, true, 1).unwrap(),
        ),
        (
            "optimizer".into(),
            Distribution::categorical(vec![s("adam"), s("adamw"), s("sgd")]).unwrap(),
        ),
        (
            "scheduler".into(),
            Distribution::categorical(vec![s("linear"), s("cosine"), s("constant")]).unwrap(),
        ),
    ])
}

/// A smooth synthetic loss over `space6`, the same formula as the Python script.
pub fn objective6(params: &BTreeMap<String, Param>) -> f64 {
    let f = |k: &str| params[k].value().as_f64().unwrap();
    let lr = f("lr").log10();
    let wd = f("weight_decay");
    let bs = f("batch_size");
    let ws = f("warmup_steps").ln();
    let opt = params["optimizer"].internal;
    let sch = params["scheduler"].internal;
    (lr + 3.5).powi(2)
        + 4.0 * (wd - 0.1).powi(2)
        + ((bs - 64.0) / 128.0).powi(2)
        + 0.05 * (ws - 4.0).powi(2)
        + [0.0, -0.2, 0.5][opt as usize]
        + [0.1, 0.0, 0.3][sch as usize]
}

/// A COMPLETE trial from params and a value.
pub fn complete(number: u64, params: BTreeMap<String, Param>, value: f64) -> FrozenTrial {
    let mut t = FrozenTrial::new(number);
    t.state = TrialState::Complete;
    t.params = params;
    t.values = Some(vec![value]);
    t
}

/// `n` COMPLETE trials with random params over `space` and values from `objective6`.
pub fn random_history(n: usize, seed: u64) -> Vec<FrozenTrial> {
    let space = space6();
    let mut rs = RandomSampler::new(Some(seed));
    (0..n as u64)
        .map(|i| {
            let params: BTreeMap<String, Param> = space
                .iter()
                .map(|(k, d)| {
                    (
                        k.clone(),
                        Param {
                            distribution: d.clone(),
                            internal: rs.draw(d),
                        },
                    )
                })
                .collect();
            let v = objective6(&params);
            complete(i, params, v)
        })
        .collect()
}

/// A study history of a fixed size that moves on with every tell: the told
/// trial joins and the oldest leaves. Every ask therefore sees `n` trials
/// and a history two trials different from the last ask's (one more
/// change than a growing study), so a sampler that reuses work across asks
/// is measured on changed histories, never on the same one twice.
pub struct SlidingHistory {
    trials: Vec<FrozenTrial>,
    start: usize,
    n: usize,
}

impl SlidingHistory {
    /// `n` COMPLETE trials of `random_history`.
    pub fn new(n: usize, seed: u64) -> Self {
        SlidingHistory {
            trials: random_history(n, seed),
            start: 0,
            n,
        }
    }

    /// No trials yet: the history grows to `n` before trials leave it.
    pub fn empty(n: usize) -> Self {
        SlidingHistory {
            trials: Vec::new(),
            start: 0,
            n,
        }
    }

    pub fn view(&self) -> &[FrozenTrial] {
        &self.trials[self.start..]
    }

    /// The number of the next trial.
    pub fn next_number(&self) -> u64 {
        self.trials.last().map_or(0, |t| t.number + 1)
    }

    /// Append a finished trial and drop the oldest once there are `n`.
    pub fn tell(&mut self, trial: FrozenTrial) {
        self.trials.push(trial);
        if self.trials.len() - self.start > self.n {
            self.start += 1;
        }
    }

    /// One ask of `sampler` on `space` (which `objective6` evaluates) over
    /// this history, and the tell of its result: one step of a running
    /// study.
    pub fn ask_and_tell<S: Sampler>(&mut self, sampler: &mut S, space: &SearchSpace) {
        let number = self.next_number();
        let study = StudyView {
            name: "bench",
            direction: StudyDirection::Minimize,
            directions: &[],
            trials: self.view(),
        };
        let params = ask(sampler, study, number, space).expect("valid space");
        let value = objective6(&params);
        self.tell(complete(number, params, value));
    }

    /// Free the trials that left the window (outside any timed region).
    pub fn compact(&mut self) {
        if self.start > 4 * self.n {
            self.trials.drain(..self.start);
            self.start = 0;
        }
    }
}

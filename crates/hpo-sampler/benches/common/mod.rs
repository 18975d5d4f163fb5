//! Shared by the criterion bench and the `sampler_bench` example (which
//! `cargo xtask bench sampler` runs): the 6-parameter space of the issue,
//! histories, and the quality test functions. The Python side
//! (benches/sampler/optuna_bench.py) defines the same ones.
#![allow(dead_code)]

use hpo_sampler::{
    Distribution, FrozenTrial, Param, ParamValue, RandomSampler, SearchSpace, TrialState,
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

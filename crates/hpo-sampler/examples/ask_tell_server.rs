//! Our samplers behind a line protocol, so a benchmark written in Python
//! (benches/sampler/coco_suite.py: COCO's suites, the multi-objective
//! problems) drives them through the same ask/tell loop as Optuna's.
//!
//! One JSON object per line on stdin, one answer per line on stdout:
//! - `{"cmd": "study", "sampler": "tpe", "seed": 3, "directions":
//!   ["minimize", ...], "space": [["x0", "float", -5, 5], ["x1", "int", 0,
//!   3], ...]}` starts a new study (samplers: `tpe`, `tpe-many` (96
//!   candidates, 4 finalists), `tpe-mv` (multivariate on several
//!   objectives), `gp`, `auto`, `gp-ehvi` and `auto-ehvi` (expected
//!   hypervolume improvement instead of ParEGO on two objectives), `nsga2`,
//!   `random`); answers `{"ok": true}`;
//! - `{"cmd": "ask"}` answers `{"number": N, "params": [..]}`, the values
//!   in the space's order (ints as numbers);
//! - `{"cmd": "tell", "number": N, "values": [..], "constraints": [..]}`
//!   completes trial N (constraints optional, feasible when all `<= 0`);
//!   answers `{"ok": true}`;
//! - `{"cmd": "hypervolume", "reference": [..]}` answers `{"hypervolume":
//!   H}` of the COMPLETE feasible trials' losses;
//! - `{"cmd": "time", "reps": 20}` answers `{"median_us": T}`: the median
//!   of `reps` ask + tell pairs as the study grows from its current size.
//!
//! cargo run --release -p hpo-sampler --example ask_tell_server

use hpo_sampler::multi::{hypervolume, loss_values};
use hpo_sampler::trial::CONSTRAINTS_KEY;
use hpo_sampler::{
    AutoConfig, AutoSampler, Distribution, FrozenTrial, GpConfig, GpSampler, NsgaIIConfig,
    NsgaIISampler, RandomSampler, Sampler, SearchSpace, StudyDirection, StudyView, TpeConfig,
    TpeSampler, TrialState,
};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::time::Instant;

fn make(label: &str, seed: u64) -> Box<dyn Sampler> {
    let tpe = TpeConfig {
        seed: Some(seed),
        ..TpeConfig::default()
    };
    let gp = GpConfig {
        seed: Some(seed),
        ..GpConfig::default()
    };
    // Two objectives by expected hypervolume improvement (Optuna's
    // acquisition) instead of one random scalarisation per ask.
    let ehvi = GpConfig {
        hypervolume_improvement: true,
        ..gp.clone()
    };
    match label {
        "tpe" => Box::new(TpeSampler::new(tpe)),
        "tpe-many" => Box::new(TpeSampler::new(TpeConfig {
            seed: Some(seed),
            ..TpeConfig::many_candidates()
        })),
        "tpe-mv" => Box::new(TpeSampler::new(TpeConfig {
            multivariate_multi_objective: true,
            ..tpe
        })),
        "gp" => Box::new(GpSampler::new(gp)),
        "auto" => Box::new(AutoSampler::new(AutoConfig::default(), gp, tpe)),
        "gp-ehvi" => Box::new(GpSampler::new(ehvi)),
        "auto-ehvi" => Box::new(AutoSampler::new(AutoConfig::default(), ehvi, tpe)),
        "nsga2" => Box::new(NsgaIISampler::new(NsgaIIConfig {
            seed: Some(seed),
            ..NsgaIIConfig::default()
        })),
        "random" => Box::new(RandomSampler::new(Some(seed))),
        other => panic!("unknown sampler {other}"),
    }
}

struct Session {
    sampler: Box<dyn Sampler>,
    directions: Vec<StudyDirection>,
    space: SearchSpace,
    order: Vec<String>,
    trials: Vec<FrozenTrial>,
}

impl Session {
    fn ask(&mut self) -> u64 {
        let number = self.trials.len() as u64;
        let study = StudyView::with_directions("bench", &self.directions, &self.trials);
        let params = hpo_sampler::ask(self.sampler.as_mut(), study, number, &self.space)
            .expect("a valid space");
        let attrs = self.sampler.system_attrs(&study, number);
        let mut t = FrozenTrial::new(number);
        t.params = params;
        t.system_attrs = attrs.into_iter().map(|(k, v)| (k, json!(v))).collect();
        self.trials.push(t);
        number
    }

    fn tell(&mut self, number: u64, values: Vec<f64>, constraints: Vec<f64>) {
        let t = &mut self.trials[number as usize];
        t.state = TrialState::Complete;
        t.values = Some(values);
        if !constraints.is_empty() {
            t.system_attrs
                .insert(CONSTRAINTS_KEY.to_string(), json!(constraints));
        }
    }
}

fn parse_space(v: &Value) -> (SearchSpace, Vec<String>) {
    let mut space = SearchSpace::new();
    let mut order = Vec::new();
    for p in v.as_array().expect("space is a list") {
        let name = p[0].as_str().expect("a name").to_string();
        let lo = p[2].as_f64().expect("low");
        let hi = p[3].as_f64().expect("high");
        let d = match p[1].as_str() {
            Some("float") => Distribution::float(lo, hi, false, None),
            Some("int") => Distribution::int(lo as i64, hi as i64, false, 1),
            Some("categorical") => Distribution::categorical(
                (lo as i64..=hi as i64)
                    .map(hpo_sampler::ParamValue::Int)
                    .collect(),
            ),
            other => panic!("unknown kind {other:?}"),
        }
        .expect("a valid distribution");
        order.push(name.clone());
        space.insert(name, d);
    }
    (space, order)
}

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut session: Option<Session> = None;
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = serde_json::from_str(&line).expect("a JSON line");
        let answer = match msg["cmd"].as_str() {
            Some("study") => {
                let label = msg["sampler"].as_str().expect("sampler").to_string();
                let seed = msg["seed"].as_u64().unwrap_or(0);
                let directions = msg["directions"]
                    .as_array()
                    .expect("directions")
                    .iter()
                    .map(|d| match d.as_str() {
                        Some("maximize") => StudyDirection::Maximize,
                        _ => StudyDirection::Minimize,
                    })
                    .collect();
                let (space, order) = parse_space(&msg["space"]);
                session = Some(Session {
                    sampler: make(&label, seed),
                    directions,
                    space,
                    order,
                    trials: Vec::new(),
                });
                json!({"ok": true})
            }
            Some("ask") => {
                let s = session.as_mut().expect("a study first");
                let number = s.ask();
                let t = &s.trials[number as usize];
                let params: Vec<f64> = s.order.iter().map(|n| t.params[n].internal).collect();
                json!({"number": number, "params": params})
            }
            Some("tell") => {
                let s = session.as_mut().expect("a study first");
                let number = msg["number"].as_u64().expect("number");
                let values = serde_json::from_value(msg["values"].clone()).expect("values");
                let constraints =
                    serde_json::from_value(msg["constraints"].clone()).unwrap_or_default();
                s.tell(number, values, constraints);
                json!({"ok": true})
            }
            Some("hypervolume") => {
                let s = session.as_ref().expect("a study first");
                let reference: Vec<f64> =
                    serde_json::from_value(msg["reference"].clone()).expect("reference");
                let points: Vec<Vec<f64>> = s
                    .trials
                    .iter()
                    .filter(|t| t.state == TrialState::Complete)
                    .filter(|t| t.is_feasible())
                    .filter_map(|t| loss_values(t, &s.directions))
                    .collect();
                json!({"hypervolume": hypervolume(&points, &reference)})
            }
            Some("time") => {
                // One ask + tell at a time as the study grows from its
                // current size (told the last trial's values again).
                let s = session.as_mut().expect("a study first");
                let reps = msg["reps"].as_u64().unwrap_or(20) as usize;
                let values = s
                    .trials
                    .iter()
                    .rev()
                    .find_map(|t| t.values.clone())
                    .unwrap_or_default();
                let mut times = Vec::with_capacity(reps);
                for _ in 0..reps {
                    let start = Instant::now();
                    let n = s.ask();
                    s.tell(n, values.clone(), Vec::new());
                    times.push(start.elapsed().as_secs_f64() * 1e6);
                }
                times.sort_by(f64::total_cmp);
                json!({"median_us": times[times.len() / 2]})
            }
            other => panic!("unknown command {other:?}"),
        };
        writeln!(out, "{answer}").expect("stdout");
        out.flush().expect("stdout");
    }
}

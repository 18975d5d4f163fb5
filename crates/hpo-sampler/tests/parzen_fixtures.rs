//! Our Parzen estimator against Optuna 5.0's `_ParzenEstimator` on fixed
//! observations (benches/sampler/parzen_fixtures.py writes
//! fixtures/parzen/optuna_parzen.json): every log-density must match, except
//! in cases where equal observations make the result depend on numpy's
//! unstable (machine-dependent) argsort; those only have to be finite.

use hpo_sampler::internals::{Parzen, ParzenParams};
use hpo_sampler::sampler::default_weights;
use hpo_sampler::{Distribution, ParamValue};
use serde_json::Value;

/// A fixture's distribution, as Optuna's `distribution_to_json` wrote it
/// (the fixture holds the three current classes, with str, int and None
/// choices).
fn distribution(v: &Value) -> Distribution {
    let a = &v["attributes"];
    let log = a["log"].as_bool().unwrap_or(false);
    let choice = |c: &Value| match c {
        Value::Null => ParamValue::None,
        Value::String(s) => ParamValue::Str(s.clone()),
        _ => ParamValue::Int(c.as_i64().unwrap()),
    };
    match v["name"].as_str().unwrap() {
        "FloatDistribution" => Distribution::float(
            a["low"].as_f64().unwrap(),
            a["high"].as_f64().unwrap(),
            log,
            a["step"].as_f64(),
        ),
        "IntDistribution" => Distribution::int(
            a["low"].as_i64().unwrap(),
            a["high"].as_i64().unwrap(),
            log,
            a["step"].as_i64().unwrap(),
        ),
        "CategoricalDistribution" => Distribution::categorical(
            a["choices"]
                .as_array()
                .unwrap()
                .iter()
                .map(choice)
                .collect(),
        ),
        other => panic!("{other} is not in the fixture's vocabulary"),
    }
    .unwrap()
}

#[test]
fn log_densities_match_optuna() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/parzen/optuna_parzen.json"
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let params = ParzenParams {
        prior_weight: 1.0,
        consider_magic_clip: true,
        consider_endpoints: false,
    };
    let floats = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    let mut exact = 0;
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let order: Vec<&str> = case["order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let dists: Vec<_> = order
            .iter()
            .map(|k| distribution(&case["space"][k]))
            .collect();
        let dist_refs: Vec<_> = dists.iter().collect();
        let obs: Vec<Vec<f64>> = order
            .iter()
            .map(|k| floats(&case["observations"][k]))
            .collect();
        let points: Vec<Vec<f64>> = order.iter().map(|k| floats(&case["points"][k])).collect();
        let n = obs[0].len();
        let mut p = Parzen::new(&dist_refs, &obs, &default_weights(n), params);
        let got = p.log_pdf(&points);
        let want = floats(&case["log_pdf"]);
        assert_eq!(got.len(), want.len(), "{name}");
        if case["ties_matter"].as_bool().unwrap() {
            assert!(got.iter().all(|g| g.is_finite()), "{name}: {got:?}");
            continue;
        }
        exact += 1;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if (g - w).abs() > 1e-9 * w.abs().max(1.0) {
                failures.push(format!("{name}: point {i}: ours {g}, Optuna {w}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(exact >= 25, "only {exact} cases compared exactly");
}

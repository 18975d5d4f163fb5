//! Section 5: every FAIL and PRUNED trial with its error kind, message and
//! parameters.

use store::{FrozenTrial, TrialState};

use super::html::{Section, note, table};
use super::input::ReportInput;
use crate::render;

pub fn section(input: &ReportInput) -> Section {
    let rows: Vec<Vec<String>> = input
        .trials
        .iter()
        .filter(|t| matches!(t.state, TrialState::Fail | TrialState::Pruned))
        .map(|t| {
            let (kind, message) = why(t);
            vec![
                t.number.to_string(),
                t.state.to_string(),
                kind,
                message,
                render::params(t),
            ]
        })
        .collect();
    let html = if rows.is_empty() {
        note("No trial failed or was pruned.")
    } else {
        table(&["trial", "state", "kind", "message", "params"], &rows)
    };
    Section::shown("failures", "Failures and pruned trials", html)
}

/// The recorded kind and message; a trial pruned by the pruner records
/// none, so its last step says what happened.
fn why(t: &FrozenTrial) -> (String, String) {
    let text = |k: &str| t.user_attrs.get(k).map(render::json_token);
    match (text("error_kind"), text("error_msg")) {
        (Some(kind), msg) => (kind, msg.unwrap_or_default()),
        (None, Some(msg)) => (String::new(), msg),
        (None, None) if t.state == TrialState::Pruned => (
            "pruned".into(),
            t.intermediate_values
                .iter()
                .next_back()
                .map(|(s, v)| {
                    format!(
                        "stopped by the pruner after step {s} at {}",
                        render::float(*v)
                    )
                })
                .unwrap_or_else(|| "stopped by the pruner".into()),
        ),
        (None, None) => match t.system_attrs.get("fail_reason") {
            Some(r) => ("fail_reason".into(), render::json_token(r)),
            None => (String::new(), "no reason recorded".into()),
        },
    }
}

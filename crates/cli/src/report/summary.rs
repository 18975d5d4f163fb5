//! Section 1, the study at a glance: best value and params, trials by
//! state, wall time, trials per hour, device and storage.

use std::collections::BTreeMap;

use store::TrialState;

use super::chart::short;
use super::html::{Section, escape, table};
use super::input::{MemoryAttrs, ReportInput, seconds};
use crate::render;

pub fn section(input: &ReportInput) -> Section {
    let mut html = String::new();
    let objective = if input.n_objectives > 1 {
        let each: Vec<String> = input
            .objective_names
            .iter()
            .zip(&input.directions)
            .map(|(name, d)| format!("{name} ({})", d.as_str().to_lowercase()))
            .collect();
        format!(
            "{} objectives: {} (history, importance and parameter charts show the first)",
            input.n_objectives,
            each.join(", ")
        )
    } else {
        input.direction.to_string()
    };
    let (wall, finished) = wall_time(input);
    let mut rows = vec![
        vec!["study".into(), input.study_name.clone()],
        vec!["direction".into(), objective],
        vec!["storage".into(), input.storage.clone()],
        vec!["trials".into(), input.trials.len().to_string()],
        vec!["devices".into(), devices(input)],
    ];
    let random = random_weight_presets(input);
    if !random.is_empty() {
        rows.push(vec![
            "random weights".into(),
            format!(
                "{} trials trained preset architectures from random weights ({}): their values \
                 measure speed and memory, not what a checkpoint would learn",
                random.values().sum::<usize>(),
                random.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ]);
    }
    match wall {
        Some(w) if w > 0.0 => {
            rows.push(vec!["wall time".into(), duration(w)]);
            rows.push(vec![
                "finished trials per hour".into(),
                format!("{:.1}", finished as f64 * 3600.0 / w),
            ]);
        }
        _ => rows.push(vec!["wall time".into(), "not recorded".into()]),
    }
    html.push_str(&table(&["", ""], &rows));

    if input.n_objectives > 1 {
        html.push_str(&front_table(input));
    } else {
        html.push_str(&best_trial(input));
    }

    html.push_str("<h3>Trials by state</h3>");
    let mut counts: BTreeMap<TrialState, usize> = BTreeMap::new();
    for t in &input.trials {
        *counts.entry(t.state).or_default() += 1;
    }
    let rows: Vec<Vec<String>> = TrialState::ALL
        .iter()
        .map(|s| {
            vec![
                s.to_string(),
                counts.get(s).copied().unwrap_or(0).to_string(),
            ]
        })
        .collect();
    html.push_str(&table(&["state", "trials"], &rows));
    Section::shown("summary", "Summary", html)
}

/// The best trial of a single-objective study, with its params: the
/// trial `memtune best` and Optuna's `best_trial` name.
fn best_trial(input: &ReportInput) -> String {
    let mut html = String::from("<h3>Best trial</h3>");
    let best = store::best_feasible_trial(input.direction, &input.trials)
        .and_then(|t| Some((t, t.value()?)));
    match best {
        Some((t, v)) => {
            let mut rows = vec![
                vec!["trial".into(), t.number.to_string()],
                vec!["value".into(), short(v)],
            ];
            for (name, p) in &t.params {
                rows.push(vec![
                    name.clone(),
                    render::json_token(&render::param_json(p)),
                ]);
            }
            html.push_str(&table(&["", ""], &rows));
        }
        None => html.push_str(&format!(
            "<p>{}</p>",
            escape("No COMPLETE trial that meets its constraints yet.")
        )),
    }
    html
}

/// The Pareto front of a study of several objectives: each trial's
/// values and params.
fn front_table(input: &ReportInput) -> String {
    let mut html = String::from("<h3>Best trials (Pareto front)</h3>");
    let front = input.front();
    if front.is_empty() {
        html.push_str(&format!(
            "<p>{}</p>",
            escape("No feasible COMPLETE trial yet.")
        ));
        return html;
    }
    let mut header: Vec<&str> = vec!["trial"];
    header.extend(input.objective_names.iter().map(String::as_str));
    // Not "params": that may be an objective's name.
    header.push("parameters");
    let rows: Vec<Vec<String>> = front
        .iter()
        .map(|t| {
            let mut row = vec![t.number.to_string()];
            row.extend(t.values.iter().flatten().map(|&v| short(v)));
            row.push(
                t.params
                    .iter()
                    .map(|(name, p)| {
                        format!("{name}={}", render::json_token(&render::param_json(p)))
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            row
        })
        .collect();
    html.push_str(&table(&header, &rows));
    html
}

/// Seconds from the first trial's start to the last trial's end, and the
/// number of finished trials.
fn wall_time(input: &ReportInput) -> (Option<f64>, usize) {
    let starts = input
        .trials
        .iter()
        .filter_map(|t| t.datetime_start.as_deref().and_then(seconds));
    let ends = input
        .trials
        .iter()
        .filter_map(|t| t.datetime_complete.as_deref().and_then(seconds));
    let first = starts.clone().fold(f64::INFINITY, f64::min);
    let last = ends.chain(starts).fold(f64::NEG_INFINITY, f64::max);
    let finished = input
        .trials
        .iter()
        .filter(|t| t.state.is_finished())
        .count();
    (
        (first.is_finite() && last.is_finite()).then_some(last - first),
        finished,
    )
}

fn devices(input: &ReportInput) -> String {
    let mut seen: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for t in &input.trials {
        if let Some(m) = MemoryAttrs::of(t)
            && let Some(d) = m.device
        {
            seen.insert(d, m.device_capacity);
        }
    }
    if seen.is_empty() {
        return "not recorded".into();
    }
    seen.into_iter()
        .map(|(d, cap)| match cap {
            Some(c) => format!("{d} ({})", gpu_mem::human_bytes(c)),
            None => d,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `1h 02m 03s`, `4m 05s`, `6.2s`, `12.0ms` (below a tenth of a second,
/// where tenths of a second would round a limit to nothing).
pub fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 0.1 {
        return format!("{:.1}ms", s * 1e3);
    }
    if s < 60.0 {
        return format!("{s:.1}s");
    }
    let total = s.round() as u64;
    let (h, m, sec) = (total / 3600, total / 60 % 60, total % 60);
    if h > 0 {
        format!("{h}h {m:02}m {sec:02}s")
    } else {
        format!("{m}m {sec:02}s")
    }
}

/// Trials per preset that trained from random weights.
fn random_weight_presets(input: &ReportInput) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for t in &input.trials {
        if let Some(preset) = t
            .user_attrs
            .get(crate::tune::runner::RANDOM_WEIGHTS_KEY)
            .and_then(|v| v.as_str())
        {
            *out.entry(preset.to_string()).or_insert(0) += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_keep_their_digits_at_every_scale() {
        assert_eq!(duration(0.01), "10.0ms");
        assert_eq!(duration(0.25), "0.2s");
        assert_eq!(duration(6.2), "6.2s");
        assert_eq!(duration(245.0), "4m 05s");
        assert_eq!(duration(3723.0), "1h 02m 03s");
    }
}

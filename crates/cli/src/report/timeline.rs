//! The device timeline: which trial held which worker process when, and
//! how much device memory was leased against capacity. Drawn as a Gantt
//! chart in the memory section and exported as a Chrome trace
//! ([`super::trace()`]).

use std::collections::BTreeMap;

use plotters::prelude::*;
use store::{FrozenTrial, TrialState};

use super::chart::{self, COMPLETE, FAIL, MUTED, PRUNED, WIDE, gib};
use super::input::{MemoryAttrs, ReportInput, seconds};

/// One trial's stay on a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub trial: u64,
    pub state: TrialState,
    /// Seconds since the timeline's origin.
    pub start: f64,
    pub end: f64,
    pub lease_bytes: u64,
    pub micro_batch: Option<u64>,
    pub accumulation: Option<u64>,
}

/// A worker process on a device, and the trials it ran in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    pub device: String,
    pub worker_pid: u64,
    pub bars: Vec<Bar>,
}

/// A device's size as the runner saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    pub total: u64,
    pub usable: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// The earliest lease start, as seconds of Optuna's naive time.
    pub origin: f64,
    pub lanes: Vec<Lane>,
    pub capacity: BTreeMap<String, Capacity>,
}

/// A trial's start and end (seconds of Optuna's naive time) on a worker.
type Stay<'a> = (f64, f64, &'a FrozenTrial, MemoryAttrs);

impl Timeline {
    /// `None` when no trial recorded a worker and a start time.
    pub fn of(input: &ReportInput) -> Option<Timeline> {
        let latest = input
            .trials
            .iter()
            .filter_map(|t| t.datetime_complete.as_deref().and_then(seconds))
            .fold(f64::NEG_INFINITY, f64::max);
        let mut raw: BTreeMap<(String, u64), Vec<Stay<'_>>> = BTreeMap::new();
        let mut capacity = BTreeMap::new();
        for t in &input.trials {
            let Some(m) = MemoryAttrs::of(t) else {
                continue;
            };
            // A lease start that does not read as a time falls back to the
            // trial's start, as a missing one does.
            let start = m
                .lease_start
                .as_deref()
                .and_then(seconds)
                .or_else(|| t.datetime_start.as_deref().and_then(seconds));
            let (Some(pid), Some(start)) = (m.worker_pid, start) else {
                continue;
            };
            // A trial still running ends, for the picture, at the latest
            // recorded end.
            let end = t
                .datetime_complete
                .as_deref()
                .and_then(seconds)
                .unwrap_or(latest.max(start));
            let device = m.device.clone().unwrap_or_else(|| "device".into());
            if let Some(total) = m.device_capacity {
                capacity.insert(
                    device.clone(),
                    Capacity {
                        total,
                        usable: m.device_usable,
                    },
                );
            }
            raw.entry((device, pid))
                .or_default()
                .push((start, end, t, m));
        }
        let origin = raw
            .values()
            .flatten()
            .map(|r| r.0)
            .fold(f64::INFINITY, f64::min);
        if !origin.is_finite() {
            return None;
        }
        let lanes = raw
            .into_iter()
            .map(|((device, worker_pid), mut trials)| {
                trials.sort_by(|a, b| a.0.total_cmp(&b.0));
                Lane {
                    device,
                    worker_pid,
                    bars: trials
                        .into_iter()
                        .map(|(start, end, t, m)| Bar {
                            trial: t.number,
                            state: t.state,
                            start: start - origin,
                            end: (end - origin).max(start - origin),
                            lease_bytes: m.lease_bytes.unwrap_or(0),
                            micro_batch: m.micro_batch,
                            accumulation: m.accumulation,
                        })
                        .collect(),
                }
            })
            .collect();
        Some(Timeline {
            origin,
            lanes,
            capacity,
        })
    }

    /// The bytes leased on `device` over time: `(seconds, bytes)` at every
    /// change, a step function.
    pub fn leased(&self, device: &str) -> Vec<(f64, u64)> {
        let mut events: Vec<(f64, i128)> = Vec::new();
        for lane in self.lanes.iter().filter(|l| l.device == device) {
            for b in &lane.bars {
                events.push((b.start, b.lease_bytes as i128));
                events.push((b.end, -(b.lease_bytes as i128)));
            }
        }
        // Releases before admissions at the same moment, as the packer does.
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut level: i128 = 0;
        let mut out: Vec<(f64, u64)> = vec![(0.0, 0)];
        for (at, delta) in events {
            level += delta;
            let bytes = level.max(0) as u64;
            match out.last_mut() {
                Some(last) if last.0 == at => last.1 = bytes,
                _ => out.push((at, bytes)),
            }
        }
        out
    }

    pub fn devices(&self) -> Vec<String> {
        let mut d: Vec<String> = self.lanes.iter().map(|l| l.device.clone()).collect();
        d.dedup();
        d
    }

    pub fn end(&self) -> f64 {
        self.lanes
            .iter()
            .flat_map(|l| l.bars.iter().map(|b| b.end))
            .fold(0.0, f64::max)
    }
}

fn color(state: TrialState) -> RGBColor {
    match state {
        TrialState::Complete => COMPLETE,
        TrialState::Pruned => PRUNED,
        TrialState::Fail => FAIL,
        TrialState::Running | TrialState::Waiting => MUTED,
    }
}

/// The Gantt chart (one row per worker) and, per device, the leased bytes
/// against its capacity.
pub fn charts(timeline: &Timeline) -> String {
    let xs = chart::from_zero(timeline.end());
    let end = xs.end;
    let n = timeline.lanes.len();
    let height = (90 + 26 * n as u32).clamp(160, 900);
    // Lane labels go where the y axis' numbers would.
    let mut html = chart::figure(
        "timeline",
        "Trials per worker process over time (blue: COMPLETE, orange: PRUNED, red: FAIL, grey: running)",
        (WIDE.0, height),
        |root| {
            let lane_name = |v: f64| {
                let i = v.round();
                if (v - i).abs() > 1e-9 || i < 0.0 || i as usize >= n {
                    return String::new();
                }
                let lane = &timeline.lanes[i as usize];
                format!("{} pid {}", lane.device, lane.worker_pid)
            };
            let mut c = chart::plane(root, xs.clone(), -0.5..n as f64 - 0.5, 170)?;
            c.configure_mesh()
                .x_desc("seconds since the first lease")
                .disable_y_mesh()
                .y_labels(n)
                .y_label_formatter(&|v| lane_name(*v))
                .draw()?;
            for (i, lane) in timeline.lanes.iter().enumerate() {
                let (lo, hi) = (i as f64 - 0.35, i as f64 + 0.35);
                c.draw_series(lane.bars.iter().map(|b| {
                    Rectangle::new(
                        [(b.start, lo), (b.end.max(b.start + end * 1e-3), hi)],
                        color(b.state).mix(0.75).filled(),
                    )
                }))?;
            }
            Ok(())
        },
    );
    for device in timeline.devices() {
        let steps = timeline.leased(&device);
        let cap = timeline.capacity.get(&device).copied();
        let top = steps
            .iter()
            .map(|s| gib(s.1))
            .chain(cap.map(|c| gib(c.total)))
            .fold(0.0, f64::max)
            .max(1e-3);
        html.push_str(&chart::figure(
            "leased",
            &format!("Memory leased on {device} (GiB) against its capacity (red) and what leases may use (dark grey)"),
            (WIDE.0, 260),
            |root| {
                let mut c = chart::plane(root, xs.clone(), 0.0..top * 1.08, 64)?;
                c.configure_mesh()
                    .x_desc("seconds since the first lease")
                    .y_desc("GiB leased")
                    .draw()?;
                let mut line = Vec::with_capacity(steps.len() * 2 + 1);
                for (i, &(x, b)) in steps.iter().enumerate() {
                    if i > 0 {
                        line.push((x, gib(steps[i - 1].1)));
                    }
                    line.push((x, gib(b)));
                }
                line.push((end, steps.last().map_or(0.0, |s| gib(s.1))));
                c.draw_series(AreaSeries::new(line, 0.0, COMPLETE.mix(0.3)).border_style(COMPLETE))?;
                if let Some(cap) = cap {
                    c.draw_series(LineSeries::new([(0.0, gib(cap.total)), (end, gib(cap.total))], FAIL.stroke_width(2)))?;
                    if let Some(u) = cap.usable {
                        c.draw_series(LineSeries::new([(0.0, gib(u)), (end, gib(u))], BLACK.mix(0.5).stroke_width(2)))?;
                    }
                }
                Ok(())
            },
        ));
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(start: f64, end: f64, bytes: u64) -> Bar {
        Bar {
            trial: 0,
            state: TrialState::Complete,
            start,
            end,
            lease_bytes: bytes,
            micro_batch: None,
            accumulation: None,
        }
    }

    #[test]
    fn leased_bytes_step_with_releases_first() {
        let t = Timeline {
            origin: 0.0,
            lanes: vec![
                Lane {
                    device: "gpu".into(),
                    worker_pid: 1,
                    bars: vec![bar(0.0, 2.0, 10), bar(2.0, 3.0, 5)],
                },
                Lane {
                    device: "gpu".into(),
                    worker_pid: 2,
                    bars: vec![bar(1.0, 4.0, 7)],
                },
            ],
            capacity: BTreeMap::new(),
        };
        assert_eq!(
            t.leased("gpu"),
            vec![(0.0, 10), (1.0, 17), (2.0, 12), (3.0, 7), (4.0, 0)]
        );
        assert_eq!(t.end(), 4.0);
    }
}

//! The device timeline as Chrome's trace event format (JSON object form),
//! which Perfetto and `chrome://tracing` open: one process per device, one
//! thread per worker process, a complete event (`"ph": "X"`) per trial and
//! a counter (`"ph": "C"`) of the bytes leased on each device.

use serde_json::{Value as Json, json};

use super::timeline::Timeline;

fn micros(seconds: f64) -> f64 {
    (seconds * 1e6).round()
}

pub fn chrome_trace(timeline: &Timeline) -> Json {
    let devices = timeline.devices();
    let pid_of = |device: &str| devices.iter().position(|d| d == device).unwrap_or(0) + 1;
    let mut events = Vec::new();
    for (i, device) in devices.iter().enumerate() {
        events.push(json!({
            "name": "process_name", "ph": "M", "pid": i + 1, "tid": 0,
            "args": {"name": device},
        }));
    }
    for lane in &timeline.lanes {
        let pid = pid_of(&lane.device);
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": pid, "tid": lane.worker_pid,
            "args": {"name": format!("worker pid {}", lane.worker_pid)},
        }));
        for b in &lane.bars {
            events.push(json!({
                "name": format!("trial {}", b.trial),
                "cat": b.state.as_str(),
                "ph": "X",
                "ts": micros(b.start),
                "dur": micros(b.end - b.start),
                "pid": pid,
                "tid": lane.worker_pid,
                "args": {
                    "state": b.state.as_str(),
                    "lease_bytes": b.lease_bytes,
                    "micro_batch": b.micro_batch,
                    "accumulation_steps": b.accumulation,
                },
            }));
        }
    }
    for device in &devices {
        let pid = pid_of(device);
        let capacity = timeline.capacity.get(device);
        for (at, bytes) in timeline.leased(device) {
            let mut args = json!({"leased_bytes": bytes});
            if let Some(c) = capacity {
                args["capacity_bytes"] = json!(c.total);
            }
            events.push(json!({
                "name": "device memory", "ph": "C", "ts": micros(at), "pid": pid, "args": args,
            }));
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

#[cfg(test)]
mod tests {
    use super::super::timeline::{Bar, Capacity, Lane};
    use super::*;
    use std::collections::BTreeMap;
    use store::TrialState;

    #[test]
    fn one_complete_event_per_trial_and_a_memory_counter() {
        let t = Timeline {
            origin: 0.0,
            lanes: vec![Lane {
                device: "simulated GPU".into(),
                worker_pid: 42,
                bars: vec![Bar {
                    trial: 3,
                    state: TrialState::Complete,
                    start: 0.5,
                    end: 2.0,
                    lease_bytes: 1 << 30,
                    micro_batch: Some(8),
                    accumulation: Some(2),
                }],
            }],
            capacity: BTreeMap::from([(
                "simulated GPU".to_string(),
                Capacity {
                    total: 24 << 30,
                    usable: None,
                },
            )]),
        };
        let trace = chrome_trace(&t);
        let events = trace["traceEvents"].as_array().unwrap();
        let x: Vec<&Json> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 1);
        assert_eq!(x[0]["name"], "trial 3");
        assert_eq!(x[0]["ts"], 500_000.0);
        assert_eq!(x[0]["dur"], 1_500_000.0);
        assert_eq!(x[0]["tid"], 42);
        let counters: Vec<u64> = events
            .iter()
            .filter(|e| e["ph"] == "C")
            .map(|e| e["args"]["leased_bytes"].as_u64().unwrap())
            .collect();
        assert_eq!(counters, vec![0, 1 << 30, 0]);
    }
}

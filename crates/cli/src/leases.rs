//! What the running trials of a storage hold on each device, from the
//! attributes the runner records when it starts a trial (`device`,
//! `lease_bytes`, `device_usable_bytes`): `memtune --storage URL devices`
//! prints it, so a study's use of every device can be read from outside
//! the runner (several runners and studies may share one storage).

use std::collections::BTreeMap;

use serde_json::Value as Json;
use store::{FrozenTrial, TrialState};

/// One device's leases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceLeases {
    /// Bytes leased by its running trials.
    pub leased: u64,
    /// Its running trials.
    pub trials: usize,
    /// What leases may sum to there, as the last trial recorded it.
    pub usable: Option<u64>,
    /// The studies they belong to.
    pub studies: Vec<String>,
}

impl DeviceLeases {
    /// Bytes still free to lease (`None` when no trial recorded the
    /// device's usable bytes).
    pub fn free(&self) -> Option<u64> {
        self.usable.map(|u| u.saturating_sub(self.leased))
    }
}

/// The leases of `study`'s RUNNING trials, added to `by_device` (keyed by
/// the device's recorded name). A RUNNING trial without a lease (claimed,
/// still waiting for memory, or an ask/tell client's) holds nothing.
pub fn add(by_device: &mut BTreeMap<String, DeviceLeases>, study: &str, trials: &[FrozenTrial]) {
    for t in trials.iter().filter(|t| t.state == TrialState::Running) {
        let (Some(device), Some(bytes)) = (
            t.user_attrs.get("device").and_then(Json::as_str),
            t.user_attrs.get("lease_bytes").and_then(Json::as_u64),
        ) else {
            continue;
        };
        let entry = by_device.entry(device.to_string()).or_default();
        entry.leased = entry.leased.saturating_add(bytes);
        entry.trials += 1;
        if let Some(usable) = t
            .user_attrs
            .get("device_usable_bytes")
            .and_then(Json::as_u64)
        {
            entry.usable = Some(usable);
        }
        if !entry.studies.iter().any(|s| s == study) {
            entry.studies.push(study.to_string());
        }
    }
}

/// One line per device: `lease DEVICE: X leased by N running trial(s), Y
/// free of Z (studies)`.
pub fn render(by_device: &BTreeMap<String, DeviceLeases>) -> String {
    use gpu_mem::human_bytes;
    if by_device.is_empty() {
        return "leases: no running trial holds a lease\n".to_string();
    }
    let mut out = String::new();
    for (device, l) in by_device {
        let free = match (l.free(), l.usable) {
            (Some(free), Some(usable)) => {
                format!(", {} free of {}", human_bytes(free), human_bytes(usable))
            }
            _ => String::new(),
        };
        out += &format!(
            "lease {}: {} leased by {} running trial(s){free} (study {})\n",
            crate::render::printable(device),
            human_bytes(l.leased),
            l.trials,
            l.studies
                .iter()
                .map(|s| crate::render::printable(s))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trial(number: u64, state: TrialState, attrs: &[(&str, Json)]) -> FrozenTrial {
        let mut t = FrozenTrial::new(number);
        t.state = state;
        for (k, v) in attrs {
            t.user_attrs.insert(k.to_string(), v.clone());
        }
        t
    }

    #[test]
    fn running_leases_are_summed_per_device_and_others_ignored() {
        let gib = 1u64 << 30;
        let on = |device: &str, bytes: u64| {
            vec![
                ("device", json!(device)),
                ("lease_bytes", json!(bytes)),
                ("device_usable_bytes", json!(20 * gib)),
            ]
        };
        let trials = [
            trial(0, TrialState::Running, &on("cuda:0 (H100)", 3 * gib)),
            trial(1, TrialState::Running, &on("cuda:0 (H100)", 5 * gib)),
            trial(2, TrialState::Running, &on("cuda:1 (H100)", 7 * gib)),
            // Finished: its lease was returned.
            trial(3, TrialState::Complete, &on("cuda:1 (H100)", 9 * gib)),
            // Claimed, waiting for memory: no lease yet.
            trial(4, TrialState::Running, &[]),
        ];
        let mut by_device = BTreeMap::new();
        add(&mut by_device, "a", &trials);
        add(&mut by_device, "b", &trials[2..3]);
        let zero = &by_device["cuda:0 (H100)"];
        assert_eq!((zero.leased, zero.trials), (8 * gib, 2));
        assert_eq!(zero.free(), Some(12 * gib));
        let one = &by_device["cuda:1 (H100)"];
        assert_eq!((one.leased, one.trials), (14 * gib, 2));
        assert_eq!(one.studies, ["a", "b"]);
        let text = render(&by_device);
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains("lease cuda:0 (H100): 8.00 GiB leased by 2 running trial(s), 12.00 GiB free of 20.00 GiB (study a)"), "{text}");
        assert!(render(&BTreeMap::new()).contains("no running trial"));
    }
}

//! Fault injection for the runner's tests: `MEMTUNE_FAULT` names which
//! trial numbers fail and how, e.g.
//! `abort@3:epoch=0; sticky@5:epoch=1; oom@7:alloc=120; assert@8:epoch=0;
//! device-error@2:check=3; nan@6:epoch=0; hang@9:epoch=0; stray-line@1;
//! exit-before-start@5; kill-runner@4`.
//!
//! `kill-runner@N` makes the runner `SIGKILL` itself right after trial `N`
//! is handed to a worker (the resume tests' kill -9 at a known moment);
//! `stall-runner@N` makes it sleep for an hour there instead (a call that
//! never returns);
//! `interrupt-ask@N` makes `memtune ask` send itself SIGINT right after it
//! creates or claims trial `N` (Ctrl-C mid-ask); the others are passed to
//! the worker in its [`Job`](super::protocol::Job).

use std::collections::BTreeMap;

use super::protocol::Fault;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    pub per_trial: BTreeMap<i64, Fault>,
    pub kill_runner_after_start_of: Option<i64>,
    pub stall_runner_after_start_of: Option<i64>,
    pub interrupt_ask_of: Option<i64>,
}

impl Faults {
    /// The faults `MEMTUNE_FAULT` names. Builds without the
    /// `fault-injection` feature refuse the variable rather than ignore it,
    /// so a test run against the wrong binary fails loudly.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("MEMTUNE_FAULT") {
            Ok(text) if cfg!(feature = "fault-injection") => Self::parse(&text),
            Ok(_) => Err(
                "MEMTUNE_FAULT is set, but this memtune was built without fault injection \
                 (cargo feature `fault-injection`)"
                    .into(),
            ),
            Err(_) => Ok(Self::default()),
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut faults = Faults::default();
        for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || format!("MEMTUNE_FAULT: cannot read `{item}`");
            let (head, arg) = match item.split_once(':') {
                Some((h, a)) => (h, Some(a)),
                None => (item, None),
            };
            let (kind, trial) = head.split_once('@').ok_or_else(bad)?;
            let trial: i64 = trial.parse().map_err(|_| bad())?;
            let value = |key: &str| -> Result<u64, String> {
                arg.and_then(|a| a.strip_prefix(key))
                    .and_then(|a| a.strip_prefix('='))
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(bad)
            };
            let fault = match kind {
                "abort" => Fault::Abort {
                    after_epoch: value("epoch")? as usize,
                },
                "sticky" => Fault::StickyError {
                    after_epoch: value("epoch")? as usize,
                },
                "oom" => Fault::OomAtAllocation { n: value("alloc")? },
                "assert" => Fault::DeviceAssert {
                    after_epoch: value("epoch")? as usize,
                },
                "device-error" => Fault::DeviceError {
                    check: value("check")?,
                },
                "nan" => Fault::NanEpoch {
                    epoch: value("epoch")? as usize,
                },
                "hang" => Fault::Hang {
                    after_epoch: value("epoch")? as usize,
                },
                "stray-line" => Fault::StrayLineAfterEnd,
                "exit-before-start" => Fault::ExitBeforeStart,
                "kill-runner" => {
                    faults.kill_runner_after_start_of = Some(trial);
                    continue;
                }
                "stall-runner" => {
                    faults.stall_runner_after_start_of = Some(trial);
                    continue;
                }
                "interrupt-ask" => {
                    faults.interrupt_ask_of = Some(trial);
                    continue;
                }
                _ => return Err(bad()),
            };
            faults.per_trial.insert(trial, fault);
        }
        Ok(faults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_rejects_garbage() {
        let f = Faults::parse(
            "abort@3:epoch=0; sticky@5:epoch=1;oom@7:alloc=120; assert@8:epoch=2; kill-runner@4; \
             device-error@2:check=3; nan@6:epoch=1; hang@9:epoch=0; stray-line@10; \
             interrupt-ask@11; stall-runner@12; exit-before-start@13",
        )
        .unwrap();
        assert_eq!(f.per_trial[&9], Fault::Hang { after_epoch: 0 });
        assert_eq!(f.per_trial[&8], Fault::DeviceAssert { after_epoch: 2 });
        assert_eq!(f.per_trial[&3], Fault::Abort { after_epoch: 0 });
        assert_eq!(f.per_trial[&5], Fault::StickyError { after_epoch: 1 });
        assert_eq!(f.per_trial[&7], Fault::OomAtAllocation { n: 120 });
        assert_eq!(f.per_trial[&2], Fault::DeviceError { check: 3 });
        assert_eq!(f.per_trial[&6], Fault::NanEpoch { epoch: 1 });
        assert_eq!(f.per_trial[&10], Fault::StrayLineAfterEnd);
        assert_eq!(f.per_trial[&13], Fault::ExitBeforeStart);
        assert_eq!(f.kill_runner_after_start_of, Some(4));
        assert_eq!(f.interrupt_ask_of, Some(11));
        assert_eq!(f.stall_runner_after_start_of, Some(12));
        for bad in [
            "abort",
            "abort@x:epoch=1",
            "oom@1:epoch=2",
            "nap@1",
            "device-error@1:epoch=2",
        ] {
            assert!(Faults::parse(bad).is_err(), "{bad}");
        }
    }
}

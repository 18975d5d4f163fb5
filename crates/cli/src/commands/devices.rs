//! `memtune devices`: what memtune can train on, and, with a storage
//! (`--storage` or `MEMTUNE_STORAGE`), what the running trials there
//! lease on each device.

use std::collections::BTreeMap;
use std::io::Write;

use super::Context;
use crate::error::Result;
use store::{TrialFilter, TrialState};

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let report = crate::devices::probe_cuda();
    write!(out, "{}", crate::devices::render(&report))?;
    if ctx.storage_url.is_none() {
        return Ok(());
    }
    // The probe above is the command's answer: a storage that cannot be
    // read (not created yet, a server down) is said, not an error.
    match leases(ctx) {
        Ok(by_device) => write!(out, "{}", crate::leases::render(&by_device))?,
        Err(e) => writeln!(out, "leases: cannot read the storage: {e}")?,
    }
    Ok(())
}

/// Every study's running leases, per device.
fn leases(ctx: &Context) -> Result<BTreeMap<String, crate::leases::DeviceLeases>> {
    let storage = ctx.open_read_only()?;
    let running = TrialFilter {
        states: vec![TrialState::Running],
        ..TrialFilter::default()
    };
    let mut by_device = BTreeMap::new();
    for (study_id, name) in storage.study_names()? {
        let trials = storage.trials(study_id, &running)?;
        crate::leases::add(&mut by_device, &name, &trials);
    }
    Ok(by_device)
}

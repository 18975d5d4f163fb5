//! `cargo xtask bench packing [ARGS]`: the packing simulation's table.
//!
//! Runs `crates/cli/examples/packing_sim.rs` with the cli's `sim` feature
//! (see the example's doc for ARGS:
//! `--seeds N --hours H --slack F --threads T --check-plans --sensitivity
//! --devices N`): memory-aware packing with micro-batch fitting against the
//! legacy setup's fixed PAR=2 on their search space, with the trainer's
//! memory plans, on a simulated 24 GB GPU; `--devices N` adds packing over
//! N such GPUs against N times one. The plans' coefficients are cached in
//! `target/bench-packing/plans.json` (keyed by a fingerprint of the models
//! and the trainer's plan); plans only count allocations, so building
//! them takes well under a second.
//!
//! Built in the dev profile: the workspace optimises the trainer (which
//! builds the plans) and every dependency at opt-level 3 there, the
//! simulation itself takes milliseconds, and its results do not depend on
//! the profile; a release build of the cli's dependency tree would cost
//! more than the bench.

use crate::{Result, env};

pub fn run(args: &[String]) -> Result<()> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env::root().join("target"));
    let cache = target.join("bench-packing").join("plans.json");
    let cache = cache.display().to_string();
    let mut cmd = vec![
        "run",
        "--package",
        "cli",
        "--features",
        "sim",
        "--example",
        "packing_sim",
        "--",
        "--plan-cache",
        &cache,
    ];
    cmd.extend(args.iter().map(String::as_str));
    env::cargo(&cmd, &[])
}

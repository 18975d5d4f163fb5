//! `memtune`: the command-line front end that composes the workspace's crates.
//!
//! It owns no logic of its own beyond wiring: storage comes from `store`,
//! sampling and pruning from `hpo-sampler`, training from `trainer`, device
//! memory from `gpu-mem`.

use clap::Parser;

/// Hyperparameter studies for BERT-style text classifiers that never lose a
/// trial to memory.
#[derive(Parser)]
#[command(name = "memtune", version, about)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}

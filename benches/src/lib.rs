//! Cross-crate benchmarks and side-by-side comparisons with peers.
//!
//! Per-crate micro-benchmarks live in each crate's own `benches/` folder
//! (`cargo bench -p NAME`); this package holds the workloads that span crates
//! and the Python scripts that run Optuna and PyTorch on the same work, so a
//! comparison is always made in one run on one machine.

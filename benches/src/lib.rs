//! Cross-crate benchmarks and side-by-side comparisons with peers.
//!
//! Per-crate micro-benchmarks live in each crate's own `benches/` folder
//! (`cargo bench -p NAME`); this package holds the Python scripts that run
//! Optuna, PyTorch and COCO on the same work as our crates (driven by
//! `cargo xtask bench` and the tests), so a comparison is always made in one
//! run on one machine.

//! The study runner behind `memtune tune`: a study's configuration, the
//! worker protocol, memory-aware packing of trials onto a device, and the
//! loop that asks, runs, records and recovers. The packing policy's
//! simulation (`simulate`) is research, behind the `sim` feature.

pub mod best;
pub mod config;
pub mod fault;
pub mod heartbeat;
pub mod models;
pub mod packing;
pub mod placement;
pub mod pricing;
pub mod progress;
pub mod protocol;
pub mod record;
pub mod runner;
pub mod scoring;
pub mod setup;
#[cfg(feature = "sim")]
pub mod simulate;
pub mod space;
pub mod synthetic;
pub mod worker;
pub mod workers;

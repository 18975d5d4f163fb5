//! The study runner behind `memtune tune`: a study's configuration, the
//! worker protocol, memory-aware packing of trials onto a device, and the
//! loop that asks, runs, records and recovers.

pub mod config;
pub mod packing;
pub mod simulate;
pub mod space;

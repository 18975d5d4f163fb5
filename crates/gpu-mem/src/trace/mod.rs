//! Allocation traces: JSON lines of alloc/free, replay, and a generator.

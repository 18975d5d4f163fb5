//! Fuzz the caching allocator: the input picks a configuration and a
//! sequence of alloc/free/record_stream/empty_cache/limit/failure steps
//! (see `gpu_mem::scenario::Op::decode`); every invariant and a full stats
//! recount are checked after each step, and freeing everything plus
//! `empty_cache` must leave nothing reserved.

#![no_main]

use gpu_mem::Config;
use gpu_mem::scenario::{self, Op};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let config = Config {
        caching: mode & 1 == 0,
        expandable_segments: mode & 2 != 0,
        max_split_size: (mode & 4 != 0).then_some(24 << 20),
        roundup_power2_divisions: if mode & 8 != 0 { 4 } else { 0 },
        garbage_collection_threshold: if mode & 16 != 0 { 0.5 } else { 0.0 },
        limit: None,
        record_trace: mode & 32 != 0,
    };
    let mut ops = Vec::new();
    while let Some(op) = Op::decode(&mut rest) {
        ops.push(op);
    }
    if let Err(msg) = scenario::run(config.clone(), scenario::test_device(), &ops) {
        panic!("{msg}\nconfig: {config:?}");
    }
});

//! Property tests: random interleavings of alloc/free/empty_cache/streams/
//! limits/injected failures over both pools and both segment modes, with
//! every invariant and a full stats recount checked after every step.

use gpu_mem::Config;
use gpu_mem::scenario::{self, Op};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Small pool (<= 1 MiB).
        6 => (1usize..=(1 << 20), 0u8..3).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        // Large pool: below 10 MiB (20 MiB segments) and above (own segments).
        4 => ((1usize << 20) + 1..=(40 << 20), 0u8..3).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        8 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (any::<usize>(), 0u8..3).prop_map(|(pick, stream)| Op::RecordStream { pick, stream }),
        1 => Just(Op::EmptyCache),
        1 => prop_oneof![Just(None), (8usize..256).prop_map(|mib| Some(mib << 20))].prop_map(Op::SetLimit),
        1 => Just(Op::CompleteWork),
        1 => Just(Op::FailNextMap),
        1 => Just(Op::FailNextMalloc),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        any::<bool>(),
        prop_oneof![
            Just(None),
            Just(Some(21usize << 20)),
            Just(Some(32usize << 20))
        ],
        prop_oneof![Just(0usize), Just(4usize)],
        prop_oneof![Just(0.0f64), Just(0.5f64)],
        any::<bool>(),
        0u8..8,
    )
        .prop_map(
            |(expandable, max_split, divisions, gc, trace, caching)| Config {
                caching: caching != 0,
                expandable_segments: expandable,
                max_split_size: max_split,
                roundup_power2_divisions: divisions,
                garbage_collection_threshold: gc,
                limit: None,
                record_trace: trace,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_every_invariant(
        config in config(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        if let Err(msg) = scenario::run(config.clone(), scenario::test_device(), &ops) {
            panic!("{msg}\nconfig: {config:?}");
        }
    }
}

#[test]
fn decoded_byte_streams_keep_every_invariant() {
    // The fuzz target's decoder, fed with a fixed pseudo-random stream.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for config in [
        Config::default(),
        Config::expandable(),
        Config::no_caching(),
    ] {
        let mut rest = &bytes[..];
        let mut ops = Vec::new();
        while let Some(op) = Op::decode(&mut rest) {
            ops.push(op);
        }
        assert!(ops.len() > 1000);
        let outcome = scenario::run(config, scenario::test_device(), &ops).unwrap();
        // The stream is rich enough to reach both the cached and OOM paths.
        assert!(outcome.allocations > 100 && outcome.ooms > 0, "{outcome:?}");
    }
}

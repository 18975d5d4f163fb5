//! The stratified split and the batcher.

mod io_support;

use std::collections::{HashMap, HashSet};

use io_support::{TINY_VOCAB, embeddings_fixture, minilm_dir, write_vocab};
use trainer::data::batcher::validate_labels;
use trainer::data::embedded::load_sentiment;
use trainer::data::split::dedup_key;
use trainer::data::{
    BadRecordPolicy, BatchOrder, DataError, Example, TokenizedDataset, stratified_split,
};
use trainer::tokenize::TextTokenizer;

fn example(text: &str, label: usize) -> Example {
    Example {
        text: text.into(),
        text_pair: None,
        label,
    }
}

#[test]
fn the_split_is_deterministic_stratified_and_keeps_duplicates_on_one_side() {
    let dataset = load_sentiment(BadRecordPolicy::Skip).unwrap();
    let split = stratified_split(&dataset.examples, 2, 0.2, 42).unwrap();
    assert_eq!(split.train.len() + split.validation.len(), 3000);
    // 1500 per class, 300 of each to validation (a duplicate group may add one).
    for class in 0..2 {
        let in_validation = split.validation.iter().filter(|e| e.label == class).count();
        assert!(
            (300..=301).contains(&in_validation),
            "class {class}: {in_validation}"
        );
    }
    assert_eq!(split.duplicate_groups, 19);
    assert_eq!(split.duplicate_examples, 40);
    let train_keys: HashSet<String> = split.train.iter().map(dedup_key).collect();
    let leaked: Vec<&Example> = split
        .validation
        .iter()
        .filter(|e| train_keys.contains(&dedup_key(e)))
        .collect();
    assert!(
        leaked.is_empty(),
        "in both train and validation: {leaked:?}"
    );

    // Same seed, same split; another seed, another split.
    assert_eq!(
        stratified_split(&dataset.examples, 2, 0.2, 42).unwrap(),
        split
    );
    let other = stratified_split(&dataset.examples, 2, 0.2, 43).unwrap();
    assert_ne!(other.validation, split.validation);
}

#[test]
fn the_split_keeps_input_order_and_every_example_once() {
    let examples: Vec<Example> = (0..50)
        .map(|i| example(&format!("text {i}"), usize::from(i % 5 == 0)))
        .collect();
    let split = stratified_split(&examples, 2, 0.3, 7).unwrap();
    assert_eq!(split.validation.iter().filter(|e| e.label == 1).count(), 3); // round(10 * 0.3)
    assert_eq!(split.validation.iter().filter(|e| e.label == 0).count(), 12); // round(40 * 0.3)
    let index = |e: &Example| e.text[5..].parse::<usize>().unwrap();
    for side in [&split.train, &split.validation] {
        let order: Vec<usize> = side.iter().map(index).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }
    let mut all: Vec<usize> = split
        .train
        .iter()
        .chain(&split.validation)
        .map(index)
        .collect();
    all.sort();
    assert_eq!(all, (0..50).collect::<Vec<_>>());
}

#[test]
fn bad_split_arguments_are_errors() {
    let examples = vec![example("a", 0), example("b", 3)];
    for fraction in [0.0, 1.0, -0.5, f64::NAN] {
        let err = stratified_split(&examples[..1], 2, fraction, 0).unwrap_err();
        assert!(matches!(err, DataError::InvalidSplit { .. }), "{err}");
    }
    let err = stratified_split(&examples, 2, 0.5, 0).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::LabelOutOfRange {
                index: 1,
                label: 3,
                ..
            }
        ),
        "{err}"
    );
}

/// A side left empty is an error, not a run with nothing to train on or a
/// score of 0: one example, or every text the same (one group kept whole,
/// in training, as a class's last group always is).
#[test]
fn a_split_with_an_empty_side_is_an_error() {
    let one = vec![example("a", 0)];
    let err = stratified_split(&one, 2, 0.2, 0).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::EmptySplit {
                side: "validation",
                examples: 1,
                ..
            }
        ),
        "{err}"
    );
    let same: Vec<Example> = (0..40).map(|i| example(" A ", i % 2)).collect();
    let err = stratified_split(&same, 2, 0.2, 0).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::EmptySplit {
                side: "validation",
                groups: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("validation set empty"), "{err}");
}

/// A rare class whose records are one group of duplicates (three spellings
/// of one review) would go wholly to validation by its share; its last
/// group stays in training instead, whatever the seed and fraction.
#[test]
fn a_class_keeps_a_group_in_training() {
    let mut examples: Vec<Example> = (0..10)
        .map(|i| example(&format!("negative review {i}"), 0))
        .collect();
    for text in ["Great phone", "great phone", "GREAT PHONE "] {
        examples.push(example(text, 1));
    }
    for seed in 0..20 {
        for fraction in [0.2, 0.5, 0.9] {
            let split = stratified_split(&examples, 2, fraction, seed).unwrap();
            let trained: HashSet<usize> = split.train.iter().map(|e| e.label).collect();
            assert_eq!(trained.len(), 2, "seed {seed}, fraction {fraction}");
            assert!(split.validation.iter().all(|e| e.label == 0));
        }
    }
}

fn tiny_tokenizer() -> (tempfile::TempDir, TextTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    let vocab = write_vocab(dir.path(), TINY_VOCAB);
    (dir, TextTokenizer::from_vocab_txt(vocab, true, 16).unwrap())
}

fn tiny_examples() -> Vec<Example> {
    [
        "the movie",
        "the movie is very very good !",
        "bad",
        "it was not good",
        "a film",
        "i play",
        "the film is great",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| example(t, i % 2))
    .collect()
}

#[test]
fn batches_are_padded_to_their_own_longest_sequence() {
    let (_dir, tokenizer) = tiny_tokenizer();
    let examples = tiny_examples();
    let data = TokenizedDataset::new(&tokenizer, &examples, 2).unwrap();
    let batches: Vec<_> = data.batches(3, BatchOrder::Sequential).unwrap().collect();
    assert_eq!(batches.len(), 3);
    assert_eq!(data.num_batches(3), 3);
    assert_eq!(
        batches.iter().map(|b| b.batch).collect::<Vec<_>>(),
        [3, 3, 1]
    );
    // Lengths with [CLS] and [SEP]: 4, 9, 3 | 6, 4, 4 | 6.
    assert_eq!(batches.iter().map(|b| b.seq).collect::<Vec<_>>(), [9, 6, 6]);
    let first = &batches[0];
    assert_eq!(first.input_ids.len(), 3 * 9);
    assert_eq!(first.attention_mask.len(), 3 * 9);
    assert_eq!(first.token_type_ids, vec![0; 27]);
    assert_eq!(first.labels, [0, 1, 0]);
    // Row 2 ("bad"): [CLS] bad [SEP] then six [PAD] (id 0) with mask 0.
    assert_eq!(&first.input_ids[18..27], [2, 9, 3, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&first.attention_mask[18..27], [1, 1, 1, 0, 0, 0, 0, 0, 0]);
    for batch in &batches {
        for row in 0..batch.batch {
            let mask = &batch.attention_mask[row * batch.seq..(row + 1) * batch.seq];
            let ids = &batch.input_ids[row * batch.seq..(row + 1) * batch.seq];
            let real = mask.iter().filter(|&&m| m == 1).count();
            assert!(mask[..real].iter().all(|&m| m == 1), "mask is a prefix");
            assert_eq!(ids[real - 1], 3, "each row ends with [SEP]");
            assert!(ids[real..].iter().all(|&id| id == 0), "padding uses [PAD]");
        }
        assert!(
            (0..batch.batch).any(|row| batch.attention_mask[row * batch.seq + batch.seq - 1] == 1),
            "some row fills the batch"
        );
    }
}

#[test]
fn pairs_carry_segment_ids_into_batches() {
    let (_dir, tokenizer) = tiny_tokenizer();
    let examples = vec![Example {
        text: "the movie".into(),
        text_pair: Some("is good".into()),
        label: 1,
    }];
    let data = TokenizedDataset::new(&tokenizer, &examples, 2).unwrap();
    let batch = data
        .batches(4, BatchOrder::Sequential)
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(batch.token_type_ids, [0, 0, 0, 0, 1, 1, 1]);
}

#[test]
fn shuffling_is_seeded_per_epoch_and_covers_every_example_once() {
    let (_dir, tokenizer) = tiny_tokenizer();
    let examples: Vec<Example> = (0..40)
        .map(|i| example(&"the ".repeat(1 + i % 7), i % 2))
        .collect();
    let data = TokenizedDataset::new(&tokenizer, &examples, 2).unwrap();
    let order = |seed, epoch| -> Vec<Vec<u32>> {
        data.batches(6, BatchOrder::Shuffled { seed, epoch })
            .unwrap()
            .flat_map(|b| {
                (0..b.batch)
                    .map(|r| b.input_ids[r * b.seq..(r + 1) * b.seq].to_vec())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let epoch0 = order(1, 0);
    assert_eq!(epoch0, order(1, 0), "same seed and epoch, same order");
    assert_ne!(epoch0, order(1, 1), "a new epoch reshuffles");
    assert_ne!(epoch0, order(2, 0), "a new seed reshuffles");
    // Each example exactly once: count rows by real length.
    let mut lengths: HashMap<usize, usize> = HashMap::new();
    for row in &epoch0 {
        *lengths
            .entry(row.iter().filter(|&&id| id != 0).count())
            .or_default() += 1;
    }
    let mut expected: HashMap<usize, usize> = HashMap::new();
    for e in data.encoded() {
        *expected.entry(e.ids.len()).or_default() += 1;
    }
    assert_eq!(lengths, expected);
    assert_eq!(epoch0.len(), 40);
}

#[test]
fn labels_are_validated_before_any_batch_exists() {
    let (_dir, tokenizer) = tiny_tokenizer();
    let examples = vec![example("good", 0), example("bad", 2)];
    let err = TokenizedDataset::new(&tokenizer, &examples, 2).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::LabelOutOfRange {
                index: 1,
                label: 2,
                num_classes: 2
            }
        ),
        "{err}"
    );
    assert!(validate_labels([0, 1, 1], 2).is_ok());
    assert!(validate_labels([0, 5], 2).is_err());
    let data = TokenizedDataset::new(&tokenizer, &examples[..1], 2).unwrap();
    assert!(matches!(
        data.batches(0, BatchOrder::Sequential),
        Err(DataError::ZeroBatchSize)
    ));
}

#[test]
fn minilm_batches_match_the_fixture_ids() {
    let Some(dir) = minilm_dir("minilm_batches_match_the_fixture_ids") else {
        return;
    };
    let tokenizer = TextTokenizer::from_tokenizer_json(dir.join("tokenizer.json"), 128).unwrap();
    let fixture = embeddings_fixture();
    let examples: Vec<Example> = fixture["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| example(s.as_str().unwrap(), 0))
        .collect();
    let data = TokenizedDataset::new(&tokenizer, &examples, 2).unwrap();
    let batch = data
        .batches(examples.len(), BatchOrder::Sequential)
        .unwrap()
        .next()
        .unwrap();
    let ids = fixture["token_ids"].as_array().unwrap();
    let longest = ids
        .iter()
        .map(|i| i.as_array().unwrap().len())
        .max()
        .unwrap();
    assert_eq!(batch.seq, longest);
    for (row, expected) in ids.iter().enumerate() {
        let expected: Vec<u32> = expected
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = &batch.input_ids[row * batch.seq..(row + 1) * batch.seq];
        assert_eq!(&got[..expected.len()], expected);
        assert!(got[expected.len()..].iter().all(|&id| id == 0));
    }
}

/// A study's split and batch order are part of its result: these values
/// must never change with a dependency update (they fail if the RNG or the
/// shuffle changes its stream).
#[test]
fn the_split_and_the_batch_order_are_pinned() {
    use trainer::data::batcher::epoch_order;
    assert_eq!(epoch_order(10, 7, 0), [0, 4, 5, 9, 2, 1, 3, 8, 6, 7]);
    assert_eq!(
        epoch_order(100, 42, 3)[..10],
        [86, 24, 6, 12, 63, 46, 80, 70, 59, 83]
    );
    let data = load_sentiment(BadRecordPolicy::Skip).unwrap();
    let split = stratified_split(&data.examples, data.num_classes, 0.2, 42).unwrap();
    assert_eq!((split.train.len(), split.validation.len()), (2400, 600));
    let first: Vec<&str> = split.validation[..3]
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(
        first,
        [
            "If you have several dozen or several hundred contacts, then imagine the fun of sending each of them one by one.",
            "Highly recommend for any one who has a blue tooth phone.",
            "Works great!.",
        ]
    );
}

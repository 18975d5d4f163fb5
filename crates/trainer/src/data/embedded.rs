//! The default data set, compiled in: UCI Sentiment Labelled Sentences
//! (Kotzias et al., KDD 2015, CC BY 4.0; see
//! `data/sentiment-labelled-sentences/ATTRIBUTION.md`).
//!
//! 3,000 review sentences (Amazon, IMDb, Yelp; 500 negative and 500 positive
//! each) as shipped: each file ends with an empty record whose class is
//! null, which the loader skips with a message ([`load_sentiment`] under
//! [`BadRecordPolicy::Skip`]), or rejects. Duplicate texts are kept here and
//! handled by the split (see [`super::split`]).

use super::error::DataError;
use super::options::{BadRecordPolicy, DataFormat, FieldSpec, LabelSpec, LoadOptions};
use super::reader::load_str;
use super::record::Dataset;

/// (name used in messages, JSON array) for each of the three sources.
pub const SENTIMENT_FILES: [(&str, &str); 3] = [
    (
        "sentiment-labelled-sentences/amazon.json",
        include_str!("../../data/sentiment-labelled-sentences/amazon.json"),
    ),
    (
        "sentiment-labelled-sentences/imdb.json",
        include_str!("../../data/sentiment-labelled-sentences/imdb.json"),
    ),
    (
        "sentiment-labelled-sentences/yelp.json",
        include_str!("../../data/sentiment-labelled-sentences/yelp.json"),
    ),
];

/// Class names by label: 0 negative, 1 positive.
pub const SENTIMENT_CLASSES: [&str; 2] = ["negative", "positive"];

/// How the embedded files are read: `text`, integer `class` in {0, 1}.
pub fn sentiment_options(bad_records: BadRecordPolicy) -> LoadOptions {
    LoadOptions {
        format: Some(DataFormat::JsonArray),
        fields: FieldSpec {
            text: "text".into(),
            text_pair: None,
            label: "class".into(),
        },
        labels: LabelSpec::Integer { num_classes: 2 },
        bad_records,
    }
}

/// All three files, in the order amazon, imdb, yelp.
pub fn load_sentiment(bad_records: BadRecordPolicy) -> Result<Dataset, DataError> {
    let options = sentiment_options(bad_records);
    let mut files = SENTIMENT_FILES.iter();
    let (name, contents) = files.next().expect("three files");
    let mut dataset = load_str(name, contents, DataFormat::JsonArray, &options)?;
    for (name, contents) in files {
        dataset.append(load_str(name, contents, DataFormat::JsonArray, &options)?)?;
    }
    Ok(dataset)
}

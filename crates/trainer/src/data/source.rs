//! Where a study's data comes from: the shape of a config's data section.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::embedded::load_sentiment;
use super::error::DataError;
use super::options::{BadRecordPolicy, LoadOptions};
use super::reader::load_file;
use super::record::Dataset;

/// The data to load, as a study config names it, e.g.
/// `{"kind": "embedded_sentiment"}` or
/// `{"kind": "files", "paths": ["train.csv"], "options": {"labels": {"integer": {"num_classes": 2}}}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DataSource {
    /// The vendored Sentiment Labelled Sentences set (see `embedded`).
    EmbeddedSentiment {
        /// What to do with the set's bad records (default: skip them; each
        /// file ends with one).
        #[serde(default)]
        bad_records: BadRecordPolicy,
    },
    /// One or more files read with the same options, concatenated in order.
    Files {
        /// The files, at least one, each named in messages as given.
        paths: Vec<PathBuf>,
        /// How every file is read.
        options: LoadOptions,
    },
}

impl Default for DataSource {
    fn default() -> Self {
        Self::EmbeddedSentiment {
            bad_records: BadRecordPolicy::Skip,
        }
    }
}

impl DataSource {
    /// Loads every file; the whole data set must have an example of every
    /// class (one file alone need not).
    pub fn load(&self) -> Result<Dataset, DataError> {
        let dataset = match self {
            Self::EmbeddedSentiment { bad_records } => load_sentiment(*bad_records)?,
            Self::Files { paths, options } => {
                let mut paths = paths.iter();
                let first = paths.next().ok_or(DataError::NoFiles)?;
                let mut dataset = load_file(first, options)?;
                for path in paths {
                    dataset.append(load_file(path, options)?)?;
                }
                dataset
            }
        };
        dataset.check_classes_have_examples()?;
        Ok(dataset)
    }
}

//! Texts to classify: the study's file formats without a label field, for
//! prediction.

use std::path::Path;

use super::error::DataError;
use super::options::{DataFormat, FieldSpec};
use super::reader::{parse, read_data_file};
use super::record::Records;

/// One record of a file of texts to classify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextRecord {
    /// The (first) text, never empty nor only whitespace.
    pub text: String,
    /// The second text of a pair task, when the record has one.
    pub text_pair: Option<String>,
}

/// Every record of a file of texts (see [`Records`]).
pub type TextRecords = Records<TextRecord>;

/// Reads CSV, JSON Lines or a JSON array as [`super::load_file`] does
/// (`format` from the extension when `None`), except that there is no label:
/// the text field is required, the pair field (when `fields` names one) is
/// optional per record. The label field of `fields` is ignored. A file
/// without any record is [`DataError::Empty`].
pub fn load_texts(
    path: impl AsRef<Path>,
    fields: &FieldSpec,
    format: Option<DataFormat>,
) -> Result<TextRecords, DataError> {
    let text = read_data_file(path.as_ref(), format)?;
    let parsed = parse(
        &text.file,
        &text.contents,
        text.format,
        fields,
        None,
        &text.not_utf8,
    )?;
    // Nothing to classify is an error, as nothing to train on is.
    if parsed.is_empty() {
        return Err(DataError::Empty {
            file: text.file,
            bad: Vec::new(),
        });
    }
    Ok(parsed
        .into_iter()
        .map(|(location, example)| {
            let record = example.map(|e| TextRecord {
                text: e.text,
                text_pair: e.text_pair,
            });
            (location, record)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::BadRecordReason;

    fn fields() -> FieldSpec {
        FieldSpec {
            text_pair: Some("text_pair".into()),
            ..FieldSpec::default()
        }
    }

    fn read(name: &str, contents: &str) -> TextRecords {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        load_texts(&path, &fields(), None).unwrap()
    }

    #[test]
    fn jsonl_keeps_every_record_in_order_with_its_line() {
        let records = read(
            "x.jsonl",
            "{\"text\": \"good\"}\n\n{\"text\": \"a\", \"text_pair\": \"b\", \"label\": 7}\n{\"txt\": 1}\n",
        );
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].1.as_ref().unwrap().text_pair, None);
        let pair = records[1].1.as_ref().unwrap();
        assert_eq!(
            (pair.text.as_str(), pair.text_pair.as_deref()),
            ("a", Some("b"))
        );
        assert_eq!(records[2].0.line, 4);
        assert!(matches!(
            records[2].1,
            Err(BadRecordReason::MissingText { .. })
        ));
    }

    #[test]
    fn jsonl_lines_end_at_crlf_and_lone_cr_too() {
        let records = read(
            "x.jsonl",
            "{\"text\": \"a\"}\r{\"text\": \"b\"}\r\n\r{\"txt\": 1}",
        );
        assert_eq!(records.len(), 3);
        assert_eq!(records[1].1.as_ref().unwrap().text, "b");
        assert_eq!(records[2].0.line, 4);
        assert!(matches!(
            records[2].1,
            Err(BadRecordReason::MissingText { .. })
        ));
    }

    #[test]
    fn csv_needs_only_the_text_column() {
        let records = read("x.csv", "text,text_pair\nhello,\nbye,there\n,x\n");
        assert_eq!(records[0].1.as_ref().unwrap().text_pair, None);
        assert_eq!(
            records[1].1.as_ref().unwrap().text_pair.as_deref(),
            Some("there")
        );
        assert!(matches!(
            records[2].1,
            Err(BadRecordReason::EmptyText { .. })
        ));
        assert_eq!(records[2].0.line, 4);
        let records = read("y.csv", "id,text\n1,hello\n");
        assert_eq!(records[0].1.as_ref().unwrap().text, "hello");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z.csv");
        std::fs::write(&path, "body\nhello\n").unwrap();
        let e = load_texts(&path, &fields(), None).unwrap_err().to_string();
        assert!(e.contains("z.csv") && e.contains("text"), "{e}");
    }

    #[test]
    fn json_array_records_carry_their_index() {
        let records = read("x.json", "[{\"text\": \"a\"},\n 5]");
        assert_eq!(records[1].0.index, Some(1));
        assert_eq!(records[1].0.line, 2);
        assert!(matches!(records[1].1, Err(BadRecordReason::NotAnObject)));
    }

    #[test]
    fn a_file_without_records_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        for (name, contents) in [("e.json", "[]"), ("e.jsonl", "\n\n"), ("e.csv", "text\n")] {
            let path = dir.path().join(name);
            std::fs::write(&path, contents).unwrap();
            let err = load_texts(&path, &fields(), None).unwrap_err();
            assert!(matches!(err, DataError::Empty { .. }), "{name}: {err}");
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}

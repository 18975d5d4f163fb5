//! Loading CSV, JSON Lines and JSON arrays: fields, labels, every kind of bad
//! record with its location, both policies, and the embedded set.

use std::path::{Path, PathBuf};

use trainer::data::embedded::{SENTIMENT_FILES, load_sentiment};
use trainer::data::{
    BadRecordPolicy, DataError, DataFormat, FieldSpec, LabelSpec, LoadOptions, load_file, load_str,
};

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn texts(dataset: &trainer::data::Dataset) -> Vec<(&str, usize)> {
    dataset
        .examples
        .iter()
        .map(|e| (e.text.as_str(), e.label))
        .collect()
}

#[test]
fn the_three_formats_load_the_same_examples() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write(
        dir.path(),
        "d.csv",
        "id,text,label\n1,\"Great, really great\",1\n2,\"Said \"\"no\"\"\",0\n3,multi\nline? no,1\n",
    );
    let jsonl = write(
        dir.path(),
        "d.jsonl",
        "{\"text\": \"Great, really great\", \"label\": 1}\n\n{\"text\": \"Said \\\"no\\\"\", \"label\": 0}\n",
    );
    let json = write(
        dir.path(),
        "d.json",
        "[\n  {\"text\": \"Great, really great\", \"label\": 1},\n  {\"text\": \"Said \\\"no\\\"\", \"label\": 0.0}\n]\n",
    );
    let options = LoadOptions::new(2);
    let expected = vec![("Great, really great", 1), ("Said \"no\"", 0)];
    for path in [&jsonl, &json] {
        let dataset = load_file(path, &options).unwrap();
        assert_eq!(texts(&dataset), expected, "{}", path.display());
        assert_eq!(dataset.report.loaded, 2);
        assert!(dataset.report.skipped.is_empty());
        assert_eq!(dataset.num_classes, 2);
    }
    // The CSV's third row has too few fields (an unquoted line break).
    let dataset = load_file(&csv, &options).unwrap();
    assert_eq!(texts(&dataset)[..2], expected[..]);
    assert_eq!(
        dataset.report.skipped.len(),
        2,
        "{}",
        dataset.report.summary()
    );
}

#[test]
fn text_pairs_and_label_names_use_the_configured_fields() {
    let options = LoadOptions {
        format: Some(DataFormat::JsonLines),
        fields: FieldSpec {
            text: "premise".into(),
            text_pair: Some("hypothesis".into()),
            label: "gold".into(),
        },
        labels: LabelSpec::Names(vec![
            "entailment".into(),
            "neutral".into(),
            "contradiction".into(),
        ]),
        bad_records: BadRecordPolicy::Reject,
    };
    let contents = concat!(
        "{\"premise\": \"A man plays.\", \"hypothesis\": \"Someone plays.\", \"gold\": \"entailment\"}\n",
        "{\"premise\": \"A man plays.\", \"hypothesis\": \"Nobody plays.\", \"gold\": \"contradiction\"}\n",
        "{\"premise\": \"A man plays.\", \"hypothesis\": \"He is tall.\", \"gold\": 1}\n",
    );
    let dataset = load_str("nli.jsonl", contents, DataFormat::JsonLines, &options).unwrap();
    let labels: Vec<usize> = dataset.examples.iter().map(|e| e.label).collect();
    assert_eq!(labels, [0, 2, 1]);
    assert_eq!(
        dataset.examples[1].text_pair.as_deref(),
        Some("Nobody plays.")
    );
    assert_eq!(dataset.label_names.as_ref().unwrap().len(), 3);

    let bad = "{\"premise\": \"A\", \"hypothesis\": \"  \", \"gold\": \"maybe\"}\n";
    let err = load_str("nli.jsonl", bad, DataFormat::JsonLines, &options).unwrap_err();
    assert!(
        err.to_string()
            .contains("nli.jsonl:1: text field `hypothesis` is empty"),
        "{err}"
    );
}

/// One JSON Lines file with one bad record of each kind, and the reason and
/// line each must be reported with.
const BAD_JSONL: &str = concat!(
    "{\"text\": \"fine\", \"label\": 1}\n",            // 1
    "{\"text\": \"\", \"label\": 1}\n",                // 2 empty text
    "{\"text\": \" \\t \", \"label\": 0}\n",           // 3 whitespace text
    "{\"label\": 0}\n",                                // 4 missing text
    "{\"text\": 17, \"label\": 0}\n",                  // 5 text not a string
    "{\"text\": \"no label\"}\n",                      // 6 missing label
    "{\"text\": \"null label\", \"label\": null}\n",   // 7 null label
    "{\"text\": \"half\", \"label\": 1.5}\n",          // 8 non-integer
    "{\"text\": \"word\", \"label\": \"positive\"}\n", // 9 non-integer (no names)
    "{\"text\": \"two\", \"label\": 2}\n",             // 10 out of range
    "{\"text\": \"minus\", \"label\": -1}\n",          // 11 out of range
    "{\"text\": \"nan\", \"label\": \"NaN\"}\n",       // 12 NaN
    "{\"text\": \"broken\", \"label\": 1\n",           // 13 malformed
    "[\"not\", \"an object\"]\n",                      // 14 not an object
    "{\"text\": \"true\", \"label\": true}\n",         // 15 non-integer
    "{\"text\": \"fine too\", \"label\": \"0\"}\n",    // 16 ok: integer in a string
    "{\"text\": \"py NaN\", \"label\": NaN}\n",        // 17 NaN as Python's json writes it
    "{\"text\": \"Infinity \\\" NaN\", \"label\": -Infinity}\n", // 18 non-integer
    "{\"text\": NaN, \"label\": 0}\n",                 // 19 text a number, as Python writes NaN
);

const BAD_JSONL_EXPECTED: &[(usize, &str)] = &[
    (2, "empty_text"),
    (3, "empty_text"),
    (4, "missing_text"),
    (5, "missing_text"),
    (6, "missing_label"),
    (7, "null_label"),
    (8, "non_integer_label"),
    (9, "non_integer_label"),
    (10, "label_out_of_range"),
    (11, "label_out_of_range"),
    (12, "nan_label"),
    (13, "malformed"),
    (14, "not_an_object"),
    (15, "non_integer_label"),
    (17, "nan_label"),
    (18, "non_integer_label"),
    (19, "missing_text"),
];

#[test]
fn every_bad_record_kind_is_skipped_with_its_line_under_skip() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bad.jsonl", BAD_JSONL);
    let dataset = load_file(&path, &LoadOptions::new(2)).unwrap();
    assert_eq!(texts(&dataset), [("fine", 1), ("fine too", 0)]);
    let report = &dataset.report;
    assert_eq!(report.loaded, 2);
    let got: Vec<(usize, &str)> = report
        .skipped
        .iter()
        .map(|b| (b.location.line, b.reason.kind()))
        .collect();
    assert_eq!(got, BAD_JSONL_EXPECTED);
    for bad in &report.skipped {
        let message = bad.to_string();
        let location = format!("{}:{}: ", path.display(), bad.location.line);
        assert!(message.starts_with(&location), "{message}");
    }
    assert_eq!(
        report.skipped_by_reason(),
        [
            ("empty_text", 2),
            ("label_out_of_range", 2),
            ("malformed", 1),
            ("missing_label", 1),
            ("missing_text", 3),
            ("nan_label", 2),
            ("non_integer_label", 4),
            ("not_an_object", 1),
            ("null_label", 1),
        ]
    );
    let summary = report.summary();
    assert!(
        summary.starts_with("loaded 2 records, skipped 17"),
        "{summary}"
    );
    assert!(
        summary.contains("bad.jsonl:10: label field `label` is 2, outside 0..2"),
        "{summary}"
    );
}

#[test]
fn every_bad_record_is_listed_when_the_policy_is_reject() {
    let mut options = LoadOptions::new(2);
    options.bad_records = BadRecordPolicy::Reject;
    let err = load_str("bad.jsonl", BAD_JSONL, DataFormat::JsonLines, &options).unwrap_err();
    let DataError::Rejected { file, bad } = &err else {
        panic!("expected Rejected, got {err}");
    };
    assert_eq!(file, "bad.jsonl");
    let lines: Vec<usize> = bad.iter().map(|b| b.location.line).collect();
    let expected: Vec<usize> = BAD_JSONL_EXPECTED.iter().map(|(line, _)| *line).collect();
    assert_eq!(lines, expected);
    let message = err.to_string();
    assert!(message.contains("17 bad record(s)"), "{message}");
    assert!(
        message.contains("bad.jsonl:19: text field `text` is missing or not a string"),
        "{message}"
    );
    assert!(
        message.contains("bad.jsonl:7: label field `label` is null"),
        "{message}"
    );
    assert!(
        message.contains("bad.jsonl:12: label field `label` is NaN"),
        "{message}"
    );
}

#[test]
fn csv_bad_records_carry_their_line() {
    let contents = concat!(
        "text,label\n",        // 1
        "good,1\n",            // 2
        "\"\",0\n",            // 3 empty text
        "no label,\n",         // 4 empty label cell
        "nan label,nan\n",     // 5 NaN as pandas writes it
        "float,1.0\n",         // 6 ok: integral float
        "half,0.5\n",          // 7 non-integer
        "big,3\n",             // 8 out of range
        "too,many,fields\n",   // 9 malformed
        "\"multi\nline\",x\n", // 10 non-integer, a record spanning lines 10-11
        "last,0\n",            // 12
    );
    let dataset = load_str("d.csv", contents, DataFormat::Csv, &LoadOptions::new(2)).unwrap();
    assert_eq!(texts(&dataset), [("good", 1), ("float", 1), ("last", 0)]);
    let got: Vec<(usize, &str)> = dataset
        .report
        .skipped
        .iter()
        .map(|b| (b.location.line, b.reason.kind()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "empty_text"),
            (4, "missing_label"),
            (5, "nan_label"),
            (7, "non_integer_label"),
            (8, "label_out_of_range"),
            (9, "malformed"),
            (10, "non_integer_label"),
        ]
    );
    assert!(
        dataset.report.skipped[0]
            .to_string()
            .starts_with("d.csv:3: ")
    );
}

/// The csv crate runs a quoted field on to the next quote of the file; a
/// quote left open must not merge the rows after it into one text.
#[test]
fn a_csv_quote_left_open_is_a_bad_record_not_merged_rows() {
    let contents = concat!(
        "text,label\n",               // 1
        "\"she said hi,1\n",          // 2 opens a quote...
        "ok,0\n",                     // 3
        "he said \"bye\",1\n",        // 4 ...closed before `bye`
        "fine,0\n",                   // 5
        "\"quoted, fine\",1\n",       // 6 ok
        "\"a \"\"quote\"\"\",0\n",    // 7 ok: a doubled quote
        "\"never closed,1\nlast,0\n", // 8-9
    );
    let dataset = load_str("q.csv", contents, DataFormat::Csv, &LoadOptions::new(2)).unwrap();
    assert_eq!(
        texts(&dataset),
        [("fine", 0), ("quoted, fine", 1), ("a \"quote\"", 0)]
    );
    let bad: Vec<String> = dataset
        .report
        .skipped
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(
        bad[0].starts_with("q.csv:2: ")
            && bad[0].contains("quoted field opened on line 2 closes on line 4"),
        "{bad:?}"
    );
    assert!(
        bad[1].starts_with("q.csv:8: ")
            && bad[1].contains("quoted field opened on line 8 is never closed"),
        "{bad:?}"
    );
}

#[test]
fn a_csv_naming_a_column_twice_is_an_error() {
    for header in ["text,label,label", "text,label,text"] {
        let contents = format!("{header}\nhi,1,0\n");
        let err = load_str("d.csv", &contents, DataFormat::Csv, &LoadOptions::new(2)).unwrap_err();
        assert!(matches!(err, DataError::DuplicateColumn { .. }), "{err}");
        assert!(err.to_string().starts_with("d.csv:1: column `"), "{err}");
    }
    // A column the load does not read may repeat.
    let ok = "text,label,note,note\nhi,1,a,b\nyo,0,c,d\n";
    let dataset = load_str("d.csv", ok, DataFormat::Csv, &LoadOptions::new(2)).unwrap();
    assert_eq!(texts(&dataset), [("hi", 1), ("yo", 0)]);
}

/// Label names that are numbers (star ratings) are names, whether the
/// file writes them as numbers, integral floats or strings; an integer
/// that names no class is then a bad record (read as a position, `0` would
/// join `1` in the first class); beside names that are not numbers,
/// integers are indices.
#[test]
fn numeric_label_names_are_names_before_indices() {
    let mut options = LoadOptions::new(3);
    options.labels = LabelSpec::Names(vec!["1".into(), "2".into(), "3".into()]);
    options.bad_records = BadRecordPolicy::Reject;
    let jsonl = concat!(
        "{\"text\": \"one\", \"label\": 1}\n",
        "{\"text\": \"two\", \"label\": 2.0}\n",
        "{\"text\": \"three\", \"label\": \"3\"}\n",
    );
    let csv = "text,label\none,1\ntwo,2.0\nthree,3\n";
    for (file, contents, format) in [
        ("s.jsonl", jsonl, DataFormat::JsonLines),
        ("s.csv", csv, DataFormat::Csv),
    ] {
        let dataset = load_str(file, contents, format, &options).unwrap();
        assert_eq!(texts(&dataset), [("one", 0), ("two", 1), ("three", 2)]);
        let zero = contents.replacen('1', "0", 1);
        let err = load_str(file, &zero, format, &options).unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"is "0", not one of ["1", "2", "3"]"#),
            "{err}"
        );
    }
    options.labels = LabelSpec::Names(vec!["neg".into(), "pos".into(), "mixed".into()]);
    let dataset = load_str(
        "s.jsonl",
        jsonl.replace("3\"", "0\"").as_str(),
        DataFormat::JsonLines,
        &options,
    )
    .unwrap();
    assert_eq!(texts(&dataset), [("one", 1), ("two", 2), ("three", 0)]);
}

#[test]
fn a_csv_without_the_configured_column_is_an_error() {
    let mut options = LoadOptions::new(2);
    options.fields.label = "sentiment".into();
    let err = load_str("d.csv", "text,label\nhi,1\n", DataFormat::Csv, &options).unwrap_err();
    assert!(matches!(err, DataError::MissingColumn { .. }), "{err}");
    assert!(err.to_string().contains("no column `sentiment`"), "{err}");
}

#[test]
fn json_array_records_are_located_by_index_and_line() {
    let contents = "[\n {\"text\": \"a\", \"label\": 0},\n {\"text\": \"b\", \"label\": 9},\n\n {\"text\": \"\",\n  \"label\": 1}, {\"text\": \"c\"},\n {\"text\": \"NaN\", \"label\": NaN}\n]";
    let dataset = load_str(
        "arr.json",
        contents,
        DataFormat::JsonArray,
        &LoadOptions::new(2),
    )
    .unwrap();
    let located: Vec<(usize, Option<usize>, &str)> = dataset
        .report
        .skipped
        .iter()
        .map(|b| (b.location.line, b.location.index, b.reason.kind()))
        .collect();
    assert_eq!(
        located,
        [
            (3, Some(1), "label_out_of_range"),
            (5, Some(2), "empty_text"),
            (6, Some(3), "missing_label"),
            (7, Some(4), "nan_label"),
        ]
    );
    assert_eq!(
        dataset.report.skipped[1].to_string(),
        "arr.json:5 (record 2): text field `text` is empty"
    );
}

/// A JSON array's parse error and its records count lines alike, whichever
/// way its lines end (serde_json counts `\n` alone; a lone `\r` ends a line
/// in every data reader), and the position in the message is the same line.
#[test]
fn a_json_array_parse_error_is_on_the_line_its_records_would_be() {
    for newline in ["\n", "\r\n", "\r"] {
        let contents = [
            "[{\"text\": \"a\", \"label\": NaN},",
            " {\"text\": \"b\", \"label\": 1},",
            " {\"text\": NaN, oops}]",
        ]
        .join(newline);
        let err = load_str(
            "arr.json",
            &contents,
            DataFormat::JsonArray,
            &LoadOptions::new(2),
        )
        .unwrap_err();
        assert!(
            matches!(err, DataError::Parse { line: 3, .. }),
            "{newline:?}: {err}"
        );
        assert!(
            err.to_string().ends_with("at line 3 column 16"),
            "{newline:?}: {err}"
        );
        let valid = contents.replace(", oops", "");
        let dataset = load_str(
            "arr.json",
            &valid,
            DataFormat::JsonArray,
            &LoadOptions::new(2),
        )
        .unwrap();
        let lines: Vec<usize> = dataset
            .report
            .skipped
            .iter()
            .map(|b| b.location.line)
            .collect();
        assert_eq!(lines, [1, 3], "{newline:?}");
    }
}

#[test]
fn unparsable_files_and_options_are_errors_not_panics() {
    let options = LoadOptions::new(2);
    let err = load_str(
        "arr.json",
        "[{\"text\": \"a\",\n \"label\": 0},\n {oops}]",
        DataFormat::JsonArray,
        &options,
    )
    .unwrap_err();
    assert!(matches!(err, DataError::Parse { line: 3, .. }), "{err}");
    let err = load_str(
        "obj.json",
        "{\"text\": \"a\"}",
        DataFormat::JsonArray,
        &options,
    )
    .unwrap_err();
    assert!(matches!(err, DataError::Parse { .. }), "{err}");
    let err = load_file("/nonexistent/data.jsonl", &options).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/data.jsonl"), "{err}");
    let err = load_file("data.parquet", &options).unwrap_err();
    assert!(matches!(err, DataError::UnknownFormat { .. }), "{err}");
    let err = load_str(
        "e.jsonl",
        "\n{\"text\": \"\", \"label\": 0}\n",
        DataFormat::JsonLines,
        &options,
    )
    .unwrap_err();
    assert!(matches!(err, DataError::Empty { .. }), "{err}");
    // Each bad record is listed with its line and reason.
    assert!(
        err.to_string().contains("e.jsonl:2") && err.to_string().contains("empty"),
        "{err}"
    );
    let err = load_str("x.jsonl", "", DataFormat::JsonLines, &LoadOptions::new(1)).unwrap_err();
    assert!(matches!(err, DataError::NoClasses), "{err}");
}

#[test]
fn load_options_deserialize_from_a_config() {
    let options: LoadOptions = serde_json::from_str(
        r#"{"format": "csv", "fields": {"text": "review", "label": "stars"},
            "labels": {"integer": {"num_classes": 5}}, "bad_records": "reject"}"#,
    )
    .unwrap();
    assert_eq!(options.format, Some(DataFormat::Csv));
    assert_eq!(options.fields.text, "review");
    assert_eq!(options.labels, LabelSpec::Integer { num_classes: 5 });
    assert_eq!(options.bad_records, BadRecordPolicy::Reject);
    let options: LoadOptions =
        serde_json::from_str(r#"{"labels": {"names": ["neg", "pos"]}}"#).unwrap();
    assert_eq!(options.fields, FieldSpec::default());
    assert_eq!(options.bad_records, BadRecordPolicy::Skip);
}

#[test]
fn the_embedded_set_has_3000_records_and_skips_the_three_empty_ones() {
    let dataset = load_sentiment(BadRecordPolicy::Skip).unwrap();
    assert_eq!(dataset.examples.len(), 3000);
    assert_eq!(dataset.report.loaded, 3000);
    assert_eq!(dataset.class_counts(), [1500, 1500]);
    let skipped: Vec<String> = dataset
        .report
        .skipped
        .iter()
        .map(|b| b.to_string())
        .collect();
    let expected: Vec<String> = SENTIMENT_FILES
        .iter()
        .map(|(name, _)| format!("{name}:1 (record 1000): text field `text` is empty"))
        .collect();
    assert_eq!(skipped, expected);
    assert!(dataset.examples.iter().all(|e| !e.text.trim().is_empty()));

    let err = load_sentiment(BadRecordPolicy::Reject).unwrap_err();
    assert!(
        err.to_string().contains("amazon.json:1 (record 1000)"),
        "{err}"
    );
}

#[test]
fn a_data_source_from_a_config_loads_files_or_the_embedded_set() {
    use trainer::data::DataSource;
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.csv", "text,label\none,0\ntwo,1\n");
    let b = write(dir.path(), "b.csv", "text,label\nthree,1\n,0\n");
    let config = serde_json::json!({
        "kind": "files",
        "paths": [a, b],
        "options": {"labels": {"integer": {"num_classes": 2}}},
    });
    let source: DataSource = serde_json::from_value(config).unwrap();
    let dataset = source.load().unwrap();
    assert_eq!(texts(&dataset), [("one", 0), ("two", 1), ("three", 1)]);
    assert_eq!(dataset.report.loaded, 3);
    assert_eq!(dataset.report.skipped.len(), 1);
    assert!(dataset.report.skipped[0].to_string().contains("b.csv:3: "));

    let source: DataSource = serde_json::from_str(r#"{"kind": "embedded_sentiment"}"#).unwrap();
    assert_eq!(source, DataSource::default());
    assert_eq!(source.load().unwrap().examples.len(), 3000);
    let empty: DataSource = serde_json::from_str(
        r#"{"kind": "files", "paths": [], "options": {"labels": {"names": ["a", "b"]}}}"#,
    )
    .unwrap();
    assert!(matches!(empty.load(), Err(DataError::NoFiles)));
}

/// A declared class no example has is refused once the whole data set is
/// read (one file may lack a class the next one has), naming the count or
/// the name; a count of a billion is refused as cheaply as one of three.
#[test]
fn a_class_without_examples_is_refused_naming_it() {
    use trainer::data::DataSource;
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.csv", "text,label\none,0\ntwo,0\n");
    let b = write(dir.path(), "b.csv", "text,label\nthree,1\n");
    let files = |labels: serde_json::Value, paths: &[&PathBuf]| -> DataSource {
        serde_json::from_value(serde_json::json!({
            "kind": "files", "paths": paths, "options": {"labels": labels},
        }))
        .unwrap()
    };
    let both = files(
        serde_json::json!({"integer": {"num_classes": 2}}),
        &[&a, &b],
    );
    assert_eq!(both.load().unwrap().examples.len(), 3);
    let only_a = files(serde_json::json!({"integer": {"num_classes": 2}}), &[&a]);
    let err = only_a.load().unwrap_err();
    assert!(
        matches!(err, DataError::ClassWithoutExamples { missing: 1, .. }),
        "{err}"
    );
    for n in [3u64, 1_000_000_000] {
        let err = files(
            serde_json::json!({"integer": {"num_classes": n}}),
            &[&a, &b],
        )
        .load()
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "num_classes = {n}, but the examples have 2 distinct labels (none has label 2); set num_classes to the number of classes the data has"
            )
        );
    }
    let names = write(dir.path(), "n.csv", "text,label\nyes,pos\nno,neg\n");
    let err = files(
        serde_json::json!({"names": ["neg", "neutral", "pos"]}),
        &[&names],
    )
    .load()
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("label_names lists 3 classes, but no example has label `neutral`"),
        "{err}"
    );
}

fn write_bytes(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// Each skipped record's location and reason kind.
fn skipped(dataset: &trainer::data::Dataset) -> Vec<(usize, Option<usize>, &'static str)> {
    dataset
        .report
        .skipped
        .iter()
        .map(|b| (b.location.line, b.location.index, b.reason.kind()))
        .collect()
}

#[test]
fn a_byte_that_is_not_utf8_is_blamed_on_its_own_record_in_a_one_line_array() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_bytes(
        dir.path(),
        "one_line.json",
        b"[{\"text\": \"caf\xe9 good\", \"label\": 0}, {\"text\": \"fine\", \"label\": 1}, {\"text\": \"ok\", \"label\": NaN}, {\"text\": \"x\xff\", \"label\": 1}, {\"text\": \"last\", \"label\": 0}]",
    );
    let dataset = load_file(&path, &LoadOptions::new(2)).unwrap();
    assert_eq!(texts(&dataset), [("fine", 1), ("last", 0)]);
    assert_eq!(
        skipped(&dataset),
        [
            (1, Some(0), "not_utf8"),
            (1, Some(2), "nan_label"),
            (1, Some(3), "not_utf8"),
        ]
    );
    let message = dataset.report.skipped[2].to_string();
    assert!(
        message.ends_with("byte 0xFF at line 1, column 108 is not UTF-8"),
        "{message}"
    );

    let mut options = LoadOptions::new(2);
    options.bad_records = BadRecordPolicy::Reject;
    let err = load_file(&path, &options).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("one_line.json:1 (record 0): byte 0xE9 at line 1, column 15 is not UTF-8"),
        "{message}"
    );
    assert!(!message.contains("(record 4)"), "{message}");
}

#[test]
fn a_byte_that_is_not_utf8_is_blamed_on_its_record_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = write_bytes(
        dir.path(),
        "d.jsonl",
        b"{\"text\": \"good\", \"label\": 0}\n{\"text\": \"b\xe9d\", \"label\": 1}\n{\"text\": \"fine\", \"label\": 1}\n",
    );
    let csv = write_bytes(
        dir.path(),
        "d.csv",
        b"text,label\ngood,0\n\"multi\nb\xe9d\",1\nfine,1\n",
    );
    for path in [&jsonl, &csv] {
        let dataset = load_file(path, &LoadOptions::new(2)).unwrap();
        assert_eq!(texts(&dataset), [("good", 0), ("fine", 1)]);
        assert_eq!(
            skipped(&dataset),
            [(3 - (path == &jsonl) as usize, None, "not_utf8")]
        );
        // The byte's own line, which in the CSV is the record's second.
        let message = dataset.report.skipped[0].to_string();
        let (line, column) = if path == &csv { (4, 2) } else { (2, 12) };
        assert!(
            message.ends_with(&format!(
                "byte 0xE9 at line {line}, column {column} is not UTF-8"
            )),
            "{message}"
        );
    }
    // Outside every record: the CSV header.
    let header = write_bytes(dir.path(), "h.csv", b"text,label,n\xe9te\ngood,0,x\n");
    let err = load_file(&header, &LoadOptions::new(2)).unwrap_err();
    assert!(
        err.to_string().contains("h.csv:1: byte 0xE9 at column 13"),
        "{err}"
    );
    // Even in a column the study needs, which it would otherwise call missing.
    let header = write_bytes(dir.path(), "t.csv", b"t\xe9xt,label\ngood,0\n");
    let err = load_file(&header, &LoadOptions::new(2)).unwrap_err();
    assert!(
        err.to_string().contains("t.csv:1: byte 0xE9 at column 2"),
        "{err}"
    );
    let header = write_bytes(dir.path(), "q.csv", b"\"text\",\"lab\nel\xe9\"\ngood,0\n");
    let err = load_file(&header, &LoadOptions::new(2)).unwrap_err();
    assert!(
        err.to_string().contains("q.csv:2: byte 0xE9 at column 3"),
        "{err}"
    );
}

#[test]
fn a_byte_order_mark_is_ignored_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("bom.csv", "\u{FEFF}text,label\nhello,1\n"),
        ("bom.jsonl", "\u{FEFF}{\"text\": \"hello\", \"label\": 1}\n"),
        ("bom.json", "\u{FEFF}[{\"text\": \"hello\", \"label\": 1}]"),
    ];
    for (name, contents) in files {
        let path = write(dir.path(), name, contents);
        let dataset = load_file(&path, &LoadOptions::new(2)).unwrap();
        assert_eq!(texts(&dataset), [("hello", 1)], "{name}");
        assert!(dataset.report.skipped.is_empty(), "{name}");
    }
    let dataset = load_str(
        "s.jsonl",
        "\u{FEFF}{\"text\": \"hello\", \"label\": 1}\n",
        DataFormat::JsonLines,
        &LoadOptions::new(2),
    )
    .unwrap();
    assert_eq!(texts(&dataset), [("hello", 1)]);
}

#[test]
fn csv_records_ending_in_a_lone_cr_carry_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_bytes(
        dir.path(),
        "mac.csv",
        b"text,label\rgood,1\r\"\",0\rb\xe9d,1\rlast,0\r",
    );
    let dataset = load_file(&path, &LoadOptions::new(2)).unwrap();
    assert_eq!(texts(&dataset), [("good", 1), ("last", 0)]);
    assert_eq!(
        skipped(&dataset),
        [(3, None, "empty_text"), (4, None, "not_utf8")]
    );
    let message = dataset.report.skipped[1].to_string();
    assert!(
        message.ends_with("byte 0xE9 at line 4, column 2 is not UTF-8"),
        "{message}"
    );
    let mixed = "text,label\r\ngood,1\r\n\"\",0\r\n";
    let dataset = load_str("win.csv", mixed, DataFormat::Csv, &LoadOptions::new(2)).unwrap();
    assert_eq!(skipped(&dataset), [(3, None, "empty_text")]);
}

#[test]
fn a_json_file_holding_json_lines_is_read_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    // What `datasets`' `Dataset.to_json("d.json")` writes.
    let path = write(
        dir.path(),
        "d.json",
        "\n {\"text\":\"hello\",\"label\":1}\n{\"text\":\"\",\"label\":0}\n{\"text\":\"bye\",\"label\":0}\n",
    );
    let dataset = load_file(&path, &LoadOptions::new(2)).unwrap();
    assert_eq!(texts(&dataset), [("hello", 1), ("bye", 0)]);
    assert_eq!(skipped(&dataset), [(3, None, "empty_text")]);
    // A format set to json_array is kept, and the error says how to read JSON Lines.
    let mut options = LoadOptions::new(2);
    options.format = Some(DataFormat::JsonArray);
    let err = load_file(&path, &options).unwrap_err();
    assert!(matches!(err, DataError::Parse { .. }), "{err}");
    assert!(err.to_string().contains("json_lines"), "{err}");
}

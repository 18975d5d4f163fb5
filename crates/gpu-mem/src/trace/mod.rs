//! Allocation traces: a JSON-lines format, a reader with line-numbered
//! errors, a replay harness that runs a trace through any configuration on a
//! [`SimDevice`](crate::SimDevice), and (feature `testing`) a generator of a
//! multi-trial BERT fine-tuning trace (`bert`).
//!
//! One record per line:
//!
//! ```text
//! {"op":"alloc","id":7,"size":1048576,"stream":0}
//! {"op":"free","id":7}
//! {"op":"empty_cache"}
//! ```

#[cfg(feature = "testing")]
pub mod bert;
mod replay;

pub use replay::{ReplayReport, replay};

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::Path;

/// One trace record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum TraceRecord {
    /// Allocate `size` bytes on `stream` (0 when absent) and call it `id`.
    Alloc {
        /// Names the allocation until it is freed.
        id: u64,
        /// Bytes asked for.
        size: usize,
        /// The stream id.
        #[serde(default)]
        stream: u64,
    },
    /// Free the live allocation `id`.
    Free {
        /// The allocation's id.
        id: u64,
    },
    /// Give cached memory back to the device.
    EmptyCache,
}

/// A trace that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The trace could not be read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// Names the trace.
        path: String,
        /// The read error.
        source: std::io::Error,
    },
    /// A line is not a trace record.
    #[error("{path}:{line}: not a trace record: {message}")]
    Parse {
        /// Names the trace.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// An allocation reuses the id of a live one.
    #[error("{path}:{line}: field `id`: allocation {id} is already live")]
    DuplicateId {
        /// Names the trace.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// The id.
        id: u64,
    },
    /// A free names an id that is not live.
    #[error("{path}:{line}: field `id`: free of allocation {id}, which is not live")]
    UnknownId {
        /// Names the trace.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// The id.
        id: u64,
    },
}

/// Parse JSON lines (blank lines are skipped) and check that ids pair up:
/// no id is allocated twice while live, no free names a dead id. `path`
/// only names the source in errors.
pub fn parse(reader: impl BufRead, path: &str) -> Result<Vec<TraceRecord>, TraceError> {
    let mut records = Vec::new();
    let mut live = HashSet::new();
    for (i, line) in reader.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|source| TraceError::Io {
            path: path.to_string(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let record: TraceRecord = serde_json::from_str(&line).map_err(|e| TraceError::Parse {
            path: path.to_string(),
            line: line_no,
            message: e.to_string(),
        })?;
        match record {
            TraceRecord::Alloc { id, .. } if !live.insert(id) => {
                return Err(TraceError::DuplicateId {
                    path: path.to_string(),
                    line: line_no,
                    id,
                });
            }
            TraceRecord::Free { id } if !live.remove(&id) => {
                return Err(TraceError::UnknownId {
                    path: path.to_string(),
                    line: line_no,
                    id,
                });
            }
            _ => {}
        }
        records.push(record);
    }
    Ok(records)
}

/// Read a trace file.
pub fn read_file(path: &Path) -> Result<Vec<TraceRecord>, TraceError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: shown.clone(),
        source,
    })?;
    parse(std::io::BufReader::new(file), &shown)
}

/// Write records as JSON lines.
pub fn write(records: &[TraceRecord], mut out: impl Write) -> std::io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut out, r)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_bad_lines() {
        let records = vec![
            TraceRecord::Alloc {
                id: 1,
                size: 100,
                stream: 2,
            },
            TraceRecord::EmptyCache,
            TraceRecord::Free { id: 1 },
        ];
        let mut text = Vec::new();
        write(&records, &mut text).unwrap();
        assert_eq!(parse(&text[..], "t").unwrap(), records);

        let bad =
            b"{\"op\":\"alloc\",\"id\":1,\"size\":1}\n\n{\"op\":\"alloc\",\"id\":2,\"sise\":3}\n";
        let err = parse(&bad[..], "t.jsonl").unwrap_err().to_string();
        assert!(err.starts_with("t.jsonl:3:"), "{err}");

        let dup =
            b"{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"alloc\",\"id\":1,\"size\":1}\n";
        assert!(matches!(
            parse(&dup[..], "t"),
            Err(TraceError::DuplicateId { line: 2, id: 1, .. })
        ));
        let unknown = b"{\"op\":\"free\",\"id\":9}\n";
        assert!(matches!(
            parse(&unknown[..], "t"),
            Err(TraceError::UnknownId { line: 1, id: 9, .. })
        ));
    }
}

//! Errors of the study file, and the map from byte spans to key paths and
//! lines that lets every error name where it is.
//!
//! `toml`'s deserializer reports a byte span but no key path; the parsed
//! document ([`toml::de::DeTable`]) knows the span of every key and value.
//! `SpanIndex` walks it once, so a serde error's span becomes the key path
//! it falls in, and a validation error's key path becomes a line.

use std::ops::Range;
use std::path::PathBuf;

use toml::de::{DeTable, DeValue};

/// Why a study file cannot be used. Every variant says which file; those
/// about the file's content also name the key path (`param[2].low`,
/// `models.bert-large.sim`) and the line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read study file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Bad TOML syntax, an unknown key, a wrong type or an invalid value.
    #[error("{origin}:{line}:{column}: {}{message}", key_prefix(key))]
    Invalid {
        /// The file (or the name given to [`super::StudyConfig::parse`]).
        origin: String,
        /// Dotted key path, e.g. `param[1].low`; empty for a syntax error
        /// outside any key or for the document as a whole.
        key: String,
        /// 1-based.
        line: usize,
        /// 1-based, in characters.
        column: usize,
        message: String,
    },
    /// A trial's parameters do not fit the search space (a stored trial
    /// from another version of the file, or a sampler error).
    #[error("{}: param `{param}`: {message}", location(origin, *line))]
    Trial {
        origin: String,
        /// Line of the `[[param]]` that defines it (0 when it is not in the file).
        line: usize,
        param: String,
        message: String,
    },
}

fn location(origin: &str, line: usize) -> String {
    if line == 0 {
        origin.to_string()
    } else {
        format!("{origin}:{line}")
    }
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("`{key}`: ")
    }
}

impl ConfigError {
    /// The key path of an [`ConfigError::Invalid`] (for tests and tools).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The 1-based line the error points at, where it has one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Invalid { line, .. } => Some(*line),
            ConfigError::Trial { line, .. } if *line > 0 => Some(*line),
            _ => None,
        }
    }
}

/// One key (or array element) of the document and where it is.
struct Entry {
    path: String,
    depth: usize,
    key: Range<usize>,
    value: Range<usize>,
}

/// Spans of every key path of one document, and its line starts.
pub(crate) struct SpanIndex<'a> {
    origin: &'a str,
    text: &'a str,
    entries: Vec<Entry>,
    line_starts: Vec<usize>,
}

/// Formats one segment of a key path, quoting keys that TOML would quote.
pub(crate) fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        path.push_str(key);
    } else {
        path.push('"');
        path.push_str(&key.replace('\\', "\\\\").replace('"', "\\\""));
        path.push('"');
    }
}

/// `parent.key` with the key quoted if needed.
pub(crate) fn join(parent: &str, key: &str) -> String {
    let mut path = parent.to_string();
    push_key(&mut path, key);
    path
}

impl<'a> SpanIndex<'a> {
    /// Indexes `text`; a document that does not parse has no entries (its
    /// errors carry their own spans).
    pub(crate) fn new(text: &'a str, origin: &'a str) -> Self {
        let mut entries = Vec::new();
        if let Ok(doc) = DeTable::parse(text) {
            walk_table(doc.get_ref(), "", 0, &mut entries);
        }
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        SpanIndex {
            origin,
            text,
            entries,
            line_starts,
        }
    }

    /// 1-based line and column (in characters) of byte `offset`.
    fn line_column(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self.line_starts[line - 1];
        let column = self
            .text
            .get(start..offset)
            .map_or(1, |s| s.chars().count() + 1);
        (line, column)
    }

    /// The deepest key path whose key or value contains all of `span`; an
    /// error about the whole document (a missing section) has none.
    fn path_at(&self, span: &Range<usize>) -> Option<&Entry> {
        // The document itself has the empty span 0..0.
        if span.is_empty() {
            return None;
        }
        let within = |r: &Range<usize>| r.start <= span.start && span.end <= r.end;
        self.entries
            .iter()
            .filter(|e| within(&e.key) || within(&e.value))
            .max_by_key(|e| e.depth)
    }

    /// Where `path` is: the key's own span, or its nearest parent's when the
    /// key is absent (a missing key is reported at its table).
    fn span_of(&self, path: &str) -> Option<Range<usize>> {
        let mut path = path;
        loop {
            if let Some(e) = self.entries.iter().find(|e| e.path == path) {
                return Some(e.key.clone());
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }

    /// An error at key `path` (its line from the document).
    pub(crate) fn error_at(&self, path: &str, message: impl Into<String>) -> ConfigError {
        let (line, column) = self
            .span_of(path)
            .map_or((1, 1), |s| self.line_column(s.start));
        ConfigError::Invalid {
            origin: self.origin.to_string(),
            key: path.to_string(),
            line,
            column,
            message: message.into(),
        }
    }

    /// The 1-based line of `path` (0 when unknown).
    pub(crate) fn line_of(&self, path: &str) -> usize {
        self.span_of(path)
            .map_or(0, |s| self.line_column(s.start).0)
    }

    /// The key path on the line of `span` read from the text itself, for
    /// a document that does not parse (a key or table defined twice): a
    /// table header's path, or the (dotted) key before `=` under the last
    /// header above it. Comments are dropped; quoted keys keep their
    /// quotes.
    fn written_path(&self, span: &Range<usize>) -> Option<String> {
        let (line, _) = self.line_column(span.start);
        let mut lines: Vec<&str> = self.text.lines().take(line).map(without_comment).collect();
        let own = lines.pop()?;
        if let Some(path) = table_header(own) {
            return Some(path);
        }
        let key = dotted(own.split_once('=')?.0)?;
        let table = lines
            .iter()
            .rev()
            .find_map(|l| table_header(l))
            .unwrap_or_default();
        Some(key.split('.').fold(table, |path, part| join(&path, part)))
    }

    /// A `toml` parse or deserialize error, with the key path its span
    /// falls in.
    pub(crate) fn toml_error(&self, error: &toml::de::Error) -> ConfigError {
        let message = error.message().trim().to_string();
        let Some(span) = error.span() else {
            return ConfigError::Invalid {
                origin: self.origin.to_string(),
                key: String::new(),
                line: 1,
                column: 1,
                message,
            };
        };
        let (line, column) = self.line_column(span.start);
        let key = self
            .path_at(&span)
            .map(|e| e.path.clone())
            .or_else(|| {
                message
                    .starts_with("duplicate")
                    .then(|| self.written_path(&span))
                    .flatten()
            })
            .unwrap_or_default();
        ConfigError::Invalid {
            origin: self.origin.to_string(),
            key,
            line,
            column,
            message,
        }
    }
}

/// `line` without a `#` comment (a `#` inside a quoted string stays).
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The path of a `[table]` or `[[array]]` header line.
fn table_header(line: &str) -> Option<String> {
    let l = line.trim();
    let inner = l.strip_prefix("[[").and_then(|l| l.strip_suffix("]]"));
    let inner = inner.or_else(|| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))?;
    dotted(inner)
}

/// A dotted key's parts, trimmed, joined by dots (bare keys hold no dot).
fn dotted(key: &str) -> Option<String> {
    let parts: Vec<&str> = key.split('.').map(str::trim).collect();
    (!parts.iter().any(|p| p.is_empty())).then(|| parts.join("."))
}

fn walk_table(table: &DeTable<'_>, parent: &str, depth: usize, out: &mut Vec<Entry>) {
    for (key, value) in table.iter() {
        let path = join(parent, key.get_ref());
        walk_value(path, key.span(), value, depth + 1, out);
    }
}

fn walk_value(
    path: String,
    key: Range<usize>,
    value: &toml::Spanned<DeValue<'_>>,
    depth: usize,
    out: &mut Vec<Entry>,
) {
    match value.get_ref() {
        DeValue::Table(t) => walk_table(t, &path, depth, out),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                walk_value(item_path, item.span(), item, depth + 1, out);
            }
        }
        _ => {}
    }
    out.push(Entry {
        path,
        depth,
        key,
        value: value.span(),
    });
}

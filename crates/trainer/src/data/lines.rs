//! Byte offsets to 1-based lines and columns.

/// Where each line of a text starts. A line ends at `\n`, `\r\n` or a lone
/// `\r` (old Mac files, which the CSV reader parses but counts as one line).
/// Built over bytes, so it also places bytes that are not UTF-8.
pub(crate) struct LineStarts(Vec<usize>);

impl LineStarts {
    pub(crate) fn new(text: &[u8]) -> Self {
        let mut starts = vec![0];
        for (at, &byte) in text.iter().enumerate() {
            let ends_line = byte == b'\n' || (byte == b'\r' && text.get(at + 1) != Some(&b'\n'));
            if ends_line {
                starts.push(at + 1);
            }
        }
        Self(starts)
    }

    /// The 1-based line holding byte `offset`.
    pub(crate) fn line(&self, offset: usize) -> usize {
        self.0.partition_point(|&start| start <= offset)
    }

    /// The 1-based byte column of `offset` in its line.
    pub(crate) fn column(&self, offset: usize) -> usize {
        offset - self.0[self.line(offset) - 1] + 1
    }
}

/// Each line of `text` with the byte offset it starts at, its terminator
/// included: the lines [`LineStarts`] places.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let starts = LineStarts::new(text.as_bytes()).0;
    let ends: Vec<usize> = starts[1..].iter().copied().chain([text.len()]).collect();
    starts
        .into_iter()
        .zip(ends)
        .map(|(start, end)| (start, &text[start..end]))
        // After a final terminator: no line.
        .filter(|(_, line)| !line.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lf_crlf_and_lone_cr_each_end_one_line() {
        let lines = LineStarts::new(b"a\nb\r\nc\rd");
        let at = |offset| (lines.line(offset), lines.column(offset));
        assert_eq!(at(0), (1, 1));
        assert_eq!(at(1), (1, 2));
        assert_eq!(at(2), (2, 1));
        assert_eq!(at(4), (2, 3));
        assert_eq!(at(5), (3, 1));
        assert_eq!(at(7), (4, 1));
    }

    #[test]
    fn lines_keep_their_terminators_and_offsets() {
        let lines = |text| lines(text).collect::<Vec<_>>();
        assert_eq!(
            lines("a\nb\r\nc\rd"),
            [(0, "a\n"), (2, "b\r\n"), (5, "c\r"), (7, "d")]
        );
        assert_eq!(lines("a\n"), [(0, "a\n")]);
        assert!(lines("").is_empty());
    }
}

//! A tokenised, padded batch: the seam between data loading and the model.

/// `batch` sequences padded to `seq` tokens, row-major `[batch, seq]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Number of sequences (rows).
    pub batch: usize,
    /// Tokens per row, padding included (the batcher pads to the batch's
    /// longest sequence).
    pub seq: usize,
    /// Token ids, `[batch, seq]`, padding filled with the tokenizer's pad id.
    pub input_ids: Vec<u32>,
    /// Segment ids, `[batch, seq]`: 0 for the first text, 1 for the second
    /// of a pair, 0 on padding.
    pub token_type_ids: Vec<u32>,
    /// 1 for a real token, 0 for padding, `[batch, seq]`.
    pub attention_mask: Vec<u8>,
    /// One class index per sequence, validated against the class count on
    /// the host before any loss is computed.
    pub labels: Vec<usize>,
}

impl Batch {
    /// Splits the rows into `parts` consecutive batches as even as possible
    /// (sizes differ by at most one, larger first), order kept, each padded
    /// to the same `seq`. `parts` is clamped to `1..=batch` so no part is
    /// empty (a batch of 0 rows gives itself, one part). Used to retry a step that ran out of memory with smaller
    /// micro-batches.
    pub fn split(&self, parts: usize) -> Vec<Batch> {
        let parts = parts.clamp(1, self.batch.max(1));
        let (base, extra) = (self.batch / parts, self.batch % parts);
        let s = self.seq;
        let mut start = 0;
        (0..parts)
            .map(|i| {
                let rows = base + usize::from(i < extra);
                let (a, b) = (start, start + rows);
                start = b;
                Batch {
                    batch: rows,
                    seq: s,
                    input_ids: self.input_ids[a * s..b * s].to_vec(),
                    token_type_ids: self.token_type_ids[a * s..b * s].to_vec(),
                    attention_mask: self.attention_mask[a * s..b * s].to_vec(),
                    labels: self.labels[a..b].to_vec(),
                }
            })
            .collect()
    }

    /// This batch cut into parts of at most `micro_batch` rows (borrowed
    /// when it already fits).
    pub fn fit_to(&self, micro_batch: usize) -> std::borrow::Cow<'_, [Batch]> {
        if self.batch <= micro_batch.max(1) {
            std::borrow::Cow::Borrowed(std::slice::from_ref(self))
        } else {
            std::borrow::Cow::Owned(self.split(self.batch.div_ceil(micro_batch.max(1))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(rows: usize, seq: usize) -> Batch {
        Batch {
            batch: rows,
            seq,
            input_ids: (0..(rows * seq) as u32).collect(),
            token_type_ids: vec![0; rows * seq],
            attention_mask: vec![1; rows * seq],
            labels: (0..rows).collect(),
        }
    }

    #[test]
    fn split_is_even_ordered_and_complete() {
        let b = numbered(7, 3);
        let parts = b.split(3);
        assert_eq!(
            parts.iter().map(|p| p.batch).collect::<Vec<_>>(),
            vec![3, 2, 2]
        );
        let ids: Vec<u32> = parts.iter().flat_map(|p| p.input_ids.clone()).collect();
        assert_eq!(ids, b.input_ids);
        let labels: Vec<usize> = parts.iter().flat_map(|p| p.labels.clone()).collect();
        assert_eq!(labels, b.labels);
        assert!(
            parts
                .iter()
                .all(|p| p.seq == 3 && p.attention_mask.len() == p.batch * 3)
        );
        assert_eq!(b.split(0), vec![b.clone()]);
        assert_eq!(b.split(100).len(), 7);
    }

    #[test]
    fn fit_to_borrows_when_it_fits() {
        let b = numbered(5, 2);
        assert!(matches!(b.fit_to(5), std::borrow::Cow::Borrowed(_)));
        let parts = b.fit_to(2);
        assert_eq!(
            parts.iter().map(|p| p.batch).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
    }
}

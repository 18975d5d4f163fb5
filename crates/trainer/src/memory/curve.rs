//! A peak that is piecewise affine in the micro-batch, exactly: the upper
//! envelope of the live bytes after each allocation of a step.
//!
//! At a fixed sequence length every buffer of a step is either fixed in
//! size or proportional to the micro-batch `m`, so the live bytes right
//! after allocation number `e` are `a_e + b_e m`, and the peak is
//! `max_e (a_e + b_e m)`. Which allocation holds the maximum can change
//! with `m` (DeBERTa's relative-position products and their gradients
//! against the rest of its step), so the peak itself need not be affine;
//! the envelope of those lines is exact at every `m`. Two recorded full
//! plans (m = 1 and 2) give every `a_e` and `b_e`; a third (m = 3) checks
//! that the step allocates the same buffers, each affine in `m`, and is a
//! [`CurveError`] otherwise. Only the few lines that are highest
//! somewhere on `m >= 1` are kept.

use super::peaks::AffinePeak;
use super::plan::{MemoryPlan, PlanError, PlanRequest};

/// Why a step's peak could not be enveloped from full plans.
#[derive(Debug, thiserror::Error)]
pub enum CurveError {
    /// The step cannot run.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The step allocates a different number of buffers at micro-batches
    /// 1, 2 and 3.
    #[error("the step allocates {0}, {1} and {2} buffers at micro-batches 1, 2 and 3")]
    BufferCounts(usize, usize, usize),
    /// One allocation's live bytes are not affine in the micro-batch (or
    /// the allocations differ by name).
    #[error("allocation `{name}` (number {event}) is not affine in the micro-batch")]
    NotAffine {
        /// The buffer's name at micro-batch 1.
        name: String,
        /// Its allocation's event number at micro-batch 1 (allocations and
        /// frees counted together, from 0).
        event: usize,
    },
    /// The step allocates nothing.
    #[error("the step allocates nothing")]
    Empty,
}

/// `peak(m) = max over pieces of (fixed + per_row * m)`, pieces ordered by
/// the `m` from which each is the highest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeakCurve {
    pieces: Vec<AffinePeak>,
}

impl From<AffinePeak> for PeakCurve {
    fn from(piece: AffinePeak) -> Self {
        Self {
            pieces: vec![piece],
        }
    }
}

impl PeakCurve {
    /// The envelope of `lines` on `m >= 1` (any order, duplicates allowed);
    /// `None` when there are none.
    pub fn envelope(lines: impl IntoIterator<Item = AffinePeak>) -> Option<Self> {
        let mut lines: Vec<AffinePeak> = lines.into_iter().collect();
        // By slope, and for one slope the highest line first (it is kept).
        lines.sort_by_key(|l| (l.per_row, std::cmp::Reverse(l.fixed)));
        lines.dedup_by(|later, kept| later.per_row == kept.per_row);
        let mut hull: Vec<AffinePeak> = Vec::with_capacity(4);
        for line in lines {
            // The middle of three lines by slope is never the highest when
            // the outer two cross at or before it overtakes the first.
            while let [.., first, middle] = hull[..] {
                let outer = (first.fixed - line.fixed) * (middle.per_row - first.per_row);
                let inner = (first.fixed - middle.fixed) * (line.per_row - first.per_row);
                if outer <= inner {
                    hull.pop();
                } else {
                    break;
                }
            }
            hull.push(line);
        }
        // Lines overtaken at or before m = 1 never count.
        let start = hull
            .windows(2)
            .take_while(|w| w[0].fixed - w[1].fixed <= w[1].per_row - w[0].per_row)
            .count();
        hull.drain(..start);
        (!hull.is_empty()).then_some(Self { pieces: hull })
    }

    /// The exact envelope of `request`'s step (its micro-batch ignored) from
    /// three recorded full plans; an error is a step that cannot run, or
    /// says why its allocations are not affine in the micro-batch.
    pub fn from_full_plans(request: &PlanRequest) -> Result<Self, CurveError> {
        let plan = |micro_batch: usize| {
            MemoryPlan::new(&PlanRequest {
                micro_batch,
                ..request.clone()
            })
            .map(|plan| plan.buffers)
        };
        let (one, two, three) = (plan(1)?, plan(2)?, plan(3)?);
        if one.len() != two.len() || one.len() != three.len() {
            return Err(CurveError::BufferCounts(one.len(), two.len(), three.len()));
        }
        let mut lines = Vec::with_capacity(one.len());
        for ((b1, b2), b3) in one.iter().zip(&two).zip(&three) {
            let (l1, l2) = (b1.live_after_alloc as i128, b2.live_after_alloc as i128);
            let line = AffinePeak {
                fixed: 2 * l1 - l2,
                per_row: l2 - l1,
            };
            if b1.name != b2.name || b1.name != b3.name || line.at(3) != b3.live_after_alloc as u64
            {
                return Err(CurveError::NotAffine {
                    name: b1.name.clone(),
                    event: b1.alloc_event,
                });
            }
            lines.push(line);
        }
        Self::envelope(lines).ok_or(CurveError::Empty)
    }

    /// The pieces, in order of the micro-batch from which each is highest.
    pub fn pieces(&self) -> &[AffinePeak] {
        &self.pieces
    }

    /// Peak bytes for micro-batch `micro` (at least 1).
    pub fn at(&self, micro: usize) -> u64 {
        self.pieces
            .iter()
            .map(|p| p.at(micro))
            .max()
            .expect("a curve has a piece")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(fixed: i128, per_row: i128) -> AffinePeak {
        AffinePeak { fixed, per_row }
    }

    #[test]
    fn the_envelope_is_the_maximum_of_its_lines_at_every_micro_batch() {
        // Deterministic pseudo-random line sets, checked against brute force.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as i128
        };
        for _ in 0..500 {
            let lines: Vec<AffinePeak> = (0..1 + next(30))
                .map(|_| line(10_000 + next(5_000), next(300)))
                .collect();
            let curve = PeakCurve::envelope(lines.clone()).unwrap();
            for m in 1..200 {
                let brute = lines.iter().map(|l| l.at(m)).max().unwrap();
                assert_eq!(curve.at(m), brute, "{lines:?} at {m}");
            }
            let slopes: Vec<i128> = curve.pieces().iter().map(|p| p.per_row).collect();
            assert!(slopes.windows(2).all(|w| w[0] < w[1]), "{slopes:?}");
        }
    }

    #[test]
    fn lines_only_highest_below_one_row_are_dropped() {
        // 100 + 0m is highest only for m < 1 against 50 + 60m.
        let curve = PeakCurve::envelope([line(100, 0), line(50, 60), line(10, 1)]).unwrap();
        assert_eq!(curve.pieces(), &[line(50, 60)]);
        assert_eq!(PeakCurve::envelope([]), None);
        let kink = PeakCurve::envelope([line(1_000, 10), line(0, 100), line(1_000, 9)]).unwrap();
        assert_eq!(kink.pieces(), &[line(1_000, 10), line(0, 100)]);
        assert_eq!((kink.at(11), kink.at(12)), (1_110, 1_200));
    }
}

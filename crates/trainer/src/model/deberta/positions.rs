//! DeBERTa's log-bucketed relative positions and the bucket tables the
//! gathers read.

/// HF's `make_log_bucket_position` for one relative distance `rel = i - j`:
/// distances in `[-mid, mid]` (`mid = buckets / 2`) keep their value;
/// beyond, `sign * (ceil(ln(|rel| / mid) / ln((max_position - 1) / mid) *
/// (mid - 1)) + mid)`, so `buckets` ids cover distances up to
/// `max_position` with resolution falling off logarithmically. Computed in
/// f32 as torch does (`abs_pos / mid` is a float32 division there), so the
/// rounding of `ceil` agrees at every distance. `buckets <= 0` or
/// `max_position <= 0` leaves distances unbucketed.
pub fn log_bucket(rel: i64, buckets: i64, max_position: i64) -> i64 {
    if buckets <= 0 || max_position <= 0 {
        return rel;
    }
    let mid = buckets / 2;
    if rel.abs() <= mid {
        // Inside the window HF returns the distance itself (its `abs_pos`
        // substitution only matters for the log branch it then discards).
        return rel;
    }
    let abs = rel.abs() as f32;
    let ratio = abs / mid as f32;
    let base = ((max_position - 1) as f64 / mid as f64) as f32;
    let log_pos = (ratio.ln() / base.ln() * (mid - 1) as f32).ceil() + mid as f32;
    rel.signum() * log_pos as i64
}

/// The `[s, s]` tables of position-score columns the gathers read: `c2p[i,
/// j] = clamp(bucket(i - j) + span, 0, 2 span - 1)` and `p2c[j, i] =
/// clamp(-bucket(j - i) + span, 0, 2 span - 1)` (HF's `c2p_pos` and
/// `p2c_pos`; the bucket is odd, so the two tables are equal, but both are
/// built as HF builds them).
pub fn bucket_tables(
    s: usize,
    span: usize,
    buckets: i64,
    max_position: i64,
) -> (Vec<u32>, Vec<u32>) {
    let hi = 2 * span as i64 - 1;
    let mut c2p = Vec::with_capacity(s * s);
    let mut p2c = Vec::with_capacity(s * s);
    for r in 0..s as i64 {
        for c in 0..s as i64 {
            let rel = log_bucket(r - c, buckets, max_position);
            c2p.push((rel + span as i64).clamp(0, hi) as u32);
            p2c.push((-rel + span as i64).clamp(0, hi) as u32);
        }
    }
    (c2p, p2c)
}

//! Timestamps in the formats Optuna writes.
//!
//! `trials.datetime_start/complete` hold Python's naive `datetime.now()`
//! (local time) and `trial_heartbeats.heartbeat` holds the database's
//! `CURRENT_TIMESTAMP` (UTC). Both are `YYYY-MM-DD HH:MM:SS[.ffffff]`, which
//! SQLAlchemy parses back; we always write the six-digit fraction so that
//! sub-second heartbeat grace periods work and strings sort as times.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now in local time, as Optuna writes trial start and end times.
pub fn now_local() -> String {
    format_at(SystemTime::now(), true)
}

/// Now in UTC, as Optuna writes heartbeats.
pub fn now_utc() -> String {
    format_at(SystemTime::now(), false)
}

/// The UTC time `ago` before now (heartbeats older than this are stale).
pub fn utc_before_now(ago: Duration) -> String {
    let t = SystemTime::now().checked_sub(ago).unwrap_or(UNIX_EPOCH);
    format_at(t, false)
}

/// Seconds from timestamp `from` to timestamp `to` (both
/// `YYYY-MM-DD HH:MM:SS[.ffffff]`), or `None` if either does not read.
pub(crate) fn seconds_between(from: &str, to: &str) -> Option<f64> {
    let from = crate::pg::parse_timestamp(from).ok()?;
    let to = crate::pg::parse_timestamp(to).ok()?;
    Some((to - from) as f64 / 1e6)
}

fn format_at(t: SystemTime, local: bool) -> String {
    let zone = if local {
        // The system zone (TZ, else /etc/localtime), as Python's naive
        // `datetime.now()` uses; UTC where none can be read.
        jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC)
    } else {
        jiff::tz::TimeZone::UTC
    };
    // Out of jiff's range (years beyond 9999): the epoch, as a time no
    // heartbeat or trial ever has.
    let at = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let dt = zone.to_datetime(at);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.subsec_nanosecond() / 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_format_is_optuna_like_and_sorts() {
        let a = format_at(UNIX_EPOCH + Duration::from_micros(1_500_000), false);
        assert_eq!(a, "1970-01-01 00:00:01.500000");
        let b = format_at(UNIX_EPOCH + Duration::from_secs(86_400 * 365), false);
        assert_eq!(b, "1971-01-01 00:00:00.000000");
        assert!(a < b);
        // Optuna's own second-resolution heartbeats compare correctly too.
        assert!("1970-01-01 00:00:01" < a.as_str());
    }
}

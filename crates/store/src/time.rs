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

fn format_at(t: SystemTime, local: bool) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as libc::time_t;
    let micros = since.subsec_micros();
    // SAFETY: `tm` is plain data fully written by localtime_r/gmtime_r, which
    // are the thread-safe variants and only read `secs`.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let ok = if local {
            libc::localtime_r(&secs, &mut tm)
        } else {
            libc::gmtime_r(&secs, &mut tm)
        };
        if ok.is_null() {
            // Only fails for years beyond i32; fall back to the epoch.
            std::mem::zeroed()
        } else {
            tm
        }
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        micros
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

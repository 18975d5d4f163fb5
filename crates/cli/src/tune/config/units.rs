//! Durations (`"15m"`, `"1h30m"`, `"5s"`, `"250ms"`) and byte sizes
//! (`"24GiB"`, `"512MiB"`, `"1.5GB"`, or a plain integer of bytes) as a
//! study file writes them.

use std::time::Duration;

/// The longest duration a study file takes: 100 years. Far beyond any
/// study, and small enough that the runner's sums and multiples of it
/// (a heartbeat doubled, a deadline from now) cannot overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The largest size a study file takes: 1 PiB. Beyond any device or host
/// for years to come, and small enough that sums of sizes and a simulated
/// device's address range cannot overflow.
pub const MAX_SIZE: u64 = 1 << 50;

/// Parses `"<number><unit>"` repeated, e.g. `"1h30m"`, `"90s"`, `"0.5h"`.
/// Units: `ms`, `s`, `m`, `h`, `d`. A bare number is an error (the unit
/// is always written, so `timeout = "15"` cannot mean minutes to one reader
/// and seconds to another).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let expected = || {
        format!(
            "`{text}` is not a duration; write a number and a unit (ms, s, m, h, d), e.g. \"15m\" or \"1h30m\""
        )
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(expected());
    }
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(expected)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| expected())?;
        rest = rest[number_len..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(expected()),
        };
        total += number * seconds;
        rest = rest[unit_len..].trim_start();
    }
    let d = Duration::try_from_secs_f64(total).map_err(|_| expected())?;
    if d > MAX_DURATION {
        return Err(format!("`{text}` is longer than 100 years"));
    }
    Ok(d)
}

/// Parses a byte size: `"24GiB"`, `"512 MiB"`, `"1.5GB"`, `"300MB"`,
/// `"4096B"`. Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal
/// ones (KB, MB, GB, TB) powers of 1000; unit case is ignored.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let expected = || {
        format!(
            "`{text}` is not a size; write a number and a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. \"24GiB\""
        )
    };
    let trimmed = text.trim();
    let number_len = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    if number_len == 0 {
        return Err(expected());
    }
    let number: f64 = trimmed[..number_len].parse().map_err(|_| expected())?;
    let unit = trimmed[number_len..].trim().to_ascii_lowercase();
    let scale: f64 = match unit.as_str() {
        "b" => 1.0,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(expected()),
    };
    let bytes = (number * scale).round();
    if !bytes.is_finite() {
        return Err(expected());
    }
    if bytes > MAX_SIZE as f64 {
        return Err(format!("`{text}` is larger than 1 PiB"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0.5h"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration(" 2 m "), Ok(Duration::from_secs(120)));
        for bad in ["", "15", "m", "15x", "1..5s", "-5s", "5s3"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("36500d"), Ok(MAX_DURATION));
        let e = parse_duration("200000000000000d").unwrap_err();
        assert!(e.contains("100 years"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("24GiB"), Ok(24 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512 mib"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("4096B"), Ok(4096));
        for bad in ["", "24", "GiB", "24 GiBs", "1e3GB", "-1GiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_size("1024TiB"), Ok(MAX_SIZE));
        let e = parse_size("8388607TiB").unwrap_err();
        assert!(e.contains("1 PiB"), "{e}");
    }
}

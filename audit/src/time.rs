//! Time arguments: epoch milliseconds, `YYYY-MM-DD` (midnight UTC) or an RFC 3339 timestamp such
//! as `YYYY-MM-DDTHH:MM[:SS[.fff]]Z`. Dates are read by `jiff`, which knows each month's length.

use crate::AuditError;

/// Parses a time argument into epoch milliseconds.
pub fn parse_time(raw: &str) -> Result<i64, AuditError> {
    let s = raw.trim();
    let bad = || {
        AuditError::Invalid(format!(
            "invalid time {raw:?}: expected epoch milliseconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ"
        ))
    };
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map_err(|_| bad());
    }
    // A bare date is midnight UTC; anything longer must be a whole timestamp with its offset.
    if s.len() == "YYYY-MM-DD".len() {
        let date: jiff::civil::Date = s.parse().map_err(|_| bad())?;
        let midnight = date.to_zoned(jiff::tz::TimeZone::UTC).map_err(|_| bad())?;
        return Ok(midnight.timestamp().as_millisecond());
    }
    let at: jiff::Timestamp = s.parse().map_err(|_| bad())?;
    Ok(at.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadstream_projections::iso_millis;

    #[test]
    fn parses_what_iso_millis_writes_and_rejects_garbage() {
        for ms in [0, 1_795_313_483_123, 951_782_400_000 /* 2000-02-29 */] {
            assert_eq!(
                parse_time(&iso_millis(ms)).unwrap(),
                ms,
                "{}",
                iso_millis(ms)
            );
        }
        assert_eq!(
            parse_time("2026-11-22").unwrap(),
            parse_time("2026-11-22T00:00Z").unwrap()
        );
        assert_eq!(parse_time("12345").unwrap(), 12345);
        assert_eq!(
            parse_time("2024-02-29").unwrap() + 86_400_000,
            parse_time("2024-03-01").unwrap()
        );
        assert_eq!(
            parse_time("2026-11-22T10:00:00.5Z").unwrap(),
            parse_time("2026-11-22T10:00Z").unwrap() + 500
        );
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-11-22T10:00",
            "2026-1-2",
            "-5",
            "2024-02-31",
            "2023-02-29",
            "2024-04-31T00:00Z",
            "2024-02-30T12:00:00Z",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}

//! Time arguments: epoch milliseconds, `YYYY-MM-DD` (midnight UTC) or
//! `YYYY-MM-DDTHH:MM[:SS[.mmm]]Z`.

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
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, Some(t.strip_suffix('Z').ok_or_else(bad)?)),
        None => (s, None),
    };
    let num = |p: &str, len: usize| -> Result<i64, AuditError> {
        if p.len() != len || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse().map_err(|_| bad())
    };
    let mut d = date.split('-');
    let (y, m, day) = match (d.next(), d.next(), d.next(), d.next()) {
        (Some(y), Some(m), Some(dd), None) => (num(y, 4)?, num(m, 2)?, num(dd, 2)?),
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let mut ms = days_from_civil(y, m, day) * 86_400_000;
    if let Some(t) = time {
        let (hms, frac) = match t.split_once('.') {
            Some((a, f)) => (a, Some(f)),
            None => (t, None),
        };
        let parts: Vec<&str> = hms.split(':').collect();
        let (h, mi, sec) = match parts.as_slice() {
            [h, mi] => (num(h, 2)?, num(mi, 2)?, 0),
            [h, mi, s] => (num(h, 2)?, num(mi, 2)?, num(s, 2)?),
            _ => return Err(bad()),
        };
        if h > 23 || mi > 59 || sec > 60 {
            return Err(bad());
        }
        ms += ((h * 60 + mi) * 60 + sec) * 1000;
        if let Some(f) = frac {
            ms += num(f, 3)?;
        }
    }
    Ok(ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-11-22T10:00",
            "2026-1-2",
            "-5",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}

//! Epoch milliseconds → ISO 8601, exactly as JS `new Date(ms).toISOString()` writes it.
//!
//! Written by hand rather than with a date crate: a JS `Date` spans ±275,760 years, beyond the
//! ±9,999 years of `jiff` (and of `time` without its `large-dates` feature), and JS's form for
//! such years (`+010000-…`) must be kept; and folds format a timestamp per event, so this stays
//! allocation-light.

/// The largest |ms| a JS `Date` holds (±100,000,000 days); beyond it `toISOString` throws, and
/// we clamp instead so a read model never fails on a bad timestamp.
const MAX_DATE_MS: i64 = 8_640_000_000_000_000;

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC, e.g. `2026-11-22T02:11:23.123Z`. Years outside 0..=9999
/// use JS's expanded form (`+010000-01-01T…`, `-000001-…`).
pub fn iso_millis(ms: i64) -> String {
    let ms = ms.clamp(-MAX_DATE_MS, MAX_DATE_MS);
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    // Written digit by digit: folds call this per event, and `format!` was a visible share of a
    // rebuild's profile.
    let mut out = String::with_capacity(27);
    if (0..=9999).contains(&year) {
        push_digits(&mut out, year as u64, 4);
    } else {
        out.push(if year < 0 { '-' } else { '+' });
        push_digits(&mut out, year.unsigned_abs(), 6);
    }
    out.push('-');
    push_digits(&mut out, u64::from(month), 2);
    out.push('-');
    push_digits(&mut out, u64::from(day), 2);
    out.push('T');
    push_digits(&mut out, h as u64, 2);
    out.push(':');
    push_digits(&mut out, m as u64, 2);
    out.push(':');
    push_digits(&mut out, s as u64, 2);
    out.push('.');
    push_digits(&mut out, milli as u64, 3);
    out.push('Z');
    out
}

/// Appends `n` zero-padded to `width` digits (`n` has at most `width` digits here).
fn push_digits(out: &mut String, n: u64, width: u32) {
    for i in (0..width).rev() {
        let d = (n / 10u64.pow(i)) % 10;
        out.push(char::from(b'0' + d as u8));
    }
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::iso_millis;

    #[test]
    fn matches_js_to_iso_string() {
        // Values checked against node's `new Date(ms).toISOString()`.
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_795_313_483_123, "2026-11-22T02:11:23.123Z"),
            (4_102_444_800_000, "2100-01-01T00:00:00.000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "+010000-01-01T00:00:00.000Z"),
            (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
            (-62_198_755_200_000, "-000001-01-01T00:00:00.000Z"),
            (8_640_000_000_000_000, "+275760-09-13T00:00:00.000Z"),
            (-8_640_000_000_000_000, "-271821-04-20T00:00:00.000Z"),
        ];
        for (ms, want) in cases {
            assert_eq!(iso_millis(ms), want, "{ms}");
        }
        assert_eq!(iso_millis(i64::MAX), "+275760-09-13T00:00:00.000Z");
        assert_eq!(iso_millis(i64::MIN), "-271821-04-20T00:00:00.000Z");
    }
}

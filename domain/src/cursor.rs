//! The resume cursors clients send back (`Last-Event-ID`, `?lastEventId=`, `?starting_after=`):
//! parsed here, once, from the raw bytes a client chose. Pure and total: any input is a value or
//! an error, never a panic (fuzzed in `fuzz/`).

/// Why a cursor was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorError {
    /// The header is not text.
    NotText,
    /// Text that is not a non-negative integer.
    Invalid(String),
}

impl std::fmt::Display for CursorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CursorError::NotText => f.write_str("Last-Event-ID is not valid text"),
            CursorError::Invalid(raw) => write!(
                f,
                "an event cursor must be a non-negative integer, got {raw:?}"
            ),
        }
    }
}

impl std::error::Error for CursorError {}

fn text(raw: &[u8]) -> Result<&str, CursorError> {
    std::str::from_utf8(raw).map_err(|_| CursorError::NotText)
}

/// Longest event id cursor: the document's `^[0-9]{0,18}$` (an id is below 10^18).
pub const MAX_EVENT_ID_DIGITS: usize = 18;
/// Longest `starting_after`: the document's `^[0-9]{0,19}$`.
pub const MAX_SEQUENCE_DIGITS: usize = 19;

/// The cursor's text when it is digits only (at most `max`), as the document's patterns say:
/// no sign, no blank (a header's surrounding blanks are its caller's to trim).
fn digits(raw: &[u8], max: usize) -> Result<Option<&str>, CursorError> {
    let s = text(raw)?;
    if s.is_empty() {
        return Ok(None);
    }
    if s.len() > max || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CursorError::Invalid(s.to_string()));
    }
    Ok(Some(s))
}

/// An event id cursor (n8n and AG-UI streams): `None` when empty (absent), else at most 18
/// digits.
pub fn event_id(raw: &[u8]) -> Result<Option<i64>, CursorError> {
    match digits(raw, MAX_EVENT_ID_DIGITS)? {
        None => Ok(None),
        Some(s) => s
            .parse::<i64>()
            .map(Some)
            .map_err(|_| CursorError::Invalid(s.to_string())),
    }
}

/// A sequence number of the items protocol (`?starting_after=N`): `None` when empty, else at
/// most 19 digits.
pub fn sequence(raw: &[u8]) -> Result<Option<u64>, CursorError> {
    match digits(raw, MAX_SEQUENCE_DIGITS)? {
        None => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(Some)
            .map_err(|_| CursorError::Invalid(s.to_string())),
    }
}

/// An items-protocol `Last-Event-ID: {requestId}:{N}`: the sequence when it names
/// `request_id`, `None` when it names another request (seed 002 ignores those) or is blank.
pub fn item_event_id(raw: &[u8], request_id: &str) -> Result<Option<u64>, CursorError> {
    match text(raw)?
        .trim_matches(|c: char| c.is_ascii_whitespace())
        .rsplit_once(':')
    {
        Some((req, n)) if req == request_id => sequence(n.trim_ascii().as_bytes()),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    /// Digits only, as the documented patterns say: a blank (schemathesis sent `%0A` and
    /// `%C2%A0`), a sign or a 19th (20th) digit is a malformed cursor, not an absent one.
    #[test]
    fn only_digits_are_a_cursor() {
        for bad in ["\u{a0}", " ", "\n", " 7 ", "+7", "1234567890123456789"] {
            assert!(super::event_id(bad.as_bytes()).is_err(), "{bad:?}");
        }
        for bad in ["\u{a0}", "\n", "+7", "12345678901234567890"] {
            assert!(super::sequence(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert_eq!(
            super::event_id(b"123456789012345678"),
            Ok(Some(123456789012345678))
        );
        assert_eq!(
            super::sequence(b"1234567890123456789"),
            Ok(Some(1234567890123456789))
        );
    }

    use super::*;

    #[test]
    fn cursors() {
        assert_eq!(event_id(b"42"), Ok(Some(42)));
        assert_eq!(event_id(b""), Ok(None));
        assert!(matches!(event_id(b"-1"), Err(CursorError::Invalid(_))));
        assert!(matches!(event_id(b"1e3"), Err(CursorError::Invalid(_))));
        assert_eq!(event_id(&[0xff, 0x31]), Err(CursorError::NotText));
        assert_eq!(sequence(b"7"), Ok(Some(7)));
        assert_eq!(item_event_id(b"req_1:5", "req_1"), Ok(Some(5)));
        assert_eq!(item_event_id(b"a:b:5", "a:b"), Ok(Some(5)));
        assert_eq!(item_event_id(b"req_2:5", "req_1"), Ok(None));
        assert!(item_event_id(b"req_1:x", "req_1").is_err());
    }
}

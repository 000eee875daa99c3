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

/// An event id cursor (n8n and AG-UI streams): `None` when blank (absent), else a
/// non-negative integer.
pub fn event_id(raw: &[u8]) -> Result<Option<i64>, CursorError> {
    let s = text(raw)?.trim_matches(|c: char| c.is_ascii_whitespace());
    if s.is_empty() {
        return Ok(None);
    }
    match s.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(Some(n)),
        _ => Err(CursorError::Invalid(s.to_string())),
    }
}

/// A sequence number of the items protocol (`?starting_after=N`): `None` when blank.
pub fn sequence(raw: &[u8]) -> Result<Option<u64>, CursorError> {
    let s = text(raw)?.trim_matches(|c: char| c.is_ascii_whitespace());
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<u64>()
        .map(Some)
        .map_err(|_| CursorError::Invalid(s.to_string()))
}

/// An items-protocol `Last-Event-ID: {requestId}:{N}`: the sequence when it names
/// `request_id`, `None` when it names another request (seed 002 ignores those) or is blank.
pub fn item_event_id(raw: &[u8], request_id: &str) -> Result<Option<u64>, CursorError> {
    match text(raw)?
        .trim_matches(|c: char| c.is_ascii_whitespace())
        .rsplit_once(':')
    {
        Some((req, n)) if req == request_id => sequence(n.as_bytes()),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    /// Only ASCII blanks are blank: a non-breaking space (schemathesis sent `%C2%A0`) is a
    /// malformed cursor, as the documented pattern says, not an absent one.
    #[test]
    fn unicode_spaces_are_not_blank() {
        assert!(super::event_id("\u{a0}".as_bytes()).is_err());
        assert!(super::sequence("\u{a0}".as_bytes()).is_err());
        assert_eq!(super::event_id(b" 7 ").unwrap(), Some(7));
        assert_eq!(super::event_id(b" ").unwrap(), None);
    }

    use super::*;

    #[test]
    fn cursors() {
        assert_eq!(event_id(b" 42 "), Ok(Some(42)));
        assert_eq!(event_id(b""), Ok(None));
        assert_eq!(event_id(b"  "), Ok(None));
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

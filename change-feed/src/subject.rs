//! The subject of a log stream's events on the bus: `threadstream.events.<token>`, where the
//! token is the stream's id with every byte outside `A-Z a-z 0-9 - _` written `%XX` (upper-case
//! hex of the UTF-8 byte). Any id becomes one valid subject token (no `.`, `*`, `>`, space or
//! control character survives), ids that are already tokens (UUIDs, `run-1_a`) stay readable,
//! and decoding is plain percent-decoding: Python's `urllib.parse.unquote(token)`, JavaScript's
//! `decodeURIComponent(token)` (docs/integrations.md, "Change feed").

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The prefix of every subject the feed publishes to.
pub const SUBJECT_PREFIX: &str = "threadstream.events.";

/// What the feed's stream captures: every stream's subject.
pub const SUBJECTS: &str = "threadstream.events.>";

/// The bytes kept as they are: ASCII letters, digits, `-` and `_`.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// The subject token of log stream `stream`.
pub fn token(stream: &str) -> String {
    utf8_percent_encode(stream, ESCAPED).to_string()
}

/// The log stream a subject token names; `None` when the token is not one [`token`] makes.
pub fn stream_of(token: &str) -> Option<String> {
    let decoded = percent_decode_str(token).decode_utf8().ok()?.into_owned();
    (self::token(&decoded) == token).then_some(decoded)
}

/// The subject of log stream `stream`'s events.
pub fn subject(stream: &str) -> String {
    format!("{SUBJECT_PREFIX}{}", token(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_are_tokens_already_stay_as_they_are() {
        assert_eq!(
            token("3f2b9c1e-0d4a-4f5e-9b7a-1c2d3e4f5a6b"),
            "3f2b9c1e-0d4a-4f5e-9b7a-1c2d3e4f5a6b"
        );
        assert_eq!(subject("run-1_a"), "threadstream.events.run-1_a");
    }

    #[test]
    fn every_other_byte_is_escaped_so_the_token_is_one_valid_token() {
        for (id, want) in [
            ("erasure:log", "erasure%3Alog"),
            ("a.b", "a%2Eb"),
            ("streams/chat *>", "streams%2Fchat%20%2A%3E"),
            ("50%", "50%25"),
            ("é", "%C3%A9"),
            ("tab\there", "tab%09here"),
        ] {
            let t = token(id);
            assert_eq!(t, want, "{id:?}");
            assert!(
                t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b)),
                "{t}"
            );
            assert_eq!(stream_of(&t).as_deref(), Some(id));
        }
    }

    #[test]
    fn tokens_the_encoder_never_makes_are_not_decoded() {
        // Lower-case hex, an escaped byte that needs none, a bare `%`, and invalid UTF-8.
        for t in ["a%2eb", "%41", "50%", "%FF", "a.b"] {
            assert_eq!(stream_of(t), None, "{t}");
        }
    }
}

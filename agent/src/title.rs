//! Short thread titles from a user's message.

const MAX_WORDS: usize = 6;
const MAX_CHARS: usize = 60;

/// A short title: the first non-empty line's first few words, trailing punctuation removed,
/// first letter upper-cased, at most 60 characters. `"New conversation"` for an empty message.
pub fn short_title(message: &str) -> String {
    let line = message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().take(MAX_WORDS).collect();
    let joined = words.join(" ");
    let trimmed = joined.trim_end_matches(['.', ',', ';', ':', '!', '?']);
    let mut title: String = trimmed.chars().take(MAX_CHARS).collect();
    if trimmed.chars().count() > MAX_CHARS {
        title = title.trim_end().to_string();
        title.push('…');
    }
    let mut chars = title.chars();
    match chars.next() {
        None => "New conversation".to_string(),
        Some(first) => first.to_uppercase().chain(chars).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::short_title;

    #[test]
    fn titles() {
        assert_eq!(
            short_title("build me a weather to slack workflow please, daily at 8"),
            "Build me a weather to slack"
        );
        assert_eq!(short_title("  \n hello there!\nsecond"), "Hello there");
        assert_eq!(short_title(""), "New conversation");
        assert_eq!(short_title("ünïcode"), "Ünïcode");
        let long = "a".repeat(100);
        assert_eq!(short_title(&long).chars().count(), 61);
    }
}

//! Short thread titles: written by the model from the first message, with a heuristic from the
//! message itself when the model gives nothing usable.

use futures::StreamExt;

use crate::provider::{ChatMessage, ChatRequest, Chunk, LlmProvider, Usage};
use crate::telemetry::ChatCall;

/// The system prompt of a title request (providers and fakes recognize a title request by it).
pub const TITLE_PROMPT: &str = "Write a short title (at most six words) for a conversation that \
starts with the user's message below. Answer with the title only: no quotes, no punctuation at \
the end.";

/// A title for a thread whose first message is `message`: the model's answer to
/// [`TITLE_PROMPT`], cleaned up (first line, quotes and trailing punctuation removed, at most 60
/// characters), or [`short_title`] of the message if the call fails or answers nothing; with
/// the usage the provider reported. The call is observed as a `chat` span of `conversation_id`
/// (the thread), and `call` is left for the caller to record its usage with.
pub async fn generate_title(
    provider: &dyn LlmProvider,
    conversation_id: &str,
    message: &str,
) -> (String, ChatCall, Option<Usage>) {
    let request = ChatRequest {
        system: TITLE_PROMPT.to_string(),
        messages: vec![ChatMessage::User {
            text: message.to_string(),
        }],
        tools: Vec::new(),
    };
    let mut call = ChatCall::start(conversation_id, provider, &request);
    let mut stream = provider.stream(request);
    let mut text = String::new();
    let mut usage = None;
    while let Some(chunk) = stream.next().await {
        call.observe(&chunk);
        match chunk {
            Ok(Chunk::Text(t)) => text.push_str(&t),
            Ok(Chunk::Finish(f)) => {
                usage = f.usage;
                break;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "the model wrote no title; using the message's first words"
                );
                return (short_title(message), call, None);
            }
        }
    }
    (clean_title(&text, message), call, usage)
}

/// The model's answer `text` cleaned up as a title, or [`short_title`] of `message` when
/// nothing usable is left.
fn clean_title(text: &str, message: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    // Models wrap titles in quotes or markdown and end them with a period, in any order.
    let cleaned = line
        .trim_start_matches(['"', '\'', '“', '*', '#', ' '])
        .trim_end_matches(['"', '\'', '”', '*', ' ', '.', ',', ';', ':', '!', '?']);
    if cleaned.is_empty() {
        return short_title(message);
    }
    short_title_of_len(cleaned)
}

/// `text` with trailing punctuation removed and cut to [`MAX_CHARS`].
fn short_title_of_len(text: &str) -> String {
    let trimmed = text.trim_end_matches(['.', ',', ';', ':', '!', '?']);
    let mut title: String = trimmed.chars().take(MAX_CHARS).collect();
    if trimmed.chars().count() > MAX_CHARS {
        title = title.trim_end().to_string();
        title.push('…');
    }
    title
}

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

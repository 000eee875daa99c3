//! The harness's own SSE parser and helpers, checked against the WHATWG rules they rely on
//! (no server needed).

use crate::common;

use common::{enc, parse_listening, strip_ansi, SseItem, SseParser};

fn events(items: &[SseItem]) -> Vec<(Option<String>, String)> {
    items
        .iter()
        .filter_map(|i| match i {
            SseItem::Event(e) => Some((e.id_field.clone(), e.data.clone())),
            SseItem::Comment(_) => None,
        })
        .collect()
}

fn parse_all_chunks(chunks: &[&[u8]]) -> Vec<SseItem> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    for c in chunks {
        out.extend(p.push(c));
    }
    out.extend(p.finish());
    out
}

#[test]
fn frames_with_lf_crlf_and_cr() {
    let want = vec![
        (Some("1".to_string()), "{\"a\":1}".to_string()),
        (Some("2".to_string()), "x".to_string()),
    ];
    for sep in ["\n", "\r\n", "\r"] {
        let text = format!(
            "id: 1{sep}data: {{\"a\":1}}{sep}{sep}: ping{sep}{sep}id: 2{sep}data: x{sep}{sep}"
        );
        let items = parse_all_chunks(&[text.as_bytes()]);
        assert_eq!(events(&items), want, "separator {sep:?}");
        assert!(
            items
                .iter()
                .any(|i| matches!(i, SseItem::Comment(c) if c == " ping")),
            "separator {sep:?}"
        );
    }
}

#[test]
fn events_split_across_chunks_at_every_byte() {
    let text =
        "id: 10\r\ndata: {\"type\":\"text-delta\"}\r\n\r\n: ping\n\nid: 11\ndata: a\ndata: b\n\n";
    let bytes = text.as_bytes();
    for split in 0..=bytes.len() {
        let items = parse_all_chunks(&[&bytes[..split], &bytes[split..]]);
        assert_eq!(
            events(&items),
            vec![
                (Some("10".into()), "{\"type\":\"text-delta\"}".into()),
                (Some("11".into()), "a\nb".into()),
            ],
            "split at {split}"
        );
    }
    // One byte at a time.
    let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(events(&parse_all_chunks(&chunks)).len(), 2);
}

#[test]
fn spec_edge_cases() {
    // No space after the colon; a field with no colon; an event with no data is not dispatched;
    // the last-event-id buffer persists; an incomplete event at EOF is dropped.
    let items =
        parse_all_chunks(&[b"id:5\ndata:x\n\nid: 6\n\ndata\n\nevent: e\ndata: y\n\ndata: cut"]);
    let evs: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            SseItem::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(evs.len(), 3);
    assert_eq!(evs[0].id_field.as_deref(), Some("5"));
    assert_eq!(evs[0].data, "x");
    assert_eq!(evs[1].data, "");
    assert_eq!(evs[1].id_field, None);
    assert_eq!(evs[1].last_event_id, "6");
    assert_eq!(evs[2].event.as_deref(), Some("e"));
    assert_eq!(evs[2].data, "y");
    // A leading BOM is ignored, even split across chunks.
    let items = parse_all_chunks(&[b"\xEF\xBB", b"\xBFid: 1\ndata: z\n\n"]);
    assert_eq!(events(&items), vec![(Some("1".into()), "z".into())]);
}

#[test]
fn listening_line_and_helpers() {
    let line = "\u{1b}[2m2025-01-01T00:00:00Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m threadstream_api: threadstream listening on http://127.0.0.1:41234 data_dir=/tmp/x";
    assert_eq!(parse_listening(line).as_deref(), Some("127.0.0.1:41234"));
    assert_eq!(parse_listening("nothing here"), None);
    assert_eq!(strip_ansi("\u{1b}[1mA\u{1b}[0mB"), "AB");
    assert_eq!(enc("a b/\u{1}é"), "a%20b%2F%01%C3%A9");
}

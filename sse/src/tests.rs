//! Each rule of the module's list, fed whole, cut at every byte and one byte at a time.

use super::*;

/// An item with its slices copied, to compare.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Event {
        event: Option<String>,
        data: String,
        id: Option<String>,
        last_event_id: String,
    },
    Comment(String),
}

fn s(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8")
}

fn collect(out: &mut Vec<Got>) -> impl FnMut(Item<'_>) + '_ {
    move |item| {
        out.push(match item {
            Item::Event(e) => Got::Event {
                event: e.event.map(s),
                data: s(e.data),
                id: e.id.map(s),
                last_event_id: s(e.last_event_id),
            },
            Item::Comment(c) => Got::Comment(s(c)),
        })
    }
}

fn parse_chunks(chunks: &[&[u8]]) -> Vec<Got> {
    let mut p = Parser::new();
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c, &mut collect(&mut out)).unwrap();
    }
    p.finish();
    out
}

/// The items of `text`, checked to be the same however the bytes are cut.
fn parse(text: &[u8]) -> Vec<Got> {
    let whole = parse_chunks(&[text]);
    for cut in 0..=text.len() {
        assert_eq!(
            parse_chunks(&[&text[..cut], &text[cut..]]),
            whole,
            "cut at {cut} of {:?}",
            String::from_utf8_lossy(text)
        );
    }
    let bytes: Vec<&[u8]> = text.chunks(1).collect();
    assert_eq!(parse_chunks(&bytes), whole, "one byte at a time");
    whole
}

fn data(text: &[u8]) -> Vec<String> {
    parse(text)
        .into_iter()
        .filter_map(|g| match g {
            Got::Event { data, .. } => Some(data),
            Got::Comment(_) => None,
        })
        .collect()
}

fn ev(data: &str) -> Got {
    Got::Event {
        event: None,
        data: data.into(),
        id: None,
        last_event_id: String::new(),
    }
}

#[test]
fn lf_crlf_and_cr_end_lines_alike() {
    for sep in ["\n", "\r\n", "\r"] {
        let text = format!("data: a{sep}data: b{sep}{sep}data: c{sep}{sep}");
        assert_eq!(data(text.as_bytes()), ["a\nb", "c"], "separator {sep:?}");
    }
    // Mixed in one stream.
    assert_eq!(data(b"data: a\r\ndata: b\rdata: c\n\r\n"), ["a\nb\nc"]);
}

#[test]
fn a_crlf_cut_between_reads_is_one_line_end() {
    // Were the LF taken for a second line end, `a` would be dispatched alone.
    assert_eq!(
        parse_chunks(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]),
        [ev("a\nb")]
    );
    // A CR then something else: the CR alone ended the line.
    assert_eq!(
        parse_chunks(&[b"data: a\r", b"\rdata: b\r\r"]),
        [ev("a"), ev("b")]
    );
}

#[test]
fn a_lone_cr_dispatches_at_once() {
    let mut p = Parser::new();
    let mut out = Vec::new();
    p.feed(b"data: a\r\r", &mut collect(&mut out)).unwrap();
    assert_eq!(out, [ev("a")], "not held back waiting for a possible LF");
}

#[test]
fn one_leading_bom_is_skipped() {
    assert_eq!(data(b"\xEF\xBB\xBFdata: x\n\n"), ["x"]);
    assert_eq!(
        parse_chunks(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]),
        [ev("x")]
    );
    // A second BOM is part of the first field's name, which is then unknown.
    assert_eq!(
        data(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n"),
        ["y"]
    );
    // Not at the start, it is content.
    assert_eq!(data("data: \u{feff}x\n\n".as_bytes()), ["\u{feff}x"]);
    // A BOM's first bytes then others: content of the first line.
    assert_eq!(data(b"\xEF\xBB: c\n\ndata: y\n\n"), ["y"]);
    assert_eq!(
        parse(b"\xEF\n:c\n"),
        [Got::Comment("c".into())],
        "the partial BOM was a line of its own"
    );
}

#[test]
fn one_space_after_the_colon_is_dropped() {
    assert_eq!(data(b"data:x\n\n"), ["x"]);
    assert_eq!(data(b"data: x\n\n"), ["x"]);
    assert_eq!(data(b"data:  x \n\n"), [" x "]);
    assert_eq!(data(b"data:\tx\n\n"), ["\tx"]);
    // `:` in the value stays.
    assert_eq!(data(b"data: {\"a\":1}\n\n"), ["{\"a\":1}"]);
}

#[test]
fn data_lines_join_with_lf() {
    assert_eq!(data(b"data: a\ndata: b\ndata: c\n\n"), ["a\nb\nc"]);
    // Empty data lines count: a line of its own, and no trailing LF.
    assert_eq!(data(b"data\n\n"), [""]);
    assert_eq!(data(b"data:\ndata:\n\n"), ["\n"]);
    assert_eq!(data(b"data: a\ndata\n\n"), ["a\n"]);
}

#[test]
fn an_event_without_data_is_not_dispatched() {
    assert_eq!(data(b"event: e\n\nid: 1\n\n\n\ndata: x\n\n"), ["x"]);
    // ... and its event type is not carried to the next one.
    let got = parse(b"event: e\n\ndata: x\n\n");
    assert_eq!(
        got,
        [Got::Event {
            event: None,
            data: "x".into(),
            id: None,
            last_event_id: String::new(),
        }]
    );
}

#[test]
fn comments_are_handed_out_and_change_nothing() {
    let got = parse(b": ping\ndata: a\n:x\ndata: b\n\n:\n");
    assert_eq!(
        got,
        [
            Got::Comment(" ping".into()),
            Got::Comment("x".into()),
            ev("a\nb"),
            Got::Comment(String::new()),
        ]
    );
}

#[test]
fn event_type_is_per_event() {
    let got = parse(b"event: a\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n");
    let types: Vec<_> = got
        .into_iter()
        .map(|g| match g {
            Got::Event { event, .. } => event,
            Got::Comment(_) => unreachable!(),
        })
        .collect();
    assert_eq!(types, [Some("a".into()), None, Some(String::new())]);
}

#[test]
fn the_last_event_id_persists_and_the_own_id_does_not() {
    let got = parse(
        b"id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: 8\0\ndata: d\n\nid:9\n\ndata: e\n\n",
    );
    let ids: Vec<_> = got
        .into_iter()
        .map(|g| match g {
            Got::Event {
                id, last_event_id, ..
            } => (id, last_event_id),
            Got::Comment(_) => unreachable!(),
        })
        .collect();
    assert_eq!(
        ids,
        [
            (Some("7".into()), "7".into()),
            (None, "7".into()),
            // An empty id empties the last event id.
            (Some(String::new()), String::new()),
            // One with a NUL is ignored.
            (None, String::new()),
            // One on an event without data still sets it.
            (None, "9".into()),
        ]
    );
}

#[test]
fn retry_takes_digits_only() {
    let mut p = Parser::new();
    let mut out = Vec::new();
    p.feed(b"retry: 1500\n", &mut collect(&mut out)).unwrap();
    assert_eq!(p.retry(), Some(1500));
    for bad in [
        &b"retry: 15x\n"[..],
        b"retry:\n",
        b"retry: -1\n",
        b"retry: 1.5\n",
        b"retry:  2\n",
    ] {
        p.feed(bad, &mut collect(&mut out)).unwrap();
        assert_eq!(p.retry(), Some(1500), "{:?}", String::from_utf8_lossy(bad));
    }
    p.feed(b"retry:20\n\n", &mut collect(&mut out)).unwrap();
    assert_eq!(p.retry(), Some(20));
    assert!(out.is_empty(), "retry alone dispatches nothing");
}

#[test]
fn unknown_fields_and_field_names_are_exact() {
    assert_eq!(data(b"Data: x\ndata : y\nfoo: z\ndata: w\n\n"), ["w"]);
}

#[test]
fn the_end_of_the_stream_drops_an_undispatched_event() {
    assert_eq!(data(b"data: a\n\ndata: cut\n"), ["a"]);
    assert_eq!(data(b"data: a\n\ndata: cut"), ["a"]);
    // A sender that omits the last blank line or line end.
    for tail in [&b"data: x"[..], b"data: x\n", b"data: x\r"] {
        let mut p = Parser::new();
        let mut out = Vec::new();
        p.feed(tail, &mut collect(&mut out)).unwrap();
        p.finish_dispatching(&mut collect(&mut out));
        assert_eq!(out, [ev("x")], "{tail:?}");
        p.finish_dispatching(&mut collect(&mut out));
        assert_eq!(out.len(), 1, "nothing twice");
    }
}

#[test]
fn utf8_cut_anywhere_is_kept_whole() {
    assert_eq!(
        data("data: {\"x\":\"é€😀\"}\n\n".as_bytes()),
        ["{\"x\":\"é€😀\"}"]
    );
}

#[test]
fn a_line_over_the_limit_is_refused() {
    let mut p = Parser::with_max_line(8);
    let mut out = Vec::new();
    p.feed(b"data: 12\n", &mut collect(&mut out)).unwrap();
    assert_eq!(
        p.feed(b"data: 123\n", &mut collect(&mut out)),
        Err(LineTooLong { max: 8 })
    );
    let mut p = Parser::with_max_line(8);
    p.feed(b"data:", &mut collect(&mut out)).unwrap();
    assert!(
        p.feed(b" 1234", &mut collect(&mut out)).is_err(),
        "across reads too"
    );
}

#[test]
fn buffers_are_reused() {
    let mut p = Parser::new();
    let mut n = 0;
    p.feed(b"id: 1\ndata: first\n\n", &mut |_| n += 1).unwrap();
    let caps = (p.data.capacity(), p.id.capacity());
    for _ in 0..100 {
        p.feed(b"id: 2\ndata: again\n\n", &mut |_| n += 1).unwrap();
    }
    assert_eq!((p.data.capacity(), p.id.capacity()), caps);
    assert_eq!(n, 101);
}

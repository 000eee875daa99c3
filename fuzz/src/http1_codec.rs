//! The `http1_codec` target: our HTTP/1.1 request-head codec (http1/src/codec.rs) against
//! hyper's HTTP/1 server on the same bytes, and against itself fed in two pieces.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, Uri, Version};
use threadstream_http1::codec::{parse_head, HeadReader, Parsed, Refusal, MAX_HEAD};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What our codec decided, in a form two decisions can be compared in.
#[derive(Debug, PartialEq)]
enum Decision {
    Partial,
    Ours {
        method: Method,
        uri: Uri,
        version: Version,
        len: usize,
    },
    Hyper,
    Refuse(Refusal),
}

fn decision(parsed: Parsed) -> Decision {
    match parsed {
        Parsed::Partial => Decision::Partial,
        Parsed::Ours { req, len, .. } => Decision::Ours {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            len,
        },
        Parsed::Hyper => Decision::Hyper,
        Parsed::Refuse(r) => Decision::Refuse(r),
    }
}

/// A request hyper handed to the service: its line and how many body bytes it had.
#[derive(Debug)]
struct Seen {
    method: Method,
    uri: Uri,
    version: Version,
    body: Result<usize, String>,
}

/// Serves `data` (then the end of input) with hyper's HTTP/1 connection, configured as the
/// listener configures it, and returns the requests it read.
fn hyper_reads(data: &[u8]) -> Vec<Seen> {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    RUNTIME.with(|rt| {
        rt.block_on(async {
            let (mut client, server) = tokio::io::duplex(2 * MAX_HEAD + 1024);
            client
                .write_all(data)
                .await
                .expect("the pipe holds the input");
            client.shutdown().await.expect("end of input");
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let record = record.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes().len())
                        .map_err(|e| e.to_string());
                    record.lock().unwrap().push(Seen {
                        method: parts.method,
                        uri: parts.uri,
                        version: parts.version,
                        body,
                    });
                    Ok::<_, Infallible>(Response::new(String::new()))
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .max_buf_size(MAX_HEAD)
                .half_close(true)
                .serve_connection(hyper_util::rt::TokioIo::new(server), service);
            // Drain the answers so that hyper never waits for room to write them.
            let drain = async move {
                let mut sink = Vec::new();
                let _ = client.read_to_end(&mut sink).await;
            };
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                let _ = tokio::join!(conn, drain);
            })
            .await;
        })
    });
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    seen
}

/// Whether the bytes hold a blank line (the end of a head) after the empty lines a head may
/// start with.
fn has_blank_line(data: &[u8]) -> bool {
    let start = data
        .iter()
        .position(|b| !matches!(b, b'\r' | b'\n'))
        .unwrap_or(data.len());
    data[start..]
        .windows(2)
        .any(|w| w == b"\n\n" || (w[0] == b'\n' && w[1] == b'\r'))
}

/// Properties:
/// - the head reader fed in two pieces (cut where the first byte says) decides what a parse
///   of the same bytes decides, except that it may wait for a line end before refusing (the
///   request line's, or the blank line of a head with a bad field or too many);
/// - a body-less request of ours is the request hyper reads first, with an empty body;
/// - a head we refuse as malformed or too large is never handed to the service by hyper.
pub fn http1_codec_target(data: &[u8]) {
    let Some((&cut, data)) = data.split_first() else {
        return;
    };
    let cut = cut as usize * data.len() / 256;
    let mut reader = HeadReader::default();
    let first = decision(reader.next(&data[..cut]));
    let incremental = if first == Decision::Partial {
        decision(reader.next(data))
    } else {
        assert_eq!(
            first,
            decision(parse_head(&data[..cut])),
            "first piece of {cut}"
        );
        return;
    };
    let whole = decision(parse_head(data));
    match (&incremental, &whole) {
        (a, b) if a == b => {}
        // A bad field, or one field too many, is refused when the head ends (or at the head
        // timeout, or at MAX_HEAD), not as soon as a full parse would see it.
        (Decision::Partial, Decision::Refuse(Refusal::Malformed | Refusal::TooLarge))
            if !has_blank_line(data) => {}
        _ => panic!("cut at {cut}: incremental {incremental:?}, whole {whole:?}"),
    }
    match whole {
        Decision::Ours {
            method,
            uri,
            version,
            len: _,
        } => {
            let seen = hyper_reads(data);
            let first = seen.first().unwrap_or_else(|| {
                panic!("ours: {method} {uri} {version:?}; hyper read no request")
            });
            assert_eq!(
                (&first.method, &first.uri, first.version),
                (&method, &uri, version),
                "the request line"
            );
            assert_eq!(
                first.body,
                Ok(0),
                "a body-less request of ours had a body for hyper"
            );
        }
        Decision::Refuse(Refusal::Malformed | Refusal::TooLarge) => {
            let seen = hyper_reads(data);
            assert!(seen.is_empty(), "we refuse, hyper read {seen:?}");
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_reports_what_hyper_read() {
        let seen = hyper_reads(b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].uri, "/a?b=1");
        assert_eq!(seen[0].body, Ok(0));
        let seen =
            hyper_reads(b"POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}GET /y HTTP/1.1\r\n\r\n");
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].body, Ok(2));
        assert_eq!(seen[1].uri, "/y");
        assert!(hyper_reads(b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n").is_empty());
    }
}

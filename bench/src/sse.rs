//! A minimal HTTP/1.1 SSE client over a raw TCP socket: it sends the GET, checks the status,
//! undoes the chunked transfer encoding and splits frames with the one `text/event-stream`
//! parser (`threadstream-sse`), handing each frame's id and data to a callback. No allocation
//! per frame; the caller decides how much to read at a time (slow readers) and how big the
//! socket's receive buffer is.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{bail, Context};
use threadstream_sse::{Item, Parser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

pub struct SseConn {
    stream: TcpStream,
    buf: Vec<u8>,
    chunk: ChunkState,
    parser: Parser,
    path: String,
    pub bytes: u64,
    /// When the response head (status 200) arrived, and its `X-Served-By` (set by the load
    /// balancer; empty without one).
    pub opened: Option<(Instant, String)>,
}

enum ChunkState {
    /// Reading the response head.
    Head(Vec<u8>),
    /// Reading the hex size line.
    Size(Vec<u8>),
    Data(usize),
    /// Skipping the CRLF after a chunk's data.
    Crlf(usize),
    Done,
}

/// What a read gave.
pub enum Read {
    /// Some bytes arrived (maybe no complete frame).
    Data,
    /// The server closed the stream.
    Eof,
}

impl SseConn {
    /// Connects and reads the response head. `rcvbuf` shrinks the socket's receive buffer (a slow
    /// reader's back-pressure then reaches the server sooner).
    pub async fn connect(
        addr: SocketAddr,
        path: &str,
        last_event_id: Option<i64>,
        rcvbuf: Option<u32>,
    ) -> anyhow::Result<SseConn> {
        let socket = TcpSocket::new_v4()?;
        if let Some(n) = rcvbuf {
            socket.set_recv_buffer_size(n)?;
        }
        let mut stream = socket.connect(addr).await.context("connect")?;
        stream.set_nodelay(true)?;
        let mut req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n"
        );
        if let Some(id) = last_event_id {
            req.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await?;
        // The response head is read lazily, by the first `read_some`: the server may hold it
        // back until it has a first frame to send (an event, or a ping).
        Ok(SseConn {
            stream,
            buf: vec![0u8; 64 * 1024],
            chunk: ChunkState::Head(Vec::with_capacity(1024)),
            parser: Parser::new(),
            path: path.to_string(),
            bytes: 0,
            opened: None,
        })
    }

    /// Reads once (at most `max` bytes) and calls `on_frame(id, data, received_at)` for every
    /// frame completed by what arrived.
    pub async fn read_some(
        &mut self,
        max: usize,
        on_frame: &mut impl FnMut(Option<i64>, &[u8], Instant),
    ) -> anyhow::Result<Read> {
        if matches!(self.chunk, ChunkState::Done) {
            return Ok(Read::Eof);
        }
        // A read cancelled by its caller's timeout left the buffer taken (the socket's read is
        // cancel-safe: nothing was consumed): give it a new one.
        if self.buf.is_empty() {
            self.buf = vec![0u8; 64 * 1024];
        }
        let max = max.min(self.buf.len()).max(1);
        let mut buf = std::mem::take(&mut self.buf);
        let n = self.stream.read(&mut buf[..max]).await;
        let now = Instant::now();
        let result = match n {
            Ok(0) => Ok(Read::Eof),
            Ok(n) => {
                self.bytes += n as u64;
                self.feed(&buf[..n], now, on_frame).map(|_| Read::Data)
            }
            Err(e) => Err(e.into()),
        };
        self.buf = buf;
        result
    }

    fn feed(
        &mut self,
        mut input: &[u8],
        now: Instant,
        on_frame: &mut impl FnMut(Option<i64>, &[u8], Instant),
    ) -> anyhow::Result<()> {
        while !input.is_empty() {
            match &mut self.chunk {
                ChunkState::Head(acc) => {
                    let old = acc.len();
                    acc.extend_from_slice(input);
                    let Some(end) = find(acc, b"\r\n\r\n") else {
                        if acc.len() > 64 * 1024 {
                            bail!("response head too long");
                        }
                        return Ok(());
                    };
                    let head = String::from_utf8_lossy(&acc[..end]).to_ascii_lowercase();
                    let status = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    if status != "200" {
                        bail!(
                            "GET {}: status {status}: {}",
                            self.path,
                            String::from_utf8_lossy(acc)
                        );
                    }
                    if !head.contains("transfer-encoding: chunked") {
                        bail!("GET {}: expected a chunked body", self.path);
                    }
                    let served_by = head
                        .lines()
                        .find_map(|l| l.strip_prefix("x-served-by:"))
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    self.opened = Some((now, served_by));
                    input = &input[end + 4 - old..];
                    self.chunk = ChunkState::Size(Vec::new());
                }
                ChunkState::Size(acc) => {
                    if let Some(i) = input.iter().position(|&b| b == b'\n') {
                        acc.extend_from_slice(&input[..i]);
                        input = &input[i + 1..];
                        let text = String::from_utf8_lossy(acc);
                        let hex = text.split([';', '\r']).next().unwrap_or("").trim();
                        let size = usize::from_str_radix(hex, 16)
                            .with_context(|| format!("bad chunk size {hex:?}"))?;
                        self.chunk = if size == 0 {
                            ChunkState::Done
                        } else {
                            ChunkState::Data(size)
                        };
                    } else {
                        acc.extend_from_slice(input);
                        input = &[];
                    }
                }
                ChunkState::Data(left) => {
                    let take = (*left).min(input.len());
                    let (data, rest) = input.split_at(take);
                    *left -= take;
                    if *left == 0 {
                        self.chunk = ChunkState::Crlf(2);
                    }
                    input = rest;
                    self.feed_body(data, now, on_frame)?;
                }
                ChunkState::Crlf(left) => {
                    let take = (*left).min(input.len());
                    *left -= take;
                    input = &input[take..];
                    if *left == 0 {
                        self.chunk = ChunkState::Size(Vec::new());
                    }
                }
                ChunkState::Done => return Ok(()),
            }
        }
        Ok(())
    }

    fn feed_body(
        &mut self,
        data: &[u8],
        now: Instant,
        on_frame: &mut impl FnMut(Option<i64>, &[u8], Instant),
    ) -> anyhow::Result<()> {
        self.parser.feed(data, &mut |item| {
            if let Item::Event(e) = item {
                let id =
                    e.id.and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|s| s.trim().parse().ok());
                on_frame(id, e.data, now);
            }
        })?;
        Ok(())
    }
}

impl SseConn {
    /// Reads until the first frame with an id has arrived (the stream is then surely open);
    /// returns that id. Only for streams that have an event to send at once.
    pub async fn first_frame(&mut self) -> anyhow::Result<i64> {
        let mut first = None;
        while first.is_none() {
            let r = self
                .read_some(64 * 1024, &mut |id, _, _| {
                    if first.is_none() {
                        first = id;
                    }
                })
                .await?;
            if let Read::Eof = r {
                bail!("stream ended before its first frame");
            }
        }
        Ok(first.expect("set"))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The event type of an n8n envelope, which the server always writes first: `{"type":"…",`.
pub fn event_type(data: &[u8]) -> &[u8] {
    let Some(rest) = data.strip_prefix(b"{\"type\":\"") else {
        return b"";
    };
    match rest.iter().position(|&b| b == b'"') {
        Some(i) => &rest[..i],
        None => b"",
    }
}

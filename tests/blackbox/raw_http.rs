//! A raw HTTP/1.1 client over a TCP socket, for tests that must control the bytes on the wire
//! (keep-alive, pipelining, half-closes, malformed and ambiguous heads) and read the answer
//! exactly as the server wrote it.

use crate::common::Server;

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A raw HTTP/1.1 client connection that parses responses itself.
pub struct Raw {
    pub s: TcpStream,
    pub buf: Vec<u8>,
}

#[derive(Debug)]
pub struct RawResp {
    /// The status line, e.g. `HTTP/1.1 200 OK`.
    pub status_line: String,
    pub status: u16,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

impl Raw {
    pub async fn connect(s: &Server) -> Raw {
        let addr = s.base.trim_start_matches("http://");
        Raw {
            s: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("write request");
    }

    /// Reads more bytes into the buffer; `false` at the end of the connection.
    pub async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        let n = tokio::time::timeout(READ_TIMEOUT, self.s.read(&mut chunk))
            .await
            .expect("the server answered in time")
            .expect("read");
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    pub async fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill().await, "connection closed mid-body");
        }
        self.buf.drain(..n).collect()
    }

    pub async fn line(&mut self) -> String {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                return String::from_utf8(line[..i].to_vec()).expect("UTF-8 line");
            }
            assert!(self.fill().await, "connection closed mid-line");
        }
    }

    /// The status line and headers of the next response.
    pub async fn head(&mut self) -> RawResp {
        let status_line = self.line().await;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line: {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                break;
            }
            let (n, v) = line.split_once(':').expect("header line");
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        RawResp {
            status_line,
            status,
            headers,
            body: Vec::new(),
        }
    }

    /// One chunk of a chunked body; `None` at the last (zero) chunk and its blank line.
    pub async fn chunk(&mut self) -> Option<Vec<u8>> {
        let size = self.line().await;
        let n = usize::from_str_radix(size.trim(), 16)
            .unwrap_or_else(|_| panic!("chunk size {size:?}"));
        if n == 0 {
            assert_eq!(self.line().await, "", "end of the chunked body");
            return None;
        }
        let data = self.take(n).await;
        assert_eq!(self.take(2).await, b"\r\n", "chunk terminator");
        Some(data)
    }

    /// The next complete response (`head_request`: no body follows).
    pub async fn response(&mut self, head_request: bool) -> RawResp {
        let mut r = self.head().await;
        if head_request || r.status == 204 || r.status == 304 {
            return r;
        }
        if let Some(n) = r.header("content-length") {
            let n: usize = n.parse().expect("content-length");
            r.body = self.take(n).await;
        } else if r.header("transfer-encoding") == Some("chunked") {
            while let Some(c) = self.chunk().await {
                r.body.extend(c);
            }
        } else {
            while self.fill().await {}
            r.body = std::mem::take(&mut self.buf);
        }
        r
    }

    /// The server closed the connection (nothing more to read).
    pub async fn closed(&mut self) -> bool {
        self.buf.is_empty() && !self.fill().await
    }
}

pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
}

pub fn ingest_request(thread: &str, events: &[Value]) -> Vec<u8> {
    let body = serde_json::to_vec(&serde_json::json!({ "events": events })).unwrap();
    let mut req = format!(
        "POST /instance-ai/threads/{thread}/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend(body);
    req
}

impl Raw {
    /// Half-closes: the client will send nothing more (`shutdown(SHUT_WR)`), and still reads.
    pub async fn finish_sending(&mut self) {
        self.s.shutdown().await.expect("shutdown the write side");
    }

    /// Whether the server closes the connection (an end of input or a reset) within `limit`;
    /// what it sends before is kept in the buffer.
    pub async fn closes_within(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            let mut chunk = [0u8; 8192];
            loop {
                match self.s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .is_ok()
    }
}

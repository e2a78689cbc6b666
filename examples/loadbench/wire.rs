//! A lean HTTP/1.1 load client for the throughput runs: one keep-alive connection per client,
//! the request bytes built once, the response framed (Content-Length or chunked) and checked
//! without further parsing. A full HTTP client spent more CPU than the server under test, and
//! on two shared cores that would have measured the client.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Conn {
    addr: String,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

/// `POST {path}` with a JSON body and extra request headers (a proxy's provider and key
/// headers), as bytes ready to write.
pub fn post(host: &str, path: &str, body: &str, headers: &[(String, String)]) -> Vec<u8> {
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n{extra}\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl Conn {
    pub fn new(addr: &str) -> Conn {
        Conn {
            addr: addr.to_string(),
            stream: None,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Sends `request` and reads the whole response. Fails unless the status is 200 and the
    /// body contains `must_contain`. Reconnects when the server closed the connection.
    pub async fn exchange(&mut self, request: &[u8], must_contain: &[u8]) -> io::Result<()> {
        if self.stream.is_none() {
            let s = TcpStream::connect(&self.addr).await?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
        }
        let result = self.exchange_on_open(request, must_contain).await;
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn exchange_on_open(&mut self, request: &[u8], must_contain: &[u8]) -> io::Result<()> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::other("not connected"));
        };
        stream.write_all(request).await?;
        self.buf.clear();
        // Head.
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            read_more(stream, &mut self.buf).await?;
        };
        let head = std::str::from_utf8(&self.buf[..head_end]).map_err(io::Error::other)?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(io::Error::other(format!(
                "unexpected status: {}",
                head.lines().next().unwrap_or("")
            )));
        }
        let lower = head.to_ascii_lowercase();
        let close = lower.contains("\r\nconnection: close");
        let body_ok;
        if let Some(len) = header(&lower, "content-length") {
            let len: usize = len.parse().map_err(io::Error::other)?;
            while self.buf.len() < head_end + len {
                read_more(stream, &mut self.buf).await?;
            }
            body_ok = find(&self.buf[head_end..head_end + len], must_contain).is_some();
        } else if header(&lower, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            // Walk the chunks in place; the payload is checked at the end.
            let mut pos = head_end;
            let mut payload = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(i) = find(&self.buf[pos..], b"\r\n") {
                        break pos + i;
                    }
                    read_more(stream, &mut self.buf).await?;
                };
                let size_text = std::str::from_utf8(&self.buf[pos..line_end])
                    .map_err(io::Error::other)?
                    .split(';')
                    .next()
                    .unwrap_or("")
                    .trim();
                let size = usize::from_str_radix(size_text, 16).map_err(io::Error::other)?;
                let data = line_end + 2;
                while self.buf.len() < data + size + 2 {
                    read_more(stream, &mut self.buf).await?;
                }
                if size == 0 {
                    break;
                }
                payload.extend_from_slice(&self.buf[data..data + size]);
                pos = data + size + 2;
            }
            body_ok = find(&payload, must_contain).is_some();
        } else {
            return Err(io::Error::other(
                "response without a length or chunked body",
            ));
        }
        if close {
            self.stream = None;
        }
        if body_ok {
            Ok(())
        } else {
            Err(io::Error::other(
                "the response body lacks the expected text",
            ))
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 8192];
    let n = stream.read(&mut chunk).await?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-response",
        ));
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

fn header<'a>(lower_head: &'a str, name: &str) -> Option<&'a str> {
    lower_head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim())
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

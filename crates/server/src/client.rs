//! A minimal HTTP/1.1 client on tokio for the tests and `headroom bench
//! serve`: one request per connection (`Connection: close`), bodies by
//! `Content-Length`, chunked or to the end, and a server-sent-event reader
//! that yields each `data:` payload as it arrives. Sizes are bounded.

use std::io::{Error, ErrorKind, Result};
use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Most bytes of a header block, one chunk, and one whole body.
const MAX_HEADER_BYTES: usize = 64 << 10;
const MAX_CHUNK_BYTES: usize = 16 << 20;
const MAX_BODY_BYTES: usize = 64 << 20;

/// A whole response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).map_err(|e| Error::new(ErrorKind::InvalidData, e))
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidData, msg.into())
}

/// A response whose body is read as it arrives.
pub struct OpenResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    remaining: Option<usize>,
    ended: bool,
    buf: Vec<u8>,
}

/// Sends `method path` with an optional JSON `body`; returns once the head arrived.
pub async fn open(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<OpenResponse> {
    open_with(addr, method, path, body, &[]).await
}

/// [`open`] with extra request headers (`name`, `value`).
pub async fn open_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> Result<OpenResponse> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        if [k, v].iter().any(|s| s.contains(['\r', '\n'])) {
            return Err(bad("a header name or value holds a line break"));
        }
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    if let Some(b) = body {
        stream.write_all(b).await?;
    }
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut total = 0usize;
    read_head_line(&mut reader, &mut line, &mut total).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        read_head_line(&mut reader, &mut line, &mut total).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked = get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let remaining = match get("content-length") {
        Some(v) => Some(v.parse::<usize>().map_err(|_| bad("bad content-length"))?),
        None => None,
    };
    Ok(OpenResponse {
        status,
        headers,
        reader,
        chunked,
        remaining,
        ended: false,
        buf: Vec::new(),
    })
}

async fn read_head_line(
    reader: &mut BufReader<TcpStream>,
    line: &mut String,
    total: &mut usize,
) -> Result<()> {
    line.clear();
    let n = reader.read_line(line).await?;
    *total += n;
    if n == 0 || *total > MAX_HEADER_BYTES {
        return Err(bad("connection closed or header too large"));
    }
    Ok(())
}

/// Sends a request and reads the whole response.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<HttpResponse> {
    request_with(addr, method, path, body, &[]).await
}

/// [`request`] with extra request headers.
pub async fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> Result<HttpResponse> {
    let mut r = open_with(addr, method, path, body, headers).await?;
    while r.fill().await? {
        if r.buf.len() > MAX_BODY_BYTES {
            return Err(bad("body too large"));
        }
    }
    Ok(HttpResponse {
        status: r.status,
        headers: r.headers,
        body: r.buf,
    })
}

/// `POST path` with a JSON value.
pub async fn post_json(
    addr: SocketAddr,
    path: &str,
    body: &serde_json::Value,
) -> Result<HttpResponse> {
    request(addr, "POST", path, Some(body.to_string().as_bytes())).await
}

impl OpenResponse {
    /// Reads the next piece of the body into the buffer; false at its end.
    async fn fill(&mut self) -> Result<bool> {
        if self.ended {
            return Ok(false);
        }
        if self.chunked {
            let mut line = String::new();
            self.reader.read_line(&mut line).await?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| bad(format!("bad chunk size {line:?}")))?;
            if size > MAX_CHUNK_BYTES {
                return Err(bad("chunk too large"));
            }
            if size == 0 {
                self.ended = true;
                return Ok(false);
            }
            let start = self.buf.len();
            self.buf.resize(start + size, 0);
            self.reader.read_exact(&mut self.buf[start..]).await?;
            let mut crlf = [0u8; 2];
            self.reader.read_exact(&mut crlf).await?;
            return Ok(true);
        }
        let want = self.remaining.unwrap_or(8192).min(8192);
        if want == 0 {
            self.ended = true;
            return Ok(false);
        }
        let mut tmp = vec![0u8; want];
        let n = self.reader.read(&mut tmp).await?;
        if n == 0 {
            self.ended = true;
            if self.remaining.is_some() {
                return Err(bad("connection closed before the body ended"));
            }
            return Ok(false);
        }
        self.buf.extend_from_slice(&tmp[..n]);
        if let Some(r) = self.remaining.as_mut() {
            *r -= n;
        }
        Ok(true)
    }

    /// The next server-sent event's `data` (lines joined by `\n`); `None` at the end.
    pub async fn next_event(&mut self) -> Result<Option<String>> {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..pos + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Ok(Some(data.join("\n")));
            }
            if self.buf.len() > MAX_BODY_BYTES {
                return Err(bad("event too large"));
            }
            if !self.fill().await? {
                return Ok(None);
            }
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

//! Reads an HTTP/1.0 answer as `kube-proxy explain` gets it, within bounds: a head of at most
//! [`AnswerLimits::head`] bytes, a 200 answer's body copied to the output as it arrives (at most
//! [`AnswerLimits::body`] bytes, never held whole), another answer's message kept up to
//! [`AnswerLimits::message`] bytes. Control characters from the server never reach the terminal: they
//! are replaced with `?` (C0 but newline and tab, DEL, and C1 encoded in UTF-8).

use std::io::{self, Read, Write};

/// Bounds on one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    /// Status line and headers, bytes.
    pub head: usize,
    /// A 200 answer's body, bytes.
    pub body: u64,
    /// The message kept from another answer, bytes.
    pub message: usize,
}

impl Default for AnswerLimits {
    fn default() -> Self {
        AnswerLimits {
            head: 16 << 10,
            body: 512 << 20,
            message: 4 << 10,
        }
    }
}

/// Why an answer could not be read: a message for people, the socket error behind it, if any, and
/// when to ask again (a 503 with `Retry-After` in seconds).
#[derive(Debug)]
pub struct AnswerError {
    pub message: String,
    pub io: Option<io::Error>,
    pub retry_after: Option<u32>,
}

fn fail(message: impl Into<String>) -> AnswerError {
    AnswerError {
        message: message.into(),
        io: None,
        retry_after: None,
    }
}

fn read_error(e: io::Error) -> AnswerError {
    AnswerError {
        message: plain(&e),
        io: Some(e),
        retry_after: None,
    }
}

/// What the head says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub content_length: Option<u64>,
    pub retry_after: Option<String>,
    pub chunked: bool,
}

/// Why a head is not an HTTP answer's.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// No `HTTP/1.x NNN` status line.
    #[error("not an HTTP answer")]
    NotHttp,
    /// A `Content-Length` that is not a number.
    #[error("a bad Content-Length")]
    ContentLength(#[source] std::num::ParseIntError),
}

/// Reads a head (status line and headers, without the blank line).
pub fn parse_head(head: &[u8]) -> Result<Head, HeadError> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .filter(|r| r.as_bytes().get(1) == Some(&b' '))
        .filter(|r| matches!(r.as_bytes().get(5), None | Some(b' ')))
        .and_then(|r| r.get(2..5))
        .filter(|c| c.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|c| (100..600).contains(c))
        .ok_or(HeadError::NotHttp)?;
    let mut out = Head {
        status,
        content_length: None,
        retry_after: None,
        chunked: false,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                let n = value.parse().map_err(HeadError::ContentLength)?;
                out.content_length = Some(n);
            }
            "retry-after" => out.retry_after = Some(sanitize_str(value, 32)),
            "transfer-encoding" => out.chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    Ok(out)
}

/// Replaces control characters as they stream through (a C1 control is two bytes in UTF-8, so one
/// byte may wait for the next chunk).
#[derive(Debug, Default)]
pub struct Sanitizer {
    pending_c2: bool,
}

impl Sanitizer {
    /// Appends `input`, sanitized, to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            if std::mem::take(&mut self.pending_c2) {
                if (0x80..=0x9f).contains(&b) {
                    out.push(b'?');
                    continue;
                }
                out.push(0xc2);
            }
            match b {
                b'\n' | b'\t' => out.push(b),
                0..=0x1f | 0x7f => out.push(b'?'),
                0xc2 => self.pending_c2 = true,
                _ => out.push(b),
            }
        }
    }

    /// Appends what is still pending.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if std::mem::take(&mut self.pending_c2) {
            out.push(0xc2);
        }
    }
}

/// `s` without control characters, at most `max` characters.
fn sanitize_str(s: &str, max: usize) -> String {
    s.chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Reads the head; returns it and the body bytes that came with it.
fn read_head(r: &mut dyn Read, max: usize) -> Result<(Vec<u8>, Vec<u8>), AnswerError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let searched = buf.len().saturating_sub(3);
        let n = r.read(&mut chunk).map_err(read_error)?;
        if n == 0 {
            return Err(fail(if buf.is_empty() {
                "the connection closed without an answer"
            } else {
                "the answer ended within its head"
            }));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[searched..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = searched + i;
            let body = buf.split_off(end + 4);
            buf.truncate(end);
            return Ok((buf, body));
        }
        if buf.len() > max {
            return Err(fail(format!(
                "the answer's head is larger than {max} bytes"
            )));
        }
    }
}

/// `n` bytes for people.
fn size(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

fn write(out: &mut dyn Write, bytes: &[u8]) -> Result<(), AnswerError> {
    out.write_all(bytes)
        .map_err(|e| fail(format!("writing the answer: {}", plain(&e))))
}

/// Copies a 200 answer's body to the output, sanitized, within the limit and the declared length.
struct Copier {
    total: u64,
    declared: Option<u64>,
    limit: u64,
    clean: Sanitizer,
    buf: Vec<u8>,
}

impl Copier {
    /// Copies the part of `data` within the declared length; true once all of it has come.
    fn feed(&mut self, data: &[u8], out: &mut dyn Write) -> Result<bool, AnswerError> {
        let left = self
            .declared
            .map_or(u64::MAX, |d| d.saturating_sub(self.total));
        let take = usize::try_from(left).map_or(data.len(), |l| l.min(data.len()));
        self.total += take as u64;
        if self.total > self.limit {
            return Err(fail(format!(
                "the answer is larger than {}: ask for one Service",
                size(self.limit)
            )));
        }
        self.buf.clear();
        self.clean.push(&data[..take], &mut self.buf);
        write(out, &self.buf)?;
        Ok(self.declared.is_some_and(|d| self.total >= d))
    }

    /// The end of the body: an error when it is shorter than declared.
    fn finish(&mut self, out: &mut dyn Write) -> Result<(), AnswerError> {
        if let Some(d) = self.declared.filter(|d| self.total < *d) {
            let total = self.total;
            return Err(fail(format!(
                "the answer ended after {total} of its {d} bytes"
            )));
        }
        self.buf.clear();
        self.clean.finish(&mut self.buf);
        write(out, &self.buf)
    }
}

/// Copies a 200 answer's body (`first` already read) to `out`.
fn copy_body(
    r: &mut dyn Read,
    first: &[u8],
    declared: Option<u64>,
    limit: u64,
    out: &mut dyn Write,
) -> Result<(), AnswerError> {
    if let Some(d) = declared.filter(|d| *d > limit) {
        return Err(fail(format!(
            "the answer is {d} bytes, more than {}: ask for one Service",
            size(limit)
        )));
    }
    let mut c = Copier {
        total: 0,
        declared,
        limit,
        clean: Sanitizer::default(),
        buf: Vec::new(),
    };
    if !c.feed(first, out)? {
        let mut chunk = vec![0u8; 16 << 10];
        loop {
            let n = r.read(&mut chunk).map_err(read_error)?;
            if n == 0 || c.feed(&chunk[..n], out)? {
                break;
            }
        }
    }
    c.finish(out)
}

/// The message of an answer other than 200: at most `max` bytes of its body, sanitized (what arrived
/// before a read error or the deadline, if any).
fn read_message(r: &mut dyn Read, first: Vec<u8>, declared: Option<u64>, max: usize) -> String {
    let max = declared.map_or(max, |d| usize::try_from(d).unwrap_or(max).min(max));
    let mut raw = first;
    let mut chunk = [0u8; 4096];
    while raw.len() < max {
        match r.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
        }
    }
    raw.truncate(max);
    let mut clean = Vec::with_capacity(raw.len());
    let mut s = Sanitizer::default();
    s.push(&raw, &mut clean);
    s.finish(&mut clean);
    String::from_utf8_lossy(&clean).trim_end().to_string()
}

/// Reads one answer from `r`: a 200 answer's body goes to `out`; another answer is an error with its
/// status and message.
pub fn read_answer(
    r: &mut dyn Read,
    out: &mut dyn Write,
    limits: AnswerLimits,
) -> Result<(), AnswerError> {
    let (head, first) = read_head(r, limits.head)?;
    let head = parse_head(&head).map_err(|e| fail(e.to_string()))?;
    if head.chunked {
        return Err(fail(
            "the answer is chunked, which an answer to HTTP/1.0 cannot be",
        ));
    }
    if head.status == 200 {
        return copy_body(r, &first, head.content_length, limits.body, out);
    }
    let message = read_message(r, first, head.content_length, limits.message);
    let retry = head
        .retry_after
        .as_deref()
        .and_then(|a| a.parse::<u32>().ok());
    match (head.status, retry) {
        (503, Some(after)) => Err(AnswerError {
            retry_after: Some(after),
            ..fail(format!("HTTP 503: busy, retry in {after} s: {message}"))
        }),
        (status, _) => Err(fail(format!("HTTP {status}: {message}"))),
    }
}

/// A socket error in plain words (no `os error N`).
pub fn plain(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "timed out".into(),
        kind => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(raw: &[u8], limits: AnswerLimits) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        read_answer(&mut &raw[..], &mut out, limits)
            .map(|()| out)
            .map_err(|e| e.message)
    }

    #[test]
    fn answers_and_their_bounds() {
        let l = AnswerLimits::default();
        let ok = b"HTTP/1.0 200 OK\r\ncontent-length: 6\r\n\r\nhello\nNOT PART";
        assert_eq!(read(ok, l).unwrap(), b"hello\n");
        let to_eof = b"HTTP/1.1 200 OK\r\n\r\nhello\x1b[31m\r\n\xc2\x9b\xc2\xa0";
        assert_eq!(read(to_eof, l).unwrap(), b"hello?[31m?\n?\xc2\xa0");
        let short = b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nabc";
        assert!(
            read(short, l)
                .unwrap_err()
                .contains("after 3 of its 10 bytes")
        );
        let busy =
            b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\n\r\n4 requests in progress\n";
        assert_eq!(
            read(busy, l).unwrap_err(),
            "HTTP 503: busy, retry in 1 s: 4 requests in progress"
        );
        let small = AnswerLimits { body: 4, ..l };
        assert!(
            read(ok, small)
                .unwrap_err()
                .contains("6 bytes, more than 4 bytes")
        );
        let no_len = b"HTTP/1.0 200 OK\r\n\r\n0123456789";
        assert!(read(no_len, small).unwrap_err().contains("larger than"));
        let long_head = [b"HTTP/1.0 200 OK\r\nx: ".as_slice(), &[b'a'; 40_000]].concat();
        assert!(read(&long_head, l).unwrap_err().contains("head is larger"));
        for bad in [
            &b""[..],
            b"HTTP/1.0 200",
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.0 2000 x\r\n\r\n",
        ] {
            assert!(read(bad, l).is_err(), "{bad:?}");
        }
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        assert!(read(chunked, l).unwrap_err().contains("chunked"));
    }

    #[test]
    fn a_bad_content_length_keeps_the_number_error() {
        use std::error::Error;
        let e = parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: x").unwrap_err();
        assert_eq!(e.to_string(), "a bad Content-Length");
        assert!(
            e.source()
                .is_some_and(|c| c.is::<std::num::ParseIntError>())
        );
        assert!(matches!(parse_head(b"SMTP 220"), Err(HeadError::NotHttp)));
    }
}

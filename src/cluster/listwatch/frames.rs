//! Splitting a watch response body into event frames: newline-delimited JSON, or protobuf frames
//! each preceded by its length as four big-endian bytes (apimachinery's length-delimited framer).
//!
//! Both framings are bounded: a frame longer than [`MAX_FRAME`] ends the framing with an error (the
//! watcher then watches again from its last resourceVersion), as client-go's streaming decoder refuses
//! an object past its 16 MiB buffer. A JSON line is searched for its end once: each chunk's bytes are
//! examined once however the line is split, so a long line costs linear time and at most the cap in
//! memory.

use super::body_error::BodyError;
use super::media::Encoding;
use super::response::RequestError;
use bytes::Bytes;
use futures::{Stream, StreamExt};

/// The largest frame accepted, in either framing: client-go's limit for one object on a stream (an
/// object is at most 1.5 MiB in etcd by default). A longer frame means a broken or hostile stream; it
/// is ended and the watcher watches again.
pub const MAX_FRAME: usize = crate::cluster::body_limit::MAX_OBJECT_BYTES;

/// How frames are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON document per line (empty lines skipped).
    Lines,
    /// A 4-byte big-endian length, then that many bytes.
    LengthPrefixed,
}

impl Framing {
    /// The framing of a watch body in `encoding`.
    pub fn of(encoding: Encoding) -> Self {
        match encoding {
            Encoding::Json => Framing::Lines,
            Encoding::Protobuf => Framing::LengthPrefixed,
        }
    }

    fn encoding(self) -> Encoding {
        match self {
            Framing::Lines => Encoding::Json,
            Framing::LengthPrefixed => Encoding::Protobuf,
        }
    }
}

/// Accumulates body chunks and cuts complete frames out of them.
#[derive(Debug)]
pub struct Framer {
    framing: Framing,
    max: usize,
    buf: Vec<u8>,
    /// Start of the unread data in `buf`.
    start: usize,
    /// Lines: bytes after `start` already searched for a newline (there is none among them).
    searched: usize,
    /// Bytes examined while searching for line ends, for the linear-time check of the tests.
    examined: u64,
    /// Set once the stream is out of step: no frame is returned after it.
    broken: bool,
}

impl Framer {
    /// An empty framer with the [`MAX_FRAME`] cap.
    pub fn new(framing: Framing) -> Self {
        Self::with_max(framing, MAX_FRAME)
    }

    /// An empty framer refusing frames longer than `max` bytes.
    pub fn with_max(framing: Framing, max: usize) -> Self {
        Self {
            framing,
            max,
            buf: Vec::new(),
            start: 0,
            searched: 0,
            examined: 0,
            broken: false,
        }
    }

    /// Appends a chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes examined so far while searching for line ends (at most once each).
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Bytes held that no returned frame has consumed yet.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    fn too_long(&mut self, len: usize) -> Option<Result<Vec<u8>, BodyError>> {
        self.broken = true;
        let what = match self.framing {
            Framing::Lines => "line",
            Framing::LengthPrefixed => "frame",
        };
        Some(Err(BodyError::FrameTooLong {
            what,
            len,
            max: self.max,
        }))
    }

    /// The end of the next line after `start` (exclusive of the newline), searching only bytes not
    /// searched before; `None` when no newline has arrived yet.
    fn line_end(&mut self) -> Option<usize> {
        let rest = &self.buf[self.start..];
        let unsearched = &rest[self.searched..];
        match unsearched.iter().position(|b| *b == b'\n') {
            Some(i) => {
                self.examined += i as u64 + 1;
                let end = self.searched + i;
                self.searched = 0;
                Some(end)
            }
            None => {
                self.examined += unsearched.len() as u64;
                self.searched = rest.len();
                None
            }
        }
    }

    /// The next complete frame, `None` when more data is needed; an error ends the framing.
    pub fn next_frame(&mut self) -> Option<Result<Vec<u8>, BodyError>> {
        if self.broken {
            return None;
        }
        loop {
            let (begin, len, used) = match self.framing {
                Framing::Lines => match self.line_end() {
                    Some(end) => (0, end, end + 1),
                    None if self.buffered() > self.max => return self.too_long(self.buffered()),
                    None => return None,
                },
                Framing::LengthPrefixed => {
                    let rest = &self.buf[self.start..];
                    let head: [u8; 4] = rest.get(..4)?.try_into().ok()?;
                    let len = u32::from_be_bytes(head) as usize;
                    if len > self.max {
                        return self.too_long(len);
                    }
                    rest.get(4..4 + len)?;
                    (4, len, 4 + len)
                }
            };
            if len > self.max {
                return self.too_long(len);
            }
            let at = self.start + begin;
            let frame = self.buf[at..at + len].to_vec();
            self.start += used;
            if self.framing == Framing::Lines && frame.trim_ascii().is_empty() {
                continue;
            }
            return Some(Ok(frame));
        }
    }

    /// The frames of a body stream; a body error or a broken framing is the last item.
    pub fn frames<S, E>(self, body: S) -> impl Stream<Item = Result<Vec<u8>, RequestError>> + Send
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: Into<kube::Error>,
    {
        let body = body.boxed();
        futures::stream::unfold(Some((self, body)), |state| async move {
            let (mut framer, mut body) = state?;
            loop {
                match framer.next_frame() {
                    Some(Ok(frame)) => return Some((Ok(frame), Some((framer, body)))),
                    Some(Err(source)) => {
                        let e = RequestError::Decode {
                            encoding: framer.framing.encoding(),
                            source,
                        };
                        return Some((Err(e), None));
                    }
                    None => {}
                }
                match body.next().await {
                    Some(Ok(chunk)) => framer.push(&chunk),
                    Some(Err(e)) => return Some((Err(RequestError::Client(e.into())), None)),
                    None => return None,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(framer: &mut Framer) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| framer.next_frame().map(Result::unwrap)).collect()
    }

    #[test]
    fn lines_split_across_chunks() {
        let mut f = Framer::new(Framing::Lines);
        f.push(b"{\"a\":1}\n\n{\"b\"");
        assert_eq!(all(&mut f), vec![b"{\"a\":1}".to_vec()]);
        f.push(b":2}\n");
        assert_eq!(all(&mut f), vec![b"{\"b\":2}".to_vec()]);
    }

    #[test]
    fn length_prefixed_frames_split_anywhere() {
        let mut body = Vec::new();
        for frame in [&b"abc"[..], b"", b"0123456789"] {
            body.extend((frame.len() as u32).to_be_bytes());
            body.extend_from_slice(frame);
        }
        for cut in 0..body.len() {
            let mut f = Framer::new(Framing::LengthPrefixed);
            f.push(&body[..cut]);
            let mut got = all(&mut f);
            f.push(&body[cut..]);
            got.extend(all(&mut f));
            assert_eq!(got, vec![b"abc".to_vec(), vec![], b"0123456789".to_vec()]);
        }
    }

    #[test]
    fn a_long_line_is_searched_once_whatever_its_chunks() {
        // 8 MiB without a newline in 4 KiB chunks, then its end: each byte is examined once (the
        // framing used to search the whole buffered line again for every chunk: quadratic).
        let mut f = Framer::new(Framing::Lines);
        let chunk = vec![b'x'; 4096];
        let chunks = 2048;
        for _ in 0..chunks {
            f.push(&chunk);
            assert!(f.next_frame().is_none());
        }
        f.push(b"\n{}\n");
        let total = (chunks * chunk.len()) as u64 + 4;
        assert_eq!(f.next_frame().unwrap().unwrap().len(), chunks * chunk.len());
        assert_eq!(f.next_frame().unwrap().unwrap(), b"{}");
        assert!(f.next_frame().is_none());
        assert!(f.examined() <= total, "{} > {total}", f.examined());
    }

    #[test]
    fn a_line_past_the_cap_ends_the_framing() {
        let mut f = Framer::with_max(Framing::Lines, 1024);
        f.push(&[b'x'; 1000]);
        assert!(f.next_frame().is_none());
        f.push(&[b'x'; 25]);
        let err = f.next_frame().unwrap().unwrap_err();
        assert!(
            err.to_string().contains("exceeds the limit of 1024 bytes"),
            "{err}"
        );
        f.push(b"\n{}\n");
        assert!(f.next_frame().is_none(), "nothing after the error");
        // A long line arriving whole, its newline included, is refused too.
        let mut f = Framer::with_max(Framing::Lines, 1024);
        let mut line = vec![b'x'; 2000];
        line.push(b'\n');
        f.push(&line);
        assert!(f.next_frame().unwrap().is_err());
    }

    #[test]
    fn the_default_cap_is_client_go_s_16_mib() {
        assert_eq!(MAX_FRAME, 16 << 20);
        let mut f = Framer::new(Framing::Lines);
        let chunk = vec![b' '; 1 << 20];
        for _ in 0..16 {
            f.push(&chunk);
            assert!(f.next_frame().is_none());
        }
        f.push(b"x");
        assert!(f.next_frame().unwrap().is_err());
        assert!(f.buffered() <= MAX_FRAME + 1);
    }

    #[test]
    fn an_absurd_length_ends_the_framing() {
        let mut f = Framer::new(Framing::LengthPrefixed);
        f.push(&u32::MAX.to_be_bytes());
        assert!(f.next_frame().unwrap().is_err());
        f.push(&[0, 0, 0, 0]);
        assert!(f.next_frame().is_none());
    }
}

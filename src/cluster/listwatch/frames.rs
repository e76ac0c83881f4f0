//! Splitting a watch response body into event frames: newline-delimited JSON, or protobuf frames
//! each preceded by its length as four big-endian bytes (apimachinery's length-delimited framer).

use super::request::RequestError;
use bytes::Bytes;
use futures::{Stream, StreamExt};

/// The largest frame accepted. An object is at most 1.5 MiB in etcd by default; a length past this
/// means the stream is out of step, and it is ended (the watcher watches again).
pub const MAX_FRAME: usize = 64 << 20;

/// How frames are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON document per line (empty lines skipped).
    Lines,
    /// A 4-byte big-endian length, then that many bytes.
    LengthPrefixed,
}

/// Accumulates body chunks and cuts complete frames out of them.
#[derive(Debug)]
pub struct Framer {
    framing: Framing,
    buf: Vec<u8>,
    /// Start of the unread data in `buf`.
    start: usize,
    /// Set once the stream is out of step: no frame is returned after it.
    broken: bool,
}

impl Framer {
    /// An empty framer.
    pub fn new(framing: Framing) -> Self {
        Self {
            framing,
            buf: Vec::new(),
            start: 0,
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

    /// The next complete frame, `None` when more data is needed; an error ends the framing.
    pub fn next_frame(&mut self) -> Option<Result<Vec<u8>, String>> {
        if self.broken {
            return None;
        }
        loop {
            let rest = &self.buf[self.start..];
            let (frame, used) = match self.framing {
                Framing::Lines => {
                    let end = rest.iter().position(|b| *b == b'\n')?;
                    (&rest[..end], end + 1)
                }
                Framing::LengthPrefixed => {
                    let head: [u8; 4] = rest.get(..4)?.try_into().ok()?;
                    let len = u32::from_be_bytes(head) as usize;
                    if len > MAX_FRAME {
                        self.broken = true;
                        return Some(Err(format!(
                            "watch frame of {len} bytes exceeds {MAX_FRAME}"
                        )));
                    }
                    (rest.get(4..4 + len)?, 4 + len)
                }
            };
            let frame = frame.to_vec();
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
                    Some(Err(message)) => {
                        let e = RequestError::Decode {
                            encoding: super::media::Encoding::Protobuf,
                            message,
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
    fn an_absurd_length_ends_the_framing() {
        let mut f = Framer::new(Framing::LengthPrefixed);
        f.push(&u32::MAX.to_be_bytes());
        assert!(f.next_frame().unwrap().is_err());
        f.push(&[0, 0, 0, 0]);
        assert!(f.next_frame().is_none());
    }
}

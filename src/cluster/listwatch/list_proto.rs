//! A protobuf list body read as it arrives: the `k8s\0` envelope's `runtime.Unknown` is read field by
//! field, and its `raw` field (the list) is entered instead of being waited for whole, so each item is
//! decoded ([`Decoded::from_protobuf`]) as soon as its bytes are in. Memory: one field at a time (at most
//! [`MAX_OBJECT_BYTES`]) besides the decoded objects. The fields are read with the same functions as a
//! whole body (`envelope::open`, `envelope::list_items`), so both read a body the same way.

use super::body_error::BodyError;
use super::response::Page;
use crate::cluster::body_limit::MAX_OBJECT_BYTES;
use crate::cluster::decode::Decoded;
use crate::cluster::proto::Protobuf;
use crate::cluster::proto::envelope::{self, MAGIC, Unknown};
use crate::cluster::proto::wire::{Fields, WireError, read_varint};
use k8s_pb::apimachinery::pkg::apis::meta::v1::ListMeta;

/// Where the reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the four magic bytes.
    Magic,
    /// Between the fields of the `runtime.Unknown`.
    Envelope,
    /// Inside its `raw` field (the list), with this many bytes of it still to read.
    List { left: usize },
}

/// What one step did.
enum Step {
    /// Consumed this many bytes.
    Read(usize),
    /// Needs more of the body.
    More,
}

/// An incremental decoder of one protobuf list page.
#[derive(Debug)]
pub struct ProtoList<K> {
    buf: Vec<u8>,
    start: usize,
    phase: Phase,
    meta: Option<ListMeta>,
    items: Vec<Decoded<K>>,
    field_max: usize,
}

/// A wire error that more bytes could cure.
fn incomplete(e: &WireError) -> bool {
    matches!(e, WireError::Varint | WireError::Truncated(_))
}

impl<K: Protobuf> ProtoList<K> {
    /// An empty decoder with the default limit.
    pub fn new() -> Self {
        Self::with_limit(MAX_OBJECT_BYTES)
    }

    /// An empty decoder refusing a field (an item, the metadata) over `field_max` bytes.
    pub fn with_limit(field_max: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            phase: Phase::Magic,
            meta: None,
            items: Vec::new(),
            field_max,
        }
    }

    /// Reads the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), BodyError> {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
        self.run(false)
    }

    /// Steps while the buffer allows; `end`: no more bytes will come.
    fn run(&mut self, end: bool) -> Result<(), BodyError> {
        loop {
            let step = match self.phase {
                Phase::Magic => self.magic(end)?,
                Phase::Envelope => self.envelope_field(end)?,
                Phase::List { left } => self.list_field(left, end)?,
            };
            match step {
                Step::Read(n) => self.start += n,
                Step::More => {
                    let held = self.buf.len() - self.start;
                    if held > self.field_max.saturating_add(16) {
                        return Err(BodyError::FieldTooLong(self.field_max));
                    }
                    return Ok(());
                }
            }
        }
    }

    fn magic(&mut self, end: bool) -> Result<Step, BodyError> {
        let rest = &self.buf[self.start..];
        if rest.len() < MAGIC.len() {
            return if end {
                Err(BodyError::Envelope(envelope::EnvelopeError::Magic))
            } else {
                Ok(Step::More)
            };
        }
        if rest[..MAGIC.len()] != MAGIC {
            return Err(BodyError::Envelope(envelope::EnvelopeError::Magic));
        }
        self.phase = Phase::Envelope;
        Ok(Step::Read(MAGIC.len()))
    }

    /// One field of the envelope; its `raw` field is entered.
    fn envelope_field(&mut self, end: bool) -> Result<Step, BodyError> {
        let rest = &self.buf[self.start..];
        if rest.is_empty() {
            return Ok(Step::More);
        }
        let mut p = rest;
        let head = read_varint(&mut p).and_then(|key| {
            let tag = u32::try_from(key >> 3).unwrap_or(0);
            if key & 7 == 2 && envelope::is_raw(tag) {
                read_varint(&mut p).map(Some)
            } else {
                Ok(None)
            }
        });
        match head {
            Ok(Some(len)) => {
                let left = usize::try_from(len).map_err(|_| BodyError::LengthOverflow)?;
                // The last `raw` wins, as in a whole decode.
                self.meta = None;
                self.items.clear();
                self.phase = Phase::List { left };
                return Ok(Step::Read(rest.len() - p.len()));
            }
            Err(e) if incomplete(&e) && !end => return Ok(Step::More),
            _ => {}
        }
        let mut unknown = Unknown {
            api_version: String::new(),
            kind: String::new(),
            raw: &[],
        };
        match Fields::new(rest).next() {
            Some(Ok(field)) => {
                let used = field.raw.len();
                envelope::unknown_field(field, &mut unknown).map_err(BodyError::Envelope)?;
                Ok(Step::Read(used))
            }
            Some(Err(e)) if incomplete(&e) && !end => Ok(Step::More),
            Some(Err(e)) => Err(BodyError::Unknown(e)),
            None => Ok(Step::More),
        }
    }

    /// One field of the list (`left` bytes of it still to come).
    fn list_field(&mut self, left: usize, end: bool) -> Result<Step, BodyError> {
        if left == 0 {
            self.phase = Phase::Envelope;
            return Ok(Step::Read(0));
        }
        let rest = &self.buf[self.start..];
        let avail = &rest[..rest.len().min(left)];
        match Fields::new(avail).next() {
            Some(Ok(field)) => {
                let used = field.raw.len();
                if let Some(item) =
                    envelope::list_field(field, &mut self.meta).map_err(BodyError::Envelope)?
                {
                    self.items.push(Decoded::from_protobuf(item));
                }
                self.phase = Phase::List { left: left - used };
                Ok(Step::Read(used))
            }
            Some(Err(e)) if incomplete(&e) && avail.len() < left && !end => Ok(Step::More),
            Some(Err(e)) => Err(BodyError::List(e)),
            None if end => Err(BodyError::Truncated),
            None => Ok(Step::More),
        }
    }

    /// The page, once the whole body has been pushed.
    pub fn finish(mut self) -> Result<Page<K>, BodyError> {
        self.run(true)?;
        match self.phase {
            Phase::Envelope if self.start == self.buf.len() => {}
            Phase::Magic => return Err(BodyError::Envelope(envelope::EnvelopeError::Magic)),
            _ => return Err(BodyError::Truncated),
        }
        let meta = self.meta.unwrap_or_default();
        Ok(Page {
            resource_version: meta.resource_version.unwrap_or_default(),
            continue_token: meta.r#continue.unwrap_or_default(),
            items: self.items,
            encoding: super::Encoding::Protobuf,
        })
    }
}

impl<K: Protobuf> Default for ProtoList<K> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::listwatch::list_json::tests::names;
    use crate::cluster::proto::wire::put_bytes;
    use k8s_openapi::api::core::v1::Service;
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
    use k8s_pb::apimachinery::pkg::runtime as pbrt;
    use prost::Message;

    fn body(names: &[&str], rv: &str) -> Vec<u8> {
        let list = pb::ServiceList {
            metadata: Some(pbmeta::ListMeta {
                resource_version: Some(rv.into()),
                ..Default::default()
            }),
            items: names
                .iter()
                .map(|n| pb::Service {
                    metadata: Some(pbmeta::ObjectMeta {
                        name: Some((*n).into()),
                        namespace: Some("ns".into()),
                        resource_version: Some(rv.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        };
        let unknown = pbrt::Unknown {
            type_meta: Some(pbrt::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("ServiceList".into()),
            }),
            raw: Some(list.encode_to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(unknown.encode_to_vec());
        out
    }

    fn read(body: &[u8], chunk: usize) -> Result<Page<Service>, BodyError> {
        let mut list = ProtoList::<Service>::new();
        for c in body.chunks(chunk.max(1)) {
            list.push(c)?;
        }
        list.finish()
    }

    #[test]
    fn items_are_read_however_the_body_is_split() {
        let b = body(&["a", "b", "c"], "42");
        let whole =
            super::super::request::decode_page::<Service>(super::super::Encoding::Protobuf, &b)
                .unwrap();
        for chunk in [1, 2, 3, 5, 64, b.len()] {
            let page = read(&b, chunk).unwrap();
            assert_eq!(names(&page), ["a", "b", "c"], "chunk {chunk}");
            assert_eq!(page.resource_version, "42");
            assert_eq!(names(&page), names(&whole));
        }
    }

    #[test]
    fn truncated_or_foreign_bodies_fail() {
        let b = body(&["a", "b"], "1");
        for cut in [0, 2, 5, b.len() / 2, b.len() - 1] {
            assert!(read(&b[..cut], 3).is_err(), "cut at {cut}");
        }
        assert!(read(b"{\"items\":[]}", 3).is_err());
        let mut extra = b.clone();
        put_bytes(&mut extra, 4, b"application/json");
        assert!(read(&extra, 7).is_err(), "JSON in protobuf clothing");
    }

    #[test]
    fn a_field_over_the_limit_fails_before_it_is_held() {
        let b = body(&["a", &"x".repeat(5000)], "1");
        let mut list = ProtoList::<Service>::with_limit(1000);
        let err = b.chunks(100).try_for_each(|c| list.push(c)).unwrap_err();
        assert!(err.to_string().contains("limit of 1000 bytes"), "{err}");
    }
}

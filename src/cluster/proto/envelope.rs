//! The Kubernetes protobuf envelope (`application/vnd.kubernetes.protobuf`): the four magic bytes
//! `k8s\0` and a `runtime.Unknown` around each object or list, lists as `{metadata, items}`, and watch
//! events as `meta.v1.WatchEvent` frames whose object is itself an enveloped encoding. Field numbers
//! come from the `k8s-pb` messages; item and object bodies are borrowed, never copied.

use super::prune::{Rule, tag_of};
use super::wire::{Field, Fields, Value, WireError};
use crate::pb_field;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use k8s_pb::apimachinery::pkg::runtime as pbrt;
use prost::Message;
use std::sync::LazyLock;
use thiserror::Error;

/// The media type of the protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The prefix of every enveloped object: `k8s` and the encoding style 0 (`runtime.Unknown`).
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// An unreadable envelope, list or watch event.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvelopeError {
    /// The body does not start with [`MAGIC`].
    #[error("not a Kubernetes protobuf message (no k8s\\0 prefix)")]
    Magic,
    /// The envelope carries another encoding (e.g. JSON in protobuf clothing) or a compression.
    #[error("object encoded as {0:?}, not protobuf")]
    Encoding(String),
    /// A required part is missing.
    #[error("{0} is missing")]
    Missing(&'static str),
    /// Malformed wire data.
    #[error("{0}: {1}")]
    Wire(&'static str, WireError),
    /// A message the typed decode rejected.
    #[error("{0}: {1}")]
    Decode(&'static str, String),
}

/// An object as the envelope announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown<'a> {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// `kind` of the object (`ServiceList`, `Status`, …).
    pub kind: String,
    /// The object's own encoding.
    pub raw: &'a [u8],
}

struct Tags {
    type_meta: u32,
    raw: u32,
    content_encoding: u32,
    content_type: u32,
    list_meta: u32,
    items: u32,
    event_type: u32,
    event_object: u32,
    extension_raw: u32,
}

static TAGS: LazyLock<Tags> = LazyLock::new(|| Tags {
    type_meta: pb_field!(pbrt::Unknown, type_meta, "typeMeta", Rule::Keep).tag,
    raw: pb_field!(pbrt::Unknown, raw, "raw", Rule::Keep).tag,
    content_encoding: pb_field!(
        pbrt::Unknown,
        content_encoding,
        "contentEncoding",
        Rule::Keep
    )
    .tag,
    content_type: pb_field!(pbrt::Unknown, content_type, "contentType", Rule::Keep).tag,
    // Every generated list message is {metadata, items}; the test below checks the three we read.
    list_meta: tag_of(pb::ServiceList {
        metadata: Some(Default::default()),
        ..Default::default()
    }),
    items: tag_of(pb::ServiceList {
        items: vec![Default::default()],
        ..Default::default()
    }),
    event_type: pb_field!(pbmeta::WatchEvent, r#type, "type", Rule::Keep).tag,
    event_object: pb_field!(pbmeta::WatchEvent, object, "object", Rule::Keep).tag,
    extension_raw: pb_field!(pbrt::RawExtension, raw, "raw", Rule::Keep).tag,
});

fn wire(what: &'static str) -> impl Fn(WireError) -> EnvelopeError {
    move |e| EnvelopeError::Wire(what, e)
}

fn string(what: &'static str, b: &[u8]) -> Result<String, EnvelopeError> {
    String::from_utf8(b.to_vec()).map_err(|e| EnvelopeError::Decode(what, e.to_string()))
}

/// Opens an enveloped encoding: checks the magic and reads the `runtime.Unknown` around the object.
pub fn open(body: &[u8]) -> Result<Unknown<'_>, EnvelopeError> {
    let rest = body.strip_prefix(&MAGIC).ok_or(EnvelopeError::Magic)?;
    let mut out = Unknown {
        api_version: String::new(),
        kind: String::new(),
        raw: &[],
    };
    for field in Fields::new(rest) {
        unknown_field(field.map_err(wire("runtime.Unknown"))?, &mut out)?;
    }
    Ok(out)
}

/// Whether `tag` is `runtime.Unknown.raw` (the object's own encoding).
pub fn is_raw(tag: u32) -> bool {
    tag == TAGS.raw
}

/// Reads one field of a `runtime.Unknown` into `out` (the last `raw` wins, as in a message decode).
pub fn unknown_field<'a>(field: Field<'a>, out: &mut Unknown<'a>) -> Result<(), EnvelopeError> {
    let t = &*TAGS;
    let Value::Bytes(b) = field.value else {
        return Ok(());
    };
    if field.tag == t.type_meta {
        let tm = pbrt::TypeMeta::decode(b)
            .map_err(|e| EnvelopeError::Decode("runtime.Unknown.typeMeta", e.to_string()))?;
        out.api_version = tm.api_version.unwrap_or_default();
        out.kind = tm.kind.unwrap_or_default();
    } else if field.tag == t.raw {
        out.raw = b;
    } else if (field.tag == t.content_encoding || field.tag == t.content_type)
        && !b.is_empty()
        && b != MEDIA_TYPE.as_bytes()
    {
        return Err(EnvelopeError::Encoding(string("contentType", b)?));
    }
    Ok(())
}

/// One field of a list: an item's encoding, or the list's metadata (`meta`, the last one wins).
pub fn list_field<'a>(
    field: Field<'a>,
    meta: &mut Option<pbmeta::ListMeta>,
) -> Result<Option<&'a [u8]>, EnvelopeError> {
    let t = &*TAGS;
    match field.value {
        Value::Bytes(b) if field.tag == t.items => Ok(Some(b)),
        Value::Bytes(b) if field.tag == t.list_meta => {
            *meta = Some(
                pbmeta::ListMeta::decode(b)
                    .map_err(|e| EnvelopeError::Decode("list metadata", e.to_string()))?,
            );
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// A list's metadata and its items' encodings (each item is decoded on its own).
pub fn list_items(list: &[u8]) -> Result<(pbmeta::ListMeta, Vec<&[u8]>), EnvelopeError> {
    let mut meta = None;
    let mut items = Vec::new();
    for field in Fields::new(list) {
        if let Some(item) = list_field(field.map_err(wire("list"))?, &mut meta)? {
            items.push(item);
        }
    }
    Ok((meta.unwrap_or_default(), items))
}

/// A watch event frame: its type and its object's enveloped encoding.
pub fn watch_event(frame: &[u8]) -> Result<(String, &[u8]), EnvelopeError> {
    let t = &*TAGS;
    let mut kind = None;
    let mut object = None;
    for field in Fields::new(frame) {
        let field = field.map_err(wire("watch event"))?;
        match field.value {
            Value::Bytes(b) if field.tag == t.event_type => kind = Some(string("type", b)?),
            Value::Bytes(b) if field.tag == t.event_object => {
                for f in Fields::new(b) {
                    match f.map_err(wire("watch event object"))? {
                        f if f.tag == t.extension_raw => {
                            if let Value::Bytes(raw) = f.value {
                                object = Some(raw);
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok((
        kind.ok_or(EnvelopeError::Missing("watch event type"))?,
        object.ok_or(EnvelopeError::Missing("watch event object"))?,
    ))
}

/// A `Status` object (an error response, or a watch ERROR event).
pub fn status(raw: &[u8]) -> Result<pbmeta::Status, EnvelopeError> {
    pbmeta::Status::decode(raw).map_err(|e| EnvelopeError::Decode("Status", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::discovery::v1 as pbdisc;

    fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = pbrt::Unknown {
            type_meta: Some(pbrt::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(unknown.encode_to_vec());
        out
    }

    #[test]
    fn every_list_is_metadata_and_items() {
        let probe = |m: Vec<u8>| {
            super::super::wire::Fields::new(&m)
                .next()
                .unwrap()
                .unwrap()
                .tag
        };
        let t = &*TAGS;
        for (meta, items) in [
            (
                pbdisc::EndpointSliceList {
                    metadata: Some(Default::default()),
                    items: vec![],
                }
                .encode_to_vec(),
                pbdisc::EndpointSliceList {
                    metadata: None,
                    items: vec![Default::default()],
                }
                .encode_to_vec(),
            ),
            (
                pb::NodeList {
                    metadata: Some(Default::default()),
                    items: vec![],
                }
                .encode_to_vec(),
                pb::NodeList {
                    metadata: None,
                    items: vec![Default::default()],
                }
                .encode_to_vec(),
            ),
        ] {
            assert_eq!((probe(meta), probe(items)), (t.list_meta, t.items));
        }
    }

    #[test]
    fn a_list_opens_into_its_items() {
        let list = pb::ServiceList {
            metadata: Some(pbmeta::ListMeta {
                resource_version: Some("42".into()),
                r#continue: Some("next".into()),
                ..Default::default()
            }),
            items: vec![Default::default(), Default::default()],
        };
        let body = envelope("ServiceList", list.encode_to_vec());
        let unknown = open(&body).unwrap();
        assert_eq!(
            (unknown.api_version.as_str(), unknown.kind.as_str()),
            ("v1", "ServiceList")
        );
        let (meta, items) = list_items(unknown.raw).unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(meta.r#continue.as_deref(), Some("next"));
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn a_watch_event_carries_an_enveloped_object() {
        let object = envelope("Service", vec![]);
        let event = pbmeta::WatchEvent {
            r#type: Some("ADDED".into()),
            object: Some(pbrt::RawExtension {
                raw: Some(object.clone()),
            }),
        };
        let frame = event.encode_to_vec();
        let (kind, raw) = watch_event(&frame).unwrap();
        assert_eq!((kind.as_str(), raw), ("ADDED", object.as_slice()));
        assert_eq!(open(raw).unwrap().kind, "Service");
    }

    #[test]
    fn bad_envelopes_are_errors() {
        assert_eq!(open(b"{\"kind\":1}"), Err(EnvelopeError::Magic));
        let mut json = MAGIC.to_vec();
        json.extend(
            pbrt::Unknown {
                content_type: Some("application/json".into()),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        assert!(matches!(open(&json), Err(EnvelopeError::Encoding(_))));
        let mut cut = envelope("Service", vec![1, 2, 3]);
        cut.pop();
        assert!(matches!(open(&cut), Err(EnvelopeError::Wire(..))));
        assert!(matches!(
            watch_event(&[]),
            Err(EnvelopeError::Missing("watch event type"))
        ));
    }
}

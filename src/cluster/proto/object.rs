//! One protobuf-encoded object, decoded leniently: pruned to what kube-proxy reads, decoded with the
//! `k8s-pb` message, converted to the `k8s-openapi` type. An object that cannot be read becomes
//! [`Decoded::Unreadable`] with whatever identity its metadata still gives, exactly like a JSON one.

use super::kinds::{Protobuf, identity_rules};
use super::prune::prune;
use super::wire::{Fields, Value};
use crate::cluster::decode::{Decoded, Unreadable};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prost::Message;

impl<K: Protobuf> Decoded<K> {
    /// Decodes one object from its protobuf encoding (the `raw` of its envelope).
    pub fn from_protobuf(object: &[u8]) -> Self {
        let mut kept = Vec::with_capacity(object.len() / 2);
        let read = prune(K::rules(), object, &mut kept)
            .map_err(|e| e.to_string())
            .and_then(|()| K::Message::decode(kept.as_slice()).map_err(|e| e.to_string()))
            .and_then(K::convert);
        match read {
            Ok(k) => Decoded::Object(k),
            Err(error) => Decoded::Unreadable(Box::new(Unreadable {
                meta: identity::<K>(object),
                error,
            })),
        }
    }
}

/// Namespace, name and resourceVersion of an encoded object, as far as its metadata can be read.
fn identity<K: Protobuf>(object: &[u8]) -> ObjectMeta {
    let mut meta = ObjectMeta::default();
    let Some(meta_tag) = K::rules()
        .iter()
        .find(|r| r.name == "metadata")
        .map(|r| r.tag)
    else {
        return meta;
    };
    let [name, namespace, version] = identity_rules() else {
        return meta;
    };
    for m in bytes_fields(object).filter(|(tag, _)| *tag == meta_tag) {
        for (tag, b) in bytes_fields(m.1) {
            let text = Some(String::from_utf8_lossy(b).into_owned());
            if tag == name.tag {
                meta.name = text;
            } else if tag == namespace.tag {
                meta.namespace = text;
            } else if tag == version.tag {
                meta.resource_version = text;
            }
        }
    }
    meta
}

/// The length-delimited fields of a message up to the first malformed one.
fn bytes_fields(message: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    Fields::new(message)
        .map_while(Result::ok)
        .filter_map(|f| match f.value {
            Value::Bytes(b) => Some((f.tag, b)),
            _ => None,
        })
}

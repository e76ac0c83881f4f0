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
        // Text, as JSON's: `Unreadable` is `Clone + PartialEq` and only reported (warning, Event).
        let read = prune(K::rules(), object, &mut kept)
            .map_err(|e| e.to_string())
            .and_then(|()| K::Message::decode(kept.as_slice()).map_err(|e| e.to_string()))
            .and_then(|m| K::convert(m).map_err(|e| e.to_string()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::proto::wire::{put_bytes, put_varint};
    use k8s_openapi::api::core::v1::Service;
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;

    fn encoded() -> Vec<u8> {
        pb::Service {
            metadata: Some(pbmeta::ObjectMeta {
                name: Some("a".into()),
                namespace: Some("ns".into()),
                resource_version: Some("7".into()),
                managed_fields: vec![Default::default()],
                ..Default::default()
            }),
            spec: Some(pb::ServiceSpec {
                cluster_ip: Some("10.0.0.1".into()),
                ports: vec![pb::ServicePort {
                    port: Some(80),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
        .encode_to_vec()
    }

    #[test]
    fn a_service_reads_its_kept_fields() {
        let Decoded::Object(svc) = Decoded::<Service>::from_protobuf(&encoded()) else {
            panic!("not read");
        };
        assert_eq!(svc.metadata.resource_version.as_deref(), Some("7"));
        assert!(svc.metadata.managed_fields.is_none());
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(spec.ports.unwrap()[0].port, 80);
    }

    #[test]
    fn an_unreadable_service_keeps_its_identity_and_names_the_field() {
        // spec.ports[+].port sent as bytes.
        let mut port = Vec::new();
        put_bytes(&mut port, 3, b"x");
        let mut ports = Vec::new();
        put_bytes(&mut ports, 1, &port);
        let mut bad = encoded();
        put_bytes(&mut bad, 2, &ports);
        let Decoded::Unreadable(u) = Decoded::<Service>::from_protobuf(&bad) else {
            panic!("read");
        };
        assert_eq!(u.meta.name.as_deref(), Some("a"));
        assert_eq!(u.meta.resource_version.as_deref(), Some("7"));
        assert!(u.error.contains("ServicePort.port"), "{}", u.error);
        // A field running past the end.
        let mut cut = encoded();
        put_varint(&mut cut, (3 << 3) | 2);
        put_varint(&mut cut, 100);
        let Decoded::Unreadable(u) = Decoded::<Service>::from_protobuf(&cut) else {
            panic!("read");
        };
        assert_eq!(u.meta.namespace.as_deref(), Some("ns"));
        assert_eq!(u.error, "field 3 is truncated");
        // Not even the metadata: no identity, still no panic.
        let Decoded::Unreadable(u) = Decoded::<Service>::from_protobuf(&[0xff]) else {
            panic!("read");
        };
        assert_eq!(u.meta, ObjectMeta::default());
    }
}

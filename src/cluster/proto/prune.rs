//! What kube-proxy keeps of a protobuf-encoded object, and the pruning pass that keeps it.
//!
//! This is the protobuf twin of [`Keep`](crate::cluster::decode::Keep): a [`Rule`] tree names the fields
//! kube-proxy reads; [`prune`] copies only those out of the encoding (everything else is skipped
//! unread, never allocated), so the typed decode that follows materialises nothing else. Field
//! numbers are never written by hand: each is read from the encoding of a `k8s-pb` message that sets
//! that one field (see [`tag_of`]), so the compiler checks every field name against the generated
//! types. Strings are read as Go reads them through the API server's JSON encoder: invalid UTF-8
//! becomes U+FFFD instead of failing the object.

use super::wire::{Fields, Value, WireError, put_bytes, put_nested};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// What to keep of one field.
#[derive(Debug)]
pub enum Rule {
    /// Copied as encoded (numbers, booleans): the typed decode checks the wire type.
    Keep,
    /// A string; invalid UTF-8 is replaced by U+FFFD.
    Text,
    /// A message (or each item of a repeated message): only the listed fields, each by its rule.
    Message(Vec<FieldRule>),
    /// An entry of a `map<string, string>`: kept when its key is listed (any key when `None`).
    Entry(Option<&'static [&'static str]>),
}

/// One kept field of a message.
#[derive(Debug)]
pub struct FieldRule {
    /// Field number, from the generated type.
    pub tag: u32,
    /// The field's JSON name, for error messages.
    pub name: &'static str,
    /// What to keep of it.
    pub rule: Rule,
}

/// Why an object could not be pruned: the path of the field and the wire error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{error}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct PruneError {
    /// Dotted JSON names from the object down to the malformed field.
    pub path: String,
    /// What was wrong.
    pub error: WireError,
}

impl PruneError {
    fn within(mut self, name: &str) -> Self {
        self.path = if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{name}.{}", self.path)
        };
        self
    }
}

/// A value that makes prost encode a field: `Some(default)`, one default item, one map entry.
pub trait Present {
    /// The value.
    fn present() -> Self;
}

impl<T: Default> Present for Option<T> {
    fn present() -> Self {
        Some(T::default())
    }
}

impl<T: Default> Present for Vec<T> {
    fn present() -> Self {
        vec![T::default()]
    }
}

impl Present for BTreeMap<String, String> {
    fn present() -> Self {
        BTreeMap::from([(String::new(), String::new())])
    }
}

/// The field number of the only field `probe` sets (0 when it sets none), read from its encoding.
pub fn tag_of(probe: impl prost::Message) -> u32 {
    let bytes = probe.encode_to_vec();
    match Fields::new(&bytes).next() {
        Some(Ok(field)) => field.tag,
        _ => 0,
    }
}

/// `field!(Type, rust_field, "jsonName", rule)`: a [`FieldRule`] whose number comes from `k8s-pb`.
#[macro_export]
#[doc(hidden)]
macro_rules! pb_field {
    ($($msg:ident)::+, $field:ident, $json:literal, $rule:expr) => {
        $crate::cluster::proto::prune::FieldRule {
            tag: {
                // One-field messages have nothing left for the struct update to fill.
                #[allow(clippy::needless_update)]
                let probe = $($msg)::+ {
                    $field: $crate::cluster::proto::prune::Present::present(),
                    ..Default::default()
                };
                $crate::cluster::proto::prune::tag_of(probe)
            },
            name: $json,
            rule: $rule,
        }
    };
}

/// Appends to `out` the fields of `message` that `rules` keep, each pruned by its own rule; other
/// fields are skipped unread.
pub fn prune(rules: &[FieldRule], message: &[u8], out: &mut Vec<u8>) -> Result<(), PruneError> {
    for field in Fields::new(message) {
        let field = field.map_err(|error| PruneError {
            path: String::new(),
            error,
        })?;
        let Some(kept) = rules.iter().find(|r| r.tag == field.tag) else {
            continue;
        };
        match (&kept.rule, field.value) {
            (Rule::Text, Value::Bytes(b)) => text(out, field.tag, b, field.raw),
            (Rule::Message(inner), Value::Bytes(b)) => {
                put_nested(out, field.tag, |o| prune(inner, b, o))
                    .map_err(|e| e.within(kept.name))?;
            }
            (Rule::Entry(keys), Value::Bytes(b)) => entry(out, field.tag, *keys, b, field.raw),
            // Numbers, and anything of an unexpected wire type: the typed decode judges them.
            _ => out.extend_from_slice(field.raw),
        }
    }
    Ok(())
}

/// A string field, rewritten only when it is not valid UTF-8.
fn text(out: &mut Vec<u8>, tag: u32, value: &[u8], raw: &[u8]) {
    match String::from_utf8_lossy(value) {
        Cow::Borrowed(_) => out.extend_from_slice(raw),
        Cow::Owned(fixed) => put_bytes(out, tag, fixed.as_bytes()),
    }
}

/// A map entry (key = field 1, value = field 2, as protobuf defines map entries), kept when its key
/// is listed; a malformed entry is copied for the typed decode to reject.
fn entry(out: &mut Vec<u8>, tag: u32, keys: Option<&[&str]>, entry: &[u8], raw: &[u8]) {
    let mut key = None;
    let mut value = None;
    for field in Fields::new(entry) {
        match field {
            Ok(f) => match (f.tag, f.value) {
                (1, Value::Bytes(k)) => key = Some(k),
                (2, Value::Bytes(v)) => value = Some(v),
                _ => {}
            },
            Err(_) => return out.extend_from_slice(raw),
        }
    }
    let key = String::from_utf8_lossy(key.unwrap_or_default());
    if keys.is_some_and(|ks| !ks.contains(&key.as_ref())) {
        return;
    }
    let value = String::from_utf8_lossy(value.unwrap_or_default());
    if matches!((&key, &value), (Cow::Borrowed(_), Cow::Borrowed(_))) {
        return out.extend_from_slice(raw);
    }
    let mut fixed = Vec::with_capacity(key.len() + value.len() + 4);
    put_bytes(&mut fixed, 1, key.as_bytes());
    put_bytes(&mut fixed, 2, value.as_bytes());
    put_bytes(out, tag, &fixed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
    use prost::Message;

    fn rules() -> Vec<FieldRule> {
        vec![
            pb_field!(
                pb::Service,
                metadata,
                "metadata",
                Rule::Message(vec![
                    pb_field!(pbmeta::ObjectMeta, name, "name", Rule::Text),
                    pb_field!(
                        pbmeta::ObjectMeta,
                        annotations,
                        "annotations",
                        Rule::Entry(Some(&["keep"]))
                    ),
                ])
            ),
            pb_field!(
                pb::Service,
                spec,
                "spec",
                Rule::Message(vec![
                    pb_field!(pb::ServiceSpec, cluster_ip, "clusterIP", Rule::Text),
                    pb_field!(
                        pb::ServiceSpec,
                        ports,
                        "ports",
                        Rule::Message(vec![pb_field!(pb::ServicePort, port, "port", Rule::Keep)])
                    ),
                ])
            ),
        ]
    }

    fn service() -> pb::Service {
        pb::Service {
            metadata: Some(pbmeta::ObjectMeta {
                name: Some("a".into()),
                uid: Some("u-1".into()),
                annotations: [("keep", "1"), ("drop", "2")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            spec: Some(pb::ServiceSpec {
                cluster_ip: Some("10.0.0.1".into()),
                r#type: Some("ClusterIP".into()),
                ports: vec![
                    pb::ServicePort {
                        port: Some(80),
                        name: Some("http".into()),
                        ..Default::default()
                    },
                    pb::ServicePort {
                        port: Some(443),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            status: Some(Default::default()),
        }
    }

    #[test]
    fn tags_come_from_the_generated_types() {
        assert_eq!(tag_of(pb::Service::default()), 0);
        let r = rules();
        assert_eq!((r[0].tag, r[1].tag), (1, 2));
        let Rule::Message(spec) = &r[1].rule else {
            panic!("spec");
        };
        // ServiceSpec.clusterIP is field 3 and ports field 1 in k8s.io/api's generated.proto.
        assert_eq!((spec[0].tag, spec[1].tag), (3, 1));
    }

    #[test]
    fn only_kept_fields_survive_and_decode() {
        let full = service().encode_to_vec();
        let mut kept = Vec::new();
        prune(&rules(), &full, &mut kept).unwrap();
        let svc = pb::Service::decode(kept.as_slice()).unwrap();
        let meta = svc.metadata.unwrap();
        assert_eq!(meta.name.as_deref(), Some("a"));
        assert_eq!(meta.uid, None);
        assert_eq!(meta.annotations.len(), 1);
        assert_eq!(meta.annotations["keep"], "1");
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(spec.r#type, None);
        let ports: Vec<_> = spec
            .ports
            .iter()
            .map(|p| (p.port, p.name.clone()))
            .collect();
        assert_eq!(ports, vec![(Some(80), None), (Some(443), None)]);
        assert!(svc.status.is_none());
    }

    #[test]
    fn invalid_utf8_reads_as_replacement_characters() {
        let mut svc = service();
        svc.metadata.as_mut().unwrap().name = Some("NAME".into());
        let mut full = svc.encode_to_vec();
        let at = full.windows(4).position(|w| w == b"NAME").unwrap();
        full[at + 1] = 0xff;
        let mut kept = Vec::new();
        prune(&rules(), &full, &mut kept).unwrap();
        let svc = pb::Service::decode(kept.as_slice()).unwrap();
        assert_eq!(svc.metadata.unwrap().name.as_deref(), Some("N\u{fffd}ME"));
    }

    #[test]
    fn a_malformed_nested_field_names_its_path() {
        // spec.ports[0] holds the key of a varint field (port, 3) without its value.
        let mut broken = Vec::new();
        put_nested(&mut broken, 2, |spec| {
            put_bytes(spec, 1, &[3 << 3]);
            Ok::<(), ()>(())
        })
        .unwrap();
        let err = prune(&rules(), &broken, &mut Vec::new()).unwrap_err();
        assert_eq!(err.path, "spec.ports");
        assert_eq!(err.error, WireError::Varint);
        assert_eq!(err.to_string(), "spec.ports: truncated or overlong varint");
        // A cut at the top level has no path.
        let full = service().encode_to_vec();
        let err = prune(&rules(), &full[..full.len() - 1], &mut Vec::new()).unwrap_err();
        assert_eq!(err.path, "");
    }
}

//! Lenient decoding of watched objects: one object at a time, reading only what kube-proxy uses.
//!
//! The typed API structs are stricter than the API server: `Condition.lastTransitionTime` is a
//! required `Time`, so a Service whose status carries `lastTransitionTime: null` (which the API
//! server accepts) fails to decode, and with it the whole watch event or list page. A [`Decoded`]
//! object first drops everything kube-proxy does not read (status conditions, managed fields,
//! annotations it ignores, …) and every `null` (read as absent, as Go reads it), then decodes the
//! rest. An object that still cannot be read becomes [`Decoded::Unreadable`] with its name and the
//! reason, so the stream goes on and the watcher reports it like any malformed object.

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::borrow::Cow;

use super::convert::ANNOTATION_TRIGGER_TIME;
use super::service_options::SERVICE_ANNOTATIONS;
use crate::truncate::truncate;

/// The most bytes of a decode error kept (serde quotes the value it could not read).
pub const MAX_ERROR_BYTES: usize = 512;

/// Which part of a JSON value to keep before the typed decode.
#[derive(Debug)]
pub enum Keep {
    /// The value as is (the typed decode checks it).
    Value,
    /// A string; anything else becomes `""` (as Go reads `null`; the conversion validates it).
    Text,
    /// An object: only the listed fields, each by its own rule. Anything else is kept as is.
    Fields(&'static [(&'static str, Keep)]),
    /// A list: each item by the rule. Anything else is kept as is.
    Items(&'static Keep),
    /// A string map: only entries whose value is a string (and, when given, whose key is listed).
    Strings(Option<&'static [&'static str]>),
}

impl Keep {
    /// Reduces `value` to what this rule keeps.
    pub fn prune(&self, value: Value) -> Value {
        match (self, value) {
            (Keep::Value, v) => v,
            (Keep::Text, Value::String(s)) => Value::String(s),
            (Keep::Text, _) => Value::String(String::new()),
            (Keep::Fields(fields), Value::Object(mut map)) => {
                let mut out = Map::new();
                for (name, rule) in fields.iter() {
                    match map.remove(*name) {
                        None | Some(Value::Null) => {}
                        Some(v) => {
                            out.insert((*name).to_string(), rule.prune(v));
                        }
                    }
                }
                Value::Object(out)
            }
            (Keep::Items(rule), Value::Array(items)) => {
                Value::Array(items.into_iter().map(|v| rule.prune(v)).collect())
            }
            (Keep::Strings(keys), Value::Object(map)) => Value::Object(
                map.into_iter()
                    .filter(|(k, v)| {
                        v.is_string() && keys.is_none_or(|ks| ks.contains(&k.as_str()))
                    })
                    .collect(),
            ),
            (_, v) => v,
        }
    }
}

/// A type decoded leniently: the fields kube-proxy reads from it.
pub trait Lenient: DeserializeOwned {
    /// What to keep of the JSON object.
    const KEEP: Keep;
}

const ANY: Keep = Keep::Value;
const TEXT: Keep = Keep::Text;

/// Metadata fields every kind keeps.
macro_rules! meta_fields {
    ($($extra:tt)*) => {
        Keep::Fields(&[
            ("name", ANY),
            ("namespace", ANY),
            ("resourceVersion", ANY),
            ("labels", Keep::Strings(None)),
            $($extra)*
        ])
    };
}

const SERVICE_PORT: Keep = Keep::Fields(&[
    ("name", ANY),
    ("protocol", ANY),
    ("port", ANY),
    ("nodePort", ANY),
]);
const LB_INGRESS: Keep = Keep::Fields(&[("ip", ANY), ("ipMode", ANY)]);
const NAME_ONLY: Keep = Keep::Fields(&[("name", ANY)]);
const SLICE_PORT: Keep = Keep::Fields(&[("name", ANY), ("port", ANY), ("protocol", ANY)]);
const SLICE_ENDPOINT: Keep = Keep::Fields(&[
    ("addresses", Keep::Items(&TEXT)),
    (
        "conditions",
        Keep::Fields(&[("ready", ANY), ("serving", ANY), ("terminating", ANY)]),
    ),
    ("nodeName", ANY),
    ("zone", ANY),
    (
        "hints",
        Keep::Fields(&[
            ("forZones", Keep::Items(&NAME_ONLY)),
            ("forNodes", Keep::Items(&NAME_ONLY)),
        ]),
    ),
]);
const TAINT: Keep = Keep::Fields(&[("key", TEXT), ("effect", TEXT)]);
const NODE_ADDRESS: Keep = Keep::Fields(&[("address", TEXT), ("type", TEXT)]);

impl Lenient for Service {
    const KEEP: Keep = Keep::Fields(&[
        (
            "metadata",
            meta_fields!(("annotations", Keep::Strings(Some(SERVICE_ANNOTATIONS)))),
        ),
        (
            "spec",
            Keep::Fields(&[
                ("type", ANY),
                ("clusterIP", ANY),
                ("clusterIPs", Keep::Items(&TEXT)),
                ("externalIPs", Keep::Items(&TEXT)),
                ("loadBalancerSourceRanges", Keep::Items(&TEXT)),
                ("sessionAffinity", ANY),
                (
                    "sessionAffinityConfig",
                    Keep::Fields(&[("clientIP", Keep::Fields(&[("timeoutSeconds", ANY)]))]),
                ),
                ("externalTrafficPolicy", ANY),
                ("internalTrafficPolicy", ANY),
                ("healthCheckNodePort", ANY),
                ("ports", Keep::Items(&SERVICE_PORT)),
            ]),
        ),
        (
            "status",
            Keep::Fields(&[(
                "loadBalancer",
                Keep::Fields(&[("ingress", Keep::Items(&LB_INGRESS))]),
            )]),
        ),
    ]);
}

impl Lenient for EndpointSlice {
    const KEEP: Keep = Keep::Fields(&[
        (
            "metadata",
            meta_fields!((
                "annotations",
                Keep::Strings(Some(&[ANNOTATION_TRIGGER_TIME]))
            )),
        ),
        ("addressType", ANY),
        ("ports", Keep::Items(&SLICE_PORT)),
        ("endpoints", Keep::Items(&SLICE_ENDPOINT)),
    ]);
}

impl Lenient for Node {
    const KEEP: Keep = Keep::Fields(&[
        ("metadata", meta_fields!(("deletionTimestamp", ANY))),
        (
            "spec",
            Keep::Fields(&[
                ("podCIDR", ANY),
                ("podCIDRs", Keep::Items(&TEXT)),
                ("taints", Keep::Items(&TAINT)),
            ]),
        ),
        (
            "status",
            Keep::Fields(&[("addresses", Keep::Items(&NODE_ADDRESS))]),
        ),
    ]);
}

/// An object that could not be read: what is known of its identity, and why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Unreadable {
    /// Namespace, name and resourceVersion, when they are strings.
    pub meta: ObjectMeta,
    /// The decode error, naming the field.
    pub error: String,
}

/// A listed or watched object: decoded, or unreadable (skipped and reported by the watcher).
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded<K> {
    Object(K),
    Unreadable(Box<Unreadable>),
}

impl<K: Default> Default for Decoded<K> {
    fn default() -> Self {
        Decoded::Object(K::default())
    }
}

impl<K> Decoded<K> {
    /// The object, when it could be read.
    pub fn object(&self) -> Option<&K> {
        match self {
            Decoded::Object(k) => Some(k),
            Decoded::Unreadable(_) => None,
        }
    }
}

impl<K: Lenient> Decoded<K> {
    /// Decodes one object from JSON, reading only what [`Lenient::KEEP`] keeps.
    pub fn from_value(value: Value) -> Self {
        let meta = identity(&value);
        let kept = K::KEEP.prune(value);
        match serde_path_to_error::deserialize::<_, K>(kept) {
            Ok(k) => Decoded::Object(k),
            // serde quotes the offending value: cut (it is logged and put into an Event).
            Err(e) => Decoded::Unreadable(Box::new(Unreadable {
                meta,
                error: truncate(&e.to_string(), MAX_ERROR_BYTES).into_owned(),
            })),
        }
    }
}

/// Namespace, name and resourceVersion of a raw object, each only when it is a string.
fn identity(value: &Value) -> ObjectMeta {
    let field = |name: &str| {
        value
            .pointer(&format!("/metadata/{name}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    ObjectMeta {
        name: field("name"),
        namespace: field("namespace"),
        resource_version: field("resourceVersion"),
        ..ObjectMeta::default()
    }
}

impl<'de, K: Lenient> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Decoded::from_value)
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Decoded<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Object(k) => k.meta(),
            Decoded::Unreadable(u) => &u.meta,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Object(k) => k.meta_mut(),
            Decoded::Unreadable(u) => &mut u.meta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn null_condition_time_and_unused_fields_do_not_fail() {
        let v = json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                         "managedFields": [{"time": 5}], "annotations": {"x": 1}},
            "spec": {"clusterIP": "10.0.0.1", "ipFamilyPolicy": 42, "selector": "odd",
                     "ports": [{"port": 80, "targetPort": {"bad": true}, "appProtocol": null}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "x",
                                       "message": "", "lastTransitionTime": null}]}
        });
        let Decoded::Object(svc) = Decoded::<Service>::from_value(v) else {
            panic!("not read");
        };
        assert_eq!(svc.metadata.name.as_deref(), Some("a"));
        assert_eq!(svc.metadata.resource_version.as_deref(), Some("7"));
        let spec = svc.spec.unwrap_or_default();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(spec.ports.unwrap_or_default()[0].port, 80);
        assert!(svc.status.unwrap_or_default().conditions.is_none());
        // The root cause: the typed struct alone rejects `lastTransitionTime: null`.
        let strict = serde_json::from_value::<Service>(json!({
            "metadata": {"name": "a"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "x",
                                       "message": "", "lastTransitionTime": null}]}
        }));
        assert!(strict.is_err());
    }

    #[test]
    fn used_field_of_wrong_type_is_unreadable_with_identity() {
        let v = json!({
            "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "9", "uid": 3},
            "spec": {"clusterIP": "10.0.0.2", "ports": [{"port": "eighty"}]}
        });
        let Decoded::Unreadable(u) = Decoded::<Service>::from_value(v) else {
            panic!("read");
        };
        assert_eq!(u.meta.name.as_deref(), Some("b"));
        assert_eq!(u.meta.resource_version.as_deref(), Some("9"));
        assert!(u.error.contains("spec.ports[0].port"), "{}", u.error);
    }

    #[test]
    fn the_error_of_an_unreadable_object_is_cut() {
        let huge = "8".repeat(300_000);
        let v = json!({
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {"clusterIP": "10.0.0.2", "ports": [{"port": huge}]}
        });
        let Decoded::Unreadable(u) = Decoded::<Service>::from_value(v) else {
            panic!("read");
        };
        assert!(u.error.len() <= MAX_ERROR_BYTES, "{} bytes", u.error.len());
        assert!(u.error.contains("spec.ports[0].port"), "{}", u.error);
    }

    #[test]
    fn null_entries_read_as_go_reads_them() {
        let v = json!({
            "metadata": {"name": "n", "labels": {"a": "b", "c": null},
                         "annotations": {"keep": "no"}},
            "spec": {"podCIDRs": [null, "10.1.0.0/24"], "taints": [{"key": null, "effect": 1}]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                       "conditions": [{"lastTransitionTime": null}], "images": 5}
        });
        let Decoded::Object(node) = Decoded::<Node>::from_value(v) else {
            panic!("not read");
        };
        assert_eq!(node.metadata.labels.unwrap_or_default().len(), 1);
        assert!(node.metadata.annotations.is_none());
        let spec = node.spec.unwrap_or_default();
        assert_eq!(
            spec.pod_cidrs.unwrap_or_default(),
            vec![String::new(), "10.1.0.0/24".to_string()]
        );
        assert_eq!(spec.taints.unwrap_or_default()[0].key, "");
    }

    #[test]
    fn slice_keeps_only_trigger_time_annotation() {
        let v = json!({
            "metadata": {"name": "s", "namespace": "ns",
                         "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2024-01-01T00:00:00Z", "other": "x"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": null},
                           "deprecatedTopology": 7, "targetRef": "odd"}],
            "ports": null
        });
        let Decoded::Object(slice) = Decoded::<EndpointSlice>::from_value(v) else {
            panic!("not read");
        };
        let ann = slice.metadata.annotations.unwrap_or_default();
        assert_eq!(ann.len(), 1);
        assert!(ann.contains_key(ANNOTATION_TRIGGER_TIME));
        assert_eq!(slice.endpoints.len(), 1);
        assert!(slice.ports.is_none());
    }
}

//! The object store of the test API server: current objects per kind, a global resourceVersion, and a
//! bounded per-kind history of changes (for watch replay and for lists at an older resourceVersion).

use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The kinds the test API server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// core/v1 Service.
    Service,
    /// discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice,
    /// core/v1 Node.
    Node,
}

impl Kind {
    /// Every served kind.
    pub const ALL: [Kind; 3] = [Kind::Service, Kind::EndpointSlice, Kind::Node];

    /// `apiVersion` of objects of this kind.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Service | Kind::Node => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
        }
    }

    /// `kind` of objects of this kind.
    pub fn kind(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Node => "Node",
        }
    }

    /// The resource name in URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
            Kind::Node => "nodes",
        }
    }

    /// True for namespaced kinds.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Node)
    }

    /// The kind named by an object's `kind` field.
    pub fn from_kind(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.kind() == kind)
    }

    /// The kind served at `apiVersion` + plural resource name.
    pub fn from_resource(api_version: &str, plural: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.api_version() == api_version && k.plural() == plural)
    }
}

/// (namespace, name); namespace is "" for cluster-scoped objects.
pub type Key = (String, String);

/// One change of one object: `prev` before, `obj` after (None = deleted).
#[derive(Clone, Debug)]
pub struct Change {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Object key.
    pub key: Key,
    /// Object before the change.
    pub prev: Option<Value>,
    /// Object after the change.
    pub obj: Option<Value>,
}

/// A resourceVersion older than the retained history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    /// Oldest resourceVersion still served.
    pub floor: u64,
}

#[derive(Default)]
struct KindStore {
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Change>,
    /// Smallest resourceVersion a watch or list may start from.
    floor: u64,
}

/// All objects, history and recorded Events.
pub struct Store {
    /// The current (latest) global resourceVersion.
    pub rv: u64,
    kinds: HashMap<Kind, KindStore>,
    history_limit: usize,
    uids: u64,
    /// Bumped by `drop_all_watches`: open watches started under an older generation end.
    pub drop_generation: u64,
    /// Recorded Events (events.k8s.io/v1 and core/v1), keyed by (apiVersion, namespace, name).
    pub events: BTreeMap<(String, String, String), Value>,
}

/// An object without the metadata the server sets (for no-op update detection).
fn without_server_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            m.remove(f);
        }
    }
    o
}

/// Current time in the Kubernetes `Time` format.
pub fn now_timestamp() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Store {
    /// An empty store whose history keeps at most `history_limit` changes per kind.
    pub fn new(history_limit: usize) -> Self {
        Store {
            rv: 100,
            kinds: Kind::ALL
                .into_iter()
                .map(|k| (k, KindStore::default()))
                .collect(),
            history_limit: history_limit.max(1),
            uids: 0,
            drop_generation: 0,
            events: BTreeMap::new(),
        }
    }

    fn kind_mut(&mut self, kind: Kind) -> &mut KindStore {
        self.kinds.entry(kind).or_default()
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.uids)
    }

    /// Fills server-set metadata (resourceVersion, uid, creationTimestamp) into `obj`.
    pub fn stamp(&mut self, obj: &mut Value, prev: Option<&Value>) -> Result<(), String> {
        let rv = self.rv;
        let uid = prev
            .and_then(|p| p.pointer("/metadata/uid").cloned())
            .unwrap_or_else(|| Value::String(self.next_uid()));
        let created = prev
            .and_then(|p| p.pointer("/metadata/creationTimestamp").cloned())
            .unwrap_or_else(|| Value::String(now_timestamp()));
        let meta = obj
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or("object has no metadata")?;
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        meta.insert("uid".into(), uid);
        meta.insert("creationTimestamp".into(), created);
        Ok(())
    }

    /// Creates or replaces an object; returns its resourceVersion and whether it changed. Like the real API
    /// server, an update that changes nothing is a no-op (no new resourceVersion, no watch event).
    pub fn apply(&mut self, kind: Kind, mut obj: Value) -> Result<(u64, bool), String> {
        if !obj.is_object() {
            return Err("object is not a JSON object".into());
        }
        let o = obj.as_object_mut().ok_or("object is not a JSON object")?;
        o.insert("apiVersion".into(), json!(kind.api_version()));
        o.insert("kind".into(), json!(kind.kind()));
        let meta = o
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or("metadata is not an object")?;
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or("object has no metadata.name")?
            .to_string();
        let ns = if kind.namespaced() {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or("default")
                .to_string();
            meta.insert("namespace".into(), json!(ns));
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        let key = (ns, name);
        let prev = self.kind_mut(kind).objects.get(&key).cloned();
        if let Some(p) = &prev
            && without_server_fields(p) == without_server_fields(&obj)
        {
            let rv = p
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|r| r.parse().ok())
                .unwrap_or(self.rv);
            return Ok((rv, false));
        }
        self.rv += 1;
        self.stamp(&mut obj, prev.as_ref())?;
        let rv = self.rv;
        let limit = self.history_limit;
        let ks = self.kind_mut(kind);
        ks.objects.insert(key.clone(), obj.clone());
        ks.history.push_back(Change {
            rv,
            key,
            prev,
            obj: Some(obj),
        });
        ks.trim(limit);
        Ok((rv, true))
    }

    /// Deletes an object; returns the deletion's resourceVersion, or None when it did not exist.
    pub fn delete(&mut self, kind: Kind, ns: &str, name: &str) -> Option<u64> {
        let ns = if kind.namespaced() { ns } else { "" };
        let key = (ns.to_string(), name.to_string());
        if !self.kind_mut(kind).objects.contains_key(&key) {
            return None;
        }
        self.rv += 1;
        let rv = self.rv;
        let limit = self.history_limit;
        let ks = self.kind_mut(kind);
        let prev = ks.objects.remove(&key);
        ks.history.push_back(Change {
            rv,
            key,
            prev,
            obj: None,
        });
        ks.trim(limit);
        Some(rv)
    }

    /// A current object.
    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<&Value> {
        let ns = if kind.namespaced() { ns } else { "" };
        self.kinds
            .get(&kind)?
            .objects
            .get(&(ns.to_string(), name.to_string()))
    }

    /// The objects of `kind` as they were at resourceVersion `at` (the current ones, borrowed, when `at` >=
    /// rv).
    pub fn snapshot(&self, kind: Kind, at: u64) -> Result<Cow<'_, BTreeMap<Key, Value>>, Expired> {
        let Some(ks) = self.kinds.get(&kind) else {
            return Ok(Cow::Owned(BTreeMap::new()));
        };
        if at >= self.rv {
            return Ok(Cow::Borrowed(&ks.objects));
        }
        if at < ks.floor {
            return Err(Expired { floor: ks.floor });
        }
        let mut objects = ks.objects.clone();
        for ch in ks.history.iter().rev().take_while(|c| c.rv > at) {
            match &ch.prev {
                Some(p) => objects.insert(ch.key.clone(), p.clone()),
                None => objects.remove(&ch.key),
            };
        }
        Ok(Cow::Owned(objects))
    }

    /// Changes of `kind` after resourceVersion `after`.
    pub fn changes_since(&self, kind: Kind, after: u64) -> Result<Vec<Change>, Expired> {
        let Some(ks) = self.kinds.get(&kind) else {
            return Ok(Vec::new());
        };
        if after < ks.floor {
            return Err(Expired { floor: ks.floor });
        }
        let newer = ks.history.iter().rev().take_while(|c| c.rv > after).count();
        Ok(ks
            .history
            .iter()
            .skip(ks.history.len() - newer)
            .cloned()
            .collect())
    }

    /// Drops all history: any resourceVersion older than the current one is expired.
    pub fn expire(&mut self) {
        let rv = self.rv;
        for ks in self.kinds.values_mut() {
            ks.history.clear();
            ks.floor = rv;
        }
    }

    /// Number of objects of a kind.
    pub fn count(&self, kind: Kind) -> usize {
        self.kinds.get(&kind).map_or(0, |k| k.objects.len())
    }
}

impl KindStore {
    fn trim(&mut self, limit: usize) {
        while self.history.len() > limit {
            if let Some(old) = self.history.pop_front() {
                self.floor = self.floor.max(old.rv);
            }
        }
    }
}

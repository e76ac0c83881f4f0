//! Mutators: raw bytes (with netlink-aware length and type edits), text lines and words, JSON values,
//! protobuf messages (per wire field, nested messages included).

use fastrand::Rng;
use kube_proxy_rs::cluster::proto::wire::{Field, Fields, Value as Wire, put_bytes, put_varint};
use serde_json::{Map, Number, Value};

const INTERESTING_U16: [u16; 9] = [0, 1, 3, 4, 5, 8, 0x7fff, 0x8000, 0xffff];
const INTERESTING_U32: [u32; 8] = [0, 1, 4, 16, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, u32::MAX];

/// A random byte string of up to `max` bytes.
pub fn random_bytes(rng: &mut Rng, max: usize) -> Vec<u8> {
    let n = rng.usize(0..=max);
    (0..n).map(|_| rng.u8(..)).collect()
}

/// Applies one random byte-level edit to `buf`.
pub fn mutate_bytes_once(rng: &mut Rng, buf: &mut Vec<u8>, other: &[u8]) {
    let len = buf.len();
    match rng.u8(0..10) {
        0 if len > 0 => {
            let i = rng.usize(..len);
            buf[i] ^= 1 << rng.u8(0..8);
        }
        1 if len > 0 => {
            let i = rng.usize(..len);
            buf[i] = [0, 0xff, 0x7f, 0x80, 1, rng.u8(..)][rng.usize(0..6)];
        }
        2 if len >= 2 => {
            // netlink lengths and types are u16 (attributes) ...
            let i = rng.usize(..len - 1) & !1;
            let v = INTERESTING_U16[rng.usize(..INTERESTING_U16.len())];
            buf[i..i + 2].copy_from_slice(&v.to_ne_bytes());
        }
        3 if len >= 4 => {
            // ... or u32 (message headers, values).
            let i = rng.usize(..len - 3) & !3;
            let v = INTERESTING_U32[rng.usize(..INTERESTING_U32.len())];
            buf[i..i + 4].copy_from_slice(&v.to_ne_bytes());
        }
        4 if len > 0 => buf.truncate(rng.usize(..len)),
        5 if len > 0 => {
            let a = rng.usize(..len);
            let b = rng.usize(a..=len.min(a + 64));
            buf.drain(a..b);
        }
        6 => {
            let at = rng.usize(..=len);
            let extra = random_bytes(rng, 16);
            buf.splice(at..at, extra);
        }
        7 if len > 0 => {
            let a = rng.usize(..len);
            let b = rng.usize(a..=len.min(a + 64));
            let chunk = buf[a..b].to_vec();
            let at = rng.usize(..=buf.len());
            buf.splice(at..at, chunk);
        }
        8 if !other.is_empty() => {
            let a = rng.usize(..other.len());
            let b = rng.usize(a..=other.len());
            let at = rng.usize(..=len);
            buf.splice(at..at, other[a..b].iter().copied());
        }
        _ => buf.push(rng.u8(..)),
    }
}

/// Applies 1..=`max_edits` byte edits.
pub fn mutate_bytes(rng: &mut Rng, mut buf: Vec<u8>, other: &[u8], max_edits: usize) -> Vec<u8> {
    for _ in 0..rng.usize(1..=max_edits.max(1)) {
        mutate_bytes_once(rng, &mut buf, other);
    }
    buf
}

fn pick<'a>(rng: &mut Rng, words: &[&'a str]) -> &'a str {
    words[rng.usize(..words.len())]
}

/// Applies one line- or word-level edit to a text, drawing new words from `dict`.
fn mutate_text_once(rng: &mut Rng, lines: &mut Vec<String>, dict: &[&str]) {
    if lines.is_empty() {
        lines.push(pick(rng, dict).to_string());
        return;
    }
    let i = rng.usize(..lines.len());
    match rng.u8(0..8) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(rng.usize(..=lines.len()), l);
        }
        2 => {
            let j = rng.usize(..lines.len());
            lines.swap(i, j);
        }
        3 | 4 => {
            // Replace one word of the line.
            let mut words: Vec<String> = lines[i].split(' ').map(str::to_string).collect();
            let w = rng.usize(..words.len());
            words[w] = pick(rng, dict).to_string();
            lines[i] = words.join(" ");
        }
        5 => {
            let mut words: Vec<String> = lines[i].split(' ').map(str::to_string).collect();
            let at = rng.usize(..=words.len());
            words.insert(at, pick(rng, dict).to_string());
            lines[i] = words.join(" ");
        }
        6 => {
            let mut words: Vec<&str> = lines[i].split(' ').collect();
            words.truncate(rng.usize(..=words.len()));
            lines[i] = words.join(" ");
        }
        _ => {
            // Edit inside a word: the characters parsers split on.
            let line = &mut lines[i];
            let boundaries: Vec<usize> = (0..=line.len())
                .filter(|k| line.is_char_boundary(*k))
                .collect();
            let at = boundaries[rng.usize(..boundaries.len())];
            line.insert_str(
                at,
                pick(rng, &[",", ":", "/", "\"", "\\", "!", "-", "0", "%", "\t"]),
            );
        }
    }
}

/// Applies 1..=`max_edits` text edits; sometimes finishes with a byte edit (invalid UTF-8 included).
pub fn mutate_text(rng: &mut Rng, text: &str, dict: &[&str], max_edits: usize) -> Vec<u8> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.len() > 4 && rng.bool() {
        // Work on a window so edits are dense.
        let a = rng.usize(..lines.len());
        let b = rng.usize(a..=lines.len().min(a + 12));
        lines = lines[a..b].to_vec();
    }
    for _ in 0..rng.usize(1..=max_edits.max(1)) {
        mutate_text_once(rng, &mut lines, dict);
    }
    let mut out = lines.join("\n").into_bytes();
    if rng.u8(0..4) == 0 {
        mutate_bytes_once(rng, &mut out, b"");
    }
    out
}

/// A value of some JSON type the schema may not expect.
pub fn odd_value(rng: &mut Rng, sample: &Value) -> Value {
    match rng.u8(0..12) {
        0 => Value::Null,
        1 => Value::Bool(rng.bool()),
        2 => Value::from(rng.i64(..)),
        3 => Value::from(-1),
        4 => Value::from(u64::MAX),
        5 => Number::from_f64(rng.f64() * 1e10 - 5e9).map_or(Value::Null, Value::Number),
        6 => Value::String(String::new()),
        7 => Value::String(
            [
                "::",
                "10.0.0.1/33",
                "300.1.1.1",
                "TCP",
                "sctp",
                "-1",
                "99999",
                "a,b",
                "\u{0}",
            ][rng.usize(..9)]
            .to_string(),
        ),
        8 => Value::Array(vec![]),
        9 => Value::Object(Map::new()),
        10 => Value::Array(vec![sample.clone(), Value::Null]),
        _ => sample.clone(),
    }
}

/// A value of the same JSON type as `node` (or null, which optional fields accept), so the object
/// still decodes and the conversion behind the decoder is reached.
fn similar_value(rng: &mut Rng, node: &Value) -> Value {
    if rng.u8(0..6) == 0 {
        return Value::Null;
    }
    match node {
        Value::String(_) => Value::String(
            [
                "",
                "::",
                "10.0.0.1",
                "10.0.0.1/33",
                "300.1.1.1",
                "fd00::1",
                "TCP",
                "UDP",
                "SCTP",
                "tcp",
                "ClusterIP",
                "NodePort",
                "LoadBalancer",
                "ExternalName",
                "Local",
                "Cluster",
                "ClientIP",
                "None",
                "IPv4",
                "IPv6",
                "FQDN",
                "a-b",
                "2026-13-45T99:00:00Z",
                "\u{0}",
            ][rng.usize(..24)]
            .to_string(),
        ),
        Value::Number(_) => Value::from(
            [
                0i64,
                -1,
                1,
                65535,
                65536,
                i64::from(i32::MAX) + 1,
                rng.i64(..),
            ][rng.usize(..7)],
        ),
        Value::Bool(b) => Value::Bool(!b),
        Value::Array(a) => Value::Array(a.iter().take(rng.usize(..=a.len())).cloned().collect()),
        Value::Object(_) | Value::Null => node.clone(),
    }
}

/// Number of nodes of a JSON value.
fn size(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(size).sum(),
        Value::Object(o) => o.values().map(size).sum(),
        _ => 0,
    }
}

/// The node with pre-order index `n` (0 = `v` itself).
fn node_mut(v: &mut Value, mut n: usize) -> Option<&mut Value> {
    if n == 0 {
        return Some(v);
    }
    n -= 1;
    let children: Vec<&mut Value> = match v {
        Value::Array(a) => a.iter_mut().collect(),
        Value::Object(o) => o.values_mut().collect(),
        _ => return None,
    };
    for c in children {
        let s = size(c);
        if n < s {
            return node_mut(c, n);
        }
        n -= s;
    }
    None
}

const KEYS: [&str; 12] = [
    "spec",
    "ports",
    "port",
    "protocol",
    "clusterIP",
    "clusterIPs",
    "endpoints",
    "addresses",
    "conditions",
    "metadata",
    "lastTransitionTime",
    "x-unknown",
];

/// One structural edit somewhere in `v`: replace a node by an odd value or a copy of another node,
/// drop or add a key, grow or empty an array.
fn mutate_json_once(rng: &mut Rng, v: &mut Value, typed: bool) {
    let total = size(v);
    let donor = node_mut(v, rng.usize(..total))
        .map(|d| d.clone())
        .unwrap_or(Value::Null);
    let Some(node) = node_mut(v, rng.usize(..total)) else {
        return;
    };
    match (rng.u8(0..6), node) {
        (0, Value::Object(o)) if !o.is_empty() => {
            let k = o
                .keys()
                .nth(rng.usize(..o.len()))
                .cloned()
                .unwrap_or_default();
            o.remove(&k);
        }
        (1, Value::Object(o)) => {
            // Typed mode adds only unknown keys, which the decoder ignores.
            let key = if typed {
                "x-unknown"
            } else {
                KEYS[rng.usize(..KEYS.len())]
            };
            o.insert(key.to_string(), odd_value(rng, &donor));
        }
        (2, Value::Array(a)) if !a.is_empty() => {
            let i = rng.usize(..a.len());
            let item = a[i].clone();
            a.extend(std::iter::repeat_n(item, rng.usize(1..4)));
        }
        (3, n) if !typed => *n = donor,
        (_, n) if typed => *n = similar_value(rng, n),
        (_, n) => *n = odd_value(rng, n),
    }
}

/// A mutated copy of `sample`, serialized; sometimes byte-mutated after serialization. Half the cases
/// keep every value's type (they reach the conversion), half put odd types anywhere (they exercise the
/// decoder's rejection).
pub fn mutate_json(rng: &mut Rng, sample: &Value, max_edits: usize) -> Vec<u8> {
    let mut v = sample.clone();
    let typed = rng.bool();
    for _ in 0..rng.usize(1..=max_edits.max(1)) {
        mutate_json_once(rng, &mut v, typed);
    }
    let mut out = serde_json::to_vec(&v).unwrap_or_default();
    if !typed && rng.u8(0..8) == 0 {
        mutate_bytes_once(rng, &mut out, b"");
    }
    out
}

/// Applies 1..=`max_edits` edits to a protobuf message: mostly per wire field (drop, repeat, another
/// wire type, invalid UTF-8, an unknown field, odd numbers, the same inside a nested message), some
/// raw byte edits.
pub fn mutate_protobuf(rng: &mut Rng, sample: &[u8], max_edits: usize) -> Vec<u8> {
    let mut buf = sample.to_vec();
    for _ in 0..rng.usize(1..=max_edits.max(1)) {
        if rng.u8(0..10) == 0 {
            mutate_bytes_once(rng, &mut buf, sample);
        } else {
            buf = mutate_message(rng, &buf, 0);
        }
    }
    buf
}

fn mutate_message(rng: &mut Rng, msg: &[u8], depth: usize) -> Vec<u8> {
    let fields: Vec<Field<'_>> = match Fields::new(msg).collect::<Result<Vec<_>, _>>() {
        Ok(f) if !f.is_empty() => f,
        _ => return msg.to_vec(),
    };
    let pick = rng.usize(..fields.len());
    let mut out = Vec::with_capacity(msg.len() + 16);
    for (i, f) in fields.iter().enumerate() {
        if i == pick {
            mutate_field(rng, &mut out, f, depth);
        } else {
            out.extend_from_slice(f.raw);
        }
    }
    out
}

fn key(out: &mut Vec<u8>, tag: u32, wire_type: u64) {
    put_varint(out, (u64::from(tag) << 3) | wire_type);
}

fn mutate_field(rng: &mut Rng, out: &mut Vec<u8>, f: &Field<'_>, depth: usize) {
    match (rng.u8(0..8), f.value) {
        (0, _) => {}
        (1, _) => {
            out.extend_from_slice(f.raw);
            out.extend_from_slice(f.raw);
        }
        (2, Wire::Bytes(b)) => {
            key(out, f.tag, [0, 1, 5][rng.usize(0..3)]);
            put_varint(out, b.len() as u64);
            out.extend_from_slice(&[0; 8][..rng.usize(0..=8)]);
        }
        (2, _) => put_bytes(out, f.tag, &random_bytes(rng, 6)),
        (3 | 4, Wire::Bytes(b)) if depth < 6 => {
            put_bytes(out, f.tag, &mutate_message(rng, b, depth + 1));
        }
        (5, Wire::Bytes(b)) => {
            let mut b = b.to_vec();
            let at = rng.usize(..=b.len());
            b.insert(at, [0xff, 0xc0, 0x80, 0xed][rng.usize(0..4)]);
            put_bytes(out, f.tag, &b);
        }
        (6, _) => {
            out.extend_from_slice(f.raw);
            key(out, rng.u32(1..3000), [0, 2][rng.usize(0..2)]);
            put_varint(out, rng.u64(0..8));
            out.extend(random_bytes(rng, 8));
        }
        _ => {
            key(out, f.tag, 0);
            let odd = [
                0,
                1,
                0x7fff_ffff,
                0x8000_0000,
                u64::from(u32::MAX),
                u64::MAX,
            ];
            put_varint(out, odd[rng.usize(..odd.len())]);
        }
    }
}

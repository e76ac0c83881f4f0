//! Fuzz targets of the API responses' framing and decoding (issue 29 §3): JSON watch streams, list
//! bodies read incrementally in JSON and protobuf (checked against the whole-body decode), and gzip
//! bodies. Each has a tight memory bound; the watch framer also its deterministic work bound (each byte
//! examined once).

use super::corpus::Corpus;
use super::mutate::{mutate_bytes, mutate_json, random_bytes};
use super::targets::{Memory, choose, named};
use bytes::Bytes;
use fastrand::Rng;
use k8s_openapi::api::core::v1::Service;
use kube_proxy_rs::cluster::gzip::{Gunzip, IN_STEP};
use kube_proxy_rs::cluster::listwatch::Encoding;
use kube_proxy_rs::cluster::listwatch::body_error::BodyError;
use kube_proxy_rs::cluster::listwatch::frames::{Framer, Framing, MAX_FRAME};
use kube_proxy_rs::cluster::listwatch::request::{ListReader, Page, decode_event, decode_page};
use kube_proxy_rs::cluster::proto::wire::Fields;
use kube_proxy_rs::cluster::proto::{MAGIC, envelope};
use serde_json::{Value, json};
use std::io::Write;

/// A watch stream: the frames' copies and their decoded events.
pub const WATCH_MEMORY: Memory = Memory {
    fixed: 1 << 20,
    per_byte: 48,
};
/// A list read twice (whole and incrementally).
pub const LIST_MEMORY: Memory = Memory {
    fixed: 1 << 20,
    per_byte: 96,
};
/// The decoder's state and one step's output; the output is counted, not kept.
pub const GZIP_MEMORY: Memory = Memory {
    fixed: 2 * 1100 * IN_STEP + (1 << 20),
    per_byte: 4,
};

/// The most decompressed bytes the gzip check reads before it stops (a reader's cap).
const GZIP_CAP: usize = 256 << 10;

/// A small framer cap, so the fuzz inputs reach it.
const SMALL_FRAME: usize = 512;

fn watch_line(kind: &str, object: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A JSON watch stream of Service events, mutated (or with its newlines gone: one long line).
pub fn gen_watch_json(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    let mut stream = Vec::new();
    for _ in 0..rng.usize(1..5) {
        let kind = *choose(rng, &["ADDED", "MODIFIED", "DELETED"]);
        stream.extend(watch_line(kind, choose(rng, &c.services)));
    }
    stream.extend(watch_line(
        "BOOKMARK",
        &json!({"kind": "Service", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}}),
    ));
    stream.extend(watch_line(
        "ERROR",
        &json!({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}),
    ));
    match rng.u8(0..10) {
        0 => stream,
        1 => stream.into_iter().filter(|b| *b != b'\n').collect(),
        2 => random_bytes(rng, 1024),
        _ => {
            let other = watch_line("MODIFIED", choose(rng, &c.slices));
            mutate_bytes(rng, stream, &other, 6)
        }
    }
}

/// Frames the stream with the default and a small cap, in pieces: no frame over the cap, nothing held
/// past it, each byte examined once, every error named.
pub fn check_watch_json(buf: &[u8]) -> Result<(), String> {
    for max in [MAX_FRAME, SMALL_FRAME] {
        let mut framer = Framer::with_max(Framing::Lines, max);
        let piece = 1 + buf.len() % 17;
        'stream: for chunk in buf.chunks(piece) {
            framer.push(chunk);
            while let Some(frame) = framer.next_frame() {
                match frame {
                    Ok(f) if f.len() > max => return Err(format!("a {}-byte frame", f.len())),
                    Ok(f) => {
                        if let Err(e) = decode_event::<Service>(Encoding::Json, &f) {
                            named("watch event", e)?;
                        }
                    }
                    Err(e) => {
                        named("framing", e)?;
                        break 'stream;
                    }
                }
            }
            if framer.buffered() > max + piece {
                return Err(format!("{} bytes held past the cap", framer.buffered()));
            }
        }
        if framer.examined() > buf.len() as u64 {
            return Err(format!(
                "{} bytes examined for {} input bytes",
                framer.examined(),
                buf.len()
            ));
        }
    }
    Ok(())
}

/// A Service list in JSON, structure-mutated or byte-mutated.
pub fn gen_list_json(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    let items: Vec<&Value> = (0..rng.usize(0..4))
        .map(|_| choose(rng, &c.services))
        .collect();
    let list = json!({"kind": "ServiceList", "apiVersion": "v1",
                      "metadata": {"resourceVersion": "5", "continue": "next"}, "items": items});
    match rng.u8(0..10) {
        0 => serde_json::to_vec(&list).unwrap_or_default(),
        1..=5 => mutate_json(rng, &list, 3),
        _ => {
            let text = serde_json::to_vec(&list).unwrap_or_default();
            let other = serde_json::to_vec(choose(rng, &c.slices)).unwrap_or_default();
            mutate_bytes(rng, text, &other, 4)
        }
    }
}

/// A protobuf list body (enveloped), byte-mutated.
pub fn gen_list_protobuf(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    let lists: Vec<&Vec<u8>> = c
        .pb_streams
        .iter()
        .filter(|b| b.starts_with(&MAGIC))
        .collect();
    let sample = (*choose(rng, &lists)).clone();
    match rng.u8(0..10) {
        0 => sample,
        _ => {
            let other = choose(rng, &c.pb_services).clone();
            mutate_bytes(rng, sample, &other, 4)
        }
    }
}

/// The list read incrementally in pieces of `piece` bytes.
fn incremental(encoding: Encoding, buf: &[u8], piece: usize) -> Result<Page<Service>, BodyError> {
    let mut reader = ListReader::<Service>::new(encoding);
    for chunk in buf.chunks(piece) {
        reader.push(chunk)?;
    }
    reader.finish()
}

/// What a page says, for comparing two reads of one body.
fn summary(p: &Page<Service>) -> String {
    format!(
        "{:?} {:?} {:?}",
        p.resource_version, p.continue_token, p.items
    )
}

/// Whatever the whole-body decode reads, the incremental one reads the same; its errors are named.
fn check_list(encoding: Encoding, buf: &[u8], compare: bool) -> Result<(), String> {
    let whole = decode_page::<Service>(encoding, buf);
    let piece = 1 + buf.len() % 11;
    match (whole, incremental(encoding, buf, piece)) {
        (Ok(w), Ok(i)) if compare && summary(&w) != summary(&i) => Err(format!(
            "whole and incremental reads differ:\n{}\n{}",
            summary(&w),
            summary(&i)
        )),
        (Ok(w), Err(e)) if compare => Err(format!(
            "the whole body reads ({} items) but not incrementally: {e}",
            w.items.len()
        )),
        (_, Err(e)) => named("list", e),
        _ => Ok(()),
    }
}

pub fn check_list_json(buf: &[u8]) -> Result<(), String> {
    check_list(Encoding::Json, buf, true)
}

/// Compared with the whole decode unless the envelope holds two lists (a whole decode reads only the
/// last; the incremental one reads, and may fail on, the first too).
pub fn check_list_protobuf(buf: &[u8]) -> Result<(), String> {
    let raws = buf
        .strip_prefix(&MAGIC)
        .map(|rest| {
            Fields::new(rest)
                .filter_map(Result::ok)
                .filter(|f| envelope::is_raw(f.tag))
                .count()
        })
        .unwrap_or(0);
    check_list(Encoding::Protobuf, buf, raws <= 1)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

/// A gzip body: a list compressed, mutated or not, or a small bomb.
pub fn gen_gzip(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    match rng.u8(0..20) {
        0 => gzip(&vec![b' '; 1 << 20]),
        1 => random_bytes(rng, 512),
        n => {
            let items: Vec<&Value> = (0..3).map(|_| choose(rng, &c.services)).collect();
            let z = gzip(&serde_json::to_vec(&json!({"items": items})).unwrap_or_default());
            if n < 6 {
                z
            } else {
                let other = z.clone();
                mutate_bytes(rng, z, &other, 3)
            }
        }
    }
}

/// Decodes in pieces up to [`GZIP_CAP`] output: no step hands on more than deflate's ratio allows,
/// every error is named.
pub fn check_gzip(buf: &[u8]) -> Result<(), String> {
    let mut g = Gunzip::default();
    let mut total = 0;
    for chunk in buf.chunks(1 + buf.len() % 97) {
        g.feed(Bytes::copy_from_slice(chunk));
        loop {
            match g.step() {
                Ok(Some(out)) if out.len() > 1100 * IN_STEP => {
                    return Err(format!("one step handed on {} bytes", out.len()));
                }
                Ok(Some(out)) => {
                    total += out.len();
                    if total > GZIP_CAP {
                        return Ok(());
                    }
                }
                Ok(None) => break,
                Err(e) => return named("gzip", e),
            }
        }
    }
    match g.finish() {
        Ok(_) => Ok(()),
        Err(e) => named("gzip end", e),
    }
}

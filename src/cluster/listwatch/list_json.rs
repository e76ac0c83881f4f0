//! A JSON list body read as it arrives: each element of its `items` array is cut out and decoded on its
//! own ([`Decoded`]) as soon as it is complete; the rest of the list (kind, apiVersion, metadata) is kept
//! with an empty `items` and decoded at the end. Memory: one item (at most [`MAX_OBJECT_BYTES`]) plus the
//! rest (at most [`MAX_LIST_META_BYTES`]) besides the decoded objects. Each byte is examined once.
//!
//! The scanner only tracks strings, nesting and, in the top-level object, which key a value belongs to;
//! serde decodes every piece, so a body serde would refuse whole is refused too.

use super::body_error::BodyError;
use super::response::Page;
use crate::cluster::body_limit::{MAX_LIST_META_BYTES, MAX_OBJECT_BYTES};
use crate::cluster::decode::{Decoded, Lenient};
use kube::core::ObjectList;
use serde::de::DeserializeOwned;

/// Where the scanner is in the `items` array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Items {
    /// Not in it.
    Outside,
    /// Between its brackets; `comma`: a comma came since the last item.
    Inside { comma: bool },
}

/// The string and nesting state of one stretch of JSON.
#[derive(Debug, Default, Clone, Copy)]
struct Lexer {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl Lexer {
    /// Feeds one byte; `true` when it was inside (or closed) a string.
    fn string_byte(&mut self, b: u8) -> bool {
        if !self.in_string {
            return false;
        }
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
        }
        true
    }
}

/// An incremental decoder of one JSON list page.
#[derive(Debug)]
pub struct JsonList<K> {
    /// The list without its items.
    rest: Vec<u8>,
    /// The item being read.
    item: Vec<u8>,
    items: Vec<Decoded<K>>,
    /// The top level (the list object).
    top: Lexer,
    /// Inside the current item.
    inner: Lexer,
    items_state: Items,
    /// The top level is an object: strings at depth 1 alternate between keys and values.
    object: bool,
    expect_key: bool,
    /// Where the current top-level key starts in `rest`.
    key_start: Option<usize>,
    /// The last top-level key was `items` and its value has not ended.
    items_key: bool,
    item_max: usize,
    rest_max: usize,
}

impl<K: Lenient + Clone> JsonList<K>
where
    Decoded<K>: DeserializeOwned,
{
    /// An empty decoder with the default limits.
    pub fn new() -> Self {
        Self::with_limits(MAX_OBJECT_BYTES, MAX_LIST_META_BYTES)
    }

    /// An empty decoder refusing items over `item_max` bytes and a rest over `rest_max` bytes.
    pub fn with_limits(item_max: usize, rest_max: usize) -> Self {
        Self {
            rest: Vec::new(),
            item: Vec::new(),
            items: Vec::new(),
            top: Lexer::default(),
            inner: Lexer::default(),
            items_state: Items::Outside,
            object: false,
            expect_key: false,
            key_start: None,
            items_key: false,
            item_max,
            rest_max,
        }
    }

    /// Reads the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), BodyError> {
        let mut at = 0;
        while at < chunk.len() {
            match self.items_state {
                Items::Inside { comma } => {
                    // Bytes that change no state are copied in one run.
                    let run = self.plain_run(&chunk[at..]);
                    if run > 0 {
                        self.keep_all(&chunk[at..at + run])?;
                        at += run;
                        continue;
                    }
                    self.item_byte(chunk[at], comma)?;
                }
                Items::Outside => self.rest_byte(chunk[at])?,
            }
            at += 1;
        }
        Ok(())
    }

    /// How many bytes at the start of `bytes` inside an item change no scanner state.
    fn plain_run(&self, bytes: &[u8]) -> usize {
        if self.inner.escaped {
            return 0;
        }
        let special: fn(&u8) -> bool = if self.inner.in_string {
            |b| matches!(b, b'"' | b'\\')
        } else {
            |b| matches!(b, b'"' | b'{' | b'}' | b'[' | b']' | b',')
        };
        bytes.iter().position(special).unwrap_or(bytes.len())
    }

    fn keep_all(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if self.item.len() + bytes.len() > self.item_max {
            return Err(BodyError::ItemTooLong(self.item_max));
        }
        self.item.extend_from_slice(bytes);
        Ok(())
    }

    fn rest_byte(&mut self, b: u8) -> Result<(), BodyError> {
        if self.rest.len() >= self.rest_max {
            return Err(BodyError::RestTooLong(self.rest_max));
        }
        self.rest.push(b);
        let depth = self.top.depth;
        if self.top.string_byte(b) {
            if !self.top.in_string && depth == 1 {
                self.end_of_string()?;
            }
            return Ok(());
        }
        match b {
            b'"' => {
                self.top.in_string = true;
                if depth == 1 && self.expect_key {
                    self.key_start = Some(self.rest.len() - 1);
                    self.expect_key = false;
                }
            }
            b'[' if depth == 1 && self.items_key => {
                self.items_key = false;
                self.items_state = Items::Inside { comma: false };
            }
            b'{' | b'[' => {
                if depth == 0 && b == b'{' {
                    self.object = true;
                    self.expect_key = true;
                }
                self.top.depth += 1;
            }
            b'}' | b']' => {
                self.top.depth = depth
                    .checked_sub(1)
                    .ok_or(BodyError::Unbalanced(b as char))?;
            }
            b',' if depth == 1 => {
                self.expect_key = self.object;
                self.items_key = false;
            }
            _ => {}
        }
        Ok(())
    }

    /// A string at the top level ended: if it was a key, note whether it is `items`.
    fn end_of_string(&mut self) -> Result<(), BodyError> {
        let Some(start) = self.key_start.take() else {
            return Ok(());
        };
        let key = &self.rest[start..];
        self.items_key = if key.contains(&b'\\') {
            serde_json::from_slice::<String>(key).is_ok_and(|k| k == "items")
        } else {
            key == b"\"items\""
        };
        Ok(())
    }

    fn item_byte(&mut self, b: u8, comma: bool) -> Result<(), BodyError> {
        if self.inner.string_byte(b) {
            return self.keep(b);
        }
        match b {
            b'"' => {
                self.inner.in_string = true;
                self.keep(b)
            }
            b'{' | b'[' => {
                self.inner.depth += 1;
                self.keep(b)
            }
            b'}' | b']' if self.inner.depth > 0 => {
                self.inner.depth -= 1;
                self.keep(b)
            }
            b',' if self.inner.depth == 0 => {
                self.end_item()?;
                self.items_state = Items::Inside { comma: true };
                Ok(())
            }
            b']' => {
                if comma || !self.item.trim_ascii().is_empty() {
                    self.end_item()?;
                }
                self.items_state = Items::Outside;
                // The rest keeps `"items":[]` (it has the opening bracket).
                self.rest.push(b']');
                Ok(())
            }
            _ => self.keep(b),
        }
    }

    fn keep(&mut self, b: u8) -> Result<(), BodyError> {
        self.keep_all(&[b])
    }

    fn end_item(&mut self) -> Result<(), BodyError> {
        let item =
            serde_json::from_slice::<Decoded<K>>(&self.item).map_err(|source| BodyError::Item {
                index: self.items.len(),
                source,
            })?;
        self.items.push(item);
        self.item.clear();
        self.inner = Lexer::default();
        Ok(())
    }

    /// The page, once the whole body has been pushed.
    pub fn finish(mut self) -> Result<Page<K>, BodyError> {
        if self.items_state != Items::Outside || self.top.in_string || self.top.depth != 0 {
            return Err(BodyError::Unfinished);
        }
        let list: ObjectList<Decoded<K>> =
            serde_json::from_slice(&self.rest).map_err(BodyError::Json)?;
        let mut items = list.items;
        items.append(&mut self.items);
        Ok(Page {
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            continue_token: list.metadata.continue_.unwrap_or_default(),
            items,
            encoding: super::Encoding::Json,
        })
    }
}

impl<K: Lenient + Clone> Default for JsonList<K>
where
    Decoded<K>: DeserializeOwned,
{
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;

    fn service(name: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"7"}},"spec":{{"clusterIP":"10.0.0.1","ports":[{{"port":80,"protocol":"TCP"}}]}}}}"#
        )
    }

    fn read(body: &[u8], chunk: usize) -> Result<Page<Service>, BodyError> {
        let mut list = JsonList::<Service>::new();
        for c in body.chunks(chunk.max(1)) {
            list.push(c)?;
        }
        list.finish()
    }

    /// The names of a page's items (`unreadable <why>` for an unreadable one).
    pub(in crate::cluster::listwatch) fn names(page: &Page<Service>) -> Vec<String> {
        page.items
            .iter()
            .map(|d| match d {
                Decoded::Object(s) => s.metadata.name.clone().unwrap_or_default(),
                Decoded::Unreadable(u) => format!("unreadable {}", u.error),
            })
            .collect()
    }

    #[test]
    fn items_are_cut_out_however_the_body_is_split() {
        let body = format!(
            r#"{{"kind":"ServiceList","apiVersion":"v1","metadata":{{"resourceVersion":"42","continue":"c,]\"}}"}},
               "items": [ {} , {} ,{}] }}"#,
            service("a"),
            service("b\\\"],{"),
            service("c")
        );
        for chunk in [1, 2, 3, 7, 64, body.len()] {
            let page = read(body.as_bytes(), chunk).unwrap();
            assert_eq!(names(&page), ["a", "b\"],{", "c"], "chunk {chunk}");
            assert_eq!(page.resource_version, "42");
            assert_eq!(page.continue_token, "c,]\"}");
        }
        let whole = super::super::request::decode_page::<Service>(
            super::super::Encoding::Json,
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(names(&whole), names(&read(body.as_bytes(), 5).unwrap()));
    }

    #[test]
    fn empty_null_and_escaped_items() {
        for body in [
            r#"{"metadata":{"resourceVersion":"1"},"items":[]}"#,
            r#"{"metadata":{"resourceVersion":"1"},"items":[ ]}"#,
            r#"{"metadata":{"resourceVersion":"1"},"items":null}"#,
        ] {
            let page = read(body.as_bytes(), 3).unwrap();
            assert!(page.items.is_empty(), "{body}");
            assert_eq!(page.resource_version, "1");
        }
        let escaped = format!(r#"{{"it\u0065ms":[{}],"metadata":{{}}}}"#, service("e"));
        assert_eq!(names(&read(escaped.as_bytes(), 4).unwrap()), ["e"]);
    }

    #[test]
    fn malformed_lists_fail_as_serde_fails_them() {
        for body in [
            "",
            "{",
            r#"{"metadata":{"resourceVersion":"1"}}"#,
            r#"{"items":[{}"#,
            r#"{"items":[{},]}"#,
            r#"{"items":[,{}]}"#,
            r#"{"items":[{}]} x"#,
            r#"{"items":[{}]}}"#,
            r#"{"items":[1],"items":[]}"#,
            r#"{"items":[{"metadata":{"name":"x"}]}"#,
        ] {
            assert!(read(body.as_bytes(), 2).is_err(), "{body}");
        }
    }

    #[test]
    fn items_and_rest_are_bounded() {
        let body = format!(r#"{{"items":[{}]}}"#, service("a"));
        let mut small = JsonList::<Service>::with_limits(50, 1000);
        let err = small.push(body.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("limit of 50 bytes"), "{err}");
        let long_meta = format!(r#"{{"metadata":{{"continue":"{}"}}}}"#, "x".repeat(2000));
        let mut small = JsonList::<Service>::with_limits(50, 1000);
        let err = small.push(long_meta.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("outside its items"), "{err}");
    }
}

//! What one `tracing` event carries, sorted into klog's parts: the message, the error (`err`), the
//! verbosity (`v`) and the other key/value pairs with their kind of value.

use std::fmt;
use tracing::field::{Field, Visit};

/// Marks a value rendered by [`super::json`]: its text is JSON and is written as such, not quoted.
pub(crate) const JSON_MARK: char = '\u{1}';

/// One value, with the kind klog's serializer distinguishes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text (strings, `%display` and `?debug` values): quoted.
    Str(String),
    /// A signed integer: written bare.
    Int(i64),
    /// An unsigned integer: written bare.
    UInt(u64),
    /// A float: written as JSON writes it.
    Float(f64),
    /// `true` or `false`: written bare.
    Bool(bool),
    /// Already JSON (from [`super::json`]): written bare.
    Json(String),
}

/// The parts of one event.
#[derive(Debug, Default)]
pub struct Fields {
    /// The event's message (`"..."` in klog, `msg` in JSON).
    pub message: String,
    /// The error of the event (fields named `error` or `err`).
    pub err: Option<String>,
    /// The verbosity the event asks for with a `v = N` field.
    pub v: Option<u64>,
    /// Every other field, in the order given.
    pub values: Vec<(&'static str, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::Str(s)) => self.message = s,
            ("error" | "err", Value::Str(s)) => self.err = Some(s),
            ("v", Value::UInt(n)) => self.v = Some(n),
            ("v", Value::Int(n)) => self.v = Some(u64::try_from(n).unwrap_or(0)),
            (name, value) => self.values.push((name, value)),
        }
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::Float(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::Int(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::UInt(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::Str(value.to_string()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::Str(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        let value = match text.strip_prefix(JSON_MARK) {
            Some(json) => Value::Json(json.to_string()),
            None => Value::Str(text),
        };
        self.put(field, value);
    }
}

//! An explanation answer, rendered off the async workers: status, content type and body (shared, so a
//! reused listing is sent without a copy).

use super::request::Form;
use bytes::Bytes;
use serde::Serialize;

/// Plain text.
pub const TEXT: &str = "text/plain; charset=utf-8";
/// JSON.
pub const JSON: &str = "application/json";

/// A rendered answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
    /// Seconds for a `Retry-After` header (refusals for lack of capacity).
    pub retry_after: Option<u32>,
}

impl Answer {
    /// A plain-text answer (a new line is added when missing).
    pub fn text(status: u16, message: impl Into<String>) -> Answer {
        let mut body = message.into();
        if !body.ends_with('\n') {
            body.push('\n');
        }
        Answer {
            status,
            content_type: TEXT,
            body: Bytes::from(body),
            retry_after: None,
        }
    }

    /// "Too busy, come back in `seconds`" (503).
    pub fn busy(seconds: u32, why: &str) -> Answer {
        Answer {
            retry_after: Some(seconds),
            ..Answer::text(503, why)
        }
    }

    /// `value` in `form`: pretty JSON, or `text` of it.
    pub fn render<T: Serialize>(value: &T, form: Form, text: impl FnOnce(&T) -> String) -> Answer {
        if form == Form::Text {
            return Answer::text(200, text(value));
        }
        match serde_json::to_vec_pretty(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Answer {
                    status: 200,
                    content_type: JSON,
                    body: Bytes::from(body),
                    retry_after: None,
                }
            }
            Err(e) => Answer::text(500, format!("encoding the explanation: {e}")),
        }
    }
}

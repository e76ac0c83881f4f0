//! Why a list or watch body could not be read: the bound it passed, or the encoding's own error kept
//! as the cause.

use crate::cluster::proto::envelope::EnvelopeError;
use crate::cluster::proto::wire::WireError;
use thiserror::Error;

/// Why a list body or a watch frame could not be decoded.
#[derive(Debug, Error)]
pub enum BodyError {
    /// JSON that serde_json refuses (a whole list, its envelope or a watch event).
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    /// One item of a JSON list that serde_json refuses.
    #[error("list item {index}: {source}")]
    Item {
        /// The item's position in the list.
        index: usize,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// A protobuf envelope (`runtime.Unknown`, a list, a watch event or a Status) that is malformed.
    #[error("{0}")]
    Envelope(#[source] EnvelopeError),
    /// A field of a protobuf envelope that is malformed.
    #[error("runtime.Unknown: {0}")]
    Unknown(#[source] WireError),
    /// A field of a protobuf list that is malformed.
    #[error("list: {0}")]
    List(#[source] WireError),
    /// A protobuf list cut short.
    #[error("list: truncated")]
    Truncated,
    /// A protobuf list length that does not fit in memory's addresses.
    #[error("list length overflows")]
    LengthOverflow,
    /// A protobuf list field over the bound.
    #[error("a list field exceeds the limit of {0} bytes")]
    FieldTooLong(usize),
    /// A JSON list item over the bound.
    #[error("a list item exceeds the limit of {0} bytes")]
    ItemTooLong(usize),
    /// A JSON list's text outside its items over the bound.
    #[error("the list outside its items exceeds the limit of {0} bytes")]
    RestTooLong(usize),
    /// A closing bracket with nothing open.
    #[error("unbalanced {0:?} in the list")]
    Unbalanced(char),
    /// A JSON list body that ends inside the list.
    #[error("the list body ends before the list does")]
    Unfinished,
    /// A watch frame (`line` or `frame`) over the bound.
    #[error("watch {what} of {len} bytes or more exceeds the limit of {max} bytes")]
    FrameTooLong {
        /// `line` (JSON) or `frame` (protobuf).
        what: &'static str,
        /// The frame's length, or the bytes held without a line end.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A watch event type other than ADDED, MODIFIED, DELETED, BOOKMARK and ERROR.
    #[error("unknown watch event type {0:?}")]
    EventType(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn a_list_item_error_keeps_serde_json_s() {
        let cause = serde_json::from_slice::<u32>(b"x").unwrap_err();
        let text = format!("list item 3: {cause}");
        let e = BodyError::Item {
            index: 3,
            source: cause,
        };
        assert_eq!(e.to_string(), text);
        assert!(e.source().is_some_and(|c| c.is::<serde_json::Error>()));
    }

    #[test]
    fn a_list_field_error_keeps_the_wire_error() {
        let e = BodyError::List(WireError::Varint);
        assert_eq!(e.to_string(), format!("list: {}", WireError::Varint));
        assert!(e.source().is_some_and(|c| c.is::<WireError>()));
    }
}

//! Content negotiation with the API server: what lists and watches ask for (`clientConnection.
//! contentType` / `--kube-api-content-type`, `clientConnection.acceptContentTypes`), and which encoding
//! a response is in (its `Content-Type` decides, as client-go decodes by it).

use crate::cluster::proto::MEDIA_TYPE as PROTOBUF;

/// The JSON media type.
pub const JSON: &str = "application/json";

/// The encoding of one response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `application/json` (and anything not protobuf: a server that does not say is read as JSON).
    Json,
    /// `application/vnd.kubernetes.protobuf`, with `;stream=watch` on watches.
    Protobuf,
}

impl Encoding {
    /// The encoding a `Content-Type` header announces.
    pub fn of(content_type: Option<&str>) -> Self {
        match content_type.map(base) {
            Some(t) if t.eq_ignore_ascii_case(PROTOBUF) => Encoding::Protobuf,
            _ => Encoding::Json,
        }
    }

    /// A short name for logs and errors.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Protobuf => "protobuf",
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A media type without its parameters, trimmed.
fn base(media_type: &str) -> &str {
    media_type.split(';').next().unwrap_or_default().trim()
}

/// The `Accept` header of list and watch requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaTypes {
    accept: String,
}

impl Default for MediaTypes {
    /// Protobuf, as upstream's default `contentType`, with JSON as the fallback.
    fn default() -> Self {
        Self::protobuf()
    }
}

/// A `clientConnection` media type this client cannot read (the error names the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaTypeError {
    /// `acceptContentTypes` names neither JSON nor protobuf.
    #[error("clientConnection.acceptContentTypes: {0:?} names neither {JSON} nor {PROTOBUF}")]
    Accept(String),
    /// `contentType` is neither JSON nor protobuf.
    #[error(
        "clientConnection.contentType: unsupported media type {0:?}, must be {JSON} or {PROTOBUF}"
    )]
    ContentType(String),
}

impl MediaTypes {
    /// Protobuf preferred; a server (or resource) without protobuf answers JSON.
    pub fn protobuf() -> Self {
        Self {
            accept: format!("{PROTOBUF}, {JSON}"),
        }
    }

    /// JSON only.
    pub fn json() -> Self {
        Self {
            accept: JSON.to_string(),
        }
    }

    /// The media types for `clientConnection`: `accept_content_types` verbatim when set (it must name
    /// JSON or protobuf), otherwise from `content_type` (empty = the protobuf default). The error names
    /// the field.
    pub fn from_config(
        content_type: &str,
        accept_content_types: &str,
    ) -> Result<Self, MediaTypeError> {
        if !accept_content_types.trim().is_empty() {
            let readable = accept_content_types.split(',').map(base).any(|t| {
                t.eq_ignore_ascii_case(JSON) || t.eq_ignore_ascii_case(PROTOBUF) || t == "*/*"
            });
            if !readable {
                return Err(MediaTypeError::Accept(accept_content_types.to_string()));
            }
            return Ok(Self {
                accept: accept_content_types.trim().to_string(),
            });
        }
        match base(content_type) {
            "" => Ok(Self::protobuf()),
            t if t.eq_ignore_ascii_case(PROTOBUF) => Ok(Self::protobuf()),
            t if t.eq_ignore_ascii_case(JSON) => Ok(Self::json()),
            _ => Err(MediaTypeError::ContentType(content_type.to_string())),
        }
    }

    /// The `Accept` header value.
    pub fn accept(&self) -> &str {
        &self.accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_chooses_the_accept_header() {
        let accept = |ct: &str, act: &str| MediaTypes::from_config(ct, act).map(|m| m.accept);
        let both = "application/vnd.kubernetes.protobuf, application/json";
        assert_eq!(accept("", "").unwrap(), both);
        assert_eq!(
            accept("application/vnd.kubernetes.protobuf", "").unwrap(),
            both
        );
        assert_eq!(accept("application/json", "").unwrap(), "application/json");
        assert_eq!(accept("application/json; charset=utf-8", "").unwrap(), JSON);
        assert_eq!(
            accept("application/json", "application/vnd.kubernetes.protobuf").unwrap(),
            "application/vnd.kubernetes.protobuf"
        );
        let err = accept("application/yaml", "").unwrap_err().to_string();
        assert!(err.starts_with("clientConnection.contentType:"), "{err}");
        let err = accept("", "text/plain").unwrap_err().to_string();
        assert!(
            err.starts_with("clientConnection.acceptContentTypes:"),
            "{err}"
        );
    }

    #[test]
    fn responses_are_read_by_their_content_type() {
        let of = |ct| Encoding::of(Some(ct));
        assert_eq!(
            of("application/vnd.kubernetes.protobuf"),
            Encoding::Protobuf
        );
        assert_eq!(
            of("application/vnd.kubernetes.protobuf;stream=watch"),
            Encoding::Protobuf
        );
        assert_eq!(of("application/json"), Encoding::Json);
        assert_eq!(Encoding::of(None), Encoding::Json);
    }
}

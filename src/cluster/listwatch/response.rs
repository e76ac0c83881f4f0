//! What a list or watch request gives back: a list page, watch events, or why it failed.

use super::body_error::BodyError;
use super::media::Encoding;
use crate::cluster::decode::Decoded;
use futures::stream::BoxStream;
use thiserror::Error;

/// A status the API server answered with (an HTTP error, or a watch ERROR event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiStatus {
    /// HTTP status code (410 = the resourceVersion is too old).
    pub code: u16,
    /// `reason` (e.g. `Expired`).
    pub reason: String,
    /// `message`.
    pub message: String,
}

impl std::fmt::Display for ApiStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

/// Why a request failed.
#[derive(Debug, Error)]
pub enum RequestError {
    /// The request could not be built or sent, or the connection failed.
    #[error(transparent)]
    Client(#[from] kube::Error),
    /// The API server answered with an error status.
    #[error("the API server answered {0}")]
    Api(ApiStatus),
    /// The body could not be decoded.
    #[error("unreadable {encoding} response: {source}")]
    Decode {
        /// The body's encoding.
        encoding: Encoding,
        /// What was wrong.
        #[source]
        source: BodyError,
    },
}

/// One list page.
#[derive(Debug)]
pub struct Page<K> {
    /// The list's resourceVersion (empty = not given).
    pub resource_version: String,
    /// The continue token (empty = last page).
    pub continue_token: String,
    /// The items, each decoded on its own.
    pub items: Vec<Decoded<K>>,
    /// The page's encoding.
    pub encoding: Encoding,
}

/// One watch event.
#[derive(Debug)]
pub enum WatchItem<K> {
    /// ADDED or MODIFIED.
    Apply(Decoded<K>),
    /// DELETED.
    Delete(Decoded<K>),
    /// BOOKMARK: the resourceVersion reached.
    Bookmark(String),
    /// ERROR.
    Error(ApiStatus),
}

/// A stream of watch events, ending when the server ends the watch.
pub type Events<K> = BoxStream<'static, Result<WatchItem<K>, RequestError>>;

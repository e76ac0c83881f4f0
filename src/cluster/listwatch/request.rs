//! One list page or one watch request: the request (URL and query from kube's request builder, our
//! `Accept` header), the response's status, and its body decoded by the encoding it announces.

use super::body_error::BodyError;
use super::frames::{Framer, Framing};
use super::list_json::JsonList;
use super::list_proto::ProtoList;
use super::media::{Encoding, MediaTypes};
pub use super::response::{ApiStatus, Events, Page, RequestError, WatchItem};
use crate::cluster::body_limit::{MAX_ERROR_BODY_BYTES, ReadIncrementally};
use crate::cluster::decode::{Decoded, Lenient};
use crate::cluster::proto::{Protobuf, envelope};
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_TYPE, HeaderValue};
use http_body_util::BodyExt;
use kube::Resource;
use kube::api::{ListParams, WatchParams};
use kube::client::Body;
use kube::core::{ObjectList, WatchEvent};

/// A kind the list-watch loop can read in both encodings.
pub trait Watched:
    Lenient + Protobuf + Resource<DynamicType = ()> + Clone + Send + 'static
{
}
impl<K: Lenient + Protobuf + Resource<DynamicType = ()> + Clone + Send + 'static> Watched for K {}

fn with_accept(
    mut req: http::Request<Vec<u8>>,
    media: &MediaTypes,
) -> Result<http::Request<Body>, RequestError> {
    let accept = HeaderValue::from_str(media.accept()).map_err(|e| {
        RequestError::Client(kube::Error::BuildRequest(
            kube::core::request::Error::Validation(e.to_string()),
        ))
    })?;
    req.headers_mut().insert(ACCEPT, accept);
    Ok(req.map(Body::from))
}

/// Sends `req`; an error status becomes [`RequestError::Api`] with the server's `Status`.
async fn send(
    client: &kube::Client,
    req: http::Request<Body>,
) -> Result<(Encoding, Body), RequestError> {
    let res = client.send(req).await?;
    let encoding = Encoding::of(
        res.headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    let code = res.status();
    if code.is_success() {
        return Ok((encoding, res.into_body()));
    }
    let body = read_at_most(res.into_body(), MAX_ERROR_BODY_BYTES).await?;
    Err(RequestError::Api(status_of(code.as_u16(), encoding, &body)))
}

/// The first `max` bytes of `body` (the rest is not read).
async fn read_at_most(mut body: Body, max: usize) -> Result<Vec<u8>, RequestError> {
    let mut out = Vec::new();
    while out.len() < max {
        let Some(frame) = body.frame().await else {
            break;
        };
        if let Ok(data) = frame?.into_data() {
            out.extend_from_slice(&data[..data.len().min(max - out.len())]);
        }
    }
    Ok(out)
}

/// The `Status` of an error body, or the body's text when it is none.
fn status_of(code: u16, encoding: Encoding, body: &[u8]) -> ApiStatus {
    let read = match encoding {
        Encoding::Protobuf => envelope::open(body)
            .ok()
            .and_then(|u| envelope::status(u.raw).ok())
            .map(|s| (s.reason.unwrap_or_default(), s.message.unwrap_or_default())),
        Encoding::Json => serde_json::from_slice::<kube::core::Status>(body)
            .ok()
            .map(|s| (s.reason, s.message)),
    };
    let (reason, message) = read.unwrap_or_else(|| {
        (
            String::new(),
            String::from_utf8_lossy(body).trim().to_string(),
        )
    });
    ApiStatus {
        code,
        reason,
        message,
    }
}

/// Lists one page of `K`.
pub async fn list<K: Watched>(
    client: &kube::Client,
    media: &MediaTypes,
    params: &ListParams,
) -> Result<Page<K>, RequestError> {
    let req = kube::core::Request::new(K::url_path(&(), None))
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let mut req = with_accept(with_cached_version(req, params)?, media)?;
    req.extensions_mut().insert(ReadIncrementally);
    let (encoding, mut body) = send(client, req).await?;
    let decode = |source| RequestError::Decode { encoding, source };
    let mut reader = ListReader::<K>::new(encoding);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            reader.push(&data).map_err(decode)?;
        }
    }
    reader.finish().map_err(decode)
}

/// Adds `resourceVersion=0` to a first page that asks for it with a `limit`, which kube's request builder
/// leaves out: client-go's reflector sends both (`limit=500&resourceVersion=0`, no
/// `resourceVersionMatch`), and the API server answers such a list from its watch cache, whole, the
/// limit ignored.
fn with_cached_version(
    mut req: http::Request<Vec<u8>>,
    params: &ListParams,
) -> Result<http::Request<Vec<u8>>, RequestError> {
    let first_cached_page = params.resource_version.as_deref() == Some("0")
        && params.limit.is_some()
        && params.continue_token.is_none();
    if !first_cached_page
        || req
            .uri()
            .query()
            .is_some_and(|q| q.contains("resourceVersion="))
    {
        return Ok(req);
    }
    let mut uri = req.uri().to_string();
    uri.push_str(if uri.contains('?') { "&" } else { "?" });
    uri.push_str("resourceVersion=0");
    *req.uri_mut() = uri.parse().map_err(|e: http::uri::InvalidUri| {
        RequestError::Client(kube::Error::BuildRequest(
            kube::core::request::Error::Validation(e.to_string()),
        ))
    })?;
    Ok(req)
}

/// A list body decoded as it arrives, item by item, in the encoding its response announced
/// (the bounds are in [`crate::cluster::body_limit`]).
#[derive(Debug)]
pub enum ListReader<K> {
    /// `application/json`.
    Json(JsonList<K>),
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf(ProtoList<K>),
}

impl<K: Watched> ListReader<K> {
    /// An empty reader for a body in `encoding`.
    pub fn new(encoding: Encoding) -> Self {
        match encoding {
            Encoding::Json => ListReader::Json(JsonList::new()),
            Encoding::Protobuf => ListReader::Protobuf(ProtoList::new()),
        }
    }

    /// Reads the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), BodyError> {
        match self {
            ListReader::Json(r) => r.push(chunk),
            ListReader::Protobuf(r) => r.push(chunk),
        }
    }

    /// The page, once the whole body has been pushed.
    pub fn finish(self) -> Result<Page<K>, BodyError> {
        match self {
            ListReader::Json(r) => r.finish(),
            ListReader::Protobuf(r) => r.finish(),
        }
    }
}

/// Decodes a whole list body at once (benches and the fuzz targets compare the incremental
/// [`ListReader`] with it); each item is decoded on its own, so only a malformed list fails.
pub fn decode_page<K: Watched>(encoding: Encoding, body: &[u8]) -> Result<Page<K>, BodyError> {
    match encoding {
        Encoding::Json => {
            let list: ObjectList<Decoded<K>> =
                serde_json::from_slice(body).map_err(BodyError::Json)?;
            Ok(Page {
                resource_version: list.metadata.resource_version.unwrap_or_default(),
                continue_token: list.metadata.continue_.unwrap_or_default(),
                items: list.items,
                encoding,
            })
        }
        Encoding::Protobuf => {
            let unknown = envelope::open(body).map_err(BodyError::Envelope)?;
            let (meta, items) = envelope::list_items(unknown.raw).map_err(BodyError::Envelope)?;
            Ok(Page {
                resource_version: meta.resource_version.unwrap_or_default(),
                continue_token: meta.r#continue.unwrap_or_default(),
                items: items.into_iter().map(Decoded::from_protobuf).collect(),
                encoding,
            })
        }
    }
}

/// Starts a watch of `K` from `version`; the events are decoded as they arrive.
pub async fn watch<K: Watched>(
    client: &kube::Client,
    media: &MediaTypes,
    params: &WatchParams,
    version: &str,
) -> Result<(Encoding, Events<K>), RequestError> {
    let req = kube::core::Request::new(K::url_path(&(), None))
        .watch(params, version)
        .map_err(kube::Error::BuildRequest)?;
    let mut req = with_accept(req, media)?;
    // As kube's client does: no compressed watch streams.
    req.headers_mut()
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    let (encoding, body) = send(client, req).await?;
    Ok((encoding, events(encoding, body).boxed()))
}

/// The body of a watch response as decoded events.
fn events<K: Watched>(
    encoding: Encoding,
    body: Body,
) -> impl Stream<Item = Result<WatchItem<K>, RequestError>> + Send {
    Framer::new(Framing::of(encoding))
        .frames(body.into_data_stream())
        .map(move |frame| match frame {
            Ok(frame) => decode_event(encoding, &frame)
                .map_err(|source| RequestError::Decode { encoding, source }),
            Err(e) => Err(e),
        })
}

/// Decodes one watch event frame.
pub fn decode_event<K: Watched>(
    encoding: Encoding,
    frame: &[u8],
) -> Result<WatchItem<K>, BodyError> {
    match encoding {
        Encoding::Json => json_event(frame),
        Encoding::Protobuf => protobuf_event(frame),
    }
}

fn json_event<K: Watched>(frame: &[u8]) -> Result<WatchItem<K>, BodyError> {
    match serde_json::from_slice::<WatchEvent<Decoded<K>>>(frame) {
        Ok(WatchEvent::Added(k) | WatchEvent::Modified(k)) => Ok(WatchItem::Apply(k)),
        Ok(WatchEvent::Deleted(k)) => Ok(WatchItem::Delete(k)),
        Ok(WatchEvent::Bookmark(b)) => Ok(WatchItem::Bookmark(b.metadata.resource_version)),
        Ok(WatchEvent::Error(s)) => Ok(WatchItem::Error(ApiStatus {
            code: s.code,
            reason: s.reason,
            message: s.message,
        })),
        Err(e) => Err(BodyError::Json(e)),
    }
}

fn protobuf_event<K: Watched>(frame: &[u8]) -> Result<WatchItem<K>, BodyError> {
    let (kind, object) = envelope::watch_event(frame).map_err(BodyError::Envelope)?;
    let raw = envelope::open(object).map_err(BodyError::Envelope)?.raw;
    match kind.as_str() {
        "ADDED" | "MODIFIED" => Ok(WatchItem::Apply(Decoded::from_protobuf(raw))),
        "DELETED" => Ok(WatchItem::Delete(Decoded::from_protobuf(raw))),
        "BOOKMARK" => {
            let marker = Decoded::<K>::from_protobuf(raw);
            Ok(WatchItem::Bookmark(
                marker.meta().resource_version.clone().unwrap_or_default(),
            ))
        }
        "ERROR" => {
            let s = envelope::status(raw).map_err(BodyError::Envelope)?;
            Ok(WatchItem::Error(ApiStatus {
                code: s.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(500),
                reason: s.reason.unwrap_or_default(),
                message: s.message.unwrap_or_default(),
            }))
        }
        other => Err(BodyError::EventType(other.to_string())),
    }
}

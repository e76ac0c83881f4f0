//! List and watch of one kind, in protobuf or JSON, as a stream of `kube::runtime::watcher` events.
//!
//! kube's own watcher decodes JSON only (its `Api` sends no `Accept` header and reads bodies with
//! serde_json), so the watchers use this loop instead; kube still provides the client (kubeconfig,
//! TLS, auth, the rate limiter and other layers), the request URLs and query parameters
//! (`kube::core::Request`, `ListParams`, `WatchParams`), the event type and the backoff. The loop
//! follows kube's `watcher` step by step: paged list (`Init`, `InitApply`…, `InitDone`), then a watch
//! from the list's resourceVersion with bookmarks, a re-watch from the last resourceVersion when a
//! stream ends, fails or goes idle (also after a frame that cannot be decoded, as client-go's
//! reflector), a relist after 410 Gone (a consistent one, as client-go's). Each request asks for the
//! configured media types ([`MediaTypes`]); each response is decoded by the encoding it announces, so
//! a server that does not offer protobuf is read in JSON.

pub mod body_error;
pub mod frames;
pub mod list_json;
pub mod list_proto;
pub mod media;
pub mod request;
pub mod response;

pub use media::{Encoding, MediaTypes};
pub use request::Watched;
pub use response::{ApiStatus, RequestError};

use crate::cluster::decode::Decoded;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::runtime::watcher::{Config, Event, ListSemantic};
use request::{Events, WatchItem};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use thiserror::Error;

/// A kube client and the media types its lists and watches ask for.
#[derive(Clone)]
pub struct ApiClient {
    /// The client.
    pub client: kube::Client,
    /// The `Accept` header of lists and watches.
    pub media: MediaTypes,
}

impl ApiClient {
    /// `client` asking for `media`.
    pub fn new(client: kube::Client, media: MediaTypes) -> Self {
        Self { client, media }
    }
}

impl From<kube::Client> for ApiClient {
    /// The client with the default media types (protobuf, JSON as the fallback).
    fn from(client: kube::Client) -> Self {
        Self::new(client, MediaTypes::default())
    }
}

/// Why the loop reports an error (it goes on after each: the caller backs off between polls).
#[derive(Debug, Error)]
pub enum Error {
    /// A list page failed.
    #[error("list failed: {0}")]
    List(#[source] RequestError),
    /// A watch could not be started.
    #[error("watch failed to start: {0}")]
    WatchStart(#[source] RequestError),
    /// A watch stream failed (a frame could not be read or was too long, the connection broke): the
    /// next watch starts from the last resourceVersion applied.
    #[error("watch stream failed: {0}")]
    Watch(#[source] RequestError),
    /// The API server sent an ERROR event (410 Gone: a relist follows).
    #[error("the API server ended the watch: {0}")]
    WatchError(ApiStatus),
    /// A list or a readable object came without a resourceVersion (a relist follows).
    #[error("no resourceVersion in a list or watch event")]
    NoResourceVersion,
}

/// Added to the watch timeout before a silent stream counts as dead, as kube's watcher does.
const IDLE_MARGIN: Duration = Duration::from_secs(5);
/// kube's default watch timeout.
const DEFAULT_TIMEOUT_SECS: u32 = 290;

enum State<K> {
    Empty,
    Page {
        continue_token: Option<String>,
        objects: VecDeque<Decoded<K>>,
        version: Option<String>,
    },
    Listed {
        version: String,
    },
    Watching {
        version: String,
        events: Events<K>,
    },
}

struct Loop {
    api: ApiClient,
    config: Config,
    kind: &'static str,
    /// The next list must be consistent (`resourceVersion` unset): set by a 410 Gone, as client-go's
    /// reflector relists from etcd when its version is no longer available; cleared by a complete list.
    consistent: AtomicBool,
}

/// Lists and watches `K` with the selectors, page size, timeout and bookmarks of `config` (only
/// `InitialListStrategy::ListWatch`). The stream never ends; errors are items (back off on them).
pub fn list_watch<K: Watched>(
    api: ApiClient,
    config: Config,
) -> impl Stream<Item = Result<Event<Decoded<K>>, Error>> + Send {
    let ctx = Arc::new(Loop {
        api,
        config,
        kind: kind_name::<K>(),
        consistent: AtomicBool::new(false),
    });
    futures::stream::unfold(State::Empty, move |state| {
        let ctx = ctx.clone();
        async move {
            let mut state = state;
            loop {
                match ctx.step(state).await {
                    (Some(item), next) => return Some((item, next)),
                    (None, next) => state = next,
                }
            }
        }
    })
}

fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Service" => "Service",
        "EndpointSlice" => "EndpointSlice",
        "Node" => "Node",
        _ => "object",
    }
}

type Step<K> = (Option<Result<Event<Decoded<K>>, Error>>, State<K>);

impl Loop {
    /// The first page asks for `resourceVersion=0` under `ListSemantic::Any` (served whole from the
    /// API server's watch cache, as client-go's first list), the others for the most recent state; a
    /// page after the first carries only its continue token (the API server refuses both).
    fn list_params(&self, continue_token: Option<String>) -> ListParams {
        let cached = self.config.list_semantic == ListSemantic::Any
            && continue_token.is_none()
            && !self.consistent.load(Ordering::Relaxed);
        let (resource_version, version_match) = if cached {
            (Some("0".to_string()), Some(VersionMatch::NotOlderThan))
        } else {
            (None, None)
        };
        ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            resource_version,
            version_match,
            limit: self.config.page_size,
            continue_token,
            ..ListParams::default()
        }
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            timeout: self.config.timeout,
            bookmarks: self.config.bookmarks,
            send_initial_events: false,
        }
    }

    /// One step of the loop; `None` = no item yet, step again.
    async fn step<K: Watched>(&self, state: State<K>) -> Step<K> {
        match state {
            State::Empty => (
                Some(Ok(Event::Init)),
                State::Page {
                    continue_token: None,
                    objects: VecDeque::new(),
                    version: None,
                },
            ),
            State::Page {
                continue_token,
                mut objects,
                version,
            } => {
                if let Some(next) = objects.pop_front() {
                    let state = State::Page {
                        continue_token,
                        objects,
                        version,
                    };
                    return (Some(Ok(Event::InitApply(next))), state);
                }
                match (continue_token, version) {
                    (None, Some(version)) => {
                        self.consistent.store(false, Ordering::Relaxed);
                        (Some(Ok(Event::InitDone)), State::Listed { version })
                    }
                    (token, _) => self.list_page(token).await,
                }
            }
            State::Listed { version } => self.start_watch(version).await,
            State::Watching { version, events } => self.next_event(version, events).await,
        }
    }

    async fn list_page<K: Watched>(&self, token: Option<String>) -> Step<K> {
        match request::list::<K>(&self.api.client, &self.api.media, &self.list_params(token)).await
        {
            Ok(page) => {
                tracing::debug!(kind = self.kind, encoding = %page.encoding, items = page.items.len(), "listed a page");
                let version = Some(page.resource_version).filter(|v| !v.is_empty());
                let continue_token = Some(page.continue_token).filter(|c| !c.is_empty());
                if version.is_none() && continue_token.is_none() {
                    return (Some(Err(Error::NoResourceVersion)), State::Empty);
                }
                let state = State::Page {
                    continue_token,
                    objects: page.items.into(),
                    version,
                };
                (None, state)
            }
            Err(e) => (Some(Err(Error::List(e))), State::Empty),
        }
    }

    async fn start_watch<K: Watched>(&self, version: String) -> Step<K> {
        let params = self.watch_params();
        match request::watch::<K>(&self.api.client, &self.api.media, &params, &version).await {
            Ok((encoding, events)) => {
                tracing::debug!(kind = self.kind, %encoding, %version, "watching");
                (None, State::Watching { version, events })
            }
            // The version is gone: only a relist can go on.
            Err(RequestError::Api(s)) if s.code == 410 => {
                self.consistent.store(true, Ordering::Relaxed);
                (
                    Some(Err(Error::WatchStart(RequestError::Api(s)))),
                    State::Empty,
                )
            }
            Err(e) => (Some(Err(Error::WatchStart(e))), State::Listed { version }),
        }
    }

    async fn next_event<K: Watched>(&self, version: String, mut events: Events<K>) -> Step<K> {
        let next = match self.config.timeout {
            Some(0) => events.next().await,
            t => {
                let idle = Duration::from_secs(u64::from(t.unwrap_or(DEFAULT_TIMEOUT_SECS)));
                tokio::time::timeout(idle + IDLE_MARGIN, events.next())
                    .await
                    .unwrap_or_else(|_| {
                        tracing::debug!(kind = self.kind, "watch stream idle, watching again");
                        None
                    })
            }
        };
        let watching = |version| State::Watching { version, events };
        match next {
            Some(Ok(WatchItem::Apply(obj))) => object_event(Event::Apply, obj, version, watching),
            Some(Ok(WatchItem::Delete(obj))) => object_event(Event::Delete, obj, version, watching),
            Some(Ok(WatchItem::Bookmark(v))) if !v.is_empty() => (None, watching(v)),
            Some(Ok(WatchItem::Bookmark(_))) => (None, watching(version)),
            Some(Ok(WatchItem::Error(s))) => {
                let next = if s.code == 410 {
                    self.consistent.store(true, Ordering::Relaxed);
                    State::Empty
                } else {
                    watching(version)
                };
                (Some(Err(Error::WatchError(s))), next)
            }
            // As client-go's reflector: a frame that cannot be read (or a broken stream) ends the
            // watch, and the next one starts from the last resourceVersion applied, so the change
            // in that frame comes again (or a 410 makes it a relist).
            Some(Err(e)) => (Some(Err(Error::Watch(e))), State::Listed { version }),
            None => (None, State::Listed { version }),
        }
    }
}

/// An object event moves the resourceVersion on. An unreadable object without one keeps the last
/// (it is reported and skipped, never a relist); a readable one without one forces a relist, as in
/// kube's watcher.
fn object_event<K>(
    event: fn(Decoded<K>) -> Event<Decoded<K>>,
    obj: Decoded<K>,
    version: String,
    watching: impl FnOnce(String) -> State<K>,
) -> Step<K>
where
    K: Resource<DynamicType = ()>,
    Decoded<K>: Resource,
{
    let seen = obj
        .meta()
        .resource_version
        .clone()
        .filter(|v| !v.is_empty());
    match (seen, &obj) {
        (Some(v), _) => (Some(Ok(event(obj))), watching(v)),
        (None, Decoded::Unreadable(_)) => (Some(Ok(event(obj))), watching(version)),
        (None, Decoded::Object(_)) => (Some(Err(Error::NoResourceVersion)), State::Empty),
    }
}

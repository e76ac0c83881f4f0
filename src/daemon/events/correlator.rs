//! The bookkeeping behind [`Events`](super::Events), pure and synchronous (the clock is an argument):
//! which Event series exist, which writes are waiting, and which objects have used up their
//! allowance. As client-go's events.k8s.io broadcaster:
//! - the first occurrence of an Event (same object, type, reason and action) is created; the second
//!   sets `series.count` 2 with a patch at once; later ones only count, and the count is written by
//!   a periodic refresh or when the series ends ([`Limits::finish_after`] without an occurrence);
//! - a bounded queue of writes (upstream: 1,000, dropping when full);
//!
//! and, as client-go's older recorder, a token bucket per object (25 Events, then one per 5 minutes).
//! Every table is bounded; the least recently seen entries go first.

use crate::cluster::model::ServiceName;
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

/// The bounds of a [`Correlator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Writes waiting for the API server (upstream: 1,000).
    pub queue: usize,
    /// Series remembered (client-go's correlator: an LRU of 4,096).
    pub series: usize,
    /// Objects whose allowance is remembered.
    pub objects: usize,
    /// Events an object may cause back to back.
    pub object_burst: u32,
    /// Time for an object to earn one more Event.
    pub object_refill: Duration,
    /// A series with no occurrence for this long is over: its last count is written, then it is
    /// forgotten (upstream: 6 minutes).
    pub finish_after: Duration,
    /// How often the counts of running series are written (upstream: 30 minutes).
    pub refresh_every: Duration,
    /// Attempts of one write that failed for a reason that may pass (transport, 429, 5xx).
    pub attempts: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            queue: 1000,
            series: 4096,
            objects: 4096,
            object_burst: 25,
            object_refill: Duration::from_secs(300),
            finish_after: Duration::from_secs(360),
            refresh_every: Duration::from_secs(1800),
            attempts: 3,
        }
    }
}

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Regarding {
    /// The own Node.
    Node,
    /// A Service.
    Service(ServiceName),
}

/// What makes two Events the same (upstream's `eventKey`; the reporter is always this process).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub regarding: Regarding,
    pub warning: bool,
    pub reason: String,
    pub action: String,
}

/// What [`Correlator::record`] did with an occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// A new Event, queued for creation.
    Queued,
    /// Counted into its series (a write is queued when it is the second occurrence).
    Counted,
    /// Dropped: the object used up its allowance.
    RateLimited,
    /// Dropped: the queue is full.
    QueueFull,
}

impl Recorded {
    /// The `result` label of this outcome in `kubeproxy_rs_events_total`.
    pub fn label(self) -> &'static str {
        match self {
            Recorded::Queued => "queued",
            Recorded::Counted => "counted",
            Recorded::RateLimited => "rate_limited",
            Recorded::QueueFull => "queue_full",
        }
    }
}

/// One write for the publisher: create the Event, or update its series.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub key: Key,
    /// The Event object's name.
    pub name: String,
    /// `true`: create (POST), `false`: update `series` (PATCH).
    pub create: bool,
    /// Occurrences so far (the series count when 2 or more).
    pub count: i32,
    /// First occurrence (`eventTime`).
    pub first: Timestamp,
    /// Latest occurrence (`series.lastObservedTime`).
    pub last: Timestamp,
    /// The note of the first occurrence.
    pub note: Option<String>,
}

/// How a [`Write`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written.
    Done,
    /// The Event to update is gone (404): create it again.
    Gone,
    /// Failed for a reason that may pass: try again (up to [`Limits::attempts`]).
    Retry,
    /// Refused: give up on this write.
    Failed,
}

struct Series {
    name: String,
    first: Timestamp,
    note: Option<String>,
    /// Occurrences so far.
    count: i32,
    /// The count the API server has (0: not created yet).
    written: i32,
    last: Timestamp,
    last_seen: Instant,
    queued: bool,
    /// Forgotten once its queued write is done.
    finishing: bool,
    attempts: u32,
}

/// What happens to a series after a write.
enum Next {
    Queue,
    Forget,
    Keep,
}

/// A token bucket per object.
struct Allowance {
    tokens: f64,
    at: Instant,
}

/// Series, queued writes and per-object allowances, all bounded by [`Limits`].
pub struct Correlator {
    limits: Limits,
    node_name: String,
    series: HashMap<Key, Series>,
    queue: VecDeque<Key>,
    allowances: HashMap<Regarding, Allowance>,
    next_refresh: Option<Instant>,
    last_name_nanos: i128,
}

impl Correlator {
    /// Nothing recorded yet; Node Events are named after `node_name`.
    pub fn new(limits: Limits, node_name: &str) -> Self {
        Correlator {
            limits,
            node_name: node_name.to_string(),
            series: HashMap::new(),
            queue: VecDeque::new(),
            allowances: HashMap::new(),
            next_refresh: None,
            last_name_nanos: 0,
        }
    }

    /// Writes waiting.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Series remembered.
    #[cfg(test)]
    pub fn series(&self) -> usize {
        self.series.len()
    }

    /// One occurrence of the Event `key` with `note` (already cut to the API's limit), at `now`
    /// (monotonic) and `wall` (the Event's timestamps).
    pub fn record(
        &mut self,
        key: Key,
        note: Option<String>,
        now: Instant,
        wall: Timestamp,
    ) -> Recorded {
        if let Some(s) = self.series.get_mut(&key) {
            s.count = s.count.saturating_add(1);
            s.last = wall;
            s.last_seen = now;
            s.finishing = false;
            // The second occurrence is written at once; later ones wait for the refresh.
            let second = s.written == 1 && !s.queued;
            if second && self.take_allowance(&key.regarding, now) {
                self.enqueue(key);
            }
            return Recorded::Counted;
        }
        if self.queue.len() >= self.limits.queue {
            return Recorded::QueueFull;
        }
        if !self.take_allowance(&key.regarding, now) {
            return Recorded::RateLimited;
        }
        if self.series.len() >= self.limits.series {
            self.evict_series();
            if self.series.len() >= self.limits.series {
                return Recorded::QueueFull;
            }
        }
        let name = self.event_name(&key.regarding, wall);
        let series = Series {
            name,
            first: wall,
            note,
            count: 1,
            written: 0,
            last: wall,
            last_seen: now,
            queued: false,
            finishing: false,
            attempts: 0,
        };
        self.series.insert(key.clone(), series);
        self.enqueue(key);
        Recorded::Queued
    }

    /// The next write to make, if any.
    pub fn next_write(&mut self) -> Option<Write> {
        while let Some(key) = self.queue.pop_front() {
            let Some(s) = self.series.get(&key) else {
                continue;
            };
            return Some(Write {
                name: s.name.clone(),
                create: s.written == 0,
                count: s.count,
                first: s.first,
                last: s.last,
                note: s.note.clone(),
                key,
            });
        }
        None
    }

    /// How `write` went; may queue the next write of its series.
    pub fn written(&mut self, write: &Write, outcome: Outcome) {
        let attempts = self.limits.attempts;
        let Some(s) = self.series.get_mut(&write.key) else {
            return;
        };
        s.queued = false;
        let next = match outcome {
            Outcome::Done => {
                s.written = s.written.max(write.count);
                s.attempts = 0;
                if s.finishing {
                    Next::Forget
                } else if s.written == 1 && s.count >= 2 {
                    // Repeated while being created: show the series now.
                    Next::Queue
                } else {
                    Next::Keep
                }
            }
            Outcome::Gone => {
                s.written = 0;
                Next::Queue
            }
            Outcome::Retry if s.attempts + 1 < attempts => {
                s.attempts += 1;
                Next::Queue
            }
            Outcome::Retry | Outcome::Failed => {
                s.attempts = 0;
                // Never created, or over: forget it (a later occurrence starts afresh).
                if s.written == 0 || s.finishing {
                    Next::Forget
                } else {
                    Next::Keep
                }
            }
        };
        match next {
            Next::Queue => self.enqueue(write.key.clone()),
            Next::Forget => {
                self.series.remove(&write.key);
            }
            Next::Keep => {}
        }
    }

    /// Ends the series with no occurrence for [`Limits::finish_after`] (queuing their last count),
    /// and every [`Limits::refresh_every`] queues the counts of the running ones.
    pub fn maintain(&mut self, now: Instant) {
        let refresh = self.next_refresh.is_none_or(|t| now >= t);
        if refresh {
            self.next_refresh = Some(now + self.limits.refresh_every);
        }
        let mut over = Vec::new();
        let mut due = Vec::new();
        for (key, s) in &mut self.series {
            if s.queued {
                continue;
            }
            let dirty = s.count > s.written;
            if now.saturating_duration_since(s.last_seen) >= self.limits.finish_after {
                s.finishing = true;
                if dirty { &mut due } else { &mut over }.push(key.clone());
            } else if refresh && dirty {
                due.push(key.clone());
            }
        }
        for key in over {
            self.series.remove(&key);
        }
        for key in due {
            if self.queue.len() >= self.limits.queue {
                break;
            }
            self.enqueue(key);
        }
    }

    /// When [`Self::maintain`] should run next (the earlier of the refresh and the first series end).
    pub fn next_maintenance(&self, now: Instant) -> Instant {
        let refresh = self.next_refresh.unwrap_or(now + self.limits.refresh_every);
        self.series
            .values()
            .filter(|s| !s.queued)
            .map(|s| s.last_seen + self.limits.finish_after)
            .fold(refresh, Instant::min)
            .max(now)
    }

    fn enqueue(&mut self, key: Key) {
        if let Some(s) = self.series.get_mut(&key)
            && !s.queued
            && self.queue.len() < self.limits.queue
        {
            s.queued = true;
            self.queue.push_back(key);
        }
    }

    /// Takes one Event from `regarding`'s allowance if it has one.
    fn take_allowance(&mut self, regarding: &Regarding, now: Instant) -> bool {
        let burst = f64::from(self.limits.object_burst.max(1));
        let rate = 1.0 / self.limits.object_refill.as_secs_f64().max(1e-9);
        if !self.allowances.contains_key(regarding) && self.allowances.len() >= self.limits.objects
        {
            evict_oldest(&mut self.allowances, |a| Some(a.at), self.limits.objects);
        }
        let a = self
            .allowances
            .entry(regarding.clone())
            .or_insert(Allowance {
                tokens: burst,
                at: now,
            });
        let earned = now.saturating_duration_since(a.at).as_secs_f64() * rate;
        a.tokens = (a.tokens + earned).min(burst);
        a.at = now;
        if a.tokens >= 1.0 {
            a.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Forgets the least recently seen quarter of the series with no write queued.
    fn evict_series(&mut self) {
        let cap = self.limits.series;
        evict_oldest(
            &mut self.series,
            |s| (!s.queued).then_some(s.last_seen),
            cap,
        );
    }

    /// `<object>.<nanoseconds in hex>`, as upstream names Events; unique within this process.
    fn event_name(&mut self, regarding: &Regarding, wall: Timestamp) -> String {
        let nanos = wall.as_nanosecond().max(self.last_name_nanos + 1);
        self.last_name_nanos = nanos;
        let object = match regarding {
            Regarding::Node => self.node_name.as_str(),
            Regarding::Service(s) => &s.name,
        };
        format!("{object}.{nanos:x}")
    }
}

/// Removes about a quarter of `cap` entries of `map`, the ones with the oldest `age` (entries whose
/// `age` is `None` stay).
fn evict_oldest<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    age: impl Fn(&V) -> Option<Instant>,
    cap: usize,
) {
    let mut candidates: Vec<(Instant, K)> = map
        .iter()
        .filter_map(|(k, v)| age(v).map(|t| (t, k.clone())))
        .collect();
    let n = (cap / 4).max(1).min(candidates.len());
    if n == 0 {
        return;
    }
    candidates.select_nth_unstable_by_key(n - 1, |(t, _)| *t);
    for (_, k) in candidates.into_iter().take(n) {
        map.remove(&k);
    }
}

#[cfg(test)]
mod tests;

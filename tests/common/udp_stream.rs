//! A UDP client sending numbered datagrams at a fixed rate, each answer matched to its datagram: it tells
//! how many datagrams a change lost, and whether the flow came back. [`Mode::Held`] keeps one flow alive
//! (one connected socket, so one source port, as a statsd client or a caching resolver holding its
//! socket); [`Mode::PerQuery`] opens a new socket per datagram and waits for its answer (as glibc's
//! resolver does).
//!
//! Sockets are connected, so the kernel drops an answer that comes back from another address or port
//! than the one the datagram was sent to (as a resolver would): a reply whose source a stale conntrack
//! entry rewrote counts as lost. The pods' echo servers ([`super::netns::Pod::serve_udp_echo`]) answer
//! `<pod name> <payload>`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the stream recorded, indexed by sequence number.
#[derive(Default)]
struct Record {
    /// Send time of each datagram, from the stream's start.
    sent: Vec<Duration>,
    /// First answer to each datagram: when, and which pod.
    answers: Vec<Option<(Duration, String)>>,
    /// Send errors (ICMP errors reported on the connected socket).
    errors: usize,
}

/// How the client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One connected socket for every datagram: one long-lived flow.
    Held,
    /// A new connected socket per datagram, waiting up to [`PER_QUERY_WAIT`] for its answer before the
    /// next (which is sent at the next interval boundary).
    PerQuery,
}

/// How long a [`Mode::PerQuery`] datagram waits for its answer.
pub const PER_QUERY_WAIT: Duration = Duration::from_millis(500);

/// One running client.
pub struct UdpStream {
    /// What it is (for messages).
    pub name: String,
    start: Instant,
    interval: Duration,
    stop: Arc<AtomicBool>,
    record: Arc<Mutex<Record>>,
    threads: Vec<JoinHandle<()>>,
}

/// The datagrams of one time window.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Datagrams sent in the window.
    pub sent: usize,
    /// Of those, never answered.
    pub lost: usize,
    /// Query time lost: for each unanswered datagram, the time until the next datagram was sent.
    pub lost_time: Duration,
    /// The longest run of consecutive unanswered datagrams, from the first one's send to the next answered
    /// one's.
    pub longest_outage: Duration,
    /// Answers per pod.
    pub by: BTreeMap<String, usize>,
    /// Send times of the first and the last unanswered datagram.
    pub lost_span: Option<(Duration, Duration)>,
}

impl Window {
    /// One line: sent, lost, lost time, longest outage, when (relative to `origin`), who answered.
    pub fn describe(&self, origin: Duration) -> String {
        let span = self.lost_span.map(|(a, b)| {
            format!(
                " at {:.2}-{:.2} s",
                a.saturating_sub(origin).as_secs_f64(),
                b.saturating_sub(origin).as_secs_f64()
            )
        });
        format!(
            "sent {:>5} lost {:>4} ({:>5} ms of queries, longest outage {:>5} ms{}) answered by {:?}",
            self.sent,
            self.lost,
            self.lost_time.as_millis(),
            self.longest_outage.as_millis(),
            span.unwrap_or_default(),
            self.by
        )
    }
}

impl UdpStream {
    /// Starts sending to `target` every `interval`, from the network namespace `netns` (the root one when
    /// None). Panics when the socket cannot be made.
    pub fn start(
        name: &str,
        netns: Option<&str>,
        target: SocketAddr,
        mode: Mode,
        interval: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let record = Arc::new(Mutex::new(Record::default()));
        let start = Instant::now();
        let threads = match mode {
            Mode::Held => {
                let sock = socket_in(netns, target);
                let recv = sock.try_clone().expect("clone the UDP socket");
                let (stop2, record2) = (stop.clone(), record.clone());
                let (stop3, record3) = (stop.clone(), record.clone());
                vec![
                    std::thread::spawn(move || {
                        send_loop(start, interval, &stop2, &record2, |seq, _| {
                            sock.send(seq.as_bytes()).is_ok()
                        })
                    }),
                    std::thread::spawn(move || recv_loop(&recv, start, &stop3, &record3)),
                ]
            }
            Mode::PerQuery => {
                let netns = netns.map(str::to_string);
                let (stop2, record2) = (stop.clone(), record.clone());
                vec![std::thread::spawn(move || {
                    if let Some(ns) = &netns {
                        super::netns::enter_netns(ns)
                            .unwrap_or_else(|e| panic!("enter {ns}: {e:#}"));
                    }
                    send_loop(start, interval, &stop2, &record2, |seq, record| {
                        query(target, seq, start, record)
                    })
                })]
            }
        };
        UdpStream {
            name: name.to_string(),
            start,
            interval,
            stop,
            record,
            threads,
        }
    }

    /// Time since the stream started (to mark a change).
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The sending interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The datagrams sent in `[from, until)`.
    pub fn window(&self, from: Duration, until: Duration) -> Window {
        let r = self.record.lock().unwrap_or_else(|e| e.into_inner());
        let mut w = Window::default();
        // Send time of the first datagram of the current run of unanswered ones.
        let mut run_start: Option<Duration> = None;
        for (seq, at) in r.sent.iter().enumerate() {
            if *at < from || *at >= until {
                continue;
            }
            w.sent += 1;
            let next = r.sent.get(seq + 1).copied().unwrap_or(*at + self.interval);
            match r.answers.get(seq).and_then(|a| a.as_ref()) {
                Some((_, pod)) => {
                    *w.by.entry(pod.clone()).or_default() += 1;
                    if let Some(s) = run_start.take() {
                        w.longest_outage = w.longest_outage.max(*at - s);
                    }
                }
                None => {
                    w.lost += 1;
                    w.lost_time += next.saturating_sub(*at);
                    let first = w.lost_span.map_or(*at, |(f, _)| f);
                    w.lost_span = Some((first, *at));
                    run_start.get_or_insert(*at);
                }
            }
        }
        if let Some(s) = run_start {
            w.longest_outage = w
                .longest_outage
                .max(until.min(self.now()).saturating_sub(s));
        }
        w
    }

    /// The pod that answered the latest answered datagram, if any.
    pub fn last_pod(&self) -> Option<String> {
        let r = self.record.lock().unwrap_or_else(|e| e.into_inner());
        r.answers
            .iter()
            .rev()
            .flatten()
            .next()
            .map(|(_, p)| p.clone())
    }

    /// Waits until a datagram sent after `since` was answered by one of `pods`; false after `timeout`.
    pub fn wait_answer_from(&self, pods: &[&str], since: Duration, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            let w = self.window(since, self.now());
            if pods.iter().any(|p| w.by.contains_key(*p)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Send errors so far (ICMP errors the connected socket reported).
    pub fn errors(&self) -> usize {
        self.record.lock().unwrap_or_else(|e| e.into_inner()).errors
    }
}

impl Drop for UdpStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A UDP socket connected to `target`, made inside `netns` (the namespace stays with the socket).
fn socket_in(netns: Option<&str>, target: SocketAddr) -> UdpSocket {
    let make = move || -> std::io::Result<UdpSocket> {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.connect(target)?;
        s.set_read_timeout(Some(Duration::from_millis(50)))?;
        Ok(s)
    };
    let made = match netns {
        Some(ns) => {
            super::netns::in_netns(ns, make).unwrap_or_else(|e| panic!("enter {ns}: {e:#}"))
        }
        None => make(),
    };
    made.unwrap_or_else(|e| panic!("UDP socket to {target}: {e}"))
}

/// Sends one datagram per `interval` through `send` (given the payload and the record; false when the
/// send failed), recording each first.
fn send_loop(
    start: Instant,
    interval: Duration,
    stop: &AtomicBool,
    record: &Mutex<Record>,
    mut send: impl FnMut(&str, &Mutex<Record>) -> bool,
) {
    let mut seq: u64 = 0;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
        }
        // After a stall, carry on from now rather than sending the missed datagrams in a burst.
        next = (next + interval).max(Instant::now());
        {
            let mut r = record.lock().unwrap_or_else(|e| e.into_inner());
            r.sent.push(start.elapsed());
            r.answers.push(None);
        }
        if !send(&seq.to_string(), record) {
            record.lock().unwrap_or_else(|e| e.into_inner()).errors += 1;
        }
        seq += 1;
    }
}

/// One [`Mode::PerQuery`] datagram: a new socket, one send, one answer awaited.
fn query(target: SocketAddr, seq: &str, start: Instant, record: &Mutex<Record>) -> bool {
    let sock = match UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).and_then(|s| {
        s.connect(target)?;
        s.set_read_timeout(Some(PER_QUERY_WAIT))?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(_) => return false,
    };
    if sock.send(seq.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 512];
    if let Ok(n) = sock.recv(&mut buf) {
        note_answer(&buf[..n], start, record);
    }
    true
}

fn recv_loop(sock: &UdpSocket, start: Instant, stop: &AtomicBool, record: &Mutex<Record>) {
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::Relaxed) {
        if let Ok(n) = sock.recv(&mut buf) {
            note_answer(&buf[..n], start, record);
        }
    }
}

/// Records an answer `<pod> <seq>` against its datagram (the first answer wins).
fn note_answer(answer: &[u8], start: Instant, record: &Mutex<Record>) {
    let text = String::from_utf8_lossy(answer);
    let mut words = text.split_whitespace();
    let (Some(pod), Some(Ok(seq))) = (words.next(), words.next().map(str::parse::<usize>)) else {
        return;
    };
    let mut r = record.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slot @ None) = r.answers.get_mut(seq) {
        *slot = Some((start.elapsed(), pod.to_string()));
    }
}

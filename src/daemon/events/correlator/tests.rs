use super::*;

fn svc(name: &str) -> Regarding {
    Regarding::Service(ServiceName {
        namespace: "ns".into(),
        name: name.into(),
    })
}

fn key(regarding: Regarding, reason: &str) -> Key {
    Key {
        regarding,
        warning: true,
        reason: reason.to_string(),
        action: "Sync".to_string(),
    }
}

/// A correlator, a start instant and a wall clock at 2026-01-01.
fn setup(limits: Limits) -> (Correlator, Instant, Timestamp) {
    let wall: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    (Correlator::new(limits, "node-1"), Instant::now(), wall)
}

/// Takes every queued write, reporting each as `outcome`.
fn drain(c: &mut Correlator, outcome: Outcome) -> Vec<Write> {
    let mut out = Vec::new();
    while let Some(w) = c.next_write() {
        c.written(&w, outcome);
        out.push(w);
    }
    out
}

#[test]
fn repeats_become_one_series_patched_on_the_second_occurrence() {
    let (mut c, t0, wall) = setup(Limits::default());
    let k = key(svc("web"), "InvalidAnnotation");
    assert_eq!(
        c.record(k.clone(), Some("bad".into()), t0, wall),
        Recorded::Queued
    );
    let w = drain(&mut c, Outcome::Done);
    assert_eq!(w.len(), 1);
    assert!(w[0].create && w[0].count == 1, "{w:?}");
    assert!(w[0].name.starts_with("web."), "{}", w[0].name);

    // The second occurrence is patched at once, with the first note kept.
    let later = wall + jiff_secs(5);
    assert_eq!(
        c.record(k.clone(), Some("other".into()), t0, later),
        Recorded::Counted
    );
    let w = drain(&mut c, Outcome::Done);
    assert_eq!(w.len(), 1);
    assert!(
        !w[0].create && w[0].count == 2 && w[0].last == later,
        "{w:?}"
    );
    assert_eq!(w[0].note.as_deref(), Some("bad"));

    // Later ones only count: nothing to write until the series is refreshed or ends.
    for _ in 0..100 {
        assert_eq!(c.record(k.clone(), None, t0, later), Recorded::Counted);
    }
    assert!(c.next_write().is_none());
    assert_eq!(c.series(), 1);
}

#[test]
fn occurrences_while_the_create_waits_go_into_the_create() {
    let (mut c, t0, wall) = setup(Limits::default());
    let k = key(Regarding::Node, "Starting");
    for _ in 0..3 {
        c.record(k.clone(), None, t0, wall);
    }
    let w = drain(&mut c, Outcome::Done);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].create && w[0].count == 3);
    assert!(w[0].name.starts_with("node-1."), "{}", w[0].name);
}

#[test]
fn a_create_that_meets_a_repeat_is_followed_by_the_series_patch() {
    let (mut c, t0, wall) = setup(Limits::default());
    let k = key(svc("web"), "R");
    c.record(k.clone(), None, t0, wall);
    let w = c.next_write().unwrap();
    c.record(k.clone(), None, t0, wall);
    c.written(&w, Outcome::Done);
    let next = c.next_write().expect("the series patch");
    assert!(!next.create && next.count == 2, "{next:?}");
}

#[test]
fn the_queue_is_bounded() {
    let limits = Limits {
        queue: 10,
        ..Limits::default()
    };
    let (mut c, t0, wall) = setup(limits);
    let results: Vec<Recorded> = (0..5000)
        .map(|i| c.record(key(svc(&format!("s{i}")), "R"), None, t0, wall))
        .collect();
    let queued = results.iter().filter(|r| **r == Recorded::Queued).count();
    let full = results
        .iter()
        .filter(|r| **r == Recorded::QueueFull)
        .count();
    assert_eq!((queued, full), (10, 4990));
    assert_eq!(c.queued(), 10);
    assert_eq!(c.series(), 10, "dropped Events leave no series behind");
    // Room again once written.
    drain(&mut c, Outcome::Done);
    assert_eq!(
        c.record(key(svc("late"), "R"), None, t0, wall),
        Recorded::Queued
    );
}

#[test]
fn each_object_has_a_burst_then_one_event_per_refill_period() {
    let (mut c, t0, wall) = setup(Limits::default());
    let web = svc("web");
    let outcomes: Vec<Recorded> = (0..30)
        .map(|i| c.record(key(web.clone(), &format!("R{i}")), None, t0, wall))
        .collect();
    assert!(
        outcomes[..25].iter().all(|r| *r == Recorded::Queued),
        "{outcomes:?}"
    );
    assert!(
        outcomes[25..].iter().all(|r| *r == Recorded::RateLimited),
        "{outcomes:?}"
    );
    // Another object is not affected.
    assert_eq!(
        c.record(key(svc("db"), "R0"), None, t0, wall),
        Recorded::Queued
    );
    // One more after the refill period, not two.
    let t1 = t0 + Duration::from_secs(300);
    assert_eq!(
        c.record(key(web.clone(), "R30"), None, t1, wall),
        Recorded::Queued
    );
    assert_eq!(
        c.record(key(web, "R31"), None, t1, wall),
        Recorded::RateLimited
    );
}

#[test]
fn the_series_and_object_tables_are_bounded() {
    let limits = Limits {
        series: 8,
        objects: 8,
        ..Limits::default()
    };
    let (mut c, t0, wall) = setup(limits);
    for i in 0..100 {
        let t = t0 + Duration::from_secs(i);
        assert_eq!(
            c.record(key(svc(&format!("s{i}")), "R"), None, t, wall),
            Recorded::Queued
        );
        drain(&mut c, Outcome::Done);
        assert!(c.series() <= 8 && c.allowances.len() <= 8);
    }
    // The most recent ones stay.
    let recent = key(svc("s99"), "R");
    assert_eq!(
        c.record(recent, None, t0 + Duration::from_secs(100), wall),
        Recorded::Counted
    );
}

#[test]
fn a_series_that_ends_gets_its_last_count_written_then_is_forgotten() {
    let (mut c, t0, wall) = setup(Limits::default());
    let running = key(svc("web"), "R");
    let single = key(svc("db"), "R");
    c.record(single.clone(), None, t0, wall);
    for _ in 0..5 {
        c.record(running.clone(), None, t0, wall);
    }
    drain(&mut c, Outcome::Done);
    // Not over yet: nothing.
    let t1 = t0 + Duration::from_secs(359);
    c.maintain(t1);
    assert!(c.next_write().is_none());
    let t2 = t0 + Duration::from_secs(360);
    assert!(c.next_maintenance(t1) <= t2);
    c.record(running.clone(), None, t0, wall); // counted: 6, written 5
    c.maintain(t2);
    let w = drain(&mut c, Outcome::Done);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(!w[0].create && w[0].count == 6);
    assert_eq!(c.series(), 0, "both over and forgotten");
}

#[test]
fn running_series_are_refreshed_periodically() {
    let (mut c, t0, wall) = setup(Limits::default());
    let k = key(svc("web"), "R");
    c.maintain(t0); // arms the refresh
    for i in 0..4 {
        c.record(k.clone(), None, t0 + Duration::from_secs(i), wall);
        drain(&mut c, Outcome::Done);
    }
    // Keep it running past the refresh.
    let mut t = t0;
    while t < t0 + Duration::from_secs(1800) {
        t += Duration::from_secs(60);
        c.record(k.clone(), None, t, wall);
        c.maintain(t);
    }
    let w = drain(&mut c, Outcome::Done);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].count, 4 + 30);
}

#[test]
fn failed_writes_are_retried_recreated_or_dropped() {
    let limits = Limits {
        attempts: 3,
        ..Limits::default()
    };
    let (mut c, t0, wall) = setup(limits);
    let k = key(svc("web"), "R");
    c.record(k.clone(), None, t0, wall);
    // Retried twice more, then given up; never created: forgotten.
    let tries = drain(&mut c, Outcome::Retry);
    assert_eq!(tries.len(), 3);
    assert_eq!(c.series(), 0);

    // A refused create is not retried.
    c.record(k.clone(), None, t0, wall);
    assert_eq!(drain(&mut c, Outcome::Failed).len(), 1);
    assert_eq!(c.series(), 0);

    // A patch of an Event deleted meanwhile creates it again.
    c.record(k.clone(), None, t0, wall);
    drain(&mut c, Outcome::Done);
    c.record(k.clone(), None, t0, wall);
    let patch = c.next_write().unwrap();
    assert!(!patch.create);
    c.written(&patch, Outcome::Gone);
    let again = c.next_write().unwrap();
    assert!(again.create && again.count == 2, "{again:?}");
}

#[test]
fn event_names_are_unique() {
    let (mut c, t0, wall) = setup(Limits::default());
    let names: std::collections::BTreeSet<String> = (0..25)
        .map(|i| {
            c.record(key(svc("web"), &format!("R{i}")), None, t0, wall);
            c.next_write().unwrap().name
        })
        .collect();
    assert_eq!(
        names.len(),
        25,
        "each its own name, all at the same instant"
    );
}

fn jiff_secs(s: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(s)
}

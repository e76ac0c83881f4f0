//! Graceful termination: TCP real servers drain at weight 0, UDP ones go at once; a restart adopts the drain.

use super::*;

fn set_conns(k: &Kit, vs: &IpvsServiceKey, addr: &str, port: u16, active: u32, inactive: u32) {
    k.ipvs
        .set_conns(vs, ip(addr), port, active, inactive)
        .unwrap();
}

/// Whether the fake kernel holds real server `addr:port` under `vs`.
fn has_dest(k: &Kit, vs: &IpvsServiceKey, addr: &str, port: u16) -> bool {
    k.dests(vs).unwrap().contains_key(&(ip(addr), port))
}

#[test]
fn graceful_termination_drains_tcp_deletes_udp_and_restores() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    let udp = key("10.96.100.53", 53, Protocol::Udp);
    let idle = key("10.96.100.11", 80, Protocol::Tcp);
    let two = [("10.244.0.11", 8080), ("10.244.0.12", 8080)];
    let both = desired(
        &[
            ("10.96.100.10", 80, Protocol::Tcp, &two),
            (
                "10.96.100.53",
                53,
                Protocol::Udp,
                &[("10.244.0.11", 53), ("10.244.0.12", 53)],
            ),
            ("10.96.100.11", 80, Protocol::Tcp, &two),
        ],
        &[],
    );
    apply(&mut p, &both, true);
    set_conns(&k, &tcp, "10.244.0.12", 8080, 3, 1);
    set_conns(&k, &udp, "10.244.0.12", 53, 0, 5);
    let one = [("10.244.0.11", 8080)];
    let without = desired(
        &[
            ("10.96.100.10", 80, Protocol::Tcp, &one),
            ("10.96.100.53", 53, Protocol::Udp, &[("10.244.0.11", 53)]),
            ("10.96.100.11", 80, Protocol::Tcp, &one),
        ],
        &[],
    );
    let r = apply(&mut p, &without, false);
    assert_eq!(r.graceful_queued, 1, "{r:?}");
    // TCP with connections: weight 0, kept. UDP: gone. TCP without connections: gone.
    assert_eq!(k.dests(&tcp).unwrap()[&(ip("10.244.0.12"), 8080)].weight, 0);
    assert!(!has_dest(&k, &udp, "10.244.0.12", 53));
    assert!(!has_dest(&k, &idle, "10.244.0.12", 8080));
    assert!(
        p.reconciler()
            .graceful()
            .contains(&tcp, ip("10.244.0.12"), 8080)
    );

    // Identical event-driven and full syncs leave the draining server alone.
    k.clear_logs();
    apply(&mut p, &without, false);
    apply(&mut p, &without, true);
    assert!(
        !k.writes().iter().any(|w| w.starts_with("ipvs.")),
        "{:?}",
        k.writes()
    );

    // Still connected: check keeps it.
    let c = p.check_graceful();
    assert_eq!((c.deleted, c.pending), (0, 1));
    // The endpoint comes back: weight 1, dequeued.
    let r = apply(&mut p, &both, false);
    assert_eq!(r.graceful_restored, 1, "{r:?}");
    assert_eq!(k.dests(&tcp).unwrap()[&(ip("10.244.0.12"), 8080)].weight, 1);
    assert!(p.reconciler().graceful().is_empty());

    // Removed again, then connections drain: the check deletes it.
    apply(&mut p, &without, false);
    assert_eq!(k.dests(&tcp).unwrap()[&(ip("10.244.0.12"), 8080)].weight, 0);
    set_conns(&k, &tcp, "10.244.0.12", 8080, 0, 0);
    let c = p.check_graceful();
    assert_eq!((c.deleted, c.pending, c.failures), (1, 0, 0));
    assert!(!has_dest(&k, &tcp, "10.244.0.12", 8080));
}

#[test]
fn restart_adopts_draining_real_servers() {
    let k = Kit::new();
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    {
        let mut p = proxier(&k);
        apply(&mut p, &small(), true);
    }
    // A previous process left a weight-0 real server with connections, and one without.
    let mut ipvs = k.ipvs.clone();
    for a in ["10.244.0.99", "10.244.0.98"] {
        ipvs.add_destination(&tcp, &IpvsDestination::masq(ip(a), 8080, 0))
            .unwrap();
    }
    set_conns(&k, &tcp, "10.244.0.99", 8080, 2, 0);
    k.clear_logs();
    let mut p = proxier(&k);
    let r = apply(&mut p, &small(), false);
    assert_eq!(r.graceful_queued, 1);
    assert_eq!(r.ipvs_destinations.deleted, 1);
    assert!(
        p.reconciler()
            .graceful()
            .contains(&tcp, ip("10.244.0.99"), 8080)
    );
    assert!(
        !k.writes()
            .iter()
            .any(|w| w.starts_with("ipvs.update_destination")),
        "weight already 0"
    );
    set_conns(&k, &tcp, "10.244.0.99", 8080, 0, 0);
    assert_eq!(p.check_graceful().deleted, 1);
    assert!(!has_dest(&k, &tcp, "10.244.0.99", 8080));
}

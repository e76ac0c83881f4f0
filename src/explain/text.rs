//! The explanation for people (`?format=text`, `kube-proxy explain`).

use super::report::{
    EndpointExplanation, NodeExplanation, PortExplanation, ServiceExplanation, VirtualServer,
};
use std::fmt::Write as _;

/// Every Service, one block each.
pub fn node(n: &NodeExplanation) -> String {
    let mut out = format!(
        "Node {}: {} Services programmed\n",
        n.node,
        n.services.len()
    );
    if let Some(e) = &n.kernel_error {
        let _ = writeln!(out, "kernel state unavailable: {e}");
    }
    for s in &n.services {
        out.push('\n');
        out.push_str(&service(s));
    }
    out
}

/// One Service.
pub fn service(s: &ServiceExplanation) -> String {
    let mut out = format!(
        "Service {}/{} on node {}\n",
        s.service.namespace, s.service.name, s.node
    );
    if let Some(e) = &s.kernel_error {
        let _ = writeln!(out, "  kernel state unavailable: {e}");
    }
    for p in &s.problems {
        let _ = writeln!(
            out,
            "  {} annotation {}={:?}: {}",
            if p.kind == "Unsupported" {
                "unsupported"
            } else {
                "ignored"
            },
            p.annotation,
            p.value,
            p.reason
        );
    }
    match (
        s.drift.repaired.is_empty(),
        s.drift.last_full_sync.is_empty(),
    ) {
        (_, true) => out.push_str("  drift: no full sync yet\n"),
        (true, false) => {
            let _ = writeln!(
                out,
                "  drift: none at the last full sync ({})",
                s.drift.last_full_sync
            );
        }
        (false, false) => {
            let _ = writeln!(
                out,
                "  drift: the last full sync ({}) repaired {}",
                s.drift.last_full_sync,
                s.drift.repaired.join(", ")
            );
        }
    }
    for p in s.ports.iter() {
        port(&mut out, p);
    }
    out
}

fn port(out: &mut String, p: &PortExplanation) {
    let name = if p.name.is_empty() {
        "(unnamed)"
    } else {
        &p.name
    };
    let _ = writeln!(
        out,
        "  port {name} {}/{} {}: externalTrafficPolicy {}, internalTrafficPolicy {}",
        p.port, p.protocol, p.family, p.external_traffic_policy, p.internal_traffic_policy
    );
    if let (Some(hc), Some(n)) = (p.health_check_node_port, p.local_endpoints) {
        let _ = writeln!(
            out,
            "    health check node port {hc}: {n} local endpoint(s) ready"
        );
    }
    out.push_str("    virtual servers:\n");
    for v in &p.virtual_servers {
        virtual_server(out, v);
    }
    if p.endpoints.is_empty() {
        out.push_str("    endpoints: none\n");
        return;
    }
    out.push_str("    endpoints:\n");
    for e in &p.endpoints {
        endpoint(out, e);
    }
}

fn endpoint_set(set: &str) -> &'static str {
    match set {
        "local" => "endpoints on this node",
        "clusterNoLocal" => {
            "no endpoint on this node (Local policy): cluster endpoints, reached only from this node and its \
             pods; external clients' replies are dropped"
        }
        _ => "endpoints cluster-wide",
    }
}

fn virtual_server(out: &mut String, v: &VirtualServer) {
    let flags = if v.scheduler_flags.is_empty() {
        String::new()
    } else {
        format!(" [{}]", v.scheduler_flags.join(","))
    };
    let _ = writeln!(
        out,
        "      {} {}:{}  scheduler {}{flags} ({})",
        v.kind,
        bracket(&v.address),
        v.port,
        v.scheduler,
        v.scheduler_note
    );
    let _ = writeln!(
        out,
        "        real servers from {}",
        endpoint_set(v.endpoint_set)
    );
    if !v.programmed {
        out.push_str("        NOT in the kernel's IPVS table\n");
        return;
    }
    if v.real_servers.is_empty() {
        out.push_str("        no real servers: connections are refused\n");
    }
    for r in &v.real_servers {
        let drain = if r.draining {
            format!("  draining for {}s", r.draining_seconds)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "        -> {}:{}  weight {}  active {}  inactive {}{drain}",
            bracket(&r.address),
            r.port,
            r.weight,
            r.active_conns,
            r.inactive_conns
        );
    }
}

fn endpoint(out: &mut String, e: &EndpointExplanation) {
    let state = if e.ready {
        "ready"
    } else if e.terminating && e.serving {
        "terminating (serving)"
    } else if e.terminating {
        "terminating"
    } else {
        "not ready"
    };
    let node = if e.node_name.is_empty() {
        "?"
    } else {
        &e.node_name
    };
    let verdict = if e.selected {
        format!("selected for {}", e.used_by.join(", "))
    } else {
        format!("left out: {}", e.reason_text)
    };
    let _ = writeln!(
        out,
        "      {}:{}  node {node}  {state}  {verdict}",
        bracket(&e.address),
        e.port
    );
}

/// `[addr]` for IPv6 addresses, as in `[fd00::1]:80`.
fn bracket(addr: &str) -> String {
    if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    }
}

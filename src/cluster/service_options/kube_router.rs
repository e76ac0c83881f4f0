//! kube-router's Service annotations other than the scheduler (read in cloudnativelabs/kube-router,
//! `pkg/controllers/proxy/network_services_controller.go`): `service.local` is honoured as kube-router
//! defines it; the others are reported as not supported, with what happens instead.

use super::types::{Annotations, OptionParser, ServiceOptions};

/// `"true"`: external traffic only to endpoints on the receiving node (externalTrafficPolicy Local),
/// internal traffic to every endpoint (internalTrafficPolicy Cluster), whatever the spec says.
pub const KUBE_ROUTER_LOCAL: &str = "kube-router.io/service.local";
/// Direct server return (`tunnel`).
pub const KUBE_ROUTER_DSR: &str = "kube-router.io/service.dsr";
/// Do not program the Service's load-balancer IPs.
pub const KUBE_ROUTER_SKIP_LB_IPS: &str = "kube-router.io/service.skiplbips";
/// Hairpin SNAT for pods reaching their own Service.
pub const KUBE_ROUTER_HAIRPIN: &str = "kube-router.io/service.hairpin";
/// Hairpin SNAT also through external IPs.
pub const KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS: &str = "kube-router.io/service.hairpin.externalips";

/// kube-router's `service.local`.
pub(super) const LOCAL: OptionParser = OptionParser {
    keys: &[KUBE_ROUTER_LOCAL],
    parse: local,
};

/// kube-router's annotations this proxy does not implement.
pub(super) const UNSUPPORTED: OptionParser = OptionParser {
    keys: &[
        KUBE_ROUTER_DSR,
        KUBE_ROUTER_SKIP_LB_IPS,
        KUBE_ROUTER_HAIRPIN,
        KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS,
    ],
    parse: unsupported,
};

/// kube-router compares the value with `"true"` exactly; `"false"` and an empty value mean off.
fn local(a: Annotations<'_>, options: &mut ServiceOptions) {
    match a.raw(KUBE_ROUTER_LOCAL) {
        None | Some("" | "false") => {}
        Some("true") => options.local_override = Some(KUBE_ROUTER_LOCAL),
        Some(other) => options.refuse(
            KUBE_ROUTER_LOCAL,
            other,
            "only the value \"true\" turns it on (as kube-router reads it); the Service keeps the \
             traffic policies of its spec"
                .to_string(),
        ),
    }
}

/// What happens instead of each unsupported annotation.
const INSTEAD: [(&str, &str); 4] = [
    (
        KUBE_ROUTER_DSR,
        "direct server return is not implemented; replies go back through this node (IPVS \
         masquerading, as upstream kube-proxy)",
    ),
    (
        KUBE_ROUTER_SKIP_LB_IPS,
        "load-balancer IPs are programmed as upstream kube-proxy programs them (a virtual server \
         each, bound to kube-ipvs0)",
    ),
    (
        KUBE_ROUTER_HAIRPIN,
        "hairpin traffic (a pod reaching itself through the Service) is always masqueraded \
         (KUBE-LOOP-BACK), as upstream kube-proxy does",
    ),
    (
        KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS,
        "hairpin traffic through external IPs is masqueraded like any hairpin traffic \
         (KUBE-LOOP-BACK), as upstream kube-proxy does",
    ),
];

/// kube-router reads these by presence (any value): each present one is reported.
fn unsupported(a: Annotations<'_>, options: &mut ServiceOptions) {
    for (key, instead) in INSTEAD {
        if let Some(value) = a.raw(key) {
            options.unsupported(key, value, instead.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProblemKind;
    use super::*;
    use std::collections::BTreeMap;

    fn options(pairs: &[(&str, &str)]) -> ServiceOptions {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ServiceOptions::from_annotations(Some(&map))
            .map(|o| (*o).clone())
            .unwrap_or_default()
    }

    #[test]
    fn local_is_on_only_for_true() {
        let on = options(&[(KUBE_ROUTER_LOCAL, "true")]);
        assert_eq!(on.local_override, Some(KUBE_ROUTER_LOCAL));
        assert!(on.problems.is_empty());
        for off in ["false", ""] {
            assert_eq!(
                options(&[(KUBE_ROUTER_LOCAL, off)]),
                ServiceOptions::default()
            );
        }
        let bad = options(&[(KUBE_ROUTER_LOCAL, "yes")]);
        assert_eq!(bad.local_override, None);
        assert_eq!(bad.problems.len(), 1);
        assert_eq!(bad.problems[0].kind, ProblemKind::Invalid);
        assert_eq!(bad.problems[0].annotation, KUBE_ROUTER_LOCAL);
    }

    #[test]
    fn every_other_kube_router_annotation_is_reported_as_unsupported() {
        for key in [
            KUBE_ROUTER_DSR,
            KUBE_ROUTER_SKIP_LB_IPS,
            KUBE_ROUTER_HAIRPIN,
            KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS,
        ] {
            // Present with any value, even empty (kube-router reads them by presence).
            let o = options(&[(key, "")]);
            assert_eq!(o.problems.len(), 1, "{key}");
            let p = &o.problems[0];
            assert_eq!((p.annotation, p.kind), (key, ProblemKind::Unsupported));
            assert!(p.to_string().contains("not supported"), "{p}");
            assert!(p.reason.contains("upstream kube-proxy"), "{p}");
        }
        let o = options(&[(KUBE_ROUTER_DSR, "tunnel"), (KUBE_ROUTER_HAIRPIN, "")]);
        assert_eq!(o.problems.len(), 2);
    }
}

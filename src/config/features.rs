//! Feature gates as upstream kube-proxy reads them (component-base's versioned feature gate): the
//! gates that bear on kube-proxy with their stage and default per release, the names of every other
//! gate upstream's binary registers, and `kubernetes_feature_enabled{name,stage}`.
//!
//! A configured gate must be known ([`check`]): an unknown name is refused with upstream's
//! `unrecognized feature gate: NAME`, and a gate locked to its default cannot be set to the other
//! value (`cannot set feature gate NAME to false, feature is locked to true`). Setting a deprecated or
//! GA gate is allowed with upstream's warning. The gates read by this binary: `AllowServiceExternalIPs`
//! (the planner ignores `spec.externalIPs` when it is off), `KubeProxyIPVS` (off refuses to start, as
//! upstream in IPVS mode), `ComponentStatusz` and `ComponentFlagz` (the `/statusz` and `/flagz` pages).
//!
//! Sources: kubernetes `pkg/features/kube_features.go` and its generated feature list
//! (`test/compatibility_lifecycle/reference/feature_list.md`), component-base's zpages, logging and
//! metrics gates, KEP-5707 (`AllowServiceExternalIPs`) and KEP-5495 (`KubeProxyIPVS`).

use super::gate_names::OTHER_GATES;
use crate::component::KUBERNETES_MINOR_NUMBER;
use prometheus::{GaugeVec, Opts, Registry};
use std::collections::BTreeMap;

/// A gate's maturity, as upstream's `prerelease` strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `ALPHA`.
    Alpha,
    /// `BETA`.
    Beta,
    /// General availability: the empty string.
    Ga,
    /// `DEPRECATED`: on its way out.
    Deprecated,
}

impl Stage {
    /// The `stage` label value.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::Ga => "",
            Stage::Deprecated => "DEPRECATED",
        }
    }
}

/// A gate's stage and default from one minor release on (upstream's `VersionedSpecs` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The first `1.N` release it applies to.
    pub since: u32,
    pub stage: Stage,
    /// Whether it is on when not set.
    pub default: bool,
    /// Locked to `default`: setting the other value is refused.
    pub locked: bool,
}

const fn spec(since: u32, stage: Stage, default: bool) -> Spec {
    Spec {
        since,
        stage,
        default,
        locked: false,
    }
}

const fn locked(since: u32, stage: Stage, default: bool) -> Spec {
    Spec {
        since,
        stage,
        default,
        locked: true,
    }
}

/// One gate that bears on kube-proxy, with its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Its name.
    pub name: &'static str,
    /// Its specs in release order; the first one also stands for releases before it.
    pub specs: &'static [Spec],
}

impl Gate {
    /// The spec in force in release `1.minor`.
    pub fn at(&self, minor: u32) -> Spec {
        let first = self.specs[0];
        self.specs
            .iter()
            .rev()
            .find(|s| s.since <= minor)
            .copied()
            .unwrap_or(first)
    }

    /// The spec in force in the followed release.
    pub fn current(&self) -> Spec {
        self.at(KUBERNETES_MINOR_NUMBER)
    }
}

use Stage::{Alpha, Beta, Deprecated, Ga};

/// The gates that bear on kube-proxy, sorted by name. Each is reported in `kubernetes_feature_enabled`.
pub const GATES: &[Gate] = &[
    Gate {
        name: "AllAlpha",
        specs: &[spec(0, Alpha, false)],
    },
    Gate {
        name: "AllBeta",
        specs: &[spec(0, Beta, false)],
    },
    // KEP-5707: on (deprecated) from 1.36; planned off by default from 1.40, then locked and removed.
    Gate {
        name: ALLOW_SERVICE_EXTERNAL_IPS,
        specs: &[spec(36, Deprecated, true), spec(40, Deprecated, false)],
    },
    Gate {
        name: COMPONENT_FLAGZ,
        specs: &[spec(32, Alpha, false), spec(36, Beta, true)],
    },
    Gate {
        name: COMPONENT_STATUSZ,
        specs: &[spec(32, Alpha, false), spec(36, Beta, true)],
    },
    Gate {
        name: "ContextualLogging",
        specs: &[spec(24, Alpha, false), spec(30, Beta, true)],
    },
    // KEP-5495: deprecated from 1.37. Upstream plans it off by default from 1.40 (IPVS mode then refuses
    // to start unless it is set); this binary is an IPVS implementation and keeps it on in every release.
    Gate {
        name: KUBE_PROXY_IPVS,
        specs: &[spec(37, Deprecated, true)],
    },
    Gate {
        name: "LoggingAlphaOptions",
        specs: &[spec(24, Alpha, false)],
    },
    Gate {
        name: "LoggingBetaOptions",
        specs: &[spec(24, Beta, true)],
    },
    Gate {
        name: "MultiCIDRServiceAllocator",
        specs: &[
            spec(27, Alpha, false),
            spec(31, Beta, false),
            spec(33, Ga, true),
            locked(34, Ga, true),
        ],
    },
    Gate {
        name: "NFTablesProxyMode",
        specs: &[
            spec(29, Alpha, false),
            spec(31, Beta, true),
            locked(33, Ga, true),
        ],
    },
    Gate {
        name: "NativeHistograms",
        specs: &[spec(35, Alpha, false)],
    },
    Gate {
        name: "PreferSameTrafficDistribution",
        specs: &[
            spec(33, Alpha, false),
            spec(34, Beta, true),
            locked(35, Ga, true),
        ],
    },
    // Service names may start with a digit (RFC 1123 labels); nothing here ever refused them.
    Gate {
        name: "RelaxedServiceNameValidation",
        specs: &[spec(34, Alpha, false), spec(36, Beta, true)],
    },
];

/// `AllowServiceExternalIPs`: Services' `spec.externalIPs` are programmed.
pub const ALLOW_SERVICE_EXTERNAL_IPS: &str = "AllowServiceExternalIPs";
/// `KubeProxyIPVS`: IPVS mode may run.
pub const KUBE_PROXY_IPVS: &str = "KubeProxyIPVS";
/// `ComponentStatusz`: `/statusz` is served.
pub const COMPONENT_STATUSZ: &str = "ComponentStatusz";
/// `ComponentFlagz`: `/flagz` is served.
pub const COMPONENT_FLAGZ: &str = "ComponentFlagz";

fn gate(name: &str) -> Option<&'static Gate> {
    GATES.iter().find(|g| g.name == name)
}

/// Whether upstream's kube-proxy registers a gate of this name.
pub fn is_known(name: &str) -> bool {
    gate(name).is_some() || OTHER_GATES.binary_search(&name).is_ok()
}

/// Checks configured `featureGates` as upstream's `SetFromMap` does, in name order: the first unknown
/// name or every locked gate set against its default is an error (upstream's texts); the warnings
/// upstream logs for setting a deprecated or GA gate are returned.
pub fn check(configured: &BTreeMap<String, bool>) -> Result<Vec<String>, String> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for (name, &value) in configured {
        if !is_known(name) {
            return Err(format!("unrecognized feature gate: {name}"));
        }
        let Some(spec) = gate(name).map(Gate::current) else {
            continue;
        };
        if spec.locked && spec.default != value {
            errors.push(format!(
                "cannot set feature gate {name} to {value}, feature is locked to {}",
                spec.default
            ));
            continue;
        }
        match spec.stage {
            Deprecated => warnings.push(format!(
                "Setting deprecated feature gate {name}={value}. It will be removed in a future release."
            )),
            Ga => warnings.push(format!(
                "Setting GA feature gate {name}={value}. It will be removed in a future release."
            )),
            Alpha | Beta => {}
        }
    }
    if errors.is_empty() {
        Ok(warnings)
    } else {
        Err(errors.join(", "))
    }
}

/// Whether each known gate is on in release `1.minor`, given the configured `featureGates`: an
/// explicit setting wins, then `AllAlpha`/`AllBeta` for gates of that stage, then the default.
pub fn resolve_at(configured: &BTreeMap<String, bool>, minor: u32) -> Vec<(Gate, Spec, bool)> {
    let all_alpha = configured.get("AllAlpha").copied().unwrap_or(false);
    let all_beta = configured.get("AllBeta").copied().unwrap_or(false);
    GATES
        .iter()
        .map(|g| {
            let s = g.at(minor);
            let special = g.name == "AllAlpha" || g.name == "AllBeta";
            let on = match configured.get(g.name) {
                Some(v) => *v,
                None if !special && s.stage == Alpha && all_alpha => true,
                None if !special && s.stage == Beta && all_beta => true,
                None => s.default,
            };
            (*g, s, on)
        })
        .collect()
}

/// [`resolve_at`] in the followed release.
pub fn resolve(configured: &BTreeMap<String, bool>) -> Vec<(Gate, Spec, bool)> {
    resolve_at(configured, KUBERNETES_MINOR_NUMBER)
}

/// Whether gate `name` (one of [`GATES`]) is on, given the configured `featureGates`.
pub fn enabled(configured: &BTreeMap<String, bool>, name: &str) -> bool {
    resolve(configured)
        .into_iter()
        .any(|(g, _, on)| g.name == name && on)
}

/// `--feature-gates` help lines as upstream's `KnownFeatures`: `Name=true|false (STAGE - default=X)`
/// for the gates of [`GATES`] that are not GA.
pub fn help_lines() -> Vec<String> {
    GATES
        .iter()
        .map(|g| (g.name, g.current()))
        .filter(|(_, s)| s.stage != Ga)
        .map(|(name, s)| {
            format!(
                "{name}=true|false ({} - default={})",
                s.stage.label(),
                s.default
            )
        })
        .collect()
}

/// Registers `kubernetes_feature_enabled` in `registry` with one series per gate of [`GATES`] (1 on, 0
/// off).
pub fn register(
    registry: &Registry,
    configured: &BTreeMap<String, bool>,
) -> Result<GaugeVec, prometheus::Error> {
    let gauge = GaugeVec::new(
        Opts::new(
            "kubernetes_feature_enabled",
            "[BETA] Whether a Kubernetes feature gate is on (1) or off (0), with its stage",
        ),
        &["name", "stage"],
    )?;
    registry.register(Box::new(gauge.clone()))?;
    for (g, s, on) in resolve(configured) {
        gauge
            .with_label_values(&[g.name, s.stage.label()])
            .set(if on { 1.0 } else { 0.0 });
    }
    Ok(gauge)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn tables_are_sorted_unique_and_disjoint() {
        assert!(GATES.windows(2).all(|w| w[0].name < w[1].name));
        assert!(OTHER_GATES.windows(2).all(|w| w[0] < w[1]));
        for g in GATES {
            assert!(OTHER_GATES.binary_search(&g.name).is_err(), "{}", g.name);
            assert!(g.specs.windows(2).all(|w| w[0].since < w[1].since));
        }
    }

    #[test]
    fn configured_values_and_all_alpha_apply() {
        let c = gates(&[("AllAlpha", true), ("ComponentFlagz", false)]);
        let r: BTreeMap<&str, bool> = resolve(&c)
            .into_iter()
            .map(|(g, _, on)| (g.name, on))
            .collect();
        assert!(r["NativeHistograms"]);
        assert!(r["AllAlpha"]);
        assert!(!r["ComponentFlagz"]);
        assert!(r["ComponentStatusz"]);
        assert!(!r["AllBeta"]);
    }

    #[test]
    fn unknown_and_locked_gates_are_refused_with_upstreams_texts() {
        assert_eq!(
            check(&gates(&[("SomethingUnknown", true)])),
            Err("unrecognized feature gate: SomethingUnknown".to_string())
        );
        assert_eq!(
            check(&gates(&[("NFTablesProxyMode", false)])),
            Err(
                "cannot set feature gate NFTablesProxyMode to false, feature is locked to true"
                    .to_string()
            )
        );
        // Gates of other components are known to upstream's kube-proxy too.
        assert_eq!(check(&gates(&[("SidecarContainers", true)])), Ok(vec![]));
        assert_eq!(
            check(&gates(&[("NFTablesProxyMode", true)])).map(|w| w.len()),
            Ok(1)
        );
    }

    #[test]
    fn deprecated_gates_warn_as_upstream() {
        let w = check(&gates(&[
            ("AllowServiceExternalIPs", false),
            ("KubeProxyIPVS", true),
        ]))
        .expect("known gates");
        assert_eq!(
            w,
            vec![
                "Setting deprecated feature gate AllowServiceExternalIPs=false. It will be removed in a future release.",
                "Setting deprecated feature gate KubeProxyIPVS=true. It will be removed in a future release.",
            ]
        );
    }

    #[test]
    fn defaults_follow_the_release() {
        let none = BTreeMap::new();
        let at = |minor, name| {
            resolve_at(&none, minor)
                .into_iter()
                .any(|(g, _, on)| g.name == name && on)
        };
        assert!(at(36, ALLOW_SERVICE_EXTERNAL_IPS));
        assert!(at(39, ALLOW_SERVICE_EXTERNAL_IPS));
        assert!(!at(40, ALLOW_SERVICE_EXTERNAL_IPS));
        assert!(!at(35, COMPONENT_STATUSZ));
        assert!(at(36, COMPONENT_STATUSZ));
        assert!(!at(35, COMPONENT_FLAGZ));
        // On for this binary in every release, before upstream had it and after upstream turns it off.
        for minor in [36, 37, 40, 43] {
            assert!(at(minor, KUBE_PROXY_IPVS), "1.{minor}");
        }
        assert!(enabled(&none, ALLOW_SERVICE_EXTERNAL_IPS));
        assert!(!enabled(
            &gates(&[("AllowServiceExternalIPs", false)]),
            ALLOW_SERVICE_EXTERNAL_IPS
        ));
    }

    #[test]
    fn help_lists_non_ga_gates_as_upstream() {
        let lines = help_lines();
        assert!(lines.contains(&"AllAlpha=true|false (ALPHA - default=false)".to_string()));
        assert!(lines.contains(&"ComponentStatusz=true|false (BETA - default=true)".to_string()));
        assert!(lines.contains(
            &"AllowServiceExternalIPs=true|false (DEPRECATED - default=true)".to_string()
        ));
        assert!(!lines.iter().any(|l| l.starts_with("NFTablesProxyMode")));
    }

    #[test]
    fn metric_has_a_series_per_gate_with_its_stage() {
        let r = Registry::new();
        register(&r, &BTreeMap::new()).unwrap();
        let mut buf = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut buf)
            .unwrap();
        let text = String::from_utf8(buf).unwrap();
        for series in [
            "kubernetes_feature_enabled{name=\"ComponentStatusz\",stage=\"BETA\"} 1",
            "kubernetes_feature_enabled{name=\"NFTablesProxyMode\",stage=\"\"} 1",
            "kubernetes_feature_enabled{name=\"AllAlpha\",stage=\"ALPHA\"} 0",
            "kubernetes_feature_enabled{name=\"AllowServiceExternalIPs\",stage=\"DEPRECATED\"} 1",
            "kubernetes_feature_enabled{name=\"KubeProxyIPVS\",stage=\"DEPRECATED\"} 1",
        ] {
            assert!(text.contains(series), "{series}\n{text}");
        }
    }
}

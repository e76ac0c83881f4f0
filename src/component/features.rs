//! The feature gates upstream kube-proxy knows that bear on it, with their stage and default in the
//! followed release ([`super::KUBERNETES_MINOR`]), and `kubernetes_feature_enabled{name,stage}` as
//! component-base reports them.
//!
//! The configuration's `featureGates` (and `--feature-gates`) set the reported state; no gate changes
//! what this binary does. Gate names this table does not know are accepted by the configuration and not
//! reported. Sources: kubernetes `pkg/features/kube_features.go` (the gates `pkg/proxy` and
//! `cmd/kube-proxy` consult) and component-base's logging, metrics and zpages gates.

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
}

impl Stage {
    /// The `stage` label value.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::Ga => "",
        }
    }
}

/// One gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Its name.
    pub name: &'static str,
    /// Its stage in the followed release.
    pub stage: Stage,
    /// Whether it is on when not set.
    pub default: bool,
}

const fn gate(name: &'static str, stage: Stage, default: bool) -> Gate {
    Gate {
        name,
        stage,
        default,
    }
}

/// The known gates, sorted by name.
pub const GATES: &[Gate] = &[
    gate("AllAlpha", Stage::Alpha, false),
    gate("AllBeta", Stage::Beta, false),
    gate("ComponentFlagz", Stage::Beta, true),
    gate("ComponentStatusz", Stage::Beta, true),
    gate("ContextualLogging", Stage::Beta, true),
    gate("LoggingAlphaOptions", Stage::Alpha, false),
    gate("LoggingBetaOptions", Stage::Beta, true),
    gate("MultiCIDRServiceAllocator", Stage::Ga, true),
    gate("NFTablesProxyMode", Stage::Ga, true),
    gate("NativeHistograms", Stage::Alpha, false),
    gate("PreferSameTrafficDistribution", Stage::Ga, true),
    gate("TopologyAwareHints", Stage::Ga, true),
];

/// Whether each known gate is on, given the configured `featureGates`: an explicit setting wins, then
/// `AllAlpha`/`AllBeta` for gates of that stage, then the default.
pub fn resolve(configured: &BTreeMap<String, bool>) -> Vec<(Gate, bool)> {
    let all_alpha = configured.get("AllAlpha").copied().unwrap_or(false);
    let all_beta = configured.get("AllBeta").copied().unwrap_or(false);
    GATES
        .iter()
        .map(|g| {
            let on = match configured.get(g.name) {
                Some(v) => *v,
                None if g.stage == Stage::Alpha && g.name != "AllAlpha" && all_alpha => true,
                None if g.stage == Stage::Beta && g.name != "AllBeta" && all_beta => true,
                None => g.default,
            };
            (*g, on)
        })
        .collect()
}

/// `--feature-gates` help lines as upstream's `KnownFeatures`: `Name=true|false (STAGE - default=X)`
/// for the gates that are not GA.
pub fn help_lines() -> Vec<String> {
    GATES
        .iter()
        .filter(|g| g.stage != Stage::Ga)
        .map(|g| {
            format!(
                "{}=true|false ({} - default={})",
                g.name,
                g.stage.label(),
                g.default
            )
        })
        .collect()
}

/// Registers `kubernetes_feature_enabled` in `registry` with one series per known gate (1 on, 0 off).
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
    for (g, on) in resolve(configured) {
        gauge
            .with_label_values(&[g.name, g.stage.label()])
            .set(if on { 1.0 } else { 0.0 });
    }
    Ok(gauge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(GATES.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn configured_values_and_all_alpha_apply() {
        let mut c = BTreeMap::new();
        c.insert("AllAlpha".to_string(), true);
        c.insert("ComponentFlagz".to_string(), false);
        c.insert("SomethingUnknown".to_string(), true);
        let r: BTreeMap<&str, bool> = resolve(&c)
            .into_iter()
            .map(|(g, on)| (g.name, on))
            .collect();
        assert!(r["NativeHistograms"]);
        assert!(r["AllAlpha"]);
        assert!(!r["ComponentFlagz"]);
        assert!(r["ComponentStatusz"]);
        assert!(!r["AllBeta"]);
        assert!(!r.contains_key("SomethingUnknown"));
    }

    #[test]
    fn help_lists_non_ga_gates_as_upstream() {
        let lines = help_lines();
        assert!(lines.contains(&"AllAlpha=true|false (ALPHA - default=false)".to_string()));
        assert!(lines.contains(&"ComponentStatusz=true|false (BETA - default=true)".to_string()));
        assert!(!lines.iter().any(|l| l.starts_with("TopologyAwareHints")));
    }

    #[test]
    fn metric_has_a_series_per_gate_with_its_stage() {
        let r = Registry::new();
        register(&r, &BTreeMap::new()).unwrap();
        let mut buf = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut buf)
            .unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.contains("kubernetes_feature_enabled{name=\"ComponentStatusz\",stage=\"BETA\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kubernetes_feature_enabled{name=\"TopologyAwareHints\",stage=\"\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kubernetes_feature_enabled{name=\"AllAlpha\",stage=\"ALPHA\"} 0"),
            "{text}"
        );
    }
}

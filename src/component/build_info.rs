//! `kubernetes_build_info`: a constant 1 labelled with the build's version facts, as component-base's.

use prometheus::{GaugeVec, Opts, Registry};

/// The label names, in upstream's order.
pub const LABELS: [&str; 9] = [
    "major",
    "minor",
    "git_version",
    "git_commit",
    "git_tree_state",
    "build_date",
    "go_version",
    "compiler",
    "platform",
];

/// The label values of this build, in [`LABELS`]' order.
pub fn values() -> [String; 9] {
    [
        super::KUBERNETES_MAJOR.to_string(),
        super::KUBERNETES_MINOR.to_string(),
        super::git_version(),
        super::GIT_COMMIT.to_string(),
        super::GIT_TREE_STATE.to_string(),
        super::BUILD_DATE.to_string(),
        super::COMPILER_VERSION.to_string(),
        super::COMPILER.to_string(),
        super::platform(),
    ]
}

/// Registers `kubernetes_build_info` in `registry`, set to 1.
pub fn register(registry: &Registry) -> Result<GaugeVec, prometheus::Error> {
    let gauge = GaugeVec::new(
        Opts::new(
            "kubernetes_build_info",
            "[BETA] A constant 1 labelled with the version, commit, build date, compiler (go_version: the \
             Rust compiler's version) and platform of this binary",
        ),
        &LABELS,
    )?;
    registry.register(Box::new(gauge.clone()))?;
    let values = values();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    gauge.with_label_values(&refs).set(1.0);
    Ok(gauge)
}

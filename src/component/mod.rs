//! What every Kubernetes component reports about itself, in upstream's shapes: build and version facts
//! (`kubernetes_build_info`, `Version info`, `/statusz`), a runtime gauge the standard dashboards read (`go_goroutines`), and the `/statusz` and `/flagz`
//! pages.

pub mod build_info;
pub mod runtime;
pub mod zpages;

/// The component's name, as upstream's (`/statusz`, `/flagz`, events).
pub const NAME: &str = "kube-proxy";

/// The Kubernetes release whose kube-proxy this build follows (flags, feature gates, `/statusz` and
/// `/flagz` formats): its major and minor version.
pub const KUBERNETES_MAJOR: &str = "1";
/// See [`KUBERNETES_MAJOR`].
pub const KUBERNETES_MINOR: &str = "36";
/// [`KUBERNETES_MINOR`] as a number (the feature gates' specs are per minor release).
pub const KUBERNETES_MINOR_NUMBER: u32 = 36;

/// This build's own version (Cargo's).
pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version string of this build, in Kubernetes' form: the followed release with this project's
/// version as semver build metadata, e.g. `v1.36.0+kube-proxy-rs.0.1.0`. Monitoring that compares
/// components' `vMAJOR.MINOR` (kubernetes-mixin's KubeVersionMismatch) sees the followed release.
pub fn git_version() -> String {
    format!("v{KUBERNETES_MAJOR}.{KUBERNETES_MINOR}.0+kube-proxy-rs.{CRATE_VERSION}")
}

/// `git_version` without the leading `v` (`/statusz`'s "Binary version").
pub fn binary_version() -> String {
    git_version().trim_start_matches('v').to_string()
}

/// `MAJOR.MINOR` of the followed release (`/statusz`'s "Emulation version").
pub fn emulation_version() -> String {
    format!("{KUBERNETES_MAJOR}.{KUBERNETES_MINOR}")
}

/// The commit the binary was built from: `KPRS_GIT_COMMIT` at build time, else empty.
pub const GIT_COMMIT: &str = match option_env!("KPRS_GIT_COMMIT") {
    Some(c) => c,
    None => "",
};

/// `clean` or `dirty`: `KPRS_GIT_TREE_STATE` at build time, else empty (as upstream's ad-hoc builds).
pub const GIT_TREE_STATE: &str = match option_env!("KPRS_GIT_TREE_STATE") {
    Some(c) => c,
    None => "",
};

/// Build date in ISO 8601: `KPRS_BUILD_DATE` at build time, else upstream's placeholder (a fixed value
/// keeps builds reproducible).
pub const BUILD_DATE: &str = match option_env!("KPRS_BUILD_DATE") {
    Some(c) => c,
    None => "1970-01-01T00:00:00Z",
};

/// The compiler's version where upstream reports Go's (`go_version`, statusz's "Go version"): the
/// `rustc -V` of the build, e.g. `rustc 1.91.1`.
pub const COMPILER_VERSION: &str = env!("KPRS_RUSTC_VERSION");

/// The compiler's name where upstream reports `gc`.
pub const COMPILER: &str = "rustc";

/// `os/arch` with Go's architecture names (`linux/amd64`, `linux/arm64`).
pub fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_have_kubernetes_shape() {
        let v = git_version();
        assert!(v.starts_with("v1.36.0+kube-proxy-rs."), "{v}");
        assert_eq!(binary_version(), v[1..]);
        assert_eq!(emulation_version(), "1.36");
        assert_eq!(
            KUBERNETES_MINOR.parse::<u32>().ok(),
            Some(KUBERNETES_MINOR_NUMBER)
        );
        assert!(
            COMPILER_VERSION.starts_with("rustc 1."),
            "{COMPILER_VERSION}"
        );
        assert!(platform().starts_with("linux/"));
    }
}

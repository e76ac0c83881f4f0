//! The daemon entry point (stub until the daemon is implemented): receives resolved options.

use crate::config::Options;

/// Run kube-proxy with resolved options. For now this only logs the effective configuration.
pub fn run(options: Options) -> anyhow::Result<()> {
    tracing::info!(
        node = %options.node_name,
        mode = %options.config.mode,
        config_file = ?options.config_path,
        cleanup = options.cleanup,
        init_only = options.init_only,
        "kube-proxy-rs starting"
    );
    tracing::debug!(config = ?options.config, "effective configuration");
    Ok(())
}

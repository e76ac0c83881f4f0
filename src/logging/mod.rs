//! Logs in upstream's formats: klog's text lines by default, component-base's JSON lines with
//! `--logging-format=json`, filtered by klog's verbosity (`-v`, `--vmodule`).
//!
//! Call sites use `tracing`'s macros. Their V level (what `-v` compares with) is:
//! - `error!` and `warn!`: always printed (`E` and `W` lines; JSON error lines carry no `v`);
//! - `info!`: V(0); `debug!`: V(2); `trace!`: V(4);
//! - a `v = N` field sets it exactly, e.g. `info!(v = 1, ...)`, `debug!(v = 3, ...)` (keep the macro's
//!   level within [`verbosity::max_level`] of N so the event is compiled in at that verbosity).
//!
//! Fields: `error = %e` (or `err`) becomes klog's `err="..."`, first in text, last in JSON; strings and
//! `%`/`?` values are quoted; integers, floats and booleans are bare; [`json`] writes a value as JSON
//! (lists, maps), as klog does for structured values; [`GoDuration::from_std`](crate::gotime::GoDuration::from_std)
//! prints durations as Go does (`1m30s`, `12.5ms`).
//!
//! `KUBE_PROXY_LOG` (a `tracing` filter such as `info,kube_proxy_rs=trace`) replaces the filter `-v`
//! and `--vmodule` build; every event it lets through is printed.

pub mod fields;
pub mod json;
pub mod layer;
pub mod quote;
mod record;
pub mod text;
pub mod verbosity;

use crate::config::types::LoggingConfig;
use fields::JSON_MARK;
pub use record::{Format, Record};
use std::fmt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
pub use verbosity::Verbosity;

/// The environment variable whose `tracing` filter replaces the one `-v` builds.
pub const FILTER_ENV: &str = "KUBE_PROXY_LOG";

/// How logging is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Text or JSON.
    pub format: Format,
    /// `-v` and `--vmodule`.
    pub verbosity: Verbosity,
}

impl Settings {
    /// From the resolved `logging` section (flags already applied over the file).
    pub fn from_config(c: &LoggingConfig) -> Settings {
        let modules = c
            .vmodule
            .iter()
            .flatten()
            .map(|m| (m.file_pattern.clone(), m.verbosity))
            .collect();
        Settings {
            format: if c.format == "json" {
                Format::Json
            } else {
                Format::Text
            },
            verbosity: Verbosity {
                global: c.verbosity,
                modules,
            },
        }
    }

    /// The filter `-v`/`--vmodule` build: libraries at info, this program up to the level its largest
    /// V needs.
    pub fn default_filter(&self) -> String {
        let level = verbosity::max_level(self.verbosity.max());
        format!("info,kube_proxy_rs={level},kube_proxy={level}")
    }
}

/// Installs the global subscriber writing to stderr. `KUBE_PROXY_LOG`, when set and valid, replaces the
/// verbosity filter; an invalid one is reported in a warning and ignored.
pub fn init(settings: &Settings) {
    let custom = std::env::var(FILTER_ENV)
        .ok()
        .filter(|s| !s.trim().is_empty());
    let parsed = custom.as_deref().map(EnvFilter::try_new);
    let (filter, verbosity, bad) = match parsed {
        Some(Ok(f)) => (f, None, None),
        Some(Err(e)) => (
            EnvFilter::new(settings.default_filter()),
            Some(settings.verbosity.clone()),
            Some(e.to_string()),
        ),
        None => (
            EnvFilter::new(settings.default_filter()),
            Some(settings.verbosity.clone()),
            None,
        ),
    };
    let layer = layer::KlogLayer::new(settings.format, verbosity, std::io::stderr);
    // Fails only when a subscriber is already installed (tests): keep that one.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .try_init();
    if let Some(e) = bad {
        tracing::warn!(variable = FILTER_ENV, error = %e, "Ignoring an invalid log filter");
    }
}

/// A value written as JSON in log lines (klog's rendering of lists, maps and structs).
pub struct Json(String);

/// Renders `value` as JSON for a log field: `NodeIPs = ?logging::json(&ips)` prints `NodeIPs=["10.0.0.1"]`.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> Json {
    Json(serde_json::to_string(value).unwrap_or_else(|e| format!("\"<internal error: {e}>\"")))
}

impl fmt::Debug for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{JSON_MARK}{}", self.0)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

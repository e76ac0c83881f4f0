//! Configuration: flags, KubeProxyConfiguration file, defaults and validation.
//!
//! [`parse_args`] turns a command line into [`Options`] the way upstream kube-proxy does:
//! flags (pflag syntax), an optional `--config` file decoded strictly then leniently,
//! upstream defaults, and validation that reports every bad field.
//!
//! Deliberate differences from upstream kube-proxy:
//! - only IPVS mode: an empty `mode` means `ipvs` (with a warning), any other mode is an error;
//! - error paths are the YAML field paths (`ipvs.syncPeriod`), not Go struct names;
//! - feature gates: gates added after the followed release are accepted (`KubeProxyIPVS` from 1.37),
//!   and `KubeProxyIPVS` is on in every release (see [`features`]);
//! - `ipvs.scheduler` must name a stock kernel scheduler (see [`crate::scheduler`]); upstream has
//!   accepted any name since 1.27 and fails at start-up when the kernel lacks it;
//! - `showHiddenMetricsForVersion` is checked for the `<major>.<minor>` form only;
//! - legacy klog flags and the removed `--proxy-port-range`/`--udp-timeout` are accepted
//!   with a warning; flags ignored because of `--config` are reported in a warning.

pub mod defaults;
pub mod features;
pub mod file;
pub mod fixes;
pub mod flags;
pub mod gate_names;
pub mod go_yaml;
pub mod help;
pub mod options;
pub mod settings;
pub mod types;
pub mod validate;

pub use file::{Decoded, FileError};
pub use fixes::IpvsFixes;
pub use options::{ConfigError, Invocation, Options, parse_args};
pub use settings::{LocalDetection, LocalMode, NodePortAddresses, ProxySettings};
pub use types::ProxyConfig;
pub use validate::{FieldError, ValidationErrors};

//! Configuration: flags, KubeProxyConfiguration file, defaults and validation.
//!
//! [`parse_args`] turns a command line into [`Options`] the way upstream kube-proxy does:
//! flags (pflag syntax), an optional `--config` file decoded strictly then leniently,
//! upstream defaults, and validation that reports every bad field.

pub mod defaults;
pub mod duration;
pub mod file;
pub mod flags;
pub mod options;
pub mod types;
pub mod validate;

pub use duration::GoDuration;
pub use file::{Decoded, FileError};
pub use options::{ConfigError, Invocation, LocalMode, NodePortAddresses, Options, parse_args};
pub use types::ProxyConfig;
pub use validate::{FieldError, ValidationErrors};

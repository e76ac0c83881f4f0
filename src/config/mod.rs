//! Configuration: flags, KubeProxyConfiguration file, defaults and validation.

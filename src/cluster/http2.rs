//! HTTP/2 to the API server, as client-go speaks it.
//!
//! - Offered by ALPN on TLS connections (`h2`, then `http/1.1`): against a server that takes it, one
//!   connection carries every list, watch and Event write of the daemon, as client-go's shared transport
//!   does; a TLS server that does not offer `h2` gets HTTP/1.1, and so does a plain `http://` server
//!   (client-go does not speak HTTP/2 without TLS either).
//! - Health pings: a connection that has received no frame for [`READ_IDLE_TIMEOUT`] is sent a PING,
//!   and is closed when no answer comes within [`PING_TIMEOUT`] (client-go's `ReadIdleTimeout` and
//!   `PingTimeout`). The requests on it fail, and the watches resume on a new connection. This is what
//!   notices a peer that stopped answering while TCP still acknowledges (the TCP keepalive probes do not).
//! - The environment variables client-go reads mean the same here: `DISABLE_HTTP2` (any value: HTTP/1.1
//!   only), `HTTP2_READ_IDLE_TIMEOUT_SECONDS` (`0`: no pings) and `HTTP2_PING_TIMEOUT_SECONDS` (`0`: the
//!   default). Where client-go warns and keeps its default for a value that is not a number, the daemon
//!   refuses to start and names the variable.

use std::ffi::OsString;
use std::time::Duration;

/// client-go's `ReadIdleTimeout`: how long an HTTP/2 connection may receive nothing before it is pinged.
pub const READ_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// client-go's `PingTimeout`: how long a ping may go unanswered before the connection is closed.
pub const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Turns HTTP/2 off (any non-empty value), as in client-go.
pub const ENV_DISABLE: &str = "DISABLE_HTTP2";
/// Overrides [`READ_IDLE_TIMEOUT`] in whole seconds; `0` sends no pings.
pub const ENV_READ_IDLE: &str = "HTTP2_READ_IDLE_TIMEOUT_SECONDS";
/// Overrides [`PING_TIMEOUT`] in whole seconds; `0` keeps the default.
pub const ENV_PING_TIMEOUT: &str = "HTTP2_PING_TIMEOUT_SECONDS";

/// How the API client speaks HTTP/2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2 {
    /// Whether `h2` is offered by ALPN on TLS connections.
    pub enabled: bool,
    /// Silence on a connection after which it is pinged (`None`: never).
    pub read_idle: Option<Duration>,
    /// How long a ping may go unanswered.
    pub ping_timeout: Duration,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            enabled: true,
            read_idle: Some(READ_IDLE_TIMEOUT),
            ping_timeout: PING_TIMEOUT,
        }
    }
}

/// An environment variable of this module with a value that is not a whole number of seconds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {name}={value:?} is not a whole number of seconds")]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value, lossily decoded.
    pub value: String,
}

impl Http2 {
    /// HTTP/1.1 only.
    pub const DISABLED: Http2 = Http2 {
        enabled: false,
        read_idle: None,
        ping_timeout: PING_TIMEOUT,
    };

    /// The settings the process environment asks for (the defaults when it asks for nothing).
    pub fn from_env() -> Result<Http2, EnvError> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// The settings that the variables `get` returns ask for.
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> Result<Http2, EnvError> {
        if get(ENV_DISABLE).is_some_and(|v| !v.is_empty()) {
            return Ok(Http2::DISABLED);
        }
        let seconds = |name: &'static str| -> Result<Option<Duration>, EnvError> {
            let Some(value) = get(name).filter(|v| !v.is_empty()) else {
                return Ok(None);
            };
            let value = value.to_string_lossy();
            match value.trim().parse::<u64>() {
                Ok(s) => Ok(Some(Duration::from_secs(s))),
                Err(_) => Err(EnvError {
                    name,
                    value: value.into_owned(),
                }),
            }
        };
        let read_idle = match seconds(ENV_READ_IDLE)? {
            None => Some(READ_IDLE_TIMEOUT),
            Some(Duration::ZERO) => None,
            Some(d) => Some(d),
        };
        let ping_timeout = seconds(ENV_PING_TIMEOUT)?
            .filter(|d| !d.is_zero())
            .unwrap_or(PING_TIMEOUT);
        Ok(Http2 {
            enabled: true,
            read_idle,
            ping_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Http2, EnvError> {
        Http2::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn defaults_are_client_go_s() {
        assert_eq!(with(&[]), Ok(Http2::default()));
        let d = Http2::default();
        assert!(d.enabled);
        assert_eq!(d.read_idle, Some(Duration::from_secs(30)));
        assert_eq!(d.ping_timeout, Duration::from_secs(15));
    }

    #[test]
    fn environment_overrides_as_client_go_reads_it() {
        assert_eq!(with(&[(ENV_DISABLE, "1")]), Ok(Http2::DISABLED));
        assert_eq!(with(&[(ENV_DISABLE, "")]), Ok(Http2::default()));
        let h = with(&[(ENV_READ_IDLE, "0")]).unwrap();
        assert_eq!((h.enabled, h.read_idle), (true, None));
        let h = with(&[(ENV_READ_IDLE, "5"), (ENV_PING_TIMEOUT, "2")]).unwrap();
        assert_eq!(h.read_idle, Some(Duration::from_secs(5)));
        assert_eq!(h.ping_timeout, Duration::from_secs(2));
        let h = with(&[(ENV_PING_TIMEOUT, "0")]).unwrap();
        assert_eq!(h.ping_timeout, PING_TIMEOUT);
    }

    #[test]
    fn a_bad_value_is_refused_naming_the_variable() {
        let e = with(&[(ENV_READ_IDLE, "30s")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "environment variable HTTP2_READ_IDLE_TIMEOUT_SECONDS=\"30s\" is not a whole number of seconds"
        );
        assert_eq!(
            with(&[(ENV_PING_TIMEOUT, "-1")]).unwrap_err().name,
            ENV_PING_TIMEOUT
        );
    }
}

//! Reading and writing the configuration file: strict decoding first (unknown fields and
//! duplicate keys are errors), then lenient decoding with a warning, as upstream does.
//! A value of the wrong type is always an error naming the field.
//!
//! Hostile files fail fast: at most [`MAX_FILE_BYTES`] are read (a huge file or `/dev/zero` is
//! refused after that much), and the YAML parser works within a budget sized for this one small
//! document ([`yaml_options`]), so an alias bomb stops after a few thousand replayed events.

use super::types::{API_VERSION, KIND, ProxyConfig, strict};
use serde::de::DeserializeOwned;
use serde_saphyr::{DuplicateKeyPolicy, Options};
use std::cell::RefCell;
use std::io::Read;
use std::path::Path;

/// The largest configuration file read (1 MiB; upstream's own output is about 2 KiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Parser events an alias may replay in all (the whole KubeProxyConfiguration is about 200).
pub const MAX_ALIAS_REPLAYED_EVENTS: usize = 10_000;

/// Parser events in all, aliases aside (a file of [`MAX_FILE_BYTES`] of short scalars has fewer).
pub const MAX_YAML_EVENTS: usize = 200_000;

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("failed to read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_FILE_BYTES`] (or never ends, like `/dev/zero`).
    #[error(
        "config file {path} is larger than {limit} bytes: refusing to read it (a KubeProxyConfiguration is a few KiB)"
    )]
    TooLarge { path: String, limit: u64 },
    /// The content is not a valid KubeProxyConfiguration.
    #[error("failed to decode config file{}: {source}", path_suffix(.path))]
    Decode {
        path: Option<String>,
        #[source]
        source: YamlError,
    },
    /// Wrong or missing `apiVersion`/`kind`.
    #[error("config file{}: {source}", path_suffix(.path))]
    TypeMeta {
        path: Option<String>,
        #[source]
        source: TypeMetaError,
    },
    /// The configuration could not be turned into YAML (`path` is empty from [`encode`]).
    #[error("failed to write config to {path}: {source}")]
    Encode {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// The configuration could not be written.
    #[error("failed to write config to {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Why YAML did not decode as a configuration: the field it stopped at (`a.b`), an operator's
/// message, and the parser's own error as the cause.
#[derive(Debug, thiserror::Error)]
#[error("{}{message}", field_prefix(.field))]
pub struct YamlError {
    /// The path of the field decoding stopped at, if known.
    pub field: Option<String>,
    /// What went wrong, as printed.
    pub message: String,
    #[source]
    source: Box<serde_saphyr::Error>,
}

fn field_prefix(field: &Option<String>) -> String {
    field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default()
}

/// Wrong or missing `apiVersion` or `kind`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeMetaError {
    /// No `apiVersion`.
    #[error("Object 'apiVersion' is missing")]
    MissingApiVersion,
    /// No `kind`.
    #[error("Object 'Kind' is missing")]
    MissingKind,
    /// Another type than a KubeProxyConfiguration.
    #[error(
        "no kind \"{kind}\" is registered for version \"{api_version}\": expected apiVersion \"{API_VERSION}\" and kind \"{KIND}\""
    )]
    Unregistered { kind: String, api_version: String },
}

fn path_suffix(path: &Option<String>) -> String {
    path.as_ref().map(|p| format!(" {p}")).unwrap_or_default()
}

/// A decoded configuration plus the warnings produced while decoding.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The configuration as written in the file (not yet defaulted).
    pub config: ProxyConfig,
    /// Non-fatal problems, e.g. the reason strict decoding failed.
    pub warnings: Vec<String>,
}

/// The parser's options: `duplicates` policy, no snippets in messages, and a budget for one small
/// document. Without it a 416-byte alias bomb made the parser replay a million events (109 MB)
/// before it gave up.
fn yaml_options(duplicates: DuplicateKeyPolicy) -> Options {
    let mut options = Options::default();
    options.duplicate_keys = duplicates;
    options.with_snippet = false;
    options.alias_limits.max_total_replayed_events = MAX_ALIAS_REPLAYED_EVENTS;
    if let Some(budget) = options.budget.as_mut() {
        budget.max_reader_input_bytes = usize::try_from(MAX_FILE_BYTES).ok();
        budget.max_events = MAX_YAML_EVENTS;
        budget.max_nodes = MAX_YAML_EVENTS;
        budget.max_aliases = MAX_ALIAS_REPLAYED_EVENTS;
        budget.max_anchors = MAX_ALIAS_REPLAYED_EVENTS;
        budget.max_recorded_anchor_events = MAX_ALIAS_REPLAYED_EVENTS;
        budget.max_recorded_anchor_bytes = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX);
        budget.max_total_scalar_bytes = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX);
        budget.max_documents = 1;
    }
    options
}

/// Decode `T` and describe a failure as `field.path: message (with line/column)`.
fn decode_as<T: DeserializeOwned>(
    yaml: &str,
    duplicates: DuplicateKeyPolicy,
) -> Result<T, YamlError> {
    let options = yaml_options(duplicates);
    let failed_path: RefCell<Option<String>> = RefCell::new(None);
    let result = serde_saphyr::with_deserializer_from_str_with_options(yaml, options, |de| {
        serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
            let path = e.path().to_string();
            *failed_path.borrow_mut() = Some(path);
            e.into_inner()
        })
    });
    result.map_err(|err| {
        let text = err.to_string();
        let mut message = text
            .strip_prefix("error: ")
            .unwrap_or(&text)
            .trim()
            .to_string();
        if multiple_documents(&err) {
            message = "the file holds more than one YAML document (separated by `---`): a \
                       KubeProxyConfiguration file must hold exactly one"
                .to_string();
        } else if over_budget(&err) {
            message = format!(
                "the YAML is too big for a KubeProxyConfiguration (at most {MAX_YAML_EVENTS} parser \
                 events, {MAX_ALIAS_REPLAYED_EVENTS} through aliases): {message}"
            );
        }
        let field = failed_path
            .into_inner()
            .filter(|path| path != "." && !path.is_empty());
        YamlError {
            field,
            message,
            source: Box::new(err),
        }
    })
}

/// Whether the parser met a second document (the budget allows one).
fn multiple_documents(err: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error as E;
    use serde_saphyr::budget::BudgetBreach;
    matches!(
        err,
        E::MultipleDocuments { .. }
            | E::Budget {
                breach: BudgetBreach::Documents { .. },
                ..
            }
    )
}

/// Whether the parser stopped at one of [`yaml_options`]' limits (an alias bomb, a huge document).
fn over_budget(err: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error as E;
    matches!(
        err,
        E::Budget { .. }
            | E::AliasReplayLimitExceeded { .. }
            | E::AliasReplayStackDepthExceeded { .. }
            | E::AliasReplayCounterOverflow { .. }
    ) || err.to_string().contains("budget breached")
}

/// Decode configuration text: strictly, falling back to lenient decoding with a warning.
pub fn decode(yaml: &str) -> Result<Decoded, FileError> {
    decode_inner(yaml, None)
}

fn decode_inner(yaml: &str, path: Option<&str>) -> Result<Decoded, FileError> {
    let path_owned = path.map(str::to_string);
    let mut warnings = Vec::new();
    let strict_result = decode_as::<strict::ProxyConfig>(yaml, DuplicateKeyPolicy::Error);
    let config = match decode_as::<ProxyConfig>(yaml, DuplicateKeyPolicy::LastWins) {
        Ok(config) => config,
        Err(source) => {
            return Err(FileError::Decode {
                path: path_owned,
                source,
            });
        }
    };
    if let Err(strict_error) = strict_result {
        warnings.push(format!(
            "Using lenient decoding as strict decoding failed: {strict_error}"
        ));
    }
    check_type_meta(&config).map_err(|source| FileError::TypeMeta {
        path: path_owned,
        source,
    })?;
    Ok(Decoded { config, warnings })
}

fn check_type_meta(config: &ProxyConfig) -> Result<(), TypeMetaError> {
    if config.api_version.is_empty() {
        return Err(TypeMetaError::MissingApiVersion);
    }
    if config.kind.is_empty() {
        return Err(TypeMetaError::MissingKind);
    }
    if config.api_version != API_VERSION || config.kind != KIND {
        return Err(TypeMetaError::Unregistered {
            kind: config.kind.clone(),
            api_version: config.api_version.clone(),
        });
    }
    Ok(())
}

/// The content of `path`, at most [`MAX_FILE_BYTES`]: a longer file (or one that never ends) is
/// [`FileError::TooLarge`] after reading one byte more than the limit.
pub fn read_limited(path: &Path) -> Result<Vec<u8>, FileError> {
    let display = || path.display().to_string();
    let read_error = |source| FileError::Read {
        path: display(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: display(),
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(bytes)
}

/// Read (at most [`MAX_FILE_BYTES`]) and decode a configuration file.
pub fn load(path: &Path) -> Result<Decoded, FileError> {
    let display = path.display().to_string();
    let text = String::from_utf8(read_limited(path)?).map_err(|e| FileError::Read {
        path: display.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    decode_inner(&text, Some(&display))
}

/// Encode a configuration as YAML, with `apiVersion` and `kind` set, in exactly the text upstream's
/// `--write-config-to` produces for the same values (see [`super::go_yaml`]).
pub fn encode(config: &ProxyConfig) -> Result<String, FileError> {
    let mut config = config.clone();
    config.api_version = API_VERSION.to_string();
    config.kind = KIND.to_string();
    let value = serde_json::to_value(&config).map_err(|source| FileError::Encode {
        path: String::new(),
        source,
    })?;
    Ok(super::go_yaml::to_string(&value))
}

/// Write a configuration as YAML to `path` (`/dev/stdout` works).
pub fn write(config: &ProxyConfig, path: &Path) -> Result<(), FileError> {
    let text = encode(config).map_err(|e| match e {
        FileError::Encode { source, .. } => FileError::Encode {
            path: path.display().to_string(),
            source,
        },
        other => other,
    })?;
    std::fs::write(path, text).map_err(|source| FileError::Write {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn decode_errors_keep_the_parser_error_as_their_cause() {
        let yaml = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nipvs:\n  strictARP: maybe\n";
        let e = decode(yaml).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("failed to decode config file: ipvs.strictARP: "),
            "{text}"
        );
        let yaml_error = e.source().and_then(|c| c.downcast_ref::<YamlError>());
        assert_eq!(
            yaml_error.and_then(|y| y.field.as_deref()),
            Some("ipvs.strictARP")
        );
        let parser = yaml_error.and_then(Error::source);
        assert!(parser.is_some_and(|p| p.is::<Box<serde_saphyr::Error>>()));
    }

    #[test]
    fn type_meta_and_read_errors_name_their_cause() {
        let e = decode("apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        let cause = e.source().and_then(|c| c.downcast_ref::<TypeMetaError>());
        assert!(
            matches!(cause, Some(TypeMetaError::Unregistered { kind, .. }) if kind == "ConfigMap")
        );
        assert!(
            e.to_string()
                .starts_with("config file: no kind \"ConfigMap\"")
        );
        let e = load(Path::new("/nonexistent/kube-proxy.yaml")).unwrap_err();
        assert!(e.source().is_some_and(|c| c.is::<std::io::Error>()));
    }
}

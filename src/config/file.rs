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
    #[error("failed to decode config file{}: {message}", path_suffix(.path))]
    Decode {
        path: Option<String>,
        message: String,
    },
    /// Wrong or missing `apiVersion`/`kind`.
    #[error("config file{}: {message}", path_suffix(.path))]
    TypeMeta {
        path: Option<String>,
        message: String,
    },
    /// The configuration could not be written.
    #[error("failed to write config to {path}: {message}")]
    Write { path: String, message: String },
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
fn decode_as<T: DeserializeOwned>(yaml: &str, duplicates: DuplicateKeyPolicy) -> Result<T, String> {
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
        match failed_path.into_inner() {
            Some(path) if path != "." && !path.is_empty() => format!("{path}: {message}"),
            _ => message,
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
        Err(message) => {
            return Err(FileError::Decode {
                path: path_owned,
                message,
            });
        }
    };
    if let Err(strict_error) = strict_result {
        warnings.push(format!(
            "Using lenient decoding as strict decoding failed: {strict_error}"
        ));
    }
    check_type_meta(&config).map_err(|message| FileError::TypeMeta {
        path: path_owned,
        message,
    })?;
    Ok(Decoded { config, warnings })
}

fn check_type_meta(config: &ProxyConfig) -> Result<(), String> {
    if config.api_version.is_empty() {
        return Err("Object 'apiVersion' is missing".to_string());
    }
    if config.kind.is_empty() {
        return Err("Object 'Kind' is missing".to_string());
    }
    if config.api_version != API_VERSION || config.kind != KIND {
        return Err(format!(
            "no kind \"{}\" is registered for version \"{}\": expected apiVersion \"{API_VERSION}\" and kind \"{KIND}\"",
            config.kind, config.api_version
        ));
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
    let value = serde_json::to_value(&config).map_err(|e| FileError::Write {
        path: String::new(),
        message: e.to_string(),
    })?;
    Ok(super::go_yaml::to_string(&value))
}

/// Write a configuration as YAML to `path` (`/dev/stdout` works).
pub fn write(config: &ProxyConfig, path: &Path) -> Result<(), FileError> {
    let text = encode(config).map_err(|e| match e {
        FileError::Write { message, .. } => FileError::Write {
            path: path.display().to_string(),
            message,
        },
        other => other,
    })?;
    std::fs::write(path, text).map_err(|e| FileError::Write {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

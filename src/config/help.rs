//! `--help` in upstream's layout (cobra's help template over pflag's flag list) and the flag values
//! `/flagz` shows, both drawn from the flag definitions in [`super::flags`].
//!
//! pflag's rules, kept here: flags sorted by name, hidden ones left out, `  -x, --name type` or
//! `      --name type` (booleans without a type, `[=value]` for an optional value), the descriptions
//! aligned three spaces after the longest such column, continuation lines indented to it, and
//! ` (default X)` (`(default "X")` for strings) unless the default is the type's zero value.

use super::features;
use super::flags::{Flags, LONG_ABOUT, normalize_args};
use crate::gotime::GoDuration;
use clap::CommandFactory;
use clap::parser::ValueSource;
use std::collections::BTreeMap;
use std::ffi::OsString;

/// Each flag's default as upstream's pflag prints it (its `DefValue`): the value a flag has when not
/// given. Flags missing here default to their type's zero value.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("bind-address", "0.0.0.0"),
    ("config-sync-period", "15m0s"),
    ("conntrack-max-per-core", "32768"),
    ("conntrack-min", "131072"),
    ("conntrack-tcp-timeout-close-wait", "1h0m0s"),
    ("conntrack-tcp-timeout-established", "24h0m0s"),
    ("conntrack-udp-timeout", "0s"),
    ("conntrack-udp-timeout-stream", "0s"),
    ("healthz-bind-address", "0.0.0.0:10256"),
    ("healthz-port", "10256"),
    ("iptables-localhost-nodeports", "true"),
    ("iptables-masquerade-bit", "14"),
    ("iptables-min-sync-period", "1s"),
    ("iptables-sync-period", "30s"),
    ("ipvs-exclude-cidrs", "[]"),
    ("ipvs-min-sync-period", "1s"),
    ("ipvs-sync-period", "30s"),
    ("ipvs-tcp-timeout", "0s"),
    ("ipvs-tcpfin-timeout", "0s"),
    ("ipvs-udp-timeout", "0s"),
    ("kube-api-burst", "10"),
    (
        "kube-api-content-type",
        "application/vnd.kubernetes.protobuf",
    ),
    ("kube-api-qps", "5"),
    ("log-flush-frequency", "5s"),
    ("log-json-info-buffer-size", "0"),
    ("log-text-info-buffer-size", "0"),
    ("logging-format", "text"),
    ("metrics-bind-address", "127.0.0.1:10249"),
    ("metrics-port", "10249"),
    ("nodeport-addresses", "[]"),
    ("oom-score-adj", "-999"),
    ("udp-timeout", "250ms"),
    ("v", "0"),
];

/// The zero value pflag prints for a flag of `kind`.
fn zero_of(kind: &str) -> &'static str {
    match kind {
        "bool" | "version" => "false",
        "duration" => "0s",
        "int32" | "float32" | "uint" | "Level" | "quantity" => "0",
        "strings" => "[]",
        _ => "",
    }
}

/// Whether pflag would leave `(default ...)` out for this default.
fn is_zero(kind: &str, default: &str) -> bool {
    match kind {
        "duration" => default == "0" || default == "0s",
        "strings" => default == "[]",
        "string" => default.is_empty(),
        _ => matches!(default, "" | "0" | "false" | "<nil>"),
    }
}

/// A flag's default (its `DefValue`).
pub fn default_of(name: &str, kind: &str) -> String {
    DEFAULTS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or_else(|| zero_of(kind).to_string(), |(_, d)| (*d).to_string())
}

/// One flag as the help lists it.
struct Row {
    name: String,
    left: String,
    usage: String,
}

fn rows() -> Vec<Row> {
    let cmd = Flags::command();
    let mut rows: Vec<Row> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| {
            let name = a.get_long()?.to_string();
            let kind = flag_kind(a);
            let mut left = match a.get_short() {
                Some(c) => format!("  -{c}, --{name}"),
                None => format!("      --{name}"),
            };
            if kind != "bool" {
                left.push(' ');
                left.push_str(&kind);
                // A value that may be left out (only `--version`, which then means `true`).
                if a.get_num_args().is_some_and(|n| n.min_values() == 0) {
                    left.push_str("[=true]");
                }
            }
            let mut usage = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            if name == "feature-gates" {
                usage.push_str(". Options are:\n");
                usage.push_str(&features::help_lines().join("\n"));
            }
            let default = default_of(&name, &kind);
            if !is_zero(&kind, &default) {
                if kind == "string" {
                    usage.push_str(&format!(" (default {default:?})"));
                } else {
                    usage.push_str(&format!(" (default {default})"));
                }
            }
            Some(Row { name, left, usage })
        })
        .collect();
    rows.push(Row {
        name: "help".into(),
        left: "  -h, --help".into(),
        usage: "help for kube-proxy".into(),
    });
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// The flag's type as pflag names it (the `value_name` of its definition).
fn flag_kind(a: &clap::Arg) -> String {
    a.get_value_names()
        .and_then(|v| v.first())
        .map_or_else(|| "string".to_string(), |n| n.to_string())
}

/// The whole `--help` text.
pub fn help_text() -> String {
    let rows = rows();
    let maxlen = rows.iter().map(|r| r.left.len() + 1).max().unwrap_or(0);
    let indent = format!("\n{}", " ".repeat(maxlen + 2));
    let mut flags = String::new();
    for r in &rows {
        let spacing = " ".repeat(maxlen - r.left.len());
        flags.push_str(&format!(
            "{} {spacing} {}\n",
            r.left,
            r.usage.replace('\n', &indent)
        ));
    }
    format!(
        "{LONG_ABOUT}\n\nUsage:\n  kube-proxy [flags]\n\nFlags:\n{}\n",
        flags.trim_end()
    )
}

/// Every flag's value as `/flagz` shows it: the given value when the command line has the flag
/// (normalised as pflag prints it), else its default. Unparsable command lines give the defaults.
pub fn flag_values<I, T>(args: I) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let cmd = Flags::command();
    let matches = cmd.clone().try_get_matches_from(normalize_args(args)).ok();
    let mut out = BTreeMap::new();
    for a in cmd.get_arguments() {
        let Some(name) = a.get_long() else { continue };
        let kind = flag_kind(a);
        let id = a.get_id().as_str();
        let given = matches.as_ref().and_then(|m| {
            (m.value_source(id) == Some(ValueSource::CommandLine))
                .then(|| m.get_raw(id))
                .flatten()
                .map(|raw| {
                    raw.map(|v| v.to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                })
        });
        let value = match given {
            Some(raw) => render_given(&kind, &raw),
            None => default_of(name, &kind),
        };
        out.insert(name.to_string(), value);
    }
    out
}

/// A given value as pflag's `Value.String()` prints it.
fn render_given(kind: &str, raw: &[String]) -> String {
    let last = raw.last().cloned().unwrap_or_default();
    match kind {
        "bool" => match super::flags::parse_go_bool(&last) {
            Ok(b) => b.to_string(),
            Err(_) => last,
        },
        "duration" => GoDuration::parse(&last).map_or(last, |d| d.to_string()),
        "strings" => {
            let items: Vec<&str> = raw
                .iter()
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            format!("[{}]", items.join(","))
        }
        "mapStringBool" => {
            let mut pairs: BTreeMap<String, String> = BTreeMap::new();
            for v in raw {
                for (k, b) in super::flags::parse_feature_gates(v).unwrap_or_default() {
                    pairs.insert(k, b.to_string());
                }
            }
            let items: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            items.join(",")
        }
        "pattern=N,..." => raw.join(","),
        _ => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_names_a_flag() {
        let cmd = Flags::command();
        for (name, _) in DEFAULTS {
            assert!(
                cmd.get_arguments().any(|a| a.get_long() == Some(name)),
                "{name} has a default but no flag"
            );
        }
    }

    #[test]
    fn flag_values_show_given_values_normalised_and_defaults() {
        let v = flag_values([
            "kube-proxy",
            "--ipvs-sync-period=90s",
            "--cleanup",
            "--nodeport-addresses=10.0.0.0/8",
            "--nodeport-addresses",
            "primary",
            "--feature-gates=B=false,A=true",
        ]);
        assert_eq!(v["ipvs-sync-period"], "1m30s");
        assert_eq!(v["cleanup"], "true");
        assert_eq!(v["nodeport-addresses"], "[10.0.0.0/8,primary]");
        assert_eq!(v["feature-gates"], "A=true,B=false");
        assert_eq!(v["metrics-bind-address"], "127.0.0.1:10249");
        assert_eq!(v["masquerade-all"], "false");
        assert_eq!(v["hostname-override"], "");
        assert!(!v.contains_key("help"));
    }
}

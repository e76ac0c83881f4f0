//! `/statusz` and `/flagz` as upstream 1.36 serves them (k8s.io/apiserver `pkg/server/statusz`,
//! `pkg/server/flagz`): plain text by default, or the structured `config.k8s.io` objects when the
//! `Accept` header asks for `application/json;as=Statusz;g=config.k8s.io;v=v1beta1` (or `v1alpha1`,
//! deprecated: answered with a `Warning` header). Any other request for JSON gets 406.
//!
//! The text pages are meant for people: upstream picks the `key: value` delimiter at random per
//! request (`:`, `: `, `=` or a space) so that nobody parses them; so does this.

use crate::gotime::instant;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The warning line both text pages carry under their title.
pub const WARNING: &str = "Warning: This endpoint is not meant to be machine parseable, has no formatting \
compatibility guarantees and is for debugging purposes only.";

/// The structured API group.
pub const GROUP: &str = "config.k8s.io";

/// The `Warning` header upstream sends with a deprecated structured version.
pub fn deprecation_warning(page: &str) -> String {
    format!(
        "299 - \"This version of the {page} endpoint is deprecated. Please use a newer version.\""
    )
}

/// What a request's `Accept` header selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// `text/plain` (no header, `*/*`, `text/*`, `text/plain`).
    Text,
    /// The structured object of this version (`v1alpha1` or `v1beta1`) as JSON.
    Json(&'static str),
    /// Nothing acceptable: 406.
    NotAcceptable,
}

/// Chooses the response for `accept` on the page whose structured kind is `kind` (`Statusz`,
/// `Flagz`): the media ranges in order of preference (`q`), the first one served wins.
pub fn negotiate(accept: Option<&str>, kind: &str) -> Negotiated {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Negotiated::Text;
    };
    let mut ranges: Vec<(f32, MediaRange)> = accept
        .split(',')
        .filter_map(MediaRange::parse)
        .map(|r| (r.q, r))
        .filter(|(q, _)| *q > 0.0)
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, r) in ranges {
        if r.matches("application", "json")
            && let Some(v) = r.structured_version(kind)
        {
            return Negotiated::Json(v);
        }
        if r.matches("text", "plain") && !r.params.contains_key("as") {
            return Negotiated::Text;
        }
    }
    Negotiated::NotAcceptable
}

/// One entry of an `Accept` header.
#[derive(Debug)]
struct MediaRange {
    kind: String,
    subtype: String,
    params: BTreeMap<String, String>,
    q: f32,
}

impl MediaRange {
    fn parse(text: &str) -> Option<MediaRange> {
        let mut parts = text.split(';').map(str::trim);
        let (kind, subtype) = parts.next()?.split_once('/')?;
        let mut params = BTreeMap::new();
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                params.insert(
                    k.trim().to_ascii_lowercase(),
                    v.trim().trim_matches('"').to_string(),
                );
            }
        }
        let q = params.get("q").and_then(|q| q.parse().ok()).unwrap_or(1.0);
        Some(MediaRange {
            kind: kind.trim().to_ascii_lowercase(),
            subtype: subtype.trim().to_ascii_lowercase(),
            params,
            q,
        })
    }

    fn matches(&self, kind: &str, subtype: &str) -> bool {
        (self.kind == "*" || self.kind == kind) && (self.subtype == "*" || self.subtype == subtype)
    }

    /// The version asked for when `as`, `g` and `v` name a structured kind served here.
    fn structured_version(&self, kind: &str) -> Option<&'static str> {
        let param = |k: &str| self.params.get(k).map(String::as_str);
        if param("as") != Some(kind) || param("g") != Some(GROUP) {
            return None;
        }
        match param("v") {
            Some("v1beta1") => Some("v1beta1"),
            Some("v1alpha1") => Some("v1alpha1"),
            _ => None,
        }
    }
}

/// The body of a 406, as upstream's `NotAcceptable` Status.
pub fn not_acceptable_body() -> String {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "only the following media types are accepted: application/json, text/plain",
        "reason": "NotAcceptable",
        "code": 406,
    })
    .to_string()
}

/// The facts both pages show.
#[derive(Debug, Clone)]
pub struct ZPages {
    /// Component name (`kube-proxy`).
    pub component: String,
    /// When the process started.
    pub started: SystemTime,
    /// Every flag's value, as the daemon read them from its command line.
    pub flags: BTreeMap<String, String>,
    /// Whether `/statusz` is served (the `ComponentStatusz` feature gate; off, the path is not found, as
    /// upstream does not install the page).
    pub statusz: bool,
    /// Whether `/flagz` is served (the `ComponentFlagz` feature gate).
    pub flagz: bool,
}

#[derive(Serialize)]
struct Meta<'a> {
    name: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Statusz<'a> {
    kind: &'static str,
    api_version: String,
    metadata: Meta<'a>,
    start_time: String,
    uptime_seconds: u64,
    #[serde(skip_serializing_if = "str::is_empty")]
    go_version: &'a str,
    binary_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    emulation_version: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    paths: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Flagz<'a> {
    kind: &'static str,
    api_version: String,
    metadata: Meta<'a>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    flags: &'a BTreeMap<String, String>,
}

/// One of upstream's four delimiters, picked per call.
fn delimiter() -> &'static str {
    const DELIMITERS: [&str; 4] = [":", ": ", "=", " "];
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    DELIMITERS[usize::try_from(nanos / 7 % 4).unwrap_or(0)]
}

/// Uptime as upstream prints it: `0 hr 00 min 16 sec`.
fn uptime_text(up: Duration) -> String {
    let s = up.as_secs();
    format!("{} hr {:02} min {:02} sec", s / 3600, s / 60 % 60, s % 60)
}

impl ZPages {
    /// The facts of this process: its start time (from `/proc`), its flags' values as the caller read
    /// them from the command line (name → value, as `/flagz` shows them); both pages served.
    pub fn for_process(flags: BTreeMap<String, String>) -> ZPages {
        ZPages {
            component: super::NAME.to_string(),
            started: process_start().unwrap_or_else(SystemTime::now),
            flags,
            statusz: true,
            flagz: true,
        }
    }

    /// Which pages are served: the caller reads the `ComponentStatusz` and `ComponentFlagz` gates.
    pub fn with_pages(mut self, statusz: bool, flagz: bool) -> ZPages {
        self.statusz = statusz;
        self.flagz = flagz;
        self
    }

    fn uptime(&self) -> Duration {
        SystemTime::now()
            .duration_since(self.started)
            .unwrap_or_default()
    }

    /// The text `/statusz`.
    pub fn statusz_text(&self) -> String {
        let d = delimiter();
        format!(
            "\n{} statusz\n{WARNING}\n\nStarted{d} {}\nUp{d} {}\nGo version{d} {}\nBinary version{d} {}\nEmulation version{d} {}\n\n",
            self.component,
            instant::unix_date(self.started),
            uptime_text(self.uptime()),
            super::COMPILER_VERSION,
            super::binary_version(),
            super::emulation_version(),
        )
    }

    /// The structured `/statusz` of `version`.
    pub fn statusz_json(&self, version: &str) -> String {
        let body = Statusz {
            kind: "Statusz",
            api_version: format!("{GROUP}/{version}"),
            metadata: Meta {
                name: &self.component,
            },
            start_time: instant::format_rfc3339(self.started),
            uptime_seconds: self.uptime().as_secs(),
            go_version: super::COMPILER_VERSION,
            binary_version: super::binary_version(),
            emulation_version: super::emulation_version(),
            paths: Vec::new(),
        };
        serde_json::to_string(&body).unwrap_or_default()
    }

    /// The text `/flagz`: every flag, sorted, one per line.
    pub fn flagz_text(&self) -> String {
        let d = delimiter();
        let mut out = format!("\n{} flagz\n{WARNING}\n", self.component);
        for (k, v) in &self.flags {
            out.push_str(&format!("{k}{d}{v}\n"));
        }
        out
    }

    /// The structured `/flagz` of `version`.
    pub fn flagz_json(&self, version: &str) -> String {
        let body = Flagz {
            kind: "Flagz",
            api_version: format!("{GROUP}/{version}"),
            metadata: Meta {
                name: &self.component,
            },
            flags: &self.flags,
        };
        serde_json::to_string(&body).unwrap_or_default()
    }
}

/// The process's start time: `/proc/stat`'s boot time plus `/proc/self/stat`'s start tick.
fn process_start() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at the last ')'.
    let after = stat.rsplit_once(')')?.1;
    let start_ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let ticks = crate::sys::process::clock_ticks()?;
    let secs = boot + start_ticks / ticks.max(1);
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> ZPages {
        let mut flags = BTreeMap::new();
        flags.insert("v".to_string(), "2".to_string());
        flags.insert("cleanup".to_string(), "false".to_string());
        ZPages {
            component: "kube-proxy".into(),
            started: SystemTime::now() - Duration::from_secs(3_725),
            flags,
            statusz: true,
            flagz: true,
        }
    }

    #[test]
    fn pages_are_served_as_told() {
        let p = pages();
        assert!(p.statusz && p.flagz);
        let p = p.with_pages(false, true);
        assert!(!p.statusz && p.flagz);
        let p = p.with_pages(true, false);
        assert!(p.statusz && !p.flagz);
    }

    #[test]
    fn negotiation_follows_upstreams_rules() {
        let s = "Statusz";
        assert_eq!(negotiate(None, s), Negotiated::Text);
        assert_eq!(negotiate(Some("*/*"), s), Negotiated::Text);
        assert_eq!(negotiate(Some("text/plain"), s), Negotiated::Text);
        assert_eq!(
            negotiate(
                Some("application/json;v=v1beta1;g=config.k8s.io;as=Statusz"),
                s
            ),
            Negotiated::Json("v1beta1")
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=Statusz;g=config.k8s.io;v=v1alpha1"),
                s
            ),
            Negotiated::Json("v1alpha1")
        );
        assert_eq!(
            negotiate(Some("application/json"), s),
            Negotiated::NotAcceptable
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=Flagz;g=config.k8s.io;v=v1beta1"),
                s
            ),
            Negotiated::NotAcceptable
        );
        assert_eq!(
            negotiate(
                Some(
                    "application/json;as=Statusz;g=config.k8s.io;v=v1beta1;q=0.5, text/plain;q=0.9"
                ),
                s
            ),
            Negotiated::Text
        );
        assert_eq!(negotiate(Some("image/png"), s), Negotiated::NotAcceptable);
    }

    #[test]
    fn statusz_text_has_upstreams_lines() {
        let text = pages().statusz_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "");
        assert_eq!(lines[1], "kube-proxy statusz");
        assert_eq!(lines[2], WARNING);
        assert_eq!(lines[3], "");
        let labels = [
            "Started",
            "Up",
            "Go version",
            "Binary version",
            "Emulation version",
        ];
        for (line, label) in lines[4..9].iter().zip(labels) {
            let rest = line.strip_prefix(label).unwrap_or_else(|| panic!("{line}"));
            assert!(
                [":", "=", " "].iter().any(|d| rest.starts_with(d)),
                "{line}"
            );
        }
        assert!(lines[5].ends_with("1 hr 02 min 05 sec"), "{}", lines[5]);
        assert!(text.ends_with("\n\n"));
    }

    #[test]
    fn structured_pages_are_config_k8s_io_objects() {
        let p = pages();
        let s: serde_json::Value = serde_json::from_str(&p.statusz_json("v1beta1")).unwrap();
        assert_eq!(s["kind"], "Statusz");
        assert_eq!(s["apiVersion"], "config.k8s.io/v1beta1");
        assert_eq!(s["metadata"]["name"], "kube-proxy");
        assert!(s["uptimeSeconds"].as_u64().unwrap() >= 3_725);
        assert!(s["startTime"].as_str().unwrap().ends_with('Z'));
        assert_eq!(s["emulationVersion"], "1.36");
        let f: serde_json::Value = serde_json::from_str(&p.flagz_json("v1alpha1")).unwrap();
        assert_eq!(f["kind"], "Flagz");
        assert_eq!(f["apiVersion"], "config.k8s.io/v1alpha1");
        assert_eq!(f["flags"]["v"], "2");
        let text = p.flagz_text();
        assert!(text.starts_with("\nkube-proxy flagz\nWarning: "), "{text}");
        assert!(
            text.lines().nth(3).unwrap().starts_with("cleanup"),
            "{text}"
        );
    }

    #[test]
    fn process_start_is_in_the_past() {
        let started = process_start().expect("/proc readable");
        assert!(started <= SystemTime::now());
        assert!(SystemTime::now().duration_since(started).unwrap() < Duration::from_secs(86_400));
    }
}

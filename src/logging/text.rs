//! klog's text format: `Lmmdd hh:mm:ss.uuuuuu threadid file:line] "message" key=value ...`.

use super::fields::Value;
use super::quote::{go_quote, json_float, klog_string};
use super::record::Record;
use crate::gotime::instant::Stamp;
use std::fmt::Write;
use tracing::Level;

/// klog's severity letter: `E` for errors, `W` for warnings, `I` for everything else.
pub fn severity(level: Level) -> char {
    match level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// The caller as klog prints it: the file's base name.
pub fn caller_file(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Appends the header: severity, `MMDD`, time with microseconds, the process id right-aligned in seven
/// columns (klog's "threadid" is the pid), `file:line] `.
pub fn header(out: &mut String, sev: char, at: Stamp, pid: u32, file: &str, line: u32) {
    let _ = write!(
        out,
        "{sev}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} {file}:{line}] ",
        at.month,
        at.day,
        at.hour,
        at.minute,
        at.second,
        at.micros,
        pid % 10_000_000,
    );
}

/// Appends ` key=value` for one pair with klog's value rules.
pub fn pair(out: &mut String, key: &str, value: &Value) {
    out.push(' ');
    out.push_str(key);
    match value {
        Value::Str(s) => klog_string(out, s),
        Value::Int(n) => {
            let _ = write!(out, "={n}");
        }
        Value::UInt(n) => {
            let _ = write!(out, "={n}");
        }
        Value::Float(f) => {
            out.push('=');
            json_float(out, *f);
        }
        Value::Bool(b) => {
            let _ = write!(out, "={b}");
        }
        Value::Json(j) => {
            out.push('=');
            out.push_str(j);
        }
    }
}

/// One complete line (with its newline) for `r`, stamped `at`.
pub fn line(r: &Record<'_>, at: Stamp, pid: u32) -> String {
    let mut out = String::with_capacity(128);
    header(
        &mut out,
        severity(r.level),
        at,
        pid,
        caller_file(r.file),
        r.line,
    );
    go_quote(&mut out, &r.fields.message);
    if let Some(err) = &r.fields.err {
        pair(&mut out, "err", &Value::Str(err.clone()));
    }
    for (key, value) in &r.fields.values {
        pair(&mut out, key, value);
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::fields::Fields;

    fn stamp() -> Stamp {
        Stamp {
            month: 11,
            day: 26,
            hour: 20,
            minute: 57,
            second: 55,
            micros: 89_326,
        }
    }

    #[test]
    fn line_matches_klog_byte_for_byte() {
        // The upstream line this reproduces (kube-proxy 1.24, klog v2):
        // I1228 15:55:44.844361       1 conntrack.go:100] "Set sysctl" entry="net/netfilter/nf_conntrack_max" value=131072
        let fields = Fields {
            message: "Set sysctl".into(),
            values: vec![
                ("entry", Value::Str("net/netfilter/nf_conntrack_max".into())),
                ("value", Value::Int(131_072)),
            ],
            ..Fields::default()
        };
        let r = Record {
            level: Level::INFO,
            v: 0,
            file: "src/proxier/conntrack.go",
            line: 100,
            fields: &fields,
        };
        let at = Stamp {
            month: 12,
            day: 28,
            hour: 15,
            minute: 55,
            second: 44,
            micros: 844_361,
        };
        assert_eq!(
            line(&r, at, 1),
            "I1228 15:55:44.844361       1 conntrack.go:100] \"Set sysctl\" entry=\"net/netfilter/nf_conntrack_max\" value=131072\n"
        );
    }

    #[test]
    fn error_comes_first_and_severity_follows_the_level() {
        let fields = Fields {
            message: "command failed".into(),
            err: Some("open /x: no such file".into()),
            values: vec![("ok", Value::Bool(false))],
            ..Fields::default()
        };
        let r = Record {
            level: Level::ERROR,
            v: 0,
            file: "src/main.rs",
            line: 7,
            fields: &fields,
        };
        assert_eq!(
            line(&r, stamp(), 4_194_304),
            "E1126 20:57:55.089326 4194304 main.rs:7] \"command failed\" err=\"open /x: no such file\" ok=false\n"
        );
        assert_eq!(severity(Level::WARN), 'W');
        assert_eq!(severity(Level::DEBUG), 'I');
    }

    #[test]
    fn caller_is_the_base_name() {
        assert_eq!(caller_file("src/daemon/mod.rs"), "mod.rs");
        assert_eq!(caller_file("main.rs"), "main.rs");
    }
}

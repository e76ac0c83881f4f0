//! component-base's JSON format (`--logging-format=json`, zap through zapr): one object per line with
//! `ts` (milliseconds since the epoch, a float), `caller` (`dir/file:line`), `msg`, then `v` for
//! non-errors, the key/value pairs, and `err` last for errors. There is no level key: errors are the
//! lines without `v`.

use super::fields::Value;
use super::record::Record;
use std::fmt::Write;
use tracing::Level;

/// The caller as zap's short caller encoder prints it: the last directory and the file.
pub fn caller(path: &str) -> &str {
    match path.rfind('/') {
        Some(slash) => match path[..slash].rfind('/') {
            Some(dir) => &path[dir + 1..],
            None => path,
        },
        None => path,
    }
}

fn string(out: &mut String, s: &str) {
    // serde_json escapes as zap does: quotes, backslashes and control characters.
    match serde_json::to_string(s) {
        Ok(q) => out.push_str(&q),
        Err(_) => out.push_str("\"\""),
    }
}

fn key(out: &mut String, k: &str) {
    out.push(',');
    string(out, k);
    out.push(':');
}

fn value(out: &mut String, v: &Value) {
    match v {
        Value::Str(s) => string(out, s),
        Value::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Value::UInt(n) => {
            let _ = write!(out, "{n}");
        }
        // zap writes floats with strconv's 'f' format (never an exponent) and non-finite ones as strings.
        Value::Float(f) if f.is_finite() => {
            let _ = write!(out, "{f}");
        }
        Value::Float(f) => {
            let name = if f.is_nan() {
                "NaN"
            } else if *f > 0.0 {
                "+Inf"
            } else {
                "-Inf"
            };
            let _ = write!(out, "\"{name}\"");
        }
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Json(j) => out.push_str(j),
    }
}

/// One complete line (with its newline) for `r`, logged at `ts_millis`.
pub fn line(r: &Record<'_>, ts_millis: f64) -> String {
    let mut out = String::with_capacity(160);
    let _ = write!(out, "{{\"ts\":{ts_millis}");
    key(&mut out, "caller");
    string(&mut out, &format!("{}:{}", caller(r.file), r.line));
    key(&mut out, "msg");
    string(&mut out, &r.fields.message);
    let is_error = r.level == Level::ERROR;
    if !is_error {
        key(&mut out, "v");
        let _ = write!(out, "{}", r.v);
    }
    for (k, v) in &r.fields.values {
        key(&mut out, k);
        value(&mut out, v);
    }
    if let Some(err) = &r.fields.err {
        // zapr adds the error after the pairs, for errors; an info line keeps it as a pair.
        key(&mut out, "err");
        string(&mut out, err);
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::fields::Fields;

    #[test]
    fn info_and_error_lines_have_upstreams_keys_in_upstreams_order() {
        // Upstream (component-base logs/json tests):
        // {"ts":%f,"caller":"json/json_test.go:%d","msg":"test","v":0,"ns":"default","podnum":2}
        // {"ts":%f,"caller":"json/json_test.go:%d","msg":"wrong namespace","ns":"default","podnum":2,"time":"1µs","err":"invalid namespace:default"}
        let info = Fields {
            message: "test".into(),
            values: vec![
                ("ns", Value::Str("default".into())),
                ("podnum", Value::Int(2)),
            ],
            ..Fields::default()
        };
        let r = Record {
            level: Level::INFO,
            v: 0,
            file: "src/logging/json_test.rs",
            line: 12,
            fields: &info,
        };
        assert_eq!(
            line(&r, 123.5),
            "{\"ts\":123.5,\"caller\":\"logging/json_test.rs:12\",\"msg\":\"test\",\"v\":0,\"ns\":\"default\",\"podnum\":2}\n"
        );
        let err = Fields {
            message: "wrong namespace".into(),
            err: Some("invalid namespace:default".into()),
            values: vec![("time", Value::Str("1µs".into()))],
            ..Fields::default()
        };
        let r = Record {
            level: Level::ERROR,
            fields: &err,
            ..r
        };
        assert_eq!(
            line(&r, 0.000123),
            "{\"ts\":0.000123,\"caller\":\"logging/json_test.rs:12\",\"msg\":\"wrong namespace\",\"time\":\"1µs\",\"err\":\"invalid namespace:default\"}\n"
        );
    }

    #[test]
    fn caller_keeps_one_directory() {
        assert_eq!(caller("src/daemon/mod.rs"), "daemon/mod.rs");
        assert_eq!(caller("main.rs"), "main.rs");
        assert_eq!(caller("src/main.rs"), "src/main.rs");
    }
}

//! YAML text as upstream kube-proxy writes it: Kubernetes encodes the object to JSON and converts the
//! JSON to YAML with `sigs.k8s.io/yaml` (go-yaml v2). That fixes every detail of the text: map keys in
//! go-yaml's order, sequences not indented under their key, integral JSON numbers as integers, other
//! numbers in Go's shortest `%g` form, and a string quoted only when go-yaml would read it back as
//! something else (`""`, `"0"`, `"1.35"`, `"true"`: double quotes) or when it cannot be a plain scalar
//! (`'[::]:10256'`: single quotes).

use serde_json::{Map, Number, Value};
use std::cmp::Ordering;

/// Render a JSON value (an object at the top) as go-yaml v2 does.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        other => {
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
    out
}

fn write_map(out: &mut String, map: &Map<String, Value>, indent: usize) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| key_order(a.0, b.0));
    for (key, value) in entries {
        out.push_str(&" ".repeat(indent));
        out.push_str(&string(key));
        out.push(':');
        write_value(out, value, indent, indent + 2);
    }
}

/// The value after `key:`; nested maps indent by two, sequences stay at the key's indentation.
fn write_value(out: &mut String, value: &Value, seq_indent: usize, map_indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(out, map, map_indent);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_seq(out, items, seq_indent);
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

fn write_seq(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match item {
            Value::Object(map) if !map.is_empty() => {
                // The first entry shares the dash's line; the others align with it.
                let mut nested = String::new();
                write_map(&mut nested, map, indent + 2);
                out.push(' ');
                out.push_str(&nested[indent + 2..]);
            }
            Value::Array(inner) if !inner.is_empty() => {
                let mut nested = String::new();
                write_seq(&mut nested, inner, indent + 2);
                out.push(' ');
                out.push_str(&nested[indent + 2..]);
            }
            other => {
                out.push(' ');
                out.push_str(&inline(other));
                out.push('\n');
            }
        }
    }
}

/// A scalar, or an empty collection in flow style.
fn inline(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".to_string(),
        Value::Object(_) => "{}".to_string(),
    }
}

fn number(n: &Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (_, Some(u), _) => u.to_string(),
        (_, _, Some(f)) => go_float(f),
        _ => n.to_string(),
    }
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)` with go-yaml's names for the special values.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.to_string();
    }
    if f == 0.0 {
        return "0".to_string();
    }
    // Shortest round-trip digits, as `d.ddd e X`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// A string scalar, quoted the way go-yaml v2 quotes it.
fn string(s: &str) -> String {
    if s.contains('\n') || has_special(s) || resolves_to_non_string(s) || is_base60_float(s) {
        double_quoted(s)
    } else if plain_allowed(s) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

fn has_special(s: &str) -> bool {
    s.chars()
        .any(|c| c == '\u{feff}' || (c.is_control() && c != '\t'))
}

fn double_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{feff}' => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether go-yaml would read the plain scalar `s` as null, a boolean, a number or a timestamp.
fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF", "<<",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    if !s.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) {
        return false;
    }
    let plain = s.replace('_', "");
    is_go_int(&plain) || is_yaml_float(&plain) || is_timestamp(s)
}

/// Go's `strconv.ParseInt(s, 0, 64)` / `ParseUint` syntax (range not checked).
fn is_go_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits = |t: &str, radix: u32| !t.is_empty() && t.chars().all(|c| c.is_digit(radix));
    let lower = body.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        digits(hex, 16)
    } else if let Some(oct) = lower.strip_prefix("0o") {
        digits(oct, 8)
    } else if let Some(bin) = lower.strip_prefix("0b") {
        digits(bin, 2)
    } else if body.len() > 1 && body.starts_with('0') {
        digits(body, 8)
    } else {
        digits(body, 10)
    }
}

/// go-yaml's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_yaml_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (num, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let all_digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    let num_ok = match num.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && all_digits(frac),
        Some((int, frac)) => !int.is_empty() && all_digits(int) && all_digits(frac),
        None => !num.is_empty() && all_digits(num),
    };
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && all_digits(e)
    });
    num_ok && exp_ok
}

/// A date `YYYY-M-D`, alone or followed by a time, as go-yaml's timestamp formats accept.
fn is_timestamp(s: &str) -> bool {
    let date_end = s.find(['T', 't', ' ']).unwrap_or(s.len());
    let parts: Vec<&str> = s[..date_end].split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return false;
    };
    let num = |t: &str, lo: usize, hi: usize| {
        (lo..=hi).contains(&t.len()) && t.chars().all(|c| c.is_ascii_digit())
    };
    num(y, 4, 4) && num(m, 1, 2) && num(d, 1, 2)
}

/// go-yaml's base-60 float check (`1:20`), which it quotes for YAML 1.1 readers.
fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (body, frac) = match body.split_once('.') {
        Some((b, f)) => (b, Some(f)),
        None => (body, None),
    };
    let mut parts = body.split(':');
    let head = parts.next().unwrap_or("");
    let head_ok = head.starts_with(|c: char| c.is_ascii_digit())
        && head.chars().all(|c| c.is_ascii_digit() || c == '_');
    let rest: Vec<&str> = parts.collect();
    let rest_ok = !rest.is_empty()
        && rest.iter().all(|p| {
            (1..=2).contains(&p.len())
                && p.chars().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || p.as_bytes()[0] <= b'5')
        });
    let frac_ok = frac.is_none_or(|f| f.chars().all(|c| c.is_ascii_digit() || c == '_'));
    head_ok && rest_ok && frac_ok
}

/// The emitter's check for a plain scalar in block context (libyaml's `analyze_scalar`).
fn plain_allowed(s: &str) -> bool {
    if s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    if s.starts_with([' ', '\t']) || s.ends_with([' ', '\t']) {
        return false;
    }
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_blank = chars.get(i + 1).is_none_or(|n| *n == ' ' || *n == '\t');
        let preceded_by_blank = i > 0 && (chars[i - 1] == ' ' || chars[i - 1] == '\t');
        let indicator = if i == 0 {
            "#,[]{}&*!|>'\"%@`".contains(c)
                || ((c == '?' || c == ':' || c == '-') && followed_by_blank)
        } else {
            (c == ':' && followed_by_blank) || (c == '#' && preceded_by_blank)
        };
        if indicator {
            return false;
        }
    }
    true
}

/// go-yaml v2's map key order: strings compared rune by rune, other runes before letters, runs of
/// digits compared as numbers.
fn key_order(a: &str, b: &str) -> Ordering {
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let number = |r: &[char]| -> (u128, usize) {
            let digits: String = r[i..].iter().take_while(|c| c.is_ascii_digit()).collect();
            (digits.parse().unwrap_or(0), digits.len())
        };
        let ((an, ai), (bn, bi)) = (number(&ar), number(&br));
        return an.cmp(&bn).then(ai.cmp(&bi)).then(ar[i].cmp(&br[i]));
    }
    ar.len().cmp(&br.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_quoted_like_go_yaml() {
        for (s, want) in [
            ("0.0.0.0", "0.0.0.0"),
            ("0.0.0.0:10256", "0.0.0.0:10256"),
            (
                "application/vnd.kubernetes.protobuf",
                "application/vnd.kubernetes.protobuf",
            ),
            ("", "\"\""),
            ("0", "\"0\""),
            ("1.35", "\"1.35\""),
            ("true", "\"true\""),
            ("on", "\"on\""),
            ("0x1F", "\"0x1F\""),
            ("1e3", "\"1e3\""),
            ("2026-11-25", "\"2026-11-25\""),
            ("1:20", "\"1:20\""),
            ("[::]:10256", "'[::]:10256'"),
            ("[::1]:10249", "'[::1]:10249'"),
            ("::", "'::'"),
            ("fd00::1", "fd00::1"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("30000-31000", "30000-31000"),
            ("a: b", "'a: b'"),
            ("x #y", "'x #y'"),
            (" lead", "' lead'"),
            ("it's", "it's"),
            ("-x", "-x"),
            ("- x", "'- x'"),
        ] {
            assert_eq!(string(s), want, "{s:?}");
        }
    }

    #[test]
    fn floats_like_go_g_format() {
        for (f, want) in [
            (0.5, "0.5"),
            (7.25, "7.25"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123456.5, "123456.5"),
            (1234567.5, "1.2345675e+06"),
            (1e21, "1e+21"),
            (0.0, "0"),
        ] {
            assert_eq!(go_float(f), want, "{f}");
        }
    }

    #[test]
    fn keys_sort_like_go_yaml() {
        let mut keys = vec!["b", "a10", "a9", "B", "a_", "aa"];
        keys.sort_by(|a, b| key_order(a, b));
        assert_eq!(keys, ["B", "a_", "a9", "a10", "aa", "b"]);
    }

    #[test]
    fn layout_of_maps_and_sequences() {
        let v = json!({
            "b": {"y": [], "x": {}}, // go-yaml reads a plain y as a boolean
            "a": ["10.0.0.0/8", "primary"],
            "c": [{"filePattern": "p*", "verbosity": 2}],
            "d": null,
            "e": 5,
        });
        assert_eq!(
            to_string(&v),
            "a:\n- 10.0.0.0/8\n- primary\nb:\n  x: {}\n  \"y\": []\nc:\n- filePattern: p*\n  verbosity: 2\nd: null\ne: 5\n"
        );
    }
}

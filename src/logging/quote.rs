//! Text the way Go writes it in klog lines: `strconv.Quote` for messages and string values, klog's
//! multi-line form for values with line breaks, and `encoding/json`'s numbers.

use std::fmt::Write;

/// Appends `s` quoted as Go's `strconv.Quote` does: `"` and `\` escaped, the C escapes for control
/// characters, `\xNN` for other ASCII control bytes, `\uNNNN`/`\UNNNNNNNN` for characters Go does not
/// print (other spaces, format characters, private use); everything else as is.
pub fn go_quote(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c < ' ' || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if !go_printable(c) => {
                let n = u32::from(c);
                let _ = if n < 0x10000 {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether Go's `unicode.IsPrint` holds for `c` (close enough for log text: letters, marks, numbers,
/// punctuation, symbols and the ASCII space print; controls, other spaces, format and private-use
/// characters do not).
fn go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(u32::from(c),
        0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e | 0x200b..=0x200f | 0x202a..=0x202e
        | 0x2060..=0x2064 | 0x2066..=0x206f | 0xfeff | 0xfff9..=0xfffb | 0xe000..=0xf8ff
        | 0xf0000..=0x10ffff)
}

/// Appends `=` and a string value as klog does: quoted on one line, or, when it holds a line break,
/// `=<`, each line indented by a tab, and ` >` on a line of its own.
pub fn klog_string(out: &mut String, s: &str) {
    if !s.contains('\n') {
        out.push('=');
        go_quote(out, s);
        return;
    }
    out.push_str("=<\n");
    let mut rest = s;
    while let Some(i) = rest.find('\n') {
        out.push('\t');
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
    }
    if rest.is_empty() {
        out.push_str(" >");
    } else {
        out.push('\t');
        out.push_str(rest);
        out.push_str("\n >");
    }
}

/// Appends a float as Go's `encoding/json` writes it (klog's fallback serializer): the shortest
/// decimal that reads back the same, exponent form below 1e-6 and from 1e21 on (`1e+21`, `1e-7`).
/// NaN and infinities are not JSON: klog writes its internal-error string instead.
pub fn json_float(out: &mut String, f: f64) {
    if !f.is_finite() {
        let _ = write!(
            out,
            "\"<internal error: json: unsupported value: {}>\"",
            go_float_name(f)
        );
        return;
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => {
                let _ = write!(out, "{mantissa}e+{exp}");
            }
            _ => out.push_str(&text),
        }
    } else {
        let _ = write!(out, "{f}");
    }
}

/// How Go prints a non-finite float.
fn go_float_name(f: f64) -> &'static str {
    if f.is_nan() {
        "NaN"
    } else if f > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(s: &str) -> String {
        let mut out = String::new();
        go_quote(&mut out, s);
        out
    }

    #[test]
    fn quotes_as_go_strconv_quote() {
        // Expected texts are what Go's strconv.Quote returns for the same input.
        assert_eq!(quoted("plain"), r#""plain""#);
        assert_eq!(quoted(r#"a "b" \c"#), r#""a \"b\" \\c""#);
        assert_eq!(quoted("tab\tnl\ncr\r"), r#""tab\tnl\ncr\r""#);
        assert_eq!(quoted("\u{1}\u{7f}\u{7}"), r#""\x01\x7f\a""#);
        assert_eq!(quoted("µs ünï 日本"), "\"µs ünï 日本\"");
        assert_eq!(quoted("nb\u{a0}sp zw\u{200b}"), r#""nb\u00a0sp zw\u200b""#);
        assert_eq!(quoted("\u{feff}"), r#""\ufeff""#);
    }

    #[test]
    fn multi_line_values_use_klog_delimiters() {
        let mut out = String::new();
        klog_string(&mut out, "line 1\nline 2");
        assert_eq!(out, "=<\n\tline 1\n\tline 2\n >");
        out.clear();
        klog_string(&mut out, "ends\n");
        assert_eq!(out, "=<\n\tends\n >");
        out.clear();
        klog_string(&mut out, "one line");
        assert_eq!(out, "=\"one line\"");
    }

    #[test]
    fn floats_as_go_json() {
        let f = |v: f64| {
            let mut out = String::new();
            json_float(&mut out, v);
            out
        };
        assert_eq!(f(0.5), "0.5");
        assert_eq!(f(3.0), "3");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1.5e-7), "1.5e-7");
        assert_eq!(f(-2.25), "-2.25");
        assert_eq!(
            f(f64::NAN),
            "\"<internal error: json: unsupported value: NaN>\""
        );
    }
}

//! What an explanation request asks for, read from its path and query (`/debug/services`,
//! `/debug/services/<namespace>/<name>`, `?format=json|text`), and the path `kube-proxy explain` sends
//! (each name percent-encoded, so nothing it is given can reach the request line unescaped).

use crate::cluster::model::{ServiceName, is_rfc1123_label};

/// The listing's path.
pub const LISTING: &str = "/debug/services";

/// The explanation's two forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    Json,
    Text,
}

impl Form {
    /// The `format` query value.
    pub fn name(self) -> &'static str {
        match self {
            Form::Json => "json",
            Form::Text => "text",
        }
    }
}

/// Every Service, or one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    All,
    One(ServiceName),
}

/// One explanation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainRequest {
    pub target: Target,
    pub form: Form,
}

/// Why a request is refused: its HTTP status and the message for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

fn bad(message: String) -> Refused {
    Refused {
        status: 400,
        message,
    }
}

/// The value of one hex digit.
fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Why percent-encoded text could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum PercentError {
    /// A `%` not followed by two hex digits.
    #[error("a % not followed by two hex digits")]
    Escape,
    /// Escapes that decode to bytes that are not UTF-8.
    #[error("escapes that are not UTF-8")]
    Utf8(#[source] std::string::FromUtf8Error),
}

/// Percent-decodes `s` (`+` is a space in a query, `plus_is_space`); an error for a broken escape or
/// bytes that are not UTF-8.
fn decode(s: &str, plus_is_space: bool) -> Result<String, PercentError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let v = b
                    .get(i + 1..i + 3)
                    .and_then(|h| Some((hex(h[0])? << 4) | hex(h[1])?))
                    .ok_or(PercentError::Escape)?;
                out.push(v);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(PercentError::Utf8)
}

/// Percent-encodes every byte of `s` outside RFC 3986's unreserved characters.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A namespace or name as Kubernetes allows them: an RFC 1123 label (Service names may start with a digit
/// since Kubernetes 1.37).
fn check_name(what: &str, v: &str) -> Result<(), Refused> {
    if is_rfc1123_label(v) {
        return Ok(());
    }
    let shown: String = v.chars().take(64).collect();
    Err(bad(format!(
        "{what} {shown:?} is not a Kubernetes name (1 to 63 lowercase letters, digits and '-', \
         starting and ending with a letter or digit)"
    )))
}

/// The form the query asks for (`format=json`, the default, or `format=text`; the last one counts,
/// other parameters are ignored).
fn form(query: Option<&str>) -> Result<Form, Refused> {
    let mut form = Form::Json;
    for pair in query.unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(k, true).ok().as_deref() != Some("format") {
            continue;
        }
        let v = decode(v, true).map_err(|e| bad(format!("format: {e}")))?;
        form = match v.as_str() {
            "" | "json" => Form::Json,
            "text" => Form::Text,
            other => {
                let shown: String = other.chars().take(32).collect();
                return Err(bad(format!("unknown format {shown:?}: use json or text")));
            }
        };
    }
    Ok(form)
}

/// Reads the request for `path` (without the query) and `query`.
pub fn parse(path: &str, query: Option<&str>) -> Result<ExplainRequest, Refused> {
    let form = form(query)?;
    if path == LISTING {
        return Ok(ExplainRequest {
            target: Target::All,
            form,
        });
    }
    let parts: Option<Vec<&str>> = path
        .strip_prefix(LISTING)
        .and_then(|r| r.strip_prefix('/'))
        .map(|r| r.split('/').collect());
    let Some([namespace, name]) = parts.as_deref() else {
        return Err(Refused {
            status: 404,
            message: format!("no such page: ask {LISTING} or {LISTING}/<namespace>/<name>"),
        });
    };
    let namespace = decode(namespace, false).map_err(|e| bad(format!("namespace: {e}")))?;
    let name = decode(name, false).map_err(|e| bad(format!("name: {e}")))?;
    check_name("namespace", &namespace)?;
    check_name("name", &name)?;
    Ok(ExplainRequest {
        target: Target::One(ServiceName {
            namespace: namespace.as_str().into(),
            name: name.as_str().into(),
        }),
        form,
    })
}

/// The path and query that ask for `target` in `form`, every name percent-encoded.
pub fn path_of(target: Option<(&str, &str)>, form: Form) -> String {
    let f = form.name();
    match target {
        Some((ns, name)) => format!("{LISTING}/{}/{}?format={f}", encode(ns), encode(name)),
        None => format!("{LISTING}?format={f}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(ns: &str, name: &str, form: Form) -> ExplainRequest {
        ExplainRequest {
            target: Target::One(ServiceName {
                namespace: ns.into(),
                name: name.into(),
            }),
            form,
        }
    }

    #[test]
    fn paths_and_forms() {
        let all = |form| ExplainRequest {
            target: Target::All,
            form,
        };
        assert_eq!(parse(LISTING, None), Ok(all(Form::Json)));
        assert_eq!(parse(LISTING, Some("format=text")), Ok(all(Form::Text)));
        assert_eq!(
            parse(LISTING, Some("x=1&format=json&y")),
            Ok(all(Form::Json))
        );
        assert_eq!(
            parse(
                "/debug/services/kube-system/kube-dns",
                Some("format=%74ext")
            ),
            Ok(one("kube-system", "kube-dns", Form::Text))
        );
        for (path, query, status) in [
            ("/debug/services/", None, 404),
            ("/debug/services/a", None, 404),
            ("/debug/services/a/b/c", None, 404),
            ("/debug/servicesx", None, 404),
            ("/debug/services/a/b", Some("format=xml"), 400),
            ("/debug/services/a/b", Some("format=%zz"), 400),
            ("/debug/services/A/b", None, 400),
            ("/debug/services/a/%0D%0Ab", None, 400),
            ("/debug/services/a/%C3", None, 400),
            ("/debug/services//b", None, 400),
            ("/debug/services/a/-b", None, 400),
            ("/debug/services/a/b.c", None, 400),
        ] {
            let r = parse(path, query).expect_err(path);
            assert_eq!(r.status, status, "{path} {query:?}: {r:?}");
            assert!(!r.message.is_empty());
        }
        let long = "a".repeat(64);
        assert_eq!(
            parse(&format!("/debug/services/ns/{long}"), None).map_err(|r| r.status),
            Err(400)
        );
    }

    #[test]
    fn the_cli_path_reads_back_and_escapes_everything_else() {
        let p = path_of(Some(("default", "web")), Form::Text);
        assert_eq!(p, "/debug/services/default/web?format=text");
        let (path, query) = p.split_once('?').unwrap();
        assert_eq!(
            parse(path, Some(query)),
            Ok(one("default", "web", Form::Text))
        );
        let p = path_of(Some(("a b", "x\r\nHost: evil")), Form::Json);
        assert!(p.bytes().all(|b| b.is_ascii_graphic()), "{p}");
        assert_eq!(p, "/debug/services/a%20b/x%0D%0AHost%3A%20evil?format=json");
        assert_eq!(
            decode("x%0D%0AHost%3A%20evil", false).unwrap(),
            "x\r\nHost: evil"
        );
        assert_eq!(path_of(None, Form::Json), "/debug/services?format=json");
    }

    #[test]
    fn a_broken_escape_says_why_and_keeps_the_utf8_error() {
        use std::error::Error;
        assert!(matches!(decode("a%2", false), Err(PercentError::Escape)));
        let e = decode("%ff", false).unwrap_err();
        assert_eq!(e.to_string(), "escapes that are not UTF-8");
        assert!(
            e.source()
                .is_some_and(|c| c.is::<std::string::FromUtf8Error>())
        );
    }
}

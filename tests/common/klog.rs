//! A parser of klog text lines (`Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg key=value...`), for the
//! tests comparing the binary's log lines with upstream's.
#![allow(dead_code)]

/// The kind of a klog value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A quoted string.
    Str,
    /// A bare number.
    Number,
    /// `true` or `false`.
    Bool,
    /// A JSON list or object.
    Json,
    /// klog's `=<` ... ` >` block.
    MultiLine,
}

/// One parsed klog line.
#[derive(Debug, PartialEq)]
pub struct Line {
    pub severity: char,
    pub month: u32,
    pub day: u32,
    pub pid: u32,
    pub file: String,
    /// The quoted message of a structured line, or the raw text of a printf-style one.
    pub message: String,
    pub structured: bool,
    pub pairs: Vec<(String, Kind)>,
}

impl Line {
    /// What two lines of the same message must share: severity, message, keys and value kinds.
    pub fn shape(&self) -> (char, &str, bool, &[(String, Kind)]) {
        (self.severity, &self.message, self.structured, &self.pairs)
    }
}

fn digits(s: &str, n: usize) -> Result<u32, String> {
    let part = s.get(..n).ok_or("short")?;
    if !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{part:?} is not {n} digits"));
    }
    part.parse().map_err(|e| format!("{e}"))
}

/// Parses a Go-quoted string at the start of `s`; returns it and the rest.
fn go_unquote(s: &str) -> Result<(String, &str), String> {
    let mut chars = s.char_indices();
    if chars.next().map(|c| c.1) != Some('"') {
        return Err(format!("not quoted: {s}"));
    }
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &s[i + 1..])),
            '\\' => match chars.next().map(|c| c.1) {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(e @ ('"' | '\\' | 'a' | 'b' | 'f' | 'r' | 'v' | 'x' | 'u' | 'U')) => {
                    out.push('\\');
                    out.push(e)
                }
                other => return Err(format!("bad escape {other:?} in {s}")),
            },
            c if c.is_control() => return Err(format!("raw control character in {s:?}")),
            c => out.push(c),
        }
    }
    Err(format!("unterminated: {s}"))
}

/// Splits ` key=value` pairs with klog's value forms.
fn pairs(mut rest: &str) -> Result<Vec<(String, Kind)>, String> {
    let mut out = Vec::new();
    while !rest.is_empty() {
        rest = rest
            .strip_prefix(' ')
            .ok_or(format!("no space before {rest:?}"))?;
        let (key, value) = rest.split_once('=').ok_or(format!("no '=' in {rest:?}"))?;
        if key.is_empty() || key.contains('"') {
            return Err(format!("bad key {key:?}"));
        }
        let (kind, after) = if value.starts_with('"') {
            (Kind::Str, go_unquote(value)?.1)
        } else if let Some(ml) = value.strip_prefix("<\n") {
            let end = ml.find("\n >").ok_or("unterminated multi-line value")?;
            (Kind::MultiLine, &ml[end + 3..])
        } else if value.starts_with('[') || value.starts_with('{') {
            let mut de = serde_json::Deserializer::from_str(value).into_iter::<serde_json::Value>();
            de.next().ok_or("no JSON")?.map_err(|e| e.to_string())?;
            (Kind::Json, &value[de.byte_offset()..])
        } else {
            let end = value.find(' ').unwrap_or(value.len());
            let (token, after) = value.split_at(end);
            let kind = match token {
                "true" | "false" => Kind::Bool,
                t if t.parse::<f64>().is_ok() => Kind::Number,
                t => return Err(format!("bare value {t:?} is neither number nor bool")),
            };
            (kind, after)
        };
        out.push((key.to_string(), kind));
        rest = after;
    }
    Ok(out)
}

/// Parses one klog line: `Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg`.
pub fn parse(line: &str) -> Result<Line, String> {
    let severity = line.chars().next().ok_or("empty")?;
    if !"IWEF".contains(severity) {
        return Err(format!("severity {severity:?}"));
    }
    let month = digits(&line[1..], 2)?;
    let day = digits(&line[3..], 2)?;
    let time = line.get(5..22).ok_or("short header")?;
    let b = time.as_bytes();
    if b[0] != b' ' || b[3] != b':' || b[6] != b':' || b[9] != b'.' {
        return Err(format!("time {time:?}"));
    }
    for (at, n) in [(1, 2), (4, 2), (7, 2), (10, 6)] {
        digits(&time[at..], n)?;
    }
    // The pid is right-aligned in seven columns (wider pids push the rest right).
    if b[16] != b' ' {
        return Err("no space before the pid".into());
    }
    let pid_field = line.get(22..).ok_or("short")?;
    let pid_end = pid_field.trim_start().find(' ').ok_or("no pid")?
        + (pid_field.len() - pid_field.trim_start().len());
    let pid_text = &pid_field[..pid_end];
    if pid_text.len() < 7 {
        return Err(format!("pid field {pid_text:?} narrower than 7"));
    }
    let pid: u32 = pid_text
        .trim_start()
        .parse()
        .map_err(|e| format!("pid {pid_text:?}: {e}"))?;
    let rest = &pid_field[pid_end + 1..];
    let (caller, body) = rest.split_once("] ").ok_or("no '] '")?;
    let (file, lineno) = caller.rsplit_once(':').ok_or("no file:line")?;
    lineno
        .parse::<u32>()
        .map_err(|e| format!("line {lineno:?}: {e}"))?;
    if file.is_empty() || file.contains('/') || file.contains(' ') {
        return Err(format!("file {file:?}"));
    }
    let (message, structured, pairs) = if body.starts_with('"') {
        let (m, rest) = go_unquote(body)?;
        (m, true, pairs(rest)?)
    } else {
        (body.to_string(), false, Vec::new())
    };
    Ok(Line {
        severity,
        month,
        day,
        pid,
        file: file.to_string(),
        message,
        structured,
        pairs,
    })
}

/// A text's log entries: lines, with multi-line values joined to the line they belong to.
pub fn entries(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in text.lines() {
        match out.last_mut() {
            Some(last) if l.starts_with('\t') || l == " >" => {
                last.push('\n');
                last.push_str(l);
            }
            _ => out.push(l.to_string()),
        }
    }
    out
}

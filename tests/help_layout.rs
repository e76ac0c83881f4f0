//! `kube-proxy --help` against upstream's layout: cobra's usage block and pflag's flag lines (sorted,
//! aligned, types, `(default ...)` suffixes), checked on captured upstream lines first
//! (`tests/config_data/upstream-help.txt`), then on the real binary's output.

use std::collections::BTreeMap;
use std::process::Command;

/// One flag line: its name, the left column (`--name type`), where the description starts, and the
/// `(default ...)` suffix if any.
#[derive(Debug)]
struct FlagLine {
    name: String,
    left: String,
    column: usize,
    default: Option<String>,
}

fn parse_flag_line(line: &str) -> Result<FlagLine, String> {
    let rest = line
        .strip_prefix("      --")
        .or_else(|| {
            line.strip_prefix("  -")
                .filter(|r| r.as_bytes().get(1..4) == Some(b", -".as_slice()))
                .map(|r| &r[5..])
        })
        .ok_or(format!(
            "{line:?} starts neither with 6 spaces nor with '  -x, '"
        ))?;
    let name: String = rest.chars().take_while(|c| *c != ' ').collect();
    let from = line.find("--").ok_or("no --")?;
    let gap = from
        + line[from..]
            .find("   ")
            .ok_or(format!("no gap in {line:?}"))?;
    let left = line[..gap].to_string();
    let column = gap + line[gap..].len() - line[gap..].trim_start().len();
    let default = line
        .rfind(" (default ")
        .filter(|_| line.ends_with(')'))
        .map(|i| line[i + 10..line.len() - 1].to_string());
    Ok(FlagLine {
        name,
        left,
        column,
        default,
    })
}

/// pflag's rules over one block: sorted names, one description column, three spaces after the longest
/// left column, types after the name except for booleans.
fn check_block(lines: &[FlagLine]) {
    let names: Vec<&str> = lines.iter().map(|l| l.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "flags sorted by name");
    let column = lines[0].column;
    assert!(
        lines.iter().all(|l| l.column == column),
        "one description column"
    );
    let longest = lines.iter().map(|l| l.left.len()).max().unwrap();
    assert_eq!(
        column,
        longest + 3,
        "three spaces after the longest flag column"
    );
}

fn upstream() -> Vec<FlagLine> {
    let path = format!(
        "{}/tests/config_data/upstream-help.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| parse_flag_line(l).unwrap_or_else(|e| panic!("upstream: {e}")))
        .collect()
}

fn help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy"))
        .arg("--help")
        .output()
        .expect("run kube-proxy --help");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn upstream_lines_follow_pflags_rules() {
    let lines = upstream();
    check_block(&lines);
    let by_name: BTreeMap<&str, &FlagLine> = lines.iter().map(|l| (l.name.as_str(), l)).collect();
    assert_eq!(by_name["cleanup"].left, "      --cleanup");
    assert_eq!(by_name["version"].left, "      --version version[=true]");
    assert_eq!(
        by_name["kube-api-content-type"].default.as_deref(),
        Some("\"application/vnd.kubernetes.protobuf\"")
    );
}

#[test]
fn help_has_upstreams_layout_and_defaults() {
    let text = help();
    let (head, flags) = text
        .split_once("\n\nUsage:\n  kube-proxy [flags]\n\nFlags:\n")
        .unwrap_or_else(|| panic!("no cobra usage block:\n{text}"));
    assert!(!head.is_empty() && !head.contains("Usage:"));
    assert!(
        text.ends_with('\n') && !text.ends_with("\n\n"),
        "ends with one newline"
    );
    // Continuation lines (the feature gates) are indented to the description column.
    let mut ours = Vec::new();
    for l in flags.lines() {
        if l.starts_with("  -") || l.starts_with("      --") {
            ours.push(parse_flag_line(l).unwrap_or_else(|e| panic!("{e}\n{text}")));
        } else {
            let column = ours.last().map(|f: &FlagLine| f.column).unwrap();
            assert!(l.starts_with(&" ".repeat(column)), "continuation {l:?}");
        }
    }
    check_block(&ours);
    let by_name: BTreeMap<&str, &FlagLine> = ours.iter().map(|l| (l.name.as_str(), l)).collect();
    assert_eq!(by_name["help"].left, "  -h, --help");
    assert_eq!(by_name["v"].left, "  -v, --v Level");
    assert_eq!(by_name["cleanup"].left, "      --cleanup");
    assert_eq!(by_name["version"].left, "      --version version[=true]");
    assert_eq!(
        by_name["ipvs-sync-period"].left,
        "      --ipvs-sync-period duration"
    );
    assert_eq!(
        by_name["healthz-bind-address"].left,
        "      --healthz-bind-address ipport"
    );
    // Deprecated and removed flags are hidden, as upstream hides them.
    for hidden in [
        "healthz-port",
        "metrics-port",
        "proxy-port-range",
        "logtostderr",
    ] {
        assert!(!by_name.contains_key(hidden), "{hidden} shown");
    }
    // Every default upstream prints, printed the same; the sync periods' minimums are 1s since upstream
    // took them from the configuration's defaults (the captured lines predate that).
    let newer = ["iptables-min-sync-period", "ipvs-min-sync-period"];
    for up in upstream() {
        let Some(mine) = by_name.get(up.name.as_str()) else {
            continue;
        };
        if newer.contains(&up.name.as_str()) {
            assert_eq!(mine.default.as_deref(), Some("1s"), "{}", up.name);
            continue;
        }
        assert_eq!(mine.default, up.default, "default of --{}", up.name);
    }
    assert_eq!(
        by_name["logging-format"].default.as_deref(),
        Some("\"text\"")
    );
    assert_eq!(
        by_name["iptables-localhost-nodeports"].default.as_deref(),
        Some("true")
    );
    assert!(by_name["masquerade-all"].default.is_none());
    assert!(
        flags.contains("AllAlpha=true|false (ALPHA - default=false)"),
        "{flags}"
    );
}

//! klog's verbosity: `-v N` shows V(0)..V(N); `--vmodule pattern=N` sets N per source file.
//!
//! Call sites keep `tracing`'s macros. An event's V level is its `v = N` field when it has one, else
//! its level's: error, warn and info are V(0), debug V(2), trace V(4). The level also decides whether
//! the event is compiled into the filter at all (see [`max_level`]), so `debug!(...)` costs nothing
//! below `-v 2`.

use tracing::Level;
use tracing::level_filters::LevelFilter;

/// The V level of an event of `level` without a `v` field.
pub fn default_v(level: Level) -> u64 {
    match level {
        Level::TRACE => 4,
        Level::DEBUG => 2,
        _ => 0,
    }
}

/// The most detailed `tracing` level an event of V level up to `v` uses: info for V(0) and V(1),
/// debug for V(2) and V(3), trace from V(4) on.
pub fn max_level(v: u32) -> LevelFilter {
    match v {
        0 | 1 => LevelFilter::INFO,
        2 | 3 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// `-v` and `--vmodule`: which V levels to print for which source file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verbosity {
    /// `-v`.
    pub global: u32,
    /// `--vmodule` entries in order (the first matching pattern wins, as klog's).
    pub modules: Vec<(String, u32)>,
}

impl Verbosity {
    /// The largest V level printed anywhere.
    pub fn max(&self) -> u32 {
        self.modules
            .iter()
            .map(|(_, v)| *v)
            .fold(self.global, u32::max)
    }

    /// Whether an event of V level `v` from source `file` is printed.
    pub fn allows(&self, v: u64, file: Option<&str>) -> bool {
        let limit = file
            .and_then(|f| self.module_level(f))
            .unwrap_or(self.global);
        v <= u64::from(limit)
    }

    /// klog's vmodule lookup: a pattern without `/` matches the file's base name without its
    /// extension, one with `/` the whole path without it.
    fn module_level(&self, file: &str) -> Option<u32> {
        if self.modules.is_empty() {
            return None;
        }
        let stem = file.strip_suffix(".rs").unwrap_or(file);
        let base = stem.rsplit('/').next().unwrap_or(stem);
        self.modules.iter().find_map(|(pattern, v)| {
            let subject = if pattern.contains('/') { stem } else { base };
            glob(pattern.as_bytes(), subject.as_bytes()).then_some(*v)
        })
    }
}

/// Shell-style match of `*` (any run) and `?` (one character).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_to_v_and_back() {
        assert_eq!(default_v(Level::INFO), 0);
        assert_eq!(default_v(Level::WARN), 0);
        assert_eq!(default_v(Level::DEBUG), 2);
        assert_eq!(default_v(Level::TRACE), 4);
        assert_eq!(max_level(0), LevelFilter::INFO);
        assert_eq!(max_level(1), LevelFilter::INFO);
        assert_eq!(max_level(2), LevelFilter::DEBUG);
        assert_eq!(max_level(3), LevelFilter::DEBUG);
        assert_eq!(max_level(9), LevelFilter::TRACE);
    }

    #[test]
    fn vmodule_overrides_per_file() {
        let v = Verbosity {
            global: 0,
            modules: vec![("sync*".into(), 4), ("proxier/reconcile/ipvs".into(), 2)],
        };
        assert!(v.allows(0, Some("src/main.rs")));
        assert!(!v.allows(2, Some("src/main.rs")));
        assert!(v.allows(4, Some("src/daemon/sync.rs")));
        // A pattern with a slash matches the whole path (as klog's), so this one needs a leading `*/`.
        assert!(!v.allows(2, Some("src/proxier/reconcile/ipvs.rs")));
        assert!(!v.allows(2, None));
        assert_eq!(v.max(), 4);
        let whole = Verbosity {
            global: 1,
            modules: vec![("*/reconcile/ipvs".into(), 3)],
        };
        assert!(whole.allows(3, Some("src/proxier/reconcile/ipvs.rs")));
    }

    #[test]
    fn glob_matches_like_klog() {
        assert!(glob(b"sync", b"sync"));
        assert!(glob(b"s*c", b"sync"));
        assert!(glob(b"s?nc", b"sync"));
        assert!(glob(b"*", b""));
        assert!(!glob(b"sync", b"syncs"));
        assert!(!glob(b"a*b", b"acbd"));
    }
}

//! Sysctls read and written through /proc/sys.

use super::Sysctl;
use crate::kernel::{KernelError, KernelResult};
use std::path::PathBuf;

/// [`Sysctl`] over a procfs root (normally `/proc/sys`).
#[derive(Debug, Clone)]
pub struct ProcSysctl {
    root: PathBuf,
}

impl Default for ProcSysctl {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcSysctl {
    /// Uses `/proc/sys`.
    pub fn new() -> Self {
        Self::with_root("/proc/sys")
    }

    /// Uses another directory laid out like /proc/sys (tests).
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        ProcSysctl { root: root.into() }
    }

    fn path(&self, path: &str) -> KernelResult<PathBuf> {
        let rel = path.trim_start_matches('/');
        if rel.is_empty()
            || rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(KernelError::Invalid(format!("sysctl path {path:?}")));
        }
        Ok(self.root.join(rel))
    }
}

fn io_error(op: String, e: std::io::Error) -> KernelError {
    match e.kind() {
        std::io::ErrorKind::NotFound => KernelError::NotFound(op),
        _ => KernelError::Errno {
            errno: e.raw_os_error().unwrap_or(0),
            message: e.to_string(),
            op,
        },
    }
}

impl Sysctl for ProcSysctl {
    fn get(&mut self, path: &str) -> KernelResult<i64> {
        let p = self.path(path)?;
        let text = std::fs::read_to_string(&p)
            .map_err(|e| io_error(format!("read {}", p.display()), e))?;
        text.trim().parse::<i64>().map_err(|_| {
            KernelError::Invalid(format!(
                "{} holds {:?}, not an integer",
                p.display(),
                text.trim()
            ))
        })
    }

    fn set(&mut self, path: &str, value: i64) -> KernelResult<()> {
        let p = self.path(path)?;
        if !p.exists() {
            return Err(KernelError::NotFound(format!("write {}", p.display())));
        }
        std::fs::write(&p, format!("{value}\n"))
            .map_err(|e| io_error(format!("write {}", p.display()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_ensures_under_a_root() {
        let dir = std::env::temp_dir().join(format!("kprs-sysctl-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("net/ipv4/vs")).unwrap();
        std::fs::write(dir.join("net/ipv4/vs/conntrack"), "0\n").unwrap();
        std::fs::write(dir.join("net/ipv4/tcp_rmem"), "4096 131072 6291456\n").unwrap();
        let mut s = ProcSysctl::with_root(&dir);
        assert_eq!(s.get("net/ipv4/vs/conntrack").unwrap(), 0);
        assert!(s.ensure("net/ipv4/vs/conntrack", 1).unwrap());
        assert!(!s.ensure("net/ipv4/vs/conntrack", 1).unwrap());
        assert_eq!(s.get("net/ipv4/vs/conntrack").unwrap(), 1);
        assert!(matches!(
            s.get("net/ipv4/vs/nope"),
            Err(KernelError::NotFound(_))
        ));
        assert!(matches!(
            s.set("net/ipv4/vs/nope", 1),
            Err(KernelError::NotFound(_))
        ));
        assert!(matches!(
            s.get("net/ipv4/tcp_rmem"),
            Err(KernelError::Invalid(_))
        ));
        assert!(matches!(
            s.get("../etc/passwd"),
            Err(KernelError::Invalid(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

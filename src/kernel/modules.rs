//! Kernel modules: whether one is loaded (`/sys/module`), and loading it with `modprobe` (the image's,
//! reading the node's `/lib/modules`, which only a container holding `CAP_SYS_MODULE` mounts): without
//! that capability no module can be loaded, and the error says so instead of running `modprobe`.

use super::{KernelError, KernelResult};
use std::path::PathBuf;
use std::process::Command;

/// Loads kernel modules by name.
pub trait Modules: Send {
    /// Makes sure module `name` is loaded: nothing to do when it already is, else `modprobe name`.
    fn ensure_loaded(&mut self, name: &str) -> KernelResult<()>;
}

/// The real loader: `/sys/module/<name>` tells whether a module is loaded, `modprobe` (from `PATH`)
/// loads it when this process holds `CAP_SYS_MODULE` (read from `/proc/self/status`).
#[derive(Debug, Clone)]
pub struct Modprobe {
    sys_module: PathBuf,
    status: PathBuf,
}

impl Default for Modprobe {
    fn default() -> Self {
        Modprobe {
            sys_module: PathBuf::from("/sys/module"),
            status: PathBuf::from("/proc/self/status"),
        }
    }
}

/// `CAP_SYS_MODULE`'s bit in the capability sets.
const CAP_SYS_MODULE: u32 = 16;

/// Whether the effective capabilities (`CapEff:` of a `/proc/<pid>/status` text) hold `cap`.
fn has_capability(status: &str, cap: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|set| set & (1 << cap) != 0)
}

impl Modprobe {
    /// Whether module `name` is loaded (a loaded module has a `/sys/module/<name>` directory).
    pub fn is_loaded(&self, name: &str) -> bool {
        self.sys_module.join(name).is_dir()
    }
}

/// A module name as the kernel knows it: letters, digits and `_` only (nothing a shell or modprobe
/// would read as an option).
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Modules for Modprobe {
    fn ensure_loaded(&mut self, name: &str) -> KernelResult<()> {
        if !valid_name(name) {
            return Err(KernelError::Invalid(format!("module name {name:?}")));
        }
        if self.is_loaded(name) {
            return Ok(());
        }
        let status = std::fs::read_to_string(&self.status).unwrap_or_default();
        if !has_capability(&status, CAP_SYS_MODULE) {
            return Err(KernelError::Unsupported(format!(
                "cannot load module {name}: this process lacks CAP_SYS_MODULE (load it on the node, or \
                 give the kube-proxy container the capability: deploy/components/scheduler-modules)"
            )));
        }
        super::io_counts::process("modprobe");
        let out = Command::new("modprobe").arg(name).output()?;
        if !out.status.success() {
            return Err(KernelError::Command {
                command: format!("modprobe {name}"),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(any(test, feature = "testkit"))]
/// In-memory loader: `available` modules load, others fail as `modprobe` does; every attempt is
/// recorded.
#[derive(Debug, Clone, Default)]
pub struct FakeModules {
    /// Modules that can be loaded.
    pub available: std::collections::BTreeSet<String>,
    /// Modules loaded so far.
    pub loaded: std::collections::BTreeSet<String>,
    /// Every `ensure_loaded` call, in order.
    pub attempts: Vec<String>,
}

#[cfg(any(test, feature = "testkit"))]
impl FakeModules {
    /// A loader that can load `available`.
    pub fn new(available: &[&str]) -> Self {
        FakeModules {
            available: available.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }
}

#[cfg(any(test, feature = "testkit"))]
impl Modules for FakeModules {
    fn ensure_loaded(&mut self, name: &str) -> KernelResult<()> {
        self.attempts.push(name.to_string());
        if self.loaded.contains(name) {
            return Ok(());
        }
        if !self.available.contains(name) {
            return Err(KernelError::Command {
                command: format!("modprobe {name}"),
                status: "exit status: 1".into(),
                stderr: format!("modprobe: FATAL: Module {name} not found"),
            });
        }
        self.loaded.insert(name.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_be_options_are_refused() {
        for bad in ["", "-r", "ip_vs rr", "../x", "ip-vs"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_name("ip_vs_mh"));
        let mut m = Modprobe::default();
        assert!(matches!(
            m.ensure_loaded("--remove"),
            Err(KernelError::Invalid(_))
        ));
    }

    #[test]
    fn loaded_is_read_from_sys_module() {
        let dir = std::env::temp_dir().join(format!("kprs-modules-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("ip_vs_sh")).unwrap();
        let mut m = Modprobe {
            sys_module: dir.clone(),
            ..Modprobe::default()
        };
        assert!(m.is_loaded("ip_vs_sh"));
        assert!(!m.is_loaded("ip_vs_mh"));
        // Already loaded: modprobe is not run.
        assert!(m.ensure_loaded("ip_vs_sh").is_ok());
        // Not loaded, and no CAP_SYS_MODULE: refused saying why, modprobe not run.
        let status = dir.join("status");
        std::fs::write(&status, "Name:\tkube-proxy\nCapEff:\t0000000000003000\n").unwrap();
        m.status = status;
        let e = m.ensure_loaded("ip_vs_mh").unwrap_err().to_string();
        assert!(
            e.contains("ip_vs_mh") && e.contains("lacks CAP_SYS_MODULE"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn capabilities_are_read_from_the_status_text() {
        let caps = |eff: &str| format!("Name:\tx\nCapPrm:\t000001ffffffffff\nCapEff:\t{eff}\n");
        // NET_ADMIN (12) and NET_RAW (13), as the DaemonSet's kube-proxy container.
        assert!(!has_capability(&caps("0000000000003000"), CAP_SYS_MODULE));
        assert!(has_capability(&caps("0000000000013000"), CAP_SYS_MODULE));
        assert!(has_capability(&caps("000001ffffffffff"), CAP_SYS_MODULE));
        assert!(!has_capability("Name:\tx\n", CAP_SYS_MODULE));
    }
}

//! A Kubernetes container's `securityContext` as `ctr run` flags (what the kubelet asks of containerd's CRI
//! plugin, for the fields the manifests use), and what the kernel says a running process got.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Container;
use std::collections::BTreeSet;

/// Every Linux capability, in bit order (`linux/capability.h`, 0..=40).
pub const CAPS: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capabilities a container ends up with: `drop: [ALL]` then `add` (the only form the manifests use;
/// anything else panics rather than guess the runtime's default set).
pub fn granted(c: &Container) -> BTreeSet<String> {
    let caps = c
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.clone())
        .unwrap_or_default();
    assert_eq!(
        caps.drop.unwrap_or_default(),
        ["ALL"],
        "{}: only drop: [ALL] is mapped",
        c.name
    );
    let added: BTreeSet<String> = caps.add.unwrap_or_default().into_iter().collect();
    for cap in &added {
        assert!(
            CAPS.contains(&cap.as_str()),
            "{}: unknown capability {cap}",
            c.name
        );
    }
    added
}

/// The `ctr run` flags for `c`'s securityContext: `--privileged`, or the capability set (every other one
/// dropped), `--read-only` for readOnlyRootFilesystem, `--seccomp` (containerd's default profile, the one
/// the CRI plugin applies for RuntimeDefault), and `--allow-new-privs` unless allowPrivilegeEscalation is
/// false (ctr sets no_new_privs by default, the kubelet only for false). Unmapped fields panic.
pub fn ctr_flags(c: &Container) -> Vec<String> {
    let Some(sc) = c.security_context.clone() else {
        panic!(
            "{}: no securityContext (the runtime's defaults are not mapped)",
            c.name
        )
    };
    assert!(
        sc.run_as_user.is_none()
            && sc.run_as_group.is_none()
            && sc.run_as_non_root.is_none()
            && sc.se_linux_options.is_none()
            && sc.app_armor_profile.is_none()
            && sc.proc_mount.is_none(),
        "{}: a securityContext field the image test does not map: {sc:?}",
        c.name
    );
    let mut flags = Vec::new();
    if sc.allow_privilege_escalation != Some(false) {
        flags.push("--allow-new-privs".to_string());
    }
    if sc.privileged == Some(true) {
        flags.push("--privileged".to_string());
        return flags;
    }
    let keep = granted(c);
    for cap in CAPS.iter().filter(|cap| !keep.contains(**cap)) {
        flags.push(format!("--cap-drop=CAP_{cap}"));
    }
    for cap in &keep {
        flags.push(format!("--cap-add=CAP_{cap}"));
    }
    if sc.read_only_root_filesystem == Some(true) {
        flags.push("--read-only".to_string());
    }
    match sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()) {
        Some("RuntimeDefault") => flags.push("--seccomp".to_string()),
        None | Some("Unconfined") => {}
        Some(other) => panic!("{}: seccomp profile {other} not mapped", c.name),
    }
    flags
}

/// Bit mask of capability names.
pub fn mask<'a>(names: impl IntoIterator<Item = &'a String>) -> u64 {
    names.into_iter().fold(0, |m, n| {
        let bit = CAPS.iter().position(|c| c == n).expect("known capability");
        m | 1 << bit
    })
}

/// What the kernel reports for a process (`/proc/<pid>/status`, `/proc/<pid>/mountinfo`).
#[derive(Debug, PartialEq, Eq)]
pub struct ProcSecurity {
    pub cap_eff: u64,
    pub cap_prm: u64,
    pub cap_bnd: u64,
    pub no_new_privs: bool,
    /// 0 none, 1 strict, 2 filter.
    pub seccomp: u8,
    /// The process's `/` is mounted read-only.
    pub root_read_only: bool,
}

impl ProcSecurity {
    pub fn read(pid: u32) -> ProcSecurity {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_else(|| panic!("{name} not in /proc/{pid}/status"))
                .to_string()
        };
        let hex = |name: &str| u64::from_str_radix(&field(name), 16).expect("hex");
        let mountinfo =
            std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
        // Fields: id parent major:minor root mount-point options ...; the last "/" mount is the visible one.
        let root = mountinfo
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some("/"))
            .expect("a / mount");
        let options = root.split(' ').nth(5).unwrap_or_default();
        ProcSecurity {
            cap_eff: hex("CapEff:"),
            cap_prm: hex("CapPrm:"),
            cap_bnd: hex("CapBnd:"),
            no_new_privs: field("NoNewPrivs:") == "1",
            seccomp: field("Seccomp:").parse().expect("Seccomp"),
            root_read_only: options.split(',').any(|o| o == "ro"),
        }
    }

    /// What a root process of a container with `c`'s (restricted) securityContext must show.
    pub fn expected(c: &Container) -> ProcSecurity {
        let sc = c.security_context.clone().expect("securityContext");
        let caps = mask(&granted(c));
        let seccomp =
            sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()) == Some("RuntimeDefault");
        ProcSecurity {
            cap_eff: caps,
            cap_prm: caps,
            cap_bnd: caps,
            no_new_privs: sc.allow_privilege_escalation == Some(false),
            seccomp: if seccomp { 2 } else { 0 },
            root_read_only: sc.read_only_root_filesystem == Some(true),
        }
    }
}

//! The least-privilege pod: what each container of the kube-proxy DaemonSet (and the cleanup Job) may do.
//! tests/e2e_image.rs runs the image with exactly these settings and checks the running process.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use std::collections::BTreeSet;

/// What the daemon needs: NET_ADMIN (IPVS, ipsets, rtnetlink, conntrack over netlink, iptables writes) and
/// NET_RAW (iptables-legacy reads and writes its tables through a raw socket).
pub const DAEMON_CAPS: &[&str] = &["NET_ADMIN", "NET_RAW"];
/// What loading modules needs.
pub const MODULES_CAPS: &[&str] = &["SYS_MODULE"];

/// The container named `name` of `list`.
pub fn container<'a>(list: &'a [Container], name: &str) -> &'a Container {
    list.iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// (dropped, added) capabilities of a container.
pub fn capabilities(c: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let caps = c
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref());
    let set = |v: Option<&Vec<String>>| v.into_iter().flatten().cloned().collect();
    (
        set(caps.and_then(|c| c.drop.as_ref())),
        set(caps.and_then(|c| c.add.as_ref())),
    )
}

/// Not privileged (said explicitly), no privilege escalation, read-only root file system, the runtime's
/// default seccomp profile, every capability dropped and exactly `add` added.
pub fn check_restricted(c: &Container, add: &[&str]) {
    let what = &c.name;
    let sc = c
        .security_context
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: no securityContext"));
    assert_eq!(
        sc.privileged,
        Some(false),
        "{what}: privileged: false, spelled out"
    );
    assert_eq!(
        sc.allow_privilege_escalation,
        Some(false),
        "{what}: escalation"
    );
    assert_eq!(
        sc.read_only_root_filesystem,
        Some(true),
        "{what}: read-only root"
    );
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault"),
        "{what}: seccomp"
    );
    let (dropped, added) = capabilities(c);
    assert_eq!(dropped, BTreeSet::from(["ALL".to_string()]), "{what}: drop");
    let want: BTreeSet<String> = add.iter().map(|s| s.to_string()).collect();
    assert_eq!(added, want, "{what}: capabilities added");
}

/// The `--config=` argument of a command.
pub fn config_arg(c: &Container) -> String {
    c.command
        .iter()
        .flatten()
        .find(|a| a.starts_with("--config="))
        .unwrap_or_else(|| panic!("{}: no --config", c.name))
        .clone()
}

/// The pod of the least-privilege DaemonSet: init containers `init_names` in this order (`ipvs-modules`
/// loading at least `ip_vs`, `nf_conntrack` and the node scheduler's module with SYS_MODULE only, then the
/// privileged `kube-proxy-init` running `--init-only` on the daemon's configuration), and the daemon
/// restricted to [`DAEMON_CAPS`].
pub fn check_least_privilege(pod: &PodSpec, init_names: &[&str], node_scheduler: &str) {
    let inits = pod.init_containers.clone().unwrap_or_default();
    let names: Vec<&str> = inits.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, init_names, "init containers, in order");
    let main = container(&pod.containers, "kube-proxy");
    check_restricted(main, DAEMON_CAPS);

    if init_names.contains(&"ipvs-modules") {
        let m = container(&inits, "ipvs-modules");
        check_restricted(m, MODULES_CAPS);
        let cmd = m.command.clone().unwrap_or_default();
        assert_eq!(cmd[..2], ["/sbin/modprobe", "-a"], "ipvs-modules: {cmd:?}");
        let node_module = format!("ip_vs_{node_scheduler}");
        for module in ["ip_vs", "nf_conntrack", node_module.as_str()] {
            assert!(
                cmd.iter().any(|a| a == module),
                "ipvs-modules lacks {module}: {cmd:?}"
            );
        }
        let mounts = m.volume_mounts.clone().unwrap_or_default();
        assert!(
            mounts
                .iter()
                .any(|v| v.mount_path == "/lib/modules" && v.read_only == Some(true)),
            "ipvs-modules reads the node's /lib/modules: {mounts:?}"
        );
    }

    let init = container(&inits, "kube-proxy-init");
    let sc = init
        .security_context
        .as_ref()
        .expect("kube-proxy-init securityContext");
    assert_eq!(
        sc.privileged,
        Some(true),
        "kube-proxy-init writes /proc/sys"
    );
    let main_cmd = main.command.clone().unwrap_or_default();
    let expected = vec![
        main_cmd[0].clone(),
        config_arg(main),
        "--init-only".to_string(),
    ];
    assert_eq!(
        init.command.clone().unwrap_or_default(),
        expected,
        "kube-proxy-init command"
    );
    // It reads the configuration where the daemon does: same volume at the same path.
    let (dir, _) = config_arg(main)["--config=".len()..]
        .rsplit_once('/')
        .map(|(d, f)| (d.to_string(), f.to_string()))
        .expect("--config names a file");
    let mount_of = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path.trim_end_matches('/') == dir)
            .map(|m| (m.name.clone(), m.mount_path.clone()))
    };
    assert!(mount_of(main).is_some(), "the daemon mounts {dir}");
    assert_eq!(
        mount_of(init),
        mount_of(main),
        "kube-proxy-init mounts {dir} as the daemon does"
    );
}

/// `deploy/jobs/cleanup.yaml`: `kube-proxy --cleanup` on one node, in the host network namespace, with the
/// xtables lock, and no more privilege than the daemon.
#[test]
fn cleanup_job_runs_kube_proxy_cleanup_on_one_node() {
    let text = super::read("deploy/jobs/cleanup.yaml");
    let doc = super::single_doc(&text, "jobs/cleanup.yaml");
    let job: Job = super::strict(&serde_json::Value::Object(doc), "jobs/cleanup.yaml");
    assert_eq!(job.metadata.namespace.as_deref(), Some("kube-system"));
    let spec = job.spec.expect("spec");
    let pod = spec.template.spec.expect("pod spec");
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert!(pod.node_name.is_some(), "the Job names its node");
    assert_eq!(
        pod.service_account_name, None,
        "--cleanup needs no API access"
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
    let c = container(&pod.containers, "cleanup");
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        [super::BINARY_PATH, "--cleanup"]
    );
    check_restricted(c, DAEMON_CAPS);
    let lock = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/run/xtables.lock")
        .expect("the xtables lock");
    assert_ne!(lock.read_only, Some(true));
}

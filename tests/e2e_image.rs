//! The image under test: the OCI archive scripts/build-image.sh builds, checked against deploy/ and run the
//! way the DaemonSet runs it.
//!
//! - `image_contents_match_the_daemonset` (host): the linux/amd64 image of the archive's index (its manifest
//!   and config; the arm64 image and the index: tests/image_arm64.rs); the DaemonSet's
//!   command, entrypoint and probe port against the image's config and files; the image's own kube-proxy,
//!   iptables (both variants), ipset and modprobe run with the image's libraries (`chroot`).
//! - `image_runs_like_the_daemonset` (UML guest): containerd imports the archive (`ctr images import`) and runs
//!   the image as the DaemonSet's pod: its init containers in order (`ipvs-modules` with SYS_MODULE only,
//!   then the privileged `kube-proxy-init --init-only`), then the daemon with the DaemonSet's command, env,
//!   volume mounts (host network, ConfigMap directory, `/run/xtables.lock`) and exactly its securityContext (capabilities, no_new_privs, read-only root, the default
//!   seccomp profile; `tests/common/podsec.rs` maps them to ctr's flags and reads them back from the running
//!   process): ClusterIP and NodePort traffic, the DaemonSet's probe paths, a restart adopting the rules,
//!   `--cleanup` as `deploy/jobs/cleanup.yaml` runs it leaving nothing, a rejected config exiting non-zero
//!   with the field named; without SYS_MODULE (and without the module tree, which the daemon's container
//!   does not mount) modprobe fails, and a Service asking for an unloaded scheduler stays on the node's
//!   with a Warning Event saying the capability is missing; with the capability and the mount of
//!   `deploy/components/scheduler-modules` the image's modprobe loads from the node's `/lib/modules`.
//!
//! A missing image fails these tests (scripts/test.sh builds it first); `KPRS_SKIP_IMAGE_TESTS=1` opts out.
mod common;

use common::e2e::{
    ABC, E2e, KernelState, Options, abc_pods, answers, client, distinct, has_vs, http_get, ip,
    ipvs, real_servers, service, slice,
};
use common::image::{
    archive, image_ref, image_required, json_file, run, unpack_archive, unpack_platform,
};
use common::podsec;
use common::uml::{self, BootOptions, sh};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec, VolumeMount};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// containerd's directory inside the guest (tmpfs /run: nothing lands on the host's /var/lib).
const CTRD: &str = "/run/kprs-containerd";
/// In the UML guest, the node's module tree (the host's /lib/modules has no UML modules).
const NODE_MODULES: &str = "/usr/lib/uml/modules";
/// A module no guest loads at boot (tests/common/uml.rs MODULES), for the image's modprobe.
const PROBE_MODULE: &str = "nf_conntrack_ftp";
const T: Duration = Duration::from_secs(2);

/// The DaemonSet of deploy/base/daemonset.yaml and its kube-proxy container.
fn daemonset() -> (PodSpec, Container) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/daemonset.yaml");
    let text = std::fs::read_to_string(path).expect("read deploy/base/daemonset.yaml");
    let ds: DaemonSet = serde_saphyr::from_str(&text).expect("parse deploy/base/daemonset.yaml");
    let pod = ds.spec.expect("spec").template.spec.expect("pod spec");
    let c = pod
        .containers
        .iter()
        .find(|c| c.name == "kube-proxy")
        .expect("kube-proxy container")
        .clone();
    (pod, c)
}

/// The archive unpacked into `dir`: the linux/amd64 image's (manifest, config, rootfs) — the platform
/// containerd runs on this host.
fn unpack(dir: &Path) -> (Value, Value, PathBuf) {
    let index = unpack_archive(dir);
    unpack_platform(dir, &index, "amd64")
}

/// Runs a program of the image with the image's own libraries; returns its output.
fn in_rootfs(rootfs: &Path, argv: &[&str]) -> String {
    let out = run(Command::new("chroot").arg(rootfs).args(argv));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn image_contents_match_the_daemonset() {
    if !image_required("image_contents_match_the_daemonset") {
        return;
    }
    let dir = uml::run_dir("image_contents");
    let (manifest, config, rootfs) = unpack(&dir);
    let docker = json_file(&dir.join("manifest.json"));
    assert_eq!(
        docker[0]["RepoTags"][0],
        image_ref().trim_start_matches("docker.io/library/")
    );
    assert_eq!(
        docker[0]["Layers"].as_array().map(Vec::len),
        manifest["layers"].as_array().map(Vec::len)
    );

    let (_, c) = daemonset();
    let command = c.command.clone().expect("DaemonSet command");
    let entrypoint = config["config"]["Entrypoint"]
        .as_array()
        .expect("Entrypoint");
    assert_eq!(
        entrypoint,
        &vec![json!(command[0])],
        "image entrypoint vs DaemonSet command"
    );
    let env: Vec<&str> = config["config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        env.iter()
            .any(|e| e.starts_with("PATH=") && e.contains("/usr/sbin")),
        "{env:?}"
    );
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.title"],
        "kube-proxy-rs"
    );

    // The command's binary is in the image, stripped, and runs with the image's libraries.
    let bin = rootfs.join(command[0].trim_start_matches('/'));
    assert!(bin.is_file(), "{} not in the image", command[0]);
    let sections = run(Command::new("readelf").arg("-S").arg(&bin));
    assert!(
        !String::from_utf8_lossy(&sections.stdout).contains(".debug_info"),
        "binary not stripped"
    );
    let version = in_rootfs(&rootfs, &[&command[0], "--version"]);
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
    // Both iptables variants (the daemon picks one at run time), ipset and modprobe, runnable.
    for tool in ["iptables", "ip6tables"] {
        let legacy = in_rootfs(&rootfs, &[&format!("/usr/sbin/{tool}-legacy"), "--version"]);
        assert!(legacy.contains("(legacy)"), "{legacy}");
        let nft = in_rootfs(&rootfs, &[&format!("/usr/sbin/{tool}-nft"), "--version"]);
        assert!(nft.contains("(nf_tables)"), "{nft}");
        for suffix in [
            "-legacy-save",
            "-legacy-restore",
            "-nft-save",
            "-nft-restore",
        ] {
            assert!(
                rootfs.join(format!("usr/sbin/{tool}{suffix}")).exists(),
                "{tool}{suffix}"
            );
        }
    }
    assert!(in_rootfs(&rootfs, &["/usr/sbin/ipset", "--version"]).contains("ipset v"));
    assert!(in_rootfs(&rootfs, &["/sbin/modprobe", "--version"]).contains("kmod version"));
    assert!(
        rootfs
            .join("etc/ssl/certs/ca-certificates.crt")
            .metadata()
            .is_ok_and(|m| m.len() > 100_000)
    );

    // Every mount path of the DaemonSet can be mounted (no file in the way of a directory).
    for m in c.volume_mounts.as_deref().unwrap_or_default() {
        let p = rootfs.join(m.mount_path.trim_start_matches('/'));
        assert!(
            !p.is_symlink(),
            "{} is a symlink in the image",
            m.mount_path
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------------------
// In the UML guest: containerd + runc.

/// containerd inside the guest, state on tmpfs, the image imported.
struct Containerd {
    child: Child,
}

impl Containerd {
    /// cgroup v2, overlayfs, containerd; then `ctr images import` of the archive.
    fn start(dir: &Path) -> Containerd {
        sh(
            "mkdir -p /sys/fs/cgroup && (mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup) \
            && for c in cpu io memory pids; do echo +$c > /sys/fs/cgroup/cgroup.subtree_control || true; done; \
            modprobe -d /run/m overlay",
        );
        std::fs::create_dir_all(CTRD).expect("mkdir containerd dir");
        let config = format!(
            "version = 2\nroot = \"{CTRD}/root\"\nstate = \"{CTRD}/state\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = \"{CTRD}/containerd.sock\"\n"
        );
        std::fs::write(format!("{CTRD}/config.toml"), config).expect("containerd config");
        let log = std::fs::File::create(dir.join("containerd.log")).expect("containerd log");
        let child = Command::new("containerd")
            .args(["--config", &format!("{CTRD}/config.toml")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("spawn containerd");
        let ctrd = Containerd { child };
        let end = Instant::now() + Duration::from_secs(60);
        while !ctr()
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(
                Instant::now() < end,
                "containerd did not answer within 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let started = Instant::now();
        run(ctr().args(["images", "import"]).arg(archive()));
        println!("ctr images import: {:.1?}", started.elapsed());
        ctrd
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ctr() -> Command {
    let mut c = Command::new("ctr");
    c.args(["--address", &format!("{CTRD}/containerd.sock")]);
    c
}

/// Container ids: one per `ctr run`.
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// The ConfigMap-like directory the DaemonSet mounts at /var/lib/kube-proxy: the fixture's config with the
/// kubeconfig at its in-pod path (as deploy/base/configmap.yaml has it), and the kubeconfig.
fn configmap_dir(e: &E2e, name: &str, extra: &str) -> PathBuf {
    let dir = e.dir.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir configmap dir");
    let kubeconfig = e.dir.join("kubeconfig");
    let config = std::fs::read_to_string(&e.config_path).expect("read config");
    let config = config.replace(
        &format!("kubeconfig: {}", kubeconfig.display()),
        "kubeconfig: /var/lib/kube-proxy/kubeconfig.conf",
    );
    std::fs::write(dir.join("config.conf"), format!("{config}{extra}")).expect("config.conf");
    std::fs::copy(&kubeconfig, dir.join("kubeconfig.conf")).expect("kubeconfig.conf");
    dir
}

/// `ctr run` of the image as container `c` of `pod` runs: host network, `c`'s securityContext exactly
/// (tests/common/podsec.rs maps it to ctr's flags), its env, and its volumes mounted where it mounts them
/// (configMap → `configmap`; hostPath → the guest's path, the node's /lib/modules being the UML module
/// tree); `argv` replaces the entrypoint as a pod's `command` does.
fn ctr_run(e: &E2e, pod: &PodSpec, c: &Container, configmap: &Path, argv: &[String]) -> Command {
    assert_eq!(
        pod.host_network,
        Some(true),
        "the pod must use the host network"
    );
    let id = format!("{}-{}", c.name, RUNS.fetch_add(1, Ordering::SeqCst));
    let mut cmd = ctr();
    cmd.args(["run", "--rm", "--net-host"])
        .args(podsec::ctr_flags(c));
    for m in c.volume_mounts.as_deref().unwrap_or_default() {
        let vol = pod
            .volumes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|v| v.name == m.name);
        let vol = vol.unwrap_or_else(|| panic!("volume {} not declared", m.name));
        let src = match (&vol.config_map, &vol.host_path) {
            (Some(_), _) => configmap.to_path_buf(),
            (_, Some(h)) if h.path == "/lib/modules" => PathBuf::from(NODE_MODULES),
            (_, Some(h)) => {
                if h.type_.as_deref() == Some("FileOrCreate") && !Path::new(&h.path).exists() {
                    std::fs::write(&h.path, "").expect("create hostPath file");
                }
                PathBuf::from(&h.path)
            }
            _ => panic!("volume {}: only configMap and hostPath are mapped", m.name),
        };
        let mode = if m.read_only == Some(true) {
            "ro"
        } else {
            "rw"
        };
        cmd.arg("--mount").arg(format!(
            "type=bind,src={},dst={},options=rbind:{mode}",
            src.display(),
            m.mount_path
        ));
    }
    for env in c.env.as_deref().unwrap_or_default() {
        let field = env.value_from.as_ref().and_then(|f| f.field_ref.as_ref());
        let value = match (&env.value, field) {
            (Some(v), _) => v.clone(),
            (None, Some(f)) if f.field_path == "spec.nodeName" => e.opts.node.clone(),
            _ => panic!("env {}: unsupported source", env.name),
        };
        cmd.args(["--env", &format!("{}={value}", env.name)]);
    }
    cmd.args(["--env", "NO_COLOR=1", &image_ref(), &id])
        .args(argv);
    cmd
}

/// The DaemonSet's command (`$(NODE_NAME)` expanded as the kubelet does) plus `args`.
fn daemonset_argv(e: &E2e, args: &[&str]) -> Vec<String> {
    let (_, c) = daemonset();
    let command = c.command.expect("DaemonSet command");
    command
        .iter()
        .map(|a| a.replace("$(NODE_NAME)", &e.opts.node))
        .chain(args.iter().map(|a| a.to_string()))
        .collect()
}

/// `ctr run` of the daemon's container with `argv`, as the DaemonSet runs it.
fn run_as_daemon(e: &E2e, configmap: &Path, argv: &[String]) -> Command {
    let (pod, c) = daemonset();
    ctr_run(e, &pod, &c, configmap, argv)
}

/// The DaemonSet's init containers, in order, each to completion (as the kubelet starts a pod).
fn run_init_containers(e: &E2e) {
    let (pod, _) = daemonset();
    for c in pod.init_containers.as_deref().unwrap_or_default() {
        let argv = c.command.clone().expect("init container command");
        let started = Instant::now();
        let out = run(&mut ctr_run(e, &pod, c, &e.dir.join("configmap"), &argv));
        println!(
            "init container {} ({:.1?}): {}",
            c.name,
            started.elapsed(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

/// The cleanup Job of deploy/jobs/cleanup.yaml: its pod and container.
fn cleanup_job() -> (PodSpec, Container) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/jobs/cleanup.yaml");
    let text = std::fs::read_to_string(path).expect("read deploy/jobs/cleanup.yaml");
    let job: Job = serde_saphyr::from_str(&text).expect("parse deploy/jobs/cleanup.yaml");
    let pod = job.spec.expect("spec").template.spec.expect("pod spec");
    let c = pod.containers[0].clone();
    (pod, c)
}

/// The fixture's launcher, as a node runs the manifests: the daemon as the DaemonSet's pod (its init
/// containers first, then the kube-proxy container); `--cleanup` as the cleanup Job.
fn image_launch(e: &E2e, args: &[&str]) -> Command {
    if args.contains(&"--cleanup") {
        let (pod, c) = cleanup_job();
        let argv = c.command.clone().expect("Job command");
        return ctr_run(e, &pod, &c, &e.dir.join("configmap"), &argv);
    }
    run_init_containers(e);
    run_as_daemon(e, &e.dir.join("configmap"), &daemonset_argv(e, args))
}

/// The running daemon's process (one RUNNING kube-proxy task) has exactly the DaemonSet's settings:
/// capability sets, no_new_privs, seccomp filter mode, a read-only `/`.
fn check_running_security(e: &E2e) {
    let tasks = String::from_utf8_lossy(&run(ctr().args(["tasks", "ls"])).stdout).into_owned();
    let pids: Vec<u32> = tasks
        .lines()
        .filter(|l| l.starts_with("kube-proxy-") && l.contains("RUNNING"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 1, "one running daemon task:\n{tasks}");
    let (_, c) = daemonset();
    let got = podsec::ProcSecurity::read(pids[0]);
    let want = podsec::ProcSecurity::expected(&c);
    assert_eq!(
        got,
        want,
        "the daemon's process vs the DaemonSet\n{}",
        e.log()
    );
    println!("daemon process: {got:?}");
}

fn load_services(e: &E2e) {
    e.apply(service("web", "10.96.0.10", "TCP", 80, json!({})));
    e.apply(slice("web", "TCP", 8080, ABC));
    e.apply(service(
        "np",
        "10.96.0.20",
        "TCP",
        80,
        json!({"type": "NodePort",
               "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}]}),
    ));
    e.apply(slice("np", "TCP", 8080, ABC));
}

fn converged(t: &str) -> bool {
    real_servers(t, "-t", "10.96.0.10:80").len() == 3
        && real_servers(t, "-t", "10.0.0.10:30080").len() == 3
}

/// ClusterIP and NodePort from a client outside the node, each answered by all three pods.
fn check_traffic(outside: &common::netns::Pod, when: &str) {
    let all = vec![
        "pod-a".to_string(),
        "pod-b".to_string(),
        "pod-c".to_string(),
    ];
    let got = answers(9, &format!("ClusterIP {when}"), || {
        outside.tcp_request(ip("10.96.0.10"), 80, T)
    });
    assert_eq!(distinct(&got), all, "ClusterIP {when}: {got:?}");
    let got = answers(9, &format!("NodePort {when}"), || {
        outside.tcp_request(ip("10.0.0.10"), 30080, T)
    });
    assert_eq!(distinct(&got), all, "NodePort {when}: {got:?}");
}

/// The DaemonSet's liveness and readiness probes answer 200 on the daemon's healthz port.
fn check_probes(e: &E2e) {
    let (_, c) = daemonset();
    for probe in [c.liveness_probe.as_ref(), c.readiness_probe.as_ref()] {
        let get = probe
            .and_then(|p| p.http_get.as_ref())
            .expect("httpGet probe");
        let port = match &get.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => *p,
            other => panic!("probe port {other:?}: expected a number"),
        };
        let addr = format!("127.0.0.1:{port}").parse().expect("addr");
        let path = get.path.as_deref().unwrap_or("/");
        let r = http_get(addr, path)
            .unwrap_or_else(|| panic!("probe {path} on {port}: no answer\n{}", e.log()));
        assert_eq!(r.status, 200, "probe {path}: {}", r.body);
    }
}

/// Nothing of kube-proxy's left in the kernel (kubelet's hint chain is not kube-proxy's).
fn assert_clean() {
    for save in ["iptables-legacy-save", "ip6tables-legacy-save"] {
        let text = sh(save);
        let kube: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("KUBE-") && !l.contains("KUBE-IPTABLES-HINT"))
            .collect();
        assert!(kube.is_empty(), "{save}: KUBE- rules left: {kube:#?}");
    }
    let sets = sh("ipset list -n");
    assert!(
        !sets.lines().any(|l| l.starts_with("KUBE-")),
        "KUBE- sets left: {sets}"
    );
    assert!(
        !sh("ip -o link show").contains("kube-ipvs0"),
        "kube-ipvs0 left"
    );
    let t = ipvs();
    assert!(
        !t.lines().any(|l| l.starts_with("-A")),
        "IPVS services left:\n{t}"
    );
}

/// Boot-loaded modules that the ipvs-modules init container must load again (unloaded before the pod).
const INIT_LOADS: &[&str] = &["ip_vs_wrr", "ip_vs_sh"];
/// A scheduler a Service asks for whose module is not loaded: the daemon cannot load it (no SYS_MODULE).
const ANNOTATED: &str = "lblcr";
const SCHEDULER_ANNOTATION: &str = "ipvs.kube-proxy-rs.io/scheduler";

fn loaded(module: &str) -> bool {
    Path::new("/sys/module").join(module).exists()
}

/// What deploy/components/scheduler-modules adds to the daemon's container: a capability and a mount.
fn scheduler_modules_patch() -> (String, VolumeMount) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/components/scheduler-modules/kustomization.yaml"
    );
    let k: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(path).expect("read")).expect("parse");
    let ops: Value =
        serde_saphyr::from_str(k["patches"][0]["patch"].as_str().expect("patch")).expect("ops");
    let added = |path_end: &str| {
        let op = ops
            .as_array()
            .expect("ops")
            .iter()
            .find(|o| o["path"].as_str().is_some_and(|p| p.ends_with(path_end)))
            .unwrap_or_else(|| panic!("no op adding {path_end}: {ops}"));
        assert_eq!(op["op"], "add");
        op["value"].clone()
    };
    let cap = added("/securityContext/capabilities/add/-");
    let mount = added("/volumeMounts/-");
    (
        cap.as_str().expect("capability").to_string(),
        serde_json::from_value(mount).expect("volume mount"),
    )
}

/// The daemon's container cannot load a module (no SYS_MODULE and no module tree: modprobe fails, nothing
/// loaded); with the capability and the node's /lib/modules that the scheduler-modules component adds, the
/// image's modprobe loads it.
fn modules_need_sys_module(e: &E2e) {
    assert!(!loaded(PROBE_MODULE));
    let argv = vec!["/sbin/modprobe".to_string(), PROBE_MODULE.to_string()];
    let cm = e.dir.join("configmap");
    let out = run_as_daemon(e, &cm, &argv).output().expect("ctr run");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success() && !loaded(PROBE_MODULE),
        "loaded without SYS_MODULE: {text}"
    );
    println!("modprobe without SYS_MODULE: {}", text.trim());
    let (pod, mut c) = daemonset();
    let (cap, mount) = scheduler_modules_patch();
    let caps = c
        .security_context
        .as_mut()
        .and_then(|s| s.capabilities.as_mut())
        .expect("caps");
    caps.add.get_or_insert_with(Vec::new).push(cap);
    c.volume_mounts.get_or_insert_with(Vec::new).push(mount);
    run(&mut ctr_run(e, &pod, &c, &cm, &argv));
    assert!(
        loaded(PROBE_MODULE),
        "modprobe with SYS_MODULE did not load {PROBE_MODULE}"
    );
}

fn image_in_guest() {
    let run_dir = uml::guest_run_dir().expect("guest");
    let _ctrd = Containerd::start(&run_dir);
    let images = String::from_utf8_lossy(&run(ctr().args(["images", "ls"])).stdout).into_owned();
    assert!(images.contains(&image_ref()), "{images}");
    // The name points to the multi-architecture index itself; containerd unpacked its linux/amd64 image.
    let summary = json_file(&archive().with_extension("tar.json"));
    let index_digest = summary["digest"].as_str().expect("index digest");
    let line = images
        .lines()
        .find(|l| l.starts_with(&image_ref()))
        .unwrap_or_default();
    assert!(
        line.contains("application/vnd.oci.image.index.v1+json") && line.contains(index_digest),
        "ctr images ls: {images}"
    );
    println!("ctr images ls:\n{images}");

    // kubelet's hint chain in legacy, as on a node whose kubelet uses iptables-legacy: the image's daemon
    // must pick legacy by itself (no KUBE_PROXY_IPTABLES_BACKEND, as in the DaemonSet).
    sh("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT");
    for m in INIT_LOADS
        .iter()
        .copied()
        .chain([format!("ip_vs_{ANNOTATED}").as_str()])
    {
        sh(&format!("rmmod {m}"));
        assert!(!loaded(m), "{m} still loaded");
    }
    let _pods = abc_pods();
    let outside = client("client-a", "192.168.10.2", "192.168.10.1");
    let mut e = E2e::start(Options {
        launch: image_launch,
        ..Options::default()
    });
    configmap_dir(&e, "configmap", "");
    modules_need_sys_module(&e);

    // A config the daemon rejects: non-zero exit, the field named.
    let bad = configmap_dir(&e, "configmap-bad", "detectLocalMode: Magic\n");
    let out = run_as_daemon(&e, &bad, &daemonset_argv(&e, &[]))
        .output()
        .expect("ctr run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "bad config accepted:\n{text}");
    assert!(text.contains("detectLocalMode"), "field not named:\n{text}");

    image_serves_restarts_and_cleans_up(&mut e, &outside);
}

/// The Service asking for an unloaded scheduler stays on the node's (rr), with a Warning Event naming the
/// module and the annotation metric; the module stays unloaded.
fn unloadable_scheduler_is_reported(e: &mut E2e) {
    assert!(ipvs().contains("-A -t 10.96.0.30:80 -s rr"), "{}", ipvs());
    let warnings = |e: &E2e| -> Vec<String> {
        let events = e.api.events().into_iter();
        events
            .filter(|ev| ev.reason.as_deref() == Some("InvalidAnnotation"))
            .filter(|ev| ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("sched"))
            .filter_map(|ev| ev.note)
            .collect()
    };
    e.wait_for(
        "the InvalidAnnotation Event",
        Duration::from_secs(60),
        |e| !warnings(e).is_empty(),
    );
    let notes = warnings(e);
    let module = format!("ip_vs_{ANNOTATED}");
    assert!(
        notes[0].contains(&module)
            && notes[0].contains(SCHEDULER_ANNOTATION)
            && notes[0].contains("lacks CAP_SYS_MODULE"),
        "{notes:?}"
    );
    println!("Event without SYS_MODULE: {}", notes[0]);
    let line = format!(
        "kubeproxy_rs_service_annotation_errors_total{{annotation=\"{SCHEDULER_ANNOTATION}\"}} 1"
    );
    let m = e.metrics();
    assert!(m.lines().any(|l| l == line), "{line} missing in:\n{m}");
    assert!(
        !loaded(&module),
        "{module} loaded by a daemon without SYS_MODULE"
    );
}

fn image_serves_restarts_and_cleans_up(e: &mut E2e, outside: &common::netns::Pod) {
    load_services(e);
    let mut sched = service("sched", "10.96.0.30", "TCP", 80, json!({}));
    sched["metadata"]["annotations"] = json!({SCHEDULER_ANNOTATION: ANNOTATED});
    e.apply(sched);
    e.apply(slice("sched", "TCP", 8080, ABC));
    let started = Instant::now();
    e.start_daemon();
    e.wait_ipvs("services programmed by the image's daemon", |t| {
        converged(t) && real_servers(t, "-t", "10.96.0.30:80").len() == 3
    });
    println!("first sync from the image: {:.1?}", started.elapsed());
    for m in INIT_LOADS {
        assert!(
            loaded(m),
            "the ipvs-modules init container did not load {m}"
        );
    }
    check_running_security(e);
    assert!(
        e.log().contains("kubelet hint chain in legacy"),
        "backend choice:\n{}",
        e.log()
    );
    check_traffic(outside, "from the image");
    check_probes(e);
    assert!(has_vs(&ipvs(), "-t", "10.0.0.10:30080"));
    unloadable_scheduler_is_reported(e);

    // Restart from the image: the new daemon adopts what the first one programmed (same state, traffic).
    let status = e.stop_daemon();
    assert!(
        status.success(),
        "SIGTERM through ctr: {status}\n{}",
        e.log()
    );
    let before = KernelState::read();
    e.start_daemon();
    let after = KernelState::read();
    assert_eq!(
        before,
        after,
        "restart changed the kernel state:\n{}",
        before.diff(&after)
    );
    check_traffic(outside, "after the restart");
    let status = e.stop_daemon();
    assert!(status.success(), "{status}");

    // --cleanup as the cleanup Job runs it leaves nothing of ours; kubelet's hint chain stays.
    let (status, out) = e.cleanup();
    assert!(
        status.success(),
        "cleanup from the image failed ({status}):\n{out}"
    );
    assert_clean();
    println!("--- logs ---\n{}", e.all_logs());
}

#[test]
fn image_runs_like_the_daemonset() {
    if !uml::in_guest() && !image_required("image_runs_like_the_daemonset") {
        return;
    }
    let opts = BootOptions {
        mem: "768M",
        timeout: Duration::from_secs(480),
    };
    uml::run("image_runs_like_the_daemonset", opts, image_in_guest);
}

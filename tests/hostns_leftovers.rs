//! Other modes' leftovers on the host's own kernel, each test in a private network namespace (the UML
//! kernel has no nf_tables `ip`/`ip6` family, see tests/common/hostns.rs): the nf_tables backend against
//! upstream-shaped nftables-mode tables, then the built `kube-proxy` at start (`--init-only`) and with
//! `--cleanup` on a node left by the nftables and the iptables modes (iptables through the nft back end,
//! as such a node has it), foreign tables and rules next to them.
mod common;

use common::e2e::kube_proxy_bin;
use common::uml::sh;
use kube_proxy_rs::kernel::nftables::NfTables;
use kube_proxy_rs::kernel::nftables::netlink::NetlinkNfTables;
use kube_proxy_rs::net::IpFamily;
use kube_proxy_rs::proxier::cleanup::{CleanupReport, nftables_mode};
use std::process::{Command, Output};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cleanup_data");

fn nft_file(name: &str) {
    sh(&format!("nft -f {DATA}/{name}"));
}

/// The handle `nft -a` shows for table `family name`.
fn nft_handle(family: &str, name: &str) -> u64 {
    let out = sh(&format!("nft -a list table {family} {name}"));
    let first = out.lines().next().unwrap_or_default();
    first
        .rsplit("# handle ")
        .next()
        .and_then(|h| h.trim().parse().ok())
        .unwrap_or_else(|| panic!("no handle in {first:?}"))
}

/// `nft list tables`, one `family name` per line, sorted.
fn tables() -> Vec<String> {
    let mut t: Vec<String> = sh("nft list tables")
        .lines()
        .filter_map(|l| l.strip_prefix("table "))
        .map(str::to_string)
        .collect();
    t.sort();
    t
}

/// What upstream's cleanup leaves of the iptables mode too: kubelet's KUBE-FIREWALL (and its jumps) and
/// the monitor's KUBE-PROXY-CANARY chains.
fn left_by_upstream(line: &str) -> bool {
    line.contains("KUBE-FIREWALL") || line.contains("KUBE-PROXY-CANARY")
}

/// `tables` without the nftables mode's two (which must be among them).
fn without_kube_proxy_tables(tables: &[String]) -> Vec<String> {
    let ours = ["ip kube-proxy", "ip6 kube-proxy"];
    for t in ours {
        assert!(tables.iter().any(|x| x == t), "{t} missing from {tables:?}");
    }
    tables
        .iter()
        .filter(|t| !ours.contains(&t.as_str()))
        .cloned()
        .collect()
}

/// Every mode's leftovers and the foreign objects next to them; returns the foreign objects' state.
fn leftovers_and_foreign() -> Foreign {
    sh("ip link set lo up");
    nft_file("nftables-mode-v4.nft");
    nft_file("nftables-mode-v6.nft");
    nft_file("foreign.nft");
    sh(&format!(
        "iptables-nft-restore --noflush < {DATA}/iptables-mode-v4.rules"
    ));
    sh(&format!(
        "ip6tables-nft-restore --noflush < {DATA}/iptables-mode-v6.rules"
    ));
    sh(&format!(
        "iptables-nft-restore --noflush < {DATA}/foreign-v4.rules"
    ));
    Foreign::read()
}

/// The foreign objects as the kernel shows them.
#[derive(Debug, PartialEq, Eq)]
struct Foreign {
    nft: String,
    iptables: Vec<String>,
}

impl Foreign {
    fn read() -> Foreign {
        let save = sh("iptables-nft-save");
        Foreign {
            nft: sh("nft list table inet kube-proxy; nft list table ip foreign-filter"),
            iptables: save
                .lines()
                .filter(|l| l.contains("FOREIGN") || l.contains("eth9") || l.contains("-j ACCEPT"))
                .filter(|l| !l.contains("KUBE-"))
                .map(str::to_string)
                .collect(),
        }
    }
}

/// Runs the built binary with `args` (no config file: defaults, IPVS mode).
fn kube_proxy(args: &[&str]) -> (Output, String) {
    let out = Command::new(kube_proxy_bin())
        .args(args)
        .arg("--hostname-override=hostns-node")
        .env_remove("KUBE_PROXY_IPTABLES_BACKEND")
        .env("NO_COLOR", "1")
        .output()
        .expect("run kube-proxy");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// The `KUBE-` chain declarations and rules of an `iptables-save`, counters dropped.
fn kube_lines(save: &str) -> Vec<String> {
    save.lines()
        .filter(|l| l.contains("KUBE-"))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect()
}

netns_test!(backend_finds_and_deletes_tables_by_handle, {
    nft_file("nftables-mode-v4.nft");
    nft_file("foreign.nft");
    // A table of the same name in the other family that is someone else's.
    sh(r#"nft 'add table ip6 kube-proxy { comment "my own rules" ; }'"#);
    let foreign_before = sh("nft list table inet kube-proxy; nft list table ip foreign-filter");

    let mut nft = NetlinkNfTables::new();
    let ours = nft
        .table(IpFamily::V4, "kube-proxy")
        .unwrap()
        .expect("ip kube-proxy");
    assert_eq!(ours.comment.as_deref(), Some("rules for kube-proxy"));
    assert_eq!(ours.handle, nft_handle("ip", "kube-proxy"));
    let theirs = nft
        .table(IpFamily::V6, "kube-proxy")
        .unwrap()
        .expect("ip6 kube-proxy");
    assert_eq!(theirs.comment.as_deref(), Some("my own rules"));
    assert_eq!(nft.table(IpFamily::V4, "no-such-table").unwrap(), None);

    let mut report = CleanupReport::default();
    nftables_mode::cleanup(&mut nft, &mut report);
    assert_eq!(
        report.removed,
        vec!["nftables table ip kube-proxy".to_string()]
    );
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.kept.len(), 1, "{report:?}");
    assert_eq!(
        tables(),
        vec!["inet kube-proxy", "ip foreign-filter", "ip6 kube-proxy"]
    );
    assert_eq!(
        sh("nft list table inet kube-proxy; nft list table ip foreign-filter"),
        foreign_before
    );

    // A delete goes by handle: the old handle does not reach a table recreated under the same name.
    assert!(!nft.delete_table(IpFamily::V4, ours.handle).unwrap());
    nft_file("nftables-mode-v4.nft");
    assert!(!nft.delete_table(IpFamily::V4, ours.handle).unwrap());
    assert!(tables().contains(&"ip kube-proxy".to_string()));
    let again = nft
        .table(IpFamily::V4, "kube-proxy")
        .unwrap()
        .expect("recreated");
    assert_ne!(again.handle, ours.handle);
    assert!(nft.delete_table(IpFamily::V4, again.handle).unwrap());
    assert!(!tables().contains(&"ip kube-proxy".to_string()));
});

// At start (before anything else, as upstream's platformCleanup), kube-proxy in IPVS mode deletes the
// nftables mode's tables and leaves the iptables mode's chains, like upstream. `--init-only` takes that
// path too; on this kernel it then stops, as it has no IPVS.
netns_test!(start_removes_nftables_mode_tables_only, {
    let foreign = leftovers_and_foreign();
    let iptables_mode_v4 = kube_lines(&sh("iptables-nft-save"));
    let iptables_mode_v6 = kube_lines(&sh("ip6tables-nft-save"));
    assert!(iptables_mode_v4.len() > 60, "{iptables_mode_v4:#?}");
    let tables_before = tables();

    let (out, text) = kube_proxy(&["--init-only"]);
    println!("--- kube-proxy --init-only ---\n{text}");
    assert!(
        out.status.success() || text.contains("IPVS"),
        "init-only failed for another reason than this kernel's missing IPVS:\n{text}"
    );
    assert!(
        text.contains(r#""Removed" item="nftables table ip kube-proxy""#),
        "{text}"
    );
    assert!(
        text.contains(r#""Removed" item="nftables table ip6 kube-proxy""#),
        "{text}"
    );
    assert_eq!(tables(), without_kube_proxy_tables(&tables_before));
    assert_eq!(kube_lines(&sh("iptables-nft-save")), iptables_mode_v4);
    assert_eq!(kube_lines(&sh("ip6tables-nft-save")), iptables_mode_v6);
    assert_eq!(Foreign::read(), foreign);
});

// `--cleanup` removes every mode's leftovers: the nftables mode's tables and the iptables mode's chains
// and jumps (of both families), but kubelet's KUBE-FIREWALL and the KUBE-PROXY-CANARY chains, which
// upstream leaves too; foreign tables and rules stay. A second run finds nothing and succeeds.
netns_test!(cleanup_removes_every_modes_leftovers, {
    let foreign = leftovers_and_foreign();
    let tables_before = tables();
    let kept_v4: Vec<String> = kube_lines(&sh("iptables-nft-save"))
        .into_iter()
        .filter(|l| left_by_upstream(l))
        .collect();
    assert_eq!(kept_v4.len(), 7, "{kept_v4:#?}");
    let (out, text) = kube_proxy(&["--cleanup"]);
    println!("--- kube-proxy --cleanup ---\n{text}");
    assert!(out.status.success(), "cleanup failed:\n{text}");

    assert_eq!(tables(), without_kube_proxy_tables(&tables_before));
    // Only what upstream leaves too, unchanged.
    assert_eq!(kube_lines(&sh("iptables-nft-save")), kept_v4);
    let v6 = kube_lines(&sh("ip6tables-nft-save"));
    assert!(v6.is_empty(), "{v6:#?}");
    assert_eq!(Foreign::read(), foreign);

    let (out, text) = kube_proxy(&["--cleanup"]);
    assert!(out.status.success(), "second cleanup failed:\n{text}");
    assert!(!text.contains("\"Removed\""), "{text}");
});

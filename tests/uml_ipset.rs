//! The ipset backends against a real kernel (UML), the same scenario for the netlink backend (what the
//! daemon uses) and the `ipset` tool (fallback): every kube-proxy set type in both families, a
//! 20,000-entry batch, rejection of bad entries (before writing and by the kernel) while the rest
//! applies, a mixed add/delete diff, read-back equal to `ipset save`, foreign sets untouched.
mod common {
    pub mod uml;
}

use common::uml::sh;
use kube_proxy_rs::cluster::model::IpFamily;
use kube_proxy_rs::kernel::KernelError;
use kube_proxy_rs::kernel::ipset::cli::IpsetCli;
use kube_proxy_rs::kernel::ipset::fake::FakeIpSets;
use kube_proxy_rs::kernel::ipset::netlink::NetlinkIpSets;
use kube_proxy_rs::kernel::ipset::{IpSetOp, IpSetSpec, IpSetType, IpSets};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// The sets of the reference page (IPv4 names).
const SETS: &[(&str, IpSetType)] = &[
    ("KUBE-LOOP-BACK", IpSetType::HashIpPortIp),
    ("KUBE-CLUSTER-IP", IpSetType::HashIpPort),
    ("KUBE-EXTERNAL-IP", IpSetType::HashIpPort),
    ("KUBE-EXTERNAL-IP-LOCAL", IpSetType::HashIpPort),
    ("KUBE-LOAD-BALANCER", IpSetType::HashIpPort),
    ("KUBE-LOAD-BALANCER-FW", IpSetType::HashIpPort),
    ("KUBE-LOAD-BALANCER-LOCAL", IpSetType::HashIpPort),
    ("KUBE-LOAD-BALANCER-SOURCE-IP", IpSetType::HashIpPortIp),
    ("KUBE-LOAD-BALANCER-SOURCE-CIDR", IpSetType::HashIpPortNet),
    ("KUBE-NODE-PORT-TCP", IpSetType::BitmapPort),
    ("KUBE-NODE-PORT-UDP", IpSetType::BitmapPort),
    ("KUBE-NODE-PORT-LOCAL-TCP", IpSetType::BitmapPort),
    ("KUBE-NODE-PORT-LOCAL-UDP", IpSetType::BitmapPort),
    ("KUBE-NODE-PORT-SCTP-HASH", IpSetType::HashIpPort),
    ("KUBE-NODE-PORT-LOCAL-SCTP-HASH", IpSetType::HashIpPort),
    ("KUBE-HEALTH-CHECK-NODE-PORT", IpSetType::BitmapPort),
    ("KUBE-IPVS-IPS", IpSetType::HashIp),
];

fn name_for(base: &str, family: IpFamily) -> String {
    match family {
        IpFamily::V4 => base.to_string(),
        IpFamily::V6 => {
            let mut n = format!("KUBE-6-{}", &base["KUBE-".len()..]);
            n.truncate(31);
            n
        }
    }
}

fn add(set: &str, entry: String) -> IpSetOp {
    IpSetOp::Add {
        set: set.into(),
        entry,
    }
}

/// `ipset save` parsed with shell tools, independently of the crate's parser.
fn independent_save() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in
        sh("ipset save | awk '$1==\"create\"{print \"C\", $2} $1==\"add\"{print \"A\", $2, $3}'")
            .lines()
    {
        let w: Vec<&str> = line.split(' ').collect();
        match w[0] {
            "C" => {
                out.entry(w[1].to_string()).or_default();
            }
            _ => {
                out.entry(w[1].to_string())
                    .or_default()
                    .insert(w[2].to_string());
            }
        }
    }
    out
}

uml_test!(ipset_cli_backend_on_real_kernel, {
    scenario(
        &mut IpsetCli::new(),
        "one `ipset restore -exist`",
        "Error in line",
    );
});

uml_test!(ipset_netlink_backend_on_real_kernel, {
    let mut n = NetlinkIpSets::new().unwrap();
    scenario(&mut n, "netlink, batched ACKed messages", "does not exist");
    flush_and_swap(&mut n);
});

/// Foreign sets: one IPv4 hash:net, one IPv6 hash:net with comments (the read-back ignores options).
fn foreign_sets(fake: &mut FakeIpSets) {
    sh("ipset create FOREIGN-NET hash:net family inet && ipset add FOREIGN-NET 198.51.100.0/24");
    sh(
        "ipset create FOREIGN-6 hash:net family inet6 comment && ipset add FOREIGN-6 2001:db8:5::/48 comment 'hello world' && ipset add FOREIGN-6 2001:db8:6::7",
    );
    fake.insert_set(
        "FOREIGN-NET",
        IpSetType::HashIp,
        IpFamily::V4,
        ["198.51.100.0/24"],
    );
    fake.insert_set(
        "FOREIGN-6",
        IpSetType::HashIp,
        IpFamily::V6,
        ["2001:db8:5::/48", "2001:db8:6::7"],
    );
}

/// The whole scenario against one backend, step by step; `how` names it in the figure, `refused` is a word
/// of its message for an entry the kernel refuses. The fake replays every call: it must end in the same
/// state as the kernel.
fn scenario(ipset: &mut dyn IpSets, how: &str, refused: &str) {
    let specs = every_type_both_families();
    let mut fake = FakeIpSets::new();
    foreign_sets(&mut fake);
    create_twice_with_ipsets_headers(ipset, &mut fake, &specs);
    vanish_a_known_set(ipset, &mut fake);
    let (ops, mut expected) = twenty_thousand_entries();
    add_in_one_batch(ipset, &mut fake, &ops, how);
    lines_of_a_vanished_set_are_rejected(ipset, &mut fake, refused);
    for e in ["10.98.0.1", "10.98.0.2"] {
        expected.get_mut("KUBE-IPVS-IPS").unwrap().insert(e.into());
    }
    read_back_matches(ipset, &mut fake, &specs, &expected);
    deletes_and_adds_in_one_batch(ipset, &mut fake, &expected);
    destroy_ours_only(ipset, &specs);
}

/// Every set type of the reference page, in both families.
fn every_type_both_families() -> Vec<IpSetSpec> {
    let mut specs = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        for (base, t) in SETS {
            specs.push(IpSetSpec::new(name_for(base, family), *t, family));
        }
    }
    assert!(
        specs
            .iter()
            .any(|s| s.name == "KUBE-6-LOAD-BALANCER-SOURCE-CID")
    );
    assert!(
        specs
            .iter()
            .any(|s| s.name == "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS")
    );
    specs
}

/// Creates every set twice (-exist); the headers are as ipset prints them; a different type fails.
fn create_twice_with_ipsets_headers(
    ipset: &mut dyn IpSets,
    fake: &mut FakeIpSets,
    specs: &[IpSetSpec],
) {
    for s in specs.iter().chain(specs.iter()) {
        ipset.create(s).unwrap();
        fake.create(s).unwrap();
    }
    let save_text = sh("ipset save");
    for s in specs {
        let line = save_text
            .lines()
            .find(|l| l.starts_with(&format!("create {} ", s.name)))
            .unwrap_or_else(|| panic!("{} missing:\n{save_text}", s.name));
        assert!(
            line.starts_with(&s.create_line()),
            "header {line:?} does not start with {:?}",
            s.create_line()
        );
    }
    // Creating with a different type fails.
    let clash = IpSetSpec {
        set_type: IpSetType::HashIp,
        ..specs[1].clone()
    };
    assert!(ipset.create(&clash).is_err());
}

/// A set the backend knows but that vanished behind its back: its line fails inside the restore.
fn vanish_a_known_set(ipset: &mut dyn IpSets, fake: &mut FakeIpSets) {
    let vanished = IpSetSpec::new("KUBE-VANISHED", IpSetType::HashIp, IpFamily::V4);
    ipset.create(&vanished).unwrap();
    fake.create(&vanished).unwrap();
    fake.destroy("KUBE-VANISHED").unwrap();
    sh("ipset destroy KUBE-VANISHED");
}

/// 20,000 entries over mixed sets and types (inputs deliberately not all canonical), with a bad one (IPv6
/// in an IPv4 set) at 7000; and the members each set should then hold.
fn twenty_thousand_entries() -> (Vec<IpSetOp>, BTreeMap<String, BTreeSet<String>>) {
    let mut ops = Vec::new();
    let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut push = |ops: &mut Vec<IpSetOp>, set: &str, input: String, canon: String| {
        ops.push(add(set, input));
        expected.entry(set.to_string()).or_default().insert(canon);
    };
    let protos = ["tcp", "udp", "sctp"];
    for i in 0..6000u32 {
        let e = format!(
            "10.96.{}.{},{}:{}",
            i / 250,
            i % 250 + 1,
            protos[(i % 3) as usize],
            80 + i % 7
        );
        push(&mut ops, "KUBE-CLUSTER-IP", e.clone(), e);
    }
    for i in 0..4000u32 {
        let ip = format!("10.244.{}.{}", i / 250, i % 250 + 1);
        let e = format!("{ip},tcp:{},{ip}", 8000 + i % 100);
        push(&mut ops, "KUBE-LOOP-BACK", e.clone(), e);
    }
    for i in 0..2000u32 {
        let head = format!("203.0.113.{},tcp:{}", i % 200 + 1, 80 + i / 200);
        if i % 5 == 0 {
            let e = format!("{head},172.16.{}.{}", i / 256, i % 256);
            push(
                &mut ops,
                "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                format!("{e}/32"),
                e,
            );
        } else {
            push(
                &mut ops,
                "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                format!("{head},192.168.{}.7/24", i % 256),
                format!("{head},192.168.{}.0/24", i % 256),
            );
        }
    }
    for i in 0..3000u32 {
        let e = format!("10.97.{}.{}", i / 250, i % 250 + 1);
        push(&mut ops, "KUBE-IPVS-IPS", e.clone(), e);
    }
    for i in 0..2000u32 {
        push(
            &mut ops,
            "KUBE-NODE-PORT-TCP",
            format!("{}", 30000 + i),
            format!("{}", 30000 + i),
        );
    }
    for i in 0..2000u32 {
        push(
            &mut ops,
            "KUBE-6-CLUSTER-IP",
            format!("fd00:0:0:0:0:0:0:{:x},tcp:443", i + 1),
            format!("fd00::{:x},tcp:443", i + 1),
        );
    }
    for i in 0..1000u32 {
        push(
            &mut ops,
            "KUBE-6-LOAD-BALANCER-SOURCE-CID",
            format!("2001:db8::{:x},udp:53,fd00:{:x}::1/64", i + 1, i + 1),
            format!("2001:db8::{:x},udp:53,fd00:{:x}::/64", i + 1, i + 1),
        );
    }
    assert_eq!(ops.len(), 20_000);
    // The bad entry in the middle of the batch: rejected before writing.
    ops.insert(7000, add("KUBE-CLUSTER-IP", "fd00::1,tcp:80".into()));

    (ops, expected)
}

/// The 20,000 entries in one batch, timed: all applied but the bad one, as the fake does.
fn add_in_one_batch(ipset: &mut dyn IpSets, fake: &mut FakeIpSets, ops: &[IpSetOp], how: &str) {
    let started = Instant::now();
    let report = ipset.apply(ops).unwrap();
    let fake_report = fake.apply(ops).unwrap();
    assert_eq!(fake_report.applied, report.applied);
    assert_eq!(fake_report.rejected.len(), report.rejected.len());
    let elapsed = started.elapsed();
    println!(
        "FIGURE ipset apply: {} entries, {how} (UML guest, debug build): {:.1} ms",
        report.applied,
        elapsed.as_secs_f64() * 1000.0
    );
    assert_eq!(report.applied, 20_000, "{:?}", report.rejected);
    let rejected: Vec<&IpSetOp> = report.rejected.iter().map(|(op, _)| op).collect();
    assert_eq!(rejected, vec![&ops[7000]], "{:?}", report.rejected);
}

/// A set the backend knows that vanished: restore fails inside the kernel, its lines are rejected with
/// ipset's message and the rest of the batch is retried and applied.
fn lines_of_a_vanished_set_are_rejected(
    ipset: &mut dyn IpSets,
    fake: &mut FakeIpSets,
    refused: &str,
) {
    let batch = vec![
        add("KUBE-IPVS-IPS", "10.98.0.1".into()),
        add("KUBE-VANISHED", "10.1.1.1".into()),
        add("KUBE-IPVS-IPS", "10.98.0.2".into()),
        add("KUBE-VANISHED", "10.1.1.2".into()),
    ];
    let report = ipset.apply(&batch).unwrap();
    let fake_report = fake.apply(&batch).unwrap();
    assert_eq!(fake_report.applied, report.applied);
    assert_eq!(fake_report.rejected.len(), report.rejected.len());
    assert_eq!(report.applied, 2);
    let rejected: Vec<&IpSetOp> = report.rejected.iter().map(|(op, _)| op).collect();
    assert_eq!(rejected.len(), 2, "{:?}", report.rejected);
    assert!(rejected.contains(&&batch[1]) && rejected.contains(&&batch[3]));
    assert!(
        report.rejected.iter().all(|(_, why)| why.contains(refused)),
        "{:?}",
        report.rejected
    );
}

/// Read back: the backend's save_all equals the fake's, an independent parse and the expected members;
/// the dump's headers name every set's type and family.
fn read_back_matches(
    ipset: &mut dyn IpSets,
    fake: &mut FakeIpSets,
    specs: &[IpSetSpec],
    expected: &BTreeMap<String, BTreeSet<String>>,
) {
    let saved = ipset.save_all().unwrap();
    assert_eq!(fake.save_all().unwrap(), saved, "fake vs kernel");
    // The same dump carries every set's header: ours with their spec's type and family (none for
    // bitmap sets), foreign ones with their own type name.
    let dumped = ipset.dump().unwrap();
    assert_eq!(dumped.members, saved);
    for s in specs {
        let h = &dumped.headers[&s.name];
        assert_eq!(h.type_name, s.set_type.as_str(), "{}", s.name);
        assert_eq!(h.set_type, Some(s.set_type), "{}", s.name);
        let family = (s.set_type != IpSetType::BitmapPort).then_some(s.family);
        assert_eq!(h.family, family, "{}", s.name);
    }
    let foreign = &dumped.headers["FOREIGN-6"];
    assert_eq!(
        (foreign.type_name.as_str(), foreign.set_type),
        ("hash:net", None)
    );
    assert_eq!(foreign.family, Some(IpFamily::V6));
    assert_eq!(saved, independent_save());
    for (set, members) in expected {
        assert_eq!(&saved[set], members, "members of {set}");
    }
    for s in specs {
        if !expected.contains_key(&s.name) {
            assert!(saved[&s.name].is_empty(), "{} should be empty", s.name);
        }
    }
    assert_eq!(
        saved["FOREIGN-NET"].iter().collect::<Vec<_>>(),
        vec!["198.51.100.0/24"]
    );
}

/// Deletes (and adds mixed in), again one batch; absent deletes and present adds are no errors.
fn deletes_and_adds_in_one_batch(
    ipset: &mut dyn IpSets,
    fake: &mut FakeIpSets,
    expected: &BTreeMap<String, BTreeSet<String>>,
) {
    let mut dels = Vec::new();
    for i in (0..2000u32).step_by(2) {
        dels.push(IpSetOp::Del {
            set: "KUBE-NODE-PORT-TCP".into(),
            entry: format!("{}", 30000 + i),
        });
    }
    for e in &expected["KUBE-6-CLUSTER-IP"] {
        dels.push(IpSetOp::Del {
            set: "KUBE-6-CLUSTER-IP".into(),
            entry: e.clone(),
        });
    }
    // Deleting an absent entry is not an error (-exist), nor is adding a present one.
    dels.push(IpSetOp::Del {
        set: "KUBE-IPVS-IPS".into(),
        entry: "10.99.99.99".into(),
    });
    dels.push(add(
        "KUBE-LOOP-BACK",
        expected["KUBE-LOOP-BACK"].iter().next().unwrap().clone(),
    ));
    for i in 0..500u32 {
        dels.push(add(
            "KUBE-6-LOAD-BALANCER-SOURCE-IP",
            format!("fd00::{:x},tcp:80,fd01::{:x}", i + 1, i + 1),
        ));
    }
    let r = ipset.apply(&dels).unwrap();
    assert_eq!(fake.apply(&dels).unwrap(), r);
    assert_eq!(r.applied, dels.len());
    assert!(r.rejected.is_empty());
    let after = independent_save();
    assert_eq!(
        fake.save_all().unwrap(),
        after,
        "fake vs kernel after deletes"
    );
    let odd: BTreeSet<String> = (1..2000u32)
        .step_by(2)
        .map(|i| format!("{}", 30000 + i))
        .collect();
    assert_eq!(after["KUBE-NODE-PORT-TCP"], odd);
    assert!(after["KUBE-6-CLUSTER-IP"].is_empty());
    assert_eq!(after["KUBE-IPVS-IPS"].len(), 3002);
    assert_eq!(after["KUBE-LOOP-BACK"], expected["KUBE-LOOP-BACK"]);
    assert_eq!(after["KUBE-6-LOAD-BALANCER-SOURCE-IP"].len(), 500);
    assert!(after["KUBE-6-LOAD-BALANCER-SOURCE-IP"].contains("fd00::1f4,tcp:80,fd01::1f4"));
    assert_eq!(ipset.save_all().unwrap(), after, "read-back vs ipset save");
}

/// Destroys ours only (a second destroy is NotFound); the foreign set is untouched, and entries for it are
/// refused before anything is written.
fn destroy_ours_only(ipset: &mut dyn IpSets, specs: &[IpSetSpec]) {
    ipset.destroy("KUBE-6-CLUSTER-IP").unwrap();
    assert!(matches!(
        ipset.destroy("KUBE-6-CLUSTER-IP"),
        Err(KernelError::NotFound(_))
    ));
    let after = independent_save();
    assert!(!after.contains_key("KUBE-6-CLUSTER-IP"));
    assert_eq!(
        after["FOREIGN-NET"].iter().collect::<Vec<_>>(),
        vec!["198.51.100.0/24"]
    );
    assert_eq!(after.len(), specs.len() - 1 + 2);
    // Entries for a foreign set are refused before anything is written.
    let r = ipset
        .apply(&[add("FOREIGN-NET", "203.0.113.0/24".into())])
        .unwrap();
    assert_eq!((r.applied, r.rejected.len()), (0, 1));
    assert!(sh("ipset save FOREIGN-NET").contains("198.51.100.0/24"));
    assert!(!sh("ipset save FOREIGN-NET").contains("203.0.113"));
    for s in specs {
        let _ = ipset.destroy(&s.name);
    }
    sh("ipset destroy FOREIGN-NET && ipset destroy FOREIGN-6");
}

/// FLUSH and SWAP (netlink backend only).
fn flush_and_swap(n: &mut NetlinkIpSets) {
    let spec = |name: &str| IpSetSpec::new(name, IpSetType::HashIpPort, IpFamily::V4);
    n.create_all(&[spec("KUBE-A"), spec("KUBE-B")]).unwrap();
    let r = n
        .apply(&[
            add("KUBE-A", "10.0.0.1,tcp:80".into()),
            add("KUBE-B", "10.0.0.2,udp:53".into()),
            add("KUBE-B", "10.0.0.3,sctp:9".into()),
        ])
        .unwrap();
    assert_eq!(r.applied, 3);
    n.swap("KUBE-A", "KUBE-B").unwrap();
    let saved = independent_save();
    assert_eq!(saved["KUBE-A"].len(), 2);
    assert!(saved["KUBE-B"].contains("10.0.0.1,tcp:80"));
    n.flush("KUBE-A").unwrap();
    let saved = independent_save();
    assert!(saved["KUBE-A"].is_empty());
    assert_eq!(saved["KUBE-B"].len(), 1);
    assert_eq!(n.save_all().unwrap(), saved);
    assert!(matches!(
        n.flush("KUBE-NOPE"),
        Err(KernelError::NotFound(_))
    ));
}

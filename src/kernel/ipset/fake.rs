//! In-memory ipsets that behave like the kernel and the `ipset` tool, errors included.
//!
//! Cloning a [`FakeIpSets`] shares its state, so a test can keep a handle while the code under test owns
//! another one.

use super::entry::canonical_entry;
use super::save::{SavedSets, SetHeader};
use super::{ApplyReport, IpSetOp, IpSetSize, IpSetSpec, IpSetType, IpSets};
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// Longest set name the kernel accepts.
pub const MAX_SET_NAME: usize = 31;

/// One set held by the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeSet {
    pub set_type: IpSetType,
    /// Family of hash sets; bitmap:port ones accept it but ignore it.
    pub family: IpFamily,
    /// A hash set refuses members beyond `maxelem`; bitmap:port ones ignore it.
    pub size: IpSetSize,
    pub members: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct State {
    sets: BTreeMap<String, FakeSet>,
    /// Sets referenced by iptables rules (kept up to date by a linked `FakeIptables`).
    referenced: BTreeSet<String>,
    /// Set by hand: sets held by another kernel component.
    pinned: BTreeSet<String>,
    calls: Vec<String>,
    fail_next: Option<String>,
}

/// In-memory [`IpSets`].
#[derive(Debug, Clone, Default)]
pub struct FakeIpSets {
    inner: Arc<Mutex<State>>,
}

fn command_error(command: &str, stderr: impl Into<String>) -> KernelError {
    KernelError::Command {
        command: command.into(),
        status: "exit status: 1".into(),
        stderr: stderr.into(),
    }
}

impl FakeIpSets {
    /// No sets.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a set (ours or foreign) of upstream's size with members, as if someone else had created it.
    pub fn insert_set(
        &self,
        name: &str,
        set_type: IpSetType,
        family: IpFamily,
        members: impl IntoIterator<Item = impl Into<String>>,
    ) {
        self.lock().sets.insert(
            name.to_string(),
            FakeSet {
                set_type,
                family,
                size: IpSetSize::UPSTREAM,
                members: members.into_iter().map(Into::into).collect(),
            },
        );
    }

    /// Changes a set's size behind the backend's back (a no-op for a missing set).
    pub fn resize(&self, name: &str, size: IpSetSize) {
        if let Some(s) = self.lock().sets.get_mut(name) {
            s.size = size;
        }
    }

    /// A copy of one set.
    pub fn set(&self, name: &str) -> Option<FakeSet> {
        self.lock().sets.get(name).cloned()
    }

    /// Names of all sets.
    pub fn names(&self) -> Vec<String> {
        self.lock().sets.keys().cloned().collect()
    }

    /// Members of one set (empty if missing).
    pub fn members(&self, name: &str) -> BTreeSet<String> {
        self.lock()
            .sets
            .get(name)
            .map(|s| s.members.clone())
            .unwrap_or_default()
    }

    /// Marks a set as in use by another kernel component (destroy then fails, like the kernel).
    pub fn pin(&self, name: &str, in_use: bool) {
        let mut st = self.lock();
        if in_use {
            st.pinned.insert(name.to_string());
        } else {
            st.pinned.remove(name);
        }
    }

    /// Called by a linked `FakeIptables`: the sets its rules reference.
    pub(crate) fn set_referenced(&self, names: BTreeSet<String>) {
        self.lock().referenced = names;
    }

    /// Whether a set exists and its family, for a linked `FakeIptables`.
    pub(crate) fn family_of(&self, name: &str) -> Option<(IpSetType, IpFamily)> {
        self.lock().sets.get(name).map(|s| (s.set_type, s.family))
    }

    /// The next call (any method) fails as a whole with this stderr.
    pub fn fail_next(&self, stderr: &str) {
        self.lock().fail_next = Some(stderr.to_string());
    }

    /// Log of calls: `create NAME`, `save`, `restore N` (lines sent), `destroy NAME`, `swap A B`.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// `ipset save`-style text of every set (sets and members sorted).
    pub fn render_save(&self) -> String {
        let st = self.lock();
        let mut out = String::new();
        for (name, set) in &st.sets {
            let spec = IpSetSpec {
                size: set.size,
                ..IpSetSpec::new(name.clone(), set.set_type, set.family)
            };
            out.push_str(&spec.create_line());
            out.push('\n');
            for m in &set.members {
                out.push_str(&format!("add {name} {m}\n"));
            }
        }
        out
    }

    fn take_failure(st: &mut State, command: &str) -> KernelResult<()> {
        match st.fail_next.take() {
            Some(stderr) => Err(command_error(command, stderr)),
            None => Ok(()),
        }
    }
}

impl IpSets for FakeIpSets {
    fn create(&mut self, spec: &IpSetSpec) -> KernelResult<()> {
        let mut st = self.lock();
        st.calls.push(format!("create {}", spec.name));
        let cmd = format!("ipset {} -exist", spec.create_line());
        Self::take_failure(&mut st, &cmd)?;
        if spec.name.is_empty() || spec.name.len() > MAX_SET_NAME {
            return Err(command_error(
                &cmd,
                format!(
                    "ipset v7.17: Syntax error: setname '{}' is longer than {MAX_SET_NAME} characters",
                    spec.name
                ),
            ));
        }
        // As the kernel's `-exist`: an existing set must have the same type, family and maxelem.
        let hash = spec.set_type != IpSetType::BitmapPort;
        match st.sets.get(&spec.name) {
            Some(s)
                if s.set_type != spec.set_type
                    || (hash && s.family != spec.family)
                    || (hash && s.size.maxelem != spec.size.maxelem) =>
            {
                Err(command_error(
                    &cmd,
                    "ipset v7.17: Set cannot be created: set with the same name already exists",
                ))
            }
            Some(_) => Ok(()),
            None => {
                st.sets.insert(
                    spec.name.clone(),
                    FakeSet {
                        set_type: spec.set_type,
                        family: spec.family,
                        size: spec.size,
                        members: BTreeSet::new(),
                    },
                );
                Ok(())
            }
        }
    }

    fn dump(&mut self) -> KernelResult<SavedSets> {
        let mut st = self.lock();
        st.calls.push("save".into());
        Self::take_failure(&mut st, "ipset save")?;
        let mut out = SavedSets::default();
        for (n, s) in &st.sets {
            let hash = s.set_type != IpSetType::BitmapPort;
            let header = SetHeader {
                type_name: s.set_type.as_str().to_string(),
                set_type: Some(s.set_type),
                family: hash.then_some(s.family),
                size: hash.then_some(s.size),
            };
            out.headers.insert(n.clone(), header);
            out.members.insert(n.clone(), s.members.clone());
        }
        Ok(out)
    }

    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport> {
        let mut st = self.lock();
        let mut report = ApplyReport::default();
        let mut valid = Vec::new();
        for op in ops {
            let (set, entry, add) = match op {
                IpSetOp::Add { set, entry } => (set, entry, true),
                IpSetOp::Del { set, entry } => (set, entry, false),
            };
            let Some(s) = st.sets.get(set) else {
                report.rejected.push((
                    op.clone(),
                    format!("ipset v7.17: The set with the given name does not exist: {set}"),
                ));
                continue;
            };
            match canonical_entry(s.set_type, s.family, entry) {
                Ok(canon) => valid.push((op, set.clone(), canon, add)),
                Err(why) => report.rejected.push((op.clone(), why.to_string())),
            }
        }
        if valid.is_empty() {
            return Ok(report);
        }
        st.calls.push(format!("restore {}", valid.len()));
        Self::take_failure(&mut st, "ipset restore -exist")?;
        for (op, set, canon, add) in valid {
            let Some(s) = st.sets.get_mut(&set) else {
                continue;
            };
            if add {
                if !s.members.contains(&canon)
                    && s.set_type != IpSetType::BitmapPort
                    && s.members.len() >= s.size.maxelem as usize
                {
                    report.rejected.push((
                        op.clone(),
                        "ipset v7.17: Hash is full, cannot add more elements".into(),
                    ));
                    continue;
                }
                s.members.insert(canon);
            } else {
                s.members.remove(&canon);
            }
            report.applied += 1;
        }
        Ok(report)
    }

    fn destroy(&mut self, name: &str) -> KernelResult<()> {
        let mut st = self.lock();
        st.calls.push(format!("destroy {name}"));
        let cmd = format!("ipset destroy {name}");
        Self::take_failure(&mut st, &cmd)?;
        if !st.sets.contains_key(name) {
            return Err(KernelError::NotFound(format!("ipset {name}")));
        }
        if st.referenced.contains(name) || st.pinned.contains(name) {
            return Err(command_error(
                &cmd,
                "ipset v7.17: Set cannot be destroyed: it is in use by a kernel component",
            ));
        }
        st.sets.remove(name);
        Ok(())
    }

    fn swap(&mut self, a: &str, b: &str) -> KernelResult<()> {
        let mut st = self.lock();
        st.calls.push(format!("swap {a} {b}"));
        let cmd = format!("ipset swap {a} {b}");
        Self::take_failure(&mut st, &cmd)?;
        let (Some(sa), Some(sb)) = (st.sets.get(a), st.sets.get(b)) else {
            return Err(command_error(
                &cmd,
                "ipset v7.17: The set with the given name does not exist",
            ));
        };
        if sa.set_type != sb.set_type || sa.family != sb.family {
            return Err(command_error(
                &cmd,
                "ipset v7.17: The sets cannot be swapped: their type does not match",
            ));
        }
        // Rules refer to a set by its place in the kernel's table, which the swap exchanges with the
        // name: references follow the name, so `referenced` and `pinned` stay as they are.
        let (sa, sb) = (st.sets.remove(a), st.sets.remove(b));
        if let (Some(sa), Some(sb)) = (sa, sb) {
            st.sets.insert(a.to_string(), sb);
            st.sets.insert(b.to_string(), sa);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, t: IpSetType, f: IpFamily) -> IpSetSpec {
        IpSetSpec::new(name, t, f)
    }

    fn add(set: &str, entry: &str) -> IpSetOp {
        IpSetOp::Add {
            set: set.into(),
            entry: entry.into(),
        }
    }

    #[test]
    fn create_apply_save_destroy() {
        let mut f = FakeIpSets::new();
        f.insert_set("FOREIGN", IpSetType::HashIp, IpFamily::V4, ["1.1.1.1"]);
        f.create(&spec(
            "KUBE-CLUSTER-IP",
            IpSetType::HashIpPort,
            IpFamily::V4,
        ))
        .unwrap();
        f.create(&spec(
            "KUBE-CLUSTER-IP",
            IpSetType::HashIpPort,
            IpFamily::V4,
        ))
        .unwrap();
        assert!(
            f.create(&spec("KUBE-CLUSTER-IP", IpSetType::HashIp, IpFamily::V4))
                .is_err()
        );
        assert!(
            f.create(&spec(
                "KUBE-6-LOAD-BALANCER-SOURCE-CIDR",
                IpSetType::HashIpPortNet,
                IpFamily::V6
            ))
            .is_err()
        );
        let r = f
            .apply(&[
                add("KUBE-CLUSTER-IP", "10.96.0.1,tcp:443"),
                add("KUBE-CLUSTER-IP", "fd00::1,tcp:443"),
                add("MISSING", "10.0.0.1"),
                add("KUBE-CLUSTER-IP", "10.96.0.2,udp:53"),
                IpSetOp::Del {
                    set: "KUBE-CLUSTER-IP".into(),
                    entry: "10.96.0.2,udp:53".into(),
                },
            ])
            .unwrap();
        assert_eq!(r.applied, 3);
        assert_eq!(r.rejected.len(), 2);
        let all = f.save_all().unwrap();
        assert_eq!(
            all["KUBE-CLUSTER-IP"].iter().collect::<Vec<_>>(),
            vec!["10.96.0.1,tcp:443"]
        );
        assert_eq!(all["FOREIGN"].len(), 1);
        f.pin("KUBE-CLUSTER-IP", true);
        assert!(f.destroy("KUBE-CLUSTER-IP").is_err());
        f.pin("KUBE-CLUSTER-IP", false);
        f.destroy("KUBE-CLUSTER-IP").unwrap();
        assert!(matches!(
            f.destroy("KUBE-CLUSTER-IP"),
            Err(KernelError::NotFound(_))
        ));
        f.fail_next("boom");
        assert!(f.save_all().is_err());
        assert!(f.save_all().is_ok());
        assert!(f.render_save().contains("add FOREIGN 1.1.1.1"));
    }
}

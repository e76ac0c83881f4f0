//! IPVS schedulers and their flags: the one place that knows the scheduler names, the `rr` default,
//! the scheduler flags (`ipvsadm -b` names and kernel bits) and the flags upstream kube-proxy sets
//! for `mh`. Depends on nothing else in the crate.

use crate::truncate::quoted_value;
use std::fmt;
use std::str::FromStr;

/// `IP_VS_SVC_F_SCHED1`: `flag-1`; `sh-fallback` with `sh`, `mh-fallback` with `mh`.
pub const SCHED_FLAG_1: u32 = 0x8;
/// `IP_VS_SVC_F_SCHED2`: `flag-2`; `sh-port` with `sh`, `mh-port` with `mh`.
pub const SCHED_FLAG_2: u32 = 0x10;
/// `IP_VS_SVC_F_SCHED3`: `flag-3`.
pub const SCHED_FLAG_3: u32 = 0x20;
/// Every scheduler flag bit.
pub const SCHED_FLAGS_MASK: u32 = SCHED_FLAG_1 | SCHED_FLAG_2 | SCHED_FLAG_3;

/// An IPVS scheduler of a stock Linux kernel (`ip_vs_<name>` modules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Scheduler {
    /// Round robin (the default, as upstream).
    #[default]
    Rr,
    /// Weighted round robin.
    Wrr,
    /// Least connection.
    Lc,
    /// Weighted least connection.
    Wlc,
    /// Locality-based least connection.
    Lblc,
    /// Locality-based least connection with replication.
    Lblcr,
    /// Destination hashing.
    Dh,
    /// Source hashing.
    Sh,
    /// Shortest expected delay.
    Sed,
    /// Never queue.
    Nq,
    /// Weighted failover.
    Fo,
    /// Weighted overflow.
    Ovf,
    /// Maglev hashing.
    Mh,
    /// Weighted random twos choice.
    Twos,
}

/// Why a scheduler name or flag list was refused; the message names the bad value (its first
/// [`MAX_QUOTED_VALUE`](crate::truncate::MAX_QUOTED_VALUE) bytes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    /// Not a scheduler name.
    #[error("unknown IPVS scheduler {0:?}: must be one of [{names}]", names = Scheduler::names())]
    UnknownScheduler(String),
    /// Not a scheduler flag name.
    #[error("unknown IPVS scheduler flag {0:?}: must be one of [{names}]", names = FLAG_NAMES.join(" "))]
    UnknownFlag(String),
    /// A flag that only applies to another scheduler (`sh-port` with `rr`, ...).
    #[error("IPVS scheduler flag {flag:?} does not apply to scheduler {scheduler:?}")]
    IncompatibleFlag { flag: String, scheduler: Scheduler },
}

/// Scheduler flag names as `ipvsadm -b` spells them.
pub const FLAG_NAMES: &[&str] = &[
    "flag-1",
    "flag-2",
    "flag-3",
    "sh-fallback",
    "sh-port",
    "mh-fallback",
    "mh-port",
];

impl Scheduler {
    /// Every scheduler, in the order they are documented.
    pub const ALL: [Scheduler; 14] = [
        Scheduler::Rr,
        Scheduler::Wrr,
        Scheduler::Lc,
        Scheduler::Wlc,
        Scheduler::Lblc,
        Scheduler::Lblcr,
        Scheduler::Dh,
        Scheduler::Sh,
        Scheduler::Sed,
        Scheduler::Nq,
        Scheduler::Fo,
        Scheduler::Ovf,
        Scheduler::Mh,
        Scheduler::Twos,
    ];

    /// The kernel's name (`rr`, `mh`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Scheduler::Rr => "rr",
            Scheduler::Wrr => "wrr",
            Scheduler::Lc => "lc",
            Scheduler::Wlc => "wlc",
            Scheduler::Lblc => "lblc",
            Scheduler::Lblcr => "lblcr",
            Scheduler::Dh => "dh",
            Scheduler::Sh => "sh",
            Scheduler::Sed => "sed",
            Scheduler::Nq => "nq",
            Scheduler::Fo => "fo",
            Scheduler::Ovf => "ovf",
            Scheduler::Mh => "mh",
            Scheduler::Twos => "twos",
        }
    }

    /// All names, space-separated (for messages).
    pub fn names() -> String {
        Self::ALL.map(Scheduler::name).join(" ")
    }

    /// Parse a configured value: empty means the default (`rr`); names are case-sensitive, as the kernel's.
    pub fn parse_or_default(name: &str) -> Result<Scheduler, SchedulerError> {
        if name.is_empty() {
            Ok(Scheduler::default())
        } else {
            name.parse()
        }
    }

    /// The scheduler flags upstream kube-proxy sets on every virtual server when this is the node's
    /// scheduler: `mh-port` for `mh` (source port in the hash), nothing otherwise.
    pub const fn default_flags(self) -> u32 {
        match self {
            Scheduler::Mh => SCHED_FLAG_2,
            _ => 0,
        }
    }

    /// Parse a comma-separated list of flag names (`mh-port,mh-fallback`, `flag-1`) for this scheduler,
    /// as `ipvsadm -b` does: `flag-N` applies to any scheduler, `sh-*` only to `sh`, `mh-*` only to `mh`.
    /// Blanks around names are ignored; an empty list is no flags.
    pub fn parse_flags(self, list: &str) -> Result<u32, SchedulerError> {
        let mut bits = 0;
        for flag in list.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            let (bit, only_for) = match flag {
                "flag-1" => (SCHED_FLAG_1, None),
                "flag-2" => (SCHED_FLAG_2, None),
                "flag-3" => (SCHED_FLAG_3, None),
                "sh-fallback" => (SCHED_FLAG_1, Some(Scheduler::Sh)),
                "sh-port" => (SCHED_FLAG_2, Some(Scheduler::Sh)),
                "mh-fallback" => (SCHED_FLAG_1, Some(Scheduler::Mh)),
                "mh-port" => (SCHED_FLAG_2, Some(Scheduler::Mh)),
                other => return Err(SchedulerError::UnknownFlag(quoted_value(other))),
            };
            if only_for.is_some_and(|s| s != self) {
                return Err(SchedulerError::IncompatibleFlag {
                    flag: flag.to_string(),
                    scheduler: self,
                });
            }
            bits |= bit;
        }
        Ok(bits)
    }

    /// Names of the scheduler flags set in `flags`, as `ipvsadm -L` prints them for this scheduler.
    pub fn flag_names(self, flags: u32) -> Vec<&'static str> {
        let names: [&'static str; 3] = match self {
            Scheduler::Sh => ["sh-fallback", "sh-port", "flag-3"],
            Scheduler::Mh => ["mh-fallback", "mh-port", "flag-3"],
            _ => ["flag-1", "flag-2", "flag-3"],
        };
        [SCHED_FLAG_1, SCHED_FLAG_2, SCHED_FLAG_3]
            .iter()
            .zip(names)
            .filter(|(bit, _)| flags & **bit != 0)
            .map(|(_, name)| name)
            .collect()
    }
}

impl FromStr for Scheduler {
    type Err = SchedulerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheduler::ALL
            .into_iter()
            .find(|sched| sched.name() == s)
            .ok_or_else(|| SchedulerError::UnknownScheduler(quoted_value(s)))
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for Scheduler {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_default_is_rr() {
        for s in Scheduler::ALL {
            assert_eq!(s.name().parse::<Scheduler>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
        }
        assert_eq!(Scheduler::default(), Scheduler::Rr);
        assert_eq!(Scheduler::parse_or_default(""), Ok(Scheduler::Rr));
        assert_eq!(Scheduler::parse_or_default("mh"), Ok(Scheduler::Mh));
        assert_eq!(
            Scheduler::names(),
            "rr wrr lc wlc lblc lblcr dh sh sed nq fo ovf mh twos"
        );
    }

    #[test]
    fn unknown_names_are_refused_naming_the_value() {
        for bad in ["RR", "fancy", " rr", "rr ", "round-robin"] {
            let err = bad.parse::<Scheduler>().unwrap_err();
            assert_eq!(err, SchedulerError::UnknownScheduler(bad.to_string()));
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn kernel_flag_bits() {
        assert_eq!(
            (SCHED_FLAG_1, SCHED_FLAG_2, SCHED_FLAG_3),
            (0x8, 0x10, 0x20)
        );
        assert_eq!(Scheduler::Mh.default_flags(), 0x10);
        for s in Scheduler::ALL.into_iter().filter(|s| *s != Scheduler::Mh) {
            assert_eq!(s.default_flags(), 0, "{s}");
        }
    }

    #[test]
    fn flags_parse_like_ipvsadm() {
        let mh = Scheduler::Mh;
        assert_eq!(mh.parse_flags(""), Ok(0));
        assert_eq!(mh.parse_flags("mh-port"), Ok(0x10));
        assert_eq!(mh.parse_flags("mh-fallback, mh-port"), Ok(0x18));
        assert_eq!(Scheduler::Sh.parse_flags("sh-fallback,sh-port"), Ok(0x18));
        assert_eq!(Scheduler::Rr.parse_flags("flag-1,flag-2,flag-3"), Ok(0x38));
        assert_eq!(mh.parse_flags("flag-2,mh-port"), Ok(0x10));
        assert_eq!(
            Scheduler::Rr.parse_flags("mh-port"),
            Err(SchedulerError::IncompatibleFlag {
                flag: "mh-port".into(),
                scheduler: Scheduler::Rr
            })
        );
        assert!(mh.parse_flags("sh-port").is_err());
        let err = mh.parse_flags("mh-port,bogus").unwrap_err();
        assert_eq!(err, SchedulerError::UnknownFlag("bogus".into()));
        assert!(err.to_string().contains("\"bogus\""), "{err}");
    }

    #[test]
    fn flag_names_like_ipvsadm_prints_them() {
        assert_eq!(Scheduler::Mh.flag_names(0x18), ["mh-fallback", "mh-port"]);
        assert_eq!(Scheduler::Sh.flag_names(0x10), ["sh-port"]);
        assert_eq!(Scheduler::Wrr.flag_names(0x21), ["flag-3"]);
        for s in Scheduler::ALL {
            for bits in 0..8u32 {
                let flags = bits << 3;
                let names = s.flag_names(flags).join(",");
                assert_eq!(s.parse_flags(&names), Ok(flags), "{s} {names}");
            }
        }
    }
}

//! Kernel version parsing and the version rules kube-proxy applies to sysctls.

use std::fmt;

/// A kernel release `major.minor.patch` as in `uname -r`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    /// Parses `uname -r`-style text: `6.1.0-13-amd64`, `5.4.0-1041-aws`, `4.19.112+`, `6.1.176`,
    /// `3.10.0-1160.el7.x86_64`, `5.8`. Missing parts are 0; anything after the numbers is ignored.
    pub fn parse(release: &str) -> Option<KernelVersion> {
        let mut nums = [0u32; 3];
        let mut count = 0;
        for (i, part) in release.trim().split('.').take(3).enumerate() {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                break;
            }
            nums[i] = digits.parse().ok()?;
            count += 1;
            if digits.len() != part.len() {
                break;
            }
        }
        if count < 2 {
            return None;
        }
        Some(KernelVersion {
            major: nums[0],
            minor: nums[1],
            patch: nums[2],
        })
    }

    /// Version of the running kernel (`/proc/sys/kernel/osrelease`).
    #[cfg(any(test, feature = "testkit"))]
    pub fn running() -> std::io::Result<KernelVersion> {
        let text = std::fs::read_to_string("/proc/sys/kernel/osrelease")?;
        Self::parse(&text).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("cannot parse kernel release {:?}", text.trim()),
            )
        })
    }

    const fn new(major: u32, minor: u32) -> KernelVersion {
        KernelVersion {
            major,
            minor,
            patch: 0,
        }
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Whether `net/ipv4/vs/conn_reuse_mode` should be set to 0: only on kernels 4.1 <= v < 5.9 (before 4.1
/// the sysctl does not exist; from 5.9 the default mode no longer delays new connections).
pub fn wants_conn_reuse_mode_zero(v: KernelVersion) -> bool {
    v >= KernelVersion::new(4, 1) && v < KernelVersion::new(5, 9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KernelVersion {
        KernelVersion::parse(s).unwrap_or_else(|| panic!("parse {s}"))
    }

    #[test]
    fn parses_releases() {
        assert_eq!(v("6.1.0-13-amd64").to_string(), "6.1.0");
        assert_eq!(v("5.4.0-1041-aws").to_string(), "5.4.0");
        assert_eq!(v("4.19.112+").to_string(), "4.19.112");
        assert_eq!(v("3.10.0-1160.el7.x86_64").to_string(), "3.10.0");
        assert_eq!(v("5.8").to_string(), "5.8.0");
        assert_eq!(v("5.10-rc1").to_string(), "5.10.0");
        assert_eq!(v(" 6.1.176\n").to_string(), "6.1.176");
        assert!(KernelVersion::parse("").is_none());
        assert!(KernelVersion::parse("linux").is_none());
        assert!(KernelVersion::parse("6").is_none());
    }

    #[test]
    fn conn_reuse_mode_rule() {
        for (r, want) in [
            ("3.10.0-1160.el7.x86_64", false),
            ("4.0.9", false),
            ("4.1.0", true),
            ("4.19.112+", true),
            ("5.4.0-1041-aws", true),
            ("5.8.18", true),
            ("5.9.0", false),
            ("5.10.0-rc1", false),
            ("6.1.176", false),
        ] {
            assert_eq!(wants_conn_reuse_mode_zero(v(r)), want, "{r}");
        }
    }
}

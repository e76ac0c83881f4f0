//! The nftables mode's leftovers, as upstream's `nftables.CleanupLeftovers` removes them: the tables
//! `ip kube-proxy` and `ip6 kube-proxy`, each deleted whole (its chains, sets, maps and rules go with it).
//!
//! Upstream deletes a table of that name whatever it holds. Here a table is deleted only when it carries
//! the comment the nftables mode gives it (`rules for kube-proxy`, set by every version of that mode); a
//! table of that name without it belongs to someone else and stays, reported in
//! [`CleanupReport::kept`]. The delete goes by the handle read with the comment, so a table recreated
//! in between by someone else is not the one deleted.

use super::report::CleanupReport;
use crate::kernel::KernelError;
use crate::kernel::nftables::{NfTables, family_keyword};
use crate::net::IpFamily;

/// The nftables mode's table name, in the `ip` and `ip6` families.
pub const TABLE: &str = "kube-proxy";
/// The comment the nftables mode puts on its tables.
pub const TABLE_COMMENT: &str = "rules for kube-proxy";

/// Deletes the nftables mode's tables of both families. A kernel without nf_tables has none.
pub fn cleanup(nft: &mut dyn NfTables, r: &mut CleanupReport) {
    for family in [IpFamily::V4, IpFamily::V6] {
        let what = format!("nftables table {} {TABLE}", family_keyword(family));
        match nft.table(family, TABLE) {
            Ok(None) => {}
            Ok(Some(t)) if t.comment.as_deref() == Some(TABLE_COMMENT) => {
                r.record(what, nft.delete_table(family, t.handle));
            }
            Ok(Some(t)) => r.kept.push(format!(
                "{what}: its comment is {:?}, not {TABLE_COMMENT:?}: not kube-proxy's",
                t.comment.unwrap_or_default()
            )),
            Err(KernelError::Unsupported(e)) => {
                tracing::debug!(error = %e, "no nf_tables in this kernel: no nftables-mode leftovers");
                return;
            }
            Err(e) => r.failures.push(format!("{what}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::nftables::fake::FakeNfTables;

    #[test]
    fn deletes_kube_proxys_tables_and_keeps_others() {
        let nft = FakeNfTables::new();
        nft.add(IpFamily::V4, "filter", None);
        nft.add(IpFamily::V4, TABLE, Some(TABLE_COMMENT));
        nft.add(IpFamily::V6, TABLE, Some(TABLE_COMMENT));
        let mut r = CleanupReport::default();
        cleanup(&mut nft.clone(), &mut r);
        assert_eq!(
            r.removed,
            vec![
                "nftables table ip kube-proxy".to_string(),
                "nftables table ip6 kube-proxy".to_string()
            ]
        );
        assert!(r.failures.is_empty() && r.kept.is_empty(), "{r:?}");
        assert_eq!(nft.names(), vec![(IpFamily::V4, "filter".to_string())]);
        // Nothing left: a second run removes nothing and does not fail.
        let mut again = CleanupReport::default();
        cleanup(&mut nft.clone(), &mut again);
        assert!(again.removed.is_empty() && again.failures.is_empty());
    }

    #[test]
    fn a_table_of_that_name_without_the_comment_stays() {
        let nft = FakeNfTables::new();
        nft.add(IpFamily::V4, TABLE, Some("my own rules"));
        nft.add(IpFamily::V6, TABLE, None);
        let mut r = CleanupReport::default();
        cleanup(&mut nft.clone(), &mut r);
        assert!(r.removed.is_empty() && r.failures.is_empty(), "{r:?}");
        assert_eq!(r.kept.len(), 2, "{r:?}");
        assert!(r.kept[0].contains("\"my own rules\""), "{:?}", r.kept);
        assert_eq!(nft.names().len(), 2);
        assert_eq!(nft.deletes(), 0);
    }

    #[test]
    fn kernel_errors_are_failures() {
        let nft = FakeNfTables::new();
        nft.add(IpFamily::V4, TABLE, Some(TABLE_COMMENT));
        nft.set_fail(Some("Operation not permitted"));
        let mut r = CleanupReport::default();
        cleanup(&mut nft.clone(), &mut r);
        assert_eq!(r.failures.len(), 2, "{r:?}");
        assert!(r.failures[0].starts_with("nftables table ip kube-proxy: "));
        assert_eq!(nft.names().len(), 1);
    }

    #[test]
    fn a_kernel_without_nf_tables_has_nothing_to_clean() {
        let nft = FakeNfTables::new();
        nft.set_unsupported();
        let mut r = CleanupReport::default();
        cleanup(&mut nft.clone(), &mut r);
        assert!(r.removed.is_empty() && r.failures.is_empty() && r.kept.is_empty());
    }
}

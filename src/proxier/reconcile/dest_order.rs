//! The order of a virtual server's real servers in the kernel, for the schedulers that build their lookup
//! table by walking that list (`mh`, `sh`, `dh`): for a flow to land on the same real server whichever
//! node receives it (several nodes announcing one address, ECMP in front), every node must hold the same
//! real servers in the same order with the same weights. IPVS links a new real server at the head of the
//! list, so its order is the history of additions, which differs between nodes (a node whose table was
//! rebuilt, a node that saw a pod come back later). Kept canonical here: descending by (address, port),
//! that is, linked in ascending order; a real server that would land out of place is linked again after
//! the ones before it (unlinked and linked back in one batch: IPVS revives it from its trash with its
//! connections).

use std::net::IpAddr;

/// A real server's key: (address, port).
pub(super) type DestKey = (IpAddr, u16);

/// Whether scheduler `name` builds its table from the order of the real-server list.
pub(super) fn follows_order(name: &str) -> bool {
    matches!(name, "mh" | "sh" | "dh")
}

/// Whether `keys`, in kernel order (head first), are in the canonical order (strictly descending).
pub(super) fn is_canonical(keys: impl IntoIterator<Item = DestKey>) -> bool {
    let mut prev: Option<DestKey> = None;
    for k in keys {
        if prev.is_some_and(|p| p <= k) {
            return false;
        }
        prev = Some(k);
    }
    true
}

/// The real servers that stay (`present`, in kernel order when `kernel_order`) to unlink and link again,
/// in ascending order, so that with the additions `added` the list ends canonical: every one above the
/// lowest addition, or every one when the kernel's order is already off.
pub(super) fn relinks(present: &[DestKey], added: &[DestKey], kernel_order: bool) -> Vec<DestKey> {
    let mut out: Vec<DestKey> = if kernel_order && !is_canonical(present.iter().copied()) {
        present.to_vec()
    } else {
        match added.iter().min() {
            Some(low) => present.iter().filter(|k| *k > low).copied().collect(),
            None => Vec::new(),
        }
    };
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(last: u8) -> DestKey {
        (IpAddr::from([10, 244, 0, last]), 8080)
    }

    #[test]
    fn only_hash_table_schedulers_follow_the_order() {
        assert!(follows_order("mh") && follows_order("sh") && follows_order("dh"));
        assert!(!follows_order("rr") && !follows_order("wlc") && !follows_order("lblc"));
    }

    #[test]
    fn canonical_is_strictly_descending() {
        assert!(is_canonical([k(3), k(2), k(1)]));
        assert!(is_canonical([]));
        assert!(!is_canonical([k(2), k(3), k(1)]));
        assert!(!is_canonical([k(2), k(2)]));
    }

    #[test]
    fn an_addition_below_others_relinks_those_above_it() {
        // Kernel list c, b, a (canonical); adding a' between a and b relinks b and c.
        let present = [k(30), k(20), k(10)];
        assert_eq!(relinks(&present, &[k(11)], true), vec![k(20), k(30)]);
        // Above every one: at the head already, nothing to relink.
        assert!(relinks(&present, &[k(40)], true).is_empty());
        assert!(relinks(&present, &[], true).is_empty());
    }

    #[test]
    fn a_kernel_list_out_of_order_is_relinked_whole() {
        // The order a node reaches by history: a2 added after c, b, a.
        let present = [k(11), k(30), k(20), k(10)];
        assert_eq!(
            relinks(&present, &[], true),
            vec![k(10), k(11), k(20), k(30)]
        );
        // Not the kernel's order (the last applied state, sorted): only the additions count.
        assert!(relinks(&[k(10), k(20)], &[], false).is_empty());
    }
}

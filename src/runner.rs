//! Bounded-frequency runner that drives sync_proxy_rules.

//! iptables through the iptables tools (in progress).

//! ipsets through the `ipset` tool (in progress).

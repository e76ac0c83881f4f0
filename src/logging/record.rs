//! What the line formatters take: the format chosen and one event's record.

use super::fields::Fields;
use tracing::Level;

/// `--logging-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// klog's text lines.
    Text,
    /// component-base's JSON lines.
    Json,
}

/// One event, ready to be formatted.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The `tracing` level (klog's severity).
    pub level: Level,
    /// The V level.
    pub v: u64,
    /// Source file of the call site.
    pub file: &'a str,
    /// Source line of the call site.
    pub line: u32,
    /// Message, error and pairs.
    pub fields: &'a Fields,
}

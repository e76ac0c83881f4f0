//! The `tracing` layer that writes klog text or component-base JSON lines.

use super::fields::Fields;
use super::record::{Format, Record};
use super::verbosity::{Verbosity, default_v};
use super::{json, text};
use crate::gotime::instant as clock;
use std::io::Write;
use std::time::SystemTime;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer};

/// Formats every event it sees into one line and writes it with one `write_all` on a writer from `W`.
pub struct KlogLayer<W> {
    format: Format,
    /// `None`: every event the filter lets through is printed (`KUBE_PROXY_LOG` set).
    verbosity: Option<Verbosity>,
    pid: u32,
    writer: W,
}

impl<W> KlogLayer<W> {
    /// A layer writing `format` to `writer`, printing info, debug and trace events up to `verbosity`
    /// (all of them when `None`); errors and warnings are always printed.
    pub fn new(format: Format, verbosity: Option<Verbosity>, writer: W) -> Self {
        KlogLayer {
            format,
            verbosity,
            pid: std::process::id(),
            writer,
        }
    }

    fn shown(&self, level: Level, v: u64, file: Option<&str>) -> bool {
        if level == Level::ERROR || level == Level::WARN {
            return true;
        }
        self.verbosity.as_ref().is_none_or(|vb| vb.allows(v, file))
    }
}

impl<S, W> Layer<S> for KlogLayer<W>
where
    S: Subscriber,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = *meta.level();
        let v = fields.v.unwrap_or_else(|| default_v(level));
        if !self.shown(level, v, meta.file()) {
            return;
        }
        let record = Record {
            level,
            v,
            // klog's placeholders when the caller is unknown.
            file: meta.file().unwrap_or("???"),
            line: meta.line().unwrap_or(1),
            fields: &fields,
        };
        let now = SystemTime::now();
        let line = match self.format {
            Format::Text => text::line(&record, clock::local(now), self.pid),
            Format::Json => json::line(&record, clock::epoch_millis(now)),
        };
        // Nowhere to report a failed log write; the line is lost, as klog's would be.
        let _ = self.writer.make_writer_for(meta).write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// A writer collecting every line in memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Lines {
        type Writer = Lines;
        fn make_writer(&'w self) -> Lines {
            self.clone()
        }
    }

    fn capture(format: Format, v: u32, body: impl FnOnce()) -> Vec<String> {
        let out = Lines::default();
        let verbosity = Verbosity {
            global: v,
            modules: Vec::new(),
        };
        let subscriber = tracing_subscriber::registry().with(KlogLayer::new(
            format,
            Some(verbosity),
            out.clone(),
        ));
        tracing::subscriber::with_default(subscriber, body);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn events() {
        tracing::info!("Version info");
        tracing::info!(v = 1, "one");
        tracing::debug!(elapsed = %crate::gotime::GoDuration::from_std(std::time::Duration::from_millis(1500)), "SyncProxyRules complete");
        tracing::debug!(v = 3, "three");
        tracing::warn!(error = "boom", "warned");
        tracing::error!(NodeIPs = ?crate::logging::json(&["10.0.0.1"]), "failed");
    }

    #[test]
    fn v_levels_filter_info_and_debug_only() {
        let at = |v| {
            capture(Format::Text, v, events)
                .iter()
                .map(|l| l.split("] ").nth(1).unwrap_or_default().to_string())
                .collect::<Vec<_>>()
        };
        let quiet = at(0);
        assert_eq!(
            quiet,
            [
                r#""Version info""#,
                r#""warned" err="boom""#,
                r#""failed" NodeIPs=["10.0.0.1"]"#
            ]
        );
        assert_eq!(at(1).len(), 4);
        assert!(at(2).contains(&r#""SyncProxyRules complete" elapsed="1.5s""#.to_string()));
        assert_eq!(at(2).len(), 5);
        assert_eq!(at(3).len(), 6);
    }

    #[test]
    fn json_lines_carry_v_except_for_errors() {
        let lines = capture(Format::Json, 2, events);
        let parsed: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(parsed.len(), 5);
        assert_eq!(parsed[0]["msg"], "Version info");
        assert_eq!(parsed[0]["v"], 0);
        assert_eq!(parsed[2]["v"], 2);
        assert_eq!(parsed[2]["elapsed"], "1.5s");
        assert_eq!(parsed[3]["err"], "boom");
        assert!(parsed[4].get("v").is_none());
        assert_eq!(parsed[4]["NodeIPs"][0], "10.0.0.1");
        assert!(lines[0].starts_with("{\"ts\":"));
        assert!(
            parsed[0]["caller"]
                .as_str()
                .unwrap()
                .starts_with("logging/layer.rs:")
        );
    }
}

//! `kube-proxy` binary: parse flags and configuration, set up logging, then run.

use kube_proxy_rs::config::{self, Invocation, Options};
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

/// Map klog-style verbosity to a tracing level: 0-1 info, 2-4 debug, 5+ trace.
fn level_for(verbosity: u32) -> &'static str {
    match verbosity {
        0 | 1 => "info",
        2..=4 => "debug",
        _ => "trace",
    }
}

fn init_logging(options: &Options) {
    let logging = &options.config.logging;
    // --v raises the verbosity of this program only; libraries stay at info unless
    // KUBE_PROXY_LOG (an EnvFilter directive) says otherwise.
    let level = level_for(logging.verbosity);
    let filter = EnvFilter::try_from_env("KUBE_PROXY_LOG").unwrap_or_else(|_| {
        EnvFilter::new(format!("info,kube_proxy_rs={level},kube_proxy={level}"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if logging.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// `kube-proxy explain [NAMESPACE/NAME]`: the local kube-proxy's explanation, printed.
fn explain() -> ExitCode {
    match kube_proxy_rs::explain::cli::run(std::env::args().skip(2)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    // Before any thread starts: the allocator's arena limit and mmap threshold (see `malloc::configure`).
    kube_proxy_rs::malloc::configure();
    // Code pages mapped as they run, not 64 KiB around each (see `codepages`).
    kube_proxy_rs::codepages::map_on_touch();
    if std::env::args().nth(1).as_deref() == Some("explain") {
        return explain();
    }
    let options = match config::parse_args(std::env::args_os()) {
        Ok(Invocation::Run(options)) => options,
        Ok(Invocation::Help(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::Version(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    init_logging(&options);
    for warning in &options.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(path) = &options.write_config_to {
        return match config::file::write(&options.config, path) {
            Ok(()) => {
                tracing::info!(file = %path.display(), "Wrote configuration");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        };
    }
    match kube_proxy_rs::app::run(*options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

//! `kube-proxy` binary: parse flags and configuration, set up logging, then run.

#![deny(unsafe_code)]
use kube_proxy_rs::config::{self, Invocation};
use kube_proxy_rs::logging;
use std::process::ExitCode;

/// `kube-proxy explain [NAMESPACE/NAME]`: the local kube-proxy's explanation, printed.
fn explain() -> ExitCode {
    let args = std::env::args_os()
        .skip(2)
        .map(|a| a.to_string_lossy().into_owned());
    let mut out = std::io::stdout().lock();
    match kube_proxy_rs::explain::cli::run(args, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            use std::io::Write as _;
            let _ = out.flush();
            eprintln!("kube-proxy explain: {err}");
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
    logging::init(&logging::Settings::from_config(&options.config.logging));
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
            // Upstream's two lines: the proxy server's, then component-base's `cli.Run`.
            let err = format!("{err:#}");
            tracing::error!(error = %err, "Error running ProxyServer");
            tracing::error!(error = %err, "command failed");
            ExitCode::FAILURE
        }
    }
}

//! Running external tools (iptables, also used by the ipset backend) with optional stdin and typed errors.

use crate::kernel::{KernelError, KernelResult};
use std::io::Write;
use std::process::{Command, Stdio};

/// What a finished command printed and how it exited.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit code (None if killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The command line, for error messages.
    pub command: String,
}

impl Output {
    /// True on exit status 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The command error for this output, with `stderr` as given.
    pub fn error_with(&self, stderr: String) -> KernelError {
        KernelError::Command {
            command: self.command.clone(),
            status: match self.code {
                Some(c) => format!("exit status: {c}"),
                None => "killed by a signal".into(),
            },
            stderr,
        }
    }

    /// The command error for this output.
    pub fn error(&self) -> KernelError {
        self.error_with(self.stderr.trim_end().to_string())
    }

    /// Ok(stdout) on success, the command error otherwise.
    pub fn ok(self) -> KernelResult<String> {
        if self.success() {
            Ok(self.stdout)
        } else {
            Err(self.error())
        }
    }
}

/// Runs `program args` in the C locale, feeding `stdin` (from a separate thread, so large inputs and
/// outputs cannot deadlock). Failing to start is an error; a non-zero exit is returned in [`Output`].
pub fn run(program: &str, args: &[&str], stdin: Option<&str>) -> KernelResult<Output> {
    let command = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    crate::kernel::io_counts::process(program);
    let mut child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| KernelError::Command {
            command: command.clone(),
            status: "not started".into(),
            stderr: e.to_string(),
        })?;
    let writer = match (stdin, child.stdin.take()) {
        (Some(text), Some(mut pipe)) => {
            let text = text.to_string();
            Some(std::thread::spawn(move || pipe.write_all(text.as_bytes())))
        }
        _ => None,
    };
    let out = child.wait_with_output()?;
    if let Some(w) = writer {
        // A broken pipe means the tool stopped reading early; its exit status tells why.
        let _ = w.join();
    }
    Ok(Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        command,
    })
}

/// Whether `program` would start: a path to an executable file, or a name found so in `PATH`.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(std::path::Path::new(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    !program.is_empty() && std::env::split_paths(&path).any(|dir| executable(&dir.join(program)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs_on_path() {
        assert!(on_path("sh"));
        assert!(on_path("/bin/sh"));
        assert!(!on_path("no-such-program-kprs"));
        assert!(!on_path(""));
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        assert!(!on_path(manifest), "not executable");
        assert!(!on_path("/bin"), "a directory");
    }
}

//! Running external commands: echo them, inherit stdio, turn failures into errors that name
//! the command and its exit code.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use crate::Result;

/// Environment variables that `cargo run` sets for the xtask binary itself. They describe the
/// xtask package, not whatever a nested command builds, so they are not passed on.
const CARGO_RUN_ENV_PREFIXES: &[&str] = &["CARGO_PKG_", "CARGO_MANIFEST_"];
const CARGO_RUN_ENV_VARS: &[&str] = &[
    "CARGO",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
];

/// A command plus a human-readable rendering of it, for progress and error messages.
pub struct Cmd {
    inner: Command,
    display: String,
}

impl Cmd {
    /// A new command running `program`, with the `cargo run` package variables removed from
    /// its environment.
    pub fn new(program: &str) -> Self {
        let mut inner = Command::new(program);
        for (key, _) in std::env::vars_os() {
            let Some(key) = key.to_str() else { continue };
            if CARGO_RUN_ENV_VARS.contains(&key)
                || CARGO_RUN_ENV_PREFIXES.iter().any(|p| key.starts_with(p))
            {
                inner.env_remove(key);
            }
        }
        Cmd {
            inner,
            display: quote(program),
        }
    }

    /// Shorthand for `Cmd::new("cargo")`.
    pub fn cargo() -> Self {
        Cmd::new("cargo")
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        let arg = arg.as_ref();
        self.display.push(' ');
        self.display.push_str(&quote(&arg.to_string_lossy()));
        self.inner.arg(arg);
        self
    }

    /// Appends several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for arg in args {
            self = self.arg(arg);
        }
        self
    }

    /// Sets an environment variable (shown in the rendered command line).
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        let value = value.as_ref();
        self.display = format!("{key}={} {}", quote(&value.to_string_lossy()), self.display);
        self.inner.env(key, value);
        self
    }

    /// Runs the command in `dir`.
    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.inner.current_dir(dir);
        self
    }

    /// Echoes the command, runs it with inherited stdio, and fails unless it exits with 0.
    pub fn run(mut self) -> Result<()> {
        println!("$ {}", self.display);
        let status = self
            .inner
            .status()
            .map_err(|e| spawn_error(&self.display, &e))?;
        check(&self.display, status)
    }

    /// Runs the command with stdout captured (stderr still goes to the terminal) and returns
    /// stdout. Fails unless it exits with 0; the captured stdout is then printed, so nothing
    /// is swallowed.
    pub fn read_stdout(mut self) -> Result<String> {
        println!("$ {}", self.display);
        let out = self
            .inner
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| spawn_error(&self.display, &e))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            print!("{stdout}");
        }
        check(&self.display, out.status)?;
        Ok(stdout)
    }

    /// Runs the command silently (all output captured) and returns its exit status together
    /// with stdout, or `None` if it could not be started at all (e.g. program not found).
    /// For probes like `dpkg -s` or `cargo fuzz --version`, whose failure is an answer rather
    /// than an error.
    pub fn probe(mut self) -> Option<(ExitStatus, String)> {
        let out = self.inner.stdin(Stdio::null()).output().ok()?;
        Some((
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }
}

fn spawn_error(display: &str, err: &std::io::Error) -> Box<dyn std::error::Error> {
    format!("could not start `{display}`: {err}").into()
}

/// Converts a non-zero exit status into an error naming the command and the exit code.
fn check(display: &str, status: ExitStatus) -> Result<()> {
    if status.success() {
        return Ok(());
    }
    Err(format!("`{display}` {}", describe_status(status)).into())
}

/// "exited with code N" or "was killed by signal N".
pub fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with code {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("failed ({status})")
}

/// Shell-style quoting for display only.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:+,@%".contains(c));
    if plain {
        return s.to_owned();
    }
    let mut out = String::from("'");
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_only_when_needed() {
        let cmd = Cmd::cargo()
            .args(["doc", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings");
        assert_eq!(
            cmd.display,
            "RUSTDOCFLAGS='-D warnings' cargo doc --no-deps"
        );
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn failure_names_command_and_exit_code() {
        let err = Cmd::new("sh").args(["-c", "exit 3"]).run().unwrap_err();
        assert_eq!(err.to_string(), "`sh -c 'exit 3'` exited with code 3");
        let out = Cmd::new("sh")
            .args(["-c", "echo hi"])
            .read_stdout()
            .unwrap();
        assert_eq!(out, "hi\n");
    }
}

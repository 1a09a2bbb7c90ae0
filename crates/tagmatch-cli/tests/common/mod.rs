//! Running the `tagmatch` binary from black-box tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tagmatch");

/// Runs `tagmatch args` with no input.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spawn tagmatch")
}

/// Runs `tagmatch args`, which must succeed; its standard output.
pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `tagmatch args`, which must fail with status 1 and a one-line message; the message.
pub fn fails(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(1), "{args:?}");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Starts `tagmatch perf server` on loopback with `extra` arguments; returns it and the
/// address it printed.
pub fn perf_server(extra: &[&str]) -> (Child, String) {
    let mut args = vec!["--bind", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    spawn_perf_server(&args, "udp://127.0.0.1:")
}

/// Starts `tagmatch perf server args`; returns it and the address it printed, which must
/// start with `scheme`.
pub fn spawn_perf_server(args: &[&str], scheme: &str) -> (Child, String) {
    let mut server = Command::new(BIN)
        .args(["perf", "server"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tagmatch perf server");
    let addr = address_line(&mut server, scheme);
    (server, addr)
}

/// The address a `perf server` (spawned with its standard output piped) prints on its
/// first line, which must start with `prefix`.
pub fn address_line(server: &mut Child, prefix: &str) -> String {
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the server's address line");
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(addr.starts_with(prefix), "server printed {line:?}");
    addr
}

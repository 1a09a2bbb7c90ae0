//! `tagmatch perf` between two hosts: two network namespaces joined by a veth pair
//! (10.232.0.1 for the server, 10.232.0.2 and 10.232.0.3 for the client, inside the
//! namespaces only), `perf server` in one and `perf client` in the other (`ip netns exec`).
//! The client finds the address to bind by itself (the route's source address: a
//! loopback one, as it used to bind, is one the server cannot answer to), or binds the one
//! `--bind` names.
//!
//! Needs root and iproute2. Where namespaces cannot be made (no privilege, no `ip`, a
//! kernel without netns) the test prints why and returns, unless `TAGMATCH_NETNS_REQUIRED`
//! is set (`cargo xtask netns`, CI), where that is a failure. The namespaces are removed on
//! every path out (a drop guard), which also removes the veth pair; the server is killed
//! by its own guard.

use std::process::{Child, Command, Output, Stdio};

mod common;
use common::BIN;

/// Prints why the test is skipped straight to the standard error stream (libtest does not
/// capture direct writes), so the reason shows in a normal `cargo test` run.
fn skip(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Namespaces made by this test; deleted on drop.
struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// A process killed and reaped on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server's namespace (`vs`, 10.232.0.1) and the client's (`vc`, 10.232.0.2 and
/// 10.232.0.3), MTU 9000 (the default path MTU of `perf`).
fn topology() -> Result<Netns, String> {
    let id = std::process::id();
    let (s, c) = (format!("tmc{id}s"), format!("tmc{id}c"));
    ip(&["netns", "add", &s])?;
    let mut ns = Netns(vec![s.clone()]);
    ip(&["netns", "add", &c])?;
    ns.0.push(c.clone());
    ip(&[
        "-n", &s, "link", "add", "vs", "mtu", "9000", "type", "veth", "peer", "name", "vc", "mtu",
        "9000", "netns", &c,
    ])?;
    for (n, dev, addrs) in [
        (&s, "vs", &["10.232.0.1/24"][..]),
        (&c, "vc", &["10.232.0.2/24", "10.232.0.3/24"][..]),
    ] {
        for addr in addrs {
            ip(&["-n", n, "addr", "add", addr, "dev", dev])?;
        }
        ip(&["-n", n, "link", "set", dev, "up"])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
    }
    Ok(ns)
}

/// `tagmatch args` in namespace `ns`.
fn tagmatch_in(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, BIN]).args(args);
    c.stdin(Stdio::null());
    c
}

/// Runs `perf client args` in `ns`.
fn client(ns: &str, args: &[&str]) -> Output {
    let mut a = vec!["perf", "client"];
    a.extend_from_slice(args);
    tagmatch_in(ns, &a).output().expect("spawn perf client")
}

#[test]
fn perf_client_reaches_a_server_on_another_host() {
    let required = std::env::var_os("TAGMATCH_NETNS_REQUIRED").is_some();
    let ns = match topology() {
        Ok(ns) => ns,
        Err(why) if !required => {
            skip(&format!("network namespaces unavailable here: {why}"));
            return;
        }
        Err(why) => panic!("network namespaces required but unavailable: {why}"),
    };
    let (sns, cns) = (ns.0[0].as_str(), ns.0[1].as_str());
    let mut server = Killed(
        tagmatch_in(
            sns,
            &[
                "perf",
                "server",
                "--bind",
                "10.232.0.1:0",
                "--forever",
                "--client-timeout",
                "5",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn perf server"),
    );
    let addr = common::address_line(&mut server.0, "udp://10.232.0.1:");

    // Without --bind: the route's source address, 10.232.0.2.
    let o = client(
        cns,
        &[
            &addr, "--test", "tag_lat", "--size", "8,64k", "--iters", "50", "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    for l in out.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["transport"], "udp", "{l}");
        assert!(v["bw_mbs"].as_f64().unwrap() > 0.0, "{l}");
    }

    // --bind names the client's other address: a streaming run over it.
    let o = client(
        cns,
        &[
            &addr,
            "--bind",
            "10.232.0.3:0",
            "--test",
            "tag_bw",
            "--size",
            "1m",
            "--iters",
            "20",
            "--window",
            "4",
            "--json",
        ],
    );
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);

    // A --bind is taken as given: a loopback address, which the server cannot answer
    // to (what the client bound before it chose by the route), ends in the error that
    // names the server.
    let o = client(
        cns,
        &[
            &addr,
            "--bind",
            "127.0.0.1:0",
            "--peer-timeout",
            "1",
            "--iters",
            "5",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("no answer from {addr}")), "{err}");
    drop(server);
    drop(ns);
}

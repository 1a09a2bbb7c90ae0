//! Multi-host: two network namespaces joined by a veth pair (addresses in 10.231.0.0/24
//! inside the namespaces only), a responder process in one and a requester process in the
//! other (`ip netns exec`), every subprotocol, at a 1500 and a 9000-byte path MTU; and three
//! hosts on a bridge (in a fourth namespace), two requesters sharing one responder at once.
//!
//! Needs root and iproute2. Where namespaces cannot be made (no privilege, no `ip`, a kernel
//! without netns) the test prints why and returns, unless `TAGMATCH_NETNS_REQUIRED` is set
//! (`cargo xtask netns`, CI), where that is a failure. The namespaces are removed on every
//! path out (a drop guard), which also removes the veth pair.
mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// The child side: runs only when re-executed with a role.
#[test]
fn child_entry() {
    child_main();
}

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

/// Two namespaces `a`, `b` with `va` (10.231.0.1) and `vb` (10.231.0.2), MTU `mtu`.
fn topology(mtu: usize) -> Result<Netns, String> {
    let id = std::process::id();
    let (a, b) = (format!("tmt{id}a{mtu}"), format!("tmt{id}b{mtu}"));
    ip(&["netns", "add", &a])?;
    let mut ns = Netns(vec![a.clone()]);
    ip(&["netns", "add", &b])?;
    ns.0.push(b.clone());
    let mtu = mtu.to_string();
    ip(&[
        "-n", &a, "link", "add", "va", "mtu", &mtu, "type", "veth", "peer", "name", "vb", "mtu",
        &mtu, "netns", &b,
    ])?;
    for (n, dev, addr) in [(&a, "va", "10.231.0.1/24"), (&b, "vb", "10.231.0.2/24")] {
        ip(&["-n", n, "addr", "add", addr, "dev", dev])?;
        ip(&["-n", n, "link", "set", dev, "up"])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
    }
    Ok(ns)
}

/// Hosts `h0..h2` (10.231.0.1-3) on a bridge in namespace `sw`.
fn bridged() -> Result<Netns, String> {
    let id = std::process::id();
    let sw = format!("tmt{id}sw");
    ip(&["netns", "add", &sw])?;
    let mut ns = Netns(vec![sw.clone()]);
    ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
    ip(&["-n", &sw, "link", "set", "br0", "up"])?;
    for h in 0..3 {
        let n = format!("tmt{id}h{h}");
        ip(&["netns", "add", &n])?;
        ns.0.push(n.clone());
        let port = format!("p{h}");
        ip(&[
            "-n", &n, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &sw,
        ])?;
        ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
        ip(&["-n", &sw, "link", "set", &port, "up"])?;
        let addr = format!("10.231.0.{}/24", h + 1);
        ip(&["-n", &n, "addr", "add", &addr, "dev", "eth0"])?;
        ip(&["-n", &n, "link", "set", "eth0", "up"])?;
        ip(&["-n", &n, "link", "set", "lo", "up"])?;
    }
    Ok(ns)
}

#[test]
fn three_hosts_on_a_bridge_two_requesters_share_a_responder() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    let required = std::env::var_os("TAGMATCH_NETNS_REQUIRED").is_some();
    let ns = match bridged() {
        Ok(ns) => ns,
        Err(why) if !required => {
            skip(&format!("network namespaces unavailable here: {why}"));
            return;
        }
        Err(why) => panic!("network namespaces required but unavailable: {why}"),
    };
    let resp = spawn_child(
        Some(&ns.0[1]),
        "child_entry",
        &[
            (ROLE_ENV, "responder".into()),
            (BIND_ENV, "10.231.0.1:0".into()),
            (REQUESTERS_ENV, "2".into()),
        ],
    )
    .expect("spawn the responder");
    let mut resp = ChildGuard(resp);
    let addr = read_line_with(&mut resp.0, "ADDR ").expect("the responder printed its address");
    let mut reqs = Vec::new();
    for (slot, host) in [(0u64, 2usize), (1, 3)] {
        let c = spawn_child(
            Some(&ns.0[host]),
            "child_entry",
            &[
                (ROLE_ENV, "requester".into()),
                (BIND_ENV, format!("10.231.0.{host}:0")),
                (PEER_ENV, addr.clone()),
                (SLOT_ENV, slot.to_string()),
            ],
        )
        .expect("spawn a requester");
        reqs.push(ChildGuard(c));
    }
    let lines: Vec<String> = reqs
        .iter_mut()
        .map(|r| read_line_with(&mut r.0, "REQUESTER ").unwrap_or_default())
        .collect();
    for r in &mut reqs {
        wait_child(&mut r.0, Duration::from_secs(90)).expect("requester process");
    }
    wait_child(&mut resp.0, Duration::from_secs(30)).expect("responder process");
    for l in &lines {
        assert!(l.starts_with("ok 29 operations"), "{l}");
    }
    drop(ns);
}

fn run(mtu: usize) {
    let required = std::env::var_os("TAGMATCH_NETNS_REQUIRED").is_some();
    let ns = match topology(mtu) {
        Ok(ns) => ns,
        Err(why) if !required => {
            skip(&format!("network namespaces unavailable here: {why}"));
            return;
        }
        Err(why) => panic!("network namespaces required but unavailable: {why}"),
    };
    let (a, b) = (ns.0[0].as_str(), ns.0[1].as_str());
    let m = mtu.to_string();
    let resp = spawn_child(
        Some(b),
        "child_entry",
        &[
            (ROLE_ENV, "responder".into()),
            (BIND_ENV, "10.231.0.2:0".into()),
            (MTU_ENV, m.clone()),
        ],
    )
    .expect("spawn the responder");
    let mut resp = ChildGuard(resp);
    let addr = read_line_with(&mut resp.0, "ADDR ").expect("the responder printed its address");
    assert!(addr.starts_with("udp://10.231.0.2:"), "{addr}");
    let req = spawn_child(
        Some(a),
        "child_entry",
        &[
            (ROLE_ENV, "requester".into()),
            (BIND_ENV, "10.231.0.1:0".into()),
            (PEER_ENV, addr),
            (MTU_ENV, m),
        ],
    )
    .expect("spawn the requester");
    let mut req = ChildGuard(req);
    let line = read_line_with(&mut req.0, "REQUESTER ").unwrap_or_default();
    let r1 = wait_child(&mut req.0, Duration::from_secs(60));
    let r2 = wait_child(&mut resp.0, Duration::from_secs(30));
    r1.expect("requester process");
    r2.expect("responder process");
    assert!(line.starts_with("ok 29 operations"), "{line}");
    drop(ns);
}

#[test]
fn two_hosts_in_network_namespaces_path_mtu_1500() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    run(1500);
}

#[test]
fn two_hosts_in_network_namespaces_path_mtu_9000() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    run(9000);
}

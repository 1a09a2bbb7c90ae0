//! Black-box tests of `tagmatch demo` (live, both transports) and `tagmatch perf` (in
//! process, and server + client processes over loopback UDP). No wall-clock assertions
//! but one generous upper bound (an unreachable server costs one peer timeout): only that
//! runs finish, pass and print well-formed tables and JSON.

use serde_json::Value;
use std::process::{Command, Output, Stdio};

mod common;
use common::{fails, ok, perf_server, run, BIN};

/// The read-nack row (in process the fabric refuses the long-read's registration; over UDP
/// a second responder process whose device may register 1 MiB besides its region).
const READ_NACK: &str = "read-nack → long-CTS";

const ROWS: [&str; 18] = [
    "handshake",
    "eager",
    "eager + CQ data + DC",
    "eager untagged",
    "medium",
    "long-CTS",
    "long-CTS + DC",
    "long-read",
    "runting read",
    READ_NACK,
    "direct write",
    "direct read",
    "eager write",
    "long-CTS write",
    "long-read write",
    "short read",
    "long-CTS read",
    "atomics (cswap, fetch-add)",
];

/// The table's row for `name`.
fn row<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with("  "))
        .unwrap_or_else(|| panic!("no line for {name}: {out}"))
}

fn check_demo_table(out: &str, transport: &str) {
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("subprotocol"), "{out}");
    for name in ROWS {
        let line = row(out, name);
        assert!(line.ends_with(" ok"), "{line}");
    }
    // Header, rows, the packets footnote, the handshake/connid note, the summary.
    assert_eq!(lines.len(), ROWS.len() + 4, "{out}");
    assert!(
        lines[ROWS.len() + 1].starts_with("¹ EFA RDM packets"),
        "{out}"
    );
    let note = lines[ROWS.len() + 2];
    let handshakes: u64 = note
        .strip_prefix("handshake: ")
        .and_then(|n| n.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    // Each of the initiator's 3 endpoints answers the responder's first packet with a
    // HANDSHAKE, and (when its counters are visible, in process) the responder each of them;
    // over UDP the first endpoint also answers the read-nack row's responder.
    assert!(
        handshakes >= if transport == "mem" { 6 } else { 4 },
        "{note}"
    );
    assert!(note.contains(", 0 of "), "{note}");
    let last = lines[lines.len() - 1];
    let want = format!("18 of 18 subprotocols ok over {transport} in ");
    assert!(last.starts_with(&want), "{last}");
}

/// The read-nack fallback moves the whole 2 MiB by long-CTS: CTS/CTSDATA packets, where
/// the long-read row needs a handful.
fn check_read_nack_packets(out: &str) {
    let packets = |name| -> u64 {
        row(out, name)
            .split_whitespace()
            .rev()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(packets(READ_NACK) > 10 * packets("long-read"), "{out}");
}

#[test]
fn demo_runs_every_subprotocol_in_process() {
    let out = ok(&["demo"]);
    check_demo_table(&out, "mem");
    check_read_nack_packets(&out);
}

#[test]
fn demo_runs_every_subprotocol_between_two_processes_over_udp() {
    let out = ok(&["demo", "--transport", "udp"]);
    check_demo_table(&out, "udp");
    check_read_nack_packets(&out);
}

/// Runs `tagmatch args` with the demo's test hook set to `inject` and `marker` in its
/// environment (which a responder process inherits).
fn run_injected(args: &[&str], inject: &str, marker: &str) -> Output {
    Command::new(BIN)
        .args(args)
        .env("TAGMATCH_DEMO_INJECT", inject)
        .env("TAGMATCH_DEMO_TEST_MARKER", marker)
        .stdin(Stdio::null())
        .output()
        .expect("spawn tagmatch")
}

/// The processes whose environment holds `marker` (Linux: read from /proc); kills them
/// before returning, so that a failing test leaves nothing behind either.
#[cfg(target_os = "linux")]
fn processes_marked(marker: &str) -> Vec<u32> {
    let needle = format!("TAGMATCH_DEMO_TEST_MARKER={marker}\0");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // Unreadable (another user's) or gone meanwhile: not ours.
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            found.push(pid);
        }
    }
    for pid in &found {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    found
}

fn marker(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{what}-{}-{t}", std::process::id())
}

#[test]
fn demo_exits_1_when_a_step_fails() {
    for transport in ["mem", "udp"] {
        let m = marker("fail");
        let o = run_injected(
            &["demo", "--transport", transport],
            "fail:long-CTS write",
            &m,
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
        assert_eq!(
            err.trim(),
            "tagmatch: demo: 1 subprotocol(s) failed",
            "{err}"
        );
        assert!(
            row(&out, "long-CTS write")
                .ends_with("FAILED: injected by TAGMATCH_DEMO_INJECT (ran: ok)"),
            "{out}"
        );
        assert!(row(&out, "long-CTS").ends_with(" ok"), "{out}");
        assert!(
            out.lines()
                .last()
                .unwrap()
                .starts_with(&format!("17 of 18 subprotocols ok over {transport} in ")),
            "{out}"
        );
        #[cfg(target_os = "linux")]
        assert_eq!(processes_marked(&m), Vec::<u32>::new(), "left running");
    }
    // The read-nack row over UDP: both responder processes are gone after a failure.
    let o = udp_demo_injected(&format!("fail:{READ_NACK}"), "nack");
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains("FAILED: injected by TAGMATCH_DEMO_INJECT (ran: ok)"));
}

/// Runs the demo over UDP with the test hook set to `inject` (processes marked with a
/// fresh marker named after `what`); checks that it exits 1 and (Linux) that no process it
/// started is left running; its output.
fn udp_demo_injected(inject: &str, what: &str) -> Output {
    let m = marker(what);
    let o = run_injected(&["demo", "--transport", "udp"], inject, &m);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    #[cfg(target_os = "linux")]
    assert_eq!(processes_marked(&m), Vec::<u32>::new(), "left running");
    o
}

/// A demo that stops with an error before telling its UDP responder to quit kills the
/// responder process on the way out. Left running, the responder would serve on until a
/// reply to the gone demo fails or its 120 s limit passes: `output()` then waits for it
/// (it shares the demo's stderr) and its own error line shows on stderr, and a responder
/// that closed its stderr would still show in the scan of /proc.
#[test]
fn demo_leaves_no_responder_process_behind_after_an_error() {
    let o = udp_demo_injected("abort", "abort");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "tagmatch: demo: stopped after the handshake by TAGMATCH_DEMO_INJECT=abort"
    );
    // Right after the read-nack row, both responder processes (the second one, whose
    // device may register 1 MiB besides its region, is the read-nack row's) are running.
    let o = udp_demo_injected(&format!("abort:{READ_NACK}"), "abortnack");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(
        err.trim(),
        format!(
            "tagmatch: demo: stopped after {READ_NACK} by TAGMATCH_DEMO_INJECT=abort:{READ_NACK}"
        )
    );
    assert!(
        out.is_empty(),
        "the table is printed at the end only: {out}"
    );
}

#[test]
fn demo_test_hook_rejects_what_it_does_not_know() {
    let o = run_injected(&["demo"], "fail:no such row", &marker("bad"));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "tagmatch: demo: TAGMATCH_DEMO_INJECT: no row named \"no such row\""
    );
    let o = run_injected(&["demo"], "abort:no such row", &marker("bad"));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no row named \"no such row\""));
    let o = run_injected(&["demo"], "explode", &marker("bad"));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected fail:ROW"));
    // The hook stays out of the help.
    assert!(!ok(&["demo", "--help"]).contains("TAGMATCH_DEMO_INJECT"));
}

#[test]
fn demo_rejects_bad_arguments() {
    assert!(
        fails(&["demo", "--transport", "carrier-pigeon"]).contains("expected mem, udp or verbs")
    );
    assert!(fails(&["demo", "--device", "rxe0"]).contains("--device goes with --transport verbs"));
    #[cfg(not(feature = "verbs"))]
    assert!(fails(&["demo", "--transport", "verbs"]).contains("built without its `verbs` feature"));
    #[cfg(feature = "verbs")]
    assert!(fails(&[
        "demo",
        "--transport",
        "verbs",
        "--device",
        "no_such_rdma_dev"
    ])
    .contains("no_such_rdma_dev"));
    assert!(fails(&["demo", "--hex"]).contains("--packets"));
    // --packets runs no endpoints: a transport or device with it is refused, not ignored.
    for t in ["udp", "mem"] {
        assert_eq!(
            fails(&["demo", "--packets", "--transport", t]).trim(),
            format!(
                "tagmatch: demo --packets: --transport {t} goes with the live demo (without \
                 --packets); --packets only round-trips packets through decode and encode"
            )
        );
    }
    assert!(fails(&["demo", "--packets", "--device", "rxe0"])
        .contains("--device goes with the live demo's --transport verbs"));
}

#[test]
fn perf_in_process_json_table_and_plot() {
    for test in ["tag_lat", "tag_bw", "tag_msgrate", "put_bw", "get_bw"] {
        let out = ok(&[
            "perf",
            "client",
            "--transport",
            "mem",
            "--test",
            test,
            "--size",
            "8,4k",
            "--iters",
            "50",
            "--json",
        ]);
        let rows: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        assert_eq!(rows.len(), 2, "{out}");
        for (r, size) in rows.iter().zip([8, 4096]) {
            assert_eq!(r["test"], test);
            assert_eq!(r["size"], size);
            assert_eq!(r["iters"], 50);
            assert!(r["bw_mbs"].as_f64().unwrap() > 0.0);
            assert!(r["msgrate_mmsgs"].as_f64().unwrap() > 0.0);
            assert_eq!(r["lat_p50_us"].is_number(), test == "tag_lat", "{r}");
        }
    }
    let dir = std::env::temp_dir().join(format!("tagmatch-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("lat.svg");
    let out = ok(&[
        "perf",
        "client",
        "--transport",
        "mem",
        "--size",
        "8,1k,64k",
        "--iters",
        "100",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.lines().next().unwrap().starts_with("test"));
    assert_eq!(out.lines().count(), 4, "{out}");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    assert_eq!(s.matches("<polyline").count(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--plot` to a path that cannot be written fails before the run (nothing measured,
/// nothing printed: the JSON rows are printed as each size is measured), naming the path;
/// a plot file the client created is removed when the run fails.
#[test]
fn perf_plot_path_is_checked_before_the_run() {
    let o = run(&[
        "perf",
        "client",
        "--transport",
        "mem",
        "--size",
        "8,1k",
        "--iters",
        "20",
        "--json",
        "--plot",
        "/nonexistent/x.svg",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--plot /nonexistent/x.svg: "), "{err}");
    let dir = std::env::temp_dir().join(format!("tagmatch-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("failed.svg");
    let err = fails(&[
        "perf",
        "client",
        "--transport",
        "mem",
        "--test",
        "put_bw",
        "--size",
        "0",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(err.contains("--size 0"), "{err}");
    assert!(!svg.exists(), "the failed run left {}", svg.display());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn perf_server_and_client_over_loopback_udp() {
    let (mut server, addr) = perf_server(&[]);
    // The server serves one client (any number of sizes) and exits.
    let out = ok(&[
        "perf", "client", &addr, "--test", "tag_lat", "--size", "8,64k", "--iters", "100", "--json",
    ]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(server.wait().unwrap().success());
}

/// `perf client --bind` binds the address given: the server, bound to 127.0.0.2, is told
/// the client's address 127.0.0.3 and answers there (a port of it taken by a socket of
/// this test first, the client's bind fails naming it). A `--bind` goes with UDP only,
/// and must be of the server's address family.
#[test]
fn perf_client_binds_the_address_given() {
    let (mut server, addr) =
        common::spawn_perf_server(&["--bind", "127.0.0.2:0"], "udp://127.0.0.2:");
    let out = ok(&[
        "perf",
        "client",
        &addr,
        "--bind",
        "127.0.0.3:0",
        "--iters",
        "20",
        "--json",
    ]);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(server.wait().unwrap().success());
    let taken = std::net::UdpSocket::bind("127.0.0.3:0").unwrap();
    let bind = taken.local_addr().unwrap().to_string();
    let err = fails(&["perf", "client", &addr, "--bind", &bind, "--iters", "20"]);
    assert!(
        err.contains(&format!("UDP endpoint on {bind}: udp bind: ")),
        "{err}"
    );
    assert!(fails(&[
        "perf",
        "client",
        "--transport",
        "mem",
        "--bind",
        "127.0.0.1:0"
    ])
    .contains("--bind \"127.0.0.1:0\" goes with --transport udp"));
    let err = fails(&[
        "perf",
        "client",
        "udp://127.0.0.1:9/0x1",
        "--bind",
        "[::1]:0",
    ]);
    assert!(
        err.contains("--bind [::1]:0: an IPv6 address, but the server 127.0.0.1:9 is IPv4"),
        "{err}"
    );
}

/// A `--forever` server serves one client after another, its receive region growing for a
/// larger size and serving smaller ones after: latency at 8 B, 64 KiB and 1 MiB
/// (long-read into the region), then streaming 1 MiB and 8 B with a window of receives
/// sharing the region.
#[test]
fn perf_server_serves_clients_of_growing_and_shrinking_sizes_over_udp() {
    let (mut server, addr) = perf_server(&["--forever"]);
    let runs: [&[&str]; 2] = [
        &["--test", "tag_lat", "--size", "8,64k,1m", "--iters", "50"],
        &[
            "--test", "tag_bw", "--size", "1m,8", "--iters", "64", "--window", "8",
        ],
    ];
    for run in runs {
        let mut args = vec!["perf", "client", &addr, "--json"];
        args.extend_from_slice(run);
        let out = ok(&args);
        assert_eq!(out.lines().count(), run[3].split(',').count(), "{out}");
        for l in out.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v["bw_mbs"].as_f64().unwrap() > 0.0, "{l}");
        }
    }
    server.kill().unwrap();
    server.wait().unwrap();
}

/// A client whose server does not answer (a bound socket that never replies) stops with
/// an error naming the address once the peer timeout passes: the control message's send
/// fails, and the wait for the server's reply does not run on to its 30 s limit (whose
/// message would be "did not complete within 30000 ms"). It takes one peer timeout, not
/// two: no QUIT is sent to the unreachable server after the failure (its send failed
/// only after a second timeout, so the client took at least 4 s here).
#[test]
fn perf_client_without_a_server_fails_naming_the_address() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = format!("udp://{}/0x1234", silent.local_addr().unwrap());
    let start = std::time::Instant::now();
    let err = fails(&[
        "perf",
        "client",
        &addr,
        "--peer-timeout",
        "2",
        "--iters",
        "10",
    ]);
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_millis(3500),
        "failed after {took:?}: more than one 2 s peer timeout"
    );
    assert!(err.contains("failed: the peer did not take it"), "{err}");
    assert!(err.contains("(SendFailed)"), "{err}");
    assert!(
        err.contains(&format!(
            "no answer from {addr}: is `tagmatch perf server` running there?"
        )),
        "{err}"
    );
}

#[test]
fn perf_rejects_bad_arguments() {
    let c = |extra: &[&str]| {
        let mut a = vec!["perf", "client", "--transport", "mem"];
        a.extend_from_slice(extra);
        fails(&a)
    };
    assert!(c(&["--size", "12q"]).contains("--size"));
    assert!(c(&["--test", "put_bw", "--size", "0"]).contains("--size 0"));
    assert!(c(&["--window", "0"]).contains("--window"));
    assert!(c(&["--iters", "0"]).contains("--iters"));
    // Beyond what the server accepts (it would ignore the run, the client waiting 30 s
    // for its answer): refused up front, naming the flag, the value and the limit, over
    // UDP before anything is sent.
    for transport in [&["--transport", "mem"][..], &["udp://127.0.0.1:9/0x1"][..]] {
        let mut a = vec!["perf", "client"];
        a.extend_from_slice(transport);
        let with = |extra: &[&str]| {
            let mut a = a.clone();
            a.extend_from_slice(extra);
            fails(&a)
        };
        let err = with(&["--window", "65537"]);
        assert!(err.contains("--window 65537: at most 65536"), "{err}");
        let err = with(&["--iters", "4294967297"]);
        assert!(
            err.contains("--iters 4294967297: at most 4294967296"),
            "{err}"
        );
    }
    // The largest window is accepted (a run of fewer iterations posts fewer receives).
    let out = ok(&[
        "perf",
        "client",
        "--transport",
        "mem",
        "--test",
        "tag_bw",
        "--window",
        "65536",
        "--iters",
        "10",
        "--json",
    ]);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(fails(&["perf", "client", "udp://nowhere"]).contains("invalid address"));
    assert!(fails(&["perf", "client"]).contains("missing the server address"));
    assert!(fails(&["perf", "server", "--bind", "nope"]).contains("--bind"));
    assert!(c(&["--device", "rxe0"]).contains("--device goes with --transport verbs"));
    assert!(c(&["--path-mtu", "1500"]).contains("--path-mtu goes with --transport udp"));
    assert!(c(&["--peer-timeout", "1"]).contains("--peer-timeout goes with --transport udp"));
    for bad in ["0", "-1", "nan", "1e9"] {
        let arg = format!("--peer-timeout={bad}");
        let err = fails(&["perf", "client", "udp://127.0.0.1:1/0x1", &arg]);
        assert!(err.contains("--peer-timeout"), "{bad}: {err}");
    }
    assert!(
        fails(&["perf", "client", "udp://127.0.0.1:1/0x1", "--no-fast-path"])
            .contains("--no-fast-path goes with --transport mem")
    );
    assert!(fails(&["perf", "server", "--device", "rxe0"]).contains("--device goes with"));
    for bad in ["0", "-2", "inf"] {
        let arg = format!("--client-timeout={bad}");
        assert!(
            fails(&["perf", "server", &arg]).contains("--client-timeout"),
            "{bad}"
        );
    }
    assert!(fails(&["perf", "server", "--transport", "mem"]).contains("expected udp or verbs"));
    // Verbs has nothing to bind: a --bind is refused, not ignored (checked before the
    // device is opened, so also in a build without the `verbs` feature).
    assert!(fails(&[
        "perf",
        "server",
        "--transport",
        "verbs",
        "--bind",
        "10.0.0.1:7000"
    ])
    .contains("--bind \"10.0.0.1:7000\" goes with --transport udp"));
    #[cfg(not(feature = "verbs"))]
    for args in [
        &["perf", "client", "--transport", "verbs"][..],
        &["perf", "server", "--transport", "verbs"][..],
    ] {
        assert!(fails(args).contains("built without its `verbs` feature"));
    }
    // clap rejects an unknown test with its usage status.
    assert_eq!(
        run(&["perf", "client", "--test", "nope"]).status.code(),
        Some(2)
    );
}

/// `perf --cpu`: a CPU number or `any` (in process, the default pins to the CPU the
/// command starts on); anything else, or a CPU the process may not use, is refused.
#[test]
fn perf_cpu_option() {
    let args = |cpu: &'static str| {
        vec![
            "perf",
            "client",
            "--transport",
            "self",
            "--test",
            "tag_lat",
            "--iters",
            "1000",
            "--json",
            "--cpu",
            cpu,
        ]
    };
    let out = ok(&args("any"));
    assert!(out.starts_with('{'), "{out}");
    let err = fails(&args("seven"));
    assert!(
        err.contains("--cpu \"seven\": expected a CPU number or any"),
        "{err}"
    );
    #[cfg(target_os = "linux")]
    {
        let err = fails(&args("100000"));
        assert!(
            err.contains("--cpu 100000: not a CPU this process may run on (allowed: "),
            "{err}"
        );
        let err = fails(&["perf", "server", "--cpu", "100000"]);
        assert!(err.contains("--cpu 100000: not a CPU"), "{err}");
    }
}

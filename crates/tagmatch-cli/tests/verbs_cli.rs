//! `tagmatch demo` and `tagmatch perf` over the verbs transport (`--features verbs`):
//! the demo's every subprotocol between endpoints on one RDMA device, `perf` with both
//! sides in one process, and a `perf server` process with a `perf client` process.
//!
//! Without an RDMA device these tests print `SKIPPED` and pass, unless
//! `TAGMATCH_REQUIRE_RDMA_DEVICE=1` (set by `cargo xtask vm-test`, which runs them on
//! Soft-RoCE inside QEMU). `TAGMATCH_RDMA_DEVICE` picks the device (default: the first).
#![cfg(feature = "verbs")]

use serde_json::Value;
use std::io::Write as _;

mod common;
use common::{ok, spawn_perf_server};

fn device() -> String {
    std::env::var("TAGMATCH_RDMA_DEVICE").unwrap_or_default()
}

/// Whether the host has the device (else the test is skipped, unless required).
fn have_device(test: &str) -> bool {
    match tagmatch::Endpoint::builder().verbs(&device()).build() {
        Ok(_) => true,
        Err(e) => {
            let require =
                std::env::var("TAGMATCH_REQUIRE_RDMA_DEVICE").is_ok_and(|v| v.trim() == "1");
            assert!(
                !require,
                "{test}: {e}, and TAGMATCH_REQUIRE_RDMA_DEVICE=1 requires a device"
            );
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {e}");
            false
        }
    }
}

#[test]
fn demo_runs_every_subprotocol_over_verbs() {
    if !have_device("demo_runs_every_subprotocol_over_verbs") {
        return;
    }
    let dev = device();
    let out = ok(&["demo", "--transport", "verbs", "--device", &dev]);
    eprintln!("{out}");
    // The last line is the summary: every subprotocol passed but the read-nack row, which
    // needs RDMA read (a long-read to refuse) and is skipped.
    let last = out.lines().last().unwrap_or_default();
    assert!(last.contains("subprotocols ok over verbs"), "{out}");
    let (ok_n, total) = last
        .split_once(" of ")
        .map(|(a, b)| {
            (
                a.trim().parse::<usize>().expect("a count"),
                b.split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<usize>().ok())
                    .expect("a count"),
            )
        })
        .expect("summary line");
    assert!(last.contains(", 1 skipped in "), "{out}");
    assert_eq!(ok_n + 1, total, "{out}");
    let read_nack = out
        .lines()
        .find(|l| l.starts_with("read-nack"))
        .expect("a read-nack row");
    assert!(
        read_nack.contains("skipped: needs a responder whose registration fails and RDMA read"),
        "{out}"
    );
    assert!(!out.contains("FAIL"), "{out}");
}

fn check_rows(out: &str, test: &str, sizes: &[u64], transport: &str) {
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(rows.len(), sizes.len(), "{out}");
    for (r, &size) in rows.iter().zip(sizes) {
        assert_eq!(r["test"], test, "{r}");
        assert_eq!(r["transport"], transport, "{r}");
        assert_eq!(r["size"], size, "{r}");
        assert!(r["bw_mbs"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["lat_p50_us"].is_number(), test == "tag_lat", "{r}");
    }
}

#[test]
fn perf_both_sides_in_one_process_over_verbs() {
    if !have_device("perf_both_sides_in_one_process_over_verbs") {
        return;
    }
    let dev = device();
    for test in ["tag_lat", "tag_bw", "put_bw", "get_bw"] {
        let out = ok(&[
            "perf",
            "client",
            "--transport",
            "verbs",
            "--device",
            &dev,
            "--test",
            test,
            "--size",
            "8,64k",
            "--iters",
            "40",
            "--window",
            "8",
            "--json",
        ]);
        eprint!("{out}");
        check_rows(&out, test, &[8, 65536], "verbs");
    }
}

#[test]
fn perf_server_and_client_processes_over_verbs() {
    if !have_device("perf_server_and_client_processes_over_verbs") {
        return;
    }
    let dev = device();
    let (child, addr) = spawn_perf_server(&["--transport", "verbs", "--device", &dev], "verbs://");
    let mut server = Server(child);
    let out = ok(&[
        "perf",
        "client",
        &addr,
        "--transport",
        "verbs",
        "--device",
        &dev,
        "--test",
        "tag_lat",
        "--size",
        "8,1m",
        "--iters",
        "20",
        "--json",
    ]);
    check_rows(&out, "tag_lat", &[8, 1 << 20], "verbs");
    assert!(server.0.wait().unwrap().success());
}

/// The `perf server` process, killed if the test fails before it exits (it would wait for
/// a client for ever).
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

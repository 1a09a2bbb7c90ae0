//! Review of session 12's `tag_lat` over the protocol (the client sends, then posts the
//! reply's receive; the server replies, then posts the next receive): runs at every
//! protocol size (eager 8 B, medium 64 KiB, long-read 1 MiB) finish and report, in
//! process over the protocol and between processes over loopback UDP, including runs of
//! one iteration (the server's reply goes before its control receive is posted) and a
//! client after them. No wall-clock assertions.

use serde_json::Value;

mod common;
use common::{ok, perf_server};

/// Checks `out` holds one JSON row per size of `sizes`, each a latency row of `iters`.
fn check_rows(out: &str, sizes: &[u64], iters: u64) {
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(rows.len(), sizes.len(), "{out}");
    for (r, size) in rows.iter().zip(sizes) {
        assert_eq!(r["test"], "tag_lat", "{r}");
        assert_eq!(r["size"], *size, "{r}");
        assert_eq!(r["iters"], iters, "{r}");
        assert!(r["lat_p50_us"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    }
}

#[test]
fn tag_lat_over_the_protocol_in_process_at_every_protocol_size() {
    for extra in [&[][..], &["--no-fast-path"][..]] {
        for iters in ["1", "40"] {
            let mut args = vec![
                "perf",
                "client",
                "--transport",
                "mem",
                "--test",
                "tag_lat",
                "--size",
                "8,64k,1m",
                "--iters",
                iters,
                "--json",
            ];
            args.extend_from_slice(extra);
            let out = ok(&args);
            check_rows(&out, &[8, 65536, 1 << 20], iters.parse().unwrap());
        }
    }
}

#[test]
fn tag_lat_of_one_iteration_then_more_over_udp() {
    let (mut server, addr) = perf_server(&["--forever"]);
    for (sizes, iters) in [("8,64k,1m", "1"), ("1m,64k,8", "30"), ("1m", "1")] {
        let out = ok(&[
            "perf", "client", &addr, "--test", "tag_lat", "--size", sizes, "--iters", iters,
            "--json",
        ]);
        let sizes: Vec<u64> = sizes
            .split(',')
            .map(|s| match s {
                "8" => 8,
                "64k" => 65536,
                _ => 1 << 20,
            })
            .collect();
        check_rows(&out, &sizes, iters.parse().unwrap());
    }
    server.kill().unwrap();
    server.wait().unwrap();
}

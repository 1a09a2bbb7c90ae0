//! `tagmatch replay --hw-tags N --seed S` must print exactly what the software replay
//! prints (stdout, stderr and exit status) for random traces, hardware capacities and
//! completion timings; `bench match --hw-tags` adds the offload counters to its JSON.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tagmatch");

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagmatch");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random valid trace: posts (wildcards, saturating comm/tag values), arrivals, cancels,
/// probes, mprobes and mrecvs of claimed messages.
fn trace(seed: u64, len: usize) -> String {
    let mut r = Rng(seed);
    let mut t = String::new();
    let (mut rids, mut mids, mut pids) = (0, 0, 0);
    let mut claimed: Vec<u32> = Vec::new();
    let comm = |r: &mut Rng| [0u64, 0, 1, 1 << 21][r.below(4) as usize];
    let tag = |r: &mut Rng| [0u64, 1, 2, 3, 1 << 40][r.below(5) as usize];
    for _ in 0..len {
        match r.below(12) {
            0..=3 => {
                let c = comm(&mut r);
                let s = match r.below(4) {
                    0 => "*".to_string(),
                    n => (n - 1).to_string(),
                };
                let g = match r.below(5) {
                    0 => "*".to_string(),
                    _ => tag(&mut r).to_string(),
                };
                t += &format!("post r{rids} comm={c} src={s} tag={g}\n");
                rids += 1;
            }
            4..=7 => {
                let (c, s, g) = (comm(&mut r), r.below(3), tag(&mut r));
                t += &format!("arrive m{mids} comm={c} src={s} tag={g}\n");
                mids += 1;
            }
            8 if rids > 0 => t += &format!("cancel r{}\n", r.below(rids)),
            9 => {
                t += &format!("probe p{pids} comm={} src=* tag=*\n", comm(&mut r));
                pids += 1;
            }
            10 => {
                t += &format!(
                    "mprobe p{pids} comm={} src={} tag=*\n",
                    comm(&mut r),
                    r.below(3)
                );
                claimed.push(pids);
                pids += 1;
            }
            _ => {
                if let Some(p) = claimed.pop() {
                    // Only mrecv an mprobe that claimed something: replay once to know.
                    let out = run(&["replay", "-"], &format!("{t}mrecv r{rids} p{p}\n"));
                    if out.status.success() {
                        t += &format!("mrecv r{rids} p{p}\n");
                        rids += 1;
                    }
                }
            }
        }
    }
    t
}

#[test]
fn hw_replay_prints_exactly_the_software_output() {
    let mut hw_matches = 0;
    for seed in 0..24u64 {
        let t = trace(seed, 40);
        let sw = run(&["replay", "-"], &t);
        assert!(
            sw.status.success(),
            "{}",
            String::from_utf8_lossy(&sw.stderr)
        );
        for tags in ["0", "1", "2", "3", "64"] {
            for timing in ["1", "7"] {
                let hw = run(
                    &[
                        "replay",
                        "--hw-tags",
                        tags,
                        "--seed",
                        timing,
                        "--stats",
                        "-",
                    ],
                    &t,
                );
                assert_eq!(
                    String::from_utf8_lossy(&hw.stdout),
                    String::from_utf8_lossy(&sw.stdout),
                    "trace seed {seed}, --hw-tags {tags} --seed {timing}:\n{t}"
                );
                assert_eq!(hw.status.code(), sw.status.code());
                let stats: Value =
                    serde_json::from_slice(&hw.stderr).expect("stats JSON on stderr");
                assert_eq!(stats["offload"]["order_violations"], 0);
                hw_matches += stats["offload"]["matched_hw"].as_u64().unwrap_or(0);
            }
        }
    }
    assert!(hw_matches > 0, "no match was made in hardware");
}

#[test]
fn hw_replay_reports_bad_lines_like_the_software_replay() {
    for t in [
        "post r1 comm=0 src=1 tag=2\npost r1 comm=0 src=1 tag=2\n",
        "arrive m1 comm=0 src=* tag=1\n",
        "cancel r9\n",
        "post r1 comm=0 src=0 tag=0\nbogus\n",
    ] {
        let sw = run(&["replay", "-"], t);
        let hw = run(&["replay", "--hw-tags", "4", "-"], t);
        assert_eq!(hw.stdout, sw.stdout, "{t}");
        assert_eq!(hw.stderr, sw.stderr, "{t}");
        assert_eq!(hw.status.code(), Some(1));
    }
}

#[test]
fn m1_m2_b1_b2_trace() {
    // Posts race with arrivals; with one tag and any timing the matches are the
    // software engine's.
    let t = "arrive m1 comm=0 src=0 tag=1\npost b1 comm=0 src=0 tag=1\n\
             arrive m2 comm=0 src=0 tag=1\npost b2 comm=0 src=0 tag=1\n";
    for seed in 0..8 {
        let s = seed.to_string();
        let o = run(&["replay", "--hw-tags", "1", "--seed", &s, "-"], t);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "match b1 m1\nmatch b2 m2\nend posted=0 unexpected=0\n"
        );
    }
}

#[test]
fn bench_match_hw_tags_adds_offload_counters() {
    let o = run(
        &[
            "bench",
            "match",
            "--workload",
            "posted-exact",
            "--depth",
            "32",
            "--hw-tags",
            "8",
            "--json",
        ],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    for k in [
        "workload",
        "depth",
        "ops",
        "ns_per_op",
        "p50_ns",
        "p99_ns",
        "bytes_per_posted",
        "bytes_per_unexpected",
    ] {
        assert!(j.get(k).is_some(), "missing {k}: {j}");
    }
    assert_eq!(j["hw_tags"], 8);
    let c = &j["offload"];
    assert_eq!(c["offloaded"], 8);
    assert_eq!(c["matched_hw"], 8);
    assert_eq!(c["matched_sw"], 24);
    assert_eq!(c["blocked_tags_full"], 24);
    assert_eq!(c["order_violations"], 0);
}

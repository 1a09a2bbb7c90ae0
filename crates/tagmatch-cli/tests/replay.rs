//! Black-box tests of `tagmatch replay` and `tagmatch bench match`: traces in, exact event
//! lines out; bad lines exit 1 naming the line.

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

/// Replays `trace` from stdin; it must succeed; returns the stdout lines.
fn replay(trace: &str) -> Vec<String> {
    let o = run(&["replay", "-"], trace);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "status {:?}: {err}", o.status);
    assert!(err.is_empty(), "{err}");
    String::from_utf8(o.stdout)
        .expect("utf8")
        .lines()
        .map(str::to_string)
        .collect()
}

/// Replays `trace`; it must fail with status 1; returns (stdout lines, stderr).
fn replay_fails(trace: &str) -> (Vec<String>, String) {
    let o = run(&["replay", "-"], trace);
    assert_eq!(o.status.code(), Some(1), "{:?}", o);
    let out = String::from_utf8(o.stdout).expect("utf8");
    (
        out.lines().map(str::to_string).collect(),
        String::from_utf8(o.stderr).expect("utf8"),
    )
}

#[test]
fn posting_order_arrival_order_and_wildcards() {
    let trace = "\
# two receives that both match (0,1,7): the earlier-posted one wins
post r1 comm=0 src=* tag=7
post r2 comm=0 src=1 tag=*
arrive m1 comm=0 src=1 tag=7
arrive m2 comm=0 src=1 tag=7
# unexpected messages are taken in arrival order by every kind of receive
arrive m3 comm=0 src=2 tag=9
arrive m4 comm=0 src=3 tag=9
arrive m5 comm=0 src=3 tag=8
post r3 comm=0 src=3 tag=*     # earliest from src 3 is m4
post r4 comm=0 src=* tag=*     # earliest overall is m3
post r5 comm=0 src=* tag=8
post r6 comm=0 src=* tag=*     # nothing left: posted
";
    assert_eq!(
        replay(trace),
        [
            "match r1 m1",
            "match r2 m2",
            "match r3 m4",
            "match r4 m3",
            "match r5 m5",
            "end posted=1 unexpected=0",
        ]
    );
}

#[test]
fn communicators_are_separate_and_non_overtaking_holds() {
    let out = replay(
        "arrive a comm=1 src=0 tag=1\n\
         arrive b comm=2 src=0 tag=1\n\
         arrive c comm=1 src=0 tag=1\n\
         post x comm=2 src=0 tag=1\n\
         post y comm=1 src=* tag=1\n\
         post z comm=1 src=0 tag=1\n\
         post w comm=1 src=0 tag=1\n",
    );
    assert_eq!(
        out,
        [
            "match x b",
            "match y a",
            "match z c",
            "end posted=1 unexpected=0"
        ]
    );
}

#[test]
fn probe_mprobe_mrecv_cancel() {
    let out = replay(
        "probe p0 comm=0 src=* tag=*\n\
         arrive m1 comm=0 src=4 tag=2\n\
         arrive m2 comm=0 src=4 tag=3\n\
         probe p1 comm=0 src=4 tag=*\n\
         probe p2 comm=0 src=4 tag=*\n\
         mprobe p3 comm=0 src=* tag=*\n\
         probe p4 comm=0 src=* tag=*\n\
         mprobe p5 comm=0 src=* tag=2\n\
         post r1 comm=0 src=* tag=*\n\
         post r2 comm=0 src=* tag=*\n\
         mrecv r3 p3\n\
         cancel r2\n\
         cancel r1\n\
         cancel r2\n",
    );
    assert_eq!(
        out,
        [
            "probe p0 none",
            "probe p1 m1",
            "probe p2 m1",
            "mprobe p3 m1",
            "probe p4 m2",
            "mprobe p5 none",
            "match r1 m2",
            "match r3 m1",
            "cancel r2 ok",
            "cancel r1 failed",
            "cancel r2 failed",
            "end posted=0 unexpected=0",
        ]
    );
}

#[test]
fn claimed_messages_are_not_counted_unexpected() {
    let out = replay(
        "arrive m comm=0 src=0 tag=0\nmprobe p comm=0 src=0 tag=0\narrive n comm=0 src=0 tag=1\n",
    );
    assert_eq!(out, ["mprobe p m", "end posted=0 unexpected=1"]);
}

#[test]
fn empty_trace_and_comments() {
    assert_eq!(replay(""), ["end posted=0 unexpected=0"]);
    assert_eq!(
        replay("# only a comment\n\n   \t\n"),
        ["end posted=0 unexpected=0"]
    );
}

#[test]
fn trace_from_a_file() {
    let path = std::env::temp_dir().join(format!("tagmatch-replay-{}.trace", std::process::id()));
    std::fs::write(
        &path,
        "post r comm=0 src=1 tag=2\narrive m comm=0 src=1 tag=2\n",
    )
    .expect("write");
    let o = run(&["replay", path.to_str().expect("path")], "");
    let _ = std::fs::remove_file(&path);
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8(o.stdout).expect("utf8"),
        "match r m\nend posted=0 unexpected=0\n"
    );
}

#[test]
fn bad_lines_exit_1_with_line_number() {
    let cases: &[(&str, usize, &str)] = &[
        ("bogus r1", 1, "unknown operation"),
        ("post r1 comm=0 src=*", 1, "missing field tag"),
        ("# c\npost r1 comm=0 src=* tag=-3", 2, "non-negative"),
        ("arrive m1 comm=0 src=* tag=1", 1, "definite source"),
        ("arrive m1 comm=x src=0 tag=1", 1, "comm=x"),
        ("post r1 comm=0 src=0 tag=1 color=red", 1, "unknown field"),
        (
            "post r1 comm=0 src=0 tag=1\npost r1 comm=0 src=0 tag=1",
            2,
            "already used",
        ),
        (
            "arrive m comm=0 src=0 tag=1\narrive m comm=0 src=0 tag=1",
            2,
            "already used",
        ),
        ("\n\ncancel nope", 3, "never posted"),
        ("mrecv r1 p9", 1, "never mprobed"),
        (
            "mprobe p comm=0 src=0 tag=0\nmrecv r p",
            2,
            "no claimed message",
        ),
        ("post", 1, "missing identifier"),
        (
            "post comm=0 src=1 tag=2",
            1,
            "missing identifier (found the field \"comm=0\"",
        ),
        ("arrive comm=0 src=1 tag=2", 1, "arrive: missing identifier"),
        ("probe src=* comm=0 tag=2", 1, "probe: missing identifier"),
        ("mprobe tag=2 comm=0 src=1", 1, "mprobe: missing identifier"),
        ("post r comm=0 src=+1 tag=2", 1, "src=+1"),
        ("arrive m comm=+0 src=1 tag=2", 1, "comm=+0"),
        ("post r comm=0 src=1 tag=+2", 1, "tag=+2"),
        ("post r comm= src=1 tag=2", 1, "comm=: expected"),
        ("cancel r extra", 1, "unexpected field"),
    ];
    for (trace, line, what) in cases {
        let (_, err) = replay_fails(trace);
        assert!(
            err.starts_with(&format!("tagmatch: replay: line {line}: ")),
            "{trace:?}: {err}"
        );
        assert!(err.contains(what), "{trace:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn lines_before_a_bad_line_are_printed() {
    let (out, err) = replay_fails("post r comm=0 src=0 tag=0\narrive m comm=0 src=0 tag=0\noops\n");
    assert_eq!(out, ["match r m"]);
    assert!(err.contains("line 3"));
}

#[test]
fn stats_prints_counters_json_on_stderr() {
    let o = run(
        &["replay", "-", "--stats"],
        "post r comm=0 src=0 tag=0\narrive m comm=0 src=0 tag=0\narrive n comm=0 src=0 tag=1\n",
    );
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stderr).expect("stderr is JSON");
    assert_eq!(v["posted_depth"], 0);
    assert_eq!(v["unexpected_depth"], 1);
    assert_eq!(v["hits"], 1);
    assert_eq!(v["misses"], 2);
    assert!(v["match_attempts"].as_u64().is_some());
}

#[test]
fn bench_match_json_has_the_documented_fields() {
    let o = run(
        &[
            "bench",
            "match",
            "--workload",
            "unexpected-any-source",
            "--depth",
            "8",
            "--json",
        ],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "workload",
            "depth",
            "ops",
            "ns_per_op",
            "p50_ns",
            "p99_ns",
            "bytes_per_posted",
            "bytes_per_unexpected"
        ]
    );
    assert_eq!(v["workload"], "unexpected-any-source");
    assert_eq!(v["depth"], 8);
    assert_eq!(v["ops"], 8);
    assert!(v["bytes_per_posted"].is_null());
    assert!(v["bytes_per_unexpected"].as_f64().is_some());
}

#[test]
fn bench_match_runs_the_hash_floor_on_exact_workloads_only() {
    for w in [
        "posted-exact",
        "unexpected-exact",
        "many-peers",
        "cancel-mix",
    ] {
        let args = [
            "bench",
            "match",
            "--workload",
            w,
            "--depth",
            "16",
            "--engine",
            "hash-floor",
            "--json",
        ];
        let o = run(&args, "");
        assert!(
            o.status.success(),
            "{w}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
        assert_eq!(v["engine"], "hash-floor");
        assert_eq!(v["workload"], w);
        assert!(v["ns_per_op"].as_f64().is_some_and(|x| x > 0.0));
    }
    let o = run(
        &[
            "bench",
            "match",
            "--workload",
            "unexpected-any-source",
            "--depth",
            "16",
            "--engine",
            "hash-floor",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("exact workloads only") && e.contains("not unexpected-any-source"),
        "{e}"
    );
}

#[test]
fn bench_match_runs_every_baseline_on_the_same_workload() {
    for engine in ["ucx-like", "ob1-like", "linear"] {
        let o = run(
            &[
                "bench",
                "match",
                "--workload",
                "unexpected-any-tag",
                "--depth",
                "16",
                "--engine",
                engine,
                "--json",
            ],
            "",
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
        assert_eq!(v["engine"], engine);
        assert_eq!(v["ops"], 16);
        assert!(v["ns_per_op"].as_f64().is_some_and(|x| x > 0.0));
        assert!(v["bytes_per_unexpected"].as_f64().is_some_and(|x| x > 0.0));
    }
}

#[test]
fn bench_match_eager_wildcard_lists_is_reported_and_keeps_the_lists_memory() {
    let run_with = |eager: bool| {
        let mut args = vec![
            "bench",
            "match",
            "--workload",
            "unexpected-any-source",
            "--depth",
            "4096",
            "--json",
        ];
        if eager {
            args.push("--eager-wildcard-lists");
        }
        let o = run(&args, "");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).expect("JSON")
    };
    let (lazy, eager) = (run_with(false), run_with(true));
    assert!(lazy.get("eager_wildcard_lists").is_none());
    assert_eq!(eager["eager_wildcard_lists"], true);
    // At the end of set-up the lazy engine holds one index of the three.
    let (l, e) = (
        lazy["bytes_per_unexpected"].as_f64().unwrap(),
        eager["bytes_per_unexpected"].as_f64().unwrap(),
    );
    assert!(l < e, "lazy {l} B, eager {e} B per unexpected message");
}

#[test]
fn bench_match_rejects_bad_arguments() {
    for args in [
        &["bench", "match", "--workload", "nope", "--depth", "4"][..],
        &[
            "bench",
            "match",
            "--workload",
            "posted-exact",
            "--depth",
            "0",
        ][..],
        &[
            "bench",
            "match",
            "--workload",
            "wildcard-mix",
            "--depth",
            "4",
            "--wildcard-fraction",
            "2",
        ][..],
        &[
            "bench",
            "match",
            "--workload",
            "posted-exact",
            "--depth",
            "4",
            "--engine",
            "mpich",
        ][..],
        &[
            "bench",
            "match",
            "--workload",
            "posted-exact",
            "--depth",
            "4",
            "--engine",
            "ucx-like",
            "--hw-tags",
            "8",
        ][..],
    ] {
        let o = run(args, "");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).starts_with("tagmatch: bench match: "));
    }
    // Options the workload does not use are refused, naming the option and workload.
    for (args, what) in [
        (
            &["--workload", "posted-exact", "--depth", "4", "--peers", "3"][..],
            "--peers applies to wildcard-mix and many-peers only, not posted-exact",
        ),
        (
            &[
                "--workload",
                "cancel-mix",
                "--depth",
                "4",
                "--wildcard-fraction",
                "0.5",
            ][..],
            "--wildcard-fraction applies to wildcard-mix only, not cancel-mix",
        ),
        (
            &[
                "--workload",
                "many-peers",
                "--depth",
                "4",
                "--wildcard-fraction",
                "0.1",
            ][..],
            "--wildcard-fraction applies to wildcard-mix only, not many-peers",
        ),
    ] {
        let mut all = vec!["bench", "match"];
        all.extend_from_slice(args);
        let o = run(&all, "");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(what), "{args:?}: {err}");
    }
    // ... and accepted where they apply.
    for args in [
        &[
            "--workload",
            "many-peers",
            "--depth",
            "2",
            "--peers",
            "3",
            "--json",
        ][..],
        &[
            "--workload",
            "wildcard-mix",
            "--depth",
            "8",
            "--peers",
            "2",
            "--wildcard-fraction",
            "0.5",
            "--json",
        ][..],
    ] {
        let mut all = vec!["bench", "match"];
        all.extend_from_slice(args);
        let o = run(&all, "");
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// `--cpu`: a CPU number or `any`; a CPU the process may not run on, or not a number, is
/// refused with what was wrong (Linux, where the measurement pins itself).
#[test]
fn bench_match_cpu_option() {
    // `bench match` at depth 2 with `extra`; its exit code and standard error.
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "match",
            "--workload",
            "posted-exact",
            "--depth",
            "2",
        ];
        args.extend_from_slice(extra);
        let o = run(&args, "");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(bench(&["--cpu", "any"]).0, Some(0));
    let (code, err) = bench(&["--cpu", "seven"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--cpu \"seven\": expected a CPU number or any"),
        "{err}"
    );
    #[cfg(target_os = "linux")]
    {
        // The default: the CPU it starts on.
        assert_eq!(bench(&[]).0, Some(0));
        let (code, err) = bench(&["--cpu", "100000"]);
        assert_eq!(code, Some(1));
        assert!(
            err.contains("--cpu 100000: not a CPU this process may run on (allowed: "),
            "{err}"
        );
    }
}

//! `cargo xtask bench-peers`: `tagmatch perf` side by side with UCX (`ucx_perftest`,
//! Debian `ucx-utils`) and libfabric (`fi_pingpong`, Debian `libfabric-bin`) on this
//! machine, in this session, on loopback only (127.0.0.1), and the ratios.
//!
//! | row | tagmatch | peer |
//! |---|---|---|
//! | in-process 8 B latency, one endpoint sending to itself (like-for-like with UCX self: one worker) | `perf client --transport self --test tag_lat` | `UCX_TLS=self ucx_perftest -l -t tag_lat` |
//! | the same, average one-way latency (the run's time over its iterations: `overall_lat`) | the same run | the same run |
//! | in-process 8 B message rate, one endpoint | `--transport self --test tag_msgrate` | `UCX_TLS=self ucx_perftest -l -t tag_bw -s 8` |
//! | the same two rows between two endpoints (the cross-thread fast path) | `--transport mem` | the same UCX self figures |
//! | loopback 8 B latency | UDP `perf server` + `perf client --test tag_lat` | `UCX_TLS=tcp ucx_perftest`, `fi_pingpong -p "tcp;ofi_rxm" -e rdm -m tagged` |
//! | loopback 1 MiB bandwidth | `--test tag_bw --size 1m` | `UCX_TLS=tcp ucx_perftest -t tag_bw` |
//! | loopback 1 MiB ping-pong bandwidth | `--test tag_lat --size 1m` | `fi_pingpong -S 1048576` |
//!
//! Debian ships `fi_pingpong` but not the fabtests (`fi_rdm_tagged_bw`), so the
//! libfabric bandwidth row is ping-pong bandwidth, compared with tagmatch's ping-pong
//! bandwidth. Latencies are one-way (half the round trip), as `ucx_perftest` and
//! `fi_pingpong` print them; MB is 10^6 bytes (UCX's MB/s, which are 2^20 bytes, are
//! converted). The in-process rows pin both tools to the same CPU (the first this process
//! may run on: `perf client --cpu`, `ucx_perftest -c`); the loopback rows' two processes
//! are not pinned. Each row also says whether it meets issue #8's target (2× for the
//! in-process rows on one endpoint, level for the loopback rows; the two-endpoint rows
//! have none), and the summary of `--runs N` in how many rounds. Not part of `cargo xtask
//! ci`: it measures, it does not check.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use crate::apt::ensure_apt;
use crate::cmd::Cmd;
use crate::Result;

/// One measured figure.
struct Figure {
    what: &'static str,
    unit: &'static str,
    higher_is_better: bool,
    tagmatch: f64,
    peers: Vec<(&'static str, Option<f64>)>,
    /// Issue #8's target for the row, as a ratio (tagmatch better when > 1): 2× for the
    /// in-process rows on one endpoint (UCX self is one worker), level for the loopback
    /// rows; `None` for the rows that only show more (two endpoints).
    target: Option<f64>,
}

fn spawn(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<Child> {
    let mut c = Command::new(program);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    Ok(c.spawn().map_err(|e| format!("spawning {program}: {e}"))?)
}

fn output(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String> {
    let mut c = Command::new(program);
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().map_err(|e| format!("running {program}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{program} {}: {}\n{}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn finish(mut c: Child) {
    // The peer servers exit after one client; give them a moment, then make sure.
    for _ in 0..50 {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        sleep(Duration::from_millis(100));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// `ucx_perftest -f -v` prints a CSV header and one line:
/// iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
fn ucx_csv(out: &str) -> Result<Vec<f64>> {
    let line = out
        .lines()
        .rev()
        .find(|l| {
            l.split(',').count() == 8 && l.split(',').all(|f| f.trim().parse::<f64>().is_ok())
        })
        .ok_or_else(|| format!("no result line in ucx_perftest output:\n{out}"))?;
    Ok(line
        .split(',')
        .map(|f| f.trim().parse().unwrap_or(0.0))
        .collect())
}

fn ucx_self(test: &str, size: &str, iters: &str, cpu: &str) -> Result<Vec<f64>> {
    let out = output(
        "ucx_perftest",
        &[
            "-l", "-t", test, "-s", size, "-n", iters, "-w", "10000", "-f", "-v", "-c", cpu,
        ],
        &[("UCX_TLS", "self")],
    )?;
    ucx_csv(&out)
}

fn ucx_tcp(test: &str, size: &str, iters: &str, port: &str) -> Result<Vec<f64>> {
    let env = [("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "lo")];
    let server = spawn("ucx_perftest", &["-p", port], &env)?;
    sleep(Duration::from_millis(700));
    let out = output(
        "ucx_perftest",
        &[
            "127.0.0.1",
            "-p",
            port,
            "-t",
            test,
            "-s",
            size,
            "-n",
            iters,
            "-w",
            "100",
            "-f",
            "-v",
        ],
        &env,
    );
    finish(server);
    ucx_csv(&out?)
}

/// `fi_pingpong` prints `bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec`.
fn fi_pingpong(size: &str, iters: &str, port: &str) -> Result<(f64, f64)> {
    let common = [
        "-p",
        "tcp;ofi_rxm",
        "-e",
        "rdm",
        "-m",
        "tagged",
        "-S",
        size,
        "-I",
        iters,
    ];
    let mut sargs = common.to_vec();
    sargs.extend(["-B", port]);
    let server = spawn("fi_pingpong", &sargs, &[])?;
    sleep(Duration::from_millis(700));
    let mut cargs = common.to_vec();
    cargs.extend(["-P", port, "127.0.0.1"]);
    let out = output("fi_pingpong", &cargs, &[]);
    finish(server);
    let out = out?;
    let line = out
        .lines()
        .rev()
        .find(|l| l.split_whitespace().count() == 8 && !l.starts_with("bytes"))
        .ok_or_else(|| format!("no result line in fi_pingpong output:\n{out}"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let mbs: f64 = f[5]
        .parse()
        .map_err(|_| format!("fi_pingpong MB/sec {:?}", f[5]))?;
    let usec: f64 = f[6]
        .parse()
        .map_err(|_| format!("fi_pingpong usec {:?}", f[6]))?;
    Ok((usec, mbs))
}

/// One JSON row of `tagmatch perf --json`, fields by name (xtask has no JSON parser).
fn field(json: &str, name: &str) -> Result<f64> {
    let key = format!("\"{name}\":");
    let at = json
        .find(&key)
        .ok_or_else(|| format!("no {name} in {json}"))?
        + key.len();
    let rest = &json[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Ok(rest[..end]
        .trim()
        .parse()
        .map_err(|_| format!("{name} in {json}"))?)
}

/// `tagmatch perf client --transport <transport>` (`self`: one endpoint; `mem`: two).
fn tagmatch_inproc(
    bin: &Path,
    transport: &str,
    test: &str,
    size: &str,
    iters: &str,
    cpu: &str,
) -> Result<String> {
    output(
        &bin.to_string_lossy(),
        &[
            "perf",
            "client",
            "--transport",
            transport,
            "--test",
            test,
            "--size",
            size,
            "--iters",
            iters,
            "--cpu",
            cpu,
            "--json",
        ],
        &[],
    )
}

/// The first CPU this process may run on (`Cpus_allowed_list` of /proc/self/status;
/// "0" where it cannot be read): the in-process rows pin both sides to it (`--cpu`,
/// `ucx_perftest -c`), each run single-threaded on the same core.
fn first_cpu() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|l| {
                    let n: String = l.trim().chars().take_while(char::is_ascii_digit).collect();
                    (!n.is_empty()).then_some(n)
                })
        })
        .unwrap_or_else(|| "0".to_owned())
}

fn tagmatch_udp(bin: &Path, test: &str, size: &str, iters: &str) -> Result<String> {
    let b = bin.to_string_lossy().into_owned();
    let mut server = spawn(&b, &["perf", "server", "--bind", "127.0.0.1:0"], &[])?;
    let mut line = String::new();
    if let Some(out) = server.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    let addr = line.split_whitespace().last().unwrap_or("").to_owned();
    let out = output(
        &b,
        &[
            "perf", "client", &addr, "--test", test, "--size", size, "--iters", iters, "--json",
        ],
        &[],
    );
    finish(server);
    out
}

/// Runs the comparison and prints the table (markdown, for docs/benchmarks.md).
/// Builds the `tagmatch` binary in release mode; its path.
pub(crate) fn release_cli(root: &Path) -> Result<std::path::PathBuf> {
    Cmd::cargo()
        .args(["build", "--release", "-p", "tagmatch-cli"])
        .current_dir(root)
        .run()?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join("release").join("tagmatch"))
}

/// `--runs N`: 1 to 100 rounds.
pub fn parse_runs(s: &str) -> Result<usize> {
    match s.parse::<usize>() {
        Ok(n) if (1..=100).contains(&n) => Ok(n),
        _ => Err(format!("--runs {s:?}: expected a number of rounds from 1 to 100").into()),
    }
}

/// Measures `runs` rounds (each printed as it ends) and, for more than one, prints the
/// summary: the machine's speed moves from minute to minute, so one round says little.
pub fn run(root: &Path, runs: usize) -> Result<()> {
    ensure_apt(&["ucx-utils", "libfabric-bin"])?;
    let bin = release_cli(root)?;
    let mut rounds = Vec::with_capacity(runs);
    for i in 0..runs {
        if runs > 1 {
            println!("bench-peers: round {} of {runs}", i + 1);
        }
        let figures = measure(&bin)?;
        print_table(&figures);
        rounds.push(figures);
    }
    if runs > 1 {
        println!();
        println!("Summary of {runs} rounds (medians; ratio > 1: tagmatch better):");
        println!();
        println!("| figure | tagmatch median | peer | peer median | ratio min–max | tagmatch level or better | issue #8 target: rounds meeting it |");
        println!("|---|---|---|---|---|---|---|");
        for row in summarize(&rounds) {
            println!(
                "| {} | {:.3} {} | {} | {} | {} | {} of {} | {} |",
                row.what,
                row.tagmatch,
                row.unit,
                row.peer,
                row.peer_median
                    .map_or("failed".to_owned(), |p| format!("{p:.3} {}", row.unit)),
                row.ratios
                    .map_or("-".to_owned(), |(lo, hi)| format!("{lo:.2}–{hi:.2}×")),
                row.met,
                row.compared,
                row.target.map_or("-".to_owned(), |(t, n)| format!(
                    "≥ {t}×: {n} of {}",
                    row.compared
                )),
            );
        }
    }
    Ok(())
}

/// One row of the summary of several rounds.
#[derive(Debug, PartialEq)]
struct Summary {
    what: &'static str,
    unit: &'static str,
    peer: &'static str,
    /// Median of tagmatch's figures.
    tagmatch: f64,
    /// Median of the peer's figures in the rounds it ran (`None`: it failed in all).
    peer_median: Option<f64>,
    /// Smallest and largest ratio (tagmatch better when > 1) over the compared rounds.
    ratios: Option<(f64, f64)>,
    /// Rounds in which tagmatch was level or better, of the rounds compared.
    met: usize,
    compared: usize,
    /// The row's target ([`Figure::target`]) and the rounds that met it.
    target: Option<(f64, usize)>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The ratio of a round (tagmatch better when > 1), if both figures are usable.
fn ratio(f: &Figure, peer: Option<f64>) -> Option<f64> {
    match peer {
        Some(p) if p > 0.0 && f.tagmatch > 0.0 => Some(if f.higher_is_better {
            f.tagmatch / p
        } else {
            p / f.tagmatch
        }),
        _ => None,
    }
}

/// Per figure and peer, over rounds with the same figures in the same order.
fn summarize(rounds: &[Vec<Figure>]) -> Vec<Summary> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, f) in first.iter().enumerate() {
        for (j, (peer, _)) in f.peers.iter().enumerate() {
            let mut ours: Vec<f64> = rounds.iter().map(|r| r[i].tagmatch).collect();
            let mut theirs: Vec<f64> = rounds.iter().filter_map(|r| r[i].peers[j].1).collect();
            let rs: Vec<f64> = rounds
                .iter()
                .filter_map(|r| ratio(&r[i], r[i].peers[j].1))
                .collect();
            out.push(Summary {
                what: f.what,
                unit: f.unit,
                peer,
                tagmatch: median(&mut ours),
                peer_median: (!theirs.is_empty()).then(|| median(&mut theirs)),
                ratios: rs.iter().copied().fold(None, |m, r| {
                    Some(m.map_or((r, r), |(lo, hi): (f64, f64)| (lo.min(r), hi.max(r))))
                }),
                met: rs.iter().filter(|&&r| r >= 1.0).count(),
                compared: rs.len(),
                target: f
                    .target
                    .map(|t| (t, rs.iter().filter(|&&r| r >= t).count())),
            });
        }
    }
    out
}

/// One round: every figure of the table.
fn measure(bin: &Path) -> Result<Vec<Figure>> {
    let bin = bin.to_path_buf();
    const UCX_MB: f64 = 1.048_576; // UCX's MB/s are 2^20 B/s

    let cpu = first_cpu();
    println!("bench-peers: in-process (CPU {cpu}) …");
    let s_lat = tagmatch_inproc(&bin, "self", "tag_lat", "8", "1000000", &cpu)?;
    let s_rate = tagmatch_inproc(&bin, "self", "tag_msgrate", "8", "1000000", &cpu)?;
    let t_lat = tagmatch_inproc(&bin, "mem", "tag_lat", "8", "100000", &cpu)?;
    let t_rate = tagmatch_inproc(&bin, "mem", "tag_msgrate", "8", "200000", &cpu)?;
    let u_lat = ucx_self("tag_lat", "8", "1000000", &cpu);
    let u_rate = ucx_self("tag_bw", "8", "1000000", &cpu);

    println!("bench-peers: loopback …");
    let tu_lat = tagmatch_udp(&bin, "tag_lat", "8", "20000")?;
    let tu_bw = tagmatch_udp(&bin, "tag_bw", "1m", "2000")?;
    let tu_pp = tagmatch_udp(&bin, "tag_lat", "1m", "500")?;
    let uc_lat = ucx_tcp("tag_lat", "8", "20000", "13411");
    let uc_bw = ucx_tcp("tag_bw", "1048576", "2000", "13412");
    let fi_lat = fi_pingpong("8", "20000", "47611");
    let fi_pp = fi_pingpong("1048576", "500", "47612");

    let ok = |r: &Result<Vec<f64>>, i: usize| r.as_ref().ok().and_then(|v| v.get(i).copied());
    let figures = vec![
        Figure {
            what: "in-process tagged 8 B latency, p50 one-way, one endpoint (`--transport self`)",
            unit: "µs",
            higher_is_better: false,
            tagmatch: field(&s_lat, "lat_p50_us")?,
            peers: vec![("UCX self", ok(&u_lat, 1))],
            target: Some(2.0),
        },
        Figure {
            // The time of the whole run over its iterations (ucx_perftest's `overall_lat`;
            // its `avg_lat` is since its last report, once a second):
            // on a machine whose time-stamp counter steps in 10 ns, the p50s of 10-30 ns
            // round trips fall in the counter's bins, the averages do not.
            what:
                "in-process tagged 8 B latency, average one-way, one endpoint (`--transport self`)",
            unit: "µs",
            higher_is_better: false,
            tagmatch: field(&s_lat, "lat_avg_us")?,
            peers: vec![("UCX self", ok(&u_lat, 3))],
            target: Some(2.0),
        },
        Figure {
            what: "in-process tagged 8 B message rate, one endpoint (`--transport self`)",
            unit: "Mmsg/s",
            higher_is_better: true,
            tagmatch: field(&s_rate, "msgrate_mmsgs")?,
            peers: vec![("UCX self", ok(&u_rate, 7).map(|v| v / 1e6))],
            target: Some(2.0),
        },
        Figure {
            what: "in-process tagged 8 B latency, p50 one-way, two endpoints (`--transport mem`)",
            unit: "µs",
            higher_is_better: false,
            tagmatch: field(&t_lat, "lat_p50_us")?,
            peers: vec![("UCX self", ok(&u_lat, 1))],
            target: None,
        },
        Figure {
            what: "in-process tagged 8 B message rate, two endpoints (`--transport mem`)",
            unit: "Mmsg/s",
            higher_is_better: true,
            tagmatch: field(&t_rate, "msgrate_mmsgs")?,
            peers: vec![("UCX self", ok(&u_rate, 7).map(|v| v / 1e6))],
            target: None,
        },
        Figure {
            what: "loopback tagged 8 B latency, one-way",
            unit: "µs",
            higher_is_better: false,
            tagmatch: field(&tu_lat, "lat_p50_us")?,
            peers: vec![
                ("UCX tcp", ok(&uc_lat, 1)),
                ("libfabric tcp;ofi_rxm", fi_lat.as_ref().ok().map(|x| x.0)),
            ],
            target: Some(1.0),
        },
        Figure {
            what: "loopback tagged 1 MiB streaming bandwidth",
            unit: "MB/s",
            higher_is_better: true,
            tagmatch: field(&tu_bw, "bw_mbs")?,
            peers: vec![("UCX tcp", ok(&uc_bw, 5).map(|v| v * UCX_MB))],
            target: Some(1.0),
        },
        Figure {
            what: "loopback tagged 1 MiB ping-pong bandwidth",
            unit: "MB/s",
            higher_is_better: true,
            tagmatch: field(&tu_pp, "bw_mbs")?,
            peers: vec![(
                "libfabric tcp;ofi_rxm",
                fi_pp.as_ref().ok().map(|x| x.1 * 1.0),
            )],
            target: Some(1.0),
        },
    ];
    for (name, e) in [
        ("UCX self tag_lat", u_lat.as_ref().err()),
        ("UCX self tag_bw", u_rate.as_ref().err()),
        ("UCX tcp tag_lat", uc_lat.as_ref().err()),
        ("UCX tcp tag_bw", uc_bw.as_ref().err()),
    ] {
        if let Some(e) = e {
            println!("bench-peers: {name} failed: {e}");
        }
    }
    for (name, e) in [
        ("fi_pingpong 8", fi_lat.as_ref().err()),
        ("fi_pingpong 1m", fi_pp.as_ref().err()),
    ] {
        if let Some(e) = e {
            println!("bench-peers: {name} failed: {e}");
        }
    }

    Ok(figures)
}

/// Prints one round's table (markdown, for docs/benchmarks.md).
fn print_table(figures: &[Figure]) {
    println!();
    println!(
        "| figure | tagmatch | peer | peer figure | tagmatch is better by | issue #8 target |"
    );
    println!("|---|---|---|---|---|---|");
    for f in figures {
        for (peer, v) in &f.peers {
            let (pv, r) = match (v, ratio(f, *v)) {
                (Some(p), Some(r)) => (format!("{p:.3} {}", f.unit), format!("{r:.2}×")),
                _ => ("failed".to_owned(), "-".to_owned()),
            };
            let t = match (f.target, ratio(f, *v)) {
                // No target, or no peer figure to compare with this round.
                (None, _) | (Some(_), None) => "-".to_owned(),
                (Some(t), Some(r)) if r >= t => format!("≥ {t}×: met"),
                (Some(t), _) => format!("≥ {t}×: not met"),
            };
            println!(
                "| {} | {:.3} {} | {peer} | {pv} | {r} | {t} |",
                f.what, f.tagmatch, f.unit
            );
        }
    }
    println!();
    println!("(ratio > 1: tagmatch better; < 1: the peer is better)");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(ours: f64, peer: Option<f64>, higher_is_better: bool) -> Figure {
        Figure {
            what: "x",
            unit: "u",
            higher_is_better,
            tagmatch: ours,
            peers: vec![("p", peer)],
            target: Some(2.0),
        }
    }

    #[test]
    fn summary_takes_medians_ratio_ranges_and_counts_rounds_met() {
        // Latency (lower is better): ratios 2.0, 0.5, 1.0; the failed peer round is not
        // compared.
        let rounds = vec![
            vec![fig(1.0, Some(2.0), false)],
            vec![fig(4.0, Some(2.0), false)],
            vec![fig(2.0, Some(2.0), false)],
            vec![fig(3.0, None, false)],
        ];
        let s = summarize(&rounds);
        assert_eq!(
            s,
            vec![Summary {
                what: "x",
                unit: "u",
                peer: "p",
                tagmatch: 2.5,
                peer_median: Some(2.0),
                ratios: Some((0.5, 2.0)),
                met: 2,
                compared: 3,
                target: Some((2.0, 1)),
            }]
        );
        // Bandwidth (higher is better), every peer round failed.
        let s = summarize(&[vec![fig(5.0, None, true)], vec![fig(7.0, None, true)]]);
        assert_eq!(
            (s[0].tagmatch, s[0].peer_median, s[0].ratios),
            (6.0, None, None)
        );
        assert_eq!((s[0].met, s[0].compared), (0, 0));
        assert!(summarize(&[]).is_empty());
    }

    #[test]
    fn runs_are_checked() {
        assert_eq!(parse_runs("6").unwrap(), 6);
        for bad in ["0", "101", "x", "-1"] {
            assert!(
                parse_runs(bad).unwrap_err().to_string().contains("--runs"),
                "{bad}"
            );
        }
    }

    #[test]
    fn parses_peer_output() {
        let ucx = "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n100000,0.020,0.026,0.026,298.48,298.48,39122321,39122321\n";
        assert_eq!(ucx_csv(ucx).unwrap()[1], 0.020);
        assert!(ucx_csv("nothing").is_err());
        let j = r#"{"test":"tag_lat","size":8,"lat_p50_us":1.5,"bw_mbs":5.0}"#;
        assert_eq!(field(j, "lat_p50_us").unwrap(), 1.5);
        assert_eq!(field(j, "bw_mbs").unwrap(), 5.0);
        assert!(field(j, "nope").is_err());
    }
}

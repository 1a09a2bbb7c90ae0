//! `cargo xtask bench-match`: the seven matching workloads on the engine and on the
//! baselines of `tagmatch_engine::baseline` (UCX's, ob1's and MPICH's schemes), in one
//! session, as a markdown table of ns per operation with the ratio to the best baseline
//! (> 1: tagmatch faster). Each cell is one `tagmatch bench match --engine E --workload W
//! --depth D --json` run (its median repetition). Not part of `cargo xtask ci`: it
//! measures, it does not check.
//!
//! `--depths 64,1024,16384` (default) chooses the depths; the baselines' wildcard and
//! per-peer searches are linear, so each step of depth ×16 costs them ×256 in time
//! (16,384 takes a few minutes in all; 65,536 about an hour).

use std::path::Path;
use std::process::Command;

use crate::Result;

const WORKLOADS: [&str; 7] = [
    "posted-exact",
    "unexpected-exact",
    "unexpected-any-source",
    "unexpected-any-tag",
    "wildcard-mix",
    "many-peers",
    "cancel-mix",
];
const BASELINES: [&str; 3] = ["ucx-like", "ob1-like", "linear"];

/// The number after `"key":` in a flat JSON object, if it is one.
fn json_number(json: &str, key: &str) -> Option<f64> {
    let pat = format!("\"{key}\":");
    let rest = &json[json.find(&pat)? + pat.len()..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// ns per operation of one run.
fn ns_per_op(bin: &Path, engine: &str, workload: &str, depth: usize) -> Result<f64> {
    let d = depth.to_string();
    let args = [
        "bench",
        "match",
        "--engine",
        engine,
        "--workload",
        workload,
        "--depth",
        &d,
        "--json",
    ];
    let o = Command::new(bin)
        .args(args)
        .output()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    if !o.status.success() {
        return Err(format!(
            "tagmatch {}: {}: {}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )
        .into());
    }
    let out = String::from_utf8_lossy(&o.stdout);
    json_number(&out, "ns_per_op")
        .ok_or_else(|| format!("tagmatch {}: no ns_per_op in {out:?}", args.join(" ")).into())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Parses `--depths a,b,c`.
pub fn parse_depths(s: &str) -> Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("--depths {s:?}: {e}"))?;
    if v.is_empty() || v.contains(&0) {
        return Err(format!("--depths {s:?}: give positive depths, e.g. 64,1024").into());
    }
    Ok(v)
}

/// Runs the comparison at `depths` and prints the table.
pub fn run(root: &Path, depths: &[usize]) -> Result<()> {
    let bin = crate::bench_peers::release_cli(root)?;
    let before = load_average();
    let mut rows = Vec::new();
    for w in WORKLOADS {
        for &d in depths {
            eprintln!("bench-match: {w} at depth {d} …");
            let t = ns_per_op(&bin, "tagmatch", w, d)?;
            let b: Vec<f64> = BASELINES
                .iter()
                .map(|e| ns_per_op(&bin, e, w, d))
                .collect::<Result<_>>()?;
            rows.push((w, d, t, b));
        }
    }
    println!("ns per operation (`tagmatch bench match --engine E --workload W --depth D`),");
    println!(
        "load average {before} before, {} after; ratio = best baseline / tagmatch (> 1: tagmatch faster)\n",
        load_average()
    );
    println!(
        "| workload | depth | tagmatch | {} | ratio |",
        BASELINES.join(" | ")
    );
    println!("|---|---|---|{}---|", "---|".repeat(BASELINES.len()));
    for (w, d, t, b) in rows {
        let best = b.iter().copied().fold(f64::INFINITY, f64::min);
        let cells: Vec<String> = b.iter().map(|x| format!("{x:.1}")).collect();
        println!(
            "| `{w}` | {d} | {t:.1} | {} | {:.2}× |",
            cells.join(" | "),
            best / t
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_numbers_from_the_bench_json() {
        let j = r#"{"workload":"posted-exact","depth":64,"ns_per_op":12.5,"p50_ns":13.0,"bytes_per_posted":48.0,"bytes_per_unexpected":null,"engine":"linear"}"#;
        assert_eq!(json_number(j, "ns_per_op"), Some(12.5));
        assert_eq!(json_number(j, "depth"), Some(64.0));
        assert_eq!(json_number(j, "bytes_per_unexpected"), None);
        assert_eq!(json_number(j, "missing"), None);
    }

    #[test]
    fn depths_are_positive_integers() {
        assert_eq!(parse_depths("64,1024").unwrap(), vec![64, 1024]);
        assert!(parse_depths("64,0").is_err());
        assert!(parse_depths("64,x").is_err());
    }
}

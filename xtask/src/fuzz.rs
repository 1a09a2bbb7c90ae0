//! The fuzz smoke stage: run every cargo-fuzz target for a fixed time.
//!
//! `fuzz/` is its own cargo workspace (it needs nightly and libFuzzer). For each target we
//! run `cargo +nightly fuzz run <target> <tmp> <fuzz/corpus/target> -- -max_total_time=N`.
//! libFuzzer reads every corpus directory it is given but writes new inputs only into the
//! *first* one, so the first is a fresh temporary directory and the committed seeds
//! (`fuzz/corpus/<target>/`) are passed second and never modified: the run leaves no files in
//! the repository except a crash artifact in `fuzz/artifacts/<target>/` when it finds one.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::ci::Outcome;
use crate::cmd::Cmd;
use crate::Result;

/// Fuzz time per target when neither `--fuzz-seconds`/`--seconds` nor the env var is given.
pub const DEFAULT_SECONDS: u64 = 60;
/// Environment variable overriding the per-target fuzz time.
pub const SECONDS_ENV: &str = "TAGMATCH_FUZZ_SECONDS";
/// libFuzzer's per-input timeout. Its default (1200 s) could eat the CI time limit on a
/// single slow input; an input that takes this long is a bug and fails the run.
const INPUT_TIMEOUT_SECS: u64 = 30;

/// What the fuzz stage runs.
pub struct FuzzConfig {
    /// The cargo-fuzz project directory (default `<workspace>/fuzz`).
    pub dir: PathBuf,
    /// `-max_total_time` per target.
    pub seconds: u64,
    /// Targets to run; empty means every target `cargo fuzz list` reports.
    pub targets: Vec<String>,
}

/// Resolves the per-target time: command-line value, else `$TAGMATCH_FUZZ_SECONDS`, else 60.
pub fn resolve_seconds(cli: Option<&str>) -> Result<u64> {
    let (raw, source) = match cli {
        Some(v) => (v.to_owned(), "--fuzz-seconds/--seconds".to_owned()),
        None => match std::env::var(SECONDS_ENV) {
            Ok(v) if !v.trim().is_empty() => (v, format!("${SECONDS_ENV}")),
            _ => return Ok(DEFAULT_SECONDS),
        },
    };
    match raw.trim().parse::<u64>() {
        // libFuzzer treats -max_total_time=0 as "no limit".
        Ok(0) => Err(format!("{source}: fuzz time must be at least 1 second").into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{source}: not a number of seconds: {raw:?}").into()),
    }
}

/// Runs the fuzz smoke stage.
pub fn run(cfg: &FuzzConfig) -> Result<Outcome> {
    let dir = &cfg.dir;
    if !dir.exists() {
        println!("no fuzz/ directory ({}): skipped", dir.display());
        return Ok(Outcome::Skipped(format!(
            "no fuzz/ directory ({})",
            dir.display()
        )));
    }
    if !dir.join("Cargo.toml").is_file() {
        return Err(format!(
            "{} exists but has no Cargo.toml, so its fuzz targets cannot be run",
            dir.display()
        )
        .into());
    }
    let dir = fs::canonicalize(dir)?;

    ensure_nightly()?;
    ensure_cargo_fuzz()?;

    let listed: Vec<String> = fuzz_cmd(&dir, "list")
        .read_stdout()?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if listed.is_empty() {
        return Err(format!(
            "`cargo fuzz list` in {} reported no fuzz targets",
            dir.display()
        )
        .into());
    }
    println!("fuzz targets: {}", listed.join(", "));

    let targets: Vec<String> = if cfg.targets.is_empty() {
        listed.clone()
    } else {
        if let Some(unknown) = cfg.targets.iter().find(|t| !listed.contains(t)) {
            return Err(format!(
                "unknown fuzz target `{unknown}`; available: {}",
                listed.join(", ")
            )
            .into());
        }
        cfg.targets.clone()
    };
    println!(
        "fuzzing {} target(s) for {} s each (about {} s plus build time)",
        targets.len(),
        cfg.seconds,
        cfg.seconds * targets.len() as u64
    );

    // Build first so that the build time shows up separately from the fuzzing time and a
    // compile error is reported as such. `run` reuses this build (same default options).
    let started = Instant::now();
    if targets.len() == listed.len() {
        fuzz_cmd(&dir, "build").run()?;
    } else {
        for target in &targets {
            fuzz_cmd(&dir, "build").arg(target).run()?;
        }
    }
    let build_secs = started.elapsed().as_secs_f64();
    println!("fuzz: build took {build_secs:.1}s");

    let mut timings = Vec::new();
    for target in &targets {
        let secs = run_target(&dir, target, cfg.seconds)?;
        timings.push((target.as_str(), secs));
    }

    println!("fuzz: summary");
    println!("  {:<28} {:>8.1}s", "(build)", build_secs);
    for (target, secs) in &timings {
        println!("  {target:<28} {secs:>8.1}s  ok");
    }
    Ok(Outcome::Ok)
}

/// Fuzzes one target; returns the wall time in seconds.
fn run_target(dir: &Path, target: &str, seconds: u64) -> Result<f64> {
    println!("-- fuzz: {target} ({seconds} s) --");
    let work = TempDir::new(&format!("tagmatch-fuzz-{target}"))?;
    let seeds = dir.join("corpus").join(target);
    let artifacts = dir.join("artifacts").join(target);
    let artifacts_existed = artifacts.exists();
    let before = list_files(&artifacts);

    let mut cmd = fuzz_cmd(dir, "run").arg(target).arg(work.path());
    if seeds.is_dir() {
        cmd = cmd.arg(&seeds);
    } else {
        println!(
            "note: no committed seed corpus at {}; starting from an empty corpus",
            seeds.display()
        );
    }
    let cmd = cmd.args([
        "--".to_owned(),
        format!("-max_total_time={seconds}"),
        format!("-timeout={INPUT_TIMEOUT_SECS}"),
        "-print_final_stats=1".to_owned(),
    ]);

    let started = Instant::now();
    let result = cmd.run();
    let secs = started.elapsed().as_secs_f64();

    if let Err(err) = result {
        let new: Vec<PathBuf> = list_files(&artifacts)
            .difference(&before)
            .cloned()
            .collect();
        let mut msg = format!("fuzz target `{target}` failed after {secs:.1}s: {err}");
        if new.is_empty() {
            msg.push_str(&format!(
                "\n  no new artifact in {} (see the output above)",
                artifacts.display()
            ));
        } else {
            for path in &new {
                msg.push_str(&format!("\n  crash artifact: {}", path.display()));
            }
            msg.push_str(&format!(
                "\n  reproduce: cd {} && cargo +nightly fuzz run {target} {}",
                dir.parent().unwrap_or(dir).display(),
                new[0].display()
            ));
        }
        return Err(msg.into());
    }

    // cargo-fuzz always creates fuzz/artifacts/<target>/; drop it again if we created it and
    // it stayed empty (and its parent likewise), so a clean run leaves no trace.
    if !artifacts_existed && list_files(&artifacts).is_empty() {
        let _ = fs::remove_dir(&artifacts);
        let _ = fs::remove_dir(dir.join("artifacts"));
    }
    println!("fuzz: {target}: ok in {secs:.1}s");
    Ok(secs)
}

/// `cargo +nightly fuzz <sub> --fuzz-dir <dir>`, run inside the fuzz directory.
fn fuzz_cmd(dir: &Path, sub: &str) -> Cmd {
    Cmd::cargo()
        .args(["+nightly", "fuzz", sub, "--fuzz-dir"])
        .arg(dir)
        .current_dir(dir)
}

/// The nightly toolchain must already be installed; it cannot be downloaded here.
fn ensure_nightly() -> Result<()> {
    let Some((status, stdout)) = Cmd::new("rustup").args(["toolchain", "list"]).probe() else {
        return Err(
            "`rustup` not found: the fuzz stage runs `cargo +nightly fuzz` and needs rustup \
             with a nightly toolchain"
                .into(),
        );
    };
    if status.success()
        && stdout
            .lines()
            .any(|l| l.trim_start().starts_with("nightly"))
    {
        return Ok(());
    }
    Err(
        "the nightly toolchain is not installed (`rustup toolchain list` shows no nightly); \
         the fuzz stage needs it for `cargo +nightly fuzz`. It cannot be downloaded here: \
         install it on the machine (`rustup toolchain install nightly`) or run with \
         `--skip fuzz`"
            .into(),
    )
}

/// Installs cargo-fuzz with `cargo install cargo-fuzz --locked` unless it already works.
fn ensure_cargo_fuzz() -> Result<()> {
    let version = || {
        Cmd::cargo()
            .args(["+nightly", "fuzz", "--version"])
            .probe()
            .filter(|(status, _)| status.success())
            .map(|(_, out)| out.trim().to_owned())
    };
    if let Some(v) = version() {
        println!("using {v}");
        return Ok(());
    }
    println!("cargo-fuzz not found: installing it with `cargo install cargo-fuzz --locked` (this takes a few minutes)");
    let started = Instant::now();
    Cmd::cargo()
        .args(["install", "cargo-fuzz", "--locked"])
        .run()?;
    println!(
        "cargo-fuzz installed in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    match version() {
        Some(v) => {
            println!("using {v}");
            Ok(())
        }
        None => Err("`cargo fuzz --version` still fails after installing cargo-fuzz".into()),
    }
}

/// Regular files directly inside `dir` (empty if it does not exist).
fn list_files(dir: &Path) -> BTreeSet<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default()
}

/// A directory under the system temp dir, removed with its contents on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(prefix: &str) -> Result<Self> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for attempt in 0..100u32 {
            let path = base.join(format!("{prefix}-{}-{nanos}-{attempt}", std::process::id()));
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(format!("cannot create {}: {e}", path.display()).into());
                }
            }
        }
        Err(format!("cannot create a temporary directory in {}", base.display()).into())
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

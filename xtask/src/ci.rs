//! `cargo xtask ci`: the project's whole test suite as an ordered list of stages.

use std::path::PathBuf;
use std::time::Instant;

use crate::cmd::Cmd;
use crate::fuzz::{self, FuzzConfig};
use crate::vm;
use crate::Result;

/// What a stage reports when it did not fail.
pub enum Outcome {
    /// The stage ran and passed.
    Ok,
    /// The stage decided it has nothing to do (the reason is shown in the summary).
    Skipped(String),
}

/// Everything a stage may need.
pub struct Ctx {
    /// Workspace root; stages run there.
    pub root: PathBuf,
    /// Settings for the fuzz stage.
    pub fuzz: FuzzConfig,
}

/// One CI stage.
pub struct Stage {
    /// Name used in headers, the summary and `--skip`/`--only`.
    pub name: &'static str,
    /// One-line description for `cargo xtask ci --list`.
    pub about: &'static str,
    /// Runs the stage; an `Err` stops CI.
    pub run: fn(&Ctx) -> Result<Outcome>,
}

/// The CI pipeline, in order.
///
/// Extension point: append new stages here, e.g.
/// `Stage { name: "vm-test", about: "...", run: vm_test }` or a feature-matrix build. A stage
/// that needs system packages calls `crate::apt::ensure_apt(&["qemu-system-x86", ...])`
/// first; one that needs a tool runs it through `Cmd`, which echoes it and inherits stdio.
pub fn stages() -> Vec<Stage> {
    vec![
        Stage {
            name: "fmt",
            about: "cargo fmt --all -- --check",
            run: |ctx| cargo_stage(ctx, &["fmt", "--all", "--", "--check"], &[]),
        },
        Stage {
            name: "clippy",
            about: "cargo clippy --workspace --all-targets -- -D warnings",
            run: |ctx| {
                cargo_stage(
                    ctx,
                    &[
                        "clippy",
                        "--workspace",
                        "--all-targets",
                        "--",
                        "-D",
                        "warnings",
                    ],
                    &[],
                )
            },
        },
        Stage {
            name: "test",
            about: "cargo test --workspace (unit, integration and doc tests), then every example of the tagmatch facade (ping_pong also over UDP)",
            run: |ctx| {
                cargo_stage(ctx, &["test", "--workspace"], &[])?;
                run_examples(ctx)
            },
        },
        Stage {
            name: "features",
            about: "clippy + tests of the tagmatch facade and the tagmatch CLI with every feature (async, verbs; installs libibverbs-dev libclang-dev)",
            run: |ctx| {
                crate::apt::ensure_apt(vm::BUILD_PACKAGES)?;
                for p in [["-p", "tagmatch", "--all-features"], ["-p", "tagmatch-cli", "--all-features"]] {
                    cargo_stage(ctx, &[&["clippy"], &p[..], &["--all-targets", "--", "-D", "warnings"]].concat(), &[])?;
                    cargo_stage(ctx, &[&["test"], &p[..]].concat(), &[])?;
                }
                Ok(Outcome::Ok)
            },
        },
        Stage {
            name: "soak",
            about: "cargo xtask soak: the long tagmatch-rdm soak (100,000 operations per seed) and the engine's model-checked reorder walks, release",
            run: |ctx| {
                crate::soak::run(&ctx.root, crate::soak::DEFAULT_MESSAGES, None)?;
                Ok(Outcome::Ok)
            },
        },
        Stage {
            name: "netns",
            about: "cargo xtask netns: tagmatch-transport and tagmatch perf across two network namespaces (root)",
            run: |ctx| crate::netns::run(&ctx.root),
        },
        Stage {
            name: "verbs",
            about: "clippy + tests of tagmatch-verbs-sys and tagmatch-transport --features verbs (installs libibverbs-dev libclang-dev)",
            run: verbs_stage,
        },
        Stage {
            name: "vm-test",
            about: "cargo xtask vm-test: the verbs tests on Soft-RoCE in a QEMU TCG guest",
            run: |ctx| {
                vm::run(&vm::VmConfig {
                    root: ctx.root.clone(),
                    timeout: std::time::Duration::from_secs(vm::resolve_timeout(None)?),
                    test_args: Vec::new(),
                })?;
                Ok(Outcome::Ok)
            },
        },
        Stage {
            name: "doc",
            about: "RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps",
            run: |ctx| {
                let flags = match std::env::var("RUSTDOCFLAGS") {
                    Ok(existing) if !existing.trim().is_empty() => {
                        format!("{existing} -D warnings")
                    }
                    _ => "-D warnings".to_owned(),
                };
                cargo_stage(
                    ctx,
                    &["doc", "--workspace", "--no-deps"],
                    &[("RUSTDOCFLAGS", &flags)],
                )
            },
        },
        Stage {
            name: "fuzz",
            about: "cargo +nightly fuzz run <target> for every target in fuzz/ (smoke)",
            run: |ctx| fuzz::run(&ctx.fuzz),
        },
    ]
}

/// The `verbs` feature needs system headers and libclang, so the default `clippy`/`test`
/// stages leave it out; this stage installs them and lints and host-tests the bindings (the
/// device tests skip on a host without RDMA; `vm-test` runs them for real).
fn verbs_stage(ctx: &Ctx) -> Result<Outcome> {
    crate::apt::ensure_apt(vm::BUILD_PACKAGES)?;
    let package = ["-p", "tagmatch-verbs-sys", "--features", "verbs"];
    cargo_stage(
        ctx,
        &[
            &["clippy"],
            &package[..],
            &["--all-targets", "--", "-D", "warnings"],
        ]
        .concat(),
        &[],
    )?;
    cargo_stage(ctx, &[&["test"], &package[..]].concat(), &[])?;
    // The transport's verbs module (its device tests skip on a host without RDMA).
    let transport = ["-p", "tagmatch-transport", "--features", "verbs"];
    cargo_stage(
        ctx,
        &[
            &["clippy"],
            &transport[..],
            &["--all-targets", "--", "-D", "warnings"],
        ]
        .concat(),
        &[],
    )?;
    cargo_stage(ctx, &[&["test"], &transport[..], &["--lib"]].concat(), &[])?;
    cargo_stage(ctx, vm::TRANSPORT_VERBS_TESTS, &[])?;
    // The facade's verbs tests (they skip on a host without RDMA; vm-test runs them).
    cargo_stage(ctx, vm::FACADE_VERBS_TESTS, &[])
}

/// Runs every example of the facade (`crates/tagmatch/examples/*.rs`), which must exit
/// successfully: they are documentation a user runs first, and `cargo test` only builds
/// them. `ping_pong` runs in-process and over UDP.
fn run_examples(ctx: &Ctx) -> Result<Outcome> {
    let dir = ctx.root.join("crates/tagmatch/examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    for name in &names {
        let mut runs: Vec<Vec<&str>> = vec![vec![]];
        if name == "ping_pong" {
            runs.push(vec!["udp"]);
        }
        for extra in runs {
            let mut args = vec!["run", "-q", "-p", "tagmatch", "--example", name.as_str()];
            if !extra.is_empty() {
                args.push("--");
                args.extend(extra);
            }
            cargo_stage(ctx, &args, &[])?;
        }
    }
    Ok(Outcome::Ok)
}

fn cargo_stage(ctx: &Ctx, args: &[&str], env: &[(&str, &str)]) -> Result<Outcome> {
    let mut cmd = Cmd::cargo().args(args).current_dir(&ctx.root);
    for (key, value) in env {
        cmd = cmd.env(key, value);
    }
    cmd.run()?;
    Ok(Outcome::Ok)
}

/// Options of `cargo xtask ci`.
pub struct CiOptions {
    /// `--skip <stage>` (repeatable).
    pub skip: Vec<String>,
    /// `--only <stage>` (repeatable); empty means all stages.
    pub only: Vec<String>,
}

enum Status {
    Ok,
    Failed,
    Skipped(String),
}

/// Prints the stage list for `cargo xtask ci --list`.
pub fn list() {
    for stage in stages() {
        println!("{:<10} {}", stage.name, stage.about);
    }
}

/// Runs the selected stages in order, stopping at the first failure.
pub fn run(ctx: &Ctx, opts: &CiOptions) -> Result<()> {
    let stages = stages();
    let names: Vec<&str> = stages.iter().map(|s| s.name).collect();
    for name in opts.skip.iter().chain(&opts.only) {
        if !names.contains(&name.as_str()) {
            return Err(format!("unknown stage `{name}`; stages are: {}", names.join(", ")).into());
        }
    }

    let total = Instant::now();
    let mut results: Vec<(&str, Status, Option<f64>)> = Vec::new();
    let mut failure: Option<String> = None;

    for stage in &stages {
        let name = stage.name;
        if !opts.only.is_empty() && !opts.only.iter().any(|s| s == name) {
            results.push((name, Status::Skipped("not in --only".into()), None));
            continue;
        }
        if opts.skip.iter().any(|s| s == name) {
            println!("== xtask ci: {name}: skipped (--skip) ==");
            results.push((name, Status::Skipped("--skip".into()), None));
            continue;
        }
        if failure.is_some() {
            results.push((name, Status::Skipped("earlier stage failed".into()), None));
            continue;
        }

        println!();
        println!("== xtask ci: {name} ==");
        let started = Instant::now();
        let outcome = (stage.run)(ctx);
        let secs = started.elapsed().as_secs_f64();
        match outcome {
            Ok(Outcome::Ok) => {
                println!("== xtask ci: {name}: ok ({secs:.1}s) ==");
                results.push((name, Status::Ok, Some(secs)));
            }
            Ok(Outcome::Skipped(reason)) => {
                println!("== xtask ci: {name}: skipped: {reason} ({secs:.1}s) ==");
                results.push((name, Status::Skipped(reason), Some(secs)));
            }
            Err(err) => {
                let msg = format!("stage `{name}` failed after {secs:.1}s: {err}");
                eprintln!("== xtask ci: {name}: FAILED ({secs:.1}s) ==");
                eprintln!("xtask ci: {msg}");
                results.push((name, Status::Failed, Some(secs)));
                failure = Some(msg);
            }
        }
    }

    println!();
    println!("== xtask ci: summary ==");
    println!("  {:<10} {:<8} {:>9}", "stage", "result", "seconds");
    for (name, status, secs) in &results {
        let secs = secs.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}"));
        let (result, note) = match status {
            Status::Ok => ("ok", String::new()),
            Status::Failed => ("FAILED", String::new()),
            Status::Skipped(reason) => ("skipped", format!("  ({reason})")),
        };
        println!("  {name:<10} {result:<8} {secs:>9}{note}");
    }
    println!(
        "  {:<10} {:<8} {:>9.1}",
        "total",
        "",
        total.elapsed().as_secs_f64()
    );

    match failure {
        Some(msg) => Err(msg.into()),
        None => {
            println!("xtask ci: all selected stages passed");
            Ok(())
        }
    }
}

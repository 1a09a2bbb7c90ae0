//! `cargo xtask`: project automation for tagmatch.
//!
//! * `cargo xtask ci` — the whole test suite as CI runs it (`.ci/run`).
//! * `cargo xtask fuzz` — only the fuzz smoke stage.
//! * `cargo xtask apt` — install Debian packages via `apt::ensure_apt`.
//! * `cargo xtask vm-test` — the verbs tests on Soft-RoCE inside a QEMU guest (`vm`).
//! * `cargo xtask bench-peers` / `bench-match` — measurements against other libraries.
//!
//! Std-only on purpose: a fresh CI clone compiles this crate before anything else.

mod apt;
mod bench_match;
mod bench_peers;
mod ci;
mod cmd;
mod fuzz;
mod netns;
mod soak;
mod vm;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Result type of xtask: errors are messages for the user.
pub(crate) type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

const HELP: &str = "\
cargo xtask — tagmatch project automation

USAGE:
    cargo xtask <COMMAND> [OPTIONS]

COMMANDS:
    ci      Run the whole test suite, stage by stage, as CI does:
              fmt     cargo fmt --all -- --check
              clippy  cargo clippy --workspace --all-targets -- -D warnings
              test    cargo test --workspace
              features
                      cargo clippy/test -p tagmatch --all-features
              netns   cargo xtask netns (below)
              verbs   cargo clippy/test -p tagmatch-verbs-sys --features verbs
                      (installs libibverbs-dev libclang-dev first)
              vm-test cargo xtask vm-test (below)
              doc     RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps
              fuzz    cargo +nightly fuzz run <target> -- -max_total_time=<secs>
                      for every target in fuzz/ (skipped if fuzz/ does not exist)
            Stops at the first failing stage and prints a summary.
    fuzz    Run only the fuzz smoke stage.
    netns   The multi-host tests of tagmatch-transport and of tagmatch perf (server
            and client) in two network namespaces (veth pair) with
            TAGMATCH_NETNS_REQUIRED=1; needs root (skipped otherwise).
    soak    The long tagmatch-rdm soak: 100,000 operations per seed of random sizes and
            subprotocols under reordering and faults, release build
            (--messages N, --seed S). CI runs a 20,000-operation version.
            Without --seed, then the engine's model-checked reorder walks
            (tests/review_reorder18.rs, skipped by debug `cargo test`).
    vm-test Build the verbs tests (tagmatch-verbs-sys --features verbs), boot Debian's
            kernel in QEMU (TCG, no KVM needed), create a Soft-RoCE device (rdma_rxe)
            inside and run the tests there with TAGMATCH_REQUIRE_RDMA_DEVICE=1.
            Installs what it needs (qemu-system-x86 busybox-static libibverbs-dev
            ibverbs-utils libclang-dev iproute2 kmod); the kernel package is only
            downloaded and unpacked into <target>/vm/, never installed.
    bench-peers [--runs N]
            tagmatch perf side by side with UCX (ucx_perftest: self, tcp) and libfabric
            (fi_pingpong, tcp;ofi_rxm) on loopback; installs ucx-utils libfabric-bin;
            prints the ratios. With --runs N (1 to 100): N rounds, each table, then a
            summary (medians, the ratios' range, in how many rounds tagmatch was at
            least level). Not part of ci (it measures).
    bench-match [--depths 64,1024,16384]
            The seven matching workloads on the engine and on the UCX-like,
            ob1-like and linear baselines (tagmatch bench match --engine), as a
            markdown table of ns per operation with the ratio to the best baseline.
            Not part of ci (it measures).
    apt     Install Debian packages that are missing (apt-get update once, then
            apt-get install -y --no-install-recommends), as root or via sudo.
    help    Print this help.

CI OPTIONS:
    --skip <stage>          Skip a stage (repeatable)
    --only <stage>          Run only this stage (repeatable)
    --list                  List the stages and exit
    --fuzz-seconds <N>      Fuzz time per target [env: TAGMATCH_FUZZ_SECONDS; default: 60]
    --fuzz-dir <DIR>        cargo-fuzz project [default: <workspace>/fuzz]

FUZZ USAGE:
    cargo xtask fuzz [--seconds <N>] [--fuzz-dir <DIR>] [TARGET...]
            TARGETs default to every target `cargo fuzz list` reports.

VM-TEST USAGE:
    cargo xtask vm-test [--timeout <SECS>] [-- <TEST ARGS>...]
            --timeout   kill the VM after this long [env: TAGMATCH_VM_TIMEOUT; default: 300]
            TEST ARGS   passed to every test binary inside the guest (e.g. a test name)

APT USAGE:
    cargo xtask apt <PACKAGE>...

EXAMPLES:
    cargo xtask ci
    cargo xtask ci --only fmt --only clippy
    cargo xtask ci --skip fuzz
    cargo xtask fuzz --seconds 10 my_target
    cargo xtask vm-test
    cargo xtask vm-test -- mr_bounds
";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<()> {
    let mut args = Args::new(args);
    let Some(command) = args.next() else {
        eprint!("{HELP}");
        return Err("no command given".into());
    };
    match command.as_str() {
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(())
        }
        "ci" => cmd_ci(args),
        "fuzz" => cmd_fuzz(args),
        "apt" => cmd_apt(args),
        "bench-peers" => {
            let runs = match (args.next().as_deref(), args.next()) {
                (None, _) => 1,
                (Some("--runs"), Some(n)) => bench_peers::parse_runs(&n)?,
                (Some(other), _) => return Err(unexpected("bench-peers", other)),
            };
            bench_peers::run(&workspace_root(), runs)
        }
        "bench-match" => {
            let depths = match (args.next().as_deref(), args.next()) {
                (None, _) => vec![64, 1024, 16384],
                (Some("--depths"), Some(d)) => bench_match::parse_depths(&d)?,
                (Some(other), _) => return Err(unexpected("bench-match", other)),
            };
            bench_match::run(&workspace_root(), &depths)
        }
        "vm-test" => cmd_vm_test(args),
        "soak" => cmd_soak(args),
        "netns" => match netns::run(&workspace_root())? {
            ci::Outcome::Ok => Ok(()),
            ci::Outcome::Skipped(why) => {
                println!("xtask netns: skipped: {why}");
                Ok(())
            }
        },
        other => Err(format!("unknown command `{other}` (see `cargo xtask --help`)").into()),
    }
}

fn cmd_ci(mut args: Args) -> Result<()> {
    let mut opts = ci::CiOptions {
        skip: Vec::new(),
        only: Vec::new(),
    };
    let mut seconds = None;
    let mut fuzz_dir = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--skip" => opts.skip.push(args.value("--skip")?),
            "--only" => opts.only.push(args.value("--only")?),
            "--fuzz-seconds" => seconds = Some(args.value("--fuzz-seconds")?),
            "--fuzz-dir" => fuzz_dir = Some(args.value("--fuzz-dir")?),
            "--list" => {
                ci::list();
                return Ok(());
            }
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            other => return Err(unexpected("ci", other)),
        }
    }
    let root = workspace_root();
    let ctx = ci::Ctx {
        fuzz: fuzz::FuzzConfig {
            dir: fuzz_dir_or_default(&root, fuzz_dir),
            seconds: fuzz::resolve_seconds(seconds.as_deref())?,
            targets: Vec::new(),
        },
        root,
    };
    ci::run(&ctx, &opts)
}

fn cmd_fuzz(mut args: Args) -> Result<()> {
    let mut seconds = None;
    let mut fuzz_dir = None;
    let mut targets = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" | "--fuzz-seconds" => seconds = Some(args.value("--seconds")?),
            "--fuzz-dir" => fuzz_dir = Some(args.value("--fuzz-dir")?),
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            flag if flag.starts_with('-') => return Err(unexpected("fuzz", flag)),
            target => targets.push(target.to_owned()),
        }
    }
    let root = workspace_root();
    let cfg = fuzz::FuzzConfig {
        dir: fuzz_dir_or_default(&root, fuzz_dir),
        seconds: fuzz::resolve_seconds(seconds.as_deref())?,
        targets,
    };
    let started = std::time::Instant::now();
    fuzz::run(&cfg)?;
    println!(
        "xtask fuzz: done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo xtask soak [--messages N] [--seed S]`.
fn cmd_soak(mut args: Args) -> Result<()> {
    let mut messages = soak::DEFAULT_MESSAGES;
    let mut seed = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--messages" => {
                let v = args.value("--messages")?;
                messages = v
                    .parse()
                    .map_err(|_| format!("--messages takes a whole number, not `{v}`"))?;
            }
            "--seed" => seed = Some(args.value("--seed")?),
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            other => return Err(unexpected("soak", other)),
        }
    }
    soak::run(&workspace_root(), messages, seed.as_deref())
}

fn cmd_vm_test(mut args: Args) -> Result<()> {
    let mut timeout = None;
    let mut test_args = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--timeout" => timeout = Some(args.value("--timeout")?),
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            "--" => test_args.extend(args.by_ref_rest()),
            other => return Err(unexpected("vm-test", other)),
        }
    }
    let cfg = vm::VmConfig {
        root: workspace_root(),
        timeout: std::time::Duration::from_secs(vm::resolve_timeout(timeout.as_deref())?),
        test_args,
    };
    vm::run(&cfg)
}

fn cmd_apt(mut args: Args) -> Result<()> {
    let mut packages = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            flag if flag.starts_with('-') => return Err(unexpected("apt", flag)),
            pkg => packages.push(pkg.to_owned()),
        }
    }
    if packages.is_empty() {
        return Err("usage: cargo xtask apt <PACKAGE>...".into());
    }
    let packages: Vec<&str> = packages.iter().map(String::as_str).collect();
    apt::ensure_apt(&packages)
}

fn unexpected(command: &str, arg: &str) -> Box<dyn std::error::Error> {
    format!("unexpected argument `{arg}` for `cargo xtask {command}` (see `cargo xtask --help`)")
        .into()
}

/// The workspace root: xtask/ lives directly inside it.
///
/// Prefers the `CARGO_MANIFEST_DIR` that `cargo run` (hence `cargo xtask`) sets at run time:
/// cargo does not rebuild when only the checkout's location changes (same relative paths), so
/// the compile-time value can point at an old location. The compile-time value is the
/// fallback for running the binary directly.
fn workspace_root() -> PathBuf {
    let runtime = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.ends_with("xtask") && dir.join("src/main.rs").is_file());
    let manifest_dir = runtime.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// `--fuzz-dir` (relative to the current directory) or `<workspace>/fuzz`.
fn fuzz_dir_or_default(root: &Path, fuzz_dir: Option<String>) -> PathBuf {
    match fuzz_dir {
        Some(dir) => std::env::current_dir()
            .map(|cwd| cwd.join(&dir))
            .unwrap_or_else(|_| PathBuf::from(dir)),
        None => root.join("fuzz"),
    }
}

/// A minimal argument iterator that also accepts `--flag=value`.
struct Args {
    args: std::vec::IntoIter<String>,
    pending: Option<String>,
}

impl Args {
    fn new(args: Vec<String>) -> Self {
        Args {
            args: args.into_iter(),
            pending: None,
        }
    }

    /// The next argument; `--flag=value` yields `--flag` and keeps `value` for `Args::value`.
    fn next(&mut self) -> Option<String> {
        if let Some(value) = self.pending.take() {
            // A `=value` nobody asked for: hand it back so it is reported as unexpected.
            return Some(value);
        }
        let arg = self.args.next()?;
        if arg.starts_with("--") {
            if let Some((flag, value)) = arg.split_once('=') {
                self.pending = Some(value.to_owned());
                return Some(flag.to_owned());
            }
        }
        Some(arg)
    }

    /// Every remaining argument, unparsed (what follows `--`).
    fn by_ref_rest(&mut self) -> Vec<String> {
        self.pending
            .take()
            .into_iter()
            .chain(self.args.by_ref())
            .collect()
    }

    /// The value of `flag`, from `--flag=value` or the following argument.
    fn value(&mut self, flag: &str) -> Result<String> {
        self.pending
            .take()
            .or_else(|| self.args.next())
            .ok_or_else(|| format!("`{flag}` needs a value").into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Args {
        Args::new(list.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn flag_values_separate_or_inline() {
        let mut a = args(&["--skip", "fmt", "--only=fuzz", "target"]);
        assert_eq!(a.next().as_deref(), Some("--skip"));
        assert_eq!(a.value("--skip").unwrap(), "fmt");
        assert_eq!(a.next().as_deref(), Some("--only"));
        assert_eq!(a.value("--only").unwrap(), "fuzz");
        assert_eq!(a.next().as_deref(), Some("target"));
        assert_eq!(a.next(), None);
    }

    #[test]
    fn missing_flag_value_is_an_error() {
        let mut a = args(&["--skip"]);
        a.next();
        assert!(a.value("--skip").is_err());
    }

    #[test]
    fn fuzz_seconds_from_command_line() {
        assert_eq!(fuzz::resolve_seconds(Some("7")).unwrap(), 7);
        assert!(fuzz::resolve_seconds(Some("0")).is_err());
        assert!(fuzz::resolve_seconds(Some("ten")).is_err());
    }

    #[test]
    fn stage_names_are_unique_and_in_order() {
        let names: Vec<&str> = ci::stages().iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "fmt", "clippy", "test", "features", "soak", "netns", "verbs", "vm-test", "doc",
                "fuzz"
            ]
        );
    }

    #[test]
    fn unknown_stage_is_rejected() {
        let ctx = ci::Ctx {
            root: workspace_root(),
            fuzz: fuzz::FuzzConfig {
                dir: PathBuf::from("/nonexistent"),
                seconds: 1,
                targets: Vec::new(),
            },
        };
        let opts = ci::CiOptions {
            skip: vec!["nope".into()],
            only: Vec::new(),
        };
        assert!(ci::run(&ctx, &opts).is_err());
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("xtask").is_dir());
    }
}

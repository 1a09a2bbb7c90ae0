//! `cargo xtask vm-test`: the verbs integration tests against a real (software) RDMA device.
//!
//! The host has no usable RDMA stack, so this boots Debian's own kernel in QEMU (TCG: no KVM
//! needed), creates a Soft-RoCE device (`rdma_rxe` over a `dummy` netdev) inside, and runs
//! the `tagmatch-verbs-sys --features verbs` test binaries there with
//! `TAGMATCH_REQUIRE_RDMA_DEVICE=1`. Steps:
//!
//! 1. `apt::ensure_apt` the host packages (QEMU, static busybox, verbs headers and tools,
//!    libclang for bindgen, iproute2 for `ip`/`rdma`, kmod for `depmod`/`modprobe`).
//! 2. The kernel: `apt-get download linux-image-<ver>-amd64` + `dpkg-deb -x` into
//!    `<target>/vm/` and `depmod` there. Nothing is installed system-wide (installing
//!    `linux-image-amd64` would pull initramfs-tools and upgrade systemd).
//! 3. The test binaries: `cargo test -p tagmatch-verbs-sys --features verbs --no-run
//!    --message-format=json` and the same for `tagmatch-transport --features verbs --test
//!    'verbs_*'` and `tagmatch --features verbs --test 'verbs_*'` (the facade over the
//!    verbs transport), executables read from the JSON lines.
//! 4. An initramfs (written here as a `newc` cpio, no `cpio` tool needed): static busybox, the
//!    virtio/9p modules, and an `/init` that mounts the host's `/` read-only over 9p at
//!    `/host` and chroots into it to run `guest.sh`.
//! 5. QEMU, whose console is echoed line by line; the guest ends with `GUEST-DONE rc=N`. The
//!    whole VM is killed after the timeout, so CI can never hang here.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::apt;
use crate::cmd::Cmd;
use crate::Result;

/// Host packages the VM test needs.
pub const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "libibverbs-dev",
    "ibverbs-utils",
    "libclang-dev",
    "iproute2",
    "kmod",
];

/// Packages needed to build (and host-test) `tagmatch-verbs-sys --features verbs`.
pub const BUILD_PACKAGES: &[&str] = &["libibverbs-dev", "libclang-dev"];

/// Kernel modules for the initramfs, in load order (`virtio` needs `virtio_ring`, ...).
/// Modules the kernel has built in are skipped.
const INITRAMFS_MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "netfs",
    "fscache",
    "9pnet",
    "9pnet_virtio",
    "9p",
];

/// Default for `--timeout` / `TAGMATCH_VM_TIMEOUT`: the whole VM run, boot to poweroff.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;

/// Settings of one VM test run.
pub struct VmConfig {
    /// Workspace root.
    pub root: PathBuf,
    /// Kill QEMU after this long.
    pub timeout: Duration,
    /// Extra arguments for every test binary (e.g. a test name filter).
    pub test_args: Vec<String>,
}

/// `--timeout` (or `TAGMATCH_VM_TIMEOUT`, or the default) in seconds.
pub fn resolve_timeout(arg: Option<&str>) -> Result<u64> {
    let env = std::env::var("TAGMATCH_VM_TIMEOUT").ok();
    match arg.or(env.as_deref()) {
        None => Ok(DEFAULT_TIMEOUT_SECS),
        Some(s) => match s.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(
                format!("vm-test timeout must be a positive number of seconds, got {s:?}").into(),
            ),
        },
    }
}

/// Runs the whole VM test; `Err` unless every test binary passed inside the guest.
pub fn run(cfg: &VmConfig) -> Result<()> {
    let started = Instant::now();
    let vm_dir = target_dir(&cfg.root).join("vm");
    std::fs::create_dir_all(&vm_dir)?;

    step(1, "host packages");
    apt::ensure_apt(PACKAGES)?;
    for tool in ["qemu-system-x86_64", "depmod", "dpkg-deb", "apt-get"] {
        if Cmd::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .probe()
            .is_none_or(|(status, _)| !status.success())
        {
            return Err(format!("vm-test: `{tool}` not found after installing packages").into());
        }
    }

    step(2, "guest kernel (downloaded, not installed)");
    let kernel = fetch_kernel(&vm_dir)?;
    println!(
        "vm-test: kernel {} at {}",
        kernel.version,
        kernel.root.display()
    );

    step(3, "host build of the verbs test binaries");
    let build_started = Instant::now();
    let tests = build_test_binaries(&cfg.root)?;
    let build_secs = build_started.elapsed().as_secs_f64();
    for t in &tests {
        println!("vm-test: test binary {}", t.display());
    }
    println!("vm-test: host build took {build_secs:.1}s");

    step(4, "initramfs");
    let initramfs = vm_dir.join("initramfs.cpio");
    let guest_sh = vm_dir.join("guest.sh");
    std::fs::write(
        &guest_sh,
        guest_script(&kernel, &tests, &cfg.test_args, cfg.timeout),
    )?;
    build_initramfs(&kernel, &guest_sh, &initramfs)?;

    step(5, "boot QEMU (TCG) and run the tests inside");
    let outcome = boot(&kernel, &initramfs, cfg.timeout)?;
    println!(
        "vm-test: host build {build_secs:.1}s, VM boot {:.1}s, tests {:.1}s, VM total {:.1}s, \
         vm-test total {:.1}s",
        outcome.boot_secs.unwrap_or(f64::NAN),
        outcome.test_secs.unwrap_or(f64::NAN),
        outcome.vm_secs,
        started.elapsed().as_secs_f64()
    );
    match outcome.rc {
        Some(0) => {
            println!("vm-test: all verbs tests passed inside the VM");
            Ok(())
        }
        Some(rc) => Err(format!("vm-test: tests failed inside the VM (GUEST-DONE rc={rc})").into()),
        None => Err("vm-test: the guest never reported GUEST-DONE (see the console above)".into()),
    }
}

fn step(n: u32, what: &str) {
    println!();
    println!("== vm-test [{n}/5] {what} ==");
}

/// `CARGO_TARGET_DIR` (relative to the workspace root if relative) or `<root>/target`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// An extracted Debian kernel package.
struct Kernel {
    /// `uname -r` of the guest, e.g. `6.1.0-56-amd64`.
    version: String,
    /// The extracted package (holds `boot/` and `lib/modules/<version>`).
    root: PathBuf,
}

impl Kernel {
    fn vmlinuz(&self) -> PathBuf {
        self.root.join(format!("boot/vmlinuz-{}", self.version))
    }

    fn modules(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.version)
    }
}

/// Finds `linux-image-<ver>-amd64` behind the `linux-image-amd64` metapackage, downloads and
/// extracts it under `vm_dir` (once per version) and runs `depmod` on the extracted tree.
fn fetch_kernel(vm_dir: &Path) -> Result<Kernel> {
    let package = match std::env::var("TAGMATCH_VM_KERNEL_PACKAGE") {
        Ok(p) if !p.trim().is_empty() => p.trim().to_owned(),
        _ => kernel_package()?,
    };
    let version = package
        .strip_prefix("linux-image-")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("vm-test: unexpected kernel package name {package:?}"))?
        .to_owned();
    let root = vm_dir.join(&package);
    let kernel = Kernel { version, root };
    if kernel.vmlinuz().is_file() && kernel.modules().join("modules.dep").is_file() {
        println!("vm-test: {package} already extracted");
        return Ok(kernel);
    }

    let download = vm_dir.join("download");
    let _ = std::fs::remove_dir_all(&download);
    std::fs::create_dir_all(&download)?;
    Cmd::new("apt-get")
        .args(["download", &package])
        .current_dir(&download)
        .run()?;
    let deb = std::fs::read_dir(&download)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| format!("vm-test: apt-get download {package} left no .deb"))?;
    let _ = std::fs::remove_dir_all(&kernel.root);
    Cmd::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&kernel.root)
        .run()?;
    Cmd::new("depmod")
        .arg("-b")
        .arg(&kernel.root)
        .arg(&kernel.version)
        .run()?;
    let _ = std::fs::remove_dir_all(&download);
    if !kernel.vmlinuz().is_file() {
        return Err(format!(
            "vm-test: {} missing after extraction",
            kernel.vmlinuz().display()
        )
        .into());
    }
    Ok(kernel)
}

/// `linux-image-<ver>-amd64`, from `apt-cache depends linux-image-amd64` (after one
/// `apt-get update` if the package lists do not know it yet).
fn kernel_package() -> Result<String> {
    let query = || {
        Cmd::new("apt-cache")
            .args(["depends", "linux-image-amd64"])
            .probe()
            .filter(|(status, _)| status.success())
            .and_then(|(_, out)| parse_kernel_depends(&out))
    };
    if let Some(pkg) = query() {
        return Ok(pkg);
    }
    println!("vm-test: apt-cache does not know linux-image-amd64 yet; running apt-get update");
    Cmd::new("apt-get")
        .arg("update")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .run()?;
    query().ok_or_else(|| {
        "vm-test: cannot find the kernel behind `linux-image-amd64` \
         (set TAGMATCH_VM_KERNEL_PACKAGE=linux-image-<ver>-amd64)"
            .into()
    })
}

/// The `Depends: linux-image-<ver>` line of `apt-cache depends linux-image-amd64`.
fn parse_kernel_depends(out: &str) -> Option<String> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-") && p != &"linux-image-amd64" && !p.contains('<'))
        .map(str::to_owned)
}

/// `cargo test` arguments selecting the bindings' tests (every test binary of the crate).
const SYS_VERBS_TESTS: &[&str] = &["test", "-p", "tagmatch-verbs-sys", "--features", "verbs"];

/// Builds the feature-gated verbs test binaries and returns their paths: the bindings', the
/// transport's verbs layer (its `tests/verbs_*.rs`) and the facade over the verbs transport
/// (its `tests/verbs_*.rs`).
fn build_test_binaries(root: &Path) -> Result<Vec<PathBuf>> {
    let mut tests = Vec::new();
    for (args, package) in [
        (SYS_VERBS_TESTS, "tagmatch-verbs-sys"),
        (TRANSPORT_VERBS_TESTS, "tagmatch-transport"),
        (FACADE_VERBS_TESTS, "tagmatch"),
        (CLI_VERBS_TESTS, "tagmatch-cli"),
    ] {
        let json = Cmd::cargo()
            .args(args)
            .args(["--no-run", "--message-format=json"])
            .current_dir(root)
            .read_stdout()?;
        let built = test_executables(&json, package);
        if built.is_empty() {
            return Err(
                format!("vm-test: cargo built no verbs test executable for {package}").into(),
            );
        }
        tests.extend(built);
    }
    Ok(tests)
}

/// `cargo` arguments selecting the feature-gated verbs tests of `tagmatch-transport`
/// (also used by the `verbs` CI stage).
pub const TRANSPORT_VERBS_TESTS: &[&str] = &[
    "test",
    "-p",
    "tagmatch-transport",
    "--features",
    "verbs",
    "--test",
    "verbs_*",
];

/// `cargo` arguments selecting the facade's tests over the verbs transport (also used by
/// the `verbs` CI stage).
pub const FACADE_VERBS_TESTS: &[&str] = &[
    "test",
    "-p",
    "tagmatch",
    "--features",
    "verbs",
    "--test",
    "verbs_*",
];

/// `cargo` arguments selecting `tagmatch demo` / `tagmatch perf` over the verbs transport
/// (black-box tests running the `tagmatch` binary built with `--features verbs`).
pub const CLI_VERBS_TESTS: &[&str] = &[
    "test",
    "-p",
    "tagmatch-cli",
    "--features",
    "verbs",
    "--test",
    "verbs_*",
];

/// The test executables of `package` in cargo's `--message-format=json` output: a minimal
/// string scan of `compiler-artifact` lines with `"test":true` and a non-null `executable`.
fn test_executables(json: &str, package: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for line in json.lines() {
        // `"test":true` inside `"profile":{…}` (a test harness); the target object has
        // its own `"test"` flag, true for plain binaries too.
        let profile_test = line
            .split_once("\"profile\":{")
            .and_then(|(_, r)| r.split_once('}'))
            .is_some_and(|(p, _)| p.contains("\"test\":true"));
        if !line.contains("\"reason\":\"compiler-artifact\"")
            || !profile_test
            || !line.contains(&format!("/{package}"))
        {
            continue;
        }
        let Some(rest) = line.split_once("\"executable\":\"").map(|(_, r)| r) else {
            continue;
        };
        let mut path = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => {
                    if let Some(escaped) = chars.next() {
                        path.push(escaped);
                    }
                }
                c => path.push(c),
            }
        }
        let path = PathBuf::from(path);
        if !found.contains(&path) {
            found.push(path);
        }
    }
    found
}

/// Single-quotes `s` for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The script the guest runs, chrooted into the host's root.
fn guest_script(
    kernel: &Kernel,
    tests: &[PathBuf],
    test_args: &[String],
    timeout: Duration,
) -> String {
    // Each binary gets a bounded run inside the guest, so a hung test still ends in a
    // GUEST-DONE line (rc 124) with its output, before the host kills the whole VM.
    let per_binary = timeout.as_secs().saturating_sub(60).max(30);
    let kroot = sh_quote(&kernel.root.to_string_lossy());
    let kver = sh_quote(&kernel.version);
    let args: Vec<String> = test_args.iter().map(|a| sh_quote(a)).collect();
    let mut s = String::new();
    s.push_str(&format!(
        r#"#!/bin/sh
# Generated by `cargo xtask vm-test`; runs inside the QEMU guest, chrooted into the host's /.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/run TAGMATCH_REQUIRE_RDMA_DEVICE=1 RUST_BACKTRACE=1
echo "GUEST-BOOTED"
mp() {{ modprobe -d {kroot} -S {kver} "$@" || echo "GUEST-WARN modprobe $* failed"; }}
# crc32 first: the kernel's own request_module cannot reach modprobe from the initramfs, and
# without crc32 rxe fails with "failed to add dummy0".
mp crc32_generic
mp dummy
mp rdma_rxe
ip link set lo up
ip link add dummy0 type dummy
# A documentation address (RFC 5737): the VM has no NIC, nothing leaves it.
ip addr add 192.0.2.1/24 dev dummy0
ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0 || echo "GUEST-WARN rdma link add failed"
rdma link show
ibv_devinfo -d rxe0 2>&1 | head -n 30
rc=0
t0=$(date +%s)
"#
    ));
    for t in tests {
        let t = sh_quote(&t.to_string_lossy());
        s.push_str(&format!(
            "echo \"GUEST-TEST {t}\"\n\
             timeout -k 5 {per_binary} {t} --test-threads=1 --nocapture {} || rc=$?\n",
            args.join(" ")
        ));
    }
    s.push_str(
        "echo \"GUEST-TESTS-SECONDS $(( $(date +%s) - t0 ))\"\necho \"GUEST-DONE rc=$rc\"\n",
    );
    s
}

/// The initramfs `/init` (busybox sh).
fn init_script(modules: &[String], guest_sh: &Path) -> String {
    let mut s = String::from(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bin\n\
         export PATH=/bin\n\
         mkdir -p /proc /sys /dev /host\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n",
    );
    for m in modules {
        s.push_str(&format!(
            "insmod /modules/{m}.ko || echo \"GUEST-WARN insmod {m} failed\"\n"
        ));
    }
    s.push_str(&format!(
        "if mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /host; then\n\
         \x20 mount --bind /proc /host/proc\n\
         \x20 mount --bind /sys /host/sys\n\
         \x20 mount --bind /dev /host/dev\n\
         \x20 mount -t tmpfs tmpfs /host/run\n\
         \x20 chroot /host /bin/sh {} || echo \"GUEST-DONE rc=$?\"\n\
         else\n\
         \x20 echo \"GUEST-DONE rc=125 (cannot mount the host root over 9p)\"\n\
         fi\n\
         poweroff -f\n",
        sh_quote(&guest_sh.to_string_lossy())
    ));
    s
}

/// Writes the initramfs: busybox, the 9p modules and `/init`.
fn build_initramfs(kernel: &Kernel, guest_sh: &Path, out: &Path) -> Result<()> {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or("vm-test: static busybox not found (package busybox-static)")?;
    let deps = std::fs::read_to_string(kernel.modules().join("modules.dep"))?;
    let builtin =
        std::fs::read_to_string(kernel.modules().join("modules.builtin")).unwrap_or_default();

    let mut cpio = Cpio::default();
    for dir in ["bin", "dev", "proc", "sys", "host", "modules"] {
        cpio.dir(dir);
    }
    // The console must exist before /init runs, or init has no stdout.
    cpio.char_device("dev/console", 5, 1);
    cpio.file("bin/busybox", &std::fs::read(busybox)?, 0o755);
    let mut loaded = Vec::new();
    for &name in INITRAMFS_MODULES {
        match module_path(&deps, name) {
            Some(rel) => {
                let bytes = std::fs::read(kernel.modules().join(rel))?;
                cpio.file(&format!("modules/{name}.ko"), &bytes, 0o644);
                loaded.push(name.to_owned());
            }
            None if is_builtin(&builtin, name) => {
                println!("vm-test: module {name} is built into the kernel");
            }
            None => return Err(format!("vm-test: kernel module {name} not found").into()),
        }
    }
    cpio.file("init", init_script(&loaded, guest_sh).as_bytes(), 0o755);
    let bytes = cpio.finish();
    std::fs::write(out, &bytes)?;
    println!(
        "vm-test: {} ({} KiB, modules: {})",
        out.display(),
        bytes.len() / 1024,
        loaded.join(" ")
    );
    Ok(())
}

/// The path (relative to `lib/modules/<ver>`) of module `name` in `modules.dep`; module
/// names treat `-` and `_` alike.
fn module_path<'a>(deps: &'a str, name: &str) -> Option<&'a str> {
    let want = name.replace('-', "_");
    deps.lines()
        .filter_map(|l| l.split_once(':').map(|(path, _)| path))
        .find(|path| {
            let file = path.rsplit('/').next().unwrap_or(path);
            let stem = file.split(".ko").next().unwrap_or(file);
            stem.replace('-', "_") == want
        })
}

fn is_builtin(builtin: &str, name: &str) -> bool {
    module_path(builtin, name).is_some()
        || builtin.lines().any(|l| {
            let file = l.rsplit('/').next().unwrap_or(l);
            file.split(".ko").next() == Some(name)
        })
}

/// A minimal `newc` cpio writer (the format the kernel unpacks an initramfs from).
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.ino += 1;
        let name_len = name.len() + 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0, // uid
            0, // gid
            1, // nlink
            0, // mtime
            data.len(),
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name_len,
            0, // check
        );
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[], (0, 0));
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100_000 | perm, data, (0, 0));
    }

    fn char_device(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020_600, &[], (major, minor));
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.out
    }
}

/// What the guest reported.
struct Outcome {
    rc: Option<i32>,
    boot_secs: Option<f64>,
    test_secs: Option<f64>,
    vm_secs: f64,
}

/// Boots QEMU, echoes its console and waits for `GUEST-DONE rc=N` or the timeout.
fn boot(kernel: &Kernel, initramfs: &Path, timeout: Duration) -> Result<Outcome> {
    let mut qemu = Command::new("qemu-system-x86_64");
    qemu.args([
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max",
        "-m",
        "2048",
        "-smp",
        "2",
    ])
    .args(["-nographic", "-no-reboot", "-nic", "none"])
    .arg("-kernel")
    .arg(kernel.vmlinuz())
    .arg("-initrd")
    .arg(initramfs)
    .args([
        "-append",
        "console=ttyS0 quiet panic=-1 rdinit=/init",
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    println!("$ {qemu:?}");
    let started = Instant::now();
    let mut child = qemu
        .spawn()
        .map_err(|e| format!("vm-test: cannot start qemu-system-x86_64: {e}"))?;
    let stdout = child.stdout.take().ok_or("vm-test: no QEMU stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    if tx
                        .send(line.trim_end_matches(['\r', '\n']).to_owned())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });

    let deadline = started + timeout;
    let mut outcome = Outcome {
        rc: None,
        boot_secs: None,
        test_secs: None,
        vm_secs: 0.0,
    };
    let mut timed_out = false;
    let mut out = std::io::stdout();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            timed_out = true;
            break;
        }
        match rx.recv_timeout(left) {
            Ok(line) => {
                let _ = writeln!(out, "vm| {line}");
                let t = started.elapsed().as_secs_f64();
                if line.contains("GUEST-BOOTED") && outcome.boot_secs.is_none() {
                    outcome.boot_secs = Some(t);
                    let _ = writeln!(out, "vm-test: guest up after {t:.1}s");
                }
                if let Some(rest) = line.split("GUEST-TESTS-SECONDS ").nth(1) {
                    outcome.test_secs = rest.trim().parse().ok();
                }
                if let Some(rest) = line.split("GUEST-DONE rc=").nth(1) {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    outcome.rc = digits.parse().ok().or(Some(1));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if timed_out {
        eprintln!(
            "vm-test: timeout after {}s: killing QEMU (pid {})",
            timeout.as_secs(),
            child.id()
        );
        let _ = child.kill();
    }
    let status = child.wait()?;
    let _ = reader.join();
    outcome.vm_secs = started.elapsed().as_secs_f64();
    println!(
        "vm-test: QEMU exited ({}) after {:.1}s",
        crate::cmd::describe_status(status),
        outcome.vm_secs
    );
    if timed_out {
        return Err(format!(
            "vm-test: the VM did not finish within {}s",
            timeout.as_secs()
        )
        .into());
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_package_from_apt_cache_depends() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            parse_kernel_depends(out).as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        assert_eq!(parse_kernel_depends("linux-image-amd64\n"), None);
    }

    #[test]
    fn test_executables_from_cargo_json() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/tagmatch-verbs-sys#0.1.0","target":{"kind":["custom-build"]},"profile":{"test":false},"executable":null}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/tagmatch-verbs-sys#0.1.0","target":{"kind":["test"],"name":"verbs"},"profile":{"opt_level":"0","test":true},"executable":"/t/debug/deps/verbs-abc"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"registry+https://x#cc@1.2","profile":{"test":true},"executable":"/t/debug/deps/other"}"#,
            "\n",
            // A plain binary (built for CARGO_BIN_EXE_*): its target says test, its profile
            // does not.
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/tagmatch-verbs-sys#0.1.0","target":{"kind":["bin"],"name":"tool","test":true},"profile":{"opt_level":"0","test":false},"executable":"/t/debug/tool"}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        assert_eq!(
            test_executables(json, "tagmatch-verbs-sys"),
            [PathBuf::from("/t/debug/deps/verbs-abc")]
        );
    }

    #[test]
    fn module_lookup_in_modules_dep() {
        let deps =
            "kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko\nkernel/net/9p/9pnet.ko:\n";
        assert_eq!(module_path(deps, "9pnet"), Some("kernel/net/9p/9pnet.ko"));
        assert_eq!(
            module_path(deps, "9pnet_virtio"),
            Some("kernel/net/9p/9pnet_virtio.ko")
        );
        assert_eq!(module_path(deps, "9p"), None);
    }

    #[test]
    fn cpio_is_newc_and_aligned() {
        let mut c = Cpio::default();
        c.file("init", b"#!/bin/sh\n", 0o755);
        let bytes = c.finish();
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        assert!(bytes.windows(10).any(|w| w == b"TRAILER!!!"));
    }

    #[test]
    fn timeout_resolution() {
        assert_eq!(resolve_timeout(Some("42")).unwrap(), 42);
        assert!(resolve_timeout(Some("0")).is_err());
        assert!(resolve_timeout(Some("x")).is_err());
    }
}

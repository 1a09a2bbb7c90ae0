//! Installing Debian/Ubuntu packages that a CI stage needs (e.g. a future `vm-test` stage).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cmd::Cmd;
use crate::Result;

/// Whether this process has already run `apt-get update`.
static APT_UPDATED: AtomicBool = AtomicBool::new(false);

/// Makes sure every package in `packages` is installed.
///
/// Checks each with `dpkg -s`; if any is missing, runs `apt-get update` (at most once per
/// xtask run) and then `apt-get install -y --no-install-recommends <missing...>`. Runs apt
/// directly when root, through `sudo` otherwise, and fails with a clear message when neither
/// is possible.
pub fn ensure_apt(packages: &[&str]) -> Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    if let Some(bad) = packages
        .iter()
        .find(|p| p.is_empty() || p.starts_with('-') || p.contains(char::is_whitespace))
    {
        return Err(format!("apt: invalid package name {bad:?}").into());
    }

    let mut missing = Vec::new();
    for &pkg in packages {
        if is_installed(pkg)? {
            println!("apt: {pkg}: already installed");
        } else {
            println!("apt: {pkg}: not installed");
            missing.push(pkg);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }

    let use_sudo = need_sudo()?;
    println!("apt: installing {}", missing.join(" "));
    if !APT_UPDATED.swap(true, Ordering::SeqCst) {
        apt_get(use_sudo).arg("update").run()?;
    }
    apt_get(use_sudo)
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .run()?;

    let still_missing: Vec<&str> = missing
        .iter()
        .copied()
        .filter(|p| !is_installed(p).unwrap_or(false))
        .collect();
    if !still_missing.is_empty() {
        return Err(format!(
            "apt: packages still not installed after apt-get install: {}",
            still_missing.join(" ")
        )
        .into());
    }
    Ok(())
}

/// `dpkg -s <pkg>` succeeds *and* reports `Status: install ok installed` (a removed package
/// whose config files remain also makes `dpkg -s` succeed).
fn is_installed(pkg: &str) -> Result<bool> {
    let Some((status, stdout)) = Cmd::new("dpkg").args(["-s", pkg]).probe() else {
        return Err("apt: `dpkg` not found; ensure_apt only works on Debian/Ubuntu".into());
    };
    Ok(status.success()
        && stdout
            .lines()
            .any(|l| l.trim() == "Status: install ok installed"))
}

/// `false` when running as root, `true` when not root but `sudo` is available.
fn need_sudo() -> Result<bool> {
    let uid = Cmd::new("id")
        .arg("-u")
        .probe()
        .filter(|(status, _)| status.success())
        .map(|(_, out)| out.trim().to_owned());
    if uid.as_deref() == Some("0") {
        return Ok(false);
    }
    let has_sudo = Cmd::new("sudo")
        .arg("--version")
        .probe()
        .is_some_and(|(s, _)| s.success());
    if has_sudo {
        println!("apt: not running as root; using sudo");
        Ok(true)
    } else {
        Err(
            "apt: packages must be installed but this is not running as root and `sudo` \
             is not available; install them manually or rerun as root"
                .into(),
        )
    }
}

fn apt_get(use_sudo: bool) -> Cmd {
    if use_sudo {
        // `sudo env ...` keeps DEBIAN_FRONTEND even when sudoers resets the environment.
        Cmd::new("sudo").args(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"])
    } else {
        Cmd::new("apt-get").env("DEBIAN_FRONTEND", "noninteractive")
    }
}

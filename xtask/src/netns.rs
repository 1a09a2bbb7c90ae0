//! `cargo xtask netns`: the multi-host tests (two network namespaces joined by a veth pair;
//! each test creates and removes its namespaces itself) with `TAGMATCH_NETNS_REQUIRED=1`,
//! so that a host where namespaces cannot be made fails instead of skipping: that of
//! `tagmatch-transport` (a UDP-device peer process in each namespace), then `tagmatch
//! perf` server and client on two hosts (`tagmatch-cli`'s `perf_netns`). Needs root and
//! iproute2 (installed if missing).

use std::path::Path;

use crate::ci::Outcome;
use crate::cmd::Cmd;
use crate::Result;

/// Runs the netns tests; skipped (with the reason) when not root.
pub fn run(root: &Path) -> Result<Outcome> {
    let uid = Cmd::new("id")
        .arg("-u")
        .probe()
        .map(|(_, out)| out.trim().to_owned());
    if uid.as_deref() != Some("0") {
        return Ok(Outcome::Skipped(
            "network namespaces need root (run as root, as CI does)".into(),
        ));
    }
    crate::apt::ensure_apt(&["iproute2"])?;
    for (package, test) in [
        ("tagmatch-transport", "netns"),
        ("tagmatch-cli", "perf_netns"),
    ] {
        Cmd::cargo()
            .args(["test", "-p", package, "--test", test])
            .env("TAGMATCH_NETNS_REQUIRED", "1")
            .current_dir(root)
            .run()?;
    }
    Ok(Outcome::Ok)
}

//! `cargo xtask netns`: the multi-host test of `tagmatch-transport` (two network namespaces
//! joined by a veth pair, a UDP-device peer process in each; the test creates and removes
//! the namespaces itself) with `TAGMATCH_NETNS_REQUIRED=1`, so that a host where namespaces
//! cannot be made fails instead of skipping. Needs root and iproute2 (installed if missing).

use std::path::Path;

use crate::ci::Outcome;
use crate::cmd::Cmd;
use crate::Result;

/// Runs the netns test; skipped (with the reason) when not root.
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
    Cmd::cargo()
        .args(["test", "-p", "tagmatch-transport", "--test", "netns"])
        .env("TAGMATCH_NETNS_REQUIRED", "1")
        .current_dir(root)
        .run()?;
    Ok(Outcome::Ok)
}

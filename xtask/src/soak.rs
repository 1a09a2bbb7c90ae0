//! `cargo xtask soak`: the long tagmatch-rdm soak (`tests/soak.rs`, `soak_long`) in a release
//! build. `cargo test` runs a 20,000-operation version on every build; this runs 100,000
//! operations per seed of random sizes and subprotocols under reordering and faults. Then
//! (without `--seed`) the engine's model-checked reorder walks
//! (`tagmatch-engine/tests/review_reorder18.rs`), which `cargo test` skips in debug builds:
//! about a minute in release, more than ten unoptimised.

use std::path::Path;

use crate::cmd::Cmd;
use crate::Result;

/// Operations per seed when not told otherwise.
pub const DEFAULT_MESSAGES: u64 = 100_000;

/// Runs the ignored `soak_long` test with `messages` operations per seed.
pub fn run(root: &Path, messages: u64, seed: Option<&str>) -> Result<()> {
    if messages == 0 {
        return Err("--messages takes a positive whole number".into());
    }
    println!("xtask soak: {messages} operations per seed on 4 endpoints (release build)");
    let mut cmd = Cmd::cargo()
        .args([
            "test",
            "-p",
            "tagmatch-rdm",
            "--release",
            "--test",
            "soak",
            "--",
            "--ignored",
            "--nocapture",
        ])
        .env("TAGMATCH_SOAK_MESSAGES", messages.to_string())
        .current_dir(root);
    if let Some(seed) = seed {
        cmd = cmd.env("TAGMATCH_SOAK_SEED", seed);
    }
    cmd.run()?;
    if seed.is_some() {
        return Ok(());
    }
    println!("xtask soak: the engine's model-checked reorder walks (release build)");
    Cmd::cargo()
        .args([
            "test",
            "-p",
            "tagmatch-engine",
            "--release",
            "--test",
            "review_reorder18",
            "--",
            "--include-ignored",
        ])
        .current_dir(root)
        .run()
}

//! `tagmatch`: the packet tool users debug with and the black-box conformance interface.
//!
//! - `tagmatch decode efa|tm <HEX>` prints one JSON object describing the packet;
//! - `tagmatch encode efa|tm <JSON>` prints the hex of the packet that JSON describes
//!   (decode output is valid encode input, and encode(decode(x)) is x with padding zeroed);
//! - `tagmatch demo` starts two live endpoints (in this process, or `--transport udp`: two
//!   processes on loopback), runs every EFA RDM v4 subprotocol between them and prints a
//!   table; `tagmatch demo --packets` round-trips a representative packet of every EFA and
//!   TM type through decode and encode instead;
//! - `tagmatch replay` runs a text trace through the matching engine;
//! - `tagmatch bench match` benchmarks the matching engine;
//! - `tagmatch perf` measures latency, bandwidth and message rate between two endpoints.
//!
//! Every subcommand is one module with an `Args` struct (clap derive) and a
//! `run(Args) -> Result<(), Error>`; adding one is a `mod` line, a [`Command`] variant and a
//! match arm. Failures print one line, `tagmatch: <context>: <message>`, on stderr and exit
//! with status 1; clap usage errors keep clap's status 2.
#![forbid(unsafe_code)]

mod bench;
mod cpu;
mod decode;
mod demo;
mod efa;
mod encode;
mod error;
mod format;
mod hex;
mod input;
mod json;
mod perf;
mod replay;
mod tm;

/// What `--transport verbs` answers in a build without the `verbs` feature.
#[cfg_attr(feature = "verbs", allow(dead_code))]
const NO_VERBS: &str = "--transport verbs: this tagmatch was built without its `verbs` feature \
     (cargo install tagmatch-cli --features verbs, or cargo build -p tagmatch-cli --features \
     verbs; needs libibverbs-dev); use mem or udp";

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use error::Error;

/// Command-line interface of `tagmatch`.
#[derive(Debug, Parser)]
#[command(name = "tagmatch", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands, one module each.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode one packet (hex or raw bytes) and print it as a JSON object.
    Decode(decode::Args),
    /// Encode a packet from its JSON description and print its hex.
    Encode(encode::Args),
    /// Run every EFA RDM v4 subprotocol between two live endpoints and print a table.
    ///
    /// The two endpoints are in this process (`--transport mem`, the default), in two
    /// processes over loopback UDP (`--transport udp`: this binary spawns itself as the
    /// responder), or on an RDMA device (`--transport verbs`, with the `verbs` feature).
    /// Every row moves real data and checks every byte; exits 1 if any failed.
    /// `--packets` is the packet-level demo instead: a representative packet of every EFA
    /// and TM type round-trips through decode and encode.
    Demo(demo::Args),
    /// Run a text trace of posts/arrivals/probes through the matching engine.
    Replay(replay::Args),
    /// Benchmark the matching engine (`bench match`).
    Bench(bench::Args),
    /// Latency, bandwidth and message rate between two endpoints (`ucx_perftest`-like).
    Perf(perf::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => decode::run(args),
        Command::Encode(args) => encode::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Perf(args) => perf::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Nothing sensible is left to do if stderr itself is gone.
            let _ = writeln!(std::io::stderr(), "tagmatch: {e}");
            ExitCode::FAILURE
        }
    }
}

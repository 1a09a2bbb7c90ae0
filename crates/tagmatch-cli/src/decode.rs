//! `tagmatch decode efa|tm <HEX>...|-|--file F`: one packet in, one JSON object out.

use std::path::PathBuf;

use crate::format::Format;
use crate::{input, Error};

/// Arguments of `tagmatch decode`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Packet format.
    #[arg(value_enum)]
    pub format: Format,
    /// The packet as hex; spaces are ignored and the hex may be split across arguments.
    /// `-` reads the hex from stdin.
    #[arg(
        value_name = "HEX",
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    pub hex: Vec<String>,
    /// Read the packet as raw bytes from a file (`-` for stdin) instead of hex.
    #[arg(long, value_name = "F")]
    pub file: Option<PathBuf>,
    /// Print the JSON over several indented lines instead of one.
    #[arg(long)]
    pub pretty: bool,
}

/// Runs `tagmatch decode`.
pub fn run(args: Args) -> Result<(), Error> {
    let context = format!("decode {}", args.format.name());
    let fail = |e: String| Error::new(context.as_str(), e);
    let bytes = match &args.file {
        Some(path) => input::file_bytes(path),
        None => input::hex_args(&args.hex),
    }
    .map_err(fail)?;
    let value = args.format.decode(&bytes).map_err(fail)?;
    let text = if args.pretty {
        serde_json::to_string_pretty(&value)
    } else {
        serde_json::to_string(&value)
    }
    .map_err(|e| fail(e.to_string()))?;
    input::print_line(&text).map_err(fail)
}

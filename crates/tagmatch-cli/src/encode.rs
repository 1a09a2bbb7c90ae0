//! `tagmatch encode efa|tm <JSON>|-`: one JSON object in (decode's output format), the
//! packet's hex out.

use crate::format::Format;
use crate::{input, Error};

/// Arguments of `tagmatch encode`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Packet format.
    #[arg(value_enum)]
    pub format: Format,
    /// The packet as a JSON object, as `tagmatch decode` prints it; `-` reads it from stdin.
    #[arg(value_name = "JSON")]
    pub json: String,
}

/// Runs `tagmatch encode`.
pub fn run(args: Args) -> Result<(), Error> {
    let context = format!("encode {}", args.format.name());
    let fail = |e: String| Error::new(context.as_str(), e);
    let text = input::text_arg(&args.json).map_err(fail)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| fail(format!("invalid JSON: {e}")))?;
    let bytes = args.format.encode(&value).map_err(fail)?;
    input::print_line(&crate::hex::format(&bytes)).map_err(fail)
}

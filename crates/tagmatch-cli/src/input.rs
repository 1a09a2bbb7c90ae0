//! Where the bytes and text come from (an argument, stdin with `-`, or a file) and where the
//! result goes (stdout, write errors reported instead of panicking).

use std::io::{Read, Write};
use std::path::Path;

/// Reads all of stdin.
fn stdin_bytes() -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut buf)
        .map_err(|e| format!("reading stdin: {e}"))?;
    Ok(buf)
}

/// The text of a positional argument, or all of stdin when it is `-`.
pub fn text_arg(arg: &str) -> Result<String, String> {
    if arg == "-" {
        let bytes = stdin_bytes()?;
        String::from_utf8(bytes).map_err(|e| format!("stdin is not UTF-8: {e}"))
    } else {
        Ok(arg.to_owned())
    }
}

/// Bytes from hex given as one or more arguments (joined, so a dump may be split across
/// arguments), or hex read from stdin when the only argument is `-`.
pub fn hex_args(args: &[String]) -> Result<Vec<u8>, String> {
    let text = match args {
        [one] => text_arg(one)?,
        many => many.join(" "),
    };
    crate::hex::parse(&text)
}

/// The raw bytes of a file, or of stdin when the path is `-`.
pub fn file_bytes(path: &Path) -> Result<Vec<u8>, String> {
    if path.as_os_str() == "-" {
        stdin_bytes()
    } else {
        std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))
    }
}

/// Writes `text` and a newline to stdout.
pub fn print_line(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing stdout: {e}"))
}

//! The one error type of the binary: a context (the subcommand, e.g. `decode efa`) and a
//! one-line message.

use std::fmt;

/// A failure, printed by `main` as `tagmatch: <context>: <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    context: String,
    message: String,
}

impl Error {
    /// An error of subcommand `context` (e.g. `"decode efa"`).
    pub fn new(context: impl Into<String>, message: impl fmt::Display) -> Self {
        Error {
            context: context.into(),
            // One line on stderr, whatever the message source.
            message: message.to_string().replace(['\n', '\r'], " "),
        }
    }

    /// The message without its context.
    #[allow(dead_code)]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.context.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.context, self.message)
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_with_context() {
        let e = Error::new("decode efa", "a\nb");
        assert_eq!(e.to_string(), "decode efa: a b");
        assert_eq!(e.message(), "a b");
        assert_eq!(Error::new("", "x").to_string(), "x");
    }
}

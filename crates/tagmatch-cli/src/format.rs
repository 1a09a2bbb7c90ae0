//! The two wire formats `decode` and `encode` speak.

use clap::ValueEnum;
use serde_json::Value;

/// Which packet format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// EFA RDM protocol v4 (little-endian).
    Efa,
    /// rdma-core tag matching: TMH, RVH for RNDV/FIN, payload (big-endian).
    Tm,
}

impl Format {
    /// `"efa"` or `"tm"`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Efa => "efa",
            Format::Tm => "tm",
        }
    }

    /// The JSON object of one packet.
    pub fn decode(self, bytes: &[u8]) -> Result<Value, String> {
        match self {
            Format::Efa => crate::efa::decode(bytes),
            Format::Tm => crate::tm::decode(bytes),
        }
    }

    /// The bytes of the packet a JSON object describes.
    pub fn encode(self, v: &Value) -> Result<Vec<u8>, String> {
        match self {
            Format::Efa => crate::efa::encode(v),
            Format::Tm => crate::tm::encode(v),
        }
    }
}

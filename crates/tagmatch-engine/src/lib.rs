//! `tagmatch-engine`: MPI tag matching in constant time, wildcards included.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod engine;
mod hash;
mod index;
mod list;
mod slab;
mod types;
pub mod workload;

pub use engine::{Engine, MAX_REORDER_WINDOW};
pub use types::*;

//! Real ibverbs devices (feature `verbs`): work in progress.
// The only place of this crate allowed to use `unsafe` (FFI to libibverbs); every block
// carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

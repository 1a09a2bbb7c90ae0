//! Placeholder until the matching benches land.
fn main() {}

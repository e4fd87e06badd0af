//! rcomm-cc: placeholder until the wrapper lands.
fn main() {}

//! guestlink: host CLI.
#![forbid(unsafe_code)]
fn main() {}

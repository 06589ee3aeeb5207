//! guestlink-session: the per-user desktop agent.
#![forbid(unsafe_code)]
fn main() {}

//! guestlinkd: the guest's root daemon.
#![forbid(unsafe_code)]
fn main() {}

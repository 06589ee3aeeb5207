//! guestlink host library.
#![forbid(unsafe_code)]

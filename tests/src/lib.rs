//! Shared helpers for guestlink's integration tests.
#![forbid(unsafe_code)]

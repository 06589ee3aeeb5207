//! Shared helpers for guestlink's integration tests: starting `qemu-ga` / `guestlinkd` safely ([`agent`]), a
//! black-box QGA client ([`client`]) and reply-shape comparison for the differential test ([`shape`]).
#![forbid(unsafe_code)]

pub mod agent;
pub mod bins;
pub mod client;
pub mod shape;

pub use agent::{Agent, AgentKind};
pub use client::{error_of, Client};

/// Defines `mod $name { #[test] fn qemu_ga(); #[test] fn guestlinkd(); }`, both running `$body` with `$kind`
/// bound to the agent kind, so each agent's result is reported separately
/// (`cargo test -p guestlink-tests -- qemu_ga` runs only the reference).
#[macro_export]
macro_rules! both_agents {
    ($(#[$m:meta])* fn $name:ident($kind:ident) $body:block) => {
        $(#[$m])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn run($kind: $crate::AgentKind) $body
            #[test]
            fn qemu_ga() {
                run($crate::AgentKind::QemuGa);
            }
            #[test]
            fn guestlinkd() {
                run($crate::AgentKind::Guestlinkd);
            }
        }
    };
}

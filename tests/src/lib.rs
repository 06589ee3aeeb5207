//! The one harness library of guestlink's integration tests (every file in `tests/tests/` is a test target and
//! takes its helpers from here):
//!
//! | module | what it gives a test |
//! |---|---|
//! | [`gate`] | whether a missing peer skips or fails (`GUESTLINK_REQUIRE_*`): the only skip logic |
//! | [`qga_agent`], [`client`], [`shape`] | qemu-ga / guestlinkd started safely (block list), a QGA client, reply shapes |
//! | [`bins`] | the workspace binaries under test |
//! | [`dbus`] | a private dbus-daemon, ready when it listens |
//! | [`vm`] | the QEMU micro-VM (`tests/vm/`) |
//! | [`session`], [`x11`], [`wayland`] | guestlink-session against Xvfb/Xorg or a headless compositor |
//! | [`spice`] | SPICE end-to-end: relay, host/agent peers, fake login1 |

// A harness: a failed set-up step is a failed test, so helpers unwrap and panic with context like test code does
// (the workspace denies unwrap/expect in every other library).
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bins;
pub mod client;
pub mod dbus;
pub mod gate;
pub mod qga_agent;
pub mod session;
pub mod shape;
pub mod spice;
pub mod vm;
pub mod wayland;
pub mod x11;

pub use client::{error_of, Client};
pub use qga_agent::{QgaAgent, QgaAgentKind};

/// Defines `mod $name { #[test] fn qemu_ga(); #[test] fn guestlinkd(); }`, both running `$body` with `$kind`
/// bound to the agent kind, so each agent's result is reported separately
/// (`cargo test -p tests -- qemu_ga` runs only the reference).
#[macro_export]
macro_rules! both_agents {
    ($(#[$m:meta])* fn $name:ident($kind:ident) $body:block) => {
        $(#[$m])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn run($kind: $crate::QgaAgentKind) $body
            #[test]
            fn qemu_ga() {
                run($crate::QgaAgentKind::QemuGa);
            }
            #[test]
            fn guestlinkd() {
                run($crate::QgaAgentKind::Guestlinkd);
            }
        }
    };
}

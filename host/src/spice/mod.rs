//! SPICE agent operations from the host: the host plays spice-server and the SPICE client on the guest's
//! `com.redhat.spice.0` port (a QEMU `-chardev socket` or a character device), so it works against guestlinkd and
//! against the reference spice-vdagentd alike.
//!
//! - [`SpiceLink`]: connection, capability handshake (spice-gtk's caps 0x00035077, `request = 1`), message pump;
//! - [`ops`]: clipboard get/set, resize (MONITORS_CONFIG), file transfer, state.
//!
//! The `guestlink clipboard|resize|send-file|spice-state` subcommands are in the binary (`host/src/cli/spice.rs`).

pub mod link;
pub mod ops;

pub use link::SpiceLink;

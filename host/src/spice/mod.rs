//! SPICE agent operations from the host: the host plays spice-server and the SPICE client on the guest's
//! `com.redhat.spice.0` port (a QEMU `-chardev socket` or a character device), so it works against guestlinkd and
//! against the reference spice-vdagentd alike.
//!
//! - [`SpiceLink`]: connection, capability handshake (spice-gtk's caps 0x00035077, `request = 1`), message pump;
//! - [`ops`]: clipboard get/set, resize (MONITORS_CONFIG), file transfer, state;
//! - [`cli`]: the `guestlink clipboard|resize|send-file|spice-state` subcommands.

pub mod cli;
pub mod link;
pub mod ops;

use std::path::PathBuf;
use std::time::Duration;

pub use link::SpiceLink;

/// Errors of the SPICE operations.
#[derive(Debug, thiserror::Error)]
pub enum SpiceError {
    /// No `--spice-socket` was given.
    #[error("this command needs --spice-socket PATH (the chardev of the guest's com.redhat.spice.0 port)")]
    NoPath,
    /// Opening the port failed.
    #[error("cannot open {}", .path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Nothing answered the capability announcement.
    #[error(
        "no SPICE agent answered on {} within {} s (the guest daemon opens its port only while a desktop session agent runs)",
        .path.display(), .timeout.as_secs_f64()
    )]
    NoAgent {
        /// The port path.
        path: PathBuf,
        /// How long we waited.
        timeout: Duration,
    },
    /// I/O on the port failed.
    #[error("SPICE port I/O failed")]
    Io(#[source] std::io::Error),
    /// The guest closed the port.
    #[error("the guest closed the SPICE port")]
    Closed,
    /// The guest sent bytes that break the protocol.
    #[error("SPICE protocol error: {0}")]
    Protocol(String),
    /// No answer in time.
    #[error("{what}: no answer from the guest within {} s", .timeout.as_secs_f64())]
    Timeout {
        /// What we waited for.
        what: &'static str,
        /// The timeout.
        timeout: Duration,
    },
    /// The guest has nothing (of that type) in the selection.
    #[error("the guest's {selection} selection is empty or has no {wanted} data")]
    ClipboardEmpty {
        /// Selection name.
        selection: String,
        /// Requested type name.
        wanted: String,
    },
    /// The guest refused a monitor configuration.
    #[error("the guest refused the monitor configuration")]
    ResizeRefused,
    /// A file transfer failed with a status from the guest.
    #[error("{name}: {reason}")]
    Transfer {
        /// File name.
        name: String,
        /// Human-readable reason.
        reason: String,
    },
    /// A local file could not be read or written.
    #[error("{what} {}", .path.display())]
    Local {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Invalid user input (e.g. a monitor spec).
    #[error("{0}")]
    Usage(String),
}

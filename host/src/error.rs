//! Error type of the host library.

use std::path::PathBuf;
use std::time::Duration;

/// An error reported by the agent itself (`{"error": {"class": …, "desc": …}}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{desc} ({class})")]
pub struct AgentError {
    /// QAPI error class, e.g. `GenericError` or `CommandNotFound`.
    pub class: String,
    /// Human-readable description as sent by the agent.
    pub desc: String,
}

impl AgentError {
    /// True when the agent does not know the command or has it disabled (blocked, frozen state).
    pub fn is_not_found(&self) -> bool {
        self.class == "CommandNotFound" || self.class == "CommandDisabled"
    }
}

/// Errors of the host library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing answered the initial guest-sync-delimited within the sync timeout.
    #[error(
        "no agent answered on {target} within {} s: is guestlinkd or qemu-ga running in the guest?",
        .timeout.as_secs_f64()
    )]
    NoAgent {
        /// Where we tried (socket or device path).
        target: String,
        /// The sync timeout that expired.
        timeout: Duration,
        /// The last connection error, when the socket could not even be connected.
        #[source]
        source: Option<std::io::Error>,
    },
    /// The socket or device path does not exist.
    #[error("{} does not exist", .0.display())]
    NoSuchPath(PathBuf),
    /// Connecting to or opening the target failed.
    #[error("cannot open {}", .path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing the agent channel failed.
    #[error("agent channel I/O failed")]
    Io(#[source] std::io::Error),
    /// The agent closed the connection.
    #[error("the agent closed the connection")]
    Closed,
    /// A command got no reply in time.
    #[error("{command}: no reply within {} s", .timeout.as_secs_f64())]
    Timeout {
        /// The command name.
        command: String,
        /// Its timeout.
        timeout: Duration,
    },
    /// The agent answered with an error.
    #[error("{command} failed")]
    Agent {
        /// The command name.
        command: String,
        /// The agent's error.
        #[source]
        source: AgentError,
    },
    /// The agent sent something that is not a valid reply.
    #[error("invalid reply to {command}: {detail}")]
    BadReply {
        /// The command name.
        command: String,
        /// What was wrong.
        detail: String,
    },
    /// A reply line exceeded the size bound.
    #[error("agent reply larger than {0} bytes")]
    ReplyTooLarge(usize),
    /// `virsh` could not be run.
    #[error("cannot run virsh")]
    VirshSpawn(#[source] std::io::Error),
    /// `virsh` failed (libvirt or agent error); the text is virsh's stderr.
    #[error("virsh qemu-agent-command failed: {0}")]
    Virsh(String),
    /// A request could not be built.
    #[error("invalid request: {0}")]
    BadRequest(String),
    /// A local file operation failed.
    #[error("{what} {}", .path.display())]
    Local {
        /// What was being done ("cannot read", "cannot create", …).
        what: &'static str,
        /// The host path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The end-to-end checksum did not match.
    #[error("sha256 mismatch for {path}: sent {expected}, guest has {actual}")]
    ChecksumMismatch {
        /// The file checked.
        path: String,
        /// Hash on the sending side.
        expected: String,
        /// Hash on the receiving side.
        actual: String,
    },
    /// A signal asked guestlink to stop.
    #[error("interrupted")]
    Interrupted,
    /// The guest lacks a capability the operation needs.
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    /// The agent error behind this error, if the agent answered with one.
    pub fn agent_error(&self) -> Option<&AgentError> {
        match self {
            Error::Agent { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result alias of the host library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

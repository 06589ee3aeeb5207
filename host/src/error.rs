//! The one error type of the host library, for the QGA channel and the SPICE port alike. Where the two channels
//! fail the same way (no agent, I/O, closed, timeout) one variant carries a [`Channel`] that picks the wording.

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

/// Which channel to the guest an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The QEMU guest agent channel (guestlinkd or qemu-ga).
    Qga,
    /// The guest's SPICE agent port (`com.redhat.spice.0`).
    Spice,
}

impl Channel {
    fn no_agent(self, target: &str, timeout: Duration) -> String {
        let secs = timeout.as_secs_f64();
        match self {
            Channel::Qga => format!(
                "no agent answered on {target} within {secs} s: is guestlinkd or qemu-ga running in the guest?"
            ),
            Channel::Spice => format!(
                "no SPICE agent answered on {target} within {secs} s (the guest daemon opens its port only while a \
                 desktop session agent runs)"
            ),
        }
    }

    fn io_failed(self) -> &'static str {
        match self {
            Channel::Qga => "agent channel I/O failed",
            Channel::Spice => "SPICE port I/O failed",
        }
    }

    fn closed(self) -> &'static str {
        match self {
            Channel::Qga => "the agent closed the connection",
            Channel::Spice => "the guest closed the SPICE port",
        }
    }

    fn no_reply(self) -> &'static str {
        match self {
            Channel::Qga => "no reply",
            Channel::Spice => "no answer from the guest",
        }
    }
}

/// Errors of the host library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing answered: the initial guest-sync-delimited (QGA) or the capability announcement (SPICE).
    #[error("{}", .channel.no_agent(.target, *.timeout))]
    NoAgent {
        /// The channel.
        channel: Channel,
        /// Where we tried (socket or device path).
        target: String,
        /// The timeout that expired.
        timeout: Duration,
        /// The last connection error, when the socket could not even be connected.
        #[source]
        source: Option<std::io::Error>,
    },
    /// A SPICE command was given without `--spice-socket`.
    #[error("this command needs --spice-socket PATH (the chardev of the guest's com.redhat.spice.0 port)")]
    NoSpicePath,
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
    /// Reading or writing the channel failed.
    #[error("{}", .0.io_failed())]
    Io(Channel, #[source] std::io::Error),
    /// The guest end closed the channel.
    #[error("{}", .0.closed())]
    Closed(Channel),
    /// A command got no reply in time.
    #[error("{what}: {} within {} s", .channel.no_reply(), .timeout.as_secs_f64())]
    Timeout {
        /// The channel.
        channel: Channel,
        /// The command name (QGA) or what was awaited (SPICE).
        what: String,
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
        /// What was being done ("cannot read", "cannot create", "cannot write", …).
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
    /// The SPICE agent sent bytes that break the protocol.
    #[error("SPICE protocol error: {0}")]
    SpiceProtocol(String),
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
    /// A SPICE file transfer failed with a status from the guest.
    #[error("{name}: {reason}")]
    Transfer {
        /// File name.
        name: String,
        /// Human-readable reason.
        reason: String,
    },
    /// Invalid user input (e.g. a monitor spec).
    #[error("{0}")]
    Usage(String),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI prints these messages; one variant per failure must keep each channel's wording.
    #[test]
    fn each_channel_keeps_its_wording() {
        let t = Duration::from_millis(1500);
        let no_agent = |channel| Error::NoAgent {
            channel,
            target: "/run/x".into(),
            timeout: t,
            source: None,
        };
        assert_eq!(
            no_agent(Channel::Qga).to_string(),
            "no agent answered on /run/x within 1.5 s: is guestlinkd or qemu-ga running in the guest?"
        );
        assert_eq!(
            no_agent(Channel::Spice).to_string(),
            "no SPICE agent answered on /run/x within 1.5 s (the guest daemon opens its port only while a desktop \
             session agent runs)"
        );
        let timeout = |channel| Error::Timeout {
            channel,
            what: "guest-ping".into(),
            timeout: t,
        };
        assert_eq!(
            timeout(Channel::Qga).to_string(),
            "guest-ping: no reply within 1.5 s"
        );
        assert_eq!(
            timeout(Channel::Spice).to_string(),
            "guest-ping: no answer from the guest within 1.5 s"
        );
        assert_eq!(
            Error::Closed(Channel::Qga).to_string(),
            "the agent closed the connection"
        );
        assert_eq!(
            Error::Closed(Channel::Spice).to_string(),
            "the guest closed the SPICE port"
        );
        let io = |channel| Error::Io(channel, std::io::ErrorKind::BrokenPipe.into());
        assert_eq!(io(Channel::Qga).to_string(), "agent channel I/O failed");
        assert_eq!(io(Channel::Spice).to_string(), "SPICE port I/O failed");
    }
}

//! Command errors and the one place they are turned into QGA wire errors (`impl From<CommandError> for QgaError`).
//! Every handler, the core's own (sync, info, fsfreeze) included, fails with a [`CommandError`].
//!
//! The texts follow qemu-ga: `error_setg_errno()` appends `": <strerror>"`, `QERR_QGA_COMMAND_FAILED` wraps the
//! message in "Guest agent command failed, error was '...'", and argument checks use the QAPI visitor texts.

use std::io;

use guestlink_protocol::qga::error::QgaError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// An error whose wire form is already final (argument checks, "invalid parameter", ...).
    #[error("{0}")]
    Qga(QgaError),
    /// A plain `GenericError` text.
    #[error("{0}")]
    Generic(String),
    /// A system call failed: `"<msg>: <strerror(errno)>"` like QEMU's `error_setg_errno`.
    #[error("{msg}: {text}", text = errno_text(*.errno))]
    Os {
        /// What was being done, e.g. "failed to read file".
        msg: String,
        /// The errno value.
        errno: i32,
    },
    /// "Guest agent command failed, error was '...'".
    #[error("Guest agent command failed, error was '{0}'")]
    CommandFailed(String),
    /// "this feature or command is not currently supported".
    #[error("{}", guestlink_protocol::qga::error::UNSUPPORTED_TEXT)]
    Unsupported,
    /// "value 'V' is invalid for argument NAME".
    #[error("value '{value}' is invalid for argument {name}")]
    InvalidValue {
        /// The rejected value as text.
        value: String,
        /// The argument name.
        name: &'static str,
    },
    /// "Invalid parameter 'NAME'".
    #[error("Invalid parameter '{0}'")]
    InvalidParameter(&'static str),
    /// guest-fsfreeze-*: a `GenericError` with the freezer's text.
    #[error(transparent)]
    Freeze(#[from] crate::freeze::FreezeError),
}

/// The C library's text for an errno value (strerror: "No such file or directory").
pub fn errno_text(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

impl CommandError {
    /// A [`CommandError::Generic`] from any text.
    pub fn generic(msg: impl Into<String>) -> Self {
        CommandError::Generic(msg.into())
    }

    /// `"<msg>: <strerror>"` from an I/O error (its OS code, or its own text when it has none).
    pub fn io(msg: impl Into<String>, err: &io::Error) -> Self {
        match err.raw_os_error() {
            Some(errno) => CommandError::Os {
                msg: msg.into(),
                errno,
            },
            None => CommandError::Generic(format!("{}: {err}", msg.into())),
        }
    }

    /// `"<msg>: <strerror>"` from a nix errno.
    pub fn errno(msg: impl Into<String>, errno: nix::errno::Errno) -> Self {
        CommandError::Os {
            msg: msg.into(),
            errno: errno as i32,
        }
    }

    /// "value 'V' is invalid for argument NAME".
    pub fn invalid_value(value: impl std::fmt::Display, name: &'static str) -> Self {
        CommandError::InvalidValue {
            value: value.to_string(),
            name,
        }
    }
}

/// The QGA error sent to the host: class and description exactly as qemu-ga would send them. The one mapping of
/// a command failure to the wire.
impl From<CommandError> for QgaError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Qga(e) => e,
            other => QgaError::generic(other.to_string()),
        }
    }
}

impl From<QgaError> for CommandError {
    fn from(e: QgaError) -> Self {
        CommandError::Qga(e)
    }
}

/// Result of a command.
pub type CommandResult<T> = Result<T, CommandError>;

#[cfg(test)]
mod tests {
    use super::*;
    use guestlink_protocol::qga::error::ErrorClass;

    #[test]
    fn texts_match_qemu() {
        let e = QgaError::from(CommandError::io(
            "failed to open file 'x' (mode: 'r')",
            &io::Error::from_raw_os_error(2),
        ));
        assert_eq!(
            e.desc,
            "failed to open file 'x' (mode: 'r'): No such file or directory"
        );
        assert_eq!(e.class, ErrorClass::GenericError);
        assert_eq!(
            QgaError::from(CommandError::invalid_value(-1, "count")).desc,
            "value '-1' is invalid for argument count"
        );
        assert_eq!(
            QgaError::from(CommandError::CommandFailed("boom".into())).desc,
            "Guest agent command failed, error was 'boom'"
        );
        assert_eq!(
            QgaError::from(CommandError::Unsupported).desc,
            "this feature or command is not currently supported"
        );
        let nf = QgaError::not_found("guest-x");
        assert_eq!(QgaError::from(CommandError::from(nf.clone())), nf);
    }
}

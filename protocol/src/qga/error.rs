//! QGA error replies: the QAPI error class and every description text clients match on.
//!
//! The texts are QEMU's (`qapi/qmp-dispatch.c`, `qapi/qobject-input-visitor.c`, `qapi/qapi-visit-core.c`,
//! `qobject/json-parser.c`, `qga/main.c`), so libvirt, Proxmox and `test-qga.c` see exactly what qemu-ga sends.

use serde::{Deserialize, Serialize};

/// The QAPI `ErrorClass` carried in `{"error": {"class": ..., "desc": ...}}`.
///
/// qemu-ga only ever sends [`ErrorClass::GenericError`] and [`ErrorClass::CommandNotFound`]; the other names exist so
/// a host can decode replies of old or foreign agents. Unknown class names decode as `GenericError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Every argument, parse and command failure.
    GenericError,
    /// Unknown command, and disabled (blocked, not allowed, frozen) command.
    CommandNotFound,
    /// Historical (pre-1.2) class for disabled commands; libvirt still recognises it.
    CommandDisabled,
    /// QAPI class never produced by QGA.
    DeviceNotActive,
    /// QAPI class never produced by QGA.
    DeviceNotFound,
    /// QAPI class never produced by QGA.
    KvmMissingCap,
}

impl Serialize for ErrorClass {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorClass {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(ErrorClass::from_name(&name))
    }
}

impl ErrorClass {
    /// Decodes a wire name; unknown names become `GenericError`.
    pub fn from_name(name: &str) -> Self {
        match name {
            "CommandNotFound" => ErrorClass::CommandNotFound,
            "CommandDisabled" => ErrorClass::CommandDisabled,
            "DeviceNotActive" => ErrorClass::DeviceNotActive,
            "DeviceNotFound" => ErrorClass::DeviceNotFound,
            "KVMMissingCap" => ErrorClass::KvmMissingCap,
            _ => ErrorClass::GenericError,
        }
    }

    /// The wire name of the class, e.g. `"GenericError"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::GenericError => "GenericError",
            ErrorClass::CommandNotFound => "CommandNotFound",
            ErrorClass::CommandDisabled => "CommandDisabled",
            ErrorClass::DeviceNotActive => "DeviceNotActive",
            ErrorClass::DeviceNotFound => "DeviceNotFound",
            ErrorClass::KvmMissingCap => "KVMMissingCap",
        }
    }
}

/// One QGA error: the body of an `{"error": ...}` reply.
///
/// Serializes as `{"class": ..., "desc": ...}` (QEMU's member order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{desc}")]
pub struct QgaError {
    /// The error class.
    pub class: ErrorClass,
    /// The human-readable description, matched verbatim by some clients.
    pub desc: String,
}

/// QEMU's `QERR_UNSUPPORTED` text.
pub const UNSUPPORTED_TEXT: &str = "this feature or command is not currently supported";

impl QgaError {
    /// A `GenericError` with the given description.
    pub fn generic(desc: impl Into<String>) -> Self {
        QgaError {
            class: ErrorClass::GenericError,
            desc: desc.into(),
        }
    }

    /// `CommandNotFound` "The command X has not been found".
    pub fn not_found(name: &str) -> Self {
        QgaError {
            class: ErrorClass::CommandNotFound,
            desc: format!("The command {name} has not been found"),
        }
    }

    /// `CommandNotFound` "Command X has been disabled" or "Command X has been disabled: REASON".
    ///
    /// Reasons qemu-ga uses: [`DISABLED_FROZEN`] and [`DISABLED_NOT_ALLOWED`]; the block-list gives none.
    pub fn disabled(name: &str, reason: Option<&str>) -> Self {
        let desc = match reason {
            Some(reason) => format!("Command {name} has been disabled: {reason}"),
            None => format!("Command {name} has been disabled"),
        };
        QgaError {
            class: ErrorClass::CommandNotFound,
            desc,
        }
    }

    /// "Parameter 'X' is unexpected" (an argument member the command does not have).
    pub fn param_unexpected(name: &str) -> Self {
        Self::generic(format!("Parameter '{name}' is unexpected"))
    }

    /// "Parameter 'X' is missing" (a required argument member is absent).
    pub fn param_missing(name: &str) -> Self {
        Self::generic(format!("Parameter '{name}' is missing"))
    }

    /// "Invalid parameter type for 'X', expected: Y" (`Y` is e.g. `integer`, `string`, `boolean`, `number`,
    /// `object`, `array`, or an alternate's type name).
    pub fn param_type(name: &str, expected: &str) -> Self {
        Self::generic(format!(
            "Invalid parameter type for '{name}', expected: {expected}"
        ))
    }

    /// "Parameter 'X' expects Y" (QEMU's `QERR_INVALID_PARAMETER_VALUE`, e.g. a non-integer for a `uint64`).
    pub fn param_expects(name: &str, expected: &str) -> Self {
        Self::generic(format!("Parameter '{name}' expects {expected}"))
    }

    /// "Parameter 'X' does not accept value 'V'" (an unknown enum value).
    pub fn param_bad_enum(name: &str, value: &str) -> Self {
        Self::generic(format!(
            "Parameter '{name}' does not accept value '{value}'"
        ))
    }

    /// "value 'V' is invalid for argument X" (e.g. `guest-file-read` with `count` out of range).
    pub fn invalid_value(value: impl std::fmt::Display, name: &str) -> Self {
        Self::generic(format!("value '{value}' is invalid for argument {name}"))
    }

    /// "Invalid parameter 'X'" (QEMU's `QERR_INVALID_PARAMETER`, e.g. an unknown exec pid in 7.2).
    pub fn invalid_parameter(name: &str) -> Self {
        Self::generic(format!("Invalid parameter '{name}'"))
    }

    /// "this feature or command is not currently supported".
    pub fn unsupported() -> Self {
        Self::generic(UNSUPPORTED_TEXT)
    }

    /// "Guest agent command failed, error was 'MSG'" (QEMU's `QERR_QGA_COMMAND_FAILED`).
    pub fn command_failed(msg: &str) -> Self {
        Self::generic(format!("Guest agent command failed, error was '{msg}'"))
    }

    /// "QMP input must be a JSON object".
    pub fn input_not_object() -> Self {
        Self::generic("QMP input must be a JSON object")
    }

    /// "QMP input lacks member 'X'".
    pub fn input_lacks_member(name: &str) -> Self {
        Self::generic(format!("QMP input lacks member '{name}'"))
    }

    /// "QMP input member 'X' must be a/an Y" — `what` is the full tail, e.g. `"a string"`, `"an object"`.
    pub fn input_member_type(name: &str, what: &str) -> Self {
        Self::generic(format!("QMP input member '{name}' must be {what}"))
    }

    /// "QMP input member 'X' is unexpected".
    pub fn input_member_unexpected(name: &str) -> Self {
        Self::generic(format!("QMP input member '{name}' is unexpected"))
    }

    /// "JSON parse error, MSG" (lexer and parser errors: "invalid keyword 'garbage'", "stray '\u{FFFD}'", ...).
    pub fn json_parse(msg: &str) -> Self {
        Self::generic(format!("JSON parse error, {msg}"))
    }

    /// "JSON token size limit exceeded".
    pub fn json_token_size() -> Self {
        Self::generic("JSON token size limit exceeded")
    }

    /// "JSON token count limit exceeded".
    pub fn json_token_count() -> Self {
        Self::generic("JSON token count limit exceeded")
    }

    /// "JSON nesting depth limit exceeded".
    pub fn json_depth() -> Self {
        Self::generic("JSON nesting depth limit exceeded")
    }

    /// Whether this error means "the agent does not offer this command" (libvirt's notion of unsupported).
    pub fn is_command_unavailable(&self) -> bool {
        matches!(
            self.class,
            ErrorClass::CommandNotFound | ErrorClass::CommandDisabled
        )
    }
}

/// `guest-*` disabled reason while the filesystems are frozen.
pub const DISABLED_FROZEN: &str = "the agent is in frozen state";
/// `guest-*` disabled reason for commands outside `--allow-rpcs`.
pub const DISABLED_NOT_ALLOWED: &str = "the command is not allowed";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_match_qemu() {
        assert_eq!(
            QgaError::not_found("guest-nonexistent").desc,
            "The command guest-nonexistent has not been found"
        );
        assert_eq!(
            QgaError::disabled("guest-fsfreeze-freeze", None).desc,
            "Command guest-fsfreeze-freeze has been disabled"
        );
        assert_eq!(
            QgaError::disabled("guest-exec", Some(DISABLED_FROZEN)).desc,
            "Command guest-exec has been disabled: the agent is in frozen state"
        );
        assert_eq!(
            QgaError::param_type("id", "integer").desc,
            "Invalid parameter type for 'id', expected: integer"
        );
        assert_eq!(
            QgaError::invalid_value(50331649, "count").desc,
            "value '50331649' is invalid for argument count"
        );
    }

    #[test]
    fn serializes_class_then_desc() {
        let s = serde_json::to_string(&QgaError::param_unexpected("foo")).unwrap();
        assert_eq!(
            s,
            r#"{"class":"GenericError","desc":"Parameter 'foo' is unexpected"}"#
        );
        let e: QgaError = serde_json::from_str(r#"{"class":"Weird","desc":"x"}"#).unwrap();
        assert_eq!(e.class, ErrorClass::GenericError);
        let e: QgaError = serde_json::from_str(r#"{"class":"KVMMissingCap","desc":"x"}"#).unwrap();
        assert_eq!(e.class, ErrorClass::KvmMissingCap);
    }
}

//! The error type of the vdagent codecs and the reassembler.

use thiserror::Error;

use super::header::MessageType;

/// Everything that can go wrong while reassembling, decoding or encoding vdagent data.
///
/// Reassembly errors (`InvalidPort`, `ChunkTooLarge`, `MessageTooLarge`, `LostSync`) are fatal for the stream: the
/// transport must reopen the port and call [`Reassembler::reset`](super::Reassembler::reset). Decode errors concern
/// one message only; the stream stays usable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum VdagentError {
    /// A chunk header names a port other than 1 (client) or 2 (server).
    #[error("Invalid chunk port {0}")]
    InvalidPort(u32),
    /// A chunk is larger than the configured chunk-size policy allows.
    #[error("Chunk of {size} bytes exceeds the limit of {max} bytes")]
    ChunkTooLarge {
        /// Size announced by the chunk header.
        size: u32,
        /// The limit in force.
        max: u32,
    },
    /// A message header announces a payload larger than the configured maximum.
    #[error("Message of {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// Payload size announced by the message header.
        size: u64,
        /// The limit in force.
        max: u64,
    },
    /// A chunk carries more bytes than the message it belongs to still needs.
    #[error("Lost sync: a chunk carries {extra} bytes beyond the end of its message")]
    LostSync {
        /// Bytes left in the chunk after the message ended.
        extra: u32,
    },
    /// The reassembler stopped after a fatal error and must be reset.
    #[error("Reassembler stopped after an earlier error; reset it")]
    Poisoned,
    /// The message header's protocol field is not `VD_AGENT_PROTOCOL` (1).
    #[error("Unsupported vdagent protocol {0}")]
    BadProtocol(u32),
    /// The message type is 0 or beyond the last known type.
    #[error("Unknown vdagent message type {0}")]
    UnknownType(u32),
    /// A payload has a size its message type does not allow.
    #[error("Invalid payload size {size} for {msg_type:?} (expected {expected})")]
    InvalidSize {
        /// The message type being decoded.
        msg_type: MessageType,
        /// The payload size found.
        size: usize,
        /// The rule that was violated, e.g. "exactly 13".
        expected: &'static str,
    },
    /// A count field claims more entries than allowed.
    #[error("Too many {what}: {count} (maximum {max})")]
    TooMany {
        /// What is being counted ("monitors", "device displays").
        what: &'static str,
        /// The count found on the wire.
        count: u64,
        /// The cap.
        max: u64,
    },
    /// An inner length field points beyond the end of the payload.
    #[error("{what} of {declared} bytes exceeds the {available} bytes left in the payload")]
    LengthOutOfBounds {
        /// The length field's name.
        what: &'static str,
        /// The length declared on the wire.
        declared: u64,
        /// The bytes actually left.
        available: u64,
    },
    /// `FILE_XFER_DATA`'s inner size field disagrees with the real payload.
    #[error("File data size field {declared} does not match the {actual} data bytes received")]
    FileDataSizeMismatch {
        /// The inner `size` field.
        declared: u64,
        /// Bytes actually present after the 12-byte header.
        actual: u64,
    },
    /// The `FILE_XFER_START` key file could not be parsed.
    #[error("Invalid file transfer metadata: {0}")]
    Keyfile(String),
    /// A value cannot be represented on the wire.
    #[error("Cannot encode: {0}")]
    Encode(&'static str),
}

/// Why a transferred file name was refused by [`validate_file_name`](super::validate_file_name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FileNameError {
    /// The name is empty.
    #[error("File name is empty")]
    Empty,
    /// The name is `.` or `..`.
    #[error("File name is a dot entry")]
    DotEntry,
    /// The name contains a `/` (absolute path or several components).
    #[error("File name contains a path separator")]
    Separator,
    /// The name contains a backslash (a Windows path separator).
    #[error("File name contains a backslash")]
    Backslash,
    /// The name contains a NUL byte.
    #[error("File name contains a NUL byte")]
    Nul,
    /// The name contains a control character (U+0000..U+001F or U+007F).
    #[error("File name contains a control character")]
    Control,
    /// The name contains an invisible formatting character (bidi override/embedding/isolate, directional mark,
    /// zero-width space, line/paragraph separator…): it could make `evil\u{202E}txt.exe` display as `evilexe.txt`.
    #[error("File name contains the invisible formatting character U+{:04X}", u32::from(*.0))]
    InvisibleFormat(char),
    /// The name is longer than 255 bytes.
    #[error("File name is {0} bytes long (maximum 255)")]
    TooLong(usize),
}

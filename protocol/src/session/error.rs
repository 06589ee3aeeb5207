//! The error type of the daemon ↔ session frame codec.

use thiserror::Error;

/// Errors of [`FrameDecoder`](super::FrameDecoder) and [`encode`](super::encode).
///
/// `BadMagic`, `UnsupportedVersion` and `FrameTooLarge` are fatal (the frame boundary is lost: close the
/// connection); the others concern one frame and the stream stays usable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The frame does not start with the guestlink magic.
    #[error("Bad frame magic {0:#06x}")]
    BadMagic(u16),
    /// The frame format version is not supported.
    #[error("Unsupported frame version {0}")]
    UnsupportedVersion(u16),
    /// The frame body is larger than the cap.
    #[error("Frame body of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// Announced body size.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// The decoder stopped after a fatal error.
    #[error("Frame decoder stopped after an earlier error")]
    Poisoned,
    /// The frame kind is not known to this version (skip it).
    #[error("Unknown frame kind {0}")]
    UnknownKind(u16),
    /// The metadata part is malformed.
    #[error("Malformed frame body: {0}")]
    BadBody(String),
    /// The kind in the frame header and the type in the metadata disagree.
    #[error("Frame kind {header} does not match its body ({body})")]
    KindMismatch {
        /// Kind in the header.
        header: u16,
        /// Kind of the message the metadata describes.
        body: u16,
    },
    /// A message without a data part carried data bytes.
    #[error("Frame kind {0} carries unexpected data bytes")]
    UnexpectedData(u16),
    /// The message cannot be encoded within the limits.
    #[error("Cannot encode: {0}")]
    Encode(&'static str),
}

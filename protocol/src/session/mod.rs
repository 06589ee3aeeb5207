//! Daemon ↔ session agent messages: versioned, length-prefixed frames with a hard size cap.
//!
//! guestlinkd (root, owns the virtio port) and guestlink-session (one per desktop session) talk over a unix
//! stream socket. Unlike spice-vdagent's udscs (host-endian 16-byte header, no length cap), every frame here
//! carries a magic, a format version and a length that is checked before anything is buffered.
//!
//! **Encoding choice.** A frame is a 12-byte binary header, then a body made of a small JSON metadata object
//! (serde_json, the message's fields tagged by `"type"`) followed by a raw binary data part. JSON keeps the
//! message set easy to extend and to debug (`unknown fields are ignored`, new kinds are skipped as
//! [`SessionError::UnknownKind`]); bulk bytes (clipboard data, file chunks) travel in the data part, so they are
//! never base64-inflated or JSON-escaped. See [`frame`] for the byte layout.

pub mod decoder;
pub mod error;
pub mod frame;
pub mod message;

pub use decoder::{FrameDecoder, FrameEvent};
pub use error::SessionError;
pub use frame::{decode_body, encode, encode_head, FrameHeader, FRAME_HEADER_SIZE, MAX_FRAME_BODY};
pub use message::{
    GeometryMonitor, SessionDeviceDisplay, SessionMessage, SessionMonitor, CAP_CLIPBOARD_FD,
    KIND_FILE_XFER_DATA, SESSION_PROTOCOL_VERSION,
};

//! SPICE vdagent protocol (`com.redhat.spice.0`): chunks, messages, capabilities, reassembly.
//!
//! Layers, bottom up:
//! - [`header`]: the 8-byte chunk header and the 20-byte message header (little endian, packed);
//! - [`Reassembler`]: stream bytes → `(Port, RawMessage)`, with per-port state and bounded memory;
//! - [`Message`]: typed payloads of all 16 message types, decoded/encoded under a [`WireFormat`] negotiated from
//!   both sides' [`Capabilities`];
//! - [`encode_message`]: message → chunked stream bytes ([`ChunkMode::Split`] towards the guest,
//!   [`ChunkMode::Single`] from it); the other encoders and when to use them: [`chunking`];
//! - helpers: [`GrabSerials`] for clipboard grab serials, [`validate_file_name`] for transferred files.
//!
//! The host is untrusted: every count and length from the wire is bounded (docs/protocol/vdagent.md#hostile-input).

pub mod caps;
pub mod chunking;
pub mod clipboard;
pub mod display;
mod error;
pub mod file_xfer;
pub mod header;
pub mod keyfile;
pub mod message;
pub mod reassembly;
mod wire;

pub use caps::{Capabilities, Capability};
pub use chunking::{
    encode_message, encode_raw_message, encode_raw_message_holes, encode_raw_message_into,
    encode_single_head, ChunkMode,
};
pub use clipboard::{ClipboardType, GrabSerials, Selection, SerialRule};
pub use display::{
    AudioVolumeSync, DeviceDisplayInfo, DisplayConfig, GraphicsDeviceInfo, MonitorConfig,
    MonitorMm, MonitorsConfig, MouseState,
};
pub use error::{FileNameError, VdagentError};
pub use file_xfer::{
    validate_file_name, FileXferData, FileXferDetail, FileXferResult, FileXferStart, FileXferStatus,
};
pub use header::{MessageHeader, MessageType, Port};
pub use message::{Message, RawMessage, ReplyResult, WireFormat};
pub use reassembly::{Reassembler, ReassemblerConfig, ReassemblyEvent};

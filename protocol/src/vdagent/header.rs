//! Fixed-size headers: the 8-byte `VDIChunkHeader`, the 20-byte `VDAgentMessage` header, ports and message types.
//!
//! Everything is little endian and packed, as in spice-protocol `spice/vd_agent.h`.

use super::error::VdagentError;

/// Size of a `VDIChunkHeader` on the wire.
pub(crate) const CHUNK_HEADER_SIZE: usize = 8;
/// Size of a `VDAgentMessage` header on the wire.
pub(crate) const MESSAGE_HEADER_SIZE: usize = 20;
/// `VD_AGENT_PROTOCOL`: the only protocol value in use.
pub(crate) const VD_AGENT_PROTOCOL: u32 = 1;
/// `VD_AGENT_MAX_DATA_SIZE`: the largest chunk body sent to the guest.
pub(crate) const MAX_CHUNK_DATA_SIZE: usize = 2048;

/// A chunk port (`VDP_CLIENT_PORT` / `VDP_SERVER_PORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    /// Port 1: the SPICE client.
    Client,
    /// Port 2: spice-server itself.
    Server,
}

impl Port {
    /// Parses a wire port number; anything but 1 and 2 is an error.
    pub fn from_u32(value: u32) -> Result<Self, VdagentError> {
        match value {
            1 => Ok(Self::Client),
            2 => Ok(Self::Server),
            other => Err(VdagentError::InvalidPort(other)),
        }
    }

    /// The wire value (1 or 2).
    pub fn as_u32(self) -> u32 {
        match self {
            Self::Client => 1,
            Self::Server => 2,
        }
    }

    /// Index 0 or 1, for per-port state tables.
    pub fn index(self) -> usize {
        match self {
            Self::Client => 0,
            Self::Server => 1,
        }
    }
}

/// `VDIChunkHeader`: port and size of the bytes that follow. The port is kept raw so decoding never fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    /// Raw port number (1 = client, 2 = server).
    pub port: u32,
    /// Number of bytes following this header.
    pub size: u32,
}

impl ChunkHeader {
    /// Decodes the 8 header bytes.
    pub fn decode(bytes: &[u8; CHUNK_HEADER_SIZE]) -> Self {
        Self {
            port: u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            size: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        }
    }

    /// Encodes the 8 header bytes.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_SIZE] {
        let mut out = [0u8; CHUNK_HEADER_SIZE];
        out[..4].copy_from_slice(&self.port.to_le_bytes());
        out[4..].copy_from_slice(&self.size.to_le_bytes());
        out
    }
}

/// `VDAgentMessage` header: protocol, type, opaque, payload size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// Protocol; must be [`VD_AGENT_PROTOCOL`].
    pub protocol: u32,
    /// Raw message type (see [`MessageType`]).
    pub msg_type: u32,
    /// Opaque value, 0 in practice.
    pub opaque: u64,
    /// Payload size in bytes.
    pub size: u32,
}

impl MessageHeader {
    /// A header for `msg_type` with protocol 1, opaque 0 and the given payload size.
    pub fn new(msg_type: u32, size: u32) -> Self {
        Self {
            protocol: VD_AGENT_PROTOCOL,
            msg_type,
            opaque: 0,
            size,
        }
    }

    /// Decodes the 20 header bytes.
    pub fn decode(bytes: &[u8; MESSAGE_HEADER_SIZE]) -> Self {
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let mut opaque = [0u8; 8];
        opaque.copy_from_slice(&bytes[8..16]);
        Self {
            protocol: u32_at(0),
            msg_type: u32_at(4),
            opaque: u64::from_le_bytes(opaque),
            size: u32_at(16),
        }
    }

    /// Encodes the 20 header bytes.
    pub fn encode(&self) -> [u8; MESSAGE_HEADER_SIZE] {
        let mut out = [0u8; MESSAGE_HEADER_SIZE];
        out[..4].copy_from_slice(&self.protocol.to_le_bytes());
        out[4..8].copy_from_slice(&self.msg_type.to_le_bytes());
        out[8..16].copy_from_slice(&self.opaque.to_le_bytes());
        out[16..].copy_from_slice(&self.size.to_le_bytes());
        out
    }
}

/// The 16 vdagent message types (`VD_AGENT_MOUSE_STATE` = 1 … `VD_AGENT_GRAPHICS_DEVICE_INFO` = 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// 1: absolute mouse position and buttons (server → agent).
    MouseState,
    /// 2: monitor layout to apply.
    MonitorsConfig,
    /// 3: acknowledgement of MONITORS_CONFIG / DISPLAY_CONFIG.
    Reply,
    /// 4: clipboard data.
    Clipboard,
    /// 5: Windows display tweaks.
    DisplayConfig,
    /// 6: capability announcement.
    AnnounceCapabilities,
    /// 7: clipboard ownership taken.
    ClipboardGrab,
    /// 8: clipboard data requested.
    ClipboardRequest,
    /// 9: clipboard ownership dropped.
    ClipboardRelease,
    /// 10: file transfer start (key file).
    FileXferStart,
    /// 11: file transfer status.
    FileXferStatus,
    /// 12: file transfer data.
    FileXferData,
    /// 13: the last client disconnected (server → agent).
    ClientDisconnected,
    /// 14: maximum clipboard size of the client.
    MaxClipboard,
    /// 15: audio volume.
    AudioVolumeSync,
    /// 16: display device addresses (server → agent).
    GraphicsDeviceInfo,
}

impl MessageType {
    /// All types in wire order.
    pub const ALL: [MessageType; 16] = [
        Self::MouseState,
        Self::MonitorsConfig,
        Self::Reply,
        Self::Clipboard,
        Self::DisplayConfig,
        Self::AnnounceCapabilities,
        Self::ClipboardGrab,
        Self::ClipboardRequest,
        Self::ClipboardRelease,
        Self::FileXferStart,
        Self::FileXferStatus,
        Self::FileXferData,
        Self::ClientDisconnected,
        Self::MaxClipboard,
        Self::AudioVolumeSync,
        Self::GraphicsDeviceInfo,
    ];

    /// Parses a wire type; `None` for 0 and values ≥ 17.
    pub fn from_u32(value: u32) -> Option<Self> {
        let index = usize::try_from(value).ok()?.checked_sub(1)?;
        Self::ALL.get(index).copied()
    }

    /// The wire value (1..=16).
    pub fn as_u32(self) -> u32 {
        // The position in ALL plus one; ALL has 16 entries, so the cast cannot truncate.
        Self::ALL
            .iter()
            .position(|t| *t == self)
            .map_or(0, |i| i as u32 + 1)
    }
}

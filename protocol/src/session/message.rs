//! [`SessionMessage`]: what guestlinkd and guestlink-session exchange.

use serde::{Deserialize, Serialize};

use crate::vdagent::{ClipboardType, Selection};

/// Version of the session protocol, carried in [`SessionMessage::Hello`].
pub const SESSION_PROTOCOL_VERSION: u32 = 1;

/// One display of the session's desktop, as reported by the session agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeometryMonitor {
    /// SPICE display id of this output.
    pub display_id: u32,
    /// X of the top-left corner in the desktop.
    pub x: i32,
    /// Y of the top-left corner in the desktop.
    pub y: i32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// One monitor of a configuration to apply (w = h = 0: disabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMonitor {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Colour depth.
    pub depth: u32,
    /// X position.
    pub x: i32,
    /// Y position.
    pub y: i32,
    /// Physical width in mm, if the client sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mm_width: Option<u16>,
    /// Physical height in mm, if the client sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mm_height: Option<u16>,
}

impl SessionMonitor {
    /// A `width`×`height` monitor at (`x`, `y`), 32-bit depth, physical size unknown.
    pub fn sized(width: u32, height: u32, x: i32, y: i32) -> Self {
        Self {
            width,
            height,
            depth: 32,
            x,
            y,
            mm_width: None,
            mm_height: None,
        }
    }
}

/// One display device entry (from GRAPHICS_DEVICE_INFO).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDeviceDisplay {
    /// SPICE channel id.
    pub channel_id: u32,
    /// Monitor id within the channel.
    pub monitor_id: u32,
    /// Display id on the device.
    pub device_display_id: u32,
    /// Device address such as `pci/0000/02.0` (lossy UTF-8).
    pub device_address: String,
}

/// A daemon ↔ session message. Fields marked "binary" travel in the frame's data part, never in the JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SessionMessage {
    /// First message of each side: protocol version, the session's id (logind) and optional features.
    Hello {
        /// [`SESSION_PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// The logind session id ("" when unknown).
        session_id: String,
        /// Feature names the sender supports.
        capabilities: Vec<String>,
    },
    /// Session → daemon: the current desktop layout.
    Geometry {
        /// The enabled outputs.
        monitors: Vec<GeometryMonitor>,
    },
    /// Either way: the sender owns `selection` and offers `types`.
    ClipboardGrab {
        /// Selection.
        selection: Selection,
        /// Offered types.
        types: Vec<ClipboardType>,
    },
    /// Either way: the sender wants the data of `selection` as `data_type`.
    ClipboardRequest {
        /// Selection.
        selection: Selection,
        /// Requested type.
        data_type: ClipboardType,
    },
    /// Either way: answer to a request (`data_type` NONE or empty data = nothing).
    ClipboardData {
        /// Selection.
        selection: Selection,
        /// Data type.
        data_type: ClipboardType,
        /// The data (binary).
        #[serde(skip)]
        data: Vec<u8>,
    },
    /// Either way: the sender no longer owns `selection`.
    ClipboardRelease {
        /// Selection.
        selection: Selection,
    },
    /// Daemon → session: monitor layout to apply.
    MonitorsConfig {
        /// `VD_AGENT_CONFIG_MONITORS_FLAG_*`.
        flags: u32,
        /// Monitors, indexed by display id.
        monitors: Vec<SessionMonitor>,
    },
    /// Daemon → session: a file transfer begins (the name is not yet validated).
    FileXferStart {
        /// Transfer id (the client's).
        id: u32,
        /// File name.
        name: String,
        /// Total size in bytes.
        size: u64,
    },
    /// Daemon → session: file content.
    FileXferData {
        /// Transfer id.
        id: u32,
        /// The bytes (binary).
        #[serde(skip)]
        data: Vec<u8>,
    },
    /// Session → daemon: transfer status (`VD_AGENT_FILE_XFER_STATUS_*` code and optional detail).
    FileXferStatus {
        /// Transfer id.
        id: u32,
        /// Status code.
        status: u32,
        /// Free bytes, with NOT_ENOUGH_SPACE.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disk_free_space: Option<u64>,
        /// `GIOErrorEnum` code, with ERROR.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<u32>,
    },
    /// Daemon → session: the client cancelled the transfer; drop the partial file.
    FileXferCancel {
        /// Transfer id.
        id: u32,
    },
    /// Daemon → session: file transfer is not allowed for this session (e.g. greeter).
    FileXferDisable,
    /// Daemon → session: a SPICE client connected.
    ClientConnected,
    /// Daemon → session: the SPICE client went away; release client-owned clipboards.
    ClientDisconnected,
    /// Daemon → session: the client's maximum clipboard size (-1 = unlimited).
    MaxClipboard {
        /// Bytes.
        max: i64,
    },
    /// Daemon → session: display device addresses.
    GraphicsDeviceInfo {
        /// Entries.
        displays: Vec<SessionDeviceDisplay>,
    },
    /// Daemon → session: audio volumes.
    AudioVolumeSync {
        /// Playback or capture.
        is_playback: bool,
        /// Muted.
        mute: bool,
        /// Per-channel volumes.
        volumes: Vec<u16>,
    },
    /// Session → daemon: a clipboard answer whose `len` data bytes are in a sealed memfd passed with this frame
    /// (SCM_RIGHTS on the unix socket), so the daemon can hand them to the port without copying them through
    /// its own memory. Sent only to a daemon whose hello lists [`CAP_CLIPBOARD_FD`]; answered like
    /// [`SessionMessage::ClipboardData`].
    ClipboardDataFd {
        /// Selection.
        selection: Selection,
        /// Data type.
        data_type: ClipboardType,
        /// Size of the memfd's content.
        len: u64,
    },
    /// Either way: a request failed or was refused.
    Error {
        /// Short machine-readable code, e.g. "not-active".
        code: String,
        /// Human-readable text.
        message: String,
    },
}

/// The highest frame kind this version knows (kinds are 1..=`MAX_KIND`).
pub(crate) const MAX_KIND: u16 = 19;

/// The frame kind of [`SessionMessage::FileXferData`] (for a decoder that streams only file data).
pub const KIND_FILE_XFER_DATA: u16 = 9;

/// Hello capability of a daemon that accepts [`SessionMessage::ClipboardDataFd`].
pub const CAP_CLIPBOARD_FD: &str = "clipboard-fd";

impl SessionMessage {
    /// The frame kind (u16) of this message.
    pub fn kind(&self) -> u16 {
        match self {
            Self::Hello { .. } => 1,
            Self::Geometry { .. } => 2,
            Self::ClipboardGrab { .. } => 3,
            Self::ClipboardRequest { .. } => 4,
            Self::ClipboardData { .. } => 5,
            Self::ClipboardRelease { .. } => 6,
            Self::MonitorsConfig { .. } => 7,
            Self::FileXferStart { .. } => 8,
            Self::FileXferData { .. } => KIND_FILE_XFER_DATA,
            Self::FileXferStatus { .. } => 10,
            Self::FileXferCancel { .. } => 11,
            Self::FileXferDisable => 12,
            Self::ClientConnected => 13,
            Self::ClientDisconnected => 14,
            Self::MaxClipboard { .. } => 15,
            Self::GraphicsDeviceInfo { .. } => 16,
            Self::AudioVolumeSync { .. } => 17,
            Self::Error { .. } => 18,
            Self::ClipboardDataFd { .. } => 19,
        }
    }

    /// Whether frames of `kind` carry a binary data part.
    pub(crate) fn kind_has_data(kind: u16) -> bool {
        matches!(kind, 5 | 9)
    }

    /// The binary data part (empty for messages without one).
    pub fn data(&self) -> &[u8] {
        match self {
            Self::ClipboardData { data, .. } | Self::FileXferData { data, .. } => data,
            _ => &[],
        }
    }

    /// The memory this message holds: its own size plus every heap buffer it owns (at their lengths). What a
    /// queue of messages must budget, metadata included: a CLIPBOARD_GRAB with many types holds as much as a
    /// clipboard with as many bytes.
    pub fn held_bytes(&self) -> usize {
        use std::mem::size_of;
        let heap = match self {
            Self::Hello {
                session_id,
                capabilities,
                ..
            } => {
                session_id.len()
                    + capabilities
                        .iter()
                        .map(|c| size_of::<String>() + c.len())
                        .sum::<usize>()
            }
            Self::Geometry { monitors } => monitors.len() * size_of::<GeometryMonitor>(),
            Self::ClipboardGrab { types, .. } => types.len() * size_of::<ClipboardType>(),
            Self::ClipboardData { data, .. } | Self::FileXferData { data, .. } => data.len(),
            Self::MonitorsConfig { monitors, .. } => monitors.len() * size_of::<SessionMonitor>(),
            Self::FileXferStart { name, .. } => name.len(),
            Self::GraphicsDeviceInfo { displays } => displays
                .iter()
                .map(|d| size_of::<SessionDeviceDisplay>() + d.device_address.len())
                .sum(),
            Self::AudioVolumeSync { volumes, .. } => volumes.len() * size_of::<u16>(),
            Self::Error { code, message } => code.len() + message.len(),
            Self::ClipboardRequest { .. }
            | Self::ClipboardRelease { .. }
            | Self::FileXferStatus { .. }
            | Self::FileXferCancel { .. }
            | Self::FileXferDisable
            | Self::ClientConnected
            | Self::ClientDisconnected
            | Self::MaxClipboard { .. }
            | Self::ClipboardDataFd { .. } => 0,
        };
        size_of::<Self>() + heap
    }

    /// Stores the binary data part after the metadata was decoded.
    pub(crate) fn set_data(&mut self, bytes: Vec<u8>) {
        if let Self::ClipboardData { data, .. } | Self::FileXferData { data, .. } = self {
            *data = bytes;
        }
    }
}

//! Typed vdagent messages: [`Message`] with decode/encode for all 16 types, and the [`WireFormat`] that decides
//! whether the optional clipboard fields are on the wire.

use super::caps::{Capabilities, Capability};
use super::clipboard::{ClipboardType, Selection};
use super::display::{
    AudioVolumeSync, DisplayConfig, GraphicsDeviceInfo, MonitorsConfig, MouseState,
};
use super::error::VdagentError;
use super::file_xfer::{FileXferData, FileXferStart, FileXferStatus};
use super::header::{MessageHeader, MessageType, VD_AGENT_PROTOCOL};
use super::wire::{Put, Reader};

/// Which optional fields are present on clipboard messages. A field is used only when *both* sides announced its
/// capability (docs/protocol/vdagent.md#capabilities); build it with [`WireFormat::negotiate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct WireFormat {
    /// 4-byte selection prefix on CLIPBOARD, GRAB, REQUEST and RELEASE (CLIPBOARD_SELECTION).
    pub selection: bool,
    /// u32 serial after the selection prefix in GRAB (CLIPBOARD_GRAB_SERIAL).
    pub grab_serial: bool,
}

impl WireFormat {
    /// All four combinations, for tests and fuzzing.
    pub const ALL: [WireFormat; 4] = [
        WireFormat {
            selection: false,
            grab_serial: false,
        },
        WireFormat {
            selection: true,
            grab_serial: false,
        },
        WireFormat {
            selection: false,
            grab_serial: true,
        },
        WireFormat {
            selection: true,
            grab_serial: true,
        },
    ];

    /// The format for our capabilities `ours` talking to a peer that announced `peer`.
    pub fn negotiate(ours: &Capabilities, peer: &Capabilities) -> Self {
        Self {
            selection: ours.both_have(peer, Capability::ClipboardSelection),
            grab_serial: ours.both_have(peer, Capability::ClipboardGrabSerial),
        }
    }
}

/// `VDAgentReply.error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyResult {
    /// 1: `VD_AGENT_SUCCESS`.
    Success,
    /// 2: `VD_AGENT_ERROR`.
    Error,
    /// Any other value.
    Other(u32),
}

impl ReplyResult {
    /// Parses the wire value.
    pub fn from_u32(value: u32) -> Self {
        match value {
            1 => Self::Success,
            2 => Self::Error,
            other => Self::Other(other),
        }
    }

    /// The wire value.
    pub fn as_u32(self) -> u32 {
        match self {
            Self::Success => 1,
            Self::Error => 2,
            Self::Other(v) => v,
        }
    }
}

/// A reassembled message: its header and raw payload, not yet interpreted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMessage {
    /// The 20-byte header as received.
    pub header: MessageHeader,
    /// `header.size` payload bytes.
    pub payload: Vec<u8>,
}

impl RawMessage {
    /// Interprets the payload; checks the protocol field first.
    pub fn decode(&self, wire: WireFormat) -> Result<Message, VdagentError> {
        if self.header.protocol != VD_AGENT_PROTOCOL {
            return Err(VdagentError::BadProtocol(self.header.protocol));
        }
        Message::decode(self.header.msg_type, &self.payload, wire)
    }

    /// [`RawMessage::decode`], consuming the message: the bulk data of CLIPBOARD and FILE_XFER_DATA is moved out
    /// of the payload (its few leading bytes shifted away in place) instead of copied into a new buffer, which
    /// for a 16 MiB clipboard saves an allocation, its page faults and a copy. Same results and errors.
    pub fn into_decoded(self, wire: WireFormat) -> Result<Message, VdagentError> {
        let data_at = match MessageType::from_u32(self.header.msg_type) {
            Some(MessageType::Clipboard) if wire.selection => 8,
            Some(MessageType::Clipboard) => 4,
            Some(MessageType::FileXferData) => 12,
            _ => return self.decode(wire),
        };
        if self.header.protocol != VD_AGENT_PROTOCOL || self.payload.len() <= data_at {
            return self.decode(wire);
        }
        let mut payload = self.payload;
        let fixed = &payload[..data_at];
        let msg = match Message::decode(self.header.msg_type, fixed, wire) {
            Ok(Message::Clipboard {
                selection,
                data_type,
                ..
            }) => {
                payload.drain(..data_at);
                Message::Clipboard {
                    selection,
                    data_type,
                    data: payload,
                }
            }
            // FILE_XFER_DATA with its data cut off fails the size check unless the size field says 0: check
            // the field against the real data length here instead.
            Ok(_) | Err(VdagentError::FileDataSizeMismatch { .. }) => {
                let id = u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]);
                let mut size = [0u8; 8];
                size.copy_from_slice(&fixed[4..12]);
                let declared = u64::from_le_bytes(size);
                let actual = (payload.len() - data_at) as u64;
                if declared != actual {
                    return Err(VdagentError::FileDataSizeMismatch { declared, actual });
                }
                payload.drain(..data_at);
                Message::FileXferData(FileXferData { id, data: payload })
            }
            Err(e) => return Err(e),
        };
        Ok(msg)
    }
}

/// A typed vdagent message (one variant per `VD_AGENT_*` message type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// 1: MOUSE_STATE.
    MouseState(MouseState),
    /// 2: MONITORS_CONFIG, with or without PHYSICAL_SIZE.
    MonitorsConfig(MonitorsConfig),
    /// 3: REPLY.
    Reply {
        /// The message type being acknowledged.
        message_type: u32,
        /// Outcome.
        result: ReplyResult,
    },
    /// 4: CLIPBOARD data.
    Clipboard {
        /// Selection (CLIPBOARD when the prefix is not on the wire).
        selection: Selection,
        /// Data type.
        data_type: ClipboardType,
        /// The data.
        data: Vec<u8>,
    },
    /// 5: DISPLAY_CONFIG.
    DisplayConfig(DisplayConfig),
    /// 6: ANNOUNCE_CAPABILITIES.
    AnnounceCapabilities {
        /// The sender wants the peer's capabilities back (any non-zero value decodes as true).
        request: bool,
        /// The sender's capabilities.
        caps: Capabilities,
    },
    /// 7: CLIPBOARD_GRAB.
    ClipboardGrab {
        /// Selection (CLIPBOARD when the prefix is not on the wire).
        selection: Selection,
        /// Serial; `Some` exactly when decoded with `grab_serial`, encoded (`None` as 0) only with `grab_serial`.
        serial: Option<u32>,
        /// Offered types.
        types: Vec<ClipboardType>,
    },
    /// 8: CLIPBOARD_REQUEST.
    ClipboardRequest {
        /// Selection.
        selection: Selection,
        /// Requested type.
        data_type: ClipboardType,
    },
    /// 9: CLIPBOARD_RELEASE. The 1-byte payload spice-vdagentd sends when its agent exits is accepted.
    ClipboardRelease {
        /// Selection.
        selection: Selection,
    },
    /// 10: FILE_XFER_START.
    FileXferStart(FileXferStart),
    /// 11: FILE_XFER_STATUS.
    FileXferStatus(FileXferStatus),
    /// 12: FILE_XFER_DATA.
    FileXferData(FileXferData),
    /// 13: CLIENT_DISCONNECTED.
    ClientDisconnected,
    /// 14: MAX_CLIPBOARD (-1 = unlimited).
    MaxClipboard {
        /// Maximum clipboard size in bytes.
        max: i32,
    },
    /// 15: AUDIO_VOLUME_SYNC.
    AudioVolumeSync(AudioVolumeSync),
    /// 16: GRAPHICS_DEVICE_INFO.
    GraphicsDeviceInfo(GraphicsDeviceInfo),
}

fn read_selection(r: &mut Reader<'_>, wire: WireFormat) -> Result<Selection, VdagentError> {
    if wire.selection {
        let prefix = r.take(4)?;
        Ok(Selection::from_u8(prefix[0]))
    } else {
        Ok(Selection::Clipboard)
    }
}

fn put_selection(out: &mut Vec<u8>, selection: Selection, wire: WireFormat) {
    if wire.selection {
        out.extend_from_slice(&[selection.as_u8(), 0, 0, 0]);
    }
}

fn exact<T>(r: Reader<'_>, value: T) -> Result<T, VdagentError> {
    r.finish()?;
    Ok(value)
}

impl Message {
    /// The message type of this variant.
    pub fn message_type(&self) -> MessageType {
        match self {
            Self::MouseState(_) => MessageType::MouseState,
            Self::MonitorsConfig(_) => MessageType::MonitorsConfig,
            Self::Reply { .. } => MessageType::Reply,
            Self::Clipboard { .. } => MessageType::Clipboard,
            Self::DisplayConfig(_) => MessageType::DisplayConfig,
            Self::AnnounceCapabilities { .. } => MessageType::AnnounceCapabilities,
            Self::ClipboardGrab { .. } => MessageType::ClipboardGrab,
            Self::ClipboardRequest { .. } => MessageType::ClipboardRequest,
            Self::ClipboardRelease { .. } => MessageType::ClipboardRelease,
            Self::FileXferStart(_) => MessageType::FileXferStart,
            Self::FileXferStatus(_) => MessageType::FileXferStatus,
            Self::FileXferData(_) => MessageType::FileXferData,
            Self::ClientDisconnected => MessageType::ClientDisconnected,
            Self::MaxClipboard { .. } => MessageType::MaxClipboard,
            Self::AudioVolumeSync(_) => MessageType::AudioVolumeSync,
            Self::GraphicsDeviceInfo(_) => MessageType::GraphicsDeviceInfo,
        }
    }

    /// Decodes the payload of a message of raw type `msg_type`.
    pub fn decode(msg_type: u32, payload: &[u8], wire: WireFormat) -> Result<Self, VdagentError> {
        let t = MessageType::from_u32(msg_type).ok_or(VdagentError::UnknownType(msg_type))?;
        let clip_rule = if wire.selection {
            "exactly 8"
        } else {
            "exactly 4"
        };
        Ok(match t {
            MessageType::MouseState => Self::MouseState(MouseState::decode(payload)?),
            MessageType::MonitorsConfig => Self::MonitorsConfig(MonitorsConfig::decode(payload)?),
            MessageType::Reply => {
                let mut r = Reader::new(payload, t, "exactly 8");
                let message_type = r.u32()?;
                let result = ReplyResult::from_u32(r.u32()?);
                exact(
                    r,
                    Self::Reply {
                        message_type,
                        result,
                    },
                )?
            }
            MessageType::Clipboard => {
                let mut r = Reader::new(payload, t, "at least 4 (+4 selection)");
                let selection = read_selection(&mut r, wire)?;
                let data_type = ClipboardType::from_u32(r.u32()?);
                Self::Clipboard {
                    selection,
                    data_type,
                    data: r.rest().to_vec(),
                }
            }
            MessageType::DisplayConfig => Self::DisplayConfig(DisplayConfig::decode(payload)?),
            MessageType::AnnounceCapabilities => {
                let mut r = Reader::new(payload, t, "4 + 4 x N");
                let request = r.u32()? != 0;
                if r.remaining() % 4 != 0 {
                    return Err(r.short());
                }
                let words = (0..r.remaining() / 4)
                    .map(|_| r.u32())
                    .collect::<Result<Vec<_>, _>>()?;
                Self::AnnounceCapabilities {
                    request,
                    caps: Capabilities::from_words(&words),
                }
            }
            MessageType::ClipboardGrab => {
                let mut r = Reader::new(payload, t, "4 x N (+4 selection, +4 serial)");
                let selection = read_selection(&mut r, wire)?;
                let serial = if wire.grab_serial {
                    Some(r.u32()?)
                } else {
                    None
                };
                if r.remaining() % 4 != 0 {
                    return Err(r.short());
                }
                let types = (0..r.remaining() / 4)
                    .map(|_| r.u32().map(ClipboardType::from_u32))
                    .collect::<Result<_, _>>()?;
                Self::ClipboardGrab {
                    selection,
                    serial,
                    types,
                }
            }
            MessageType::ClipboardRequest => {
                let mut r = Reader::new(payload, t, clip_rule);
                let selection = read_selection(&mut r, wire)?;
                let data_type = ClipboardType::from_u32(r.u32()?);
                exact(
                    r,
                    Self::ClipboardRequest {
                        selection,
                        data_type,
                    },
                )?
            }
            MessageType::ClipboardRelease => {
                let selection = match (wire.selection, payload.len()) {
                    (true, 1 | 4) => Selection::from_u8(payload[0]),
                    // Without the selection capability only CLIPBOARD exists; the 1-byte form is spice-vdagentd's
                    // quirk when an agent exits (docs/protocol/vdagent.md#observed-reference-behaviour).
                    (false, 0 | 1) => Selection::Clipboard,
                    (_, size) => {
                        let expected = if wire.selection {
                            "exactly 4 (or 1)"
                        } else {
                            "exactly 0"
                        };
                        return Err(VdagentError::InvalidSize {
                            msg_type: t,
                            size,
                            expected,
                        });
                    }
                };
                Self::ClipboardRelease { selection }
            }
            MessageType::FileXferStart => Self::FileXferStart(FileXferStart::decode(payload)?),
            MessageType::FileXferStatus => Self::FileXferStatus(FileXferStatus::decode(payload)?),
            MessageType::FileXferData => Self::FileXferData(FileXferData::decode(payload)?),
            MessageType::ClientDisconnected => exact(
                Reader::new(payload, t, "exactly 0"),
                Self::ClientDisconnected,
            )?,
            MessageType::MaxClipboard => {
                let mut r = Reader::new(payload, t, "exactly 4");
                let max = r.i32()?;
                exact(r, Self::MaxClipboard { max })?
            }
            MessageType::AudioVolumeSync => {
                Self::AudioVolumeSync(AudioVolumeSync::decode(payload)?)
            }
            MessageType::GraphicsDeviceInfo => {
                Self::GraphicsDeviceInfo(GraphicsDeviceInfo::decode(payload)?)
            }
        })
    }

    /// Encodes the payload (without the 20-byte header).
    pub fn encode_payload(&self, wire: WireFormat) -> Result<Vec<u8>, VdagentError> {
        let mut out = Vec::new();
        match self {
            Self::MouseState(m) => m.encode(&mut out),
            Self::MonitorsConfig(m) => m.encode(&mut out)?,
            Self::Reply {
                message_type,
                result,
            } => {
                out.put_u32(*message_type);
                out.put_u32(result.as_u32());
            }
            Self::Clipboard {
                selection,
                data_type,
                data,
            } => {
                put_selection(&mut out, *selection, wire);
                out.put_u32(data_type.as_u32());
                out.extend_from_slice(data);
            }
            Self::DisplayConfig(d) => d.encode(&mut out),
            Self::AnnounceCapabilities { request, caps } => {
                out.put_u32(u32::from(*request));
                for w in caps.words() {
                    out.put_u32(*w);
                }
            }
            Self::ClipboardGrab {
                selection,
                serial,
                types,
            } => {
                put_selection(&mut out, *selection, wire);
                if wire.grab_serial {
                    out.put_u32(serial.unwrap_or(0));
                }
                for t in types {
                    out.put_u32(t.as_u32());
                }
            }
            Self::ClipboardRequest {
                selection,
                data_type,
            } => {
                put_selection(&mut out, *selection, wire);
                out.put_u32(data_type.as_u32());
            }
            Self::ClipboardRelease { selection } => put_selection(&mut out, *selection, wire),
            Self::FileXferStart(s) => s.encode(&mut out)?,
            Self::FileXferStatus(s) => s.encode(&mut out),
            Self::FileXferData(d) => d.encode(&mut out),
            Self::ClientDisconnected => {}
            Self::MaxClipboard { max } => out.put_i32(*max),
            Self::AudioVolumeSync(a) => a.encode(&mut out)?,
            Self::GraphicsDeviceInfo(g) => g.encode(&mut out)?,
        }
        Ok(out)
    }
}

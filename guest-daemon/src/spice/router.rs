//! The SPICE routing state machine, without I/O: vdagent messages from the port and session-agent messages in,
//! [`Action`]s out (bytes for the port, frames for an agent, mouse events).
//!
//! It mirrors spice-vdagentd (docs/protocol/vdagent.md#port-lifecycle, #session-agents): the port is wanted only while
//! the agent of the active session has reported its geometry; caps with `request = 1` mean a new client; replies go
//! back on the port the request came on; guest→host messages are single chunks; only the active agent sees host
//! traffic; file-transfer ids are created by a client START only, bound to the agent active at START, capped at
//! [`MAX_TRANSFERS`], and dropped on client disconnect (CVE-2020-25650/25651). While the active session is locked
//! or is a login screen no clipboard crosses ([`lock`]).

mod convert;
mod lock;
mod xfer;

use convert::{device_info_msg, monitors_msg};

use lock::Withheld;

use super::log_limit::{log_limited, truncated, Words};

use std::collections::{BTreeMap, BTreeSet};

use guestlink_protocol::session::{GeometryMonitor, SessionMessage};
use guestlink_protocol::vdagent::file_xfer::ERROR_TYPE_GLIB_IO;
use guestlink_protocol::vdagent::{
    encode_message, encode_single_head, Capabilities, Capability, ChunkMode, ClipboardType,
    FileXferDetail, FileXferResult, GrabSerials, GraphicsDeviceInfo, Message, MessageType,
    MonitorsConfig, MouseState, Port, RawMessage, ReplyResult, Selection, SerialRule, WireFormat,
};

/// Identifies one connected session agent.
pub type AgentId = u64;

/// Most concurrent file transfers (spice-vdagentd's limit).
pub const MAX_TRANSFERS: usize = 128;
/// Most types kept from one CLIPBOARD_GRAB, either way (there are 7 known types; the rest are cut off).
pub const MAX_GRAB_TYPES: usize = 64;

/// `types` cut to [`MAX_GRAB_TYPES`], with a rate-limited note when that drops some.
fn capped_types(mut types: Vec<ClipboardType>, from: &'static str) -> Vec<ClipboardType> {
    if types.len() > MAX_GRAB_TYPES {
        log_limited!(
            warn,
            from,
            count = types.len(),
            max = MAX_GRAB_TYPES,
            "clipboard grab with too many types: the rest are ignored"
        );
        types.truncate(MAX_GRAB_TYPES);
        types.shrink_to_fit();
    }
    types
}

/// What the I/O layer must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes (whole chunks) to the port.
    Port(Vec<u8>),
    /// Write `head` then `data` to the port: one message whose bulk data (a guest clipboard) is written from the
    /// agent's own buffer instead of being copied behind the headers.
    PortData {
        /// Chunk header, message header and the payload's fixed fields.
        head: Vec<u8>,
        /// The rest of the payload.
        data: Vec<u8>,
    },
    /// Write `head`, then pass the `len` data bytes that `agent` is streaming (a large guest clipboard) on to the
    /// port as they arrive; nothing else is written to the port in between.
    PortStream {
        /// The streaming agent.
        agent: AgentId,
        /// Chunk header, message header and the payload's fixed fields, counting the `len` bytes that follow.
        head: Vec<u8>,
        /// Data bytes that follow.
        len: usize,
    },
    /// Send a frame to an agent.
    Agent(AgentId, SessionMessage),
    /// Pointer state for the tablet, already offset into the desktop: (x, y, buttons).
    Mouse(i64, i64, u32),
    /// The active desktop layout changed: resize the tablet.
    Tablet(Vec<GeometryMonitor>),
    /// Drop the partial message of the client port (CLIENT_DISCONNECTED).
    ResetClientPort,
}

/// The capabilities guestlinkd announces.
pub fn our_caps() -> Capabilities {
    [
        Capability::MouseState,
        Capability::MonitorsConfig,
        Capability::Reply,
        Capability::ClipboardByDemand,
        Capability::ClipboardSelection,
        Capability::SparseMonitorsConfig,
        Capability::GuestLineendLf,
        Capability::MaxClipboard,
        Capability::AudioVolumeSync,
        Capability::MonitorsConfigPosition,
        Capability::FileXferDetailedErrors,
        Capability::GraphicsDeviceInfo,
        Capability::ClipboardNoReleaseOnRegrab,
        Capability::ClipboardGrabSerial,
    ]
    .into_iter()
    .collect()
}

#[derive(Debug)]
struct Agent {
    session: String,
    geometry: Option<Vec<GeometryMonitor>>,
}

/// The routing state (one per daemon).
#[derive(Debug)]
pub struct Router {
    ours: Capabilities,
    client: Option<Capabilities>,
    wire: WireFormat,
    serials: GrabSerials,
    agents: BTreeMap<AgentId, Agent>,
    active_session: Option<String>,
    port_open: bool,
    client_connected: bool,
    monitors: Option<MonitorsConfig>,
    device_info: Option<GraphicsDeviceInfo>,
    max_clipboard: Option<i32>,
    xfers: BTreeMap<u32, AgentId>,
    guest_owned: BTreeSet<u8>,
    /// The active session is locked (see [`Router::set_active`]).
    session_locked: bool,
    /// The active session is of class user, not a greeter: file transfer and the clipboard are allowed.
    user_class: bool,
    /// Grabs that arrived while the clipboard was blocked, by selection byte ([`lock`]).
    withheld: BTreeMap<u8, Withheld>,
}

impl Default for Router {
    fn default() -> Self {
        Self::new()
    }
}

/// Why an agent was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another agent already serves this session.
    SessionTaken,
}

impl Router {
    /// A router with our capabilities, no agents, port closed.
    pub fn new() -> Self {
        Self {
            ours: our_caps(),
            client: None,
            wire: WireFormat::default(),
            serials: GrabSerials::new(),
            agents: BTreeMap::new(),
            active_session: None,
            port_open: false,
            client_connected: false,
            monitors: None,
            device_info: None,
            max_clipboard: None,
            xfers: BTreeMap::new(),
            guest_owned: BTreeSet::new(),
            session_locked: false,
            user_class: true,
            withheld: BTreeMap::new(),
        }
    }

    /// The agent serving the active session.
    pub fn active_agent(&self) -> Option<AgentId> {
        let session = self.active_session.as_ref()?;
        self.agents
            .iter()
            .find(|(_, a)| &a.session == session)
            .map(|(id, _)| *id)
    }

    /// The active agent's desktop layout.
    pub fn active_geometry(&self) -> Option<&[GeometryMonitor]> {
        let id = self.active_agent()?;
        self.agents.get(&id)?.geometry.as_deref()
    }

    /// Whether the port should be open: the active agent can serve (it reported its geometry).
    pub fn wants_port(&self) -> bool {
        self.active_geometry().is_some()
    }

    fn send(&self, out: &mut Vec<Action>, port: Port, msg: &Message) {
        match encode_message(port, msg, self.wire, ChunkMode::Single) {
            Ok(bytes) => out.push(Action::Port(bytes)),
            Err(e) => log_limited!(warn, "cannot encode {:?}: {e}", msg.message_type()),
        }
    }

    fn to_active(&self, out: &mut Vec<Action>, msg: SessionMessage) -> bool {
        match self.active_agent() {
            Some(id) => {
                out.push(Action::Agent(id, msg));
                true
            }
            None => false,
        }
    }

    /// The port was opened: announce our caps with `request = 1`.
    pub fn port_opened(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        self.port_open = true;
        self.client = None;
        self.wire = WireFormat::default();
        self.serials.reset();
        self.guest_owned.clear();
        self.withheld.clear();
        let caps = Message::AnnounceCapabilities {
            request: true,
            caps: self.ours.clone(),
        };
        self.send(&mut out, Port::Client, &caps);
        out
    }

    /// The port was closed (no agent can serve, or a stream error).
    pub fn port_closed(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        self.port_open = false;
        self.drop_transfers(&mut out);
        if std::mem::take(&mut self.client_connected) {
            self.to_active(&mut out, SessionMessage::ClientDisconnected);
        }
        self.client = None;
        self.wire = WireFormat::default();
        self.guest_owned.clear();
        self.withheld.clear();
        out
    }

    /// Frames a newly active agent needs: the stored client state.
    fn activate(&self, out: &mut Vec<Action>, id: AgentId) {
        if let Some(max) = self.max_clipboard {
            out.push(Action::Agent(
                id,
                SessionMessage::MaxClipboard { max: max.into() },
            ));
        }
        if let Some(info) = &self.device_info {
            out.push(Action::Agent(id, device_info_msg(info)));
        }
        if let Some(mc) = &self.monitors {
            out.push(Action::Agent(id, monitors_msg(mc)));
        }
        if self.client_connected {
            out.push(Action::Agent(id, SessionMessage::ClientConnected));
        }
        if let Some(g) = self.agents.get(&id).and_then(|a| a.geometry.clone()) {
            out.push(Action::Tablet(g));
        }
        if !self.user_class {
            out.push(Action::Agent(id, SessionMessage::FileXferDisable));
        }
    }

    /// Releases the guest-owned selections towards the client (the owner left or is no longer active).
    fn release_guest_owned(&mut self, out: &mut Vec<Action>) {
        for sel in std::mem::take(&mut self.guest_owned) {
            if self.port_open {
                let msg = Message::ClipboardRelease {
                    selection: Selection::from_u8(sel),
                };
                self.send(out, Port::Client, &msg);
            }
        }
    }

    /// Sets the active session ("" in no-logind mode) and its state from logind. While `locked`, a client START is
    /// answered SESSION_LOCKED (like spice-vdagentd) and no clipboard crosses ([`lock`]); without `user_class` (a
    /// greeter) a START is answered DISABLED, the session's agent gets FILE_XFER_DISABLE, and no clipboard crosses.
    /// When the same agent's clipboard is unblocked (unlock), the grabs withheld meanwhile are offered.
    pub fn set_active(
        &mut self,
        session: Option<String>,
        locked: bool,
        user_class: bool,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let was_blocked = self.clipboard_blocked();
        let was_user = std::mem::replace(&mut self.user_class, user_class);
        self.session_locked = locked;
        if session == self.active_session {
            if was_user && !user_class {
                if let Some(id) = self.active_agent() {
                    out.push(Action::Agent(id, SessionMessage::FileXferDisable));
                }
            }
            if was_blocked && !self.clipboard_blocked() {
                self.offer_withheld(&mut out);
            }
            return out;
        }
        let before = self.active_agent();
        self.active_session = session;
        let after = self.active_agent();
        if before != after {
            // Withheld grabs belong to the session that was blocked, not to the next one.
            self.withheld.clear();
            self.release_guest_owned(&mut out);
            if let Some(id) = after {
                self.activate(&mut out, id);
            }
        }
        out
    }

    /// A new agent of `session` connected; the hello is sent here.
    pub fn agent_connected(
        &mut self,
        id: AgentId,
        session: String,
    ) -> Result<Vec<Action>, Refusal> {
        if self.agents.values().any(|a| a.session == session) {
            return Err(Refusal::SessionTaken);
        }
        let mut out = vec![Action::Agent(
            id,
            SessionMessage::Hello {
                version: guestlink_protocol::session::SESSION_PROTOCOL_VERSION,
                session_id: session.clone(),
                capabilities: vec![guestlink_protocol::session::CAP_CLIPBOARD_FD.to_owned()],
            },
        )];
        self.agents.insert(
            id,
            Agent {
                session,
                geometry: None,
            },
        );
        if self.active_agent() == Some(id) {
            self.activate(&mut out, id);
        }
        Ok(out)
    }

    /// An agent disconnected.
    pub fn agent_gone(&mut self, id: AgentId) -> Vec<Action> {
        let mut out = Vec::new();
        let was_active = self.active_agent() == Some(id);
        self.agents.remove(&id);
        let orphaned: Vec<u32> = self
            .xfers
            .iter()
            .filter(|(_, a)| **a == id)
            .map(|(x, _)| *x)
            .collect();
        for x in orphaned {
            self.xfers.remove(&x);
            if self.port_open {
                self.status(
                    &mut out,
                    x,
                    FileXferResult::VdagentNotConnected,
                    FileXferDetail::None,
                );
            }
        }
        if was_active {
            self.release_guest_owned(&mut out);
        }
        out
    }

    /// A frame from agent `id`.
    pub fn on_agent(&mut self, id: AgentId, msg: SessionMessage) -> Vec<Action> {
        let mut out = Vec::new();
        let active = self.active_agent() == Some(id);
        match msg {
            SessionMessage::Hello { version, .. } => {
                tracing::debug!(agent = id, version, "session agent hello");
            }
            SessionMessage::Geometry { monitors } => {
                let monitors: Vec<_> = monitors.into_iter().take(64).collect();
                if let Some(a) = self.agents.get_mut(&id) {
                    a.geometry = Some(monitors.clone());
                }
                if active {
                    out.push(Action::Tablet(monitors));
                }
            }
            SessionMessage::ClipboardRequest {
                selection,
                data_type,
            } if !active
                || !self.port_open
                || !self.selection_crosses(selection)
                || self.clipboard_blocked() =>
            {
                // Not the active session, no client, a selection the client cannot take, or a locked session or
                // login screen: an immediate empty answer, never host data (the core disconnects a non-active
                // agent that does not read these).
                let _ = data_type;
                out.push(Action::Agent(
                    id,
                    SessionMessage::ClipboardData {
                        selection,
                        data_type: ClipboardType::None,
                        data: Vec::new(),
                    },
                ));
            }
            _ if !active || !self.port_open => {
                tracing::debug!(
                    agent = id,
                    "dropping a frame from an agent that is not active"
                );
            }
            SessionMessage::ClipboardGrab { selection, .. }
            | SessionMessage::ClipboardData { selection, .. }
            | SessionMessage::ClipboardRelease { selection }
                if !self.selection_crosses(selection) =>
            {
                // Without CLIPBOARD_SELECTION the client has only its clipboard: PRIMARY (every highlight in the
                // guest) must not replace it, as spice-vdagentd does.
                tracing::debug!(
                    agent = id,
                    ?selection,
                    "selection not for a legacy client: dropped"
                );
            }
            SessionMessage::ClipboardGrab { selection, types } => {
                let types = capped_types(types, "session agent");
                if self.clipboard_blocked() {
                    self.withhold(selection, Withheld::Guest(types));
                } else {
                    self.forward_guest_grab(&mut out, selection, types);
                }
            }
            SessionMessage::ClipboardRequest {
                selection,
                data_type,
            } => {
                let msg = Message::ClipboardRequest {
                    selection,
                    data_type,
                };
                self.send(&mut out, Port::Client, &msg);
            }
            SessionMessage::ClipboardData {
                selection,
                data_type,
                data,
            } => {
                // Locked or login screen: an answer to a request from before the lock goes out empty.
                let data = if self.clipboard_too_big(data.len()) || self.clipboard_blocked() {
                    Vec::new()
                } else {
                    data
                };
                if let Some(head) = self.clipboard_head(selection, data_type, data.len()) {
                    out.push(Action::PortData { head, data });
                }
            }
            SessionMessage::ClipboardRelease { selection } => {
                self.forget_withheld(selection, false);
                if self.guest_owned.remove(&selection.as_u8()) {
                    self.send(
                        &mut out,
                        Port::Client,
                        &Message::ClipboardRelease { selection },
                    );
                }
            }
            SessionMessage::FileXferStatus {
                id: xfer,
                status,
                disk_free_space,
                error_code,
            } => {
                // Only the agent the transfer is bound to may report on it (CVE-2020-25651).
                if self.xfers.get(&xfer) == Some(&id) {
                    let result = FileXferResult::from_u32(status);
                    let detail = match (result, disk_free_space, error_code) {
                        (FileXferResult::NotEnoughSpace, Some(free), _) => {
                            FileXferDetail::NotEnoughSpace {
                                disk_free_space: free,
                            }
                        }
                        (FileXferResult::Error, _, Some(code)) => FileXferDetail::Error {
                            error_type: ERROR_TYPE_GLIB_IO,
                            error_code: code,
                        },
                        _ => FileXferDetail::None,
                    };
                    if result != FileXferResult::CanSendData {
                        self.xfers.remove(&xfer);
                    }
                    self.status(&mut out, xfer, result, detail);
                }
            }
            SessionMessage::Error { code, message } => {
                log_limited!(
                    warn,
                    agent = id,
                    code = ?truncated(&code),
                    message = ?truncated(&message),
                    "session agent error"
                );
            }
            other => tracing::debug!(
                agent = id,
                kind = other.kind(),
                "ignoring an unexpected frame"
            ),
        }
        out
    }

    fn client_has(&self, cap: Capability) -> bool {
        self.client.as_ref().is_some_and(|c| c.has(cap))
    }

    /// Whether `selection` may cross to or from the client: any with CLIPBOARD_SELECTION negotiated by the newest
    /// announcement, only CLIPBOARD without it.
    fn selection_crosses(&self, selection: Selection) -> bool {
        self.wire.selection || selection == Selection::Clipboard
    }

    /// The start of a clipboard answer that agent `id` streams (a large one): `len` data bytes follow. When it
    /// goes to the client this returns [`Action::PortStream`], and the core passes those bytes on to the port as
    /// they arrive; otherwise the core drops them. Same rules as a whole [`SessionMessage::ClipboardData`].
    pub fn on_agent_stream(&mut self, id: AgentId, msg: SessionMessage, len: usize) -> Vec<Action> {
        let mut out = Vec::new();
        let SessionMessage::ClipboardData {
            selection,
            data_type,
            ..
        } = msg
        else {
            tracing::debug!(
                agent = id,
                kind = msg.kind(),
                "dropping a streamed frame that is not clipboard data"
            );
            return out;
        };
        if self.active_agent() != Some(id) || !self.port_open || !self.selection_crosses(selection)
        {
            tracing::debug!(
                agent = id,
                "dropping a clipboard answer from an agent that is not active (or for a legacy client's other selection)"
            );
        } else if self.clipboard_too_big(len) || self.clipboard_blocked() {
            out.extend(
                self.clipboard_head(selection, data_type, 0)
                    .map(Action::Port),
            );
        } else if let Some(head) = self.clipboard_head(selection, data_type, len) {
            out.push(Action::PortStream {
                agent: id,
                head,
                len,
            });
        }
        out
    }

    /// Whether a guest clipboard of `len` bytes exceeds the client's MAX_CLIPBOARD (it then gets an empty one).
    fn clipboard_too_big(&self, len: usize) -> bool {
        self.max_clipboard
            .is_some_and(|m| m >= 0 && len > m as usize)
    }

    /// The head of a CLIPBOARD message to the client whose `len` data bytes follow it.
    fn clipboard_head(
        &self,
        selection: Selection,
        data_type: ClipboardType,
        len: usize,
    ) -> Option<Vec<u8>> {
        let msg = Message::Clipboard {
            selection,
            data_type,
            data: Vec::new(),
        };
        encode_single_head(Port::Client, &msg, len, self.wire)
            .map_err(|e| log_limited!(warn, "cannot encode CLIPBOARD: {e}"))
            .ok()
    }

    /// A whole message from the port.
    pub fn on_port(&mut self, port: Port, raw: RawMessage) -> Vec<Action> {
        let mut out = Vec::new();
        // What `invalid_message` needs if decoding fails: the type and a transfer id's bytes.
        let probe = RawMessage {
            header: raw.header,
            payload: raw.payload.get(..4).unwrap_or_default().to_vec(),
        };
        let msg = match raw.into_decoded(self.wire) {
            Ok(m) => m,
            Err(e) => {
                log_limited!(
                    warn,
                    msg_type = probe.header.msg_type,
                    error = ?truncated(&e.to_string()),
                    "invalid message from the host"
                );
                self.invalid_message(&mut out, &probe);
                return out;
            }
        };
        match msg {
            Message::AnnounceCapabilities { request, caps } => {
                self.wire = WireFormat::negotiate(&self.ours, &caps);
                log_limited!(info, caps = ?Words(caps.words()), request, "client capabilities");
                self.client = Some(caps);
                if request {
                    // A new client: forget the old one's transfers and serials, answer with our caps.
                    self.drop_transfers(&mut out);
                    if self.client_connected {
                        self.to_active(&mut out, SessionMessage::ClientDisconnected);
                    }
                    self.serials.reset();
                    self.withheld.clear();
                    let reply = Message::AnnounceCapabilities {
                        request: false,
                        caps: self.ours.clone(),
                    };
                    self.send(&mut out, port, &reply);
                }
                if !self.client_connected {
                    self.client_connected = true;
                    self.to_active(&mut out, SessionMessage::ClientConnected);
                }
            }
            Message::MonitorsConfig(mc) => {
                let reply = Message::Reply {
                    message_type: MessageType::MonitorsConfig.as_u32(),
                    result: ReplyResult::Success,
                };
                self.send(&mut out, port, &reply);
                self.to_active(&mut out, monitors_msg(&mc));
                self.monitors = Some(mc);
            }
            Message::ClipboardGrab {
                selection,
                serial,
                types,
            } => {
                let accepted = match serial {
                    Some(s) => self.serials.accept(selection, s, SerialRule::Guest),
                    None => true,
                };
                if accepted {
                    let types = capped_types(types, "host");
                    self.guest_owned.remove(&selection.as_u8());
                    if self.clipboard_blocked() {
                        self.withhold(selection, Withheld::Host(types));
                    } else {
                        self.to_active(
                            &mut out,
                            SessionMessage::ClipboardGrab { selection, types },
                        );
                    }
                } else {
                    tracing::debug!(?serial, "stale clipboard grab serial dropped");
                }
            }
            Message::ClipboardRequest {
                selection,
                data_type,
            } => {
                // Locked or login screen: the client's paste gets an empty answer at once (spice-gtk ends its
                // wait on any CLIPBOARD of the selection), never guest data.
                if self.clipboard_blocked()
                    || !self.to_active(
                        &mut out,
                        SessionMessage::ClipboardRequest {
                            selection,
                            data_type,
                        },
                    )
                {
                    let empty = Message::Clipboard {
                        selection,
                        data_type: ClipboardType::None,
                        data: Vec::new(),
                    };
                    self.send(&mut out, Port::Client, &empty);
                }
            }
            Message::Clipboard {
                selection,
                data_type,
                data,
            } => {
                // Locked or login screen: an answer to a request from before the lock arrives empty.
                let (data_type, data) = if self.clipboard_blocked() {
                    (ClipboardType::None, Vec::new())
                } else {
                    (data_type, data)
                };
                self.to_active(
                    &mut out,
                    SessionMessage::ClipboardData {
                        selection,
                        data_type,
                        data,
                    },
                );
            }
            Message::ClipboardRelease { selection } => {
                self.forget_withheld(selection, true);
                self.to_active(&mut out, SessionMessage::ClipboardRelease { selection });
            }
            Message::FileXferStart(start) => self.xfer_start(&mut out, start),
            Message::FileXferData(data) => {
                if let Some(agent) = self.xfers.get(&data.id) {
                    out.push(Action::Agent(
                        *agent,
                        SessionMessage::FileXferData {
                            id: data.id,
                            data: data.data,
                        },
                    ));
                }
            }
            Message::FileXferStatus(st) => {
                if st.result != FileXferResult::CanSendData {
                    if let Some(agent) = self.xfers.remove(&st.id) {
                        out.push(Action::Agent(
                            agent,
                            SessionMessage::FileXferCancel { id: st.id },
                        ));
                    }
                }
            }
            Message::ClientDisconnected => {
                out.push(Action::ResetClientPort);
                self.drop_transfers(&mut out);
                if std::mem::take(&mut self.client_connected) {
                    self.to_active(&mut out, SessionMessage::ClientDisconnected);
                }
                self.guest_owned.clear();
                self.withheld.clear();
            }
            Message::MaxClipboard { max } => {
                self.max_clipboard = Some(max);
                self.to_active(&mut out, SessionMessage::MaxClipboard { max: max.into() });
            }
            Message::GraphicsDeviceInfo(info) => {
                self.to_active(&mut out, device_info_msg(&info));
                self.device_info = Some(info);
            }
            Message::AudioVolumeSync(v) => {
                self.to_active(
                    &mut out,
                    SessionMessage::AudioVolumeSync {
                        is_playback: v.is_playback,
                        mute: v.mute,
                        volumes: v.volumes,
                    },
                );
            }
            Message::MouseState(m) => self.mouse(&mut out, m),
            Message::Reply { .. } | Message::DisplayConfig(_) => {}
        }
        out
    }

    fn mouse(&self, out: &mut Vec<Action>, m: MouseState) {
        let Some(geometry) = self.active_geometry() else {
            return;
        };
        // x/y are relative to display `display_id`; an unknown display drops the event (like vdagentd).
        let Some(mon) = geometry
            .iter()
            .find(|g| g.display_id == u32::from(m.display_id))
        else {
            tracing::debug!(
                display = m.display_id,
                "mouse event for an unknown display dropped"
            );
            return;
        };
        out.push(Action::Mouse(
            i64::from(m.x) + i64::from(mon.x),
            i64::from(m.y) + i64::from(mon.y),
            m.buttons,
        ));
    }
}

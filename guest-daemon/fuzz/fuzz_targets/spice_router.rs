//! Fuzz target: guestlinkd's SPICE routing without I/O. Port bytes (through the guest-side reassembler) and
//! session-agent frames go into the `Router`; its actions go into the agents' queues (`agent_queue`), whose
//! writers the input lets run or stall; session switches, agents coming and going and port resets are inputs too.
//! It calls the same router entry points as the core (`guest-daemon/src/spice/core.rs`: `on_port`, `on_agent`,
//! `agent_connected`, `agent_gone`, `set_active`, `port_opened`, `port_closed`); the core itself is not compiled
//! in, as it pulls in the port, the tablet and the agent connections (D-Bus, evdev, the daemon's runtime). The
//! core's own behaviour is unit-tested over in-memory pipes (`spice/core_tests.rs`). A small model of the core keeps a frame that does not fit in the active
//! agent's backlog and stops "reading the port" meanwhile, and drops a non-active agent whose queue is full.
//!
//! Asserted after every step (issue 16 finding 5): the byte budget accounts for every byte each queued frame
//! holds (metadata included); the bytes held by a queue stay within `QUEUE_BYTES` (plus at most one oversized
//! frame queued alone); no clipboard grab carries more than `MAX_GRAB_TYPES` types either way; the backlog and
//! the reassembler's buffer stay bounded.
#![no_main]

use std::collections::{HashMap, VecDeque};

use guestlink_protocol::session::{GeometryMonitor, SessionMessage};
use guestlink_protocol::vdagent::{
    ClipboardType, Message, Port, Reassembler, ReassemblerConfig, Selection, WireFormat,
};
use libfuzzer_sys::fuzz_target;
use tokio::sync::mpsc::error::TrySendError;

/// guestlinkd's sans-I/O SPICE modules, compiled from their source.
#[path = "../../src/spice"]
#[allow(dead_code)]
mod spice {
    pub mod agent_queue;
    pub mod log_limit;
    pub mod router;
}

use spice::agent_queue::{self, AgentRx, AgentTx, KillSwitch, QUEUE_BYTES};
use spice::router::{Action, AgentId, Router, MAX_GRAB_TYPES};

/// The core's backlog limit (`MAX_BACKLOG` in spice/core.rs).
const MAX_BACKLOG: usize = 1024;

/// One agent as the core sees it: its queue, the writer's end (stalled or draining), the sizes of the frames in
/// the queue (the model's own count, to check the budget against), and its backlog.
struct ModelAgent {
    tx: AgentTx,
    rx: AgentRx,
    _kill: KillSwitch,
    queued: VecDeque<usize>,
    backlog: VecDeque<SessionMessage>,
}

struct Model {
    router: Router,
    reasm: Reassembler,
    agents: HashMap<AgentId, ModelAgent>,
    port_open: bool,
    /// Wire format the "host" uses for the port messages it builds (the last one the target announced).
    wire: WireFormat,
}

/// A little reader over the fuzz input.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

fn session_of(id: AgentId) -> String {
    format!("s{id}")
}

impl Model {
    fn new() -> Self {
        Self {
            router: Router::new(),
            reasm: Reassembler::new(ReassemblerConfig::guest_side()),
            agents: HashMap::new(),
            port_open: false,
            wire: WireFormat::default(),
        }
    }

    fn active_backlog(&self) -> bool {
        self.router
            .active_agent()
            .and_then(|id| self.agents.get(&id))
            .is_some_and(|a| !a.backlog.is_empty())
    }

    fn drop_agent(&mut self, id: AgentId) {
        if self.agents.remove(&id).is_some() {
            let acts = self.router.agent_gone(id);
            self.apply(acts);
        }
    }

    fn send_to_agent(&mut self, id: AgentId, msg: SessionMessage) {
        if let SessionMessage::ClipboardGrab { types, .. } = &msg {
            assert!(
                types.len() <= MAX_GRAB_TYPES,
                "grab with {} types to an agent",
                types.len()
            );
        }
        let active = self.router.active_agent() == Some(id);
        let Some(a) = self.agents.get_mut(&id) else {
            return;
        };
        if !a.backlog.is_empty() {
            if a.backlog.len() < MAX_BACKLOG {
                a.backlog.push_back(msg);
            } else {
                self.drop_agent(id);
            }
            return;
        }
        let held = msg.held_bytes();
        match a.tx.try_send(msg) {
            Ok(()) => a.queued.push_back(held),
            Err(TrySendError::Full(_)) if !active => self.drop_agent(id),
            Err(TrySendError::Full(m)) => a.backlog.push_back(m),
            Err(TrySendError::Closed(_)) => self.drop_agent(id),
        }
    }

    fn apply(&mut self, acts: Vec<Action>) {
        for a in acts {
            match a {
                Action::Agent(id, msg) => self.send_to_agent(id, msg),
                Action::Port(bytes) => self.check_port_bytes(&bytes),
                Action::PortData { head, .. } | Action::PortStream { head, .. } => {
                    assert!(head.len() < 64, "a data head of {} bytes", head.len());
                }
                Action::Mouse(..) | Action::Tablet(_) => {}
                Action::ResetClientPort => self.reasm.reset_port(Port::Client),
            }
        }
    }

    /// Guest→host bytes: whole chunks; a grab is capped too.
    fn check_port_bytes(&self, bytes: &[u8]) {
        let mut r = Reassembler::new(ReassemblerConfig::host_side());
        for ev in r.feed(bytes) {
            let (_, raw) = ev.expect("the router writes valid chunks");
            for wire in WireFormat::ALL {
                if let Ok(Message::ClipboardGrab { types, .. }) = raw.decode(wire) {
                    // Decoded in the widest way it could be read; a serial or prefix adds at most 2 "types".
                    assert!(
                        types.len() <= MAX_GRAB_TYPES + 2,
                        "grab with {} types to the host",
                        types.len()
                    );
                }
            }
        }
    }

    /// The writer of agent `id` takes up to `n` frames.
    fn drain(&mut self, id: AgentId, n: usize) {
        let Some(a) = self.agents.get_mut(&id) else {
            return;
        };
        for _ in 0..n {
            match a.rx.try_recv() {
                Ok(q) => {
                    assert_eq!(a.queued.pop_front(), Some(q.msg.held_bytes()));
                    drop(q);
                }
                Err(_) => break,
            }
        }
        // Room again: the backlog moves in, in order (the core's `refill`).
        while let Some(m) = a.backlog.pop_front() {
            let held = m.held_bytes();
            match a.tx.try_send(m) {
                Ok(()) => a.queued.push_back(held),
                Err(TrySendError::Full(m)) | Err(TrySendError::Closed(m)) => {
                    a.backlog.push_front(m);
                    break;
                }
            }
        }
    }

    fn port_reset(&mut self) {
        self.reasm.reset();
        let acts = self.router.port_closed();
        self.apply(acts);
        self.port_open = false;
    }

    fn reconcile(&mut self) {
        if self.router.wants_port() && !self.port_open {
            self.port_open = true;
            self.reasm.reset();
            let acts = self.router.port_opened();
            self.apply(acts);
        } else if !self.router.wants_port() && self.port_open {
            self.port_reset();
        }
    }

    fn check(&self) {
        for a in self.agents.values() {
            let held: usize = a.queued.iter().sum();
            let accounted: usize = a.queued.iter().map(|h| (*h).min(QUEUE_BYTES)).sum();
            // The budget covers every byte each queued frame holds (metadata included).
            assert_eq!(
                a.tx.queued_bytes(),
                accounted,
                "queue budget does not match what is held"
            );
            assert!(
                held <= QUEUE_BYTES || a.queued.len() == 1,
                "{held} bytes held in {} frames",
                a.queued.len()
            );
            assert!(a.backlog.len() <= MAX_BACKLOG);
        }
        assert!(self.reasm.buffered_bytes() <= 2 * 64 * 1024 * 1024 + 4096);
    }
}

/// A session-agent frame built from the input.
fn agent_frame(inp: &mut Input<'_>) -> Option<SessionMessage> {
    let sel = Selection::from_u8(inp.u8()? % 3);
    Some(match inp.u8()? % 8 {
        0 => SessionMessage::ClipboardGrab {
            selection: sel,
            types: (0..inp.u16()?)
                .map(|t| ClipboardType::from_u32(u32::from(t % 8)))
                .collect(),
        },
        1 => SessionMessage::ClipboardRequest {
            selection: sel,
            data_type: ClipboardType::Utf8Text,
        },
        2 => SessionMessage::ClipboardData {
            selection: sel,
            data_type: ClipboardType::Utf8Text,
            data: vec![b'x'; usize::from(inp.u16()?)],
        },
        3 => SessionMessage::ClipboardRelease { selection: sel },
        4 => SessionMessage::Geometry {
            monitors: vec![GeometryMonitor {
                display_id: 0,
                x: 0,
                y: 0,
                width: 1024,
                height: 768,
            }],
        },
        5 => SessionMessage::FileXferStatus {
            id: u32::from(inp.u8()?),
            status: u32::from(inp.u8()? % 8),
            disk_free_space: None,
            error_code: None,
        },
        6 => SessionMessage::Error {
            code: "x".repeat(usize::from(inp.u8()?)),
            message: String::new(),
        },
        _ => SessionMessage::ClientConnected,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut m = Model::new();
    let mut inp = Input(data);
    while let Some(op) = inp.u8() {
        match op % 8 {
            // Port bytes (one read), unless the core would not read now.
            0 | 1 => {
                let n = usize::from(inp.u16().unwrap_or(0));
                let bytes = inp.bytes(n).to_vec();
                if m.port_open && !m.active_backlog() {
                    for ev in m.reasm.feed(&bytes) {
                        match ev {
                            Ok((port, raw)) => {
                                if raw.header.msg_type == 6 {
                                    m.wire = WireFormat::default();
                                }
                                let acts = m.router.on_port(port, raw);
                                m.apply(acts);
                            }
                            Err(_) => {
                                m.port_reset();
                                break;
                            }
                        }
                    }
                }
            }
            // A frame from agent 1 or 2.
            2 => {
                let id = AgentId::from(inp.u8().unwrap_or(0) % 2 + 1);
                let Some(f) = agent_frame(&mut inp) else {
                    break;
                };
                if m.agents.contains_key(&id) {
                    let acts = m.router.on_agent(id, f);
                    m.apply(acts);
                }
            }
            // Agent 1 or 2 connects or leaves.
            3 => {
                let id = AgentId::from(inp.u8().unwrap_or(0) % 2 + 1);
                if m.agents.contains_key(&id) {
                    m.drop_agent(id);
                } else if let Ok(acts) = m.router.agent_connected(id, session_of(id)) {
                    let (tx, rx, kill) = agent_queue::channel();
                    m.agents.insert(
                        id,
                        ModelAgent {
                            tx,
                            rx,
                            _kill: kill,
                            queued: VecDeque::new(),
                            backlog: VecDeque::new(),
                        },
                    );
                    m.apply(acts);
                }
            }
            // logind switches the active session (none, s1, s2), maybe locked.
            4 => {
                let b = inp.u8().unwrap_or(0);
                let session = match b % 3 {
                    0 => None,
                    n => Some(session_of(AgentId::from(n))),
                };
                let acts = m.router.set_active(session, b & 4 != 0, b & 8 == 0);
                m.apply(acts);
            }
            // A writer takes some frames.
            5 | 6 => {
                let id = AgentId::from(inp.u8().unwrap_or(0) % 2 + 1);
                let n = usize::from(inp.u8().unwrap_or(0));
                m.drain(id, n);
            }
            // The port fails.
            _ => m.port_reset(),
        }
        m.reconcile();
        m.check();
    }
});

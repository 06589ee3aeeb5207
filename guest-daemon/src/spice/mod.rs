//! SPICE agent side of guestlinkd: owns the `com.redhat.spice.0` port, speaks the vdagent protocol to the host
//! (spice-server / client), serves `guestlink-session` agents on a unix socket and drives the uinput tablet.
//!
//! One task owns the port and the [`router::Router`] state; connection tasks ([`agents`]) and the logind
//! follower ([`logind`]) feed it events. Like spice-vdagentd, the port is opened only while the agent of the
//! active session has reported its geometry, and closed when none can serve; a stream error (chunk > 2048 bytes,
//! lost sync, a message above the size cap) closes and reopens it.
//!
//! Flow control: frames for an agent go through its writer queue ([`agent_queue`]: at most 256 frames and
//! 16 MiB, metadata included). When the active agent's queue is full, further frames for it wait in a small
//! backlog and the core stops reading the port until the agent drains its queue — the host then blocks on its end
//! (SPICE flow control through QEMU's chardev). Agent events keep being served meanwhile. Another agent never
//! pauses the port: when its queue is full it is dropped. An agent that makes no progress for the stall timeout
//! ([`DEFAULT_AGENT_STALL`], env `GUESTLINKD_SPICE_AGENT_STALL_MS`) is dropped; a dropped agent's connection is
//! shut down and its writer aborted ([`AgentTx::kill`]). Host- and user-controlled values are logged through
//! [`log_limit`].
//!
//! Streaming: a large clipboard answer from the active agent is not collected first. The router answers its
//! start with [`Action::PortStream`]; the core writes the vdagent head at once and passes each piece on to the
//! port as it arrives from the agent, holding other port writes (and not reading the port) until the last byte
//! is through. An agent that leaves or stalls mid-answer gets the port closed and reopened, so the host never
//! sees a message cut short followed by another.

pub mod agent_queue;
pub mod agents;
pub mod launch;
pub mod launch_io;
pub mod log_limit;
pub mod logind;
pub mod passed_fd;
pub mod peer;
pub mod port;
pub mod router;
pub mod tablet;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{Port, Reassembler, ReassemblerConfig};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use agent_queue::{AgentTx, Room};
use agents::Event;
use log_limit::log_limited;
use port::PortIo;
use router::{Action, AgentId, Refusal, Router};
use tablet::{Sink, Tablet};

/// Delay before reopening the port after it failed or closed on error.
const REOPEN_DELAY: Duration = Duration::from_secs(1);
/// A port write that makes no progress for this long (nobody reads the other end) counts as a port failure, so
/// the core never hangs on a stuck host.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// An agent whose queue stays full for this long without taking a frame is declared dead and dropped.
pub const DEFAULT_AGENT_STALL: Duration = Duration::from_secs(30);
/// Environment override of [`DEFAULT_AGENT_STALL`] in milliseconds (tests use a short one).
pub const AGENT_STALL_ENV: &str = "GUESTLINKD_SPICE_AGENT_STALL_MS";
/// Most frames waiting in one agent's backlog (behind its full queue). The port is not read while any backlog
/// exists, so only the frames of one port read and those caused by agent events end up here; above this the
/// agent is dropped to keep memory bounded.
const MAX_BACKLOG: usize = 1024;
/// Most port writes held behind a streaming clipboard answer. Few ever wait there (the port is not read
/// meanwhile); above this the port is reset to keep memory bounded.
const MAX_HELD: usize = 1024;

/// The SPICE options from the command line.
#[derive(Debug, Clone)]
pub struct SpiceOptions {
    /// The port: virtio device, pty, or unix socket to connect to.
    pub port_path: PathBuf,
    /// The session socket to listen on.
    pub session_socket: PathBuf,
    /// Accept one agent without logind.
    pub no_logind: bool,
    /// `--agent-uid`: without logind, the uid allowed to be the agent (default: the active VT's owner).
    pub agent_uid: Option<u32>,
    /// Write input events to this file instead of /dev/uinput.
    pub uinput_fake: Option<PathBuf>,
    /// The launcher socket to ask for a session agent where none connects ([`launch`]); `None`: off.
    pub agent_launcher: Option<PathBuf>,
}

struct Core {
    opts: SpiceOptions,
    router: Router,
    port: Option<PortIo>,
    reasm: Reassembler,
    tablet: Tablet,
    agents: HashMap<AgentId, AgentTx>,
    /// Frames for agents whose queue is full, in order; while any is here the port is not read.
    backlog: HashMap<AgentId, Backlog>,
    /// See [`DEFAULT_AGENT_STALL`].
    stall: Duration,
    reopen_at: Option<tokio::time::Instant>,
    /// The agent data being passed on to the port, if any (see the module doc).
    port_stream: Option<PortStream>,
    /// Port writes waiting for the end of `port_stream`.
    held: VecDeque<Vec<u8>>,
}

/// A clipboard answer being streamed from an agent to the port.
struct PortStream {
    agent: AgentId,
    /// Data bytes still to come.
    left: usize,
    /// When the stream counts as stalled (no piece for the stall timeout).
    deadline: Instant,
}

/// Frames waiting for room in one agent's queue.
struct Backlog {
    frames: VecDeque<SessionMessage>,
    /// When the agent last took a frame (or the backlog began).
    progress: Instant,
}

/// What the core waits on to refill a stalled agent's queue: the agent, its queue, the data bytes of the first
/// frame waiting, and the stall deadline.
type StallWait = Option<(AgentId, AgentTx, usize, Instant)>;

/// Room for the first waiting frame in the queue of the stalled agent, or `Err` when the stall deadline passed /
/// it is gone.
async fn wait_room(wait: StallWait) -> (AgentId, Result<Room, ()>) {
    match wait {
        Some((id, tx, need, deadline)) => {
            let r = tokio::time::timeout_at(deadline, tx.room(need)).await;
            (id, r.map_err(|_| ()).and_then(|room| room))
        }
        None => std::future::pending().await,
    }
}

/// The stall timeout: [`AGENT_STALL_ENV`] if set to a number of milliseconds, else [`DEFAULT_AGENT_STALL`].
fn stall_timeout() -> Duration {
    std::env::var(AGENT_STALL_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_AGENT_STALL)
}

async fn read_port(port: Option<&mut PortIo>, buf: &mut [u8]) -> std::io::Result<usize> {
    match port {
        Some(p) => p.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Runs the SPICE side until a fatal set-up error (the session socket cannot be created, logind unreachable).
pub async fn run(opts: SpiceOptions) -> Result<()> {
    let logind = if opts.no_logind {
        None
    } else {
        Some(logind::Logind::connect().await?)
    };
    let listener = agents::bind(&opts.session_socket)?;
    // Without logind the one agent's "session" ("") is always active, unlocked, with file transfer.
    let (active_tx, mut active_rx) =
        watch::channel(opts.no_logind.then(|| logind::ActiveSession {
            id: String::new(),
            locked: false,
            file_xfer_allowed: true,
        }));
    // Without logind the sender is kept here: the active "session" ("") never changes.
    let _fixed_active = match logind.clone() {
        Some(l) => {
            tokio::spawn(l.follow_active_info(active_tx));
            None
        }
        None => Some(active_tx),
    };
    let (ev_tx, mut ev_rx) = mpsc::channel::<Event>(256);
    let ev_tx = launch_io::spawn(opts.agent_launcher.clone(), active_rx.clone(), ev_tx);
    tokio::spawn(agents::accept_loop(
        listener,
        agents::AcceptConfig {
            logind,
            path: opts.session_socket.clone(),
            agent_uid: opts
                .agent_uid
                .map_or(peer::AgentUid::ActiveVt, peer::AgentUid::Fixed),
        },
        ev_tx,
    ));
    tracing::info!(
        port = %opts.port_path.display(),
        socket = %opts.session_socket.display(),
        "SPICE agent side ready"
    );
    let sink = match &opts.uinput_fake {
        Some(p) => Sink::Fake(p.clone()),
        None => Sink::Uinput,
    };
    let mut core = Core {
        opts,
        router: Router::new(),
        port: None,
        reasm: Reassembler::new(ReassemblerConfig::guest_side()),
        tablet: Tablet::new(sink),
        agents: HashMap::new(),
        backlog: HashMap::new(),
        stall: stall_timeout(),
        reopen_at: None,
        port_stream: None,
        held: VecDeque::new(),
    };
    let initial = active_rx.borrow_and_update().clone();
    let acts = core.set_active(initial);
    core.apply(acts).await;
    // Large enough to take what a fast host queued in one read (a 64 MiB send-file arrives in a stream).
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let stalled = core.stall_wait();
        // Not read while the active agent's queue is full (never for another agent's), nor while a stream holds
        // the port: replies would only queue up behind it.
        let paused = core.active_backlog() || core.port_stream.is_some();
        let stream_deadline = core.port_stream.as_ref().map(|s| s.deadline);
        tokio::select! {
            // Not read while the active agent's queue is full: the host blocks instead of us buffering.
            r = read_port(core.port.as_mut(), &mut buf), if !paused => match r {
                Ok(0) => core.port_failed("the host closed the port").await,
                Ok(n) => core.port_bytes(n, &buf).await,
                Err(e) => core.port_failed(&e.to_string()).await,
            },
            ev = ev_rx.recv() => match ev {
                Some(ev) => core.event(ev).await,
                None => return Ok(()),
            },
            r = active_rx.changed() => {
                if r.is_ok() {
                    let s = active_rx.borrow_and_update().clone();
                    let acts = core.set_active(s);
                    core.apply(acts).await;
                }
            }
            (id, room) = wait_room(stalled) => core.refill(id, room).await,
            _ = sleep_until(core.reopen_at) => core.reopen_at = None,
            _ = sleep_until(stream_deadline) => core.stream_stalled().await,
        }
        core.reconcile().await;
    }
}

impl Core {
    /// The router's view of logind's active session.
    fn set_active(&mut self, s: Option<logind::ActiveSession>) -> Vec<Action> {
        match s {
            Some(a) => self
                .router
                .set_active(Some(a.id), a.locked, a.file_xfer_allowed),
            None => self.router.set_active(None, false, true),
        }
    }

    /// Whether the active agent has frames waiting behind its full queue (the port is not read meanwhile).
    fn active_backlog(&self) -> bool {
        self.router
            .active_agent()
            .is_some_and(|id| self.backlog.contains_key(&id))
    }

    /// The stalled agent to wait for (the one stalled longest), if any.
    fn stall_wait(&self) -> StallWait {
        let (id, b) = self.backlog.iter().min_by_key(|(_, b)| b.progress)?;
        let tx = self.agents.get(id)?.clone();
        let need = b.frames.front().map_or(0, agent_queue::share_of);
        Some((*id, tx, need, b.progress + self.stall))
    }

    /// Moves backlog frames into agent `id`'s queue now that it has room, or drops the agent if it stalled.
    async fn refill(&mut self, id: AgentId, room: Result<Room, ()>) {
        let Ok(room) = room else {
            let stall = self.stall;
            log_limited!(
                warn,
                agent = id,
                ?stall,
                "session agent not reading: disconnecting it"
            );
            self.drop_agent(id).await;
            return;
        };
        let (Some(b), Some(tx)) = (self.backlog.get_mut(&id), self.agents.get(&id)) else {
            return;
        };
        b.progress = Instant::now();
        if let Some(first) = b.frames.pop_front() {
            room.send(first);
        }
        while let Some(m) = b.frames.pop_front() {
            match tx.try_send(m) {
                Ok(()) => {}
                Err(TrySendError::Full(m)) => {
                    b.frames.push_front(m);
                    break;
                }
                // Its connection ended: the `Gone` event follows.
                Err(TrySendError::Closed(_)) => b.frames.clear(),
            }
        }
        if b.frames.is_empty() {
            self.backlog.remove(&id);
            tracing::debug!(
                agent = id,
                "session agent caught up: reading the SPICE port again"
            );
        }
    }

    /// Forgets agent `id` and applies the consequences; its connection is shut down and its writer aborted (see
    /// [`AgentTx::kill`]), so its queue is freed at once.
    async fn drop_agent(&mut self, id: AgentId) {
        self.backlog.remove(&id);
        Box::pin(self.stream_source_gone(id)).await;
        if let Some(tx) = self.agents.remove(&id) {
            tx.kill();
            let more = self.router.agent_gone(id);
            Box::pin(self.apply(more)).await;
        }
    }

    async fn port_bytes(&mut self, n: usize, buf: &[u8]) {
        for ev in self.reasm.feed(&buf[..n]) {
            match ev {
                Ok((port, raw)) => {
                    tracing::trace!(
                        ?port,
                        msg_type = raw.header.msg_type,
                        len = raw.payload.len(),
                        "from host"
                    );
                    let acts = self.router.on_port(port, raw);
                    self.apply(acts).await;
                }
                Err(e) => {
                    self.port_failed(&format!("protocol error: {e}")).await;
                    return;
                }
            }
        }
    }

    /// Closes the port after an error; it is reopened after [`REOPEN_DELAY`] if an agent can still serve.
    async fn port_failed(&mut self, why: &str) {
        log_limited!(warn, "SPICE port: {why}; closing and reopening it");
        self.close_port().await;
        self.reopen_at = Some(tokio::time::Instant::now() + REOPEN_DELAY);
    }

    async fn close_port(&mut self) {
        if self.port.take().is_some() {
            self.forget_port_writes();
            self.reasm.reset();
            let acts = self.router.port_closed();
            self.apply(acts).await;
        }
    }

    /// Opens or closes the port to match [`Router::wants_port`].
    async fn reconcile(&mut self) {
        let wants = self.router.wants_port();
        if !wants && self.port.is_some() {
            tracing::info!("no active session agent: closing the SPICE port");
            self.close_port().await;
        } else if wants && self.port.is_none() && self.reopen_at.is_none() {
            match PortIo::open(&self.opts.port_path).await {
                Ok(p) => {
                    tracing::info!(path = %self.opts.port_path.display(), "SPICE port opened");
                    self.port = Some(p);
                    self.reasm.reset();
                    let acts = self.router.port_opened();
                    self.apply(acts).await;
                }
                Err(e) => {
                    tracing::warn!(path = %self.opts.port_path.display(), "cannot open the SPICE port: {e}");
                    self.reopen_at = Some(tokio::time::Instant::now() + REOPEN_DELAY);
                }
            }
        }
    }

    async fn event(&mut self, ev: Event) {
        match ev {
            Event::Connected { id, session, tx } => {
                match self.router.agent_connected(id, session) {
                    Ok(acts) => {
                        self.agents.insert(id, tx);
                        self.apply(acts).await;
                    }
                    Err(Refusal::SessionTaken) => {
                        log_limited!(
                            warn,
                            agent = id,
                            "a second agent for the same session: refused"
                        );
                        let _ = tx.try_send(SessionMessage::Error {
                            code: "session-taken".into(),
                            message: "another agent already serves this session".into(),
                        });
                    }
                }
            }
            Event::Message(id, msg) => {
                if self.agents.contains_key(&id) {
                    let acts = self.router.on_agent(id, msg);
                    self.apply(acts).await;
                }
            }
            Event::StreamBegin(id, msg, len) => {
                if self.agents.contains_key(&id) {
                    let acts = self.router.on_agent_stream(id, msg, len);
                    self.apply(acts).await;
                }
            }
            Event::MessageFile(id, selection, data_type, file, len) => {
                if self.agents.contains_key(&id) {
                    // Routed like a streamed answer; its data comes from the file instead of in pieces.
                    let msg = SessionMessage::ClipboardData {
                        selection,
                        data_type,
                        data: Vec::new(),
                    };
                    for a in self.router.on_agent_stream(id, msg, len) {
                        match a {
                            Action::PortStream { agent, head, len } => {
                                self.start_stream(agent, head, len, Some(&file)).await;
                            }
                            other => self.apply(vec![other]).await,
                        }
                    }
                }
            }
            Event::StreamData(id, piece) => self.stream_piece(id, &piece).await,
            Event::StreamEnd(id) => self.stream_end(id).await,
            Event::Gone(id) => {
                self.backlog.remove(&id);
                self.stream_source_gone(id).await;
                if self.agents.remove(&id).is_some() {
                    tracing::info!(agent = id, "session agent disconnected");
                    let acts = self.router.agent_gone(id);
                    self.apply(acts).await;
                }
            }
        }
    }

    /// Writes `parts` in order to the port (if open); a failure or a [`WRITE_TIMEOUT`] closes it.
    async fn write_port(&mut self, parts: &[&[u8]]) {
        let Some(p) = self.port.as_mut() else {
            return;
        };
        let write = async {
            for part in parts {
                p.write_all(part).await?;
            }
            Ok(())
        };
        let written = tokio::time::timeout(WRITE_TIMEOUT, write)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        self.port_written(written).await;
    }

    /// Writes `head`, then the first `len` bytes of `file` to the port (if open), like [`Core::write_port`]; the
    /// timeout applies to each piece, so a large answer to a slow host is not cut short.
    async fn write_port_file(&mut self, head: &[u8], file: &File, len: usize) {
        let Some(p) = self.port.as_mut() else {
            return;
        };
        let written = async {
            tokio::time::timeout(WRITE_TIMEOUT, p.write_all(head))
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))?;
            p.write_file(file, len, WRITE_TIMEOUT).await
        }
        .await;
        self.port_written(written).await;
    }

    /// After a port write: a failure closes the port (it is reopened later).
    async fn port_written(&mut self, written: std::io::Result<()>) {
        if let Err(e) = written {
            // Finish this batch without the port; the read side notices and reopens.
            tracing::warn!("SPICE port write: {e}");
            self.port = None;
            self.forget_port_writes();
            self.reasm.reset();
            let more = self.router.port_closed();
            self.reopen_at = Some(tokio::time::Instant::now() + REOPEN_DELAY);
            Box::pin(self.apply(more)).await;
        }
    }

    /// Starts passing `agent`'s streamed data to the port behind `head` (see [`Action::PortStream`]).
    /// With `file`, the data is the file's (a checked memfd, see [`Event::MessageFile`]) and is written at once.
    async fn start_stream(
        &mut self,
        agent: AgentId,
        head: Vec<u8>,
        len: usize,
        file: Option<&File>,
    ) {
        if let Some(s) = &self.port_stream {
            // Only after a session switch in the middle of the previous agent's answer; this one is dropped.
            tracing::warn!(
                agent,
                busy = s.agent,
                "a clipboard answer while another one is streaming: dropped"
            );
            return;
        }
        if self.port.is_none() {
            return;
        }
        if let Some(file) = file {
            return self.write_port_file(&head, file, len).await;
        }
        self.write_port(&[&head]).await;
        if self.port.is_some() && len > 0 {
            self.port_stream = Some(PortStream {
                agent,
                left: len,
                deadline: Instant::now() + self.stall,
            });
        }
    }

    /// A piece of `agent`'s streamed data: to the port if that is where its stream goes, else dropped.
    async fn stream_piece(&mut self, agent: AgentId, piece: &[u8]) {
        let Some(s) = self.port_stream.as_mut().filter(|s| s.agent == agent) else {
            return;
        };
        // The decoder never gives more than announced; checked anyway, as the wire depends on it.
        let Some(left) = s.left.checked_sub(piece.len()) else {
            return self
                .port_failed("a streamed clipboard answer ran over its length")
                .await;
        };
        s.left = left;
        self.write_port(&[piece]).await;
        // Counted from the end of the write: a host slow to take the piece is not the agent stalling.
        if let Some(s) = self.port_stream.as_mut() {
            s.deadline = Instant::now() + self.stall;
        }
    }

    /// The end of `agent`'s streamed data: the port is free again; the writes held meanwhile go out.
    async fn stream_end(&mut self, agent: AgentId) {
        match &self.port_stream {
            Some(s) if s.agent == agent && s.left > 0 => {
                self.port_failed("a streamed clipboard answer ended early")
                    .await;
            }
            Some(s) if s.agent == agent => {
                self.port_stream = None;
                while let Some(bytes) = self.held.pop_front() {
                    self.write_port(&[&bytes]).await;
                }
            }
            _ => {}
        }
    }

    /// Agent `id` is going away: if its answer was streaming to the port, the message is cut short, so the port
    /// is closed and reopened (the host then discards the partial message).
    async fn stream_source_gone(&mut self, id: AgentId) {
        if self.port_stream.as_ref().is_some_and(|s| s.agent == id) {
            self.port_failed("the session agent left in the middle of a clipboard answer")
                .await;
        }
    }

    /// No piece of the streaming answer for the stall timeout: the agent is dropped (and the port reset).
    async fn stream_stalled(&mut self) {
        if let Some(agent) = self.port_stream.as_ref().map(|s| s.agent) {
            let stall = self.stall;
            tracing::warn!(
                agent,
                ?stall,
                "session agent stalled in the middle of a clipboard answer: disconnecting it"
            );
            self.drop_agent(agent).await;
        }
    }

    /// Queues a port write behind the streaming answer; far too many (a flood while it streams) resets the port.
    async fn hold(&mut self, bytes: Vec<u8>) {
        if self.held.len() >= MAX_HELD {
            // Boxed: port_failed applies the router's actions, which may hold writes again.
            return Box::pin(
                self.port_failed("too many port writes waiting behind a clipboard answer"),
            )
            .await;
        }
        self.held.push_back(bytes);
    }

    /// The port is gone: a streaming answer and the writes held behind it are dropped.
    fn forget_port_writes(&mut self) {
        self.port_stream = None;
        self.held.clear();
    }

    async fn apply(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Port(bytes) if self.port_stream.is_some() => self.hold(bytes).await,
                Action::PortData { head, data } if self.port_stream.is_some() => {
                    self.hold(head).await;
                    self.hold(data).await;
                }
                Action::Port(bytes) => self.write_port(&[&bytes]).await,
                Action::PortData { head, data } => self.write_port(&[&head, &data]).await,
                Action::PortStream { agent, head, len } => {
                    self.start_stream(agent, head, len, None).await;
                }
                Action::Agent(id, msg) => {
                    let Some(tx) = self.agents.get(&id) else {
                        continue;
                    };
                    if let Some(b) = self.backlog.get_mut(&id) {
                        // Keep the order: behind the frames already waiting.
                        if b.frames.len() < MAX_BACKLOG {
                            b.frames.push_back(msg);
                        } else {
                            log_limited!(
                                warn,
                                agent = id,
                                "session agent backlog full: disconnecting it"
                            );
                            self.drop_agent(id).await;
                        }
                        continue;
                    }
                    match tx.try_send(msg) {
                        Ok(()) => {}
                        Err(TrySendError::Full(_)) if self.router.active_agent() != Some(id) => {
                            // Only the active agent may hold up the port; another one that does not read what
                            // it asked for (clipboard requests answered empty, say) is disconnected.
                            log_limited!(
                                warn,
                                agent = id,
                                "a session agent that is not active does not read its queue: disconnecting it"
                            );
                            self.drop_agent(id).await;
                        }
                        Err(TrySendError::Full(msg)) => {
                            tracing::debug!(
                                agent = id,
                                queued = tx.queued_bytes(),
                                "session agent queue full: pausing the SPICE port"
                            );
                            self.backlog.insert(
                                id,
                                Backlog {
                                    frames: VecDeque::from([msg]),
                                    progress: Instant::now(),
                                },
                            );
                        }
                        Err(TrySendError::Closed(_)) => {
                            tracing::info!(agent = id, "session agent connection closed");
                            self.drop_agent(id).await;
                        }
                    }
                }
                Action::Mouse(x, y, buttons) => self.tablet.mouse(x, y, buttons),
                Action::Tablet(g) => self.tablet.set_geometry(&g),
                Action::ResetClientPort => self.reasm.reset_port(Port::Client),
            }
        }
    }
}

impl SpiceOptions {
    /// Default session socket path (the packaged units and guestlink-session use it).
    pub const DEFAULT_SESSION_SOCKET: &'static str = "/run/guestlinkd/session.sock";

    /// The SPICE options, when `--spice-path` is given.
    pub fn from_cli(cli: &crate::cli::Cli) -> Option<Self> {
        let port_path = cli.spice_path.clone()?;
        Some(Self {
            port_path,
            session_socket: cli
                .session_socket
                .clone()
                .unwrap_or_else(|| Self::DEFAULT_SESSION_SOCKET.into()),
            no_logind: cli.no_logind,
            agent_uid: cli.agent_uid,
            uinput_fake: cli.uinput_fake.clone(),
            // Without logind there is no session to launch for.
            agent_launcher: cli
                .agent_launcher
                .clone()
                .filter(|_| !cli.no_agent_launch && !cli.no_logind),
        })
    }
}

/// [`run`], with a fatal error logged (the QGA side keeps running).
pub async fn run_logged(opts: SpiceOptions) -> Result<()> {
    let r = run(opts).await;
    if let Err(e) = &r {
        tracing::error!("SPICE side stopped: {e:#}");
    }
    r
}

#[cfg(test)]
mod logind_tests;
#[cfg(test)]
mod router_tests;

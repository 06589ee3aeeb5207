//! The SPICE core: the one task that owns the port, the [`Router`], the agents' queues and the tablet, and
//! carries out the router's [`Action`]s (flow control and streaming: see the module doc of [`super`]).
//!
//! The work an input causes is a queue, not a recursion: carrying out one action can fail the port or drop an
//! agent, which hands the router more actions. Each step only queues such follow-up [`Work`]; [`Core::run_queue`]
//! takes the queue in order, a step's follow-up first (in the order queued), so actions run in the order a
//! depth-first recursion would take, with no async recursion and no boxed futures.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{Port, Reassembler, ReassemblerConfig};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::agent_queue::{self, AgentTx, Room};
use super::agents::Event;
use super::log_limit::log_limited;
use super::logind;
use super::port::{Link, Opener};
use super::router::{Action, AgentId, Refusal, Router};
use super::tablet::{Sink, Tablet};

/// Delay before reopening the port after it failed or closed on error.
const REOPEN_DELAY: Duration = Duration::from_secs(1);
/// A port write that makes no progress for this long (nobody reads the other end) counts as a port failure, so
/// the core never hangs on a stuck host.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most frames waiting in one agent's backlog (behind its full queue). The port is not read while any backlog
/// exists, so only the frames of one port read and those caused by agent events end up here; above this the
/// agent is dropped to keep memory bounded.
const MAX_BACKLOG: usize = 1024;
/// Most port writes held behind a streaming clipboard answer. Few ever wait there (the port is not read
/// meanwhile); above this the port is reset to keep memory bounded.
const MAX_HELD: usize = 1024;

/// The SPICE core (see the module doc).
pub(super) struct Core<O: Opener> {
    opener: O,
    router: Router,
    port: Option<O::Port>,
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
    /// Work still to do for the current input, in order (see the module doc).
    queue: VecDeque<Work>,
    /// Work queued by the step being carried out; it goes in front of `queue` when the step ends.
    next: Vec<Work>,
}

/// One step of the core's work (see the module doc).
enum Work {
    /// Carry out a router action.
    Act(Action),
    /// An [`Action::PortStream`] whose data is in a file ([`Event::MessageFile`]): written at once.
    SendFile {
        agent: AgentId,
        head: Vec<u8>,
        len: usize,
        file: Arc<File>,
    },
    /// Forget agent `id` and tell the router; `kill`: the core dropped it, so its connection is shut down too.
    Forget { id: AgentId, kill: bool },
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

/// Waits for the port's next bytes, then takes whatever else is already queued, up to `buf`'s size, in the same
/// pass: a virtio port hands out one host buffer (≤ 4 KiB) per read, so a bulk transfer would otherwise cost a
/// trip through the event loop, and a feed of the reassembler, per 4 KiB (docs/spice.md, "Reading the port").
pub(super) async fn read_port<L: Link>(
    port: Option<&mut L>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    let Some(p) = port else {
        return std::future::pending().await;
    };
    let mut n = p.read(buf).await?;
    while n > 0 && n < buf.len() {
        match p.try_read(&mut buf[n..]) {
            Some(m) => n += m,
            None => break,
        }
    }
    Ok(n)
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

impl<O: Opener> Core<O> {
    /// A core with no agent and the port closed; `stall` is the agent stall timeout (see [`super::DEFAULT_AGENT_STALL`]).
    pub(super) fn new(opener: O, sink: Sink, stall: Duration) -> Self {
        Self {
            opener,
            router: Router::new(),
            port: None,
            reasm: Reassembler::new(ReassemblerConfig::guest_side()),
            tablet: Tablet::new(sink),
            agents: HashMap::new(),
            backlog: HashMap::new(),
            stall,
            reopen_at: None,
            port_stream: None,
            held: VecDeque::new(),
            queue: VecDeque::new(),
            next: Vec::new(),
        }
    }

    /// Serves agent events, logind's active session and the port until the event channel closes.
    pub(super) async fn serve(
        mut self,
        mut ev_rx: mpsc::Receiver<Event>,
        mut active_rx: watch::Receiver<Option<logind::ActiveSession>>,
    ) -> Result<()> {
        let core = &mut self;
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
                    Ok(0) => core.port_failed("the host closed the port"),
                    Ok(n) => core.port_bytes(n, &buf).await,
                    Err(e) => core.port_failed(&e.to_string()),
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
            core.run_queue().await;
            core.reconcile().await;
        }
    }

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
            self.drop_agent(id);
            return self.run_queue().await;
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
    fn drop_agent(&mut self, id: AgentId) {
        self.backlog.remove(&id);
        self.stream_source_gone(id);
        self.next.push(Work::Forget { id, kill: true });
    }

    /// Forgets agent `id` (if still known) and queues the router's consequences; `kill` shuts its connection.
    fn forget(&mut self, id: AgentId, kill: bool) {
        if let Some(tx) = self.agents.remove(&id) {
            if kill {
                tx.kill();
            } else {
                tracing::info!(agent = id, "session agent disconnected");
            }
            let more = self.router.agent_gone(id);
            self.queue_acts(more);
        }
    }

    /// Queues `acts` behind the work the current step already queued.
    fn queue_acts(&mut self, acts: Vec<Action>) {
        self.next.extend(acts.into_iter().map(Work::Act));
    }

    /// Carries out `acts` and everything they lead to.
    async fn apply(&mut self, acts: Vec<Action>) {
        self.queue_acts(acts);
        self.run_queue().await;
    }

    /// Carries out the queued work until none is left: each step's follow-up goes first (see the module doc).
    async fn run_queue(&mut self) {
        loop {
            for w in self.next.drain(..).rev() {
                self.queue.push_front(w);
            }
            let Some(w) = self.queue.pop_front() else {
                return;
            };
            match w {
                Work::Act(a) => self.act(a).await,
                Work::SendFile {
                    agent,
                    head,
                    len,
                    file,
                } => self.start_stream(agent, head, len, Some(&file)).await,
                Work::Forget { id, kill } => self.forget(id, kill),
            }
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
                    self.port_failed(&format!("protocol error: {e}"));
                    return self.run_queue().await;
                }
            }
        }
    }

    /// Closes the port after an error; it is reopened after [`REOPEN_DELAY`] if an agent can still serve.
    fn port_failed(&mut self, why: &str) {
        log_limited!(warn, "SPICE port: {why}; closing and reopening it");
        self.close_port();
        self.reopen_at = Some(tokio::time::Instant::now() + REOPEN_DELAY);
    }

    fn close_port(&mut self) {
        if self.port.take().is_some() {
            self.forget_port_writes();
            self.reasm.reset();
            let acts = self.router.port_closed();
            self.queue_acts(acts);
        }
    }

    /// Opens or closes the port to match [`Router::wants_port`].
    async fn reconcile(&mut self) {
        let wants = self.router.wants_port();
        if !wants && self.port.is_some() {
            tracing::info!("no active session agent: closing the SPICE port");
            self.close_port();
            self.run_queue().await;
        } else if wants && self.port.is_none() && self.reopen_at.is_none() {
            match self.opener.open().await {
                Ok(p) => {
                    tracing::info!(path = %self.opener.name(), "SPICE port opened");
                    self.port = Some(p);
                    self.reasm.reset();
                    let acts = self.router.port_opened();
                    self.apply(acts).await;
                }
                Err(e) => {
                    tracing::warn!(path = %self.opener.name(), "cannot open the SPICE port: {e}");
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
                    let file = Arc::new(file);
                    for a in self.router.on_agent_stream(id, msg, len) {
                        self.next.push(match a {
                            Action::PortStream { agent, head, len } => Work::SendFile {
                                agent,
                                head,
                                len,
                                file: Arc::clone(&file),
                            },
                            other => Work::Act(other),
                        });
                    }
                    self.run_queue().await;
                }
            }
            Event::StreamData(id, piece) => self.stream_piece(id, &piece).await,
            Event::StreamEnd(id) => self.stream_end(id).await,
            Event::Gone(id) => {
                self.backlog.remove(&id);
                self.stream_source_gone(id);
                self.next.push(Work::Forget { id, kill: false });
                self.run_queue().await;
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
        self.port_written(written);
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
        self.port_written(written);
    }

    /// After a port write: a failure closes the port (it is reopened later).
    fn port_written(&mut self, written: std::io::Result<()>) {
        if let Err(e) = written {
            // Finish this batch without the port; the read side notices and reopens.
            tracing::warn!("SPICE port write: {e}");
            self.port = None;
            self.forget_port_writes();
            self.reasm.reset();
            let more = self.router.port_closed();
            self.reopen_at = Some(tokio::time::Instant::now() + REOPEN_DELAY);
            self.queue_acts(more);
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
            return self.port_failed("a streamed clipboard answer ran over its length");
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
                self.port_failed("a streamed clipboard answer ended early");
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
    fn stream_source_gone(&mut self, id: AgentId) {
        if self.port_stream.as_ref().is_some_and(|s| s.agent == id) {
            self.port_failed("the session agent left in the middle of a clipboard answer");
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
            self.drop_agent(agent);
            self.run_queue().await;
        }
    }

    /// Queues a port write behind the streaming answer; far too many (a flood while it streams) resets the port.
    fn hold(&mut self, bytes: Vec<u8>) {
        if self.held.len() >= MAX_HELD {
            return self.port_failed("too many port writes waiting behind a clipboard answer");
        }
        self.held.push_back(bytes);
    }

    /// The port is gone: a streaming answer and the writes held behind it are dropped.
    fn forget_port_writes(&mut self) {
        self.port_stream = None;
        self.held.clear();
    }

    /// Carries out one router action (its follow-up is queued, see the module doc).
    async fn act(&mut self, a: Action) {
        match a {
            Action::Port(bytes) if self.port_stream.is_some() => self.hold(bytes),
            Action::PortData { head, data } if self.port_stream.is_some() => {
                self.hold(head);
                self.hold(data);
            }
            Action::Port(bytes) => self.write_port(&[&bytes]).await,
            Action::PortData { head, data } => self.write_port(&[&head, &data]).await,
            Action::PortStream { agent, head, len } => {
                self.start_stream(agent, head, len, None).await;
            }
            Action::Agent(id, msg) => {
                let Some(tx) = self.agents.get(&id) else {
                    return;
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
                        self.drop_agent(id);
                    }
                    return;
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
                        self.drop_agent(id);
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
                        self.drop_agent(id);
                    }
                }
            }
            Action::Mouse(x, y, buttons) => self.tablet.mouse(x, y, buttons),
            Action::Tablet(g) => self.tablet.set_geometry(&g),
            Action::ResetClientPort => self.reasm.reset_port(Port::Client),
        }
    }
}

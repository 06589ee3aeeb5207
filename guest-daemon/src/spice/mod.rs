//! SPICE agent side of guestlinkd: owns the `com.redhat.spice.0` port, speaks the vdagent protocol to the host
//! (spice-server / client), serves `guestlink-session` agents on a unix socket and drives the uinput tablet.
//!
//! One task owns the port and the [`router::Router`] state; connection tasks ([`agents`]) and the logind
//! follower ([`logind`]) feed it events. Like spice-vdagentd, the port is opened only while the agent of the
//! active session has reported its geometry, and closed when none can serve; a stream error (chunk > 2048 bytes,
//! lost sync, a message above the size cap) closes and reopens it.
//!
//! Flow control: frames for an agent go through its bounded writer queue ([`agents::AGENT_QUEUE`]). When it is
//! full, further frames for that agent wait in a small per-agent backlog and the core stops reading the port
//! until the agent drains its queue — the host then blocks on its end (SPICE flow control through QEMU's
//! chardev). Agent events keep being served meanwhile. An agent that makes no progress for the stall timeout
//! ([`DEFAULT_AGENT_STALL`], env `GUESTLINKD_SPICE_AGENT_STALL_MS`) is dropped.

pub mod agents;
pub mod logind;
pub mod peer;
pub mod port;
pub mod router;
pub mod tablet;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{Port, Reassembler, ReassemblerConfig};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use agents::Event;
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

/// The SPICE options from the command line.
#[derive(Debug, Clone)]
pub struct SpiceOptions {
    /// The port: virtio device, pty, or unix socket to connect to.
    pub port_path: PathBuf,
    /// The session socket to listen on.
    pub session_socket: PathBuf,
    /// Accept one agent without logind.
    pub no_logind: bool,
    /// Write input events to this file instead of /dev/uinput.
    pub uinput_fake: Option<PathBuf>,
}

struct Core {
    opts: SpiceOptions,
    router: Router,
    port: Option<PortIo>,
    reasm: Reassembler,
    tablet: Tablet,
    agents: HashMap<AgentId, mpsc::Sender<SessionMessage>>,
    /// Frames for agents whose queue is full, in order; while any is here the port is not read.
    backlog: HashMap<AgentId, Backlog>,
    /// See [`DEFAULT_AGENT_STALL`].
    stall: Duration,
    reopen_at: Option<tokio::time::Instant>,
}

/// Frames waiting for room in one agent's queue.
struct Backlog {
    frames: VecDeque<SessionMessage>,
    /// When the agent last took a frame (or the backlog began).
    progress: Instant,
}

/// What the core waits on to refill a stalled agent's queue: the agent, its queue, and the stall deadline.
type StallWait = Option<(AgentId, mpsc::Sender<SessionMessage>, Instant)>;

/// Room for one frame in the queue of the stalled agent, or `Err` when the stall deadline passed / it is gone.
async fn wait_room(wait: StallWait) -> (AgentId, Result<mpsc::OwnedPermit<SessionMessage>, ()>) {
    match wait {
        Some((id, tx, deadline)) => {
            let r = tokio::time::timeout_at(deadline, tx.reserve_owned()).await;
            (id, r.map_err(|_| ()).and_then(|p| p.map_err(|_| ())))
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
    let (active_tx, mut active_rx) = watch::channel(if opts.no_logind {
        Some(String::new())
    } else {
        None
    });
    // Without logind the sender is kept here: the active "session" ("") never changes.
    let _fixed_active = match logind.clone() {
        Some(l) => {
            tokio::spawn(l.follow_active(active_tx));
            None
        }
        None => Some(active_tx),
    };
    let (ev_tx, mut ev_rx) = mpsc::channel::<Event>(256);
    tokio::spawn(agents::accept_loop(
        listener,
        agents::AcceptConfig {
            logind,
            path: opts.session_socket.clone(),
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
    };
    let initial = active_rx.borrow_and_update().clone();
    let acts = core.router.set_active_session(initial);
    core.apply(acts).await;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let stalled = core.stall_wait();
        let paused = stalled.is_some();
        tokio::select! {
            // Not read while an agent's queue is full: the host blocks instead of us buffering.
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
                    let acts = core.router.set_active_session(s);
                    core.apply(acts).await;
                }
            }
            (id, room) = wait_room(stalled) => core.refill(id, room).await,
            _ = sleep_until(core.reopen_at) => core.reopen_at = None,
        }
        core.reconcile().await;
    }
}

impl Core {
    /// The stalled agent to wait for (the one stalled longest), if any.
    fn stall_wait(&self) -> StallWait {
        let (id, b) = self.backlog.iter().min_by_key(|(_, b)| b.progress)?;
        let tx = self.agents.get(id)?.clone();
        Some((*id, tx, b.progress + self.stall))
    }

    /// Moves backlog frames into agent `id`'s queue now that it has room, or drops the agent if it stalled.
    async fn refill(&mut self, id: AgentId, room: Result<mpsc::OwnedPermit<SessionMessage>, ()>) {
        let Ok(permit) = room else {
            let stall = self.stall;
            tracing::warn!(
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
            permit.send(first);
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

    /// Forgets agent `id` (its writer stops when the queue sender is dropped) and applies the consequences.
    async fn drop_agent(&mut self, id: AgentId) {
        self.backlog.remove(&id);
        if self.agents.remove(&id).is_some() {
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
                    let acts = self.router.on_port(port, &raw);
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
        tracing::warn!("SPICE port: {why}; closing and reopening it");
        self.close_port().await;
        self.reopen_at = Some(tokio::time::Instant::now() + REOPEN_DELAY);
    }

    async fn close_port(&mut self) {
        if self.port.take().is_some() {
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
                        tracing::warn!(agent = id, "a second agent for the same session: refused");
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
            Event::Gone(id) => {
                self.backlog.remove(&id);
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
        if let Err(e) = written {
            // Finish this batch without the port; the read side notices and reopens.
            tracing::warn!("SPICE port write: {e}");
            self.port = None;
            self.reasm.reset();
            let more = self.router.port_closed();
            self.reopen_at = Some(tokio::time::Instant::now() + REOPEN_DELAY);
            Box::pin(self.apply(more)).await;
        }
    }

    async fn apply(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Port(bytes) => self.write_port(&[&bytes]).await,
                Action::PortData { head, data } => self.write_port(&[&head, &data]).await,
                Action::Agent(id, msg) => {
                    let Some(tx) = self.agents.get(&id) else {
                        continue;
                    };
                    if let Some(b) = self.backlog.get_mut(&id) {
                        // Keep the order: behind the frames already waiting.
                        if b.frames.len() < MAX_BACKLOG {
                            b.frames.push_back(msg);
                        } else {
                            tracing::warn!(
                                agent = id,
                                "session agent backlog full: disconnecting it"
                            );
                            self.drop_agent(id).await;
                        }
                        continue;
                    }
                    match tx.try_send(msg) {
                        Ok(()) => {}
                        Err(TrySendError::Full(msg)) => {
                            tracing::debug!(
                                agent = id,
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
            uinput_fake: cli.uinput_fake.clone(),
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

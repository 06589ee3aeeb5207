//! SPICE agent side of guestlinkd: owns the `com.redhat.spice.0` port, speaks the vdagent protocol to the host
//! (spice-server / client), serves `guestlink-session` agents on a unix socket and drives the uinput tablet.
//!
//! One task, the core (`core.rs`, tested over in-memory pipes in `core_tests.rs`), owns the port and the
//! [`router::Router`] state; connection tasks ([`agents`]) and the logind follower ([`logind`]) feed it events. Like spice-vdagentd, the port is opened only while the agent of the
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

mod core;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use tokio::sync::{mpsc, watch};

use agents::Event;
use tablet::Sink;

/// An agent whose queue stays full for this long without taking a frame is declared dead and dropped.
pub const DEFAULT_AGENT_STALL: Duration = Duration::from_secs(30);
/// Environment override of [`DEFAULT_AGENT_STALL`] in milliseconds (tests use a short one).
pub const AGENT_STALL_ENV: &str = "GUESTLINKD_SPICE_AGENT_STALL_MS";

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

/// The stall timeout: [`AGENT_STALL_ENV`] if set to a number of milliseconds, else [`DEFAULT_AGENT_STALL`].
fn stall_timeout() -> Duration {
    std::env::var(AGENT_STALL_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_AGENT_STALL)
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
    let (active_tx, active_rx) = watch::channel(opts.no_logind.then(|| logind::ActiveSession {
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
    let (ev_tx, ev_rx) = mpsc::channel::<Event>(256);
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
    let opener = port::PathOpener(opts.port_path.clone());
    let core = core::Core::new(opener, sink, stall_timeout());
    core.serve(ev_rx, active_rx).await
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
mod core_tests;
#[cfg(test)]
mod logind_tests;
#[cfg(test)]
mod router_tests;

//! The session socket: where `guestlink-session` agents connect (mode 0666, like spice-vdagentd's), with peer
//! checks on accept — SO_PEERCRED uid/pid, the peer's logind session, uid = session owner or root, and the
//! `/proc/<pid>` owner re-checked after the lookup (CVE-2020-25653) — and at most [`MAX_CONNECTIONS`] open
//! connections (CVE-2020-25652). Each connection gets a reader task (frames → [`Event`]s, bounded) and a writer
//! task (a bounded queue; when it is full the core stops reading the SPICE port until the agent catches up, and
//! drops an agent that makes no progress for the stall timeout — memory never grows with a slow agent).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use guestlink_protocol::session::{encode_head, FrameDecoder, SessionError, SessionMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::logind::Logind;
use super::router::AgentId;

/// Most simultaneously open session-socket connections.
pub const MAX_CONNECTIONS: usize = 128;
/// Frames queued towards one agent; when full, the core applies backpressure to the host (see `spice::run`).
pub const AGENT_QUEUE: usize = 256;

/// What the connection tasks tell the core.
#[derive(Debug)]
pub enum Event {
    /// A checked agent connected.
    Connected {
        /// Connection id.
        id: AgentId,
        /// Its logind session ("" without logind).
        session: String,
        /// Queue to its writer task.
        tx: mpsc::Sender<SessionMessage>,
    },
    /// A frame from an agent.
    Message(AgentId, SessionMessage),
    /// The agent's connection ended.
    Gone(AgentId),
}

/// Creates the listening socket at `path` (a stale socket is replaced) with mode 0666.
pub fn bind(path: &Path) -> Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("session socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("chmod {}", path.display()))?;
    Ok(listener)
}

/// Accept loop settings.
#[derive(Debug, Clone)]
pub struct AcceptConfig {
    /// logind, or `None` in `--no-logind` mode (every agent belongs to session "").
    pub logind: Option<Logind>,
    /// Socket path (for logs).
    pub path: PathBuf,
}

/// Accepts agents forever, sending [`Event`]s to the core.
pub async fn accept_loop(listener: UnixListener, cfg: AcceptConfig, events: mpsc::Sender<Event>) {
    let open = Arc::new(AtomicUsize::new(0));
    let mut next_id: AgentId = 1;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(path = %cfg.path.display(), "accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        if open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            tracing::warn!("too many session-socket connections, refusing one");
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let id = next_id;
        next_id += 1;
        let (cfg, events, open) = (cfg.clone(), events.clone(), Arc::clone(&open));
        tokio::spawn(async move {
            match super::peer::identify(&stream, cfg.logind.as_ref()).await {
                Ok(session) => serve(id, stream, session, events).await,
                Err(e) => tracing::warn!(agent = id, "session agent refused: {e:#}"),
            }
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

async fn serve(id: AgentId, stream: UnixStream, session: String, events: mpsc::Sender<Event>) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<SessionMessage>(AGENT_QUEUE);
    if events
        .send(Event::Connected { id, session, tx })
        .await
        .is_err()
    {
        return;
    }
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            // The data part is written from the message itself, not copied behind the header.
            let head = match encode_head(&msg) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(agent = id, "cannot encode a frame: {e}");
                    continue;
                }
            };
            if wr.write_all(&head).await.is_err() || wr.write_all(msg.data()).await.is_err() {
                break;
            }
        }
    });
    let mut decoder = FrameDecoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    'read: loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for r in decoder.feed(&buf[..n]) {
            match r {
                Ok(msg) => {
                    if events.send(Event::Message(id, msg)).await.is_err() {
                        break 'read;
                    }
                }
                Err(SessionError::UnknownKind(k)) => {
                    tracing::debug!(agent = id, kind = k, "unknown frame kind skipped");
                }
                Err(e) if decoder.is_poisoned() => {
                    tracing::warn!(agent = id, "session stream error: {e}; disconnecting");
                    break 'read;
                }
                Err(e) => tracing::warn!(agent = id, "bad frame: {e}"),
            }
        }
    }
    writer.abort();
    let _ = events.send(Event::Gone(id)).await;
}

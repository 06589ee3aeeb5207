//! The session socket: where `guestlink-session` agents connect (mode 0666, like spice-vdagentd's), with the
//! peer checks of [`super::peer`] on accept (SO_PEERCRED, the peer pinned by a pidfd, its logind session, uid =
//! session owner or root; CVE-2020-25653) and at most [`MAX_CONNECTIONS`] open connections (CVE-2020-25652).
//! Each connection gets a reader task (frames → [`Event`]s, bounded: small frames only, large clipboard answers
//! streamed in pieces or passed as sealed memfds, see [`super::passed_fd`]) and a writer task (a bounded queue;
//! when it is full the core stops reading the SPICE port until the agent catches up, and drops an agent that
//! makes no progress for the stall timeout — memory never grows with a slow agent).

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use guestlink_protocol::session::{
    encode_head, FrameDecoder, FrameEvent, SessionError, SessionMessage,
};
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::agent_queue::{self, AgentTx};
use super::log_limit::log_limited;
use super::logind::Logind;
use super::passed_fd;
use super::router::AgentId;

/// Most simultaneously open session-socket connections.
pub const MAX_CONNECTIONS: usize = 128;
/// Largest frame body buffered from an agent. Agents send small frames, except clipboard answers: those with a
/// data part of [`STREAM_MIN`] bytes or more are streamed to the core in pieces of at most [`READ_BUFFER`]
/// bytes (up to the protocol's 64 MiB cap), so the memory one connection holds stays below a few hundred KiB,
/// and the events in flight (the core's channel of 256) below 16 MiB in all.
pub const MAX_AGENT_FRAME: u32 = 64 * 1024;
/// Clipboard answers with at least this many data bytes are streamed (see [`MAX_AGENT_FRAME`]).
pub const STREAM_MIN: usize = 32 * 1024;
/// Read size on an agent connection, and so the largest streamed piece.
const READ_BUFFER: usize = 64 * 1024;
/// Most passed memfds waiting for their frame; an agent passing more is disconnected.
const MAX_PENDING_FDS: usize = 4;

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
        tx: AgentTx,
    },
    /// A frame from an agent.
    Message(AgentId, SessionMessage),
    /// An agent starts a streamed frame (a large clipboard answer): `message` without its data, then `len` data
    /// bytes as [`Event::StreamData`] and an [`Event::StreamEnd`].
    StreamBegin(AgentId, SessionMessage, usize),
    /// The next piece of the agent's streamed data.
    StreamData(AgentId, Vec<u8>),
    /// The agent's streamed data is complete.
    StreamEnd(AgentId),
    /// A clipboard answer whose `usize` data bytes are in a checked, sealed memfd (see [`super::passed_fd`]).
    MessageFile(AgentId, Selection, ClipboardType, File, usize),
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
    /// Who may be the agent without logind.
    pub agent_uid: super::peer::AgentUid,
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
        // Connections are closed by the closer threads, never here (see crate::closer).
        let Some(guard) = crate::closer::ConnectionGuard::new(&stream) else {
            crate::closer::close_stream(stream);
            continue;
        };
        if open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            log_limited!(warn, "too many session-socket connections, refusing one");
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let id = next_id;
        next_id += 1;
        let (cfg, events, open) = (cfg.clone(), events.clone(), Arc::clone(&open));
        tokio::spawn(async move {
            match super::peer::identify(&stream, cfg.logind.as_ref(), cfg.agent_uid).await {
                Ok(session) => serve(id, stream, session, events).await,
                Err(e) => log_limited!(warn, agent = id, "session agent refused: {e:#}"),
            }
            open.fetch_sub(1, Ordering::SeqCst);
            drop(guard);
        });
    }
}

async fn serve(id: AgentId, stream: UnixStream, session: String, events: mpsc::Sender<Event>) {
    let (rd, mut wr) = stream.into_split();
    let (tx, mut rx, kill) = agent_queue::channel();
    if events
        .send(Event::Connected { id, session, tx })
        .await
        .is_err()
    {
        return;
    }
    let mut writer = tokio::spawn(async move {
        while let Some(queued) = rx.recv().await {
            // Its share of the queue's byte budget is released when `queued` is dropped, after the write.
            let msg = &queued.msg;
            // The data part is written from the message itself, not copied behind the header.
            let head = match encode_head(msg) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(agent = id, "cannot encode a frame: {e}");
                    continue;
                }
            };
            if write_all_vectored(&mut wr, &head, msg.data())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let mut decoder = FrameDecoder::with_max_body(MAX_AGENT_FRAME).streaming(STREAM_MIN);
    let mut buf = vec![0u8; READ_BUFFER];
    // Sealed memfds passed with the frames not decoded yet (see `passed_fd`).
    let mut fds: VecDeque<OwnedFd> = VecDeque::new();
    'read: loop {
        // The writer ends when the core drops the agent (its queue closes) or the connection breaks: then the
        // connection is closed, not read on.
        let read = tokio::select! {
            r = passed_fd::read(&rd, &mut buf) => r,
            _ = &mut writer => break,
            () = kill.killed() => {
                // Dropped by the core: unblock a writer stuck in a write to an agent that does not read, and
                // end the connection now (its queue is freed and it no longer counts against the limit).
                let _ = nix::sys::socket::shutdown(
                    std::os::fd::AsRawFd::as_raw_fd(rd.as_ref()),
                    nix::sys::socket::Shutdown::Both,
                );
                break;
            }
        };
        let n = match read {
            Ok((0, _)) | Err(_) => break,
            Ok((n, passed)) => {
                let (ok, bad): (Vec<_>, Vec<_>) =
                    passed.into_iter().partition(passed_fd::is_sealed_memfd);
                fds.extend(ok);
                if !bad.is_empty() || fds.len() > MAX_PENDING_FDS {
                    log_limited!(
                        warn,
                        agent = id,
                        "the agent passed descriptors that are not sealed memfds, or too many: disconnecting"
                    );
                    passed_fd::close_in_background(bad);
                    break;
                }
                n
            }
        };
        for r in decoder.feed_events(&buf[..n]) {
            match r {
                Ok(ev) => {
                    let ev = match ev {
                        FrameEvent::Message(SessionMessage::ClipboardDataFd {
                            selection,
                            data_type,
                            len,
                        }) => clipboard_fd_event(id, fds.pop_front(), selection, data_type, len),
                        FrameEvent::Message(msg) => Event::Message(id, msg),
                        FrameEvent::DataBegin { message, len } => {
                            Event::StreamBegin(id, message, len)
                        }
                        FrameEvent::Data(piece) => Event::StreamData(id, piece),
                        FrameEvent::DataEnd => Event::StreamEnd(id),
                    };
                    if events.send(ev).await.is_err() {
                        break 'read;
                    }
                }
                Err(SessionError::UnknownKind(k)) => {
                    tracing::debug!(agent = id, kind = k, "unknown frame kind skipped");
                }
                Err(e) if decoder.is_poisoned() => {
                    log_limited!(warn, agent = id, "session stream error: {e}; disconnecting");
                    break 'read;
                }
                Err(e) => log_limited!(warn, agent = id, "bad frame: {e}"),
            }
        }
    }
    writer.abort();
    let _ = events.send(Event::Gone(id)).await;
}

/// The event for a [`SessionMessage::ClipboardDataFd`]: the checked memfd, or — without a usable one — an
/// empty answer, so the host's request is still answered.
fn clipboard_fd_event(
    id: AgentId,
    fd: Option<OwnedFd>,
    selection: Selection,
    data_type: ClipboardType,
    len: u64,
) -> Event {
    let checked = fd
        .ok_or("no memfd came with it")
        .and_then(|fd| passed_fd::clipboard_file(fd, len));
    match (checked, usize::try_from(len)) {
        (Ok(file), Ok(len)) => Event::MessageFile(id, selection, data_type, file, len),
        (Err(why), _) => {
            log_limited!(warn, agent = id, "clipboard answer refused: {why}");
            Event::Message(id, empty_clipboard(selection))
        }
        (_, Err(_)) => Event::Message(id, empty_clipboard(selection)),
    }
}

fn empty_clipboard(selection: Selection) -> SessionMessage {
    SessionMessage::ClipboardData {
        selection,
        data_type: ClipboardType::None,
        data: Vec::new(),
    }
}

/// Writes `head` then `data` with as few syscalls as the socket allows (one writev when both fit).
async fn write_all_vectored(
    wr: &mut tokio::net::unix::OwnedWriteHalf,
    mut head: &[u8],
    mut data: &[u8],
) -> std::io::Result<()> {
    use std::io::IoSlice;
    while !head.is_empty() {
        let n = wr
            .write_vectored(&[IoSlice::new(head), IoSlice::new(data)])
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        data = &data[n - from_head..];
    }
    wr.write_all(data).await
}

//! Frames on their way to guestlinkd: how a message becomes bytes (the head, and a data part moved out of the
//! message rather than copied), the queue to the writer task, and the writer itself.
//!
//! A large clipboard answer goes to a daemon that announced [`CAP_CLIPBOARD_FD`] as a sealed memfd passed
//! with a [`SessionMessage::ClipboardDataFd`] frame (SCM_RIGHTS): the daemon copies it to the port without the
//! bytes crossing the socket, which on a 2-core guest is most of the time a 16 MiB answer takes. The seals
//! (no shrinking, growing or writing) are what the daemon checks before it reads the memfd.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::Duration;

use guestlink_protocol::session::{encode, encode_head, SessionMessage, CAP_CLIPBOARD_FD};
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::backend::ClipboardMemfd;

/// How long a full outgoing queue may block before the connection is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Clipboard answers of at least this size go as a memfd when the daemon takes them.
pub const MEMFD_MIN: usize = 256 * 1024;

/// One write for the writer task.
#[derive(Debug)]
pub enum Out {
    /// Bytes of the stream.
    Bytes(Vec<u8>),
    /// Frame bytes with a descriptor passed alongside their first byte.
    WithFd(Vec<u8>, OwnedFd),
}

/// The writes that send `msg`: its head and, when it carries data, its data buffer moved out of it (so a large
/// clipboard answer is never copied into a new frame buffer). With `fds` (the daemon announced
/// [`CAP_CLIPBOARD_FD`]) a large clipboard answer becomes a memfd instead. Empty when the message cannot be
/// encoded.
pub fn frame(mut msg: SessionMessage, fds: bool) -> Vec<Out> {
    if let SessionMessage::ClipboardData {
        selection,
        data_type,
        data,
    } = &msg
    {
        if fds && data.len() >= MEMFD_MIN {
            match ClipboardMemfd::from_bytes(data) {
                Ok(memfd) => return frame_memfd(*selection, *data_type, &memfd, true),
                Err(e) => tracing::debug!("no memfd for the clipboard ({e}); sending it inline"),
            }
        }
    }
    match encode_head(&msg) {
        Ok(head) => {
            let data = take_data(&mut msg);
            if data.is_empty() {
                vec![Out::Bytes(head)]
            } else {
                vec![Out::Bytes(head), Out::Bytes(data)]
            }
        }
        Err(e) => {
            tracing::warn!(kind = msg.kind(), "cannot encode a frame: {e}");
            // A clipboard answer that does not fit still gets an (empty) answer.
            if let SessionMessage::ClipboardData { selection, .. } = msg {
                encode(&SessionMessage::ClipboardData {
                    selection,
                    data_type: ClipboardType::None,
                    data: Vec::new(),
                })
                .ok()
                .into_iter()
                .map(Out::Bytes)
                .collect()
            } else {
                Vec::new()
            }
        }
    }
}

/// The writes that send a clipboard answer the backend collected in a memfd: the memfd itself, sealed, to a
/// daemon that takes it; else its bytes read back into an ordinary frame.
pub fn frame_memfd(
    selection: Selection,
    data_type: ClipboardType,
    memfd: &ClipboardMemfd,
    fds: bool,
) -> Vec<Out> {
    if fds {
        match memfd.seal_and_share() {
            Ok(fd) => {
                let m = SessionMessage::ClipboardDataFd {
                    selection,
                    data_type,
                    len: memfd.len as u64,
                };
                if let Ok(head) = encode(&m) {
                    return vec![Out::WithFd(head, fd)];
                }
            }
            Err(e) => tracing::debug!("cannot seal the clipboard memfd ({e}); sending it inline"),
        }
    }
    let mut data = vec![0u8; memfd.len];
    let data = match memfd.file.read_exact_at(&mut data, 0) {
        Ok(()) => data,
        Err(e) => {
            tracing::warn!("cannot read the clipboard memfd back: {e}");
            return frame(
                SessionMessage::ClipboardData {
                    selection,
                    data_type: ClipboardType::None,
                    data: Vec::new(),
                },
                false,
            );
        }
    };
    frame(
        SessionMessage::ClipboardData {
            selection,
            data_type,
            data,
        },
        false,
    )
}

/// Whether a daemon hello's capabilities include taking clipboard memfds.
pub fn takes_fds(capabilities: &[String]) -> bool {
    capabilities.iter().any(|c| c == CAP_CLIPBOARD_FD)
}

/// Moves the data part out of `msg` (what `encode_head` left out of the head).
fn take_data(msg: &mut SessionMessage) -> Vec<u8> {
    match msg {
        SessionMessage::ClipboardData { data, .. } | SessionMessage::FileXferData { data, .. } => {
            std::mem::take(data)
        }
        _ => Vec::new(),
    }
}

/// Queues all writes of a frame for the writer; `false` when the writer is gone or the daemon stopped reading
/// for [`SEND_TIMEOUT`] (the queue stayed full).
pub async fn send_parts(out: &mpsc::Sender<Out>, parts: Vec<Out>) -> bool {
    for part in parts {
        let sent = tokio::time::timeout(SEND_TIMEOUT, out.send(part)).await;
        if !matches!(sent, Ok(Ok(()))) {
            return false;
        }
    }
    true
}

/// The writer task: writes queued [`Out`]s in order until the queue closes or a write fails.
pub async fn write_loop(mut wr: OwnedWriteHalf, mut rx: mpsc::Receiver<Out>) -> io::Result<()> {
    while let Some(out) = rx.recv().await {
        match out {
            Out::Bytes(buf) => wr.write_all(&buf).await?,
            Out::WithFd(buf, fd) => {
                let n = send_with_fd(&wr, &buf, &fd).await?;
                wr.write_all(&buf[n..]).await?;
            }
        }
    }
    Ok(())
}

/// Sends the first part of `buf` with `fd` attached (SCM_RIGHTS); returns how many bytes went.
async fn send_with_fd(wr: &OwnedWriteHalf, buf: &[u8], fd: &OwnedFd) -> io::Result<usize> {
    let sock = wr.as_ref();
    let fds = [fd.as_raw_fd()];
    loop {
        sock.writable().await?;
        let r = sock.try_io(Interest::WRITABLE, || {
            sendmsg::<()>(
                sock.as_raw_fd(),
                &[IoSlice::new(buf)],
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                None,
            )
            .map_err(io::Error::from)
        });
        match r {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            r => return r,
        }
    }
}

//! Pipe transfers of clipboard data, each on its own short-lived thread with a deadline, so that a slow or stuck
//! peer never blocks the Wayland thread.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use guestlink_protocol::vdagent::{ClipboardType, Selection};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::clipboard::TRANSFER_TIMEOUT;
use crate::backend::{DesktopEvent, EventSender};

fn nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Waits until `fd` is ready for `flags` or the deadline passes (error `TimedOut`).
fn wait(fd: &impl AsFd, flags: PollFlags, deadline: Instant) -> std::io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ErrorKind::TimedOut.into());
    }
    let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(fd.as_fd(), flags)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Reads `fd` to EOF: at most `max` bytes, within [`TRANSFER_TIMEOUT`].
pub fn read_all(fd: OwnedFd, max: usize) -> std::io::Result<Vec<u8>> {
    nonblocking(&fd)?;
    let deadline = Instant::now() + TRANSFER_TIMEOUT;
    let mut file = std::fs::File::from(fd);
    let mut data = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(data),
            Ok(n) => {
                if data.len() + n > max {
                    return Err(std::io::Error::other(format!(
                        "larger than the {max}-byte clipboard limit"
                    )));
                }
                data.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                wait(&file, PollFlags::POLLIN, deadline)?;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes all of `data` to `fd` within [`TRANSFER_TIMEOUT`], then closes it.
pub fn write_all(fd: OwnedFd, data: &[u8]) -> std::io::Result<()> {
    nonblocking(&fd)?;
    let deadline = Instant::now() + TRANSFER_TIMEOUT;
    let mut file = std::fs::File::from(fd);
    let mut off = 0;
    while off < data.len() {
        match file.write(&data[off..]) {
            Ok(n) => off += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                wait(&file, PollFlags::POLLOUT, deadline)?;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads the guest's data for a host request and answers with [`DesktopEvent::ClipboardData`] (empty on error).
pub fn spawn_reader(
    fd: OwnedFd,
    max: usize,
    events: EventSender,
    selection: Selection,
    data_type: ClipboardType,
) {
    let spawned = std::thread::Builder::new()
        .name("wl-read".into())
        .spawn(move || {
            let (data_type, data) = match read_all(fd, max) {
                Ok(d) => {
                    tracing::debug!(len = d.len(), "guest selection read");
                    (data_type, d)
                }
                Err(e) => {
                    tracing::warn!(?selection, "reading the guest selection: {e}");
                    (ClipboardType::None, Vec::new())
                }
            };
            let _ = events.send(DesktopEvent::ClipboardData {
                selection,
                data_type,
                data,
            });
        });
    if let Err(e) = spawned {
        tracing::warn!("spawning a reader thread: {e}");
    }
}

/// Serves host data to a pasting guest application.
pub fn spawn_writer(fd: OwnedFd, data: Arc<Vec<u8>>) {
    let spawned = std::thread::Builder::new()
        .name("wl-write".into())
        .spawn(move || {
            if let Err(e) = write_all(fd, &data) {
                tracing::debug!("serving the host selection: {e}");
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("spawning a writer thread: {e}");
    }
}

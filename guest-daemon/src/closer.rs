//! The closer: descriptors that a local user may have chosen are closed here, on threads of their own, never on a
//! runtime thread nor on the blocking pool that FIFREEZE/FITHAW use.
//!
//! Why: the final close of a descriptor runs its release work in the closing thread. A TCP socket with SO_LINGER
//! and unsent data sleeps there for the linger time, a FUSE file waits for its server's flush, and a unix socket
//! releases every descriptor still queued in it (passed with SCM_RIGHTS and never read). Any local user can pass
//! such descriptors to the session socket, so the SPICE side hands these closes over:
//! - descriptors received with SCM_RIGHTS and refused ([`close_fds`]): sockets among them get SO_LINGER switched
//!   off first, so a lingering socket is closed at once (the kernel still sends its data in the background);
//! - session-socket connections ([`ConnectionGuard`]): a duplicate of the connection is kept until the connection
//!   is done; the closer then shuts it down (the peer can send no more), drains and closes every descriptor still
//!   queued in it, and closes the duplicate — so whichever close comes last releases an empty socket.
//!
//! The queue is bounded ([`QUEUE`] items for [`THREADS`] threads). When it is full, the caller waits for room:
//! that only ever slows the SPICE side, whose thread is the only caller; the QGA side never closes through here.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};

use nix::sys::socket::{getsockopt, setsockopt, shutdown, sockopt, Shutdown};

/// Items the queue holds before callers wait.
pub const QUEUE: usize = 1024;
/// Closer threads.
pub const THREADS: usize = 2;
/// Most reads when draining one connection (its receive buffer bounds what it holds anyway).
const MAX_DRAIN_READS: usize = 4096;

/// One thing to close.
#[derive(Debug)]
enum Closing {
    /// Descriptors received from a peer.
    Fds(Vec<OwnedFd>),
    /// A session-socket connection (ours): shut down, drained, closed.
    Connection(OwnedFd),
}

static QUEUE_TX: OnceLock<Option<SyncSender<Closing>>> = OnceLock::new();
static FULL_WARNED: AtomicBool = AtomicBool::new(false);

/// Starts the closer threads (done at start-up when the SPICE side runs, so they exist before any descriptor
/// pressure; later calls, and the first use, are no-ops once started).
pub fn start() {
    let _ = sender();
}

fn sender() -> Option<&'static SyncSender<Closing>> {
    QUEUE_TX
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Closing>(QUEUE);
            let rx = Arc::new(Mutex::new(rx));
            let mut started = 0;
            for i in 0..THREADS {
                let rx = Arc::clone(&rx);
                match std::thread::Builder::new()
                    .name(format!("guestlinkd-closer-{i}"))
                    .spawn(move || worker(&rx))
                {
                    Ok(_) => started += 1,
                    Err(e) => tracing::error!("cannot start a closer thread: {e}"),
                }
            }
            (started > 0).then_some(tx)
        })
        .as_ref()
}

fn worker(rx: &Mutex<Receiver<Closing>>) {
    loop {
        let item = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(i) => i,
            Err(_) => return,
        };
        match item {
            Closing::Fds(fds) => fds.into_iter().for_each(close_one),
            Closing::Connection(fd) => close_connection(fd),
        }
    }
}

fn send(item: Closing) {
    let Some(tx) = sender() else {
        // No closer thread could be started: close here rather than leak.
        drop(item);
        return;
    };
    match tx.try_send(item) {
        Ok(()) => {}
        Err(TrySendError::Full(item)) => {
            if !FULL_WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the descriptor closer is {QUEUE} items behind (slow closes passed in by a local user); \
                     waiting for it"
                );
            }
            let _ = tx.send(item);
        }
        Err(TrySendError::Disconnected(item)) => drop(item),
    }
}

/// Closes descriptors received from a peer on the closer threads.
pub fn close_fds(fds: Vec<OwnedFd>) {
    if !fds.is_empty() {
        send(Closing::Fds(fds));
    }
}

/// Closes a session-socket connection on the closer threads (shut down and drained first, see the module doc).
pub fn close_stream(stream: tokio::net::UnixStream) {
    match stream.into_std() {
        Ok(s) => send(Closing::Connection(s.into())),
        Err(e) => tracing::debug!("session connection: {e}"),
    }
}

/// Keeps a duplicate of a session-socket connection; when dropped (after the connection is done), the closer
/// shuts it down, drains and closes it (see the module doc).
#[derive(Debug)]
pub struct ConnectionGuard(Option<OwnedFd>);

impl ConnectionGuard {
    /// A guard for `stream`, or `None` if it cannot be duplicated (out of descriptors): close the stream with
    /// [`close_stream`] instead of serving it.
    pub fn new(stream: &impl AsFd) -> Option<ConnectionGuard> {
        match stream.as_fd().try_clone_to_owned() {
            Ok(fd) => Some(ConnectionGuard(Some(fd))),
            Err(e) => {
                tracing::warn!("cannot duplicate a session connection: {e}; refusing it");
                None
            }
        }
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(fd) = self.0.take() {
            send(Closing::Connection(fd));
        }
    }
}

/// Closes one received descriptor; a socket gets SO_LINGER off first so its close does not wait.
fn close_one(fd: OwnedFd) {
    if getsockopt(&fd, sockopt::SockType).is_ok() {
        let off = libc::linger {
            l_onoff: 0,
            l_linger: 0,
        };
        let _ = setsockopt(&fd, sockopt::Linger, &off);
    }
    drop(fd);
}

/// Shuts our end of a session connection down (the peer's sends fail from now on), closes every descriptor still
/// queued in it, then closes it.
fn close_connection(fd: OwnedFd) {
    let _ = shutdown(fd.as_raw_fd(), Shutdown::Both);
    let mut buf = [0u8; 4096];
    for _ in 0..MAX_DRAIN_READS {
        match crate::sys::recv_with_fds(fd.as_fd(), &mut buf) {
            Ok((n, fds)) => {
                let done = n == 0 && fds.is_empty();
                fds.into_iter().for_each(close_one);
                if done {
                    break;
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    drop(fd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    /// A TCP socket with SO_LINGER 30 s and unsent data toward a peer that never reads: its plain close would
    /// sleep for the linger time.
    fn lingering_socket() -> (TcpListener, TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        // The listener's receive buffer is inherited by accepted sockets: keep it small.
        setsockopt(&l, sockopt::RcvBuf, &4096).unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        let chunk = vec![0u8; 65536];
        let mut c2 = &c;
        while c2.write(&chunk).is_ok() {}
        setsockopt(
            &c,
            sockopt::Linger,
            &libc::linger {
                l_onoff: 1,
                l_linger: 30,
            },
        )
        .unwrap();
        (l, c, accepted)
    }

    #[test]
    fn a_lingering_socket_is_closed_without_waiting() {
        let (_l, c, _peer) = lingering_socket();
        let start = Instant::now();
        close_one(c.into());
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "close took {:?}",
            start.elapsed()
        );
    }
}

//! unix-listen, vsock-listen and systemd socket activation: a listening socket serving one client at a time (the
//! next client waits in the backlog until the current one disconnects, like qemu-ga).
//!
//! The JSON parser state belongs to the core and deliberately survives a client change, exactly like qemu-ga: a
//! partial request left by one client is completed by the next one's bytes — clients reset it with a 0xFF byte
//! (guest-sync-delimited protocol).
//!
//! A vsock listener only keeps clients whose peer CID its [`PeerFilter`] allows (default: the host, CID 2): with
//! `vsock_loopback` loaded, any local user could otherwise reach the root command set through CID 1.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    bind, getpeername, getsockname, listen, socket, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrLike, SockaddrStorage, VsockAddr,
};
use tokio::io::unix::AsyncFd;

use super::TransportError;

/// systemd's first passed descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: i32 = 3;
/// `VMADDR_CID_HOST`: connections from the hypervisor side.
pub const VSOCK_CID_HOST: u32 = 2;
/// At most one "refused vsock peer" warning per this interval (the rest are counted).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Which vsock peers may become the client: an allow-list of CIDs (`--vsock-allow-cid`, default `[2]`).
#[derive(Debug, Clone)]
pub struct PeerFilter {
    allowed: Vec<u32>,
    last_log: Option<Instant>,
    suppressed: u64,
}

/// Why a vsock connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The peer's CID is not in the allow-list.
    Cid(u32),
    /// The peer address is not a vsock address (or could not be read).
    NotVsock,
}

impl PeerFilter {
    /// A filter allowing `cids` (an empty list falls back to the host only).
    pub fn new(cids: &[u32]) -> Self {
        let allowed = if cids.is_empty() {
            vec![VSOCK_CID_HOST]
        } else {
            cids.to_vec()
        };
        PeerFilter {
            allowed,
            last_log: None,
            suppressed: 0,
        }
    }

    /// Checks a vsock peer address (from `getpeername` on the accepted socket; `None` when it is not a vsock
    /// address or could not be read).
    pub fn check(&self, peer: Option<&VsockAddr>) -> Result<(), Refusal> {
        let cid = peer.map(VsockAddr::cid).ok_or(Refusal::NotVsock)?;
        if self.allowed.contains(&cid) {
            Ok(())
        } else {
            Err(Refusal::Cid(cid))
        }
    }

    /// Checks an accepted vsock socket; a refusal is logged at most once per [`REFUSAL_LOG_INTERVAL`], so a local
    /// user cannot flood the log by reconnecting.
    fn admit(&mut self, fd: &OwnedFd) -> bool {
        let peer = getpeername::<SockaddrStorage>(fd.as_raw_fd())
            .ok()
            .and_then(|a| a.as_vsock_addr().copied());
        let Err(why) = self.check(peer.as_ref()) else {
            return true;
        };
        let now = Instant::now();
        if self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_INTERVAL)
        {
            tracing::warn!(
                refusal = ?why,
                allowed = ?self.allowed,
                suppressed = self.suppressed,
                "vsock connection refused: peer CID not allowed (--vsock-allow-cid)"
            );
            self.last_log = Some(now);
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
        false
    }
}

#[derive(Debug)]
enum Listener {
    Unix(AsyncFd<UnixListener>),
    Vsock(AsyncFd<OwnedFd>, PeerFilter),
}

/// A listening socket and its current client.
#[derive(Debug)]
pub struct Listen {
    listener: Listener,
    client: Option<AsyncFd<OwnedFd>>,
    /// The socket file we created (removed on drop).
    created: Option<PathBuf>,
}

impl Drop for Listen {
    fn drop(&mut self) {
        if let Some(p) = &self.created {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The socket-activation descriptor, if systemd passed one to this process (`LISTEN_PID` = our pid,
/// `LISTEN_FDS` = 1). More than one socket is an error, like in qemu-ga.
pub fn activation_fd(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<OwnedFd>, TransportError> {
    let (Some(pid), Some(fds)) = (env("LISTEN_PID"), env("LISTEN_FDS")) else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(None);
    }
    match fds.trim().parse::<u32>() {
        Ok(0) | Err(_) => Ok(None),
        Ok(1) => crate::sys::adopt_inherited_fd(LISTEN_FDS_START)
            .map(Some)
            .ok_or_else(|| {
                TransportError::Activation("LISTEN_FDS=1 but fd 3 is not open".to_owned())
            }),
        Ok(_) => Err(TransportError::Activation(
            "guestlinkd only supports listening on one socket".to_owned(),
        )),
    }
}

impl Listen {
    /// Listen on a unix socket at `path` (a stale socket file there is replaced, like QEMU's `unix_listen`).
    pub fn unix(path: &Path) -> Result<Listen, TransportError> {
        let open_err = |source| TransportError::Open {
            path: path.display().to_string(),
            source,
        };
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                let _ = std::fs::remove_file(path);
            }
        }
        let l = UnixListener::bind(path).map_err(open_err)?;
        l.set_nonblocking(true).map_err(open_err)?;
        Ok(Listen {
            listener: Listener::Unix(crate::sys::async_fd(l).map_err(open_err)?),
            client: None,
            created: Some(path.to_owned()),
        })
    }

    /// Listen on vsock `cid:port` (backlog 1), keeping only peers that `filter` allows.
    pub fn vsock(cid: u32, port: u32, filter: PeerFilter) -> Result<Listen, TransportError> {
        let open_err = |e: Errno| TransportError::Open {
            path: format!("vsock:{cid}:{port}"),
            source: io::Error::from(e),
        };
        let fd = socket(
            AddressFamily::Vsock,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(open_err)?;
        bind(fd.as_raw_fd(), &VsockAddr::new(cid, port)).map_err(open_err)?;
        listen(&fd, Backlog::new(1).map_err(open_err)?).map_err(open_err)?;
        Ok(Listen {
            listener: Listener::Vsock(
                crate::sys::async_fd(fd).map_err(|e| TransportError::Open {
                    path: format!("vsock:{cid}:{port}"),
                    source: e,
                })?,
                filter,
            ),
            client: None,
            created: None,
        })
    }

    /// Serve a socket passed by systemd; unix-listen or vsock-listen is chosen from its address family (a vsock
    /// one keeps only peers that `filter` allows).
    pub fn from_activation(fd: OwnedFd, filter: PeerFilter) -> Result<Listen, TransportError> {
        let addr: SockaddrStorage = getsockname(fd.as_raw_fd())
            .map_err(|e| TransportError::Activation(format!("getsockname: {e}")))?;
        let nb = |e: io::Error| TransportError::Activation(e.to_string());
        match addr.family() {
            Some(AddressFamily::Unix) => {
                let l = UnixListener::from(fd);
                l.set_nonblocking(true).map_err(nb)?;
                tracing::info!("socket activation: unix-listen");
                Ok(Listen {
                    listener: Listener::Unix(crate::sys::async_fd(l).map_err(nb)?),
                    client: None,
                    created: None,
                })
            }
            Some(AddressFamily::Vsock) => {
                nix::fcntl::fcntl(
                    &fd,
                    nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
                )
                .map_err(|e| TransportError::Activation(e.to_string()))?;
                tracing::info!("socket activation: vsock-listen");
                Ok(Listen {
                    listener: Listener::Vsock(crate::sys::async_fd(fd).map_err(nb)?, filter),
                    client: None,
                    created: None,
                })
            }
            other => Err(TransportError::Activation(format!(
                "unsupported socket family {other:?}"
            ))),
        }
    }

    async fn accept(&mut self) -> io::Result<OwnedFd> {
        match &mut self.listener {
            Listener::Unix(l) => loop {
                let mut guard = l.readable().await?;
                match guard.try_io(|inner| inner.get_ref().accept()) {
                    Ok(Ok((stream, _))) => {
                        stream.set_nonblocking(true)?;
                        return Ok(OwnedFd::from(stream));
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => continue,
                }
            },
            Listener::Vsock(l, filter) => loop {
                let mut guard = l.readable().await?;
                match guard.try_io(|inner| {
                    crate::sys::accept_nonblocking(inner.get_ref().as_fd()).map_err(io::Error::from)
                }) {
                    // A refused peer is closed at once (dropped) and the next one awaited.
                    Ok(Ok(fd)) if !filter.admit(&fd) => continue,
                    Ok(r) => return r,
                    Err(_would_block) => continue,
                }
            },
        }
    }

    async fn ensure_client(&mut self) {
        while self.client.is_none() {
            match self.accept().await {
                Ok(fd) => match crate::sys::async_fd(fd) {
                    Ok(c) => {
                        tracing::debug!("client connected");
                        self.client = Some(c);
                    }
                    Err(e) => tracing::warn!("cannot watch client socket: {e}"),
                },
                Err(e) => {
                    // EMFILE and friends: don't spin on a listener that stays readable.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(super::NO_HOST_BACKOFF).await;
                }
            }
        }
    }

    /// Read from the current client, accepting a new one whenever there is none. Never returns 0.
    pub async fn read(&mut self, buf: &mut [u8]) -> usize {
        loop {
            self.ensure_client().await;
            let Some(client) = &self.client else { continue };
            let res = match client.readable().await {
                Ok(mut guard) => {
                    let r = guard.try_io(|inner| {
                        nix::unistd::read(inner.get_ref(), buf).map_err(io::Error::from)
                    });
                    // A short read of a stream socket (unix, vsock) emptied its receive queue: forget the
                    // readiness now rather than learn it from one more read failing with EAGAIN, one syscall per
                    // request saved (tokio's TcpStream does the same). Data arriving later is a new edge for the
                    // edge-triggered epoll, so nothing is missed. (Not for virtio ports, chardev.rs: they return
                    // one buffer per read and may hold more.)
                    if matches!(r, Ok(Ok(n)) if n > 0 && n < buf.len()) {
                        guard.clear_ready();
                    }
                    r
                }
                Err(e) => Ok(Err(e)),
            };
            match res {
                Err(_would_block) => continue,
                Ok(Ok(0)) => {
                    tracing::debug!("client disconnected");
                    self.client = None;
                }
                Ok(Ok(n)) => return n,
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => {
                    tracing::debug!("client read error: {e}");
                    self.client = None;
                }
            }
        }
    }

    /// Write to the current client (awaiting writability); without a client, or if it vanished, the data is
    /// dropped — the reply belonged to a client that is gone.
    pub async fn write_all(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let Some(client) = &self.client else { return };
            let res = match client.writable().await {
                Ok(mut guard) => guard.try_io(|inner| {
                    nix::sys::socket::send(
                        inner.get_ref().as_raw_fd(),
                        data,
                        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
                    )
                    .map_err(io::Error::from)
                }),
                Err(e) => Ok(Err(e)),
            };
            match res {
                Err(_would_block) => {}
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => {
                    tracing::debug!("client write error, reply dropped: {e}");
                    self.client = None;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Duration;

    #[tokio::test]
    async fn one_client_at_a_time_and_reconnect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sock");
        let mut l = Listen::unix(&path).unwrap();
        let p2 = path.clone();
        let client = std::thread::spawn(move || {
            let mut a = std::os::unix::net::UnixStream::connect(&p2).unwrap();
            a.write_all(b"first").unwrap();
            let mut buf = [0u8; 5];
            a.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"reply");
            drop(a);
            let mut b = std::os::unix::net::UnixStream::connect(&p2).unwrap();
            b.write_all(b"second").unwrap();
        });
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(20), l.read(&mut buf))
            .await
            .unwrap();
        assert_eq!(&buf[..n], b"first");
        l.write_all(b"reply").await;
        let n = tokio::time::timeout(Duration::from_secs(20), l.read(&mut buf))
            .await
            .unwrap();
        assert_eq!(&buf[..n], b"second");
        client.join().unwrap();
        drop(l);
        assert!(!path.exists(), "socket file removed on drop");
    }

    #[test]
    fn vsock_filter_admits_only_allowed_cids() {
        let peer = |cid| Some(VsockAddr::new(cid, 1234));
        let host_only = PeerFilter::new(&[]);
        assert_eq!(host_only.check(peer(2).as_ref()), Ok(()));
        // CID 1 is VMADDR_CID_LOCAL (vsock_loopback): a local user of the guest.
        assert_eq!(host_only.check(peer(1).as_ref()), Err(Refusal::Cid(1)));
        // The guest's own CID (loopback through the guest transport) and nested VMs.
        assert_eq!(host_only.check(peer(3).as_ref()), Err(Refusal::Cid(3)));
        assert_eq!(
            host_only.check(peer(u32::MAX).as_ref()),
            Err(Refusal::Cid(u32::MAX))
        );
        // No (vsock) peer address: refused.
        assert_eq!(host_only.check(None), Err(Refusal::NotVsock));
        // --vsock-allow-cid 2,1 opts in to local peers.
        let with_local = PeerFilter::new(&[2, 1]);
        assert_eq!(with_local.check(peer(1).as_ref()), Ok(()));
        assert_eq!(with_local.check(peer(7).as_ref()), Err(Refusal::Cid(7)));
    }

    #[test]
    fn activation_env_rules() {
        let none = |_: &str| None;
        assert!(activation_fd(&none).unwrap().is_none());
        let other_pid = |k: &str| match k {
            "LISTEN_PID" => Some("1".to_owned()),
            "LISTEN_FDS" => Some("1".to_owned()),
            _ => None,
        };
        assert!(activation_fd(&other_pid).unwrap().is_none());
        let me = std::process::id().to_string();
        let two = move |k: &str| match k {
            "LISTEN_PID" => Some(me.clone()),
            "LISTEN_FDS" => Some("2".to_owned()),
            _ => None,
        };
        assert!(activation_fd(&two).is_err());
    }

    #[tokio::test]
    async fn activation_picks_unix_from_fd_type() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("act");
        let l = UnixListener::bind(&path).unwrap();
        let mut listen = Listen::from_activation(OwnedFd::from(l), PeerFilter::new(&[])).unwrap();
        let p2 = path.clone();
        let t = std::thread::spawn(move || {
            let mut s = std::os::unix::net::UnixStream::connect(&p2).unwrap();
            s.write_all(b"x").unwrap();
        });
        let mut buf = [0u8; 4];
        let n = tokio::time::timeout(Duration::from_secs(20), listen.read(&mut buf))
            .await
            .unwrap();
        assert_eq!(&buf[..n], b"x");
        t.join().unwrap();
    }
}

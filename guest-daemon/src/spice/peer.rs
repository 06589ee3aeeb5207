//! Who is on the other end of a session-socket connection, pinned for the whole check
//! (docs/protocol/desktop.md#checking-a-session-socket-peer, docs/protocol/vdagent.md#session-agents;
//! spice-vdagentd's CVE-2020-25653 fix).
//!
//! On accept the peer's uid and pid come from `SO_PEERCRED`, and the process is pinned by a pidfd: from
//! `SO_PEERPIDFD` (Linux ≥ 6.5, exactly the process that connected), else from `pidfd_open(pid)` (Linux ≥ 5.3; the
//! process that has the pid just after accept, whose `/proc` owner must be the peer's uid), else — no pidfds at
//! all — the `/proc/<pid>` owner is re-checked at the end. After the logind lookup by pid, the pinned process must
//! still be alive (`pidfd_send_signal(pidfd, 0)`): a live process keeps its pid, so the lookup was about it and not
//! about a recycled pid.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use tokio::net::UnixStream;

use super::logind::Logind;
use crate::sys;

/// How the peer process is held for the duration of the check.
#[derive(Debug)]
enum Pinned {
    /// `SO_PEERPIDFD`: the process that made the connection.
    PeerPidfd(OwnedFd),
    /// `pidfd_open(pid)` on a kernel without `SO_PEERPIDFD`.
    OpenedPidfd(OwnedFd),
    /// No pidfd support: only the `/proc/<pid>` owner can be re-checked.
    Proc,
}

/// The peer of a unix stream socket: its credentials and the pinned process.
#[derive(Debug)]
pub struct Peer {
    uid: u32,
    pid: u32,
    pinned: Pinned,
}

fn proc_owner(pid: u32) -> Result<u32> {
    Ok(std::fs::metadata(format!("/proc/{pid}"))
        .with_context(|| format!("peer process {pid} vanished"))?
        .uid())
}

impl Peer {
    /// Reads the credentials of the peer of `sock` and pins its process (see the module comment).
    pub fn of(sock: BorrowedFd<'_>) -> Result<Self> {
        let cred = getsockopt(&sock, PeerCredentials).context("SO_PEERCRED")?;
        let uid = cred.uid();
        let pid = u32::try_from(cred.pid())
            .ok()
            .filter(|p| *p > 0)
            .context("the peer has no pid (another pid namespace?)")?;
        let pinned = match sys::peer_pidfd(sock) {
            Ok(fd) => Pinned::PeerPidfd(fd),
            Err(Errno::ENOPROTOOPT) => match sys::pidfd_open(pid) {
                Ok(fd) => {
                    // The pid may already name another process: it must at least belong to the peer's uid. The
                    // final liveness check ties this read to the pidfd's process.
                    if proc_owner(pid)? != uid {
                        bail!("pid {pid} no longer belongs to uid {uid}");
                    }
                    Pinned::OpenedPidfd(fd)
                }
                Err(Errno::ENOSYS) => Pinned::Proc,
                Err(e) => bail!("pidfd_open({pid}): {e}"),
            },
            Err(e) => bail!("SO_PEERPIDFD: {e} (the peer process is gone?)"),
        };
        Ok(Self { uid, pid, pinned })
    }

    /// The peer's uid (`SO_PEERCRED`).
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The peer's pid (`SO_PEERCRED`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The pidfd pinning the peer, if the kernel has pidfds.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        match &self.pinned {
            Pinned::PeerPidfd(fd) | Pinned::OpenedPidfd(fd) => Some(fd.as_fd()),
            Pinned::Proc => None,
        }
    }

    /// Fails unless the pinned peer process still exists (without pidfds: unless `/proc/<pid>` still belongs to
    /// the peer's uid).
    pub fn ensure_alive(&self) -> Result<()> {
        match self.pidfd() {
            // EPERM: the process exists but we may not signal it (only when not running as root).
            Some(fd) => match sys::pidfd_signal0(fd) {
                Ok(()) | Err(Errno::EPERM) => Ok(()),
                Err(Errno::ESRCH) => bail!("peer process {} exited during the check", self.pid),
                Err(e) => bail!("pidfd_send_signal to peer {}: {e}", self.pid),
            },
            None => {
                if proc_owner(self.pid)? != self.uid {
                    bail!("pid {} changed owner during the check", self.pid);
                }
                Ok(())
            }
        }
    }
}

/// Who may run the session agent in `--no-logind` mode (besides root), see docs/spice.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentUid {
    /// `--agent-uid UID`.
    Fixed(u32),
    /// The owner of the seat's active virtual terminal at connect time; nobody but root when unknown.
    ActiveVt,
}

impl AgentUid {
    /// The uid allowed now, if any.
    fn allowed(self) -> Option<u32> {
        match self {
            Self::Fixed(uid) => Some(uid),
            Self::ActiveVt => {
                active_vt_owner(Path::new("/sys/class/tty/tty0/active"), Path::new("/dev"))
            }
        }
    }
}

/// The owner of the active VT: `active` (sysfs, e.g. "tty2") names the device under `dev`, whose owner is the
/// user logged in there (login and display managers chown it). `None` when anything is missing or odd.
pub(crate) fn active_vt_owner(active: &Path, dev: &Path) -> Option<u32> {
    let name = std::fs::read_to_string(active).ok()?;
    let name = name.trim();
    let num = name.strip_prefix("tty")?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    std::fs::metadata(dev.join(name)).ok().map(|m| m.uid())
}

/// The logind session of the agent on `stream` ("" without logind), after the peer checks: its session owner must
/// be the peer's uid (or the peer root), and the peer process must still be the one that connected. Without
/// logind the peer must be root or the uid `no_logind` allows.
pub async fn identify(
    stream: &UnixStream,
    logind: Option<&Logind>,
    no_logind: AgentUid,
) -> Result<String> {
    let peer = Peer::of(stream.as_fd())?;
    let (uid, pid) = (peer.uid(), peer.pid());
    let Some(logind) = logind else {
        let allowed = no_logind.allowed();
        if uid != 0 && Some(uid) != allowed {
            match allowed {
                Some(a) => bail!("uid {uid} is not the agent uid {a} (--no-logind)"),
                None => bail!("uid {uid} refused: no agent uid known (--no-logind without --agent-uid, no active VT owner)"),
            }
        }
        tracing::info!(uid, pid, "session agent connected (no logind)");
        return Ok(String::new());
    };
    let session = logind.session_of_pid(pid).await?;
    if uid != 0 && uid != session.uid {
        bail!(
            "uid {uid} does not own session {} (uid {})",
            session.id,
            session.uid
        );
    }
    // The pid may have been recycled during the lookup: the pinned process must still be alive.
    peer.ensure_alive()?;
    tracing::info!(uid, pid, session = %session.id, pidfd = peer.pidfd().is_some(), "session agent connected");
    Ok(session.id)
}

/// A child process connected to a unix socket, for peer-check tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// A `python3` child that connects to a listener and stays until its stdin closes.
    #[derive(Debug)]
    pub struct ChildPeer {
        /// The child (killed and reaped on drop).
        pub child: Child,
        /// Our end of its connection.
        pub stream: UnixStream,
    }

    impl ChildPeer {
        /// Starts a child (as `uid` if given) connecting to a fresh socket in `dir`; `None` (skipped) without
        /// python3 unless the peers gate is on (`guestlink_tests::gate`).
        pub fn start(dir: &std::path::Path, uid: Option<u32>) -> Option<Self> {
            // Not a pyenv shim under /root: the child may run as another uid.
            let python = ["/usr/bin/python3", "python3"]
                .into_iter()
                .find(|p| Command::new(p).arg("-c").arg("").status().is_ok());
            let Some(python) = python else {
                guestlink_tests::gate::skip(
                    guestlink_tests::gate::Gate::Peers,
                    "python3 not installed",
                );
                return None;
            };
            let path = dir.join(format!("peer-{}.sock", uid.unwrap_or(0)));
            let listener = UnixListener::bind(&path).unwrap();
            listener.set_nonblocking(true).unwrap();
            if uid.is_some() {
                use std::os::unix::fs::PermissionsExt;
                for p in [dir, path.as_path()] {
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
                }
            }
            let mut cmd = Command::new(python);
            cmd.current_dir("/")
                .arg("-c")
                .arg(
                    "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n\
                     sys.stdin.read()",
                )
                .arg(&path)
                .stdin(Stdio::piped());
            if let Some(uid) = uid {
                cmd.uid(uid).gid(uid);
            }
            let mut child = cmd.spawn().unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            let stream = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        assert!(child.try_wait().unwrap().is_none(), "the peer child exited");
                        assert!(Instant::now() < deadline, "the peer child never connected");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            };
            stream.set_nonblocking(true).unwrap();
            Some(Self { child, stream })
        }

        /// Lets the child exit and reaps it.
        pub fn exit_and_reap(&mut self) {
            drop(self.child.stdin.take());
            let status = self.child.wait().unwrap();
            assert!(status.success(), "peer child: {status}");
        }
    }

    impl Drop for ChildPeer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::ChildPeer;
    use super::*;

    #[tokio::test]
    async fn our_own_peer_is_pinned_and_alive() {
        let (a, _b) = UnixStream::pair().unwrap();
        let peer = Peer::of(a.as_fd()).unwrap();
        assert_eq!(peer.pid(), std::process::id());
        assert_eq!(peer.uid(), nix::unistd::getuid().as_raw());
        assert!(peer.pidfd().is_some(), "this kernel has pidfds: {peer:?}");
        peer.ensure_alive().unwrap();
        // Without logind every agent belongs to session ""; root is always accepted.
        assert_eq!(identify(&a, None, AgentUid::Fixed(4242)).await.unwrap(), "");
    }

    /// Issue 16 finding 3: without logind, a uid that is neither root nor the agent uid is refused.
    #[tokio::test]
    async fn without_logind_only_the_agent_uid_is_accepted() {
        if !nix::unistd::getuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let Some(child) = ChildPeer::start(dir.path(), Some(65534)) else {
            return;
        };
        let std_stream = child.stream.try_clone().unwrap();
        std_stream.set_nonblocking(true).unwrap();
        let stream = UnixStream::from_std(std_stream).unwrap();
        let err = identify(&stream, None, AgentUid::Fixed(4242))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not the agent uid"), "{err:#}");
        assert_eq!(
            identify(&stream, None, AgentUid::Fixed(65534))
                .await
                .unwrap(),
            ""
        );
    }

    #[test]
    fn a_reaped_child_peer_is_no_longer_alive() {
        let dir = tempfile::tempdir().unwrap();
        let Some(mut child) = ChildPeer::start(dir.path(), None) else {
            return;
        };
        let peer = Peer::of(child.stream.as_fd()).unwrap();
        assert_eq!(peer.pid(), child.child.id());
        // SO_PEERPIDFD from Linux 6.5 on (Debian 12's 6.1 takes the pidfd_open fallback).
        if matches!(
            sys::peer_pidfd(child.stream.as_fd()),
            Err(Errno::ENOPROTOOPT)
        ) {
            assert!(matches!(peer.pinned, Pinned::OpenedPidfd(_)), "{peer:?}");
        } else {
            assert!(matches!(peer.pinned, Pinned::PeerPidfd(_)), "{peer:?}");
        }
        peer.ensure_alive().unwrap();
        child.exit_and_reap();
        let err = peer.ensure_alive().unwrap_err().to_string();
        assert!(err.contains("exited during the check"), "{err}");
        // A pidfd opened by pid (the pre-6.5 fallback) sees the same.
        assert_eq!(sys::pidfd_open(peer.pid()).unwrap_err(), Errno::ESRCH);
    }

    #[test]
    fn pidfd_open_fallback_pins_the_same_process() {
        let dir = tempfile::tempdir().unwrap();
        let Some(mut child) = ChildPeer::start(dir.path(), None) else {
            return;
        };
        let peer = Peer {
            uid: nix::unistd::getuid().as_raw(),
            pid: child.child.id(),
            pinned: Pinned::OpenedPidfd(sys::pidfd_open(child.child.id()).unwrap()),
        };
        peer.ensure_alive().unwrap();
        child.exit_and_reap();
        assert!(peer.ensure_alive().is_err());
    }

    #[test]
    fn proc_fallback_checks_the_owner() {
        let me = Peer {
            uid: nix::unistd::getuid().as_raw(),
            pid: std::process::id(),
            pinned: Pinned::Proc,
        };
        me.ensure_alive().unwrap();
        let other_uid = Peer {
            uid: me.uid + 1,
            ..me
        };
        let err = other_uid.ensure_alive().unwrap_err().to_string();
        assert!(err.contains("changed owner"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let Some(mut child) = ChildPeer::start(dir.path(), None) else {
            return;
        };
        let gone = Peer {
            uid: nix::unistd::getuid().as_raw(),
            pid: child.child.id(),
            pinned: Pinned::Proc,
        };
        gone.ensure_alive().unwrap();
        child.exit_and_reap();
        assert!(gone.ensure_alive().is_err());
    }

    #[test]
    fn the_active_vt_owner_is_read_from_sysfs_and_dev() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (active, dev) = (dir.path().join("active"), dir.path().join("dev"));
        std::fs::create_dir(&dev).unwrap();
        std::fs::write(dev.join("tty3"), "").unwrap();
        let owner = std::fs::metadata(dev.join("tty3")).unwrap().uid();
        std::fs::write(&active, "tty3\n").unwrap();
        assert_eq!(super::active_vt_owner(&active, &dev), Some(owner));
        for odd in ["tty", "ttyS0", "../tty3", "tty3/x", ""] {
            std::fs::write(&active, odd).unwrap();
            assert_eq!(super::active_vt_owner(&active, &dev), None, "{odd:?}");
        }
        std::fs::write(&active, "tty4").unwrap();
        assert_eq!(
            super::active_vt_owner(&active, &dev),
            None,
            "missing device"
        );
        assert_eq!(super::active_vt_owner(&dir.path().join("none"), &dev), None);
    }
}

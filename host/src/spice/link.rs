//! [`SpiceLink`]: the host end of `com.redhat.spice.0` — a QEMU chardev unix socket or a character device —
//! playing spice-server and the SPICE client: chunks ≤ 2048 bytes towards the guest, any size accepted back,
//! the capability handshake, grab serials, and a message pump with deadlines.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use guestlink_protocol::vdagent::{
    encode_message, Capabilities, Capability, ChunkMode, GrabSerials, Message, Port, RawMessage,
    Reassembler, ReassemblerConfig, WireFormat,
};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::error::{Channel, Error};

/// The capabilities the host announces: spice-gtk's set (0x00035077).
pub fn client_caps() -> Capabilities {
    [
        Capability::MouseState,
        Capability::MonitorsConfig,
        Capability::Reply,
        Capability::DisplayConfig,
        Capability::ClipboardByDemand,
        Capability::ClipboardSelection,
        Capability::MonitorsConfigPosition,
        Capability::FileXferDetailedErrors,
        Capability::ClipboardNoReleaseOnRegrab,
        Capability::ClipboardGrabSerial,
    ]
    .into_iter()
    .collect()
}

#[derive(Debug)]
enum Io {
    Sock(UnixStream),
    Dev(File),
}

impl Io {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Io::Sock(s) => s.as_fd(),
            Io::Dev(f) => f.as_fd(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Io::Sock(s) => s.read(buf),
            Io::Dev(f) => f.read(buf),
        }
    }

    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Io::Sock(s) => s.write_all(data),
            Io::Dev(f) => f.write_all(data),
        }
    }
}

/// A connected SPICE agent port.
#[derive(Debug)]
pub struct SpiceLink {
    io: Io,
    path: PathBuf,
    reasm: Reassembler,
    queue: VecDeque<(Port, RawMessage)>,
    ours: Capabilities,
    agent: Option<Capabilities>,
    wire: WireFormat,
    /// Grab serials (reset at every caps exchange with `request = 1`).
    pub serials: GrabSerials,
    buf: Vec<u8>,
    /// Bytes written since the last message from the guest (which shows the guest is reading): what leaving
    /// may have to wait for (see [`SpiceLink::drain`]).
    unconfirmed: usize,
}

fn make_raw(f: &File) -> nix::Result<()> {
    use nix::sys::termios;
    let mut tio = termios::tcgetattr(f)?;
    termios::cfmakeraw(&mut tio);
    termios::tcsetattr(f, termios::SetArg::TCSANOW, &tio)
}

impl SpiceLink {
    /// Opens `path` (a unix socket is connected to; anything else is opened read-write, a tty in raw mode).
    pub fn open(path: &Path) -> Result<Self, Error> {
        let meta = std::fs::metadata(path).map_err(|e| Error::Open {
            path: path.into(),
            source: e,
        })?;
        let open_err = |e| Error::Open {
            path: path.into(),
            source: e,
        };
        let io = if meta.file_type().is_socket() {
            Io::Sock(UnixStream::connect(path).map_err(open_err)?)
        } else {
            let f = File::options()
                .read(true)
                .write(true)
                .open(path)
                .map_err(open_err)?;
            if nix::unistd::isatty(&f).unwrap_or(false) {
                make_raw(&f).map_err(|e| open_err(e.into()))?;
            }
            Io::Dev(f)
        };
        Ok(Self {
            io,
            path: path.into(),
            reasm: Reassembler::new(ReassemblerConfig::host_side()),
            queue: VecDeque::new(),
            ours: client_caps(),
            agent: None,
            wire: WireFormat::default(),
            serials: GrabSerials::new(),
            buf: vec![0u8; 256 * 1024],
            unconfirmed: 0,
        })
    }

    /// Opens `path` and exchanges capabilities: ours with `request = 1`, the agent's back within `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, Error> {
        let mut link = Self::open(path)?;
        link.handshake(timeout)?;
        Ok(link)
    }

    /// The path this link was opened on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The agent's capabilities (after the handshake).
    pub fn agent_caps(&self) -> Option<&Capabilities> {
        self.agent.as_ref()
    }

    /// Our (client) capabilities.
    pub fn our_caps(&self) -> &Capabilities {
        &self.ours
    }

    /// The negotiated clipboard wire format.
    pub fn wire(&self) -> WireFormat {
        self.wire
    }

    /// Whether the agent announced `cap`.
    pub fn agent_has(&self, cap: Capability) -> bool {
        self.agent.as_ref().is_some_and(|c| c.has(cap))
    }

    fn handshake(&mut self, timeout: Duration) -> Result<(), Error> {
        self.serials.reset();
        let caps = Message::AnnounceCapabilities {
            request: true,
            caps: self.ours.clone(),
        };
        self.send(Port::Client, &caps)?;
        let deadline = Instant::now() + timeout;
        while self.agent.is_none() {
            match self.recv_until(deadline)? {
                Some(_) => {}
                None => {
                    return Err(Error::NoAgent {
                        channel: Channel::Spice,
                        target: self.path.display().to_string(),
                        timeout,
                        source: None,
                    })
                }
            }
        }
        Ok(())
    }

    /// Sends `msg` on `port`, split into ≤ 2048-byte chunks.
    pub fn send(&mut self, port: Port, msg: &Message) -> Result<(), Error> {
        let bytes = encode_message(port, msg, self.wire, ChunkMode::Split)
            .map_err(|e| Error::SpiceProtocol(e.to_string()))?;
        self.unconfirmed = self.unconfirmed.saturating_add(bytes.len());
        self.io
            .write_all(&bytes)
            .map_err(|e| Error::Io(Channel::Spice, e))
    }

    /// Sends messages already framed into `batch` by the caller, in one write. The
    /// caller builds `batch` with [`encode_raw_message_into`](guestlink_protocol::vdagent::encode_raw_message_into)
    /// in [`ChunkMode::Split`] (chunks of at most 2048 bytes, as spice-server delivers them).
    pub fn send_framed(&mut self, batch: &[u8]) -> Result<(), Error> {
        self.unconfirmed = self.unconfirmed.saturating_add(batch.len());
        self.io
            .write_all(batch)
            .map_err(|e| Error::Io(Channel::Spice, e))
    }

    /// The next message other than capabilities (which are handled here), or `None` at `deadline`.
    pub fn recv_until(&mut self, deadline: Instant) -> Result<Option<(Port, Message)>, Error> {
        loop {
            while let Some((port, raw)) = self.queue.pop_front() {
                self.unconfirmed = 0;
                let msg_type = raw.header.msg_type;
                let msg = match raw.into_decoded(self.wire) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(msg_type, "undecodable message from the agent: {e}");
                        continue;
                    }
                };
                if let Message::AnnounceCapabilities { request, caps } = &msg {
                    tracing::debug!(caps = ?caps.words(), request, "agent capabilities");
                    self.wire = WireFormat::negotiate(&self.ours, caps);
                    self.agent = Some(caps.clone());
                    if *request {
                        // The agent (re)opened its port: a fresh session, serials restart.
                        self.serials.reset();
                        let ours = Message::AnnounceCapabilities {
                            request: false,
                            caps: self.ours.clone(),
                        };
                        self.send(port, &ours)?;
                    }
                }
                return Ok(Some((port, msg)));
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(60));
            let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
            let ready = {
                let mut fds = [PollFd::new(self.io.fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::from(ms)) {
                    Ok(n) => n > 0,
                    Err(nix::errno::Errno::EINTR) => false,
                    Err(e) => return Err(Error::Io(Channel::Spice, e.into())),
                }
            };
            if !ready {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                continue;
            }
            let n = match self.io.read(&mut self.buf) {
                Ok(0) => return Err(Error::Closed(Channel::Spice)),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A pty whose other side is closed reads EIO: the guest port is gone.
                Err(e) if e.raw_os_error() == Some(libc_eio()) => {
                    return Err(Error::Closed(Channel::Spice))
                }
                Err(e) => return Err(Error::Io(Channel::Spice, e)),
            };
            for ev in self.reasm.feed(&self.buf[..n]) {
                match ev {
                    Ok(m) => self.queue.push_back(m),
                    Err(e) => return Err(Error::SpiceProtocol(e.to_string())),
                }
            }
        }
    }

    /// On a socket: half-closes it and waits (at most `timeout`) until the other end has read everything and
    /// closed its side, discarding what still arrives. QEMU's socket chardev drops the connection as soon as its
    /// peer closes (it watches for HUP), throwing away what it had not yet passed to the guest: a 16 MiB
    /// CLIPBOARD answered just before exiting was lost that way when the guest read slowly. A half-close is no
    /// HUP: QEMU reads on to the end of the data, sees EOF and closes (docs/protocol/vdagent.md, "Leaving a
    /// socket chardev"). Returns whether the other end closed in time; a character device has nothing to wait
    /// for (`true`).
    pub fn drain(&mut self, timeout: Duration) -> bool {
        let Io::Sock(s) = &self.io else {
            return true;
        };
        if s.shutdown(std::net::Shutdown::Write).is_err() {
            return true; // already gone
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.recv_until(deadline) {
                Ok(Some(_)) => {}         // read and dropped
                Ok(None) => return false, // the deadline
                Err(_) => return true,    // closed (or broken: nothing more to wait for)
            }
        }
    }

    /// Non-blocking: the next already-available message, if any.
    pub fn try_recv(&mut self) -> Result<Option<(Port, Message)>, Error> {
        self.recv_until(Instant::now())
    }
}

fn libc_eio() -> i32 {
    nix::errno::Errno::EIO as i32
}

/// How long leaving waits for the guest to take what was written before the socket closes ([`SpiceLink`]'s
/// `Drop`).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Leaving waits only when more than this was written since the guest last sent something: a few small messages
/// are read by QEMU at once (the guest's port buffers hold far more), while waiting for a guest that stopped
/// reading would delay every exit after an error.
pub const DRAIN_MIN: usize = 64 * 1024;

impl Drop for SpiceLink {
    /// Leaving = the client disconnecting: like spice-server, tell the agent on the server port, so that the
    /// next connection is not a "new client replacing an old one" (spice-vdagent then drops the guest's
    /// clipboard ownership, and a later `clipboard get` would find nothing). Then, when more than [`DRAIN_MIN`]
    /// bytes are unconfirmed, [`SpiceLink::drain`], so that nothing written is lost when the socket closes.
    fn drop(&mut self) {
        if self.agent.is_some() {
            let _ = self.send(Port::Server, &Message::ClientDisconnected);
        }
        if self.unconfirmed > DRAIN_MIN && !self.drain(DRAIN_TIMEOUT) {
            tracing::warn!(
                path = %self.path.display(),
                "the guest did not take all that was sent within {} s; closing anyway",
                DRAIN_TIMEOUT.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A link to a socket whose other end (QEMU's chardev) the test holds.
    fn linked() -> (tempfile::TempDir, SpiceLink, UnixStream) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spice.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let link = SpiceLink::open(&path).unwrap();
        let (qemu, _) = listener.accept().unwrap();
        (dir, link, qemu)
    }

    /// QEMU's socket chardev drops unread data when its peer's close shows as HUP. Leaving must not: the link
    /// half-closes and waits until the other end has read everything and closed.
    #[test]
    fn leaving_waits_until_the_other_end_has_read_everything() {
        let (_dir, mut link, mut qemu) = linked();
        let big = vec![b'x'; 4 << 20];
        // More than the socket buffers hold: the writer thread blocks until "QEMU" reads.
        let writer = std::thread::spawn(move || {
            link.send_framed(&big).unwrap();
            let t = Instant::now();
            drop(link);
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(300));
        // A slow reader: while data is unread, the peer has not hung up (QEMU would then drop it).
        let mut got = 0usize;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let mut fds = [PollFd::new(qemu.as_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::from(1000u16)).unwrap();
            let ev = fds[0].revents().unwrap();
            let n = qemu.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            assert!(
                !ev.contains(PollFlags::POLLHUP),
                "HUP with {got} bytes read"
            );
            got += n;
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, 4 << 20, "every byte arrived before EOF");
        assert!(
            !writer.is_finished(),
            "leaving waits for the other end to close"
        );
        drop(qemu);
        let waited = writer.join().unwrap();
        assert!(
            waited < DRAIN_TIMEOUT,
            "ended by the close, not the timeout"
        );
    }

    /// Small unconfirmed writes (a request, CLIENT_DISCONNECTED) do not make leaving wait for a peer that never
    /// closes (a guest that stopped reading).
    #[test]
    fn leaving_after_small_writes_does_not_wait() {
        let (_dir, mut link, _qemu) = linked();
        link.send_framed(&[0u8; 1024]).unwrap();
        let t = Instant::now();
        drop(link);
        assert!(t.elapsed() < Duration::from_secs(5), "left without waiting");
    }
}

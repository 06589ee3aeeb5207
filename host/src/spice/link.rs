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
        self.io
            .write_all(&bytes)
            .map_err(|e| Error::Io(Channel::Spice, e))
    }

    /// Sends messages already framed into `batch` by the caller, in one write. The
    /// caller builds `batch` with [`encode_raw_message_into`](guestlink_protocol::vdagent::encode_raw_message_into)
    /// in [`ChunkMode::Split`] (chunks of at most 2048 bytes, as spice-server delivers them).
    pub fn send_framed(&mut self, batch: &[u8]) -> Result<(), Error> {
        self.io
            .write_all(batch)
            .map_err(|e| Error::Io(Channel::Spice, e))
    }

    /// The next message other than capabilities (which are handled here), or `None` at `deadline`.
    pub fn recv_until(&mut self, deadline: Instant) -> Result<Option<(Port, Message)>, Error> {
        loop {
            while let Some((port, raw)) = self.queue.pop_front() {
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

    /// Non-blocking: the next already-available message, if any.
    pub fn try_recv(&mut self) -> Result<Option<(Port, Message)>, Error> {
        self.recv_until(Instant::now())
    }
}

fn libc_eio() -> i32 {
    nix::errno::Errno::EIO as i32
}

impl Drop for SpiceLink {
    /// Leaving = the client disconnecting: like spice-server, tell the agent on the server port, so that the
    /// next connection is not a "new client replacing an old one" (spice-vdagent then drops the guest's
    /// clipboard ownership, and a later `clipboard get` would find nothing).
    fn drop(&mut self) {
        if self.agent.is_some() {
            let _ = self.send(Port::Server, &Message::ClientDisconnected);
        }
    }
}

//! The SPICE agent port: the virtio-serial device `com.redhat.spice.0`, a pty standing in for it, or — when the
//! path is a unix socket — a stream connected to it (as spice-vdagentd does when `open()` fails).
//!
//! The core ([`super::core`]) is generic over [`Link`] (what it needs of an open port) and [`Opener`] (how a
//! port is opened again after a reset): [`PortIo`] and [`PathOpener`] are the real ones; [`Stream`] makes any
//! tokio byte stream a port (the core's unit tests use an in-memory duplex).

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;

use crate::transport::chardev::Chardev;

/// Piece size of [`PortIo::write_file`].
const FILE_PIECE: usize = 2 * 1024 * 1024;

/// What the core needs of an open port.
pub trait Link: Send {
    /// Reads some bytes (0 = the other end closed).
    fn read(&mut self, buf: &mut [u8]) -> impl Future<Output = io::Result<usize>> + Send;
    /// Reads what is already there without waiting (`None`: nothing, or something [`Self::read`] will report).
    fn try_read(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// Writes all of `data`.
    fn write_all(&mut self, data: &[u8]) -> impl Future<Output = io::Result<()>> + Send;
    /// Writes the first `len` bytes of `file`; no piece may stall for `timeout`.
    fn write_file(
        &mut self,
        file: &File,
        len: usize,
        timeout: Duration,
    ) -> impl Future<Output = io::Result<()>> + Send;
}

/// Opens the port, the first time and after every reset.
pub trait Opener: Send {
    /// The open port.
    type Port: Link;
    /// Opens it.
    fn open(&mut self) -> impl Future<Output = io::Result<Self::Port>> + Send;
    /// What it opens, for the logs.
    fn name(&self) -> String;
}

/// Opens the port at a path ([`PortIo::open`]).
#[derive(Debug, Clone)]
pub struct PathOpener(pub PathBuf);

impl Opener for PathOpener {
    type Port = PortIo;
    async fn open(&mut self) -> io::Result<PortIo> {
        PortIo::open(&self.0).await
    }
    fn name(&self) -> String {
        self.0.display().to_string()
    }
}

/// Any tokio byte stream as a port (files are copied through a buffer); the core's unit tests use it.
#[cfg(test)]
#[derive(Debug)]
pub struct Stream<S>(pub S);

#[cfg(test)]
impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Link for Stream<S> {
    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).await
    }
    fn try_read(&mut self, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.write_all(data).await
    }
    async fn write_file(&mut self, file: &File, len: usize, timeout: Duration) -> io::Result<()> {
        copy_file(self, file, 0, len, timeout).await
    }
}

/// Writes bytes `off..len` of `file` to `port` through a buffer of at most [`FILE_PIECE`] bytes, each piece
/// within `timeout`.
async fn copy_file<L: Link>(
    port: &mut L,
    file: &File,
    mut off: usize,
    len: usize,
    timeout: Duration,
) -> io::Result<()> {
    let mut buf = vec![0u8; FILE_PIECE.min(len.saturating_sub(off))];
    while off < len {
        let n = (len - off).min(buf.len());
        file.read_exact_at(&mut buf[..n], off as u64)?;
        tokio::time::timeout(timeout, port.write_all(&buf[..n]))
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))?;
        off += n;
    }
    Ok(())
}

impl Link for PortIo {
    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        PortIo::read(self, buf).await
    }
    fn try_read(&mut self, buf: &mut [u8]) -> Option<usize> {
        match self {
            Self::Dev(d) => d.try_read(buf),
            Self::Sock(s) => s.try_read(buf).ok().filter(|&n| n > 0),
        }
    }
    async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        PortIo::write_all(self, data).await
    }
    async fn write_file(&mut self, file: &File, len: usize, timeout: Duration) -> io::Result<()> {
        PortIo::write_file(self, file, len, timeout).await
    }
}

/// An open port.
#[derive(Debug)]
pub enum PortIo {
    /// A character device or pty (raw mode); a host going away is waited out, never EOF.
    Dev(Chardev),
    /// A unix stream socket; EOF means the host side went away.
    Sock(UnixStream),
}

impl PortIo {
    /// Opens `path`: a socket is connected to, anything else opened read-write.
    pub async fn open(path: &Path) -> io::Result<Self> {
        let is_socket = std::fs::metadata(path)?.file_type().is_socket();
        if is_socket {
            return Ok(Self::Sock(UnixStream::connect(path).await?));
        }
        Chardev::open(path, false)
            .map(Self::Dev)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Reads some bytes (0 = the socket peer closed).
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Dev(d) => d
                .read(buf)
                .await
                .map_err(|e| io::Error::other(e.to_string())),
            Self::Sock(s) => s.read(buf).await,
        }
    }

    /// Writes the first `len` bytes of `file` (a checked, sealed memfd) to the port; nothing may stall for
    /// `timeout`, so a large answer to a slow but live host is not cut short. A socket gets it by sendfile(2)
    /// (one in-kernel copy, each call filling the socket buffer); a device through a 2 MiB buffer.
    pub async fn write_file(
        &mut self,
        file: &File,
        len: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut off = 0usize;
        if let Self::Sock(s) = self {
            match send_file(s, file, &mut off, len, timeout).await {
                Ok(()) => return Ok(()),
                // Not a socket sendfile can write to: the buffered copy below takes over where it stopped.
                Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
        copy_file(self, file, off, len, timeout).await
    }

    /// Writes all of `data`.
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Self::Dev(d) => d
                .write_all(data)
                .await
                .map_err(|e| io::Error::other(e.to_string())),
            Self::Sock(s) => s.write_all(data).await,
        }
    }
}

/// sendfile(2) from `file` at `*off` to `sock` until `len`, waiting (at most `timeout` each time) for room in
/// the socket buffer in between; `*off` tells how far it got when it fails.
async fn send_file(
    sock: &UnixStream,
    file: &File,
    off: &mut usize,
    len: usize,
    timeout: Duration,
) -> io::Result<()> {
    while *off < len {
        tokio::time::timeout(timeout, sock.writable())
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        let mut pos = nix::libc::off_t::try_from(*off).map_err(|_| io::ErrorKind::InvalidInput)?;
        let r = sock.try_io(Interest::WRITABLE, || {
            nix::sys::sendfile::sendfile(sock, file, Some(&mut pos), len - *off)
                .map_err(io::Error::from)
        });
        match r {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => *off += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

//! The SPICE agent port: the virtio-serial device `com.redhat.spice.0`, a pty standing in for it, or — when the
//! path is a unix socket — a stream connected to it (as spice-vdagentd does when `open()` fails).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::transport::chardev::Chardev;

/// Piece size of [`PortIo::write_file`].
const FILE_PIECE: usize = 2 * 1024 * 1024;

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

    /// Writes the first `len` bytes of `file` (a checked, sealed memfd) through a 256 KiB buffer; each piece
    /// must go out within `timeout`, so a large answer to a slow but live host is not cut short.
    pub async fn write_file(
        &mut self,
        file: &File,
        len: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut buf = vec![0u8; FILE_PIECE.min(len)];
        let mut off = 0usize;
        while off < len {
            let n = (len - off).min(buf.len());
            file.read_exact_at(&mut buf[..n], off as u64)?;
            tokio::time::timeout(timeout, self.write_all(&buf[..n]))
                .await
                .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))?;
            off += n;
        }
        Ok(())
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

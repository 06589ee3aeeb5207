//! Transports: the byte channel between the host and the dispatch core.
//!
//! * [`chardev`]: virtio-serial and isa-serial (and any character device, e.g. a pty): opened once and kept open;
//!   EOF/EIO/HUP means "no host connected": back off 100 ms and poll again, never exit, never spin.
//! * [`listen`]: unix-listen, vsock-listen and systemd socket activation: one client at a time; the JSON parser
//!   state lives in the core, so (like qemu-ga) it carries over from one client to the next.
//!
//! Reads and writes are async through tokio's `AsyncFd`; a write that would block awaits writability, so a slow
//! reader gets backpressure instead of a busy loop.

pub mod chardev;
pub mod listen;

use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

/// qemu-ga's back-off while no host is connected (`QGA_READ_...` 100 ms sleep in the main loop).
pub const NO_HOST_BACKOFF: Duration = Duration::from_millis(100);
/// qemu-ga's `-r` retry interval (`QGA_RETRY_INTERVAL`).
pub const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// Where the QGA channel comes from: qemu-ga's `-m`/`method=`, plus `none` (guestlinkd only: no QGA channel, the
/// SPICE side alone). Parsed once, when the configuration is resolved; nothing later compares method names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// A virtio-serial port (the default; path `/dev/virtio-ports/org.qemu.guest_agent.0`).
    VirtioSerial,
    /// A serial line (path `/dev/ttyS0`), set to raw mode.
    IsaSerial,
    /// A unix socket we listen on (`-p` required).
    UnixListen,
    /// A vsock we listen on (`-p <cid>:<port>` required).
    VsockListen,
    /// No QGA channel (guestlinkd only; needs `--spice-path`).
    None,
}

impl Method {
    /// The name on the command line and in the config file.
    pub fn name(self) -> &'static str {
        match self {
            Method::VirtioSerial => "virtio-serial",
            Method::IsaSerial => "isa-serial",
            Method::UnixListen => "unix-listen",
            Method::VsockListen => "vsock-listen",
            Method::None => "none",
        }
    }

    /// The channel path used when none is given (qemu-ga's defaults for the serial methods).
    pub fn default_path(self) -> Option<&'static str> {
        match self {
            Method::VirtioSerial => Some("/dev/virtio-ports/org.qemu.guest_agent.0"),
            Method::IsaSerial => Some("/dev/ttyS0"),
            Method::UnixListen | Method::VsockListen | Method::None => None,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown method name.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid channel method: {0}")]
pub struct BadMethod(pub String);

impl FromStr for Method {
    type Err = BadMethod;

    fn from_str(s: &str) -> Result<Self, BadMethod> {
        [
            Method::VirtioSerial,
            Method::IsaSerial,
            Method::UnixListen,
            Method::VsockListen,
            Method::None,
        ]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| BadMethod(s.to_owned()))
    }
}

/// A transport set-up or fatal I/O error.
#[derive(Debug, Error)]
pub enum TransportError {
    /// `-m none` has no channel to open.
    #[error("method 'none' has no QGA channel")]
    NoChannel,
    /// A listen method without `-p`.
    #[error("the {0} method requires a path (-p)")]
    MissingPath(&'static str),
    /// A bad vsock address.
    #[error("invalid vsock address '{0}', expected <cid>:<port>")]
    BadVsockAddr(String),
    /// Opening the channel failed.
    #[error("failed to open channel {path}: {source}")]
    Open {
        /// The path/address.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The channel went away (device removed).
    #[error("channel lost: {0}")]
    Lost(io::Error),
    /// systemd passed an unusable socket.
    #[error("socket activation: {0}")]
    Activation(String),
}

/// The channel the core reads requests from and writes replies to.
#[derive(Debug)]
pub enum Channel {
    /// A character device.
    Chardev(chardev::Chardev),
    /// A listening socket and its current client.
    Listen(listen::Listen),
}

impl Channel {
    /// Read some bytes (at least one). Waits while no host/client is connected.
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        match self {
            Channel::Chardev(c) => c.read(buf).await,
            Channel::Listen(l) => Ok(l.read(buf).await),
        }
    }

    /// Write all of `data` (awaiting writability). For a listen channel, a vanished client drops the data.
    pub async fn write_all(&mut self, data: &[u8]) -> Result<(), TransportError> {
        match self {
            Channel::Chardev(c) => c.write_all(data).await,
            Channel::Listen(l) => {
                l.write_all(data).await;
                Ok(())
            }
        }
    }
}

/// Parse a vsock-listen path `<cid>:<port>`.
pub fn parse_vsock_addr(s: &str) -> Result<(u32, u32), TransportError> {
    let bad = || TransportError::BadVsockAddr(s.to_owned());
    let (cid, port) = s.split_once(':').ok_or_else(bad)?;
    Ok((
        cid.parse().map_err(|_| bad())?,
        port.parse().map_err(|_| bad())?,
    ))
}

/// Open the channel for `method`/`path` (the socket-activation fd, when given, wins like in qemu-ga).
/// `vsock_allow` lists the peer CIDs a vsock listener accepts (see [`listen::PeerFilter`]).
pub fn open(
    method: Method,
    path: Option<&str>,
    activation: Option<std::os::fd::OwnedFd>,
    vsock_allow: &[u32],
) -> Result<Channel, TransportError> {
    let filter = listen::PeerFilter::new(vsock_allow);
    if let Some(fd) = activation {
        return Ok(Channel::Listen(listen::Listen::from_activation(
            fd, filter,
        )?));
    }
    match method {
        Method::VirtioSerial | Method::IsaSerial => {
            let path = path.ok_or(TransportError::MissingPath("serial"))?;
            Ok(Channel::Chardev(chardev::Chardev::open(
                path.as_ref(),
                method == Method::IsaSerial,
            )?))
        }
        Method::UnixListen => {
            let path = path.ok_or(TransportError::MissingPath("unix-listen"))?;
            Ok(Channel::Listen(listen::Listen::unix(path.as_ref())?))
        }
        Method::VsockListen => {
            let path = path.ok_or(TransportError::MissingPath("vsock-listen"))?;
            let (cid, port) = parse_vsock_addr(path)?;
            Ok(Channel::Listen(listen::Listen::vsock(cid, port, filter)?))
        }
        Method::None => Err(TransportError::NoChannel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vsock_addr() {
        assert_eq!(parse_vsock_addr("3:1234").unwrap(), (3, 1234));
        assert_eq!(parse_vsock_addr("4294967295:1").unwrap(), (u32::MAX, 1));
        assert!(parse_vsock_addr("3").is_err());
        assert!(parse_vsock_addr("x:1").is_err());
    }

    #[test]
    fn method_names_round_trip_and_unknown_ones_are_refused() {
        for name in [
            "virtio-serial",
            "isa-serial",
            "unix-listen",
            "vsock-listen",
            "none",
        ] {
            let m: Method = name.parse().unwrap();
            assert_eq!(m.to_string(), name);
        }
        assert_eq!(
            "carrier-pigeon".parse::<Method>(),
            Err(BadMethod("carrier-pigeon".into()))
        );
        assert_eq!(
            "carrier-pigeon".parse::<Method>().unwrap_err().to_string(),
            "invalid channel method: carrier-pigeon"
        );
    }

    #[test]
    fn listen_methods_need_a_path() {
        assert!(matches!(
            open(Method::UnixListen, None, None, &[]),
            Err(TransportError::MissingPath(_))
        ));
        assert!(matches!(
            open(Method::None, None, None, &[]),
            Err(TransportError::NoChannel)
        ));
    }
}

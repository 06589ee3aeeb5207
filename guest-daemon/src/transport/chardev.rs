//! virtio-serial / isa-serial: a character device opened once (`O_RDWR|O_NONBLOCK|O_NOCTTY|O_CLOEXEC`) and kept
//! open for the daemon's lifetime, because every close/reopen makes libvirt drop its agent connection.
//!
//! While no host is connected a virtio port reads EOF (and polls as HUP); a pty whose other side is closed reads
//! EIO. Both mean "no host": sleep [`NO_HOST_BACKOFF`] and poll again — at most ~10 wake-ups per second, never a
//! spin. Only errors that say the device itself is gone (ENODEV, ENXIO, EBADF) end the channel (`-r` re-opens it).

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::termios::{self, BaudRate, SetArg, SpecialCharacterIndices};
use tokio::io::unix::AsyncFd;

use super::{TransportError, NO_HOST_BACKOFF};

/// An open character device.
#[derive(Debug)]
pub struct Chardev {
    fd: AsyncFd<OwnedFd>,
    path: String,
    host_present: bool,
    /// Number of read(2) calls, for the no-spin tests.
    reads: Arc<AtomicU64>,
}

fn is_lost(e: Errno) -> bool {
    matches!(e, Errno::ENODEV | Errno::ENXIO | Errno::EBADF)
}

/// Raw mode like qemu-ga's serial set-up (no echo, no line editing, no CR/LF mangling, VMIN=1/VTIME=0), plus
/// 38400 baud for isa-serial. Applied to any tty (a pty standing in for a port must not echo).
fn make_raw(fd: &OwnedFd, set_speed: bool) -> nix::Result<()> {
    let mut tio = termios::tcgetattr(fd)?;
    termios::cfmakeraw(&mut tio);
    tio.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
    tio.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
    if set_speed {
        termios::cfsetspeed(&mut tio, BaudRate::B38400)?;
    }
    termios::tcflush(fd, termios::FlushArg::TCIFLUSH)?;
    termios::tcsetattr(fd, SetArg::TCSANOW, &tio)
}

impl Chardev {
    /// Open the device. `isa` applies qemu-ga's serial settings (raw, 38400 baud, input flushed).
    pub fn open(path: &Path, isa: bool) -> Result<Chardev, TransportError> {
        let open_err = |source| TransportError::Open {
            path: path.display().to_string(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(open_err)?;
        let fd = OwnedFd::from(file);
        if nix::unistd::isatty(&fd).unwrap_or(false) {
            if let Err(e) = make_raw(&fd, isa) {
                if isa {
                    return Err(open_err(io::Error::from(e)));
                }
                tracing::warn!("could not put {} in raw mode: {e}", path.display());
            }
        }
        let fd = crate::sys::async_fd(fd).map_err(open_err)?;
        Ok(Chardev {
            fd,
            path: path.display().to_string(),
            host_present: true,
            reads: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Counter of read(2) calls (tests).
    #[cfg(test)]
    pub fn read_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.reads)
    }

    fn host_absent(&mut self, why: &str) {
        if self.host_present {
            tracing::debug!(path = %self.path, "no host connected ({why}); polling every 100 ms");
            self.host_present = false;
        }
    }

    /// Register the port afresh with the reactor, dropping tokio's sticky HUP readiness.
    ///
    /// tokio never clears `READ_CLOSED`/`WRITE_CLOSED` once seen (for sockets a hang-up is final), but a virtio
    /// port polls HUP only while no host is connected. Kept after a host connects, it makes `readable()` ready
    /// forever: `read` returns EAGAIN in a loop that never yields, starving every spawned task (guest-exec's
    /// reaper and pipe pumps, the auto-thaw watchdog), and `write_all` would drop replies as "no host". A new
    /// registration (on a `dup`, so the open file description stays the same) starts from the port's real state.
    /// On failure (EMFILE…) the old registration stays and `false` is returned.
    fn reregister(&mut self) -> bool {
        match self.fd.get_ref().try_clone().and_then(crate::sys::async_fd) {
            Ok(fd) => {
                self.fd = fd;
                true
            }
            Err(e) => {
                tracing::warn!(path = %self.path, "cannot re-register the port: {e}");
                false
            }
        }
    }

    /// Read at least one byte, waiting (without spinning) while no host is connected.
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        // Set after re-registering on a stale HUP; a second HUP+EAGAIN right after it is a real "no host".
        let mut reregistered = false;
        loop {
            let mut guard = self.fd.readable().await.map_err(TransportError::Lost)?;
            let hung_up = guard.ready().is_read_closed();
            self.reads.fetch_add(1, Ordering::Relaxed);
            let res = guard.try_io(|inner| {
                nix::unistd::read(inner.get_ref().as_fd(), buf).map_err(io::Error::from)
            });
            drop(guard);
            match res {
                Err(_would_block) if hung_up && !reregistered => {
                    tracing::debug!(path = %self.path, "stale HUP readiness with no data: re-registering");
                    if !self.reregister() {
                        tokio::time::sleep(NO_HOST_BACKOFF).await;
                    }
                    reregistered = true;
                }
                Err(_would_block) if hung_up => {
                    self.host_absent("HUP");
                    tokio::time::sleep(NO_HOST_BACKOFF).await;
                    reregistered = false;
                }
                Err(_would_block) => continue,
                Ok(Ok(0)) => {
                    self.host_absent("EOF");
                    tokio::time::sleep(NO_HOST_BACKOFF).await;
                }
                Ok(Ok(n)) => {
                    if !self.host_present {
                        tracing::debug!(path = %self.path, "host connected");
                        self.host_present = true;
                        // Forget the HUP seen while no host was there, or replies to this host could be dropped.
                        self.reregister();
                    }
                    return Ok(n);
                }
                Ok(Err(e)) => {
                    let errno = Errno::from_raw(e.raw_os_error().unwrap_or(0));
                    if errno == Errno::EINTR {
                        continue;
                    }
                    if is_lost(errno) {
                        return Err(TransportError::Lost(e));
                    }
                    self.host_absent(errno.desc());
                    tokio::time::sleep(NO_HOST_BACKOFF).await;
                }
            }
        }
    }

    /// Reads what is already there without waiting: `None` when nothing is (EAGAIN), at EOF or on an error, which
    /// the next [`Self::read`] then meets and handles. A virtio port hands out one host buffer (≤ 4 KiB) per
    /// read(2); the SPICE core calls this after a read to take the rest of a burst in the same pass.
    pub fn try_read(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let r = self.fd.try_io(tokio::io::Interest::READABLE, |inner| {
            nix::unistd::read(inner.as_fd(), buf).map_err(io::Error::from)
        });
        match r {
            Ok(n) if n > 0 => Some(n),
            _ => None,
        }
    }

    /// Write everything, awaiting writability on EAGAIN (backpressure, no busy loop). If the other side is gone
    /// (EIO/EPIPE, or EAGAIN while the port polls HUP), the rest of the reply is dropped: nobody will read it.
    pub async fn write_all(&mut self, mut data: &[u8]) -> Result<(), TransportError> {
        // The HUP may be stale (a host left and another one connected since): check once on a fresh registration.
        let mut reregistered = false;
        while !data.is_empty() {
            let mut guard = self.fd.writable().await.map_err(TransportError::Lost)?;
            // A virtio port without a host polls HUP and writes EAGAIN until a host connects: a reply for the
            // host that left would only confuse the next one, so it is dropped instead of waited on.
            let hung_up = guard.ready().is_write_closed();
            let res = guard
                .try_io(|inner| nix::unistd::write(inner.get_ref(), data).map_err(io::Error::from));
            drop(guard);
            match res {
                Err(_would_block) if hung_up && !reregistered => {
                    self.reregister();
                    reregistered = true;
                }
                Err(_would_block) if hung_up => {
                    self.host_absent("HUP on write");
                    tracing::debug!(path = %self.path, "reply dropped, no host connected");
                    return Ok(());
                }
                Err(_would_block) => continue,
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => {
                    let errno = Errno::from_raw(e.raw_os_error().unwrap_or(0));
                    if errno == Errno::EINTR {
                        continue;
                    }
                    if is_lost(errno) {
                        return Err(TransportError::Lost(e));
                    }
                    tracing::debug!(path = %self.path, "reply dropped, no host: {e}");
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::OFlag;
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    use std::time::Duration;

    fn pty() -> (nix::pty::PtyMaster, String) {
        let m = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY).unwrap();
        grantpt(&m).unwrap();
        unlockpt(&m).unwrap();
        let name = ptsname_r(&m).unwrap();
        (m, name)
    }

    #[tokio::test]
    async fn try_read_takes_what_is_there_and_never_waits() {
        let (master, name) = pty();
        let mut dev = Chardev::open(Path::new(&name), false).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(dev.try_read(&mut buf), None, "nothing sent yet");
        nix::unistd::write(&master, b"first").unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), dev.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"first");
        nix::unistd::write(&master, b"second").unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(5);
        let got = loop {
            // The pty hands the bytes to the slave side asynchronously: poll (without waiting in try_read).
            if let Some(n) = dev.try_read(&mut buf) {
                break n;
            }
            assert!(
                std::time::Instant::now() < end,
                "the second write never arrived"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(&buf[..got], b"second");
        assert_eq!(dev.try_read(&mut buf), None, "everything was taken");
    }

    #[tokio::test]
    async fn passes_bytes_both_ways_in_raw_mode() {
        let (master, name) = pty();
        let mut dev = Chardev::open(Path::new(&name), false).unwrap();
        nix::unistd::write(&master, b"{\"execute\":\"guest-ping\"}").unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), dev.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        // Raw mode: no newline needed, no echo.
        assert_eq!(&buf[..n], b"{\"execute\":\"guest-ping\"}");
        dev.write_all(b"{\"return\": {}}\n").await.unwrap();
        let mut out = [0u8; 64];
        let n = nix::unistd::read(&master, &mut out).unwrap();
        assert_eq!(&out[..n], b"{\"return\": {}}\n");
    }

    #[tokio::test]
    async fn idle_peer_costs_no_reads() {
        let (_master, name) = pty();
        let mut dev = Chardev::open(Path::new(&name), false).unwrap();
        let reads = dev.read_counter();
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_millis(1000), dev.read(&mut buf)).await;
        assert!(r.is_err(), "nothing was sent");
        assert!(
            reads.load(Ordering::Relaxed) <= 2,
            "{} reads while idle",
            reads.load(Ordering::Relaxed)
        );
    }

    #[tokio::test]
    async fn hangup_backs_off_instead_of_spinning() {
        let (master, name) = pty();
        let mut dev = Chardev::open(Path::new(&name), false).unwrap();
        drop(master); // The "host" goes away: the slave now reads EIO and polls as HUP forever.
        let reads = dev.read_counter();
        let cpu0 = cpu_time();
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_millis(1500), dev.read(&mut buf)).await;
        assert!(r.is_err(), "read must keep waiting, not fail or return EOF");
        let n = reads.load(Ordering::Relaxed);
        // 100 ms back-off: ~15 reads in 1.5 s; allow slack for a loaded machine but far below a spin.
        assert!((2..=40).contains(&n), "{n} reads in 1.5 s");
        let cpu = cpu_time() - cpu0;
        assert!(
            cpu < Duration::from_millis(500),
            "burned {cpu:?} CPU while the host was absent"
        );
    }

    #[tokio::test]
    async fn write_without_peer_does_not_hang() {
        let (master, name) = pty();
        let mut dev = Chardev::open(Path::new(&name), false).unwrap();
        drop(master);
        tokio::time::timeout(
            Duration::from_secs(10),
            dev.write_all(b"{\"return\": {}}\n"),
        )
        .await
        .unwrap()
        .unwrap();
    }

    #[tokio::test]
    async fn slow_reader_gets_backpressure_not_a_spin() {
        let (master, name) = pty();
        let mut dev = Chardev::open(Path::new(&name), false).unwrap();
        let big = vec![b'x'; 1 << 20];
        let cpu0 = cpu_time();
        // Nobody reads the master: the write must wait (not fail, not spin).
        let r = tokio::time::timeout(Duration::from_millis(1000), dev.write_all(&big)).await;
        assert!(r.is_err(), "1 MiB cannot fit in a pty buffer");
        let cpu = cpu_time() - cpu0;
        assert!(
            cpu < Duration::from_millis(300),
            "burned {cpu:?} CPU waiting for the reader"
        );
        // Now the reader drains: the write completes with every byte delivered.
        let reader = std::thread::spawn(move || {
            let mut got = 0usize;
            let mut buf = vec![0u8; 65536];
            while got < (1 << 20) {
                match nix::unistd::read(&master, &mut buf) {
                    Ok(n) if n > 0 => got += n,
                    Ok(_) => break,
                    Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            got
        });
        tokio::time::timeout(Duration::from_secs(30), dev.write_all(&big))
            .await
            .unwrap()
            .unwrap();
        assert!(reader.join().unwrap() >= 1 << 20);
    }

    #[test]
    fn missing_device_is_an_open_error() {
        assert!(matches!(
            Chardev::open(Path::new("/nonexistent/port"), false),
            Err(TransportError::Open { .. })
        ));
    }

    /// CPU time of the calling thread (the current-thread test runtime runs everything on it), from
    /// /proc/thread-self/stat fields 14 (utime) and 15 (stime), in clock ticks.
    fn cpu_time() -> Duration {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split(' ').collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .unwrap()
            .unwrap() as u64;
        Duration::from_millis(ticks * 1000 / hz)
    }
}

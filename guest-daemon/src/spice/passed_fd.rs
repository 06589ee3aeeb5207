//! Descriptors that session agents pass on the session socket (SCM_RIGHTS): a large clipboard answer comes as a
//! sealed memfd ([`SessionMessage::ClipboardDataFd`](guestlink_protocol::session::SessionMessage)), which the
//! core copies to the port without the bytes crossing the socket or living in the daemon's heap.
//!
//! An agent is a local user's process, so what it passes is checked before use: only a memfd sealed against
//! shrinking and writing, holding at least the announced length (at most [`MAX_CLIPBOARD_FD`]), is accepted —
//! its content cannot change or vanish while the port gets it, and reading it never blocks. Anything else
//! (a FIFO, a FUSE file, a device) is refused without being read, and closed on the closer threads
//! ([`crate::closer`]), because closing some files (a FUSE file's flush, a socket with SO_LINGER) may wait.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use tokio::io::Interest;
use tokio::net::unix::OwnedReadHalf;

use crate::sys;

/// Largest clipboard accepted in a memfd: the session protocol's frame cap.
pub const MAX_CLIPBOARD_FD: u64 = guestlink_protocol::session::MAX_FRAME_BODY as u64;

/// Reads from the agent's connection: the bytes, and any descriptors passed with them.
pub async fn read(rd: &OwnedReadHalf, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let sock = rd.as_ref();
    loop {
        sock.readable().await?;
        match sock.try_io(Interest::READABLE, || {
            sys::recv_with_fds(sock.as_fd(), buf).map_err(io::Error::from)
        }) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Whether `fd` is a memfd sealed so its content cannot change or shrink (F_GET_SEALS fails at once on
/// anything that is not shmem, without touching the file's filesystem).
pub fn is_sealed_memfd(fd: &OwnedFd) -> bool {
    let need = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_WRITE;
    fcntl(fd, FcntlArg::F_GET_SEALS)
        .is_ok_and(|bits| SealFlag::from_bits_truncate(bits).contains(need))
}

/// The clipboard file behind a passed sealed memfd announced to hold `len` bytes.
pub fn clipboard_file(fd: OwnedFd, len: u64) -> Result<File, &'static str> {
    if len > MAX_CLIPBOARD_FD {
        return Err("the clipboard in the memfd is larger than the limit");
    }
    let file = File::from(fd);
    let size = file.metadata().map_err(|_| "cannot stat the memfd")?.len();
    if size < len {
        return Err("the memfd holds less than announced");
    }
    Ok(file)
}

/// Closes descriptors that failed the checks on the closer threads (see the module doc).
pub fn close_in_background(fds: Vec<OwnedFd>) {
    crate::closer::close_fds(fds);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn memfd(content: &[u8], seals: SealFlag) -> OwnedFd {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let fd =
            memfd_create(c"test", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
        let mut f = File::from(fd);
        f.write_all(content).unwrap();
        let fd = OwnedFd::from(f);
        if !seals.is_empty() {
            fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).unwrap();
        }
        fd
    }

    #[test]
    fn only_sealed_memfds_of_the_announced_size_pass() {
        let sealed = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW;
        let good = memfd(b"hello", sealed);
        assert!(is_sealed_memfd(&good));
        let f = clipboard_file(good, 5).unwrap();
        let mut got = [0u8; 5];
        // The sender's writes left the shared offset at the end: the daemon reads by position.
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut got, 0).unwrap();
        assert_eq!(&got, b"hello");

        assert!(!is_sealed_memfd(&memfd(b"hello", SealFlag::empty())));
        assert!(!is_sealed_memfd(&memfd(b"hello", SealFlag::F_SEAL_WRITE)));
        let plain = OwnedFd::from(tempfile_in_tmp());
        assert!(!is_sealed_memfd(&plain));
        let (r, _w) = nix::unistd::pipe().unwrap();
        assert!(!is_sealed_memfd(&r));

        assert!(clipboard_file(memfd(b"hello", sealed), 6).is_err());
        assert!(clipboard_file(memfd(b"hello", sealed), MAX_CLIPBOARD_FD + 1).is_err());
    }

    fn tempfile_in_tmp() -> File {
        let path =
            std::env::temp_dir().join(format!("guestlinkd-passed-fd-{}", std::process::id()));
        let f = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        f
    }
}

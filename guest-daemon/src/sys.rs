//! The only module of guestlinkd with `unsafe`: raw ioctls, `fork`, and adopting inherited file descriptors.
//!
//! Everything here is a thin, documented wrapper so the rest of the daemon stays `#![deny(unsafe_code)]`.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

// FIFREEZE = _IOWR('X', 119, int), FITHAW = _IOWR('X', 120, int) (linux/fs.h).
nix::ioctl_readwrite!(raw_fifreeze, b'X', 119, libc::c_int);
nix::ioctl_readwrite!(raw_fithaw, b'X', 120, libc::c_int);

/// `ioctl(fd, FIFREEZE, 0)`: freeze the filesystem that `fd` (an open directory) lives on.
///
/// Never call this outside the micro-VM tests: it freezes the real filesystem.
pub fn fifreeze(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    let mut arg: libc::c_int = 0;
    // SAFETY: `fd` is a valid open descriptor for the duration of the call (BorrowedFd), and FIFREEZE takes an
    // `int *` that the kernel ignores; `arg` is a live, properly aligned c_int.
    unsafe { raw_fifreeze(fd.as_raw_fd(), &mut arg) }.map(|_| ())
}

/// `ioctl(fd, FITHAW, 0)`: thaw the filesystem that `fd` lives on (one nesting level).
pub fn fithaw(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    let mut arg: libc::c_int = 0;
    // SAFETY: as for `fifreeze`: valid borrowed fd, pointer to a live c_int the kernel ignores.
    unsafe { raw_fithaw(fd.as_raw_fd(), &mut arg) }.map(|_| ())
}

/// Which side of a `fork` we are on.
#[derive(Debug)]
pub enum Forked {
    /// The original process.
    Parent,
    /// The new process.
    Child,
}

/// `fork(2)`. Must only be called while the process is single-threaded (before the tokio runtime starts).
pub fn fork_single_threaded() -> Result<Forked, Errno> {
    // SAFETY: guestlinkd calls this from `main` before any thread (tokio runtime, tracing appender) exists, so the
    // child does not inherit locks held by other threads; the child only performs async-signal-safe set-up
    // (setsid, chdir, dup2) before continuing as the only thread.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { .. } => Ok(Forked::Parent),
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
    }
}

/// Take ownership of an inherited descriptor (systemd socket activation passes fd 3, `SD_LISTEN_FDS_START`).
///
/// Returns `None` when `fd` is not open in this process.
pub fn adopt_inherited_fd(fd: RawFd) -> Option<OwnedFd> {
    // F_GETFD on a closed fd fails with EBADF: this checks the descriptor exists before we claim it.
    nix::fcntl::fcntl(
        // SAFETY: the BorrowedFd is only used for this single fcntl call while `fd` may or may not be open; fcntl
        // on a closed descriptor just returns EBADF.
        unsafe { BorrowedFd::borrow_raw(fd) },
        nix::fcntl::FcntlArg::F_GETFD,
    )
    .ok()?;
    // SAFETY: the descriptor is open (checked above) and was handed to us by the service manager
    // (LISTEN_PID matched our pid); nothing else in this process owns it, so taking ownership is sound.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `accept4(listener, SOCK_NONBLOCK|SOCK_CLOEXEC)` returning an owned descriptor (used for vsock, which std and
/// tokio do not wrap).
pub fn accept_nonblocking(listener: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    use nix::sys::socket::SockFlag;
    let fd = nix::sys::socket::accept4(
        listener.as_raw_fd(),
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
    )?;
    // SAFETY: accept4 just returned this new descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Descriptor owners whose fd stays the same open descriptor for their whole life (so registering them with the
/// reactor is sound).
pub trait OwnsFd: AsRawFd {}
impl OwnsFd for OwnedFd {}
impl OwnsFd for std::os::unix::net::UnixListener {}

/// Register an fd owner with tokio's reactor (`AsyncFd::register`, which is `unsafe` since tokio 1.54).
pub fn async_fd<T: OwnsFd>(inner: T) -> std::io::Result<tokio::io::unix::AsyncFd<T>> {
    // SAFETY: `T: OwnsFd` is only implemented for types that own their descriptor (OwnedFd, UnixListener): it
    // is valid and open for the owner's lifetime, always the same fd, and closed only when the AsyncFd (which owns
    // the owner) drops it.
    unsafe { tokio::io::unix::AsyncFd::register(inner) }.map_err(std::io::Error::from)
}

// ---- FITRIM, for commands/fstrim.rs (guest-fstrim); added by the commands owner ----

/// `struct fstrim_range` (linux/fs.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FstrimRange {
    /// First byte to trim.
    pub start: u64,
    /// Bytes to trim; on return, bytes trimmed.
    pub len: u64,
    /// Minimum extent length; on return, the value the filesystem used.
    pub minlen: u64,
}

// FITRIM = _IOWR('X', 121, struct fstrim_range) (linux/fs.h).
nix::ioctl_readwrite!(raw_fitrim, b'X', 121, FstrimRange);

/// `ioctl(fd, FITRIM, range)` on an open directory of the filesystem. Never call this outside the micro-VM tests.
pub fn fitrim(fd: BorrowedFd<'_>, range: &mut FstrimRange) -> Result<(), Errno> {
    // SAFETY: `fd` is a valid open descriptor for the duration of the borrow, and `range` is an exclusive
    // reference to a properly laid out `struct fstrim_range` that the kernel reads and writes back.
    unsafe { raw_fitrim(fd.as_raw_fd(), range) }.map(drop)
}

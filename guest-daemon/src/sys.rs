//! The only module of guestlinkd with `unsafe`: raw ioctls, `fork`, adopting inherited file descriptors, tokio
//! reactor registration, pidfds, `recvmsg` with passed descriptors, and the exported C symbol `pow`.
//!
//! Everything here is a thin, documented wrapper; the workspace lints deny `unsafe_code` everywhere else.
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

// ---- pidfds, for spice/peer.rs (peer checks, docs/protocol/desktop.md#checking-a-session-socket-peer) ----

/// `SO_PEERPIDFD` (Linux ≥ 6.5, asm-generic/socket.h; not in the libc crate yet). sparc uses its own numbering.
#[cfg(not(target_arch = "sparc64"))]
const SO_PEERPIDFD: libc::c_int = 77;
#[cfg(target_arch = "sparc64")]
const SO_PEERPIDFD: libc::c_int = 0x0056;

/// `getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD)`: a pidfd (O_CLOEXEC) for the process that was the peer when the
/// connection was made. `ENOPROTOOPT` on kernels older than 6.5; `EINVAL`/`ESRCH` when the peer process is gone.
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    let mut fd: libc::c_int = -1;
    let mut len =
        libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: `sock` is a valid descriptor for the borrow; `fd` is a live, aligned c_int and `len` holds its size,
    // which is exactly what the kernel writes for SO_PEERPIDFD (one int).
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            std::ptr::addr_of_mut!(fd).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    if fd < 0 {
        return Err(Errno::EBADF);
    }
    // SAFETY: the kernel just installed `fd` in our descriptor table for us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pidfd_open(pid, 0)` (Linux ≥ 5.3): a pidfd (O_CLOEXEC) for whatever process has `pid` now. `ENOSYS` on older
/// kernels, `ESRCH` if no such process.
pub fn pidfd_open(pid: u32) -> Result<OwnedFd, Errno> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| Errno::EINVAL)?;
    let flags: libc::c_uint = 0;
    // SAFETY: pidfd_open(pid_t pid, unsigned int flags) takes two integers and no pointers.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    if r < 0 {
        return Err(Errno::last());
    }
    let fd = RawFd::try_from(r).map_err(|_| Errno::EBADF)?;
    // SAFETY: the syscall just returned this new descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pidfd_send_signal(pidfd, 0, NULL, 0)`: `Ok` while the process the pidfd refers to exists (signal 0 delivers
/// nothing, it only checks existence and permission); `ESRCH` once it has exited (and been reaped).
pub fn pidfd_signal0(pidfd: BorrowedFd<'_>) -> Result<(), Errno> {
    let (sig, flags): (libc::c_int, libc::c_uint) = (0, 0);
    // SAFETY: pidfd_send_signal(int pidfd, int sig, siginfo_t *info, unsigned int flags): `pidfd` is valid for the
    // borrow, a NULL `info` is allowed (the kernel then fills a default siginfo), and signal 0 sends nothing.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            flags,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Most descriptors one `recvmsg` can return: the kernel's SCM_MAX_FD. A unix stream read never returns the
/// descriptors of more than one send, so a control buffer this large is only truncated when the kernel cannot
/// install them all (the process is at its descriptor limit): then it installs what it can and sets MSG_CTRUNC.
const SCM_MAX_FD: usize = 253;

/// `recvmsg(2)` on a unix stream socket: the bytes read into `buf` and the descriptors passed with them
/// (SCM_RIGHTS, received O_CLOEXEC), each owned so it is closed when dropped. The control data is parsed here, not
/// by nix (whose parser gives up on MSG_CTRUNC), so every descriptor the kernel installed is owned and closed,
/// also when the control data was truncated or holds something unexpected.
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>), Errno> {
    const INT: usize = std::mem::size_of::<libc::c_int>();
    let payload = u32::try_from(SCM_MAX_FD * INT).map_err(|_| Errno::EINVAL)?;
    // SAFETY: CMSG_SPACE only computes a size from its argument.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    // u64 elements: the control buffer must be aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast::<libc::c_void>(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is a plain C struct for which all-zero bytes is a valid value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast::<libc::c_void>();
    msg.msg_controllen = control.len() * 8;
    // SAFETY: `sock` is a valid descriptor for the borrow; `msg` points to one iovec describing `buf` (live and
    // writable for its length) and to `control` (live, aligned, `msg_controllen` bytes); all outlive the call.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(Errno::last());
    }
    let mut fds = Vec::new();
    let base = control.as_ptr() as usize;
    // The kernel updated msg_controllen to the bytes it wrote; never read beyond the buffer whatever it says.
    let end = base + msg.msg_controllen.min(control.len() * 8);
    // SAFETY: `msg` describes `control` as filled by the kernel; CMSG_FIRSTHDR returns null or a pointer into it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: `c` is non-null and points at a cmsghdr inside `control` (CMSG_FIRSTHDR/CMSG_NXTHDR check that
        // the header fits within msg_controllen), which is aligned for cmsghdr.
        let hdr = unsafe { &*c };
        // SAFETY: CMSG_DATA only offsets `c` by the aligned header size.
        let data = unsafe { libc::CMSG_DATA(c) } as usize;
        let cmsg_end = (c as usize).saturating_add(hdr.cmsg_len as usize).min(end);
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            let count = cmsg_end.saturating_sub(data) / INT;
            for i in 0..count {
                // SAFETY: `data + i * INT + INT <= cmsg_end <= end`, inside `control`; read_unaligned makes no
                // alignment assumption.
                let fd =
                    unsafe { std::ptr::read_unaligned((data + i * INT) as *const libc::c_int) };
                if fd >= 0 {
                    // SAFETY: the kernel just installed `fd` in our descriptor table as part of this recvmsg;
                    // nothing else refers to it, so taking ownership (and closing it on drop) is sound.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        // SAFETY: `msg` and `c` are as above; CMSG_NXTHDR returns null at the end of the control data.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        tracing::debug!(
            received = fds.len(),
            "passed descriptors truncated (MSG_CTRUNC): the process is near its descriptor limit"
        );
    }
    let n = usize::try_from(n).map_err(|_| Errno::EINVAL)?;
    Ok((n, fds))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (guestlinkd never uses `select`, so large fd numbers are
/// fine). Returns the limit now in force.
pub fn raise_nofile_limit() -> Result<u64, Errno> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `struct rlimit` to a live, properly aligned value.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(Errno::last());
    }
    if r.rlim_cur < r.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: setrlimit reads one `struct rlimit` from a live value.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(Errno::last());
        }
        r = raised;
    }
    Ok(r.rlim_cur)
}

// ---- pow, so that guestlinkd does not load libm.so.6 (docs/BENCHMARKS.md, "Idle RSS, step 4") ----

/// `pow(3)`, defined in guestlinkd itself with the `libm` crate (a Rust port of musl's), so that the binary does not
/// need libm.so.6. Its one libm call is in tokio's multi-thread scheduler statistics, which are linked because
/// zbus's `tokio` feature turns on `rt-multi-thread` but never run (guestlinkd's runtimes are current-thread);
/// loading libm for it cost ~250 kB of idle RSS. The linker binds that reference to this definition, and with no
/// libm symbol left it drops libm from the binary's `DT_NEEDED` (rustc links with `--as-needed`).
// SAFETY: `no_mangle` exports this function as the C symbol `pow`; nothing else in the binary defines that symbol,
// and the function has pow(3)'s C signature and semantics (IEEE 754 double in, double out, no errno).
#[unsafe(no_mangle)]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn passed_descriptors_are_all_owned_and_closed() {
        use nix::sys::socket::{
            sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
        };
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let raw: Vec<RawFd> = vec![null.as_raw_fd(); SCM_MAX_FD];
        let iov = [std::io::IoSlice::new(b"x")];
        sendmsg::<()>(
            a.as_raw_fd(),
            &iov,
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let mut buf = [0u8; 8];
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((n, fds.len()), (1, SCM_MAX_FD));
        // Each is a new descriptor of /dev/null (the kernel installed them; they are closed on drop).
        for fd in &fds {
            assert_ne!(fd.as_raw_fd(), null.as_raw_fd());
            let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
            assert_eq!(link, std::path::Path::new("/dev/null"));
        }
        assert_eq!(
            recv_with_fds(b.as_fd(), &mut buf).unwrap_err(),
            Errno::EAGAIN
        );
    }

    #[test]
    fn pow_is_correct_and_does_not_recurse() {
        // Called through the exported symbol's Rust name and through f64::powf, which LLVM lowers to a call of the
        // C symbol `pow`, i.e. this definition in this binary (a recursion would overflow the stack here).
        assert_eq!(super::pow(2.0, 10.0), 1024.0);
        assert_eq!(super::pow(9.0, 0.5), 3.0);
        assert!(super::pow(-1.0, 0.5).is_nan());
        let y = std::hint::black_box(0.3_f64);
        assert!((std::hint::black_box(1.7_f64).powf(y) - 1.172_558_924_272_542).abs() < 1e-14);
    }
}

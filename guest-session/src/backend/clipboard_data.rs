//! Clipboard data held in a memfd: how a large answer from a guest application travels to guestlinkd without a
//! copy on the socket (the X11 INCR path fills one as chunks arrive; `crate::outgoing` seals it and passes the
//! descriptor).

use std::fs::File;
use std::sync::Arc;

/// Clipboard data in a memfd filled by a backend ([`super::DesktopEvent::ClipboardFile`]); equal when it is the
/// same file.
#[derive(Debug, Clone)]
pub struct ClipboardMemfd {
    /// The memfd, written from offset 0.
    pub file: Arc<File>,
    /// Bytes written.
    pub len: usize,
}

impl PartialEq for ClipboardMemfd {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file) && self.len == other.len
    }
}

impl Eq for ClipboardMemfd {}

impl ClipboardMemfd {
    /// A new, empty memfd that can be sealed once filled.
    pub fn create_file() -> std::io::Result<File> {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let fd = memfd_create(
            c"guestlink-clipboard",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )?;
        Ok(File::from(fd))
    }

    /// A memfd holding `data`.
    pub fn from_bytes(data: &[u8]) -> std::io::Result<Self> {
        use std::io::Write;
        let mut file = Self::create_file()?;
        file.write_all(data)?;
        Ok(Self {
            file: Arc::new(file),
            len: data.len(),
        })
    }

    /// Seals the memfd against any change (what guestlinkd checks before reading it) and returns a descriptor
    /// of it to pass.
    pub fn seal_and_share(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use std::os::fd::AsFd;
        let seals = SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_WRITE
            | SealFlag::F_SEAL_SEAL;
        fcntl(&*self.file, FcntlArg::F_ADD_SEALS(seals))?;
        self.file.as_fd().try_clone_to_owned()
    }
}

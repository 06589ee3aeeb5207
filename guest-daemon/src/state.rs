//! The state directory (`-t`, default `/var/run`): the frozen marker `qga.state.isfrozen` that survives a daemon
//! restart. (`qga.state`, the file-handle counter, belongs to the file commands.)

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// File name of the frozen marker, qemu-ga's.
pub const ISFROZEN_NAME: &str = "qga.state.isfrozen";

/// The daemon's state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// The state directory at `dir` (not created: like qemu-ga on POSIX, it must exist).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StateDir { dir: dir.into() }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `<statedir>/qga.state.isfrozen`.
    pub fn isfrozen_path(&self) -> PathBuf {
        self.dir.join(ISFROZEN_NAME)
    }

    /// Whether a previous instance left the frozen marker. Errors other than "absent" are returned (qemu-ga
    /// refuses to start when it cannot tell).
    pub fn is_marked_frozen(&self) -> io::Result<bool> {
        match std::fs::symlink_metadata(self.isfrozen_path()) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Create the marker (mode 0600), before the first FIFREEZE.
    pub fn mark_frozen(&self) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(self.isfrozen_path())
            .map(drop)
    }

    /// Delete the marker after the thaw (absent is fine).
    pub fn clear_frozen(&self) -> io::Result<()> {
        match std::fs::remove_file(self.isfrozen_path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn marker_lifecycle() {
        let dir = tempfile::tempdir().unwrap();
        let st = StateDir::new(dir.path());
        assert!(!st.is_marked_frozen().unwrap());
        st.mark_frozen().unwrap();
        assert!(st.is_marked_frozen().unwrap());
        let mode = std::fs::metadata(st.isfrozen_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777 & !0o600, 0);
        st.mark_frozen().unwrap();
        st.clear_frozen().unwrap();
        assert!(!st.is_marked_frozen().unwrap());
        st.clear_frozen().unwrap();
    }
}

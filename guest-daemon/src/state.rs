//! The state directory (`-t`, default `/var/run`): the frozen marker `qga.state.isfrozen` that survives a daemon
//! restart, and [`write_atomic`], how files there are replaced. (`qga.state`, the file-handle counter, belongs to
//! the file commands.)

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Replaces `path` atomically with `contents`: a new temp file `.<name>.<16 random hex digits>` in the same
/// directory, created with `O_CREAT|O_EXCL|O_NOFOLLOW` and `mode`, synced, then renamed over `path`.
///
/// The random name and `O_EXCL` mean nothing planted in the directory beforehand (a symlink to some other file,
/// a file the attacker keeps open) is ever opened or followed: `O_EXCL` fails on any existing entry, dangling
/// symlinks included, and a collision just picks another name.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut attempts = 0;
    let (tmp, mut f) = loop {
        let tmp = dir.join(format!(".{name}.{:016x}", random_u64()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 16 => attempts += 1,
            Err(e) => return Err(e),
        }
    };
    let res = f
        .write_all(contents)
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// 64 bits from the kernel's random pool (`/dev/urandom`), falling back to std's per-process random hash keys.
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    let from_kernel = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    match from_kernel {
        Ok(()) => u64::from_ne_bytes(b),
        Err(_) => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            h.finish()
        }
    }
}

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
    fn write_atomic_never_follows_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let path = dir.path().join("qga.state");
        // The old code's temp name was `.qga.state.<pid>.tmp`: plant symlinks there and at a few guesses.
        for n in [
            format!(".qga.state.{}.tmp", std::process::id()),
            ".qga.state.tmp".to_owned(),
        ] {
            std::os::unix::fs::symlink(&victim, dir.path().join(n)).unwrap();
        }
        write_atomic(&path, b"[global]\nfd_counter=1001\n", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"[global]\nfd_counter=1001\n"
        );
        // Only the result and the planted links remain: no temp file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    }

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

//! Single-instance guard: an exclusive `flock` on `$XDG_RUNTIME_DIR/guestlink-session-<display>.lock`, held for
//! the life of the process, so one user never runs two agents on the same display.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};

/// The held lock (released when dropped or when the process exits).
#[derive(Debug)]
pub struct InstanceLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl InstanceLock {
    /// The lock file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// The display part of the lock name: `$DISPLAY`, else `$WAYLAND_DISPLAY`, else "none", made file-name safe.
fn display_tag() -> String {
    let d = std::env::var("DISPLAY")
        .ok()
        .filter(|d| !d.is_empty())
        .map(|d| format!("x11{d}"))
        .or_else(|| {
            std::env::var("WAYLAND_DISPLAY")
                .ok()
                .filter(|d| !d.is_empty())
                .map(|d| format!("wl-{d}"))
        })
        .unwrap_or_else(|| "none".into());
    d.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The lock path for this user and display.
pub fn lock_path() -> PathBuf {
    let name = format!("guestlink-session-{}.lock", display_tag());
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join(name),
        None => std::env::temp_dir().join(format!("{}-{name}", nix::unistd::getuid())),
    }
}

/// Takes the lock; `Ok(None)` when another instance holds it.
pub fn acquire() -> Result<Option<InstanceLock>> {
    let path = lock_path();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .with_context(|| format!("lock file {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(InstanceLock { _lock: lock, path })),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(e).with_context(|| format!("flock {}", path.display())),
    }
}

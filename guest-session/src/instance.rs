//! Single-instance guard: an exclusive `flock` on `<runtime dir>/guestlink-session-<display>.lock`, held for the
//! life of the process, so one user never runs two agents on the same display.
//!
//! The runtime directory is `$XDG_RUNTIME_DIR`, else `/run/user/<uid>` when it exists, and it must be private to
//! this user: a real directory (not a symlink), owned by our uid, with no group or other permission bits. There is
//! deliberately no fallback to a shared directory such as `/tmp`: another user can create (and hold) any name
//! there, and so stop this user's agent from ever starting. Without a private directory the agent refuses to
//! start and says why.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};

/// The held lock (released when dropped or when the process exits).
#[derive(Debug)]
pub struct InstanceLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl InstanceLock {
    /// The lock file's path.
    pub fn path(&self) -> &Path {
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

/// Why `dir` cannot hold this user's lock, or `None` when it is private to `uid`.
fn unsafe_reason(dir: &Path, uid: u32) -> Option<String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot stat it: {e}")),
    };
    if meta.file_type().is_symlink() {
        return Some("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Some("it is not a directory".into());
    }
    if meta.uid() != uid {
        return Some(format!(
            "it is owned by uid {}, not by uid {uid}",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Some(format!(
            "its mode is {:04o}: other users have access (0700 expected)",
            meta.mode() & 0o7777
        ));
    }
    None
}

/// The private runtime directory of `uid`: `xdg` (the value of `$XDG_RUNTIME_DIR`) when set, else `per_user`
/// (`/run/user/<uid>`) when it exists. Errors say why no safe directory was found.
fn runtime_dir(xdg: Option<PathBuf>, per_user: &Path, uid: u32) -> Result<PathBuf> {
    if let Some(dir) = xdg {
        if let Some(why) = unsafe_reason(&dir, uid) {
            bail!(
                "XDG_RUNTIME_DIR={} is not safe for the instance lock: {why}",
                dir.display()
            );
        }
        return Ok(dir);
    }
    if std::fs::symlink_metadata(per_user).is_ok() {
        if let Some(why) = unsafe_reason(per_user, uid) {
            bail!(
                "XDG_RUNTIME_DIR is not set and {} is not safe for the instance lock: {why}",
                per_user.display()
            );
        }
        return Ok(per_user.to_owned());
    }
    bail!(
        "no safe directory for the instance lock: XDG_RUNTIME_DIR is not set and {} does not exist \
         (start guestlink-session inside a login session, where pam_systemd provides it, or set \
         XDG_RUNTIME_DIR to a directory owned by uid {uid} with mode 0700)",
        per_user.display()
    )
}

/// The lock path for this user and display.
pub fn lock_path() -> Result<PathBuf> {
    let uid = nix::unistd::getuid().as_raw();
    let xdg = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    let dir = runtime_dir(xdg, &PathBuf::from(format!("/run/user/{uid}")), uid)?;
    Ok(dir.join(format!("guestlink-session-{}.lock", display_tag())))
}

/// Takes the lock; `Ok(None)` when another instance holds it.
pub fn acquire() -> Result<Option<InstanceLock>> {
    let path = lock_path()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn runtime_dir_must_be_private() {
        let me = nix::unistd::getuid().as_raw();
        let t = tempfile::tempdir().unwrap();
        let private = t.path().join("private");
        std::fs::create_dir(&private).unwrap();
        chmod(&private, 0o700);
        let missing = t.path().join("missing");
        assert_eq!(
            runtime_dir(Some(private.clone()), &missing, me).unwrap(),
            private
        );
        // /run/user/<uid> is used when XDG_RUNTIME_DIR is not set.
        assert_eq!(runtime_dir(None, &private, me).unwrap(), private);

        let shared = t.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        chmod(&shared, 0o1777);
        let e = runtime_dir(Some(shared.clone()), &missing, me).unwrap_err();
        assert!(e.to_string().contains("mode is 1777"), "{e}");
        let e = runtime_dir(None, &shared, me).unwrap_err();
        assert!(e.to_string().contains("not safe"), "{e}");

        let link = t.path().join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        let e = runtime_dir(Some(link), &missing, me).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");

        let e = runtime_dir(Some(private.clone()), &missing, me.wrapping_add(1)).unwrap_err();
        assert!(e.to_string().contains("owned by uid"), "{e}");

        let e = runtime_dir(None, &missing, me).unwrap_err().to_string();
        assert!(e.contains("no safe directory"), "{e}");
    }
}

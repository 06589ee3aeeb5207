//! `-d/--daemonize` (qemu-ga's `become_daemon`): fork, the parent exits, the child writes the (locked) pid file,
//! sets umask 077, starts a new session, changes to `/` and points stdio at /dev/null. Must run before the tokio
//! runtime exists. Also the pid file itself, which is deferred while the filesystems are frozen.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Mutex, OnceLock};

use anyhow::{bail, Context, Result};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::stat::{umask, Mode};

use crate::sys::{fork_single_threaded, Forked};

/// A written pid file: its path and the lock that keeps other instances out.
type LockedPidfile = (String, Flock<File>);

/// The locked pid file, held for the life of the process.
static PIDFILE: OnceLock<Mutex<Option<LockedPidfile>>> = OnceLock::new();

/// Create, lock and fill the pid file (fails if another instance holds the lock).
pub fn write_pidfile(path: &str) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("failed to open pid file {path}"))?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((_, e)) => bail!("cannot lock pid file {path}: {e} (another instance running?)"),
    };
    lock.set_len(0).context("truncating pid file")?;
    writeln!(lock, "{}", std::process::id()).context("writing pid file")?;
    let slot = PIDFILE.get_or_init(|| Mutex::new(None));
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((path.to_owned(), lock));
    Ok(())
}

/// Remove the pid file at exit (qemu-ga does the same).
pub fn remove_pidfile() {
    if let Some(slot) = PIDFILE.get() {
        if let Some((path, _lock)) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Become a daemon. `pidfile` is `None` when its creation is deferred (started frozen).
pub fn daemonize(pidfile: Option<&str>) -> Result<()> {
    match fork_single_threaded().context("fork")? {
        Forked::Parent => std::process::exit(0),
        Forked::Child => {}
    }
    if let Some(p) = pidfile {
        write_pidfile(p)?;
    }
    umask(Mode::from_bits_truncate(0o077));
    nix::unistd::setsid().context("setsid")?;
    nix::unistd::chdir("/").context("chdir /")?;
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .context("/dev/null")?;
    nix::unistd::dup2_stdin(&null).context("dup2 stdin")?;
    nix::unistd::dup2_stdout(&null).context("dup2 stdout")?;
    nix::unistd::dup2_stderr(&null).context("dup2 stderr")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pidfile_written_and_locked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pid");
        let ps = p.to_str().unwrap();
        write_pidfile(ps).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap().trim(),
            std::process::id().to_string()
        );
        // A second lock on the same file fails (flock locks are per open file description).
        let f = File::open(&p).unwrap();
        assert!(Flock::lock(f, FlockArg::LockExclusiveNonblock).is_err());
        remove_pidfile();
        assert!(!p.exists());
    }
}

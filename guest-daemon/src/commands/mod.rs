//! The QGA command handlers of `guestlinkd` (everything except sync/ping/info/fsfreeze and the policy, which live
//! in the dispatch core).
//!
//! Entry points for the core: [`Services::new`] once at start-up, then [`Services::execute`] per command; errors map
//! to the wire with [`CommandError::to_qga`].
#![forbid(unsafe_code)]

pub mod cpu_mem;
pub mod error;
pub mod exec;
pub mod file;
pub mod network;
pub mod osinfo;
pub mod power;
mod run;
pub mod ssh;
pub mod system;
pub mod users;

use std::path::PathBuf;
use std::time::Duration;

pub use error::{CommandError, CommandResult};

/// Limits of guest-exec.
#[derive(Debug, Clone)]
pub struct ExecLimits {
    /// Captured bytes kept per stream (qemu-ga: 16 MiB); the rest is read and dropped, `*-truncated` is set.
    pub max_output: usize,
    /// Most exec records kept at once (running or finished but not yet collected); guest-exec fails beyond it.
    pub max_records: usize,
    /// A finished process whose status nobody fetched is forgotten after this long.
    pub expire_after: Duration,
}

impl Default for ExecLimits {
    fn default() -> Self {
        ExecLimits {
            max_output: 16 * 1024 * 1024,
            max_records: 256,
            expire_after: Duration::from_secs(3600),
        }
    }
}

/// Paths of the helper programs the state-changing commands run (injectable for tests).
#[derive(Debug, Clone)]
pub struct Tools {
    /// `/sbin/shutdown`.
    pub shutdown: PathBuf,
    /// `/sbin/poweroff`, used with `-f` when shutdown is missing (busybox initramfs).
    pub poweroff: PathBuf,
    /// `/sbin/halt`.
    pub halt: PathBuf,
    /// `/sbin/reboot`.
    pub reboot: PathBuf,
    /// `/sbin/hwclock`.
    pub hwclock: PathBuf,
    /// `chpasswd` (searched in PATH like qemu-ga).
    pub chpasswd: PathBuf,
}

impl Default for Tools {
    fn default() -> Self {
        Tools {
            shutdown: "/sbin/shutdown".into(),
            poweroff: "/sbin/poweroff".into(),
            halt: "/sbin/halt".into(),
            reboot: "/sbin/reboot".into(),
            hwclock: "/sbin/hwclock".into(),
            chpasswd: "chpasswd".into(),
        }
    }
}

/// Configuration of the command handlers.
#[derive(Debug, Clone)]
pub struct ServicesConfig {
    /// qemu-ga's statedir (`-t`): holds `qga.state` with the file-handle counter.
    pub statedir: PathBuf,
    /// Mode of files created by guest-file-open (default 0o600; qemu-ga uses 0o666).
    pub file_mode: u32,
    /// guest-exec limits.
    pub exec: ExecLimits,
    /// Helper programs.
    pub tools: Tools,
    /// Root of procfs (`/proc`), for tests.
    pub proc_root: PathBuf,
    /// Root of sysfs (`/sys`), for tests.
    pub sys_root: PathBuf,
}

impl Default for ServicesConfig {
    fn default() -> Self {
        ServicesConfig {
            statedir: "/var/run".into(),
            file_mode: 0o600,
            exec: ExecLimits::default(),
            tools: Tools::default(),
            proc_root: "/proc".into(),
            sys_root: "/sys".into(),
        }
    }
}

/// The command handlers and their state (open files, exec records).
#[derive(Debug)]
pub struct Services {
    cfg: ServicesConfig,
}

impl Services {
    /// Creates the handlers; loads the handle counter from `<statedir>/qga.state`.
    pub fn new(cfg: ServicesConfig) -> Result<Services, CommandError> {
        Ok(Services { cfg })
    }

    /// The configuration in use.
    pub fn config(&self) -> &ServicesConfig {
        &self.cfg
    }
}

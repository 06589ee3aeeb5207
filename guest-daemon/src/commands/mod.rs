//! The QGA command handlers of `guestlinkd` (everything except sync/ping/info/fsfreeze and the policy, which live
//! in the dispatch core).
//!
//! Entry points for the core: [`Services::new`] once at start-up; then the dispatch core calls one method of the
//! schema's `Handlers` trait per command ([`handlers`]), which returns the core's one output type
//! (`server::output::Output`); errors map to the wire with `QgaError::from(CommandError)`.

pub mod cpu_mem;
pub mod disks;
pub mod error;
pub mod exec;
pub mod file;
pub mod file_read;
pub mod fsinfo;
pub mod fstrim;
mod handlers;
pub mod network;
pub mod osinfo;
pub mod posix_tz;
pub mod power;
mod run;
pub mod ssh;
pub mod system;
pub mod users;

use std::path::PathBuf;
use std::sync::Arc;
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

/// guest-file-read counts up to this are served on the async thread (page-cache reads of a few µs).
const INLINE_READ_MAX: i64 = 64 * 1024;

/// The command handlers and their state (open files, exec records).
#[derive(Debug)]
pub struct Services {
    cfg: ServicesConfig,
    files: Arc<file::FileTable>,
    exec: exec::ExecTable,
}

/// Runs blocking file-system work off the async threads.
async fn blocking<T, F>(f: F) -> CommandResult<T>
where
    F: FnOnce() -> CommandResult<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(CommandError::generic(format!("internal error: {e}"))))
}

impl Services {
    /// Creates the handlers; loads (or creates) the handle counter in `<statedir>/qga.state`.
    pub fn new(cfg: ServicesConfig) -> Result<Services, CommandError> {
        let files = Arc::new(file::FileTable::new(&cfg.statedir, cfg.file_mode)?);
        let exec = exec::ExecTable::new(cfg.exec.clone());
        Ok(Services { cfg, files, exec })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use guestlink_protocol::qga::schema::*;
    use guestlink_protocol::qga::QgaError;
    use serde_json::{json, Value};

    use crate::server::output::Output;

    /// Stands in for the dispatch core: its commands are not the handlers' business (`CommandNotFound`).
    struct NoCore;

    impl Outcome for NoCore {
        type Output = Output;
        type Error = CommandError;
    }

    fn not_core(name: &str) -> Result<Output, CommandError> {
        Err(QgaError::not_found(name).into())
    }

    impl CoreHandlers for NoCore {
        async fn guest_sync_delimited(&self, _: GuestSyncArgs) -> Result<Output, CommandError> {
            not_core("guest-sync-delimited")
        }
        async fn guest_sync(&self, _: GuestSyncArgs) -> Result<Output, CommandError> {
            not_core("guest-sync")
        }
        async fn guest_ping(&self) -> Result<Output, CommandError> {
            not_core("guest-ping")
        }
        async fn guest_info(&self) -> Result<Output, CommandError> {
            not_core("guest-info")
        }
        async fn guest_fsfreeze_status(&self) -> Result<Output, CommandError> {
            not_core("guest-fsfreeze-status")
        }
        async fn guest_fsfreeze_freeze(&self) -> Result<Output, CommandError> {
            not_core("guest-fsfreeze-freeze")
        }
        async fn guest_fsfreeze_freeze_list(
            &self,
            _: GuestFsfreezeFreezeListArgs,
        ) -> Result<Output, CommandError> {
            not_core("guest-fsfreeze-freeze-list")
        }
        async fn guest_fsfreeze_thaw(&self) -> Result<Output, CommandError> {
            not_core("guest-fsfreeze-thaw")
        }
    }

    fn cmd(name: &str, args: Value) -> Command {
        Command::parse(name, args.as_object()).unwrap()
    }

    /// The return value a reply carries, whether it was a value or streamed (the pieces joined and parsed).
    async fn run(s: &Services, c: Command) -> Result<Value, CommandError> {
        Ok(match c.run(&NoCore, s).await? {
            Output::Value(v) => v,
            Output::Streamed(r) => {
                let (mut line, suffix) = r.reply_parts(None, false);
                for c in r.chunks() {
                    line.extend_from_slice(c.as_bytes());
                }
                line.extend_from_slice(&suffix);
                let mut v: Value = serde_json::from_slice(&line).unwrap();
                v["return"].take()
            }
        })
    }

    fn services(dir: &std::path::Path) -> Services {
        Services::new(ServicesConfig {
            statedir: dir.to_owned(),
            ..ServicesConfig::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn file_round_trip_through_dispatch() {
        let d = tempfile::tempdir().unwrap();
        let s = services(d.path());
        let path = d.path().join("foo");
        let h = run(
            &s,
            cmd("guest-file-open", json!({"path": path, "mode": "w+"})),
        )
        .await
        .unwrap();
        assert_eq!(h, json!(1000));
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"Hello World!\n\0");
        let w = run(
            &s,
            cmd("guest-file-write", json!({"handle": 1000, "buf-b64": b64})),
        )
        .await
        .unwrap();
        assert_eq!(w, json!({"count": 14, "eof": false}));
        let p = run(
            &s,
            cmd(
                "guest-file-seek",
                json!({"handle": 1000, "offset": 6, "whence": "set"}),
            ),
        )
        .await
        .unwrap();
        assert_eq!(p, json!({"position": 6, "eof": false}));
        let r = run(
            &s,
            cmd("guest-file-read", json!({"handle": 1000, "count": 100000})),
        )
        .await
        .unwrap();
        assert_eq!(r["count"], 8);
        assert_eq!(r["eof"], true);
        run(&s, cmd("guest-file-flush", json!({"handle": 1000})))
            .await
            .unwrap();
        run(&s, cmd("guest-file-close", json!({"handle": 1000})))
            .await
            .unwrap();
        let e = run(&s, cmd("guest-file-close", json!({"handle": 1000})))
            .await
            .unwrap_err();
        assert_eq!(QgaError::from(e).desc, "handle '1000' has not been found");
        let e = run(&s, cmd("guest-ping", json!({}))).await.unwrap_err();
        assert_eq!(
            QgaError::from(e).class,
            guestlink_protocol::qga::ErrorClass::CommandNotFound
        );
    }

    #[tokio::test]
    async fn exec_and_info_through_dispatch() {
        let d = tempfile::tempdir().unwrap();
        let s = services(d.path());
        let pid = run(
            &s,
            cmd(
                "guest-exec",
                json!({"path": "/bin/sh", "arg": ["-c", "printf hi"], "capture-output": "merged"}),
            ),
        )
        .await
        .unwrap()["pid"]
            .as_i64()
            .unwrap();
        let start = std::time::Instant::now();
        let st = loop {
            let st = run(&s, cmd("guest-exec-status", json!({"pid": pid})))
                .await
                .unwrap();
            if st["exited"] == true {
                break st;
            }
            assert!(start.elapsed() < Duration::from_secs(60));
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(st["out-data"], "aGk=");
        for name in [
            "guest-get-time",
            "guest-get-host-name",
            "guest-get-timezone",
            "guest-get-osinfo",
            "guest-get-users",
            "guest-get-load",
            "guest-get-cpustats",
            "guest-network-get-interfaces",
            "guest-network-get-route",
            "guest-get-fsinfo",
            "guest-get-disks",
        ] {
            let v = run(&s, cmd(name, json!({}))).await;
            assert!(v.is_ok(), "{name}: {v:?}");
        }
    }
}

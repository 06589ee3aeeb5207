//! The QGA command handlers of `guestlinkd` (everything except sync/ping/info/fsfreeze and the policy, which live
//! in the dispatch core).
//!
//! Entry points for the core: [`Services::new`] once at start-up, then [`Services::execute`] per command, which
//! returns the core's one [`Output`] type; errors map to the wire with `QgaError::from(CommandError)`.
#![forbid(unsafe_code)]

pub mod cpu_mem;
pub mod disks;
pub mod error;
pub mod exec;
pub mod file;
pub mod file_read;
pub mod fsinfo;
pub mod fstrim;
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

use guestlink_protocol::qga::error::QgaError;
use guestlink_protocol::qga::schema::{
    Command, GuestExecCaptureOutputMode, GuestFileWhence, QgaSeek,
};
use serde_json::{json, Map, Value};

pub use error::{CommandError, CommandResult};

use crate::server::dispatch::Backend;
use crate::server::output::Output;

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

    /// Runs one command: its QAPI return value (`{}` for commands without one), or guest-file-read's answer as a
    /// [`Output::Streamed`] reply.
    ///
    /// guest-sync(-delimited), guest-ping, guest-info and guest-fsfreeze-* belong to the core and give
    /// `CommandNotFound` here.
    pub async fn execute(&self, cmd: Command) -> Result<Output, CommandError> {
        let cfg = &self.cfg;
        let proc_root = cfg.proc_root.clone();
        let sys_root = cfg.sys_root.clone();
        let empty = || Value::Object(Map::new());
        let v = match cmd {
            Command::GuestGetTime => json!(system::get_time()),
            Command::GuestGetHostName => system::get_host_name(),
            Command::GuestGetTimezone => system::get_timezone(),
            Command::GuestGetLoad => system::get_load(&proc_root)?,
            Command::GuestGetOsinfo => system_blocking(osinfo::get_osinfo).await?,
            Command::GuestGetUsers => users::get_users(std::path::Path::new("/var/run/utmp"))?,
            Command::GuestGetVcpus => cpu_mem::get_vcpus(&sys_root)?,
            Command::GuestGetMemoryBlocks => cpu_mem::get_memory_blocks(&sys_root)?,
            Command::GuestGetMemoryBlockInfo => cpu_mem::get_memory_block_info(&sys_root)?,
            Command::GuestGetCpustats => cpu_mem::get_cpustats(&proc_root)?,
            Command::GuestGetDiskstats => cpu_mem::get_diskstats(&proc_root)?,
            Command::GuestNetworkGetInterfaces => network::get_interfaces(&proc_root, &sys_root)?,
            Command::GuestNetworkGetRoute => network::get_routes(&proc_root)?,
            Command::GuestGetFsinfo => {
                blocking(move || fsinfo::get_fsinfo(&proc_root, &sys_root)).await?
            }
            Command::GuestGetDisks => blocking(move || disks::get_disks(&sys_root)).await?,
            Command::GuestGetDevices => return Err(CommandError::Unsupported),
            Command::GuestSetTime(a) => {
                let st = system::SetTime {
                    hwclock: cfg.tools.hwclock.clone(),
                };
                st.run(a.time).await?;
                empty()
            }
            Command::GuestShutdown(a) => {
                power::shutdown(&cfg.tools, a.mode.as_deref()).await?;
                empty()
            }
            Command::GuestSuspendDisk => {
                power::suspend(&sys_root, power::SuspendMode::Disk).await?;
                empty()
            }
            Command::GuestSuspendRam => {
                power::suspend(&sys_root, power::SuspendMode::Ram).await?;
                empty()
            }
            Command::GuestSuspendHybrid => {
                power::suspend(&sys_root, power::SuspendMode::Hybrid).await?;
                empty()
            }
            Command::GuestSetVcpus(a) => {
                let list: Vec<(i64, bool)> =
                    a.vcpus.iter().map(|v| (v.logical_id, v.online)).collect();
                json!(cpu_mem::set_vcpus(&sys_root, &list)?)
            }
            Command::GuestSetMemoryBlocks(a) => {
                let list: Vec<(u64, bool)> = a
                    .mem_blks
                    .iter()
                    .map(|b| (b.phys_index, b.online))
                    .collect();
                cpu_mem::set_memory_blocks(&sys_root, &list)
            }
            Command::GuestSetUserPassword(a) => {
                ssh::set_user_password(&cfg.tools.chpasswd, &a.username, &a.password, a.crypted)
                    .await?;
                empty()
            }
            Command::GuestSshGetAuthorizedKeys(a) => {
                blocking(move || ssh::get_keys(&ssh::lookup(&a.username)?)).await?
            }
            Command::GuestSshAddAuthorizedKeys(a) => {
                blocking(move || {
                    // qemu-ga checks the keys before looking the user up.
                    ssh::add_keys(
                        &ssh::lookup_after_key_check(&a.username, &a.keys)?,
                        &a.keys,
                        a.reset.unwrap_or(false),
                    )
                })
                .await?;
                empty()
            }
            Command::GuestSshRemoveAuthorizedKeys(a) => {
                blocking(move || {
                    ssh::remove_keys(&ssh::lookup_after_key_check(&a.username, &a.keys)?, &a.keys)
                })
                .await?;
                empty()
            }
            Command::GuestFstrim(a) => {
                blocking(move || fstrim::fstrim(&proc_root, a.minimum)).await?
            }
            Command::GuestFileOpen(a) => {
                let files = self.files.clone();
                json!(blocking(move || files.open(&a.path, a.mode.as_deref())).await?)
            }
            Command::GuestFileClose(a) => {
                self.files.close(a.handle)?;
                empty()
            }
            Command::GuestFileRead(a) => {
                // Small reads (the 4 KiB default) are cheaper inline than a hop to the blocking pool.
                let r = if a.count.unwrap_or(file::READ_COUNT_DEFAULT) <= INLINE_READ_MAX {
                    self.files.read(a.handle, a.count)?
                } else {
                    let files = self.files.clone();
                    blocking(move || files.read(a.handle, a.count)).await?
                };
                return Ok(Output::Streamed(Box::new(r)));
            }
            Command::GuestFileWrite(a) => {
                let files = self.files.clone();
                let (count, eof) =
                    blocking(move || files.write(a.handle, &a.buf_b64, a.count)).await?;
                json!({ "count": count, "eof": eof })
            }
            Command::GuestFileSeek(a) => {
                let whence = match a.whence {
                    GuestFileWhence::Value(v) => v,
                    GuestFileWhence::Name(QgaSeek::Set) => 0,
                    GuestFileWhence::Name(QgaSeek::Cur) => 1,
                    GuestFileWhence::Name(QgaSeek::End) => 2,
                };
                let files = self.files.clone();
                let (position, eof) =
                    blocking(move || files.seek(a.handle, a.offset, whence)).await?;
                json!({ "position": position, "eof": eof })
            }
            Command::GuestFileFlush(a) => {
                let files = self.files.clone();
                blocking(move || files.flush(a.handle)).await?;
                empty()
            }
            Command::GuestExec(a) => {
                let capture = match a.capture_mode() {
                    GuestExecCaptureOutputMode::None => exec::Capture::None,
                    GuestExecCaptureOutputMode::Stdout => exec::Capture::Stdout,
                    GuestExecCaptureOutputMode::Stderr => exec::Capture::Stderr,
                    GuestExecCaptureOutputMode::Separated => exec::Capture::Separated,
                    GuestExecCaptureOutputMode::Merged => exec::Capture::Merged,
                };
                let req = exec::ExecRequest {
                    path: a.path,
                    args: a.arg.unwrap_or_default(),
                    env: a.env,
                    input_data: a.input_data,
                    capture,
                };
                json!({ "pid": self.exec.spawn(&req)? })
            }
            Command::GuestExecStatus(a) => self.exec.status(a.pid)?,
            Command::GuestlinkExecRead(a) => {
                self.exec
                    .read(a.pid, a.out_offset, a.err_offset, a.wait_ms)
                    .await?
            }
            Command::GuestlinkFileRename(a) => {
                blocking(move || file::rename(&a.from, &a.to)).await?;
                empty()
            }
            Command::GuestlinkFileSha256(a) => blocking(move || file::sha256(&a.path)).await?,
            other @ (Command::GuestPing
            | Command::GuestInfo
            | Command::GuestSync(_)
            | Command::GuestSyncDelimited(_)
            | Command::GuestFsfreezeStatus
            | Command::GuestFsfreezeFreeze
            | Command::GuestFsfreezeFreezeList(_)
            | Command::GuestFsfreezeThaw) => {
                return Err(CommandError::Qga(QgaError::not_found(other.name())));
            }
        };
        Ok(Output::Value(v))
    }
}

impl Backend for Services {
    async fn execute(&self, cmd: Command) -> Result<Output, CommandError> {
        Services::execute(self, cmd).await
    }
}

async fn system_blocking(f: fn() -> Value) -> CommandResult<Value> {
    blocking(move || Ok(f())).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn cmd(name: &str, args: Value) -> Command {
        Command::parse(name, args.as_object()).unwrap()
    }

    /// The return value a reply carries, whether it was a value or streamed (the pieces joined and parsed).
    async fn run(s: &Services, c: Command) -> Result<Value, CommandError> {
        Ok(match s.execute(c).await? {
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
        let h = run(&s, cmd("guest-file-open", json!({"path": path, "mode": "w+"})))
            .await
            .unwrap();
        assert_eq!(h, json!(1000));
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"Hello World!\n\0");
        let w = run(&s, cmd(
                "guest-file-write",
                json!({"handle": 1000, "buf-b64": b64}),
            ))
            .await
            .unwrap();
        assert_eq!(w, json!({"count": 14, "eof": false}));
        let p = run(&s, cmd(
                "guest-file-seek",
                json!({"handle": 1000, "offset": 6, "whence": "set"}),
            ))
            .await
            .unwrap();
        assert_eq!(p, json!({"position": 6, "eof": false}));
        let r = run(&s, cmd(
                "guest-file-read",
                json!({"handle": 1000, "count": 100000}),
            ))
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
        let pid = run(&s, cmd(
                "guest-exec",
                json!({"path": "/bin/sh", "arg": ["-c", "printf hi"], "capture-output": "merged"}),
            ))
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

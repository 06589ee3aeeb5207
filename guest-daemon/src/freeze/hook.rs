//! Running the fsfreeze hook (`/etc/qemu/fsfreeze-hook freeze|thaw`), compatible with qemu-ga's
//! `execute_fsfreeze_hook` but with a timeout: the hook runs in its own process group, stdin is /dev/null, its
//! stdout/stderr are captured (bounded) into our log, and on timeout the whole group is killed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::{access, AccessFlags, Pid};
use thiserror::Error;
use tokio::io::AsyncReadExt;

/// Bytes of hook output kept per stream for the log.
const OUTPUT_CAP: usize = 64 * 1024;

/// The hook and its limits.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The executable.
    pub path: PathBuf,
    /// Kill the hook after this long (`None` = wait forever, like qemu-ga).
    pub timeout: Option<Duration>,
}

/// Why a hook run failed. The texts of the first three are qemu-ga's.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HookError {
    /// `access(X_OK)` failed.
    #[error("can't access fsfreeze hook '{path}': {reason}")]
    Access {
        /// The hook path.
        path: String,
        /// Why (strerror text).
        reason: String,
    },
    /// Killed by a signal.
    #[error("fsfreeze hook has terminated abnormally")]
    Abnormal,
    /// Non-zero exit status.
    #[error("fsfreeze hook has failed with status {0}")]
    Status(i32),
    /// The timeout elapsed; the process group was killed.
    #[error("fsfreeze hook has timed out after {0} seconds and was killed")]
    Timeout(u64),
    /// The hook could not be started.
    #[error("failed to run fsfreeze hook: {0}")]
    Spawn(String),
}

async fn capture<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    kept
}

fn log_output(path: &Path, arg: &str, stream: &str, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        tracing::info!(hook = %path.display(), action = arg, stream, "{line}");
    }
}

impl Hook {
    /// Run `hook <arg>` (arg is `freeze` or `thaw`) and wait for it, within the timeout.
    pub async fn run(&self, arg: &str) -> Result<(), HookError> {
        let path = &self.path;
        access(path.as_path(), AccessFlags::X_OK).map_err(|errno| HookError::Access {
            path: path.display().to_string(),
            reason: super::strerror(errno),
        })?;
        tracing::info!(hook = %path.display(), action = arg, "running fsfreeze hook");
        let mut child = tokio::process::Command::new(path)
            .arg(arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| HookError::Spawn(e.to_string()))?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        let out = child.stdout.take().map(|s| tokio::spawn(capture(s)));
        let err = child.stderr.take().map(|s| tokio::spawn(capture(s)));

        let waited = match self.timeout {
            Some(t) => tokio::time::timeout(t, child.wait()).await.ok(),
            None => Some(child.wait().await),
        };
        let result = match waited {
            None => {
                if let Some(pgid) = pgid {
                    // The hook leads its own group (process_group(0)): kill it and everything it started.
                    let _ = killpg(pgid, Signal::SIGKILL);
                }
                let _ = child.wait().await;
                Err(HookError::Timeout(self.timeout.map_or(0, |t| t.as_secs())))
            }
            Some(Err(e)) => Err(HookError::Spawn(e.to_string())),
            Some(Ok(status)) => match status.code() {
                Some(0) => Ok(()),
                Some(n) => Err(HookError::Status(n)),
                None => Err(HookError::Abnormal),
            },
        };
        // A grandchild that escaped the group may keep the pipes open: don't wait on it for long.
        for (stream, task) in [("stdout", out), ("stderr", err)] {
            if let Some(task) = task {
                match tokio::time::timeout(Duration::from_secs(1), task).await {
                    Ok(Ok(data)) => log_output(path, arg, stream, &data),
                    Ok(Err(_)) => {}
                    Err(_) => {
                        tracing::warn!(hook = %path.display(), "hook {stream} still open after exit");
                    }
                }
            }
        }
        match &result {
            Ok(()) => {
                tracing::info!(hook = %path.display(), action = arg, "fsfreeze hook succeeded");
            }
            Err(e) => tracing::warn!(hook = %path.display(), action = arg, "{e}"),
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[tokio::test]
    async fn success_passes_the_action() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let p = script(
            &dir,
            "ok",
            &format!("echo \"$1\" >> '{}'; echo hello", log.display()),
        );
        let hook = Hook {
            path: p,
            timeout: Some(Duration::from_secs(30)),
        };
        hook.run("freeze").await.unwrap();
        hook.run("thaw").await.unwrap();
        assert_eq!(std::fs::read_to_string(log).unwrap(), "freeze\nthaw\n");
    }

    #[tokio::test]
    async fn failure_reports_the_status() {
        let dir = tempfile::tempdir().unwrap();
        let p = script(&dir, "fail", "echo oops >&2; exit 3");
        let hook = Hook {
            path: p,
            timeout: None,
        };
        let e = hook.run("freeze").await.unwrap_err();
        assert_eq!(e, HookError::Status(3));
        assert_eq!(e.to_string(), "fsfreeze hook has failed with status 3");
    }

    #[tokio::test]
    async fn timeout_kills_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        // The hook starts a background grandchild (same group) and hangs.
        let p = script(
            &dir,
            "slow",
            &format!("sleep 300 & echo $! > '{}'; wait", pidfile.display()),
        );
        let hook = Hook {
            path: p,
            timeout: Some(Duration::from_millis(500)),
        };
        let start = std::time::Instant::now();
        assert_eq!(hook.run("freeze").await.unwrap_err(), HookError::Timeout(0));
        assert!(start.elapsed() < Duration::from_secs(20));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild was killed too (poll: the kernel may take a moment to reap it through init).
        let mut gone = false;
        for _ in 0..200 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.contains(") Z ") {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "grandchild {pid} survived the timeout");
    }

    #[tokio::test]
    async fn not_executable_is_an_access_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plain");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        let e = Hook {
            path: p,
            timeout: None,
        }
        .run("freeze")
        .await
        .unwrap_err();
        assert!(
            e.to_string().starts_with("can't access fsfreeze hook"),
            "{e}"
        );
    }
}

//! guest-shutdown and guest-suspend-{disk,ram,hybrid}.
//!
//! These only ever run for real inside the micro-VM; the unit tests check the argument validation and the command
//! lines with fake helper programs.

use std::path::{Path, PathBuf};

use super::error::{CommandError, CommandResult};
use super::run::{run_command, run_status};
use super::Tools;

/// The program and arguments guest-shutdown runs for `mode`.
///
/// `/sbin/shutdown -h -P|-H|-r +0 "hypervisor initiated shutdown"` like qemu-ga 7.2; when that program is missing
/// (a busybox initramfs) `poweroff -f`, `halt -f` or `reboot -f`.
pub fn shutdown_command(
    tools: &Tools,
    mode: Option<&str>,
) -> CommandResult<(PathBuf, Vec<String>)> {
    let (flag, fallback) = match mode.unwrap_or("powerdown") {
        "powerdown" => ("-P", &tools.poweroff),
        "halt" => ("-H", &tools.halt),
        "reboot" => ("-r", &tools.reboot),
        _ => {
            return Err(CommandError::generic(
                "mode is invalid (valid values are: halt|powerdown|reboot",
            ))
        }
    };
    if is_executable(&tools.shutdown) {
        Ok((
            tools.shutdown.clone(),
            vec![
                "-h".into(),
                flag.into(),
                "+0".into(),
                "hypervisor initiated shutdown".into(),
            ],
        ))
    } else {
        Ok((fallback.clone(), vec!["-f".into()]))
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// guest-shutdown. NEVER called in tests with the real tools.
pub async fn shutdown(tools: &Tools, mode: Option<&str>) -> CommandResult<()> {
    let (prog, args) = shutdown_command(tools, mode)?;
    tracing::info!(mode = mode.unwrap_or("powerdown"), program = %prog.display(), "guest-shutdown called");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_command(&prog, &args, None, "shutdown").await
}

/// Suspend modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuspendMode {
    /// Hibernate.
    Disk,
    /// Suspend to RAM.
    Ram,
    /// Hybrid sleep.
    Hybrid,
}

impl SuspendMode {
    fn systemd_unit(self) -> &'static str {
        match self {
            SuspendMode::Disk => "systemd-hibernate",
            SuspendMode::Ram => "systemd-suspend",
            SuspendMode::Hybrid => "systemd-hybrid-sleep",
        }
    }
    fn systemctl_verb(self) -> &'static str {
        match self {
            SuspendMode::Disk => "hibernate",
            SuspendMode::Ram => "suspend",
            SuspendMode::Hybrid => "hybrid-sleep",
        }
    }
    fn pm_flag(self) -> &'static str {
        match self {
            SuspendMode::Disk => "--hibernate",
            SuspendMode::Ram => "--suspend",
            SuspendMode::Hybrid => "--suspend-hybrid",
        }
    }
    fn pm_binary(self) -> &'static str {
        match self {
            SuspendMode::Disk => "pm-hibernate",
            SuspendMode::Ram => "pm-suspend",
            SuspendMode::Hybrid => "pm-suspend-hybrid",
        }
    }
    fn sys_state(self) -> Option<&'static str> {
        match self {
            SuspendMode::Disk => Some("disk"),
            SuspendMode::Ram => Some("mem"),
            SuspendMode::Hybrid => None,
        }
    }
}

/// guest-suspend-*: systemd, then pm-utils, then `/sys/power/state`, like qemu-ga. NEVER called in tests.
pub async fn suspend(sys_root: &Path, mode: SuspendMode) -> CommandResult<()> {
    let mut supported = false;
    // systemd: `systemctl status <unit>` exits 1..=3 when the unit exists.
    if let Ok(Some(st)) = run_status("systemctl", &["status", mode.systemd_unit()]).await {
        if (1..4).contains(&st) {
            supported = true;
            if let Ok(Some(0)) = run_status("systemctl", &[mode.systemctl_verb()]).await {
                return Ok(());
            }
        }
    }
    if let Ok(Some(0)) = run_status("pm-is-supported", &[mode.pm_flag()]).await {
        supported = true;
        if let Ok(Some(0)) = run_status(mode.pm_binary(), &[]).await {
            return Ok(());
        }
    }
    let mut last_err = None;
    if let Some(word) = mode.sys_state() {
        let state = sys_root.join("power/state");
        if std::fs::read_to_string(&state).is_ok_and(|s| s.contains(word)) {
            supported = true;
            match std::fs::write(&state, word) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    last_err = Some(CommandError::io(
                        "suspend: cannot write to '/sys/power/state'",
                        &e,
                    ));
                }
            }
        }
    }
    if !supported {
        return Err(CommandError::generic(
            "the requested suspend mode is not supported by the guest",
        ));
    }
    Err(last_err.unwrap_or_else(|| {
        CommandError::generic(format!(
            "the helper program '{}' returned an unexpected exit status code",
            mode.pm_binary()
        ))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fake_tool(dir: &Path, name: &str, log: &Path) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"{name} $*\" >> {}\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[tokio::test]
    async fn shutdown_command_lines() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log");
        let tools = Tools {
            shutdown: fake_tool(d.path(), "shutdown", &log),
            poweroff: fake_tool(d.path(), "poweroff", &log),
            halt: fake_tool(d.path(), "halt", &log),
            reboot: fake_tool(d.path(), "reboot", &log),
            ..Tools::default()
        };
        let (p, a) = shutdown_command(&tools, None).unwrap();
        assert_eq!(p, tools.shutdown);
        assert_eq!(a, ["-h", "-P", "+0", "hypervisor initiated shutdown"]);
        assert_eq!(shutdown_command(&tools, Some("halt")).unwrap().1[1], "-H");
        assert_eq!(shutdown_command(&tools, Some("reboot")).unwrap().1[1], "-r");
        assert_eq!(
            shutdown_command(&tools, Some("sleep"))
                .unwrap_err()
                .to_string(),
            "mode is invalid (valid values are: halt|powerdown|reboot"
        );
        shutdown(&tools, Some("reboot")).await.unwrap();
        // busybox initramfs: no shutdown binary
        let tools2 = Tools {
            shutdown: d.path().join("missing"),
            ..tools.clone()
        };
        assert_eq!(
            shutdown_command(&tools2, Some("halt")).unwrap(),
            (tools.halt.clone(), vec!["-f".to_string()])
        );
        shutdown(&tools2, None).await.unwrap();
        let logged = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            logged,
            "shutdown -h -r +0 hypervisor initiated shutdown\npoweroff -f\n"
        );
    }

    #[tokio::test]
    async fn failing_helper_reports_output() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("shutdown");
        std::fs::write(&p, "#!/bin/sh\necho nope >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let tools = Tools {
            shutdown: p,
            ..Tools::default()
        };
        let e = shutdown(&tools, None).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "child process has failed to shutdown: nope\n"
        );
    }

    #[test]
    fn suspend_mode_names() {
        assert_eq!(SuspendMode::Hybrid.sys_state(), None);
        assert_eq!(SuspendMode::Ram.systemctl_verb(), "suspend");
        assert_eq!(SuspendMode::Disk.pm_flag(), "--hibernate");
    }
}

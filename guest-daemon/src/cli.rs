//! guestlinkd's command line: qemu-ga's options (same letters, same parsing quirks) plus guestlink's own.
//!
//! qemu-ga uses getopt with `F::` (an optional argument that must be attached: `-F/path`, `--fsfreeze-hook=/path`;
//! a bare `-F` means `/etc/qemu/fsfreeze-hook`). [`normalize_args`] rewrites those forms before clap sees them so a
//! following word is never taken as the hook path.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

/// The hook used by a bare `-F` / `--fsfreeze-hook` (qemu-ga's `QGA_FSFREEZE_HOOK_DEFAULT`).
pub const FSFREEZE_HOOK_DEFAULT: &str = "/etc/qemu/fsfreeze-hook";

/// What to do when the freeze hook fails (non-zero exit or timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HookFailure {
    /// Refuse the freeze with "fsfreeze hook has failed with status N"; nothing is frozen (qemu-ga's behaviour).
    Abort,
    /// Log the failure and freeze anyway.
    Ignore,
}

/// Command-line options. Every `Option`/empty value means "not given" so the config file can supply it.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "guestlinkd",
    about = "guestlinkd: QEMU guest agent (qemu-ga) compatible daemon with freeze safety",
    disable_version_flag = true
)]
pub struct Cli {
    /// Transport method: virtio-serial (default), isa-serial, unix-listen, vsock-listen.
    #[arg(
        short = 'm',
        long = "method",
        allow_hyphen_values = true,
        value_name = "METHOD"
    )]
    pub method: Option<String>,
    /// Device/socket path (vsock-listen: `<cid>:<port>`).
    #[arg(
        short = 'p',
        long = "path",
        allow_hyphen_values = true,
        value_name = "PATH"
    )]
    pub path: Option<String>,
    /// Log file (default: stderr, or journald under systemd).
    #[arg(
        short = 'l',
        long = "logfile",
        allow_hyphen_values = true,
        value_name = "PATH"
    )]
    pub logfile: Option<String>,
    /// Pid file, written when daemonizing (default /var/run/qemu-ga.pid).
    #[arg(
        short = 'f',
        long = "pidfile",
        allow_hyphen_values = true,
        value_name = "PATH"
    )]
    pub pidfile: Option<String>,
    /// Enable the fsfreeze hook; `-F` alone uses /etc/qemu/fsfreeze-hook. The path must be attached: `-F/path` or
    /// `--fsfreeze-hook=/path`.
    #[arg(
        short = 'F',
        long = "fsfreeze-hook",
        value_name = "PATH",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = FSFREEZE_HOOK_DEFAULT
    )]
    pub fsfreeze_hook: Option<String>,
    /// State directory (default /var/run): holds qga.state and qga.state.isfrozen.
    #[arg(
        short = 't',
        long = "statedir",
        allow_hyphen_values = true,
        value_name = "DIR"
    )]
    pub statedir: Option<String>,
    /// Log everything (debug level, including the per-command audit).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Print the version and exit.
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// Become a daemon (fork, setsid, chdir /, umask 077, stdio to /dev/null, pid file).
    #[arg(short = 'd', long = "daemonize")]
    pub daemonize: bool,
    /// Comma-separated commands to disable; `-b help` lists the commands.
    #[arg(
        short = 'b',
        long = "block-rpcs",
        alias = "blacklist",
        allow_hyphen_values = true,
        value_name = "LIST",
        action = ArgAction::Append
    )]
    pub block_rpcs: Vec<String>,
    /// Comma-separated commands to allow; every other command is disabled.
    #[arg(short = 'a', long = "allow-rpcs", allow_hyphen_values = true, value_name = "LIST", action = ArgAction::Append)]
    pub allow_rpcs: Vec<String>,
    /// qemu-ga configuration file (mandatory when given; default $QGA_CONF or /etc/qemu/qemu-ga.conf).
    #[arg(
        short = 'c',
        long = "config",
        allow_hyphen_values = true,
        value_name = "PATH"
    )]
    pub config: Option<PathBuf>,
    /// Print the effective configuration as a key file and exit.
    #[arg(short = 'D', long = "dump-conf")]
    pub dump_conf: bool,
    /// When the channel goes away, retry opening it every 5 s instead of exiting.
    #[arg(short = 'r', long = "retry-path")]
    pub retry_path: bool,

    /// guestlink settings file (default $GUESTLINK_CONF or /etc/guestlink/guestlinkd.conf).
    #[arg(long = "guestlink-config", value_name = "PATH")]
    pub guestlink_config: Option<PathBuf>,
    /// Thaw automatically this many seconds after a freeze (default 600; 0 disables the watchdog).
    #[arg(long = "auto-thaw", value_name = "SECONDS")]
    pub auto_thaw: Option<u64>,
    /// Kill the fsfreeze hook (its whole process group) after this many seconds (default 300; 0 = no timeout).
    #[arg(long = "hook-timeout", value_name = "SECONDS")]
    pub hook_timeout: Option<u64>,
    /// What a failing freeze hook does: abort (default) or ignore.
    #[arg(long = "hook-failure", value_name = "MODE")]
    pub hook_failure: Option<HookFailure>,
    /// Allow-list profile: `backup` (ping, info, sync, fsfreeze-*, get-fsinfo, get-osinfo, get-time, ...).
    #[arg(long = "profile", value_name = "NAME")]
    pub profile: Option<String>,
    /// Mode of files created by guest-file-open, octal (default 0600).
    #[arg(long = "file-mode", value_name = "OCTAL", value_parser = parse_octal)]
    pub file_mode: Option<u32>,
    /// guest-exec: bytes of stdout and of stderr kept per process (default 16777216).
    #[arg(long = "exec-max-output", value_name = "BYTES")]
    pub exec_max_output: Option<usize>,
    /// guest-exec: maximum number of processes tracked at once (default 64).
    #[arg(long = "exec-max-processes", value_name = "N")]
    pub exec_max_processes: Option<usize>,
    /// vsock-listen: peer CIDs allowed to connect, comma-separated or repeated (default 2, the host). CID 1 (local
    /// loopback) and the guest's own CID are local users; CIDs >= 3 are nested VMs.
    #[arg(long = "vsock-allow-cid", value_name = "CID", value_delimiter = ',')]
    pub vsock_allow_cid: Vec<u32>,
    /// Stay in the foreground (the default; accepted for service files shared with other agents).
    #[arg(long = "foreground")]
    pub foreground: bool,
    /// SPICE: the agent port (virtio `com.redhat.spice.0`, a pty, or a unix socket to connect to); enables the
    /// SPICE side. Use `-m none` to run SPICE without the QGA channel.
    #[arg(long = "spice-path", value_name = "PATH")]
    pub spice_path: Option<PathBuf>,
    /// SPICE: unix socket where guestlink-session agents connect (default /run/guestlinkd/session.sock).
    #[arg(long = "session-socket", value_name = "PATH")]
    pub session_socket: Option<PathBuf>,
    /// SPICE: no logind; one session agent is accepted and it is the active one. Only root and the uid of
    /// `--agent-uid` (default: the owner of the active virtual terminal) may connect as the agent.
    #[arg(long = "no-logind")]
    pub no_logind: bool,
    /// SPICE with `--no-logind`: the uid allowed to run the session agent (besides root). Default: the owner of
    /// the seat's active VT (/sys/class/tty/tty0/active → /dev/ttyN); no one but root when that is unknown.
    #[arg(long = "agent-uid", value_name = "UID", requires = "no_logind")]
    pub agent_uid: Option<u32>,
    /// SPICE: when the served logind session has had no session agent for a few seconds, ask the launcher
    /// listening on SOCKET (guestlink-agent-launch.socket) to start one in that user's service manager
    /// (docs/desktops.md). Off without this option, with `--no-agent-launch`, and with `--no-logind`.
    #[arg(long = "agent-launcher", value_name = "SOCKET")]
    pub agent_launcher: Option<PathBuf>,
    /// SPICE: never ask for a session agent (overrides `--agent-launcher`).
    #[arg(long = "no-agent-launch")]
    pub no_agent_launch: bool,
    /// SPICE: write `struct input_event` records to FILE instead of creating a /dev/uinput tablet.
    #[arg(long = "uinput-fake", value_name = "FILE")]
    pub uinput_fake: Option<PathBuf>,
}

/// Parse an octal file mode such as `0600` or `600`.
pub fn parse_octal(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    let mode =
        u32::from_str_radix(digits, 8).map_err(|e| format!("invalid octal mode '{s}': {e}"))?;
    if mode > 0o7777 {
        return Err(format!("invalid octal mode '{s}': above 07777"));
    }
    Ok(mode)
}

/// Rewrite qemu-ga's attached-optional-argument forms of `-F` so clap parses them like getopt does.
///
/// `-F` → `--fsfreeze-hook` (default path), `-F/path` → `--fsfreeze-hook=/path`. Arguments after `--` and values
/// of options that take one are left alone.
pub fn normalize_args<I, T>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    const TAKES_VALUE: &[&str] = &["-m", "-p", "-l", "-f", "-t", "-b", "-a", "-c"];
    let mut out = Vec::new();
    let mut value_next = false;
    let mut rest = false;
    for (i, arg) in args.into_iter().enumerate() {
        let arg: OsString = arg.into();
        if i == 0 || rest || value_next {
            value_next = false;
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            rest = true;
        } else if s == "-F" {
            out.push("--fsfreeze-hook".into());
            continue;
        } else if let Some(path) = s.strip_prefix("-F") {
            out.push(format!("--fsfreeze-hook={path}").into());
            continue;
        } else if TAKES_VALUE.contains(&s) {
            value_next = true;
        }
        out.push(arg);
    }
    out
}

/// Parse the process arguments (exits with clap's message on error, like getopt's "Unknown option").
pub fn parse() -> Cli {
    Cli::parse_from(normalize_args(std::env::args_os()))
}

/// Parse an explicit argument list (tests).
#[cfg(test)]
pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    Cli::try_parse_from(normalize_args(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Cli {
        let mut v = vec!["guestlinkd"];
        v.extend_from_slice(args);
        try_parse_from(v).unwrap()
    }

    #[test]
    fn qemu_ga_short_and_long_options() {
        let c = p(&[
            "-m",
            "unix-listen",
            "-p",
            "/tmp/s",
            "-l",
            "/tmp/log",
            "-f",
            "/tmp/pid",
            "-t",
            "/tmp/st",
            "-v",
            "-d",
            "-r",
            "-D",
        ]);
        assert_eq!(c.method.as_deref(), Some("unix-listen"));
        assert_eq!(c.path.as_deref(), Some("/tmp/s"));
        assert_eq!(c.logfile.as_deref(), Some("/tmp/log"));
        assert_eq!(c.pidfile.as_deref(), Some("/tmp/pid"));
        assert_eq!(c.statedir.as_deref(), Some("/tmp/st"));
        assert!(c.verbose && c.daemonize && c.retry_path && c.dump_conf);
        let c = p(&[
            "--method=vsock-listen",
            "--path",
            "3:1234",
            "--statedir=/x",
            "--retry-path",
        ]);
        assert_eq!(c.method.as_deref(), Some("vsock-listen"));
        assert_eq!(c.path.as_deref(), Some("3:1234"));
        assert_eq!(c.statedir.as_deref(), Some("/x"));
    }

    #[test]
    fn fsfreeze_hook_optional_attached_value() {
        assert_eq!(
            p(&["-F"]).fsfreeze_hook.as_deref(),
            Some(FSFREEZE_HOOK_DEFAULT)
        );
        assert_eq!(
            p(&["-F/my/hook"]).fsfreeze_hook.as_deref(),
            Some("/my/hook")
        );
        assert_eq!(
            p(&["--fsfreeze-hook=/h"]).fsfreeze_hook.as_deref(),
            Some("/h")
        );
        assert_eq!(
            p(&["--fsfreeze-hook", "-v"]).fsfreeze_hook.as_deref(),
            Some(FSFREEZE_HOOK_DEFAULT)
        );
        // A detached word is not the hook path (getopt `F::`): here it is a stray positional, an error.
        let c = p(&["-F", "-t", "/st"]);
        assert_eq!(c.fsfreeze_hook.as_deref(), Some(FSFREEZE_HOOK_DEFAULT));
        assert_eq!(c.statedir.as_deref(), Some("/st"));
        assert!(try_parse_from(["guestlinkd", "-F", "/path"]).is_err());
        // The value of another option that looks like -F is left alone.
        assert_eq!(p(&["-p", "-Fx"]).path.as_deref(), Some("-Fx"));
        assert_eq!(p(&["-p", "-Fx"]).fsfreeze_hook, None);
    }

    #[test]
    fn rpc_lists_accumulate_and_blacklist_alias() {
        let c = p(&[
            "-b",
            "guest-ping,guest-exec",
            "--blacklist=guest-shutdown",
            "--block-rpcs",
            "a",
        ]);
        assert_eq!(
            c.block_rpcs,
            ["guest-ping,guest-exec", "guest-shutdown", "a"]
        );
        let c = p(&["-a", "guest-ping", "--allow-rpcs=guest-info"]);
        assert_eq!(c.allow_rpcs, ["guest-ping", "guest-info"]);
    }

    #[test]
    fn guestlink_options() {
        let c = p(&[
            "--auto-thaw",
            "0",
            "--hook-timeout",
            "5",
            "--hook-failure",
            "ignore",
            "--profile",
            "backup",
            "--file-mode",
            "0640",
            "--exec-max-output",
            "1024",
            "--foreground",
        ]);
        assert_eq!(c.auto_thaw, Some(0));
        assert_eq!(c.hook_timeout, Some(5));
        assert_eq!(c.hook_failure, Some(HookFailure::Ignore));
        assert_eq!(c.profile.as_deref(), Some("backup"));
        assert_eq!(c.file_mode, Some(0o640));
        assert_eq!(c.exec_max_output, Some(1024));
        assert!(c.foreground);
        assert!(try_parse_from(["guestlinkd", "--file-mode", "999"]).is_err());
        assert!(try_parse_from(["guestlinkd", "--hook-failure", "maybe"]).is_err());
        assert!(try_parse_from(["guestlinkd", "--no-such-flag"]).is_err());
    }
}

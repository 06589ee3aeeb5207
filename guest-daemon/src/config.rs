//! The effective configuration: built-in defaults, then qemu-ga's key file (`[general]` in
//! `/etc/qemu/qemu-ga.conf`), then guestlink's key file (`[guestlink]` in `/etc/guestlink/guestlinkd.conf`), then
//! the command line. `-D` prints the result in qemu-ga's key-file format.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::cli::{Cli, HookFailure};
use crate::keyfile::{split_list, KeyFile, KeyFileError};
use crate::transport::{BadMethod, Method};

/// qemu-ga's default configuration file.
pub const QGA_CONF_DEFAULT: &str = "/etc/qemu/qemu-ga.conf";
/// guestlink's default settings file.
pub const GUESTLINK_CONF_DEFAULT: &str = "/etc/guestlink/guestlinkd.conf";
/// Default pid file (qemu-ga's, so service files and scripts keep working).
pub const PIDFILE_DEFAULT: &str = "/var/run/qemu-ga.pid";
/// Default state directory.
pub const STATEDIR_DEFAULT: &str = "/var/run";
/// Default auto-thaw watchdog, seconds.
pub const AUTO_THAW_DEFAULT: u64 = 600;
/// Default freeze/thaw hook timeout, seconds.
pub const HOOK_TIMEOUT_DEFAULT: u64 = 300;

/// The shipped allow-list profiles: `(name, commands)`.
pub const PROFILES: &[(&str, &[&str])] = &[(
    "backup",
    &[
        "guest-ping",
        "guest-info",
        "guest-sync",
        "guest-sync-delimited",
        "guest-fsfreeze-status",
        "guest-fsfreeze-freeze",
        "guest-fsfreeze-freeze-list",
        "guest-fsfreeze-thaw",
        "guest-get-fsinfo",
        "guest-get-osinfo",
        "guest-get-time",
        "guest-get-timezone",
        "guest-get-host-name",
    ],
)];

/// A configuration error (all fatal at start-up).
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("error loading configuration from path: {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid key file, or a value is invalid.
    #[error("error loading configuration from path: {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The key-file error.
        source: KeyFileError,
    },
    /// A value in guestlink's file is invalid.
    #[error(
        "error loading configuration from path: {path}: invalid value '{value}' for key '{key}'"
    )]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// block-rpcs and allow-rpcs were given in the same source.
    #[error("wrong {0}, using 'block-rpcs' and 'allow-rpcs' at the same time is not allowed")]
    BlockAndAllow(&'static str),
    /// An unknown `-m`/`method=`.
    #[error(transparent)]
    BadMethod(#[from] BadMethod),
    /// An unknown `--profile`.
    #[error("unknown profile '{0}' (known: backup)")]
    UnknownProfile(String),
}

/// guestlink's own settings (not in qemu-ga).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestlinkSettings {
    /// Auto-thaw watchdog in seconds; 0 disables it.
    pub auto_thaw_secs: u64,
    /// Hook timeout in seconds; 0 = wait forever (qemu-ga).
    pub hook_timeout_secs: u64,
    /// What a failing freeze hook does.
    pub hook_failure: HookFailure,
    /// Allow-list profile name.
    pub profile: Option<String>,
    /// Mode of files created by guest-file-open.
    pub file_mode: u32,
    /// guest-exec bytes kept per output stream.
    pub exec_max_output: usize,
    /// guest-exec processes tracked at once.
    pub exec_max_processes: usize,
    /// Override of `guest-info`'s `version` (for clients that compare it with QEMU versions).
    pub info_version: Option<String>,
    /// vsock-listen: the peer CIDs accepted (default: the host, CID 2, only).
    pub vsock_allow_cids: Vec<u32>,
}

impl Default for GuestlinkSettings {
    fn default() -> Self {
        GuestlinkSettings {
            auto_thaw_secs: AUTO_THAW_DEFAULT,
            hook_timeout_secs: HOOK_TIMEOUT_DEFAULT,
            hook_failure: HookFailure::Abort,
            profile: None,
            file_mode: 0o600,
            exec_max_output: 16 * 1024 * 1024,
            exec_max_processes: 64,
            info_version: None,
            vsock_allow_cids: vec![crate::transport::listen::VSOCK_CID_HOST],
        }
    }
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Become a daemon.
    pub daemonize: bool,
    /// Transport method.
    pub method: Method,
    /// Channel path (resolved default for the serial methods).
    pub path: Option<String>,
    /// Log file.
    pub logfile: Option<String>,
    /// Pid file.
    pub pidfile: String,
    /// Freeze hook.
    pub fsfreeze_hook: Option<String>,
    /// State directory.
    pub statedir: String,
    /// Log everything.
    pub verbose: bool,
    /// Retry the channel path instead of exiting.
    pub retry_path: bool,
    /// Blocked commands.
    pub block_rpcs: Vec<String>,
    /// Allowed commands (empty = no allow-list).
    pub allow_rpcs: Vec<String>,
    /// guestlink settings.
    pub guestlink: GuestlinkSettings,
}

/// Where a key file comes from.
fn read_optional(path: &Path, mandatory: bool) -> Result<Option<KeyFile>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => KeyFile::parse(&text)
            .map(Some)
            .map_err(|source| ConfigError::Parse {
                path: path.to_owned(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !mandatory => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

impl Config {
    /// Build the configuration from the command line, the files, and the environment (`env` looks up a variable:
    /// `QGA_CONF`, `GUESTLINK_CONF`).
    pub fn load(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut cfg = Config {
            daemonize: false,
            method: Method::VirtioSerial,
            path: None,
            logfile: None,
            pidfile: String::new(),
            fsfreeze_hook: None,
            statedir: String::new(),
            verbose: false,
            retry_path: false,
            block_rpcs: Vec::new(),
            allow_rpcs: Vec::new(),
            guestlink: GuestlinkSettings::default(),
        };
        let mut method = None;
        let mut pidfile = None;
        let mut statedir = None;

        let (qga_path, mandatory) = match &cli.config {
            Some(p) => (p.clone(), true),
            None => (
                PathBuf::from(env("QGA_CONF").unwrap_or_else(|| QGA_CONF_DEFAULT.to_owned())),
                false,
            ),
        };
        if let Some(kf) = read_optional(&qga_path, mandatory)? {
            let bad = |source| ConfigError::Parse {
                path: qga_path.clone(),
                source,
            };
            const G: &str = "general";
            if let Some(v) = kf.get_bool(G, "daemon").map_err(bad)? {
                cfg.daemonize = v;
            }
            method = kf.get_string(G, "method").map(str::to_owned);
            cfg.path = kf.get_string(G, "path").map(str::to_owned);
            cfg.logfile = kf.get_string(G, "logfile").map(str::to_owned);
            pidfile = kf.get_string(G, "pidfile").map(str::to_owned);
            cfg.fsfreeze_hook = kf.get_string(G, "fsfreeze-hook").map(str::to_owned);
            statedir = kf.get_string(G, "statedir").map(str::to_owned);
            if kf.get_bool(G, "verbose").map_err(bad)? == Some(true) {
                cfg.verbose = true;
            }
            if let Some(v) = kf.get_bool(G, "retry-path").map_err(bad)? {
                cfg.retry_path = v;
            }
            // qemu-ga reads the deprecated key `blacklist` instead of `block-rpcs` when it is present.
            let block_key = if kf.has_key(G, "blacklist") {
                "blacklist"
            } else {
                "block-rpcs"
            };
            if let Some(v) = kf.get_string(G, block_key) {
                cfg.block_rpcs.extend(split_list(v));
            }
            if let Some(v) = kf.get_string(G, "allow-rpcs") {
                cfg.allow_rpcs.extend(split_list(v));
            }
            if kf.has_key(G, block_key) && kf.has_key(G, "allow-rpcs") {
                return Err(ConfigError::BlockAndAllow("config"));
            }
        }

        let (gl_path, gl_mandatory) = match &cli.guestlink_config {
            Some(p) => (p.clone(), true),
            None => (
                PathBuf::from(
                    env("GUESTLINK_CONF").unwrap_or_else(|| GUESTLINK_CONF_DEFAULT.to_owned()),
                ),
                false,
            ),
        };
        if let Some(kf) = read_optional(&gl_path, gl_mandatory)? {
            apply_guestlink_file(&kf, &gl_path, &mut cfg.guestlink)?;
        }

        // The command line overrides the files; lists accumulate.
        if !cli.block_rpcs.is_empty() && !cli.allow_rpcs.is_empty() {
            return Err(ConfigError::BlockAndAllow("command line"));
        }
        if cli.daemonize {
            cfg.daemonize = true;
        }
        method = cli.method.clone().or(method);
        if cli.path.is_some() {
            cfg.path.clone_from(&cli.path);
        }
        if cli.logfile.is_some() {
            cfg.logfile.clone_from(&cli.logfile);
        }
        pidfile = cli.pidfile.clone().or(pidfile);
        if cli.fsfreeze_hook.is_some() {
            cfg.fsfreeze_hook.clone_from(&cli.fsfreeze_hook);
        }
        statedir = cli.statedir.clone().or(statedir);
        cfg.verbose |= cli.verbose;
        cfg.retry_path |= cli.retry_path;
        for list in &cli.block_rpcs {
            cfg.block_rpcs.extend(split_list(list));
        }
        for list in &cli.allow_rpcs {
            cfg.allow_rpcs.extend(split_list(list));
        }
        let g = &mut cfg.guestlink;
        g.auto_thaw_secs = cli.auto_thaw.unwrap_or(g.auto_thaw_secs);
        g.hook_timeout_secs = cli.hook_timeout.unwrap_or(g.hook_timeout_secs);
        g.hook_failure = cli.hook_failure.unwrap_or(g.hook_failure);
        if cli.profile.is_some() {
            g.profile.clone_from(&cli.profile);
        }
        g.file_mode = cli.file_mode.unwrap_or(g.file_mode);
        g.exec_max_output = cli.exec_max_output.unwrap_or(g.exec_max_output);
        g.exec_max_processes = cli.exec_max_processes.unwrap_or(g.exec_max_processes);
        if !cli.vsock_allow_cid.is_empty() {
            g.vsock_allow_cids.clone_from(&cli.vsock_allow_cid);
        }
        if let Some(name) = &g.profile {
            if profile_commands(name).is_none() {
                return Err(ConfigError::UnknownProfile(name.clone()));
            }
        }

        cfg.method = match method {
            Some(name) => name.parse()?,
            None => Method::VirtioSerial,
        };
        cfg.pidfile = pidfile.unwrap_or_else(|| PIDFILE_DEFAULT.to_owned());
        cfg.statedir = statedir.unwrap_or_else(|| STATEDIR_DEFAULT.to_owned());
        if cfg.path.is_none() {
            cfg.path = cfg.method.default_path().map(str::to_owned);
        }
        Ok(cfg)
    }

    /// The `-D` output: qemu-ga's `[general]` group (same keys, same order), then a `[guestlink]` group.
    pub fn dump(&self) -> String {
        let mut kf = KeyFile::new();
        const G: &str = "general";
        kf.set_bool(G, "daemon", self.daemonize);
        kf.set_string(G, "method", self.method.name());
        if let Some(p) = &self.path {
            kf.set_string(G, "path", p);
        }
        if let Some(l) = &self.logfile {
            kf.set_string(G, "logfile", l);
        }
        kf.set_string(G, "pidfile", &self.pidfile);
        if let Some(h) = &self.fsfreeze_hook {
            kf.set_string(G, "fsfreeze-hook", h);
        }
        kf.set_string(G, "statedir", &self.statedir);
        kf.set_bool(G, "verbose", self.verbose);
        kf.set_bool(G, "retry-path", self.retry_path);
        // qemu-ga always writes block-rpcs and writes allow-rpcs only when set (>= 8.1). An empty block list is left
        // out next to an allow list so that the dump reads back: both keys in one file are an error.
        if !self.block_rpcs.is_empty() || self.allow_rpcs.is_empty() {
            kf.set_string(G, "block-rpcs", &self.block_rpcs.join(","));
        }
        if !self.allow_rpcs.is_empty() {
            kf.set_string(G, "allow-rpcs", &self.allow_rpcs.join(","));
        }
        const L: &str = "guestlink";
        let g = &self.guestlink;
        kf.set_string(L, "auto-thaw", &g.auto_thaw_secs.to_string());
        kf.set_string(L, "hook-timeout", &g.hook_timeout_secs.to_string());
        kf.set_string(L, "hook-failure", hook_failure_name(g.hook_failure));
        if let Some(p) = &g.profile {
            kf.set_string(L, "profile", p);
        }
        kf.set_string(L, "file-mode", &format!("{:04o}", g.file_mode));
        kf.set_string(L, "exec-max-output", &g.exec_max_output.to_string());
        kf.set_string(L, "exec-max-processes", &g.exec_max_processes.to_string());
        if let Some(v) = &g.info_version {
            kf.set_string(L, "info-version", v);
        }
        let cids: Vec<String> = g.vsock_allow_cids.iter().map(u32::to_string).collect();
        kf.set_string(L, "vsock-allow-cid", &cids.join(","));
        kf.to_data()
    }
}

fn hook_failure_name(h: HookFailure) -> &'static str {
    match h {
        HookFailure::Abort => "abort",
        HookFailure::Ignore => "ignore",
    }
}

/// The commands of a shipped profile.
pub fn profile_commands(name: &str) -> Option<&'static [&'static str]> {
    PROFILES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

fn apply_guestlink_file(
    kf: &KeyFile,
    path: &Path,
    g: &mut GuestlinkSettings,
) -> Result<(), ConfigError> {
    const L: &str = "guestlink";
    let bad = |key: &str, value: &str| ConfigError::BadValue {
        path: path.to_owned(),
        key: key.to_owned(),
        value: value.to_owned(),
    };
    let num = |key: &str| -> Result<Option<u64>, ConfigError> {
        kf.get_string(L, key)
            .map(|v| v.trim().parse::<u64>().map_err(|_| bad(key, v)))
            .transpose()
    };
    if let Some(v) = num("auto-thaw")? {
        g.auto_thaw_secs = v;
    }
    if let Some(v) = num("hook-timeout")? {
        g.hook_timeout_secs = v;
    }
    if let Some(v) = kf.get_string(L, "hook-failure") {
        g.hook_failure = match v.trim() {
            "abort" => HookFailure::Abort,
            "ignore" => HookFailure::Ignore,
            _ => return Err(bad("hook-failure", v)),
        };
    }
    if let Some(v) = kf.get_string(L, "profile") {
        g.profile = Some(v.trim().to_owned()).filter(|s| !s.is_empty());
    }
    if let Some(v) = kf.get_string(L, "file-mode") {
        g.file_mode = crate::cli::parse_octal(v.trim()).map_err(|_| bad("file-mode", v))?;
    }
    if let Some(v) = num("exec-max-output")? {
        g.exec_max_output =
            usize::try_from(v).map_err(|_| bad("exec-max-output", &v.to_string()))?;
    }
    if let Some(v) = num("exec-max-processes")? {
        g.exec_max_processes =
            usize::try_from(v).map_err(|_| bad("exec-max-processes", &v.to_string()))?;
    }
    if let Some(v) = kf.get_string(L, "info-version") {
        g.info_version = Some(v.to_owned());
    }
    if let Some(v) = kf.get_string(L, "vsock-allow-cid") {
        g.vsock_allow_cids = v
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| c.parse::<u32>().map_err(|_| bad("vsock-allow-cid", v)))
            .collect::<Result<_, _>>()?;
        if g.vsock_allow_cids.is_empty() {
            return Err(bad("vsock-allow-cid", v));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::try_parse_from;

    fn load(
        args: &[&str],
        qga_conf: Option<&Path>,
        gl_conf: Option<&Path>,
    ) -> Result<Config, ConfigError> {
        let mut v = vec!["guestlinkd"];
        v.extend_from_slice(args);
        let cli = try_parse_from(v).unwrap();
        let qga = qga_conf.map_or_else(
            || "/nonexistent/qemu-ga.conf".to_owned(),
            |p| p.display().to_string(),
        );
        let gl = gl_conf.map_or_else(
            || "/nonexistent/gl.conf".to_owned(),
            |p| p.display().to_string(),
        );
        Config::load(&cli, &move |k| match k {
            "QGA_CONF" => Some(qga.clone()),
            "GUESTLINK_CONF" => Some(gl.clone()),
            _ => None,
        })
    }

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn dump_reads_back_with_either_list() {
        let dir = tempfile::tempdir().unwrap();
        for args in [
            ["-b", "guest-ping,guest-info"],
            ["-a", "guest-ping,guest-info"],
        ] {
            let mut full = vec!["-t", "/tmp/x"];
            full.extend_from_slice(&args);
            let cfg = load(&full, None, None).unwrap();
            let file = dir.path().join("dump.conf");
            std::fs::write(&file, cfg.dump()).unwrap();
            let back = load(&["-c", file.to_str().unwrap()], Some(&file), None).unwrap();
            assert_eq!(back.block_rpcs, cfg.block_rpcs, "{args:?}");
            assert_eq!(back.allow_rpcs, cfg.allow_rpcs, "{args:?}");
        }
    }

    #[test]
    fn defaults_and_dump_match_qemu_ga() {
        let cfg = load(&["-t", "/tmp/x"], None, None).unwrap();
        let dump = cfg.dump();
        // Byte-identical to Debian's qemu-ga 7.2 `-D -t /tmp/x` except the trailing [guestlink] group.
        assert!(
            dump.starts_with(
                "[general]\ndaemon=false\nmethod=virtio-serial\npath=/dev/virtio-ports/org.qemu.guest_agent.0\n\
             pidfile=/var/run/qemu-ga.pid\nstatedir=/tmp/x\nverbose=false\nretry-path=false\nblock-rpcs=\n\
             \n[guestlink]\nauto-thaw=600\n"
            ),
            "{dump}"
        );
    }

    /// tests/data/test-qga-config from QEMU, as used by test-qga.c's /qga/config.
    const TEST_QGA_CONFIG: &str = "[general]\ndaemon=false\nmethod=virtio-serial\n\
        path=/path/to/org.qemu.guest_agent.0\npidfile=/var/foo/qemu-ga.pid\nstatedir=/var/state\nverbose=true\n\
        retry-path=true\nblock-rpcs=guest-ping;guest-get-time\n";

    #[test]
    fn test_qga_config_data() {
        let dir = tempfile::tempdir().unwrap();
        let conf = write(&dir, "test-qga-config", TEST_QGA_CONFIG);
        let cfg = load(&["-D"], Some(&conf), None).unwrap();
        assert!(!cfg.daemonize);
        assert_eq!(cfg.method, Method::VirtioSerial);
        assert_eq!(cfg.path.as_deref(), Some("/path/to/org.qemu.guest_agent.0"));
        assert_eq!(cfg.pidfile, "/var/foo/qemu-ga.pid");
        assert_eq!(cfg.statedir, "/var/state");
        assert!(cfg.verbose && cfg.retry_path);
        // `;` is not qemu-ga's separator: this is one (unknown, harmless) name, so nothing useful is blocked —
        // exactly what qemu-ga does. The dump still contains both names, which is what test-qga.c checks.
        assert_eq!(cfg.block_rpcs, ["guest-ping;guest-get-time"]);
        let dump = KeyFile::parse(&cfg.dump()).unwrap();
        let blocked: Vec<&str> = dump
            .get_string("general", "block-rpcs")
            .unwrap()
            .split(';')
            .collect();
        assert!(blocked.contains(&"guest-ping") && blocked.contains(&"guest-get-time"));
        assert_eq!(dump.get_string("general", "verbose"), Some("true"));

        let conf = write(
            &dir,
            "comma",
            "[general]\nblock-rpcs=guest-ping,guest-get-time\n",
        );
        let cfg = load(&["-b", "guest-exec"], Some(&conf), None).unwrap();
        assert_eq!(
            cfg.block_rpcs,
            ["guest-ping", "guest-get-time", "guest-exec"]
        );
    }

    #[test]
    fn file_rules() {
        let dir = tempfile::tempdir().unwrap();
        // Unknown keys and groups are ignored.
        let conf = write(
            &dir,
            "a",
            "[general]\nfoo=bar\ndaemonize=true\n[other]\nx=1\n",
        );
        assert!(!load(&[], Some(&conf), None).unwrap().daemonize);
        // A bad boolean is fatal.
        let conf = write(&dir, "b", "[general]\nverbose=yes\n");
        assert!(matches!(
            load(&[], Some(&conf), None),
            Err(ConfigError::Parse { .. })
        ));
        // A malformed file is fatal.
        let conf = write(&dir, "c", "[general]\nthis is not a key file\n");
        assert!(load(&[], Some(&conf), None).is_err());
        // block + allow in the file is fatal; in the CLI too; mixing sources is not checked.
        let conf = write(
            &dir,
            "d",
            "[general]\nblock-rpcs=guest-ping\nallow-rpcs=guest-info\n",
        );
        assert!(matches!(
            load(&[], Some(&conf), None),
            Err(ConfigError::BlockAndAllow(_))
        ));
        assert!(matches!(
            load(&["-b", "guest-ping", "-a", "guest-info"], None, None),
            Err(ConfigError::BlockAndAllow(_))
        ));
        let conf = write(&dir, "e", "[general]\nblacklist=guest-ping\n");
        let cfg = load(&["-a", "guest-ping,guest-info"], Some(&conf), None).unwrap();
        assert_eq!(cfg.block_rpcs, ["guest-ping"]);
        assert_eq!(cfg.allow_rpcs, ["guest-ping", "guest-info"]);
        // CLI overrides the file.
        let conf = write(&dir, "f", "[general]\nmethod=isa-serial\nstatedir=/file\n");
        let cfg = load(&["-t", "/cli"], Some(&conf), None).unwrap();
        assert_eq!(cfg.method, Method::IsaSerial);
        assert_eq!(cfg.path.as_deref(), Some("/dev/ttyS0"));
        assert_eq!(cfg.statedir, "/cli");
        // An unknown method is refused when the configuration is resolved, from either source.
        let conf = write(&dir, "g", "[general]\nmethod=carrier-pigeon\n");
        for err in [
            load(&[], Some(&conf), None).unwrap_err(),
            load(&["-m", "carrier-pigeon"], None, None).unwrap_err(),
        ] {
            assert!(matches!(err, ConfigError::BadMethod(_)), "{err:?}");
            assert_eq!(err.to_string(), "invalid channel method: carrier-pigeon");
        }
        assert_eq!(
            load(&["-m", "unix-listen"], Some(&conf), None)
                .unwrap()
                .method,
            Method::UnixListen
        );
        // A missing default file is fine; a missing -c file is fatal.
        let missing = dir.path().join("missing").display().to_string();
        assert!(load(&["-c", &missing], None, None).is_err());
        assert!(load(&[], Some(Path::new(&missing)), None).is_ok());
    }

    #[test]
    fn guestlink_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let gl = write(
            &dir,
            "gl",
            "[guestlink]\nauto-thaw=30\nhook-timeout=7\nhook-failure=ignore\nprofile=backup\nfile-mode=0640\n",
        );
        let cfg = load(&[], None, Some(&gl)).unwrap();
        assert_eq!(cfg.guestlink.auto_thaw_secs, 30);
        assert_eq!(cfg.guestlink.hook_timeout_secs, 7);
        assert_eq!(cfg.guestlink.hook_failure, HookFailure::Ignore);
        assert_eq!(cfg.guestlink.profile.as_deref(), Some("backup"));
        assert_eq!(cfg.guestlink.file_mode, 0o640);
        let cfg = load(
            &["--auto-thaw", "0", "--hook-failure", "abort"],
            None,
            Some(&gl),
        )
        .unwrap();
        assert_eq!(cfg.guestlink.auto_thaw_secs, 0);
        assert_eq!(cfg.guestlink.hook_failure, HookFailure::Abort);
        let bad = write(&dir, "bad", "[guestlink]\nauto-thaw=soon\n");
        assert!(matches!(
            load(&[], None, Some(&bad)),
            Err(ConfigError::BadValue { .. })
        ));
        assert!(matches!(
            load(&["--profile", "nope"], None, None),
            Err(ConfigError::UnknownProfile(_))
        ));
    }

    #[test]
    fn vsock_allow_cid_defaults_to_the_host() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            load(&[], None, None).unwrap().guestlink.vsock_allow_cids,
            [2]
        );
        let gl = write(&dir, "gl", "[guestlink]\nvsock-allow-cid=2, 1\n");
        assert_eq!(
            load(&[], None, Some(&gl))
                .unwrap()
                .guestlink
                .vsock_allow_cids,
            [2, 1]
        );
        let cfg = load(
            &["--vsock-allow-cid", "2,5", "--vsock-allow-cid", "7"],
            None,
            Some(&gl),
        )
        .unwrap();
        assert_eq!(cfg.guestlink.vsock_allow_cids, [2, 5, 7]);
        assert!(cfg.dump().contains("vsock-allow-cid=2,5,7\n"));
        for bad in [
            "[guestlink]\nvsock-allow-cid=host\n",
            "[guestlink]\nvsock-allow-cid=\n",
        ] {
            let p = write(&dir, "bad", bad);
            assert!(
                matches!(load(&[], None, Some(&p)), Err(ConfigError::BadValue { .. })),
                "{bad}"
            );
        }
    }
}

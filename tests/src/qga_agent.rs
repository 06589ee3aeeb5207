//! Starting and stopping an agent under test: the reference `qemu-ga` or our `guestlinkd`.
//!
//! Every agent runs on a private unix socket with a private statedir and config file in a temp dir, and always with
//! the team's dangerous-command block list (on the command line, or in the config file when a test uses `-a`).
//! The first client connection verifies with `guest-info` that those commands really are disabled before a test
//! can send anything else.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::client::Client;

/// The block list file shared with the Python tests and the benchmarks (`tests/qemu-ga-blocked-rpcs.txt`).
const BLOCKED_RPCS_FILE: &str = include_str!("../qemu-ga-blocked-rpcs.txt");

/// Commands that act on the machine the agent runs on; blocked on every agent this suite starts.
pub static DANGEROUS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| parse_block_list(BLOCKED_RPCS_FILE));

/// The names in a block-list file: one per line, `#` comments and blank lines ignored.
pub fn parse_block_list(text: &str) -> Vec<&str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The comma-separated block list passed with `-b` / `block-rpcs=`.
pub fn dangerous_list() -> String {
    DANGEROUS.join(",")
}

/// Which agent implementation a test drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QgaAgentKind {
    /// The reference: Debian's `qemu-ga`.
    QemuGa,
    /// Ours: `guestlinkd` from the `guest-daemon` package.
    Guestlinkd,
}

impl QgaAgentKind {
    /// Both agents, reference first.
    pub const ALL: [QgaAgentKind; 2] = [QgaAgentKind::QemuGa, QgaAgentKind::Guestlinkd];

    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            QgaAgentKind::QemuGa => "qemu-ga",
            QgaAgentKind::Guestlinkd => "guestlinkd",
        }
    }
}

/// Path of the reference qemu-ga, if installed (Debian installs it in /usr/sbin).
pub fn qemu_ga_path() -> Option<PathBuf> {
    ["/usr/sbin/qemu-ga", "/usr/bin/qemu-ga"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Returns the binary for `kind`, or `None` (after a loud message) when the reference peer is missing and allowed to be.
pub fn binary(kind: QgaAgentKind) -> Option<PathBuf> {
    match kind {
        QgaAgentKind::QemuGa => match qemu_ga_path() {
            Some(p) => Some(p),
            None => {
                crate::gate::skip(
                    crate::gate::Gate::Peers,
                    "qemu-ga is not installed (apt-get install qemu-guest-agent)",
                );
                None
            }
        },
        QgaAgentKind::Guestlinkd => Some(guestlinkd_path().clone()),
    }
}

/// The workspace's target dir (`CARGO_TARGET_DIR` or `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => workspace_root().join("target"),
    }
}

/// The workspace root (parent of this package's manifest dir).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `guestlinkd`: `$GUESTLINKD` as given, else `cargo build -p guest-daemon` (once per test process, so the
/// binary is never stale) and `<target>/debug/guestlinkd`.
pub fn guestlinkd_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        crate::bins::workspace_binary(&["GUESTLINKD"], "guest-daemon", "guestlinkd")
    })
}

/// What to start: built with [`QgaAgent::builder`].
#[derive(Debug)]
pub struct QgaAgentBuilder {
    kind: QgaAgentKind,
    args: Vec<String>,
    allow: Option<String>,
    config: String,
    statedir: Option<PathBuf>,
    frozen: bool,
    env: Vec<(String, String)>,
}

impl QgaAgentBuilder {
    /// Extra command-line arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }
    /// Use `-a LIST`; the dangerous block list then moves to the config file (`-a` with `-b` on one command line
    /// is fatal for qemu-ga).
    pub fn allow(mut self, list: &str) -> Self {
        self.allow = Some(list.to_string());
        self
    }
    /// Lines appended to the `[general]` group of the agent's config file.
    pub fn config(mut self, lines: &str) -> Self {
        self.config.push_str(lines);
        self
    }
    /// Use (and keep) this statedir instead of a private one.
    pub fn statedir(mut self, dir: &Path) -> Self {
        self.statedir = Some(dir.to_path_buf());
        self
    }
    /// Pre-create `<statedir>/qga.state.isfrozen`: the agent starts believing it is frozen (no FIFREEZE is issued).
    pub fn frozen(mut self) -> Self {
        self.frozen = true;
        self
    }
    /// Extra environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    /// Starts the agent, or returns `None` when the reference peer is missing (after a loud message).
    pub fn start(self) -> Option<QgaAgent> {
        let bin = binary(self.kind)?;
        let dir = tempfile::Builder::new()
            .prefix("guestlink-qga-")
            .tempdir()
            .expect("temp dir");
        let statedir = self
            .statedir
            .clone()
            .unwrap_or_else(|| dir.path().join("state"));
        fs::create_dir_all(&statedir).expect("create statedir");
        if self.frozen {
            fs::write(statedir.join("qga.state.isfrozen"), b"").expect("create isfrozen marker");
        }
        let conf = dir.path().join("qemu-ga.conf");
        let mut conf_text = String::from("[general]\n");
        conf_text.push_str(&self.config);
        let mut args: Vec<String> = Vec::new();
        match &self.allow {
            Some(list) => {
                conf_text.push_str(&format!("block-rpcs={}\n", dangerous_list()));
                args.extend(["-a".to_string(), list.clone()]);
            }
            None => args.extend(["-b".to_string(), dangerous_list()]),
        }
        fs::write(&conf, &conf_text).expect("write config");
        if self.kind == QgaAgentKind::Guestlinkd {
            args.extend(["-c".to_string(), conf.display().to_string()]);
        }
        args.extend(self.args.iter().cloned());
        let sock = dir.path().join("qga.sock");
        let stderr_path = dir.path().join("stderr.log");
        let stderr = fs::File::create(&stderr_path).expect("stderr log");
        let mut cmd = Command::new(&bin);
        cmd.args(["-m", "unix-listen", "-p"])
            .arg(&sock)
            .arg("-t")
            .arg(&statedir)
            .args(&args)
            .env("QGA_CONF", &conf)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        Some(QgaAgent {
            kind: self.kind,
            child,
            sock,
            statedir,
            stderr_path,
            frozen: self.frozen,
            allow: self.allow.clone(),
            checked: false,
            dir,
        })
    }
}

/// A running agent; killed on drop if [`QgaAgent::stop`] was not called.
#[derive(Debug)]
pub struct QgaAgent {
    /// Which implementation this is.
    pub kind: QgaAgentKind,
    child: Child,
    /// The unix socket it listens on.
    pub sock: PathBuf,
    /// Its statedir.
    pub statedir: PathBuf,
    stderr_path: PathBuf,
    frozen: bool,
    allow: Option<String>,
    checked: bool,
    dir: tempfile::TempDir,
}

impl QgaAgent {
    /// A builder for `kind`.
    pub fn builder(kind: QgaAgentKind) -> QgaAgentBuilder {
        QgaAgentBuilder {
            kind,
            args: Vec::new(),
            allow: None,
            config: String::new(),
            statedir: None,
            frozen: false,
            env: Vec::new(),
        }
    }
    /// Starts `kind` with extra arguments (`None`: reference peer missing, test skipped).
    pub fn start(kind: QgaAgentKind, extra_args: &[&str]) -> Option<QgaAgent> {
        Self::builder(kind).args(extra_args).start()
    }
    /// Starts qemu-ga (`None`: not installed, test skipped).
    pub fn qemu_ga(extra_args: &[&str]) -> Option<QgaAgent> {
        Self::start(QgaAgentKind::QemuGa, extra_args)
    }
    /// Starts guestlinkd.
    pub fn guestlinkd(extra_args: &[&str]) -> QgaAgent {
        Self::start(QgaAgentKind::Guestlinkd, extra_args).expect("guestlinkd always starts")
    }

    /// A scratch directory private to this agent (removed with it).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// What the agent wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Connects (retrying up to 10 s), resets with 0xFF + guest-sync-delimited and, on the first connection,
    /// verifies that the dangerous commands are disabled.
    pub fn connect(&mut self) -> Client {
        let mut c = match Client::connect(&self.sock, Duration::from_secs(10)) {
            Ok(c) => c,
            Err(e) => {
                let status = self.child.try_wait().ok().flatten();
                panic!(
                    "{}: connect {}: {e} (exited: {status:?}); stderr:\n{}",
                    self.kind.name(),
                    self.sock.display(),
                    self.stderr()
                );
            }
        };
        c.sync();
        if !self.checked {
            let info = c.ok("guest-info", None);
            let cmds = info["supported_commands"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for entry in &cmds {
                let name = entry["name"].as_str().unwrap_or("");
                if DANGEROUS.contains(&name) && entry["enabled"] != Value::Bool(false) {
                    let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
                    panic!("SAFETY: {} left {name} enabled: {entry}", self.kind.name());
                }
            }
            self.checked = true;
        }
        c
    }

    /// Connects without the 0xFF + guest-sync-delimited reset and without the guest-info safety check: for an
    /// agent started with an allow-list (`-a`), where sync and info are themselves disabled. Only allowed when
    /// the allow-list names no dangerous command.
    pub fn connect_raw(&mut self) -> Client {
        let allow = self
            .allow
            .as_deref()
            .expect("connect_raw needs an allow-list agent");
        assert!(
            allow.split(',').all(|c| !DANGEROUS.contains(&c)),
            "allow-list {allow} names a dangerous command"
        );
        Client::connect(&self.sock, Duration::from_secs(10)).expect("connect")
    }

    /// Waits for the process to exit on its own (e.g. after `-D`), up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the agent (drop every [`Client`] first). Normal state: SIGTERM and assert exit status 0 — for qemu-ga
    /// after a 0.2 s pause and with a SIGKILL fallback (its SIGTERM deadlock,
    /// docs/protocol/qga.md#qemu-ga-sigterm-deadlock). Frozen state: SIGKILL (qemu-ga ignores SIGTERM while frozen;
    /// guestlinkd must not thaw the host's filesystems on exit).
    pub fn stop(mut self) {
        let pid = Pid::from_raw(self.child.id() as i32);
        if self.frozen {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = self.child.wait();
            return;
        }
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!(
                "{} exited before stop: {st}; stderr:\n{}",
                self.kind.name(),
                self.stderr()
            );
        }
        if self.kind == QgaAgentKind::QemuGa {
            std::thread::sleep(Duration::from_millis(200));
        }
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        match self.wait_exit(Duration::from_secs(10)) {
            Some(st) => assert!(
                st.success(),
                "{} exit status after SIGTERM: {st}; stderr:\n{}",
                self.kind.name(),
                self.stderr()
            ),
            None => {
                let _ = kill(pid, Signal::SIGKILL);
                let _ = self.child.wait();
                match self.kind {
                    QgaAgentKind::QemuGa => {
                        eprintln!("warning: qemu-ga hung on SIGTERM (known deadlock), killed");
                    }
                    QgaAgentKind::Guestlinkd => {
                        panic!("guestlinkd did not exit within 10 s of SIGTERM")
                    }
                }
            }
        }
    }
}

impl Drop for QgaAgent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `<agent> -D` (dump config and exit) with `conf` as the config file; never connects anywhere.
pub fn dump_config(kind: QgaAgentKind, conf: &str, args: &[&str]) -> Option<Output> {
    let bin = binary(kind)?;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("test-qga-config");
    fs::write(&path, conf).expect("write config");
    let mut cmd = Command::new(bin);
    if kind == QgaAgentKind::Guestlinkd {
        cmd.arg("-c").arg(&path);
    }
    let out = cmd
        .arg("-D")
        .args(args)
        .env("QGA_CONF", &path)
        .stdin(Stdio::null())
        .output()
        .expect("run -D");
    Some(out)
}

/// Whether this agent understands `-a/--allow-rpcs` (qemu-ga ≥ 8.1; Debian 12 ships 7.2).
pub fn supports_allow_rpcs(kind: QgaAgentKind) -> bool {
    match (kind, binary(kind)) {
        (QgaAgentKind::Guestlinkd, _) => true,
        (QgaAgentKind::QemuGa, Some(bin)) => Command::new(bin)
            .arg("--help")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("allow-rpcs"))
            .unwrap_or(false),
        (QgaAgentKind::QemuGa, None) => false,
    }
}

//! Shared harness of the `session_x11_*` tests:
//! a private Xvfb per test, `guestlink-session` started against it, and a fake guestlinkd on a unix socket that
//! speaks `guestlink_protocol::session` (it stands in for guestlinkd's session socket).
//!
//! Missing tools (Xvfb, xclip, xrandr) skip loudly, or fail when `GUESTLINK_REQUIRE_PEERS` is set.

pub use crate::session as common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use guestlink_protocol::session::SessionMessage;

use crate::session::Connection;
pub use common::session_binary;

/// Generous timeout for one expected message on a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(30);

/// Whether the external tools exist; skips (prints) or panics under GUESTLINK_REQUIRE_PEERS.
pub fn tools_present() -> bool {
    common::tools_present(
        &["Xvfb", "xclip", "xrandr"],
        "session.txt",
        "xvfb x11-xserver-utils xclip",
    )
}

/// A private Xvfb, killed on drop.
#[derive(Debug)]
pub struct Xvfb {
    child: Child,
    _config: Option<tempfile::TempDir>,
    /// `:N`.
    pub display: String,
}

impl Xvfb {
    /// Starts `Xvfb -displayfd 1 -nolisten tcp -screen 0 WxHx24`: the server picks a free display number itself
    /// (under its own lock files, so parallel tests and other users never collide) and prints it when ready.
    pub fn start(width: u32, height: u32) -> Xvfb {
        let mut child = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-nolisten",
                "tcp",
                "-noreset",
                "-screen",
                "0",
            ])
            .arg(format!("{width}x{height}x24"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning Xvfb");
        let Some(n) = read_display(&mut child) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("Xvfb did not report a display number");
        };
        Xvfb {
            child,
            _config: None,
            display: format!(":{n}"),
        }
    }

    /// Starts Xorg with the dummy driver (16 RandR 1.2 outputs `DUMMY0..15`, screen up to 32767²), or `None`
    /// (after a loud message; a failure under GUESTLINK_REQUIRE_PEERS) when Xorg or the driver is missing.
    pub fn start_xorg_dummy() -> Option<Xvfb> {
        let xorg = ["/usr/lib/xorg/Xorg", "/usr/bin/Xorg"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let driver = std::path::Path::new("/usr/lib/xorg/modules/drivers/dummy_drv.so").exists();
        let Some(xorg) = xorg.filter(|_| driver) else {
            crate::gate::skip(
                crate::gate::Gate::Peers,
                "Xorg or its dummy driver is missing (apt-get install xserver-xorg-core xserver-xorg-video-dummy)",
            );
            return None;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("xorg.conf");
        std::fs::write(&conf, XORG_DUMMY_CONF).expect("xorg.conf");
        let mut child = Command::new(xorg)
            .args([
                "-displayfd",
                "1",
                "-noreset",
                "-nolisten",
                "tcp",
                "-sharevts",
                "-novtswitch",
            ])
            .arg("-config")
            .arg(&conf)
            .arg("-logfile")
            .arg(dir.path().join("xorg.log"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning Xorg");
        let n = read_display(&mut child);
        let Some(n) = n else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.path().join("xorg.log")).unwrap_or_default();
            panic!("Xorg (dummy) did not start; log:\n{log}");
        };
        Some(Xvfb {
            child,
            _config: Some(dir),
            display: format!(":{n}"),
        })
    }

    /// Stops the server now (the agent loses its display).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A command with DISPLAY set to this server.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("DISPLAY", &self.display);
        c
    }

    /// `xrandr` output.
    pub fn xrandr(&self) -> String {
        let out = self.command("xrandr").output().expect("xrandr");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `xclip -o -selection SEL [-t TARGET]` with a timeout; `None` when xclip failed.
    pub fn paste(&self, selection: &str, target: Option<&str>) -> Option<Vec<u8>> {
        let mut c = self.command("xclip");
        c.args(["-o", "-selection", selection]);
        if let Some(t) = target {
            c.args(["-t", t]);
        }
        common::run(c, None, WAIT)
    }

    /// Polls until TARGETS of `selection` contains `target` (the agent's grab is asynchronous).
    pub fn wait_for_target(&self, selection: &str, target: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(t) = self.paste(selection, Some("TARGETS")) {
                if String::from_utf8_lossy(&t).lines().any(|l| l == target) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{target} never offered on {selection}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `xclip -i -quiet -selection SEL [-t TARGET]` (stays in the foreground owning the selection).
    pub fn copy(&self, selection: &str, target: Option<&str>, data: &[u8]) -> Child {
        let mut c = self.command("xclip");
        c.args(["-i", "-quiet", "-selection", selection]);
        if let Some(t) = target {
            c.args(["-t", t]);
        }
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("xclip -i");
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(data).expect("feeding xclip");
        drop(stdin);
        child
    }
}

/// xorg.conf for the dummy driver: enough video memory for a 4096×2160 virtual screen.
const XORG_DUMMY_CONF: &str = r#"
Section "Device"
    Identifier "dummy"
    Driver "dummy"
    VideoRam 256000
EndSection
Section "Monitor"
    Identifier "mon"
    HorizSync 5.0-1000.0
    VertRefresh 5.0-200.0
EndSection
Section "Screen"
    Identifier "screen"
    Device "dummy"
    Monitor "mon"
    DefaultDepth 24
    SubSection "Display"
        Depth 24
        Virtual 4096 2160
    EndSubSection
EndSection
"#;

/// Reads the display number an X server prints on `-displayfd 1` (within [`WAIT`]).
fn read_display(child: &mut Child) -> Option<String> {
    let mut out = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while let Ok(1) = out.read(&mut b) {
            if b[0] == b'\n' {
                break;
            }
            line.push(b[0]);
        }
        let _ = tx.send(String::from_utf8_lossy(&line).trim().to_owned());
    });
    rx.recv_timeout(WAIT).ok().filter(|n| !n.is_empty())
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fake guestlinkd plus one `guestlink-session` connected to it.
#[derive(Debug)]
pub struct Harness {
    /// Temporary files (socket, runtime dir, downloads, session log).
    pub dir: tempfile::TempDir,
    listener: UnixListener,
    conn: Connection,
    child: Child,
}

impl Harness {
    /// Starts `guestlink-session` on `x` and accepts its connection; the hello exchange is done.
    pub fn start(x: &Xvfb) -> Harness {
        Self::start_in(x, tempfile::tempdir().expect("tempdir"), &[])
    }

    /// [`Harness::start`] in `dir` with extra environment variables.
    pub fn start_in(x: &Xvfb, dir: tempfile::TempDir, env: &[(&str, &Path)]) -> Harness {
        let sock = dir.path().join("session.sock");
        let runtime = dir.path().join("runtime");
        std::fs::create_dir(&runtime).expect("runtime dir");
        // A real XDG_RUNTIME_DIR is private (0700); guestlink-session keeps its instance lock only in such a one.
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::create_dir(dir.path().join("downloads")).expect("downloads");
        let listener = UnixListener::bind(&sock).expect("bind");
        let log = std::fs::File::create(dir.path().join("session.log")).expect("log");
        let child = Command::new(session_binary())
            .arg("--socket")
            .arg(&sock)
            .arg("--download-dir")
            .arg(dir.path().join("downloads"))
            .arg("-v")
            .env("DISPLAY", &x.display)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env_remove("WAYLAND_DISPLAY")
            .envs(env.iter().copied())
            .stderr(log)
            .spawn()
            .expect("spawning guestlink-session");
        let conn = Connection::accept(&listener, WAIT);
        let mut h = Harness {
            dir,
            listener,
            conn,
            child,
        };
        h.handshake();
        h
    }

    fn handshake(&mut self) {
        self.send(&common::hello());
        self.expect("hello", |m| matches!(m, SessionMessage::Hello { .. }));
        self.expect("geometry", |m| matches!(m, SessionMessage::Geometry { .. }));
    }

    /// Closes the connection and accepts the agent's reconnection (hello exchange done again).
    pub fn reconnect(&mut self) -> Duration {
        self.conn.shutdown();
        let t = Instant::now();
        self.conn = Connection::accept(&self.listener, WAIT);
        self.handshake();
        t.elapsed()
    }

    /// The download directory.
    pub fn downloads(&self) -> PathBuf {
        self.dir.path().join("downloads")
    }

    /// The runtime dir given to the agent.
    pub fn runtime(&self) -> PathBuf {
        self.dir.path().join("runtime")
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        common::session_log(self.dir.path())
    }

    /// Sends one frame.
    pub fn send(&mut self, m: &SessionMessage) {
        self.conn.send(m);
    }

    /// Waits for a message matching `pred` (others are skipped); panics with the log after [`WAIT`].
    pub fn expect(&self, what: &str, pred: impl Fn(&SessionMessage) -> bool) -> SessionMessage {
        self.conn.expect(what, WAIT, || self.log(), pred)
    }

    /// Waits (up to [`WAIT`]) for the agent to exit and returns its status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(Instant::now() < deadline, "guestlink-session did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the agent process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        common::stop_session(&mut self.child, self.dir.path());
    }
}

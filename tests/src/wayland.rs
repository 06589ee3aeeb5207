//! Shared harness of the `session_wayland_*` tests:
//! a private headless sway per test, `guestlink-session` started against a Wayland socket, and a fake guestlinkd
//! on a unix socket that speaks `guestlink_protocol::session`.
//!
//! Missing tools skip loudly, or fail when `GUESTLINK_REQUIRE_PEERS` is set.

pub use crate::session as common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{ClipboardType, Selection};

use crate::dbus::DbusDaemon;
use crate::session::Connection;
pub use common::session_binary;

/// Generous timeout for one expected message on a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(60);

/// Whether `tools` exist; skips (prints) or panics under GUESTLINK_REQUIRE_PEERS.
pub fn tools_present(tools: &[&str]) -> bool {
    common::tools_present(tools, "wayland.txt", "sway wl-clipboard")
}

/// Runs `c` with a deadline ([`WAIT`]); `None` when it failed. Panics when it hangs.
pub fn run(c: Command, stdin: Option<&[u8]>) -> Option<Vec<u8>> {
    common::run(c, stdin, WAIT)
}

/// A private headless sway (as uid 65534 when we are root: sway refuses to run as root), killed on drop.
pub struct Sway {
    child: Child,
    /// Holds the runtime dir (its socket) and the config.
    pub dir: tempfile::TempDir,
    /// Wayland clients of this compositor (wl-copy, wl-paste, swaymsg).
    pub wl: Clients,
}

impl std::ops::Deref for Sway {
    type Target = Clients;
    fn deref(&self) -> &Clients {
        &self.wl
    }
}

/// How to run Wayland clients against one compositor.
#[derive(Debug, Clone)]
pub struct Clients {
    /// `XDG_RUNTIME_DIR`.
    pub runtime: PathBuf,
    /// `WAYLAND_DISPLAY`.
    pub display: String,
    /// `SWAYSOCK` (sway only).
    pub ipc: Option<PathBuf>,
}

impl std::fmt::Debug for Sway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sway")
            .field("display", &self.wl.display)
            .finish()
    }
}

impl Sway {
    /// Starts sway with one 1280x800 headless output and waits for its Wayland and IPC sockets.
    pub fn start() -> Sway {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        let rt = dir.path().join("rt");
        let home = dir.path().join("home");
        std::fs::create_dir(&rt).expect("rt");
        std::fs::create_dir(&home).expect("home");
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let conf = dir.path().join("sway.conf");
        std::fs::write(&conf, "output HEADLESS-1 mode 1280x800\nxwayland disable\n").expect("conf");
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let root = nix::unistd::geteuid().is_root();
        let mut c = if root {
            for p in [&rt, &home] {
                std::os::unix::fs::chown(p, Some(65534), Some(65534)).expect("chown");
            }
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "sway"]);
            c
        } else {
            Command::new("sway")
        };
        let log = std::fs::File::create(dir.path().join("sway.log")).expect("log");
        c.arg("-c")
            .arg(&conf)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("XDG_RUNTIME_DIR", &rt)
            .env("HOME", &home)
            .env("WLR_BACKENDS", "headless")
            .env("WLR_LIBINPUT_NO_DEVICES", "1")
            .env("WLR_RENDERER", "pixman")
            .stdout(Stdio::null())
            .stderr(log);
        let mut child = c.spawn().expect("spawning sway");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.path().join("sway.log")).unwrap_or_default();
                panic!("sway exited ({st}):\n{log}");
            }
            let names: Vec<String> = std::fs::read_dir(&rt)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            let display = names
                .iter()
                .find(|n| n.starts_with("wayland-") && !n.ends_with(".lock"));
            let ipc = names.iter().find(|n| n.starts_with("sway-ipc."));
            if let (Some(d), Some(i)) = (display, ipc) {
                let mut c = Command::new("swaymsg");
                c.args(["-t", "get_outputs"]).env("SWAYSOCK", rt.join(i));
                if run(c, None).is_some_and(|o| String::from_utf8_lossy(&o).contains("HEADLESS-1"))
                {
                    return Sway {
                        wl: Clients {
                            runtime: rt.clone(),
                            display: d.clone(),
                            ipc: Some(rt.join(i)),
                        },
                        child,
                        dir,
                    };
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sway did not come up");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Clients {
    /// The runtime dir (XDG_RUNTIME_DIR for clients).
    pub fn runtime(&self) -> PathBuf {
        self.runtime.clone()
    }

    /// A client command with the Wayland environment set.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("XDG_RUNTIME_DIR", &self.runtime)
            .env("WAYLAND_DISPLAY", &self.display)
            .env_remove("DISPLAY");
        if let Some(ipc) = &self.ipc {
            c.env("SWAYSOCK", ipc);
        }
        c
    }

    /// `swaymsg -t get_outputs` (JSON).
    pub fn outputs(&self) -> String {
        let mut c = self.command("swaymsg");
        c.args(["-r", "-t", "get_outputs"]);
        run(c, None)
            .map(|o| String::from_utf8_lossy(&o).into_owned())
            .unwrap_or_default()
    }

    /// `wl-paste [--primary] --no-newline --type MIME`; `None` when it failed.
    pub fn paste(&self, primary: bool, mime: &str) -> Option<Vec<u8>> {
        let mut c = self.command("wl-paste");
        if primary {
            c.arg("--primary");
        }
        c.args(["--no-newline", "--type", mime]);
        run(c, None)
    }

    /// `wl-paste [--primary] --list-types`.
    pub fn types(&self, primary: bool) -> Vec<String> {
        let mut c = self.command("wl-paste");
        if primary {
            c.arg("--primary");
        }
        c.arg("--list-types");
        run(c, None)
            .map(|o| {
                String::from_utf8_lossy(&o)
                    .lines()
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Polls until `mime` is offered.
    pub fn wait_for_type(&self, primary: bool, mime: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.types(primary).iter().any(|t| t == mime) {
            assert!(Instant::now() < deadline, "{mime} never offered");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `wl-copy --foreground [--primary] --type MIME` fed `data` (it owns the selection until killed).
    pub fn copy(&self, primary: bool, mime: &str, data: &[u8]) -> Child {
        let mut c = self.command("wl-copy");
        c.arg("--foreground");
        if primary {
            c.arg("--primary");
        }
        c.args(["--type", mime]);
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("wl-copy");
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(data).expect("feeding wl-copy");
        drop(stdin);
        child
    }
}

impl Sway {
    /// Stops the compositor now (the drop would too).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("sway.log")).unwrap_or_default();
            eprintln!("--- sway log ---\n{log}");
        }
    }
}

/// The fake guestlinkd plus one `guestlink-session` connected to it.
pub struct Harness {
    /// Temporary files (socket, runtime dir, downloads, session log).
    pub dir: tempfile::TempDir,
    conn: Connection,
    child: Child,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").finish_non_exhaustive()
    }
}

impl Harness {
    /// Starts `guestlink-session` with `env` (WAYLAND_DISPLAY, XDG_RUNTIME_DIR, …) and does the hello exchange.
    pub fn start(env: &[(&str, &Path)]) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("session.sock");
        std::fs::create_dir(dir.path().join("downloads")).expect("downloads");
        let listener = UnixListener::bind(&sock).expect("bind");
        let log = std::fs::File::create(dir.path().join("session.log")).expect("log");
        let mut c = Command::new(session_binary());
        c.arg("--socket")
            .arg(&sock)
            .arg("--download-dir")
            .arg(dir.path().join("downloads"))
            .arg("-v")
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("XDG_SESSION_TYPE")
            .env("GUESTLINK_LOG", "debug")
            .stderr(log);
        for (k, v) in env {
            c.env(k, v);
        }
        // The agent keeps its instance lock only in a private XDG_RUNTIME_DIR of its own uid (0700). When the
        // compositor's runtime dir belongs to another uid (sway runs as 65534 under a root test), the agent gets
        // a private one and reaches the compositor through an absolute WAYLAND_DISPLAY.
        let xdg = env
            .iter()
            .find(|(k, _)| *k == "XDG_RUNTIME_DIR")
            .map(|(_, v)| *v);
        let foreign = xdg.is_some_and(|x| {
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(x).expect("XDG_RUNTIME_DIR"))
                != nix::unistd::geteuid().as_raw()
        });
        if let (true, Some(x)) = (foreign, xdg) {
            if let Some((_, wl)) = env.iter().find(|(k, _)| *k == "WAYLAND_DISPLAY") {
                c.env("WAYLAND_DISPLAY", x.join(wl));
            }
            let own = dir.path().join("rt");
            std::fs::create_dir(&own).expect("rt");
            std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700)).expect("chmod");
            c.env("XDG_RUNTIME_DIR", own);
        }
        let child = c.spawn().expect("spawning guestlink-session");
        let conn = Connection::accept(&listener, WAIT);
        let mut h = Harness { dir, conn, child };
        h.send(&common::hello());
        h.expect("hello", |m| matches!(m, SessionMessage::Hello { .. }));
        h
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
}

impl Harness {
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

/// Deterministic pseudo-random bytes (xorshift), so a mismatch is not hidden by repetition.
pub fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// Host grab → wl-paste → the agent requests → the pasted bytes equal the host's. Returns the paste time.
pub fn host_to_guest(
    h: &mut Harness,
    s: &Clients,
    sel: Selection,
    ty: ClipboardType,
    mime: &str,
    data: &[u8],
) -> std::time::Duration {
    let primary = sel == Selection::Primary;
    h.send(&SessionMessage::ClipboardGrab {
        selection: sel,
        types: vec![ty],
    });
    s.wait_for_type(primary, mime);
    let t = Instant::now();
    let paste = std::thread::scope(|sc| {
        let p = sc.spawn(|| s.paste(primary, mime));
        h.expect("clipboard request", |m| {
            matches!(m, SessionMessage::ClipboardRequest { selection, data_type } if *selection == sel && *data_type == ty)
        });
        h.send(&SessionMessage::ClipboardData {
            selection: sel,
            data_type: ty,
            data: data.to_vec(),
        });
        p.join().expect("paste thread")
    });
    let elapsed = t.elapsed();
    let paste = paste.expect("wl-paste failed");
    assert_eq!(paste.len(), data.len(), "pasted length");
    assert!(paste == data, "pasted bytes differ");
    elapsed
}

/// wl-copy → GRAB with `ty` → REQUEST → the data equals what was copied. Returns the request time.
pub fn guest_to_host(
    h: &mut Harness,
    s: &Clients,
    sel: Selection,
    ty: ClipboardType,
    mime: &str,
    data: &[u8],
) -> (std::process::Child, std::time::Duration) {
    let primary = sel == Selection::Primary;
    let copier = s.copy(primary, mime, data);
    h.expect("clipboard grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { selection, types } if *selection == sel && types.contains(&ty))
    });
    let t = Instant::now();
    h.send(&SessionMessage::ClipboardRequest {
        selection: sel,
        data_type: ty,
    });
    let m = h.expect(
        "clipboard data",
        |m| matches!(m, SessionMessage::ClipboardData { selection, .. } if *selection == sel),
    );
    let elapsed = t.elapsed();
    let SessionMessage::ClipboardData {
        data_type,
        data: got,
        ..
    } = m
    else {
        unreachable!()
    };
    assert_eq!(data_type, ty);
    assert_eq!(got.len(), data.len(), "received length");
    assert!(got == data, "received bytes differ");
    (copier, elapsed)
}

/// Stops a child with SIGTERM (so compositors stop their Xwayland), SIGKILL after 10 s.
pub fn terminate(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// KWin 5.27 `--virtual` on a private dbus-daemon, stopped on drop.
///
/// `/usr/bin/kwin_wayland` carries `cap_sys_resource=ep`, which exec refuses where the capability bounding set
/// lacks it (containers), so a copy (cp drops the xattr) named `kwin_wayland` is run instead.
pub struct Kwin {
    procs: Vec<Child>,
    /// Dropped after `drop` has stopped `procs` (fields drop after the body).
    _dbus: DbusDaemon,
    /// Runtime dir, home and the kwin copy.
    pub dir: tempfile::TempDir,
    /// Wayland clients of this compositor.
    pub wl: Clients,
}

impl std::fmt::Debug for Kwin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kwin")
            .field("display", &self.wl.display)
            .finish()
    }
}

impl std::ops::Deref for Kwin {
    type Target = Clients;
    fn deref(&self) -> &Clients {
        &self.wl
    }
}

impl Kwin {
    /// Starts `kwin_wayland --virtual --width 1280 --height 800` and waits until wl-paste can talk to it.
    pub fn start() -> Kwin {
        Kwin::start_outputs(1)
    }

    /// [`Kwin::start`] with `outputs` virtual outputs (`Virtual-0`, `Virtual-1`, …, side by side).
    pub fn start_outputs(outputs: u32) -> Kwin {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = dir.path().join("rt");
        let home = dir.path().join("home");
        let bin = dir.path().join("bin");
        for d in [&rt, &home, &bin] {
            std::fs::create_dir(d).expect("mkdir");
        }
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let kwin = bin.join("kwin_wayland");
        let src = Command::new("sh")
            .args(["-c", "command -v kwin_wayland"])
            .output()
            .expect("which kwin_wayland");
        let src = String::from_utf8_lossy(&src.stdout).trim().to_owned();
        std::fs::copy(&src, &kwin).expect("copying kwin_wayland");
        let bus = format!("unix:path={}", rt.join("bus").display());
        let dbus = DbusDaemon::start(&["--session", "--address", &bus]);
        let log = std::fs::File::create(dir.path().join("kwin.log")).expect("log");
        let procs = vec![Command::new(&kwin)
            .args([
                "--virtual",
                "--width",
                "1280",
                "--height",
                "800",
                "--socket",
                "wayland-kw",
                "--no-lockscreen",
                "--no-global-shortcuts",
                "--no-kactivities",
                "--output-count",
                &outputs.to_string(),
            ])
            .env("XDG_RUNTIME_DIR", &rt)
            .env("HOME", &home)
            .env("DBUS_SESSION_BUS_ADDRESS", &bus)
            .env("KWIN_COMPOSE", "Q")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("DISPLAY")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kwin_wayland")];
        let k = Kwin {
            procs,
            _dbus: dbus,
            wl: Clients {
                runtime: rt.clone(),
                display: "wayland-kw".into(),
                ipc: None,
            },
            dir,
        };
        // KWin sends no selection event while the clipboard is empty, so `wl-paste -l` would block: probe with a
        // copy instead, which needs the whole data-control path.
        let deadline = Instant::now() + WAIT;
        loop {
            if rt.join("wayland-kw").exists() {
                let mut c = k.command("wl-copy");
                c.arg("probe");
                if run(c, None).is_some() && k.paste(false, "text/plain").is_some() {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "kwin did not come up");
            std::thread::sleep(Duration::from_millis(200));
        }
        k
    }
}

impl Drop for Kwin {
    fn drop(&mut self) {
        // Clear the probe's background wl-copy (it exits when its selection is replaced or kwin goes away).
        for p in self.procs.iter_mut().rev() {
            terminate(p);
        }
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("kwin.log")).unwrap_or_default();
            eprintln!("--- kwin log ---\n{log}");
        }
    }
}

//! Helpers shared by the SPICE end-to-end tests: binaries, peer checks, process guard, Xvfb, and the
//! QEMU-chardev-like relay between a guest port socket and `chardev.sock`.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::gate::Gate;

pub mod daemon_peers;
pub mod fake_logind;
pub mod wire_checks;

/// Generous bound for anything on a loaded 2-core machine.
/// Generous: CI machines have 2 cores and run other tests alongside.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// `guestlink` (`$GUESTLINK_BIN` or built).
pub fn guestlink_bin() -> &'static PathBuf {
    crate::bins::guestlink_path()
}

/// `guestlink-session` (`$GUESTLINK_SESSION_BIN` or built).
pub fn session_bin() -> &'static PathBuf {
    crate::bins::session_path()
}

/// guestlinkd as the SPICE tests run it: SPICE side only (`-m none`), no logind, in the foreground, its state
/// in `dir/state` (created here) and the fake uinput at `dir/uinput`, serving `port` and `session_socket`.
pub fn guestlinkd_spice(dir: &Path, port: &Path, session_socket: &Path) -> Command {
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let mut cmd = Command::new(crate::qga_agent::guestlinkd_path());
    cmd.args(["-m", "none", "--foreground", "--no-logind"])
        .arg("-t")
        .arg(dir.join("state"))
        .arg("--spice-path")
        .arg(port)
        .arg("--session-socket")
        .arg(session_socket)
        .arg("--uinput-fake")
        .arg(dir.join("uinput"))
        .stdin(Stdio::null());
    cmd
}

/// Absolute path of a system program.
/// `python3 -c SCRIPT` as `uid` (its own group, no supplementary groups) through setpriv: an attacker that is a
/// real unprivileged user. The system python, not a pyenv shim under /root that such a uid cannot run.
pub fn python_as(uid: u32, script: &str) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(which("python3").expect("python3"))
        .args(["-c", script]);
    c
}

/// The SPICE peers (dbus-daemon, python3 for attackers run as another uid, the reference agents) come from the
/// system directories: see [`crate::gate::system_which`].
pub use crate::gate::system_which as which;

/// `Some(())` when all `names` are installed; else a loud skip (or a panic under GUESTLINK_REQUIRE_PEERS).
pub fn peers(names: &[&str]) -> Option<()> {
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| which(n).is_none())
        .collect();
    crate::gate::require_or_skip(
        Gate::Peers,
        missing.is_empty(),
        &format!("{missing:?} not installed (see .ci/apt.d/spice.txt)"),
    )
    .then_some(())
}

/// Child processes killed (by their own pid) on drop, newest first.
#[derive(Debug, Default)]
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.0.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `f` every 50 ms until true; panics after [`TIMEOUT`].
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts Xvfb 1280x800 on a display it picks itself (`-displayfd`, no race between parallel tests); returns `:N`.
pub fn xvfb(procs: &mut Procs) -> String {
    let mut child = Command::new("Xvfb")
        .args([
            "-displayfd",
            "1",
            "-screen",
            "0",
            "1280x800x24",
            "-nolisten",
            "tcp",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("Xvfb");
    let mut out = child.stdout.take().expect("Xvfb stdout");
    procs.0.push(child);
    // Xvfb writes "N\n" once it accepts connections.
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b).map(|n| n == 1).unwrap_or(false) && b[0] != b'\n' {
        line.push(b[0]);
    }
    let n = String::from_utf8_lossy(&line).trim().to_owned();
    assert!(
        !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()),
        "Xvfb did not report a display"
    );
    format!(":{n}")
}

type Slot = Arc<Mutex<Option<UnixStream>>>;

/// Relays the guest's port (connections accepted on `guest_l`) to one host client at a time on `host_l`, like
/// QEMU's `-chardev socket,server=on`: guest→host bytes without a client are dropped. Returns a flag set while
/// the guest side is connected.
pub fn start_relay(guest_l: UnixListener, host_l: UnixListener) -> Arc<Mutex<bool>> {
    let guest: Slot = Arc::default();
    let host: Slot = Arc::default();
    let connected = Arc::new(Mutex::new(false));
    let (g, h, c) = (guest.clone(), host.clone(), connected.clone());
    std::thread::spawn(move || {
        for s in guest_l.incoming() {
            let Ok(s) = s else { return };
            forward(s, &g, &h, Some(&c));
        }
    });
    std::thread::spawn(move || {
        for s in host_l.incoming() {
            let Ok(s) = s else { return };
            forward(s, &host, &guest, None);
        }
    });
    connected
}

/// One side of the relay: `s` is published in `own` (then `connected` set) while connected, and what it sends goes
/// to the stream in `other` (dropped when there is none).
fn forward(mut s: UnixStream, own: &Slot, other: &Slot, connected: Option<&Mutex<bool>>) {
    *own.lock().unwrap() = s.try_clone().ok();
    if let Some(c) = connected {
        *c.lock().unwrap() = true;
    }
    let mut buf = vec![0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(o) = other.lock().unwrap().as_mut() {
                    let _ = o.write_all(&buf[..n]);
                }
            }
        }
    }
    *own.lock().unwrap() = None;
    if let Some(c) = connected {
        *c.lock().unwrap() = false;
    }
}

/// A deterministic pseudo-random payload.
pub fn payload(len: usize) -> Vec<u8> {
    let mut x = 0x1234_5678u32;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A started guest side, seen from the host: `guestlink --spice-socket <spice_socket>` and X clients on `display`.
/// Dropping it drops `dir` first, then kills `procs`.
#[derive(Debug)]
pub struct SpiceEnv {
    /// The test's files (sockets, logs, payloads).
    pub dir: tempfile::TempDir,
    /// The guest's X display.
    pub display: String,
    /// What `--spice-socket` gets: the relay's socket or the host end of a socat pty pair.
    pub spice_socket: PathBuf,
    /// The guest-side processes.
    pub procs: Procs,
}

impl SpiceEnv {
    /// Runs `guestlink --spice-socket … <args>` to completion.
    pub fn guestlink(&self, args: &[&str]) -> Output {
        Command::new(guestlink_bin())
            .arg("--spice-socket")
            .arg(&self.spice_socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run guestlink")
    }

    /// `prog` on the guest's display.
    pub fn x(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env("DISPLAY", &self.display);
        c
    }

    /// Host → guest clipboard: `guestlink clipboard set` serves one paste; `xclip -o` in the guest prints `text`.
    pub fn clipboard_host_to_guest(&self, text: &str) {
        let mut setter = Command::new(guestlink_bin())
            .arg("--spice-socket")
            .arg(&self.spice_socket)
            .args([
                "clipboard",
                "set",
                text,
                "--loops",
                "1",
                "--serve-timeout",
                "60",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut pasted = String::new();
        wait_for("xclip -o to paste the host text", || {
            let o = self
                .x("xclip")
                .args(["-o", "-selection", "clipboard"])
                .output()
                .unwrap();
            pasted = String::from_utf8_lossy(&o.stdout).into_owned();
            // Until the host's grab has reached the guest, a paste can still see the previous owner's text.
            o.status.success() && pasted == text
        });
        assert_eq!(pasted, text);
        let st = setter.wait().unwrap();
        assert!(st.success(), "clipboard set: {st}");
    }

    /// Guest → host clipboard: `xclip -i` owns the guest clipboard with `text`; `guestlink clipboard get` reads it.
    /// `on_slow` runs once, after 200 unsuccessful polls (to print the guest's logs).
    ///
    /// Each `guestlink` run is a new SPICE client. The reference spice-vdagentd forgets that the guest owns the
    /// clipboard when it handles a client as "new" (caps with request=1 after an earlier client), and answers
    /// requests with an empty clipboard until the guest grabs again — a real spice-gtk stays connected and sees the
    /// next grab. So after a run of empty answers the guest copies again (a fresh `xclip -i`), which is what a user
    /// would do; the data must still arrive intact through the real agent.
    pub fn clipboard_guest_to_host(&self, text: &str, on_slow: impl Fn()) {
        let own = || {
            let mut xclip = self
                .x("xclip")
                .args(["-i", "-quiet", "-selection", "clipboard"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            xclip
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            xclip
        };
        let mut xclip = own();
        let deadline = Instant::now() + TIMEOUT;
        let mut tries = 0;
        // To stdout, then with `-o FILE`: the whole text under the name and no temp sibling left behind.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("paste.txt");
        for to_file in [false, true] {
            loop {
                tries += 1;
                if tries == 200 {
                    on_slow();
                }
                let (o, got) = if to_file {
                    let o = self.guestlink(&["clipboard", "get", "-o", out.to_str().unwrap()]);
                    (o, std::fs::read_to_string(&out).unwrap_or_default())
                } else {
                    let o = self.guestlink(&["clipboard", "get"]);
                    let got = String::from_utf8_lossy(&o.stdout).into_owned();
                    (o, got)
                };
                if o.status.success() && got == text {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for clipboard get{} to return the guest text after {tries} tries; last \
                     run: {}\nstdout: {}\nstderr: {}",
                    if to_file { " -o" } else { "" },
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                if tries % 20 == 0 {
                    let _ = xclip.kill();
                    let _ = xclip.wait();
                    xclip = own();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["paste.txt"],
            "only the pasted file, no temp sibling"
        );
        let _ = xclip.kill();
        let _ = xclip.wait();
    }

    /// `guestlink resize 1024x768`, then waits for xrandr in the guest to show it.
    pub fn resize_to_1024x768(&self) {
        ok(&self.guestlink(&["resize", "1024x768"]));
        wait_for("xrandr to show 1024x768", || {
            let o = self.x("xrandr").output().unwrap();
            String::from_utf8_lossy(&o.stdout).contains("current 1024 x 768")
        });
    }
}

/// The stdout of a `guestlink` run that must have succeeded.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "guestlink failed: {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

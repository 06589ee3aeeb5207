//! Helpers shared by the `session_x11_*` and `session_wayland_*` harnesses ([`crate::x11`], [`crate::wayland`]):
//! the peer check, the
//! `guestlink-session` binary, and the fake guestlinkd's end of the session socket.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::gate::Gate;
use guestlink_protocol::session::{encode, FrameDecoder, SessionMessage};

/// Whether `tools` exist; skips (prints `apt_hint`) or panics under GUESTLINK_REQUIRE_PEERS (naming the
/// `.ci/apt.d/<apt_list>` file that installs them).
pub fn tools_present(tools: &[&str], apt_list: &str, apt_hint: &str) -> bool {
    crate::gate::require_tools(
        Gate::Peers,
        tools,
        &format!("apt-get install {apt_hint}; CI installs .ci/apt.d/{apt_list}"),
    )
}

/// `guestlink-session`: `$GUESTLINK_SESSION`, else built once per test process.
pub fn session_binary() -> &'static PathBuf {
    crate::bins::session_path()
}

/// Runs `c` (stdout captured, stderr discarded, `stdin` fed or null) with a deadline of `wait`; `None` when it
/// failed. Panics when it hangs.
pub fn run(mut c: Command, stdin: Option<&[u8]>, wait: Duration) -> Option<Vec<u8>> {
    let mut child = c
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    if let Some(data) = stdin {
        let mut i = child.stdin.take().expect("piped");
        i.write_all(data).expect("stdin");
    }
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + wait;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let data = reader.join().expect("reader");
            return status.success().then_some(data);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{c:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The agent's log in the harness directory `dir` so far.
pub fn session_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("session.log")).unwrap_or_default()
}

/// The hello the fake guestlinkd sends first.
pub fn hello() -> SessionMessage {
    SessionMessage::Hello {
        version: 1,
        session_id: "test".into(),
        capabilities: Vec::new(),
    }
}

/// Kills the agent and, when the test is failing, prints its log (the harnesses' `Drop`).
pub fn stop_session(child: &mut Child, dir: &Path) {
    let _ = child.kill();
    let _ = child.wait();
    if std::thread::panicking() {
        eprintln!("--- guestlink-session log ---\n{}", session_log(dir));
    }
}

/// The fake guestlinkd's end of one session-socket connection: a writer and the decoded frames it receives.
#[derive(Debug)]
pub struct Connection {
    stream: UnixStream,
    rx: Receiver<SessionMessage>,
}

impl Connection {
    /// Accepts one connection (within `wait`) and starts a reader thread decoding frames.
    pub fn accept(listener: &UnixListener, wait: Duration) -> Connection {
        listener.set_nonblocking(true).expect("nonblocking");
        let deadline = Instant::now() + wait;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(
                        Instant::now() < deadline,
                        "guestlink-session never connected"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        stream.set_nonblocking(false).expect("blocking");
        let mut rd = stream.try_clone().expect("clone");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut dec = FrameDecoder::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = match rd.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                for m in dec.feed(&buf[..n]) {
                    match m {
                        Ok(m) => {
                            if tx.send(m).is_err() {
                                return;
                            }
                        }
                        Err(e) => panic!("bad frame from guestlink-session: {e}"),
                    }
                }
            }
        });
        Connection { stream, rx }
    }

    /// Sends one frame.
    pub fn send(&mut self, m: &SessionMessage) {
        let f = encode(m).expect("encode");
        self.stream.write_all(&f).expect("write to the agent");
    }

    /// Waits up to `wait` for a message matching `pred` (others are skipped); panics with `log()` after that.
    pub fn expect(
        &self,
        what: &str,
        wait: Duration,
        log: impl Fn() -> String,
        pred: impl Fn(&SessionMessage) -> bool,
    ) -> SessionMessage {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) if pred(&m) => return m,
                Ok(_) => {}
                Err(_) => panic!("no {what} from guestlink-session; log:\n{}", log()),
            }
        }
    }

    /// Shuts the connection down (the agent sees EOF).
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// A fake sysfs root for `GUESTLINK_SESSION_SYSFS`: one DRM card `card0` at PCI `0000:00:02.0` (a virtio-gpu,
/// vendor 0x1af4) whose connectors are `connectors`, in this DRM order (`connector_id` 1, 2, …), laid out as the
/// kernel does (`class/drm/card0` → `devices/pci0000:00/0000:00:02.0/drm/card0`, `card0-<name>` beside it). A
/// fake because the virtual display servers of these tests (Xorg dummy, headless sway) have no DRM device: what
/// it lets a test prove is the address → card → connector → output-name path, not a real kernel's sysfs.
pub fn fake_drm_sysfs(dir: &Path, connectors: &[&str]) -> PathBuf {
    use std::os::unix::fs::symlink;
    let root = dir.join("sysfs");
    let dev = root.join("devices/pci0000:00/0000:00:02.0");
    let card = dev.join("drm/card0");
    let drm = root.join("class/drm");
    std::fs::create_dir_all(&card).expect("fake sysfs");
    std::fs::create_dir_all(&drm).expect("fake sysfs");
    std::fs::write(dev.join("vendor"), "0x1af4\n").expect("vendor");
    std::fs::write(dev.join("device"), "0x1050\n").expect("device");
    symlink(&dev, card.join("device")).expect("device link");
    symlink(&card, drm.join("card0")).expect("card link");
    for (i, name) in connectors.iter().enumerate() {
        let c = card.join(format!("card0-{name}"));
        std::fs::create_dir_all(&c).expect("connector");
        std::fs::write(c.join("connector_id"), format!("{}\n", i + 1)).expect("connector_id");
        symlink(&c, drm.join(format!("card0-{name}"))).expect("connector link");
    }
    root
}

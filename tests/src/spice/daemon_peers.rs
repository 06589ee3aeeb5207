//! The peers of a black-box guestlinkd SPICE test: the daemon process, the host end of the port (a unix socket
//! standing in for `com.redhat.spice.0`, played like spice-server/spice-gtk) and a minimal session agent
//! speaking `protocol::session`. Shared by `spice_daemon.rs` and `spice_daemon_streaming.rs`.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use guestlink_protocol::session::{self, FrameDecoder, GeometryMonitor, SessionMessage};
use guestlink_protocol::vdagent::{
    encode_message, encode_raw_message, Capabilities, ChunkMode, FileXferStatus, Message,
    MonitorConfig, MonitorMm, MonitorsConfig, Port, Reassembler, ReassemblerConfig, ReplyResult,
    WireFormat,
};

/// Bound for each wait on the daemon (as `spice_daemon.rs` always used). Deliberately the same name as
/// [`super::TIMEOUT`]: a test file imports one of them, never both by glob.
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// The capabilities spice-gtk announces.
pub const SPICE_GTK_CAPS: u32 = 0x0003_5077;

/// The guestlinkd process, killed on drop.
#[derive(Debug)]
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Daemon {
    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

/// The host end of the port.
#[derive(Debug)]
pub struct Host {
    /// The port connection.
    pub s: UnixStream,
    /// Chunk reassembly of the guest's messages.
    pub reasm: Reassembler,
    /// Messages reassembled but not yet taken.
    pub queue: std::collections::VecDeque<(Port, guestlink_protocol::vdagent::RawMessage)>,
    /// The wire format both sides' capabilities agree on.
    pub wire: WireFormat,
}

impl Host {
    /// Accepts guestlinkd's port connection on `l`.
    pub fn accept(l: &UnixListener) -> Host {
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                    return Host {
                        s,
                        reasm: Reassembler::new(ReassemblerConfig::host_side()),
                        queue: Default::default(),
                        wire: WireFormat::default(),
                    };
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("guestlinkd never opened the port: {e}"),
            }
        }
    }

    /// Sends one message to the guest on `port`.
    pub fn send(&mut self, port: Port, m: &Message) {
        let b = encode_message(port, m, self.wire, ChunkMode::Split).unwrap();
        self.s.write_all(&b).unwrap();
    }

    /// The next message, or `None` on EOF / after `wait`.
    pub fn recv_within(&mut self, wait: Duration) -> Option<(Port, Message)> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some((p, raw)) = self.queue.pop_front() {
                return Some((
                    p,
                    raw.decode(self.wire)
                        .expect("guestlinkd sent a bad message"),
                ));
            }
            if Instant::now() > deadline {
                return None;
            }
            self.pump()?;
        }
    }

    /// Reads the port once (up to the 200 ms read timeout) into the message queue: bytes read (0 on a timeout),
    /// `None` at EOF or on an error.
    pub fn pump(&mut self) -> Option<usize> {
        let mut buf = vec![0u8; 65536];
        match self.s.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => {
                for ev in self.reasm.feed(&buf[..n]) {
                    self.queue
                        .push_back(ev.expect("guestlinkd sent bad chunks"));
                }
                Some(n)
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                Some(0)
            }
            Err(_) => None,
        }
    }

    /// The next message from the guest (any port); panics after the timeout.
    pub fn recv(&mut self) -> (Port, Message) {
        self.recv_within(TIMEOUT)
            .expect("no message from guestlinkd")
    }

    /// Skips messages until one matches.
    pub fn expect<T>(&mut self, what: &str, mut f: impl FnMut(Port, &Message) -> Option<T>) -> T {
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if let Some((p, m)) = self.recv_within(Duration::from_secs(1)) {
                if let Some(t) = f(p, &m) {
                    return t;
                }
                eprintln!("(skipping {m:?} while waiting for {what})");
            }
        }
        panic!("timed out waiting for {what}");
    }

    /// The opening sequence: our caps request=1 arrive, the client answers like spice-gtk.
    pub fn handshake(&mut self) -> Capabilities {
        let (p, m) = self.recv();
        let Message::AnnounceCapabilities { request, caps } = m else {
            panic!("first message is not ANNOUNCE_CAPABILITIES: {m:?}");
        };
        assert_eq!(p, Port::Client);
        assert!(request, "guestlinkd must ask for the client's caps");
        let client = Capabilities::from_words(&[SPICE_GTK_CAPS]);
        self.send(
            Port::Client,
            &Message::AnnounceCapabilities {
                request: true,
                caps: client.clone(),
            },
        );
        let (_, m) = self.recv();
        assert!(
            matches!(m, Message::AnnounceCapabilities { request: false, .. }),
            "caps request=1 must be answered with request=0: {m:?}"
        );
        self.wire = WireFormat::negotiate(&client, &caps);
        caps
    }
}

/// The in-test session agent.
#[derive(Debug)]
pub struct SessionAgent {
    /// The session socket.
    pub s: UnixStream,
    /// Frames read so far.
    pub dec: FrameDecoder,
    /// Messages decoded but not yet taken.
    pub queue: std::collections::VecDeque<SessionMessage>,
}

impl SessionAgent {
    /// Connects to guestlinkd's session socket at `path`.
    pub fn connect(path: &Path) -> SessionAgent {
        let deadline = Instant::now() + TIMEOUT;
        let s = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("session socket: {e}"),
            }
        };
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        SessionAgent {
            s,
            dec: FrameDecoder::new(),
            queue: Default::default(),
        }
    }

    /// Sends one message to guestlinkd.
    pub fn send(&mut self, m: &SessionMessage) {
        self.s.write_all(&session::encode(m).unwrap()).unwrap();
    }

    /// The next message from guestlinkd, or `None` after `wait`.
    pub fn recv_within(&mut self, wait: Duration) -> Option<SessionMessage> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(m) = self.queue.pop_front() {
                return Some(m);
            }
            if Instant::now() > deadline {
                return None;
            }
            let mut buf = vec![0u8; 65536];
            match self.s.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => {
                    for r in self.dec.feed(&buf[..n]) {
                        self.queue.push_back(r.expect("bad frame from guestlinkd"));
                    }
                }
                Err(_) => {}
            }
        }
    }

    /// The first message for which `f` gives `Some`, skipping others; panics naming `what` after the timeout.
    pub fn expect<T>(&mut self, what: &str, mut f: impl FnMut(&SessionMessage) -> Option<T>) -> T {
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if let Some(m) = self.recv_within(Duration::from_secs(1)) {
                if let Some(t) = f(&m) {
                    return t;
                }
                eprintln!("(agent skipping {:?} while waiting for {what})", m.kind());
            }
        }
        panic!("agent timed out waiting for {what}");
    }

    /// Answers guestlinkd's hello and reports one display, as a real agent does on connect.
    pub fn hello_and_geometry(&mut self) {
        self.hello_caps_and_geometry();
    }

    /// Like [`SessionAgent::hello_and_geometry`]; returns the capabilities listed in the daemon's hello.
    pub fn hello_caps_and_geometry(&mut self) -> Vec<String> {
        let caps = self.expect("hello", |m| match m {
            SessionMessage::Hello { capabilities, .. } => Some(capabilities.clone()),
            _ => None,
        });
        self.reply_hello_and_geometry();
        caps
    }

    /// Answers guestlinkd's hello and reports one 1280x800 monitor (what makes the port open for this agent).
    pub fn reply_hello_and_geometry(&mut self) {
        self.send(&SessionMessage::Hello {
            version: session::SESSION_PROTOCOL_VERSION,
            session_id: String::new(),
            capabilities: vec![],
        });
        self.send(&SessionMessage::Geometry {
            monitors: vec![GeometryMonitor {
                display_id: 0,
                x: 0,
                y: 0,
                width: 1280,
                height: 800,
            }],
        });
    }
}

/// A guestlinkd on a temporary directory: port listener, session socket, `--uinput-fake` file.
#[derive(Debug)]
pub struct Setup {
    /// The test's files.
    pub dir: tempfile::TempDir,
    /// The guestlinkd under test.
    pub daemon: Daemon,
    /// Where guestlinkd connects as its SPICE port.
    pub listener: UnixListener,
}

impl Setup {
    /// Starts guestlinkd (`--no-logind`, fake uinput) on a fresh directory.
    pub fn start() -> Setup {
        Setup::start_with(&[])
    }

    /// Starts guestlinkd with extra environment variables.
    pub fn start_with(env: &[(&str, &str)]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let vport = dir.path().join("vport.sock");
        let listener = UnixListener::bind(&vport).unwrap();
        let child = super::guestlinkd_spice(dir.path(), &vport, &dir.path().join("session.sock"))
            .env("GUESTLINK_LOG", "debug")
            .envs(env.iter().copied())
            .spawn()
            .expect("start guestlinkd");
        Setup {
            dir,
            daemon: Daemon(child),
            listener,
        }
    }

    /// The session socket agents connect to.
    pub fn session_socket(&self) -> std::path::PathBuf {
        self.dir.path().join("session.sock")
    }
}

/// A MONITORS_CONFIG of one `w`×`h` monitor, with PHYSICAL_SIZE (300×200 mm) if `physical`.
pub fn monitors(physical: bool, w: u32, h: u32) -> Message {
    Message::MonitorsConfig(MonitorsConfig {
        flags: 1,
        monitors: vec![MonitorConfig {
            height: h,
            width: w,
            depth: 32,
            x: 0,
            y: 0,
        }],
        physical_sizes: physical.then(|| {
            vec![MonitorMm {
                height: 200,
                width: 300,
            }]
        }),
    })
}

/// A successful REPLY to a MONITORS_CONFIG.
pub fn is_reply_ok(m: &Message) -> bool {
    matches!(
        m,
        Message::Reply {
            message_type: 2,
            result: ReplyResult::Success
        }
    )
}

/// The FILE_XFER_STATUS of transfer `want`, if `m` is one.
pub fn status_of(m: &Message, want: u32) -> Option<FileXferStatus> {
    match m {
        Message::FileXferStatus(s) if s.id == want => Some(s.clone()),
        _ => None,
    }
}

/// Writes a raw message of `msg_type` with `payload` to the port, with chunk port `port`.
pub fn send_raw(host: &mut Host, port: u32, msg_type: u32, payload: &[u8]) {
    let b = encode_raw_message(Port::Client, msg_type, payload, ChunkMode::Split).unwrap();
    let mut b = b;
    // Patch the port of every chunk header (only single-chunk payloads are used with port 2 here).
    b[0..4].copy_from_slice(&port.to_le_bytes());
    host.s.write_all(&b).unwrap();
}

/// The daemon still serves: a monitors config gets its REPLY.
pub fn still_serving(host: &mut Host) {
    host.send(Port::Client, &monitors(false, 1024, 768));
    host.expect("REPLY after hostile input", |_, m| {
        is_reply_ok(m).then_some(())
    });
}

/// True when the host's end of the port reached EOF (data read meanwhile is kept for `recv_within`).
pub fn port_closed(host: &mut Host) -> bool {
    let mut b = vec![0u8; 65536];
    match host.s.read(&mut b) {
        Ok(0) => true,
        Ok(n) => {
            for ev in host.reasm.feed(&b[..n]) {
                host.queue
                    .push_back(ev.expect("guestlinkd sent bad chunks"));
            }
            false
        }
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

//! Issue 16 finding 4, black-box: a user with any logind session (here an ssh-like tty session) must not stall
//! the active desktop's SPICE traffic. guestlinkd runs with logind (a fake `org.freedesktop.login1` on a private
//! dbus-daemon, tests/src/spice/fake_logind.rs, since systemd-logind cannot run here): seat0's active session "c1"
//! is the x11 desktop of the in-test agent, "c2" a tty session of uid 65534. The attacker, a real uid-65534
//! process in c2, connects to the session socket, sends hundreds of CLIPBOARD_REQUEST frames (each answered with
//! an empty CLIPBOARD_DATA) and never reads. Meanwhile every MOUSE_STATE the host sends must reach the
//! `--uinput-fake` file within [`MOUSE_DEADLINE`], a host clipboard grab/request/data with the active agent must
//! complete, the attacker's connection must be closed by guestlinkd, and its fd count must not grow. Before the
//! fix the port stayed unread for the 30 s stall timeout and the attacker's connection was never closed.
//!
//! Run: `cargo test -p tests --test spice_daemon_nonactive` (as root: the attacker drops to uid
//! 65534 with setpriv). Needs dbus-daemon, python3 and setpriv (.ci/apt.d/spice.txt).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use guestlink_tests::spice::fake_logind;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{ChildStdout, Stdio};
use std::time::{Duration, Instant};

use fake_logind::{FakeLogind, FakeSessionSpec};
use guestlink_protocol::session::{self, SessionMessage};
use guestlink_protocol::vdagent::{ClipboardType, Message, MessageType, Port, Selection};
use spice_common::daemon_peers::{send_raw, Daemon, Host, SessionAgent, TIMEOUT};

/// The unprivileged attacker.
const NOBODY: u32 = 65534;
/// Clipboard requests the attacker sends: more answers than its socket buffer (about 280 small frames with the
/// default 208 KiB) and its 256-frame queue hold, so a backlog forms; the old code stalled the port for such a
/// backlog, but dropped the agent at once above 1024 backlog frames, so the flood stays well under that.
const FLOOD: usize = 1200;
/// How long one MOUSE_STATE may take to reach the uinput file (the old code: up to the 30 s stall timeout).
const MOUSE_DEADLINE: Duration = Duration::from_secs(2);
/// How long the host's clipboard round trip with the active agent may take.
const CLIPBOARD_DEADLINE: Duration = Duration::from_secs(5);
/// For how long the host keeps moving the mouse after the flood, in each round.
const MOUSE_WINDOW: Duration = Duration::from_secs(3);
/// How long the attacker waits for guestlinkd to close its connection.
const HANGUP_WAIT_S: u32 = 20;

/// Reads its flood from stdin, connects as uid 65534, sends it and never reads; prints "flooded <how>", then,
/// without reading, waits for guestlinkd to hang up: "closed eof N" / "closed reset N" (the connection was ended:
/// EOF or ECONNRESET once the N bytes guestlinkd had already sent are drained) or "open".
const ATTACKER: &str = r#"
import select, socket, sys, time
data = sys.stdin.buffer.read()
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
try:
    s.sendall(data)
    how = "all-sent"
except OSError as e:
    how = type(e).__name__
print("flooded", how, flush=True)
p = select.poll()
p.register(s, select.POLLRDHUP)
deadline = time.monotonic() + float(sys.argv[2])
hup = False
while not hup and time.monotonic() < deadline:
    for _, ev in p.poll(200):
        if ev & (select.POLLHUP | select.POLLRDHUP | select.POLLERR):
            hup = True
if not hup:
    print("open", flush=True)
    sys.exit(0)
s.settimeout(5)
got = 0
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += len(b)
    print("closed eof", got, flush=True)
except ConnectionResetError:
    print("closed reset", got, flush=True)
"#;

/// Open descriptors of process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// The `struct input_event` records of the fake uinput file from byte `from` on: (type, code, value).
fn input_records(file: &Path, from: usize) -> Vec<(u16, u16, i32)> {
    let b = std::fs::read(file).unwrap_or_default();
    b.get(from..)
        .unwrap_or_default()
        .chunks_exact(24)
        .map(|r| {
            (
                u16::from_ne_bytes([r[16], r[17]]),
                u16::from_ne_bytes([r[18], r[19]]),
                i32::from_ne_bytes([r[20], r[21], r[22], r[23]]),
            )
        })
        .collect()
}

/// Sends MOUSE_STATE (`x`, `y`, no buttons) on the server port and waits for ABS_X `x` and ABS_Y `y` in the
/// uinput file after byte `*from`; returns how long that took (or panics after [`MOUSE_DEADLINE`]).
fn mouse_reaches_uinput(
    host: &mut Host,
    file: &Path,
    from: &mut usize,
    x: u32,
    y: u32,
) -> Duration {
    let mut m = Vec::new();
    for v in [x, y, 0] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m.push(0);
    let t0 = Instant::now();
    send_raw(host, 2, MessageType::MouseState.as_u32(), &m);
    loop {
        let recs = input_records(file, *from);
        let got = |code: u16, v: u32| recs.contains(&(3, code, v as i32));
        if got(0, x) && got(1, y) {
            *from += recs.len() * 24;
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < MOUSE_DEADLINE,
            "MOUSE_STATE ({x}, {y}) did not reach uinput within {MOUSE_DEADLINE:?} while a non-active agent \
             flooded clipboard requests (the port is not read?)"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The host grabs the clipboard, the active agent requests it, the host's data arrives: within
/// [`CLIPBOARD_DEADLINE`].
fn host_clipboard_round_trip(host: &mut Host, agent: &mut SessionAgent, serial: u32) -> Duration {
    let t0 = Instant::now();
    host.send(
        Port::Client,
        &Message::ClipboardGrab {
            selection: Selection::Clipboard,
            serial: Some(serial),
            types: vec![ClipboardType::Utf8Text],
        },
    );
    agent.expect("the host's grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { types, .. } if types == &[ClipboardType::Utf8Text])
            .then_some(())
    });
    agent.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    });
    host.expect("the agent's request", |_, m| {
        matches!(m, Message::ClipboardRequest { .. }).then_some(())
    });
    let text = format!("host text {serial}").into_bytes();
    host.send(
        Port::Client,
        &Message::Clipboard {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: text.clone(),
        },
    );
    agent.expect("the host's data", |m| match m {
        SessionMessage::ClipboardData { data, .. } if data == &text => Some(()),
        _ => None,
    });
    let took = t0.elapsed();
    assert!(
        took < CLIPBOARD_DEADLINE,
        "the host's clipboard round trip with the active agent took {took:?}"
    );
    took
}

/// The next line the attacker printed.
fn attacker_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().to_owned()
}

#[test]
fn a_non_active_agent_flooding_clipboard_requests_never_stalls_the_desktop() {
    if spice_common::peers(&["dbus-daemon", "python3", "setpriv"]).is_none() {
        return;
    }
    let t_start = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // The attacker must reach the 0666 session socket inside.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let logind = FakeLogind::start(
        dir.path(),
        &[
            FakeSessionSpec {
                id: "c1",
                uid: 1000,
                kind: "x11",
                class: "user",
            },
            // An ssh login of uid 65534.
            FakeSessionSpec {
                id: "c2",
                uid: NOBODY,
                kind: "tty",
                class: "user",
            },
        ],
        "c1",
    );
    // The in-test agent (root, which may serve any session) is the desktop's agent.
    logind.map_pid(std::process::id(), "c1");

    let vport = dir.path().join("vport.sock");
    let listener = UnixListener::bind(&vport).unwrap();
    let socket = dir.path().join("session.sock");
    let uinput = dir.path().join("uinput");
    let child = logind
        .guestlinkd(dir.path(), &vport, &socket)
        .env("GUESTLINK_LOG", "info")
        .spawn()
        .expect("start guestlinkd");
    let mut daemon = Daemon(child);
    let daemon_pid = daemon.0.id();

    let mut agent = SessionAgent::connect(&socket);
    let session_id = agent.expect("hello", |m| match m {
        SessionMessage::Hello { session_id, .. } => Some(session_id.clone()),
        _ => None,
    });
    assert_eq!(
        session_id, "c1",
        "guestlinkd did not place the agent through the fake logind"
    );
    agent.reply_hello_and_geometry();
    // The port opens only for the active session's agent: this also proves seat0's ActiveSession was read.
    let mut host = Host::accept(&listener);
    host.handshake();
    agent.expect("client-connected", |m| {
        matches!(m, SessionMessage::ClientConnected).then_some(())
    });
    let mut from = 0;
    let first = mouse_reaches_uinput(&mut host, &uinput, &mut from, 10, 10);
    eprintln!("mouse before any attack: {first:?}");
    let fds_before = fd_count(daemon_pid);

    let mut flood = session::encode(&SessionMessage::Hello {
        version: session::SESSION_PROTOCOL_VERSION,
        session_id: String::new(),
        capabilities: vec![],
    })
    .unwrap();
    let request = session::encode(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    })
    .unwrap();
    for _ in 0..FLOOD {
        flood.extend_from_slice(&request);
    }
    let empty_answer = session::encode(&SessionMessage::ClipboardData {
        selection: Selection::Clipboard,
        data_type: ClipboardType::None,
        data: Vec::new(),
    })
    .unwrap()
    .len();

    // Twice: the finding was "repeatable at once", and a leaked connection would show as fd growth.
    for round in 0..2u32 {
        let mut attacker = spice_common::Procs::default();
        let mut child = spice_common::python_as(NOBODY, ATTACKER)
            .arg(&socket)
            .arg(HANGUP_WAIT_S.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the attacker");
        // setpriv execs python: this pid is the attacker's, placed in the tty session c2 before it connects.
        logind.map_pid(child.id(), "c2");
        let mut stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        attacker.0.push(child);
        stdin.write_all(&flood).unwrap();
        drop(stdin);
        let flooded = attacker_line(&mut out);
        assert!(flooded.starts_with("flooded"), "attacker: {flooded:?}");

        // The host keeps moving the mouse: every position must arrive promptly.
        let t0 = Instant::now();
        let (mut n, mut slowest) = (0u32, Duration::ZERO);
        while t0.elapsed() < MOUSE_WINDOW {
            let x = 100 + round * 400 + n;
            slowest = slowest.max(mouse_reaches_uinput(
                &mut host,
                &uinput,
                &mut from,
                x,
                300 + n,
            ));
            n += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        let clip = host_clipboard_round_trip(&mut host, &mut agent, round);

        let ended = attacker_line(&mut out);
        assert!(
            ended.starts_with("closed"),
            "the non-active agent's connection was not closed within {HANGUP_WAIT_S} s: {ended:?}"
        );
        // It was served before being dropped (not refused at connect): its hello and empty answers, at least
        // what a socket buffer holds, were waiting for it.
        let drained: usize = ended.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(
            drained >= 100 * empty_answer,
            "the attacker got only {drained} bytes: was it served as an agent of session c2 at all?"
        );
        let status = attacker.0[0].wait().unwrap();
        assert!(status.success(), "attacker: {status}");
        // The dropped connection is closed in the daemon too (its descriptor is not kept).
        let deadline = Instant::now() + TIMEOUT;
        let mut fds = fd_count(daemon_pid);
        while fds > fds_before {
            assert!(
                Instant::now() < deadline,
                "guestlinkd holds {fds} descriptors, {fds_before} before the attack"
            );
            std::thread::sleep(Duration::from_millis(50));
            fds = fd_count(daemon_pid);
        }
        eprintln!(
            "round {round}: attacker {flooded:?}, {ended:?}; {n} mouse states, slowest {slowest:?}; \
             clipboard round trip {clip:?}; daemon fds {fds} (before: {fds_before})"
        );
    }
    assert!(daemon.alive(), "guestlinkd exited");
    eprintln!("total {:?}", t_start.elapsed());
}

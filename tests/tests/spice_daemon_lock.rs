//! Issue 18, locked sessions and the login screen, black-box: guestlinkd follows logind (a fake
//! `org.freedesktop.login1` on a private dbus-daemon, tests/src/spice/fake_logind.rs: systemd-logind itself cannot run
//! here; the Debian-guest VM checks the real one, tests/debian-guest/check.py `lock_unlock`), a host speaks vdagent
//! on the port and the in-test agent is the served session's agent.
//! - Locked (`Lock` signal, as `loginctl lock-session` makes logind send): a host grab is not offered to the
//!   agent, a host paste is answered with an empty CLIPBOARD without asking the agent, a guest grab does not reach
//!   the host, START is answered SESSION_LOCKED. Unlock (`Unlock`): the host's grab made while locked is offered,
//!   and the clipboard works both ways, on the same connection.
//! - A greeter session: resize (MONITORS_CONFIG reaches the agent and is acknowledged) and mouse (the fake uinput
//!   file gets the position) work; no clipboard either way; START is answered DISABLED.
//!
//! A "not offered" check sends a MONITORS_CONFIG behind the grab: guestlinkd handles the port in order, so a
//! forwarded grab would reach the agent before the monitors config does.
//!
//! Run: `cargo test -p tests --test spice_daemon_lock`. Needs dbus-daemon (.ci/apt.d/spice.txt).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use guestlink_tests::spice::fake_logind;

use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use fake_logind::{FakeLogind, FakeSessionSpec};
use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{
    ClipboardType, FileXferResult, FileXferStart, Message, MessageType, Port, Selection,
};
use spice_common::daemon_peers::{
    is_reply_ok, monitors, send_raw, status_of, Daemon, Host, SessionAgent, TIMEOUT,
};

/// How long a guest grab gets to (wrongly) reach the host while the clipboard is blocked.
const QUIET: Duration = Duration::from_millis(1500);

/// guestlinkd with the fake logind serving `session` (the only one, active on seat0), the in-test agent connected
/// as that session's agent, and the host's handshake done.
struct Rig {
    logind: FakeLogind,
    dir: tempfile::TempDir,
    daemon: Daemon,
    host: Host,
    agent: SessionAgent,
}

fn rig(session: FakeSessionSpec) -> Option<Rig> {
    spice_common::peers(&["dbus-daemon"])?;
    let dir = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(dir.path(), &[session], session.id);
    logind.map_pid(std::process::id(), session.id);
    let vport = dir.path().join("vport.sock");
    let listener = UnixListener::bind(&vport).unwrap();
    let socket = dir.path().join("session.sock");
    let child = logind
        .guestlinkd(dir.path(), &vport, &socket)
        .env("GUESTLINK_LOG", "debug")
        .spawn()
        .expect("start guestlinkd");
    let daemon = Daemon(child);
    let mut agent = SessionAgent::connect(&socket);
    let id = agent.expect("hello", |m| match m {
        SessionMessage::Hello { session_id, .. } => Some(session_id.clone()),
        _ => None,
    });
    assert_eq!(id, session.id, "the agent was not placed through logind");
    agent.reply_hello_and_geometry();
    let mut host = Host::accept(&listener);
    host.handshake();
    agent.expect("client-connected", |m| {
        matches!(m, SessionMessage::ClientConnected).then_some(())
    });
    Some(Rig {
        logind,
        dir,
        daemon,
        host,
        agent,
    })
}

fn host_grab(serial: u32) -> Message {
    Message::ClipboardGrab {
        selection: Selection::Clipboard,
        serial: Some(serial),
        types: vec![ClipboardType::Utf8Text],
    }
}

fn request() -> Message {
    Message::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    }
}

fn guest_grab() -> SessionMessage {
    SessionMessage::ClipboardGrab {
        selection: Selection::Clipboard,
        types: vec![ClipboardType::Utf8Text],
    }
}

impl Rig {
    /// Sends a MONITORS_CONFIG of width `w` and waits for the agent to get it; returns every clipboard frame the
    /// agent got before it (what guestlinkd forwarded from the messages the host sent earlier).
    fn agent_clipboard_before_barrier(&mut self, w: u32) -> Vec<SessionMessage> {
        self.host.send(Port::Client, &monitors(false, w, 600));
        let mut seen = Vec::new();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            assert!(
                Instant::now() < deadline,
                "the monitors config never reached the agent"
            );
            match self.agent.recv_within(Duration::from_secs(1)) {
                Some(SessionMessage::MonitorsConfig { monitors, .. })
                    if monitors.first().is_some_and(|m| m.width == w) =>
                {
                    return seen
                }
                Some(
                    m @ (SessionMessage::ClipboardGrab { .. }
                    | SessionMessage::ClipboardRequest { .. }
                    | SessionMessage::ClipboardData { .. }),
                ) => seen.push(m),
                _ => {}
            }
        }
    }

    /// A host paste is answered with an empty CLIPBOARD (type NONE) at once, and the agent is not asked.
    fn paste_is_refused(&mut self, w: u32) {
        self.host.send(Port::Client, &request());
        let got = self
            .host
            .expect("the answer to the host's paste", |_, m| match m {
                Message::Clipboard {
                    data_type, data, ..
                } => Some((*data_type, data.clone())),
                _ => None,
            });
        assert_eq!(
            got,
            (ClipboardType::None, Vec::new()),
            "guest clipboard data left the guest"
        );
        let asked = self.agent_clipboard_before_barrier(w);
        assert!(asked.is_empty(), "the agent was asked: {asked:?}");
    }

    /// A guest grab does not reach the host within [`QUIET`].
    fn guest_grab_stays(&mut self) {
        self.agent.send(&guest_grab());
        let t0 = Instant::now();
        while t0.elapsed() < QUIET {
            if let Some((_, m)) = self.host.recv_within(Duration::from_millis(200)) {
                assert!(
                    !matches!(m, Message::ClipboardGrab { .. }),
                    "a guest grab reached the host: {m:?}"
                );
            }
        }
    }

    /// START of transfer `id`: the host's status result (the transfer must not reach the agent).
    fn start_result(&mut self, id: u32) -> FileXferResult {
        self.host.send(
            Port::Client,
            &Message::FileXferStart(FileXferStart {
                id,
                name: "f.txt".into(),
                size: 1,
                file_xfer_nr: None,
                file_xfer_total: None,
            }),
        );
        self.host
            .expect("the START's status", |_, m| status_of(m, id))
            .result
    }

    /// Waits until guestlinkd follows the lock: a START is answered SESSION_LOCKED. A START that still reaches
    /// the agent meanwhile is cancelled by it.
    fn wait_locked(&mut self) {
        let deadline = Instant::now() + TIMEOUT;
        for id in 100.. {
            assert!(
                Instant::now() < deadline,
                "guestlinkd never followed the lock"
            );
            self.host.send(
                Port::Client,
                &Message::FileXferStart(FileXferStart {
                    id,
                    name: "probe.txt".into(),
                    size: 1,
                    file_xfer_nr: None,
                    file_xfer_total: None,
                }),
            );
            if let Some((_, m)) = self.host.recv_within(Duration::from_millis(500)) {
                match status_of(&m, id) {
                    Some(st) if st.result == FileXferResult::SessionLocked => return,
                    _ => panic!("unexpected answer to a START while locking: {m:?}"),
                }
            }
            // Not locked yet: the agent got the START; it cancels it.
            self.agent.expect("the START before the lock", |m| {
                matches!(m, SessionMessage::FileXferStart { id: i, .. } if *i == id).then_some(())
            });
            self.agent.send(&SessionMessage::FileXferStatus {
                id,
                status: FileXferResult::Cancelled.as_u32(),
                disk_free_space: None,
                error_code: None,
            });
            self.host
                .expect("the cancelled START's status", |_, m| status_of(m, id));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The host's text reaches the agent: grab (with `serial`), the agent asks, the host answers.
    fn host_to_guest_works(&mut self, serial: u32, text: &[u8]) {
        self.host.send(Port::Client, &host_grab(serial));
        self.agent.expect("the host's grab", |m| {
            matches!(m, SessionMessage::ClipboardGrab { .. }).then_some(())
        });
        self.host_data_reaches_agent(text);
    }

    /// The agent asks for the host's clipboard and gets `text`.
    fn host_data_reaches_agent(&mut self, text: &[u8]) {
        self.agent.send(&SessionMessage::ClipboardRequest {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
        });
        self.host.expect("the agent's request", |_, m| {
            matches!(m, Message::ClipboardRequest { .. }).then_some(())
        });
        self.host.send(
            Port::Client,
            &Message::Clipboard {
                selection: Selection::Clipboard,
                data_type: ClipboardType::Utf8Text,
                data: text.to_vec(),
            },
        );
        self.agent.expect("the host's data", |m| match m {
            SessionMessage::ClipboardData { data, .. } if data == text => Some(()),
            _ => None,
        });
    }

    /// The guest's text reaches the host: the agent grabs, the host asks, the agent answers.
    fn guest_to_host_works(&mut self, text: &[u8]) {
        self.agent.send(&guest_grab());
        self.host.expect("the guest's grab", |_, m| {
            matches!(m, Message::ClipboardGrab { .. }).then_some(())
        });
        self.host.send(Port::Client, &request());
        self.agent.expect("the host's request", |m| {
            matches!(m, SessionMessage::ClipboardRequest { .. }).then_some(())
        });
        self.agent.send(&SessionMessage::ClipboardData {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: text.to_vec(),
        });
        let got = self.host.expect("the guest's data", |_, m| match m {
            Message::Clipboard { data, .. } => Some(data.clone()),
            _ => None,
        });
        assert_eq!(got, text);
    }
}

#[test]
fn a_locked_session_keeps_its_clipboard_and_unlock_restores_it_without_a_reconnect() {
    let Some(mut r) = rig(FakeSessionSpec {
        id: "c1",
        uid: 1000,
        kind: "x11",
        class: "user",
    }) else {
        return;
    };
    // Unlocked: both ways work.
    r.host_to_guest_works(0, b"before the lock");
    r.guest_to_host_works(b"guest before the lock");

    // `loginctl lock-session`: wait until guestlinkd follows it (a START is then answered SESSION_LOCKED).
    r.logind.lock("c1", true);
    r.wait_locked();
    // The guest still owns the clipboard from before the lock: the host's paste gets nothing.
    r.paste_is_refused(801);
    // A guest grab made while locked does not reach the host.
    r.guest_grab_stays();
    // The host copies: not offered to the locked session.
    r.host.send(Port::Client, &host_grab(1));
    let offered = r.agent_clipboard_before_barrier(802);
    assert!(offered.is_empty(), "offered while locked: {offered:?}");

    // `loginctl unlock-session`: the host's grab (the newest) is offered, no reconnect.
    r.logind.lock("c1", false);
    r.agent.expect("the host's grab withheld while locked", |m| {
        matches!(m, SessionMessage::ClipboardGrab { types, .. } if types == &[ClipboardType::Utf8Text])
            .then_some(())
    });
    r.host_data_reaches_agent(b"copied while locked");
    r.guest_to_host_works(b"guest after the unlock");
    r.host_to_guest_works(2, b"after the unlock");
    // And files reach the agent again.
    r.host.send(
        Port::Client,
        &Message::FileXferStart(FileXferStart {
            id: 200,
            name: "after.txt".into(),
            size: 1,
            file_xfer_nr: None,
            file_xfer_total: None,
        }),
    );
    r.agent.expect("the START after the unlock", |m| {
        matches!(m, SessionMessage::FileXferStart { id: 200, .. }).then_some(())
    });
    assert!(r.daemon.alive(), "guestlinkd exited");
    let _ = &r.dir;
}

/// The `struct input_event` records of the fake uinput file: (type, code, value).
fn input_records(file: &std::path::Path) -> Vec<(u16, u16, i32)> {
    std::fs::read(file)
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

#[test]
fn a_login_screen_gets_resize_and_mouse_but_no_clipboard_and_no_files() {
    let Some(mut r) = rig(FakeSessionSpec {
        id: "c3",
        uid: 112, // Debian-gdm
        kind: "x11",
        class: "greeter",
    }) else {
        return;
    };
    // Resize: the client's window size reaches the greeter's agent, and is acknowledged.
    r.host.send(Port::Client, &monitors(false, 1024, 768));
    r.agent.expect("the monitors config", |m| match m {
        SessionMessage::MonitorsConfig { monitors, .. } => {
            (monitors.len() == 1 && monitors[0].width == 1024 && monitors[0].height == 768)
                .then_some(())
        }
        _ => None,
    });
    r.host.expect("REPLY", |_, m| is_reply_ok(m).then_some(()));
    // Mouse: MOUSE_STATE (x 321, y 123) reaches the tablet.
    let mut m = Vec::new();
    for v in [321u32, 123, 0] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m.push(0);
    send_raw(&mut r.host, 2, MessageType::MouseState.as_u32(), &m);
    let uinput = r.dir.path().join("uinput");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let recs = input_records(&uinput);
        if recs.contains(&(3, 0, 321)) && recs.contains(&(3, 1, 123)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pointer never moved: {recs:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // No clipboard: the host's grab is not offered, a paste is refused, a guest grab stays in the guest.
    r.host.send(Port::Client, &host_grab(0));
    let offered = r.agent_clipboard_before_barrier(800);
    assert!(
        offered.is_empty(),
        "offered to the login screen: {offered:?}"
    );
    r.paste_is_refused(801);
    r.guest_grab_stays();
    // No files (FILE_XFER_DISABLE semantics).
    assert_eq!(r.start_result(1), FileXferResult::Disabled);
    assert!(r.daemon.alive(), "guestlinkd exited");
}

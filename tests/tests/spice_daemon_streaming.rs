//! guestlinkd's guest→host clipboard for large answers, black-box (peers of `spice_common::daemon_peers`: the
//! test plays the host on a unix socket standing in for `com.redhat.spice.0`, and a minimal session agent).
//!
//! Covers: a 16 MiB `ClipboardData` streamed through the daemon (host messages sent meanwhile are answered after
//! it, intact); the same 16 MiB as a sealed memfd (`ClipboardDataFd`, SCM_RIGHTS) after the hello announced
//! `clipboard-fd`; hostile descriptors (unsealed memfd, pipe, regular file, too many memfds → the agent is
//! disconnected, the daemon serves a new one) and unusable memfds (too small, over the limit, missing → an empty
//! CLIPBOARD); an agent that leaves or stalls in the middle of a streamed answer (the port is reset and reopened,
//! the host never gets a wrong CLIPBOARD); non-clipboard frames above the 64 KiB agent frame cap.
//!
//! Run: `cargo build -p guest-daemon && cargo test -p tests --test spice_daemon_streaming`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use guestlink_protocol::session::{self, GeometryMonitor, SessionMessage, CAP_CLIPBOARD_FD};
use guestlink_protocol::vdagent::{ClipboardType, Message, Port, Selection};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use sha2::{Digest, Sha256};
use spice_common::daemon_peers::*;

/// Size of the large clipboard answers.
const BIG: usize = 16 << 20;

/// `len` pseudo-random bytes (xorshift), so a byte out of place changes the hash.
fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn sha(data: &[u8]) -> Vec<u8> {
    Sha256::digest(data).to_vec()
}

/// A guestlinkd with an agent that reported its geometry and a host that did the handshake; returns the
/// capabilities of the daemon's hello too.
fn session_with(env: &[(&str, &str)]) -> (Setup, SessionAgent, Host, Vec<String>) {
    let s = Setup::start_with(env);
    let (agent, host, caps) = new_agent_and_port(&s);
    (s, agent, host, caps)
}

/// A new agent (hello, geometry), then the port the daemon opens for it, with the spice-gtk handshake.
fn new_agent_and_port(s: &Setup) -> (SessionAgent, Host, Vec<String>) {
    let mut agent = SessionAgent::connect(&s.session_socket());
    let caps = agent.hello_caps_and_geometry();
    let mut host = Host::accept(&s.listener);
    host.handshake();
    agent.expect("client-connected", |m| {
        matches!(m, SessionMessage::ClientConnected).then_some(())
    });
    (agent, host, caps)
}

/// The guest grabs CLIPBOARD, the host requests it and the agent sees the request.
fn grab_and_request(host: &mut Host, agent: &mut SessionAgent) {
    agent.send(&SessionMessage::ClipboardGrab {
        selection: Selection::Clipboard,
        types: vec![ClipboardType::Utf8Text],
    });
    host.expect("guest grab", |_, m| {
        matches!(m, Message::ClipboardGrab { .. }).then_some(())
    });
    request(host, agent, Selection::Clipboard);
}

/// The host requests `selection` as text; the agent sees the request.
fn request(host: &mut Host, agent: &mut SessionAgent, selection: Selection) {
    host.send(
        Port::Client,
        &Message::ClipboardRequest {
            selection,
            data_type: ClipboardType::Utf8Text,
        },
    );
    agent.expect("request from host", |m| match m {
        SessionMessage::ClipboardRequest { selection: s, .. } if *s == selection => Some(()),
        _ => None,
    });
}

/// The next CLIPBOARD message on the host: (selection, type, data).
fn host_clipboard(host: &mut Host) -> (Selection, ClipboardType, Vec<u8>) {
    host.expect("CLIPBOARD", |_, m| match m {
        Message::Clipboard {
            selection,
            data_type,
            data,
        } => Some((*selection, *data_type, data.clone())),
        _ => None,
    })
}

/// The agent answers the pending request with `text`; the host must get exactly it (`what` names the case).
fn answer_arrives(host: &mut Host, agent: &mut SessionAgent, text: &[u8], what: &str) {
    agent.send(&SessionMessage::ClipboardData {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: text.to_vec(),
    });
    let (_, _, got) = host_clipboard(host);
    assert!(
        got == text,
        "{what}: the answer differs ({} bytes)",
        got.len()
    );
}

/// Reads the port until `total` bytes arrived (a streamed answer is under way), panicking on EOF.
fn pump_until(host: &mut Host, total: usize) {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = 0;
    while got < total {
        assert!(
            Instant::now() < deadline,
            "only {got} of {total} bytes of the streamed answer reached the port"
        );
        got += host
            .pump()
            .expect("the port closed while the answer was streaming");
    }
}

/// Reads the port until EOF (within `TIMEOUT`); returns the whole messages received before it.
fn host_until_eof(host: &mut Host, what: &str) -> Vec<Message> {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    loop {
        match host.recv_within(Duration::from_millis(200)) {
            Some((_, m)) => got.push(m),
            None if port_closed(host) => return got,
            None => assert!(
                Instant::now() < deadline,
                "the port never reached EOF ({what})"
            ),
        }
    }
}

/// Whether the agent's connection reaches EOF (the daemon dropped it) within `within`.
fn agent_sees_eof(agent: &mut SessionAgent, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        match agent.s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

/// A memfd holding `content` (then grown to `size` if larger), with `seals` added.
fn memfd(content: &[u8], size: u64, seals: SealFlag) -> OwnedFd {
    let fd = memfd_create(c"clip", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
    let mut f = File::from(fd);
    f.write_all(content).unwrap();
    if size > content.len() as u64 {
        f.set_len(size).unwrap();
    }
    let fd = OwnedFd::from(f);
    if !seals.is_empty() {
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).unwrap();
    }
    fd
}

fn sealed() -> SealFlag {
    SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
}

/// Sends `bytes` on the agent's socket in one sendmsg, with `fds` passed as SCM_RIGHTS.
fn send_with_fds(agent: &SessionAgent, bytes: &[u8], fds: &[RawFd]) {
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    let n = sendmsg::<()>(
        agent.s.as_raw_fd(),
        &[IoSlice::new(bytes)],
        cmsgs,
        MsgFlags::empty(),
        None,
    )
    .expect("sendmsg");
    assert_eq!(n, bytes.len(), "short sendmsg");
}

fn clipboard_fd_frame(len: u64) -> Vec<u8> {
    session::encode(&SessionMessage::ClipboardDataFd {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        len,
    })
    .unwrap()
}

/// a. 16 MiB as an ordinary ClipboardData frame: streamed to the host, which gets exactly those bytes in one
/// CLIPBOARD; a MONITORS_CONFIG and a PRIMARY request sent while it streams are handled after it, intact.
#[test]
fn big_clipboard_data_is_streamed_and_host_messages_wait_behind_it() {
    let (mut s, mut agent, mut host, _) = session_with(&[]);
    grab_and_request(&mut host, &mut agent);
    let data = payload(BIG, 1);
    let want = sha(&data);
    let frame = session::encode(&SessionMessage::ClipboardData {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data,
    })
    .unwrap();
    // The agent writes the first MiB, waits for the test's go, then the rest.
    const FIRST: usize = 1 << 20;
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut w = agent.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&frame[..FIRST]).unwrap();
        go_rx.recv().unwrap();
        w.write_all(&frame[FIRST..]).unwrap();
    });
    // Half a MiB on the port: the answer is streaming (nothing else produces that much).
    pump_until(&mut host, FIRST / 2);
    host.send(Port::Client, &monitors(false, 1111, 777));
    host.send(
        Port::Client,
        &Message::ClipboardRequest {
            selection: Selection::Primary,
            data_type: ClipboardType::Utf8Text,
        },
    );
    go_tx.send(()).unwrap();

    // In order: the CLIPBOARD, then the REPLY to the config sent meanwhile.
    let mut order = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while order.len() < 2 {
        assert!(Instant::now() < deadline, "timed out; got only {order:?}");
        let Some((p, m)) = host.recv_within(Duration::from_secs(1)) else {
            continue;
        };
        match m {
            Message::Clipboard {
                selection,
                data_type,
                data,
            } => {
                assert_eq!(
                    (selection, data_type),
                    (Selection::Clipboard, ClipboardType::Utf8Text)
                );
                assert_eq!(data.len(), BIG, "clipboard size");
                assert!(sha(&data) == want, "the streamed clipboard bytes differ");
                order.push("clipboard");
            }
            m if p == Port::Client && is_reply_ok(&m) => order.push("reply"),
            m => panic!("unexpected message while the answer streams: {m:?}"),
        }
    }
    assert_eq!(order, ["clipboard", "reply"]);
    writer.join().unwrap();
    agent.expect("the config sent meanwhile", |m| match m {
        SessionMessage::MonitorsConfig { monitors, .. } => {
            assert_eq!((monitors[0].width, monitors[0].height), (1111, 777));
            Some(())
        }
        _ => None,
    });
    agent.expect("the PRIMARY request sent meanwhile", |m| {
        matches!(
            m,
            SessionMessage::ClipboardRequest {
                selection: Selection::Primary,
                ..
            }
        )
        .then_some(())
    });
    // Only one CLIPBOARD came; the daemon still serves.
    host.send(Port::Client, &monitors(false, 1024, 768));
    host.expect("REPLY after the streamed answer", |_, m| {
        assert!(
            !matches!(m, Message::Clipboard { .. }),
            "a second CLIPBOARD"
        );
        is_reply_ok(m).then_some(())
    });
    assert!(s.daemon.alive());
}

/// b. The same 16 MiB in a sealed memfd with ClipboardDataFd, after the hello announced `clipboard-fd`.
#[test]
fn big_clipboard_in_a_sealed_memfd_reaches_the_host() {
    let (mut s, mut agent, mut host, caps) = session_with(&[]);
    assert!(
        caps.iter().any(|c| c == CAP_CLIPBOARD_FD),
        "the daemon's hello does not list {CAP_CLIPBOARD_FD}: {caps:?}"
    );
    grab_and_request(&mut host, &mut agent);
    let data = payload(BIG, 2);
    let fd = memfd(&data, 0, sealed());
    send_with_fds(&agent, &clipboard_fd_frame(BIG as u64), &[fd.as_raw_fd()]);
    drop(fd);
    let (sel, ty, got) = host_clipboard(&mut host);
    assert_eq!((sel, ty), (Selection::Clipboard, ClipboardType::Utf8Text));
    assert_eq!(got.len(), BIG, "clipboard size");
    assert!(
        sha(&got) == sha(&data),
        "the memfd's bytes differ on the host"
    );
    // The agent stays connected and served: a second, small answer.
    request(&mut host, &mut agent, Selection::Clipboard);
    let small = payload(1000, 3);
    let fd = memfd(&small, 0, sealed());
    send_with_fds(&agent, &clipboard_fd_frame(1000), &[fd.as_raw_fd()]);
    assert_eq!(host_clipboard(&mut host).2, small);
    still_serving(&mut host);
    assert!(s.daemon.alive());
}

/// c. Unusable memfds and a missing one get the host an empty CLIPBOARD (NONE), and the agent stays connected.
#[test]
fn unusable_or_missing_memfd_answers_an_empty_clipboard() {
    let (mut s, mut agent, mut host, _) = session_with(&[]);
    grab_and_request(&mut host, &mut agent);
    let expect_empty = |host: &mut Host, what: &str| {
        let (sel, ty, data) = host_clipboard(host);
        assert_eq!(
            (sel, ty, data.len()),
            (Selection::Clipboard, ClipboardType::None, 0),
            "{what}: not an empty CLIPBOARD"
        );
    };
    // Sealed, but smaller than announced.
    let fd = memfd(&payload(1000, 4), 0, sealed());
    send_with_fds(&agent, &clipboard_fd_frame(5000), &[fd.as_raw_fd()]);
    expect_empty(&mut host, "memfd smaller than len");
    // No descriptor at all.
    request(&mut host, &mut agent, Selection::Clipboard);
    send_with_fds(&agent, &clipboard_fd_frame(10), &[]);
    expect_empty(&mut host, "no memfd");
    // Larger than the 64 MiB + 4 KiB limit (a sparse memfd that does hold that much).
    request(&mut host, &mut agent, Selection::Clipboard);
    let over = 64 * 1024 * 1024 + 4096 + 1;
    let fd = memfd(b"x", over, sealed());
    send_with_fds(&agent, &clipboard_fd_frame(over), &[fd.as_raw_fd()]);
    expect_empty(&mut host, "len over the limit");
    // The agent is still connected and served: an ordinary answer goes through.
    request(&mut host, &mut agent, Selection::Clipboard);
    answer_arrives(
        &mut host,
        &mut agent,
        b"still here",
        "after the refused memfds",
    );
    assert!(
        !agent_sees_eof(&mut agent, Duration::from_millis(500)),
        "the agent was disconnected"
    );
    assert!(s.daemon.alive());
}

/// c. Descriptors that are not sealed memfds, or too many memfds: the agent is disconnected, the daemon keeps
/// serving a new one (the port closes and reopens for it), and the host never gets a CLIPBOARD with data.
#[test]
fn hostile_descriptors_disconnect_the_agent() {
    let mut s = Setup::start();
    let tmp = tempfile::tempfile().unwrap();
    let (pipe_r, _pipe_w) = nix::unistd::pipe().unwrap();
    let unsealed = memfd(&payload(1000, 5), 0, SealFlag::empty());
    let write_only = memfd(&payload(1000, 6), 0, SealFlag::F_SEAL_WRITE);
    let five: Vec<OwnedFd> = (0..5)
        .map(|i| memfd(&payload(100, i), 0, sealed()))
        .collect();
    let five_raw: Vec<RawFd> = five.iter().map(|f| f.as_raw_fd()).collect();
    let cases: [(&str, Vec<RawFd>); 5] = [
        ("unsealed memfd", vec![unsealed.as_raw_fd()]),
        (
            "memfd sealed only against writes",
            vec![write_only.as_raw_fd()],
        ),
        ("pipe", vec![pipe_r.as_raw_fd()]),
        ("regular file", vec![tmp.as_raw_fd()]),
        ("five sealed memfds", five_raw),
    ];
    for (what, fds) in cases {
        let (mut agent, mut host, _) = new_agent_and_port(&s);
        grab_and_request(&mut host, &mut agent);
        send_with_fds(&agent, &clipboard_fd_frame(100), &fds);
        assert!(
            agent_sees_eof(&mut agent, TIMEOUT),
            "{what}: the agent was not disconnected"
        );
        let got = host_until_eof(&mut host, what);
        assert!(
            !got.iter()
                .any(|m| matches!(m, Message::Clipboard { data, .. } if !data.is_empty())),
            "{what}: the host got clipboard data"
        );
        assert!(s.daemon.alive(), "{what}: guestlinkd died");
    }
    let (_agent, mut host, _) = new_agent_and_port(&s);
    still_serving(&mut host);
    assert!(s.daemon.alive());
}

/// Streams the first `part` bytes of a 16 MiB ClipboardData frame from `agent`, and waits until they reached the
/// host (so the answer is streaming and the daemon got all that was sent).
fn start_partial_answer(host: &mut Host, agent: &mut SessionAgent, part: usize) {
    grab_and_request(host, agent);
    let frame = session::encode(&SessionMessage::ClipboardData {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: payload(BIG, 7),
    })
    .unwrap();
    let mut w = agent.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&frame[..part]).unwrap());
    // Both frame heads are far below 1 KiB.
    pump_until(host, part - 1024);
    writer.join().unwrap();
}

/// The port was reset: the daemon reopens it for a new agent, and serves.
fn reopened_for_a_new_agent(s: &Setup) {
    let (_agent, mut host, _) = new_agent_and_port(s);
    still_serving(&mut host);
}

/// d. An agent that leaves in the middle of a streamed answer: the port is reset (EOF on the host's end, no
/// CLIPBOARD), and reopened when a new agent reports its geometry.
#[test]
fn agent_leaving_mid_answer_resets_the_port() {
    let (mut s, mut agent, mut host, _) = session_with(&[]);
    start_partial_answer(&mut host, &mut agent, 512 * 1024);
    drop(agent);
    let got = host_until_eof(&mut host, "agent left mid-answer");
    assert!(
        !got.iter().any(|m| matches!(m, Message::Clipboard { .. })),
        "the host got a CLIPBOARD cut short: {} messages",
        got.len()
    );
    reopened_for_a_new_agent(&s);
    assert!(s.daemon.alive());
}

/// d. An agent that stalls in the middle of a streamed answer is dropped after the stall timeout (not before),
/// and the port is reset and reopened for a new agent.
#[test]
fn agent_stalling_mid_answer_is_dropped_and_the_port_reset() {
    const STALL_MS: u64 = 3000;
    let (mut s, mut agent, mut host, _) =
        session_with(&[("GUESTLINKD_SPICE_AGENT_STALL_MS", &STALL_MS.to_string())]);
    start_partial_answer(&mut host, &mut agent, 512 * 1024);
    // The daemon got its last piece before this instant.
    let stalled = Instant::now();
    let got = host_until_eof(&mut host, "agent stalled mid-answer");
    let waited = stalled.elapsed();
    assert!(
        !got.iter().any(|m| matches!(m, Message::Clipboard { .. })),
        "the host got a CLIPBOARD cut short"
    );
    assert!(
        waited >= Duration::from_millis(STALL_MS / 2),
        "the port was reset after {waited:?}, well before the {STALL_MS} ms stall timeout"
    );
    assert!(
        agent_sees_eof(&mut agent, TIMEOUT),
        "the stalled agent was not disconnected"
    );
    reopened_for_a_new_agent(&s);
    assert!(s.daemon.alive());
    // The stalled agent's late bytes change nothing.
    let _ = agent.s.write_all(&[0u8; 4096]);
    assert!(s.daemon.alive());
}

/// e. Non-clipboard frames above the 64 KiB agent frame cap: the agent is disconnected, the daemon survives.
#[test]
fn oversized_non_clipboard_frames_disconnect_the_agent() {
    let mut s = Setup::start();
    let geometry = SessionMessage::Geometry {
        monitors: (0..4000)
            .map(|i| GeometryMonitor {
                display_id: i,
                x: 0,
                y: 0,
                width: 1280,
                height: 800,
            })
            .collect(),
    };
    let grab = SessionMessage::ClipboardGrab {
        selection: Selection::Clipboard,
        types: vec![ClipboardType::Utf8Text; 50_000],
    };
    for (what, m) in [("Geometry", geometry), ("ClipboardGrab", grab)] {
        let frame = session::encode(&m).unwrap();
        assert!(
            frame.len() > 64 * 1024,
            "{what} frame only {} bytes",
            frame.len()
        );
        let (mut agent, mut host, _) = new_agent_and_port(&s);
        // The daemon may close the connection before it read everything.
        let mut w = agent.s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&frame);
        });
        assert!(
            agent_sees_eof(&mut agent, TIMEOUT),
            "{what}: the agent was not disconnected"
        );
        writer.join().unwrap();
        let got = host_until_eof(&mut host, what);
        assert!(
            !got.iter()
                .any(|m| matches!(m, Message::ClipboardGrab { .. })),
            "{what}: the oversized frame reached the host"
        );
        assert!(s.daemon.alive(), "{what}: guestlinkd died");
    }
    reopened_for_a_new_agent(&s);
    assert!(s.daemon.alive());
}

/// A ClipboardData frame of `data`.
fn clipboard_frame(selection: Selection, data: Vec<u8>) -> Vec<u8> {
    session::encode(&SessionMessage::ClipboardData {
        selection,
        data_type: ClipboardType::Utf8Text,
        data,
    })
    .unwrap()
}

/// Two streamed answers written back to back in one go: both reach the host whole, in order.
#[test]
fn back_to_back_streamed_answers_arrive_whole_and_in_order() {
    let (mut s, mut agent, mut host, _) = session_with(&[]);
    grab_and_request(&mut host, &mut agent);
    request(&mut host, &mut agent, Selection::Primary);
    let a = payload(1 << 20, 8);
    let b = payload((1 << 20) + 1, 9);
    let (ha, hb) = (sha(&a), sha(&b));
    let mut bytes = clipboard_frame(Selection::Clipboard, a);
    bytes.extend(clipboard_frame(Selection::Primary, b));
    let mut w = agent.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&bytes).unwrap());
    let (sel, _, got) = host_clipboard(&mut host);
    assert_eq!(sel, Selection::Clipboard);
    assert!(
        sha(&got) == ha,
        "first answer differs ({} bytes)",
        got.len()
    );
    let (sel, _, got) = host_clipboard(&mut host);
    assert_eq!(sel, Selection::Primary);
    assert!(
        sha(&got) == hb,
        "second answer differs ({} bytes)",
        got.len()
    );
    writer.join().unwrap();
    still_serving(&mut host);
    assert!(s.daemon.alive());
}

/// The host closes its end in the middle of a streamed answer: the daemon drops the rest of it (the agent stays
/// connected and is read on), reopens the port, and the new host gets no stale bytes, then new answers whole.
#[test]
fn host_closing_mid_answer_reopens_the_port_cleanly() {
    let (mut s, mut agent, mut host, _) = session_with(&[]);
    grab_and_request(&mut host, &mut agent);
    let frame = clipboard_frame(Selection::Clipboard, payload(BIG, 10));
    let mut w = agent.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&frame).unwrap());
    pump_until(&mut host, 512 * 1024);
    drop(host);
    // The daemon reads the rest of the answer from the agent (and drops it), or the writer would block.
    writer.join().unwrap();
    let mut host = Host::accept(&s.listener);
    host.handshake();
    agent.expect("client-connected after the reopen", |m| {
        matches!(m, SessionMessage::ClientConnected).then_some(())
    });
    grab_and_request(&mut host, &mut agent);
    answer_arrives(
        &mut host,
        &mut agent,
        &payload(100 * 1024, 11),
        "after the reopen",
    );
    still_serving(&mut host);
    assert!(s.daemon.alive());
}

/// Answers above the client's MAX_CLIPBOARD, streamed or in a memfd, reach the host empty; the agent's stream
/// stays in sync (a following answer below the limit arrives whole).
#[test]
fn answers_above_max_clipboard_are_sent_empty() {
    let (mut s, mut agent, mut host, _) = session_with(&[]);
    host.send(Port::Client, &Message::MaxClipboard { max: 1 << 20 });
    agent.expect("max-clipboard", |m| {
        matches!(m, SessionMessage::MaxClipboard { .. }).then_some(())
    });
    grab_and_request(&mut host, &mut agent);
    let mut w = agent.s.try_clone().unwrap();
    let big = clipboard_frame(Selection::Clipboard, payload(2 << 20, 12));
    let writer = std::thread::spawn(move || w.write_all(&big).unwrap());
    let (_, _, got) = host_clipboard(&mut host);
    assert!(
        got.is_empty(),
        "streamed: {} bytes over MAX_CLIPBOARD sent",
        got.len()
    );
    writer.join().unwrap();

    request(&mut host, &mut agent, Selection::Clipboard);
    let fd = memfd(&payload(2 << 20, 13), 0, sealed());
    send_with_fds(&agent, &clipboard_fd_frame(2 << 20), &[fd.as_raw_fd()]);
    let (_, _, got) = host_clipboard(&mut host);
    assert!(
        got.is_empty(),
        "memfd: {} bytes over MAX_CLIPBOARD sent",
        got.len()
    );

    request(&mut host, &mut agent, Selection::Clipboard);
    answer_arrives(
        &mut host,
        &mut agent,
        &payload(100 * 1024, 14),
        "below the limit",
    );
    still_serving(&mut host);
    assert!(s.daemon.alive());
}

/// A host that is slow to read (pauses of twice the stall timeout, well below the daemon's 30 s port write
/// timeout) while an agent that already sent its whole answer streams: the agent is not stalled, so the answer
/// must arrive whole. Regression test: the stall deadline once ran from before the daemon's own blocking port
/// write, so a write that blocked longer than the stall timeout made the healthy agent look stalled.
#[test]
fn slow_host_does_not_make_a_streaming_agent_stalled() {
    const STALL_MS: u64 = 2000;
    let (mut s, mut agent, mut host, _) =
        session_with(&[("GUESTLINKD_SPICE_AGENT_STALL_MS", &STALL_MS.to_string())]);
    grab_and_request(&mut host, &mut agent);
    let data = payload(BIG, 21);
    let want = sha(&data);
    let frame = clipboard_frame(Selection::Clipboard, data);
    let mut w = agent.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&frame).unwrap());
    for _ in 0..4 {
        pump_until(&mut host, 1 << 20);
        std::thread::sleep(Duration::from_millis(2 * STALL_MS));
    }
    let (_, _, got) = host_clipboard(&mut host);
    assert_eq!(got.len(), BIG, "clipboard size");
    assert!(sha(&got) == want, "the streamed clipboard bytes differ");
    writer.join().unwrap();
    assert!(
        !agent_sees_eof(&mut agent, Duration::from_millis(500)),
        "the agent was disconnected"
    );
    still_serving(&mut host);
    assert!(s.daemon.alive());
}

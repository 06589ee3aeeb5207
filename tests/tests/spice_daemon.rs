//! guestlinkd's SPICE side, black-box: the test plays spice-server/client on a unix socket standing in for
//! `com.redhat.spice.0` and a minimal session agent speaking `protocol::session` on the session socket.
//!
//! Covers the spice-gtk replay (caps 0x00035077, PHYSICAL_SIZE monitor configs, 64 KiB clipboard in 2048-byte
//! chunks), routing both ways, file transfer rules, MOUSE_STATE → `--uinput-fake` events, and the hostile
//! messages of docs/protocol/vdagent.md#hostile-input (the daemon survives, reopens the port and keeps serving).
//!
//! Run: `cargo test -p tests --test spice_daemon`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_tests::spice as spice_common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{
    encode_message, Capability, ChunkMode, ClipboardType, FileXferData, FileXferDetail,
    FileXferResult, FileXferStart, Message, MessageType, Port, Selection,
};
use guestlink_tests::qga_agent::guestlinkd_path;
use spice_common::daemon_peers::*;

#[test]
fn spice_gtk_replay_routing_and_file_rules() {
    let mut s = Setup::start();
    // No agent → the port stays closed.
    std::thread::sleep(Duration::from_millis(1500));
    s.listener.set_nonblocking(true).unwrap();
    assert!(
        s.listener.accept().is_err(),
        "port opened before any session agent could serve"
    );

    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(s.session_socket()).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o666, "session socket mode");
    let mut agent = SessionAgent::connect(&s.session_socket());
    agent.hello_and_geometry();
    let mut host = Host::accept(&s.listener);
    let caps = host.handshake();
    for cap in [
        Capability::MouseState,
        Capability::MonitorsConfig,
        Capability::Reply,
        Capability::ClipboardByDemand,
        Capability::ClipboardSelection,
        Capability::SparseMonitorsConfig,
        Capability::GuestLineendLf,
        Capability::MaxClipboard,
        Capability::AudioVolumeSync,
        Capability::FileXferDetailedErrors,
        Capability::GraphicsDeviceInfo,
        Capability::ClipboardNoReleaseOnRegrab,
        Capability::ClipboardGrabSerial,
    ] {
        assert!(caps.has(cap), "guestlinkd does not announce {cap:?}");
    }
    agent.expect("client-connected", |m| {
        matches!(m, SessionMessage::ClientConnected).then_some(())
    });

    // spice-gtk's MAX_CLIPBOARD and monitor configs, with and without PHYSICAL_SIZE.
    host.send(Port::Client, &Message::MaxClipboard { max: 100 << 20 });
    agent.expect("max-clipboard", |m| {
        matches!(m, SessionMessage::MaxClipboard { max } if *max == 100 << 20).then_some(())
    });
    host.send(Port::Client, &monitors(true, 1024, 768));
    host.expect("REPLY for PHYSICAL_SIZE config", |p, m| {
        (p == Port::Client && is_reply_ok(m)).then_some(())
    });
    agent.expect("monitors-config with mm", |m| match m {
        SessionMessage::MonitorsConfig { monitors, .. } => {
            assert_eq!((monitors[0].width, monitors[0].height), (1024, 768));
            assert_eq!(
                (monitors[0].mm_width, monitors[0].mm_height),
                (Some(300), Some(200))
            );
            Some(())
        }
        _ => None,
    });
    // A request on the server port is answered on the server port.
    host.send(Port::Server, &monitors(false, 800, 600));
    host.expect("REPLY on port 2", |p, m| {
        (p == Port::Server && is_reply_ok(m)).then_some(())
    });

    // Host → guest clipboard: GRAB (serial 0) → agent; agent REQUEST → host; 64 KiB DATA in 2048-byte chunks.
    host.send(
        Port::Client,
        &Message::ClipboardGrab {
            selection: Selection::Clipboard,
            serial: Some(0),
            types: vec![ClipboardType::Utf8Text],
        },
    );
    agent.expect("grab", |m| {
        matches!(m, SessionMessage::ClipboardGrab { types, .. } if types == &[ClipboardType::Utf8Text]).then_some(())
    });
    agent.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    });
    host.expect("request", |_, m| {
        matches!(m, Message::ClipboardRequest { .. }).then_some(())
    });
    let big: Vec<u8> = (0..65536u32).map(|i| b'a' + (i % 26) as u8).collect();
    host.send(
        Port::Client,
        &Message::Clipboard {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: big.clone(),
        },
    );
    agent.expect("64 KiB clipboard data", |m| match m {
        SessionMessage::ClipboardData { data, .. } => {
            assert_eq!(data, &big);
            Some(())
        }
        _ => None,
    });

    // Guest → host: the agent grabs (serial 0 on the wire), the host requests, data comes back in one chunk.
    agent.send(&SessionMessage::ClipboardGrab {
        selection: Selection::Primary,
        types: vec![ClipboardType::Utf8Text],
    });
    host.expect("guest grab", |_, m| match m {
        Message::ClipboardGrab {
            selection, serial, ..
        } => {
            assert_eq!(*selection, Selection::Primary);
            assert_eq!(*serial, Some(0));
            Some(())
        }
        _ => None,
    });
    host.send(
        Port::Client,
        &Message::ClipboardRequest {
            selection: Selection::Primary,
            data_type: ClipboardType::Utf8Text,
        },
    );
    agent.expect("request from host", |m| {
        matches!(m, SessionMessage::ClipboardRequest { .. }).then_some(())
    });
    agent.send(&SessionMessage::ClipboardData {
        selection: Selection::Primary,
        data_type: ClipboardType::Utf8Text,
        data: vec![b'g'; 10_000],
    });
    host.expect("guest data", |_, m| match m {
        Message::Clipboard { data, .. } => {
            assert_eq!(data.len(), 10_000);
            Some(())
        }
        _ => None,
    });

    // File transfer: START → agent; CAN_SEND_DATA → host; DATA → agent; SUCCESS → host.
    let start = |id: u32, name: &str| {
        Message::FileXferStart(FileXferStart {
            id,
            name: name.into(),
            size: 5,
            file_xfer_nr: None,
            file_xfer_total: None,
        })
    };
    host.send(Port::Client, &start(7, "a.txt"));
    agent.expect("xfer start", |m| {
        matches!(m, SessionMessage::FileXferStart { id: 7, name, size: 5 } if name == "a.txt")
            .then_some(())
    });
    agent.send(&SessionMessage::FileXferStatus {
        id: 7,
        status: 0,
        disk_free_space: None,
        error_code: None,
    });
    host.expect("CAN_SEND_DATA", |_, m| {
        status_of(m, 7).filter(|s| s.result == FileXferResult::CanSendData)
    });
    // A duplicate START for an active id is refused and does not disturb the transfer.
    host.send(Port::Client, &start(7, "b.txt"));
    host.expect("duplicate id refused", |_, m| {
        status_of(m, 7).filter(|s| s.result == FileXferResult::Error)
    });
    host.send(
        Port::Client,
        &Message::FileXferData(FileXferData {
            id: 7,
            data: b"hello".to_vec(),
        }),
    );
    agent.expect("xfer data", |m| {
        matches!(m, SessionMessage::FileXferData { id: 7, data } if data == b"hello").then_some(())
    });
    agent.send(&SessionMessage::FileXferStatus {
        id: 7,
        status: 3,
        disk_free_space: None,
        error_code: None,
    });
    host.expect("SUCCESS", |_, m| {
        status_of(m, 7).filter(|s| s.result == FileXferResult::Success)
    });
    // Unsafe names never reach the agent.
    host.send(Port::Client, &start(8, "../evil"));
    let st = host.expect("traversal refused", |_, m| status_of(m, 8));
    assert_eq!(st.result, FileXferResult::Error);
    assert_eq!(
        st.detail,
        FileXferDetail::Error {
            error_type: 0,
            error_code: 10
        }
    );
    // At most 128 concurrent transfers; the 129th gets TOO_MANY_OPEN_FILES.
    for id in 100..228 {
        host.send(Port::Client, &start(id, &format!("f{id}")));
    }
    host.send(Port::Client, &start(500, "one-too-many"));
    let st = host.expect("129th refused", |_, m| status_of(m, 500));
    assert_eq!(
        st.detail,
        FileXferDetail::Error {
            error_type: 0,
            error_code: 31
        }
    );
    // CLIENT_DISCONNECTED drops the transfers (the agent is told) and tells the agent.
    host.send(Port::Server, &Message::ClientDisconnected);
    agent.expect("client-disconnected", |m| {
        matches!(m, SessionMessage::ClientDisconnected).then_some(())
    });

    // The agent leaves → the port is closed.
    drop(agent);
    assert!(
        host.recv_within(TIMEOUT).is_none() || host.recv_within(TIMEOUT).is_none(),
        "port still open after the agent left"
    );
    assert!(s.daemon.alive());
}

#[test]
fn hostile_messages_and_mouse() {
    let mut s = Setup::start();
    let mut agent = SessionAgent::connect(&s.session_socket());
    agent.hello_and_geometry();
    let mut host = Host::accept(&s.listener);
    host.handshake();

    // MOUSE_STATE on port 2 → input_event records (ABS_X, ABS_Y, BTN_LEFT=1, SYN); the first position after the
    // tablet's creation is written as a change (a neighbouring value first), so the kernel cannot drop it.
    let mut mouse = Vec::new();
    for v in [100u32, 200, 1 << 1] {
        mouse.extend_from_slice(&v.to_le_bytes());
    }
    mouse.push(0);
    send_raw(&mut host, 2, MessageType::MouseState.as_u32(), &mouse);
    let fake = s.dir.path().join("uinput");
    let deadline = Instant::now() + TIMEOUT;
    while std::fs::metadata(&fake).map(|m| m.len()).unwrap_or(0) < 6 * 24 {
        assert!(Instant::now() < deadline, "no input events written");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ev = std::fs::read(&fake).unwrap();
    let recs: Vec<(u16, u16, i32)> = ev
        .chunks(24)
        .map(|r| {
            (
                u16::from_ne_bytes([r[16], r[17]]),
                u16::from_ne_bytes([r[18], r[19]]),
                i32::from_ne_bytes([r[20], r[21], r[22], r[23]]),
            )
        })
        .collect();
    assert_eq!(
        recs,
        vec![
            (3, 0, 99),
            (3, 1, 199),
            (3, 0, 100),
            (3, 1, 200),
            (1, 0x110, 1),
            (0, 0, 0)
        ]
    );

    // 1. Monitor count overflow (0x0CCCCCCD × 20 wraps to 4 in 32 bits): ignored, no reply, no crash.
    let mut p = Vec::new();
    p.extend_from_slice(&0x0CCC_CCCDu32.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&[0; 4]);
    send_raw(&mut host, 1, 2, &p);
    still_serving(&mut host);
    // 2. GRAPHICS_DEVICE_INFO with a huge device-address length.
    let mut p = Vec::new();
    for v in [1u32, 0, 0, 0, 0x7fff_fff0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(b"pci/0000/02.0\0");
    send_raw(&mut host, 2, 16, &p);
    still_serving(&mut host);
    // 3. FILE_XFER_DATA whose size field exceeds its payload: the transfer fails, no memory reaches a file.
    host.send(
        Port::Client,
        &Message::FileXferStart(FileXferStart {
            id: 9,
            name: "x".into(),
            size: 0x20000,
            file_xfer_nr: None,
            file_xfer_total: None,
        }),
    );
    agent.expect("start", |m| {
        matches!(m, SessionMessage::FileXferStart { id: 9, .. }).then_some(())
    });
    agent.send(&SessionMessage::FileXferStatus {
        id: 9,
        status: 0,
        disk_free_space: None,
        error_code: None,
    });
    host.expect("CAN_SEND_DATA", |_, m| status_of(m, 9));
    let mut p = Vec::new();
    p.extend_from_slice(&9u32.to_le_bytes());
    p.extend_from_slice(&0x20000u64.to_le_bytes());
    p.extend_from_slice(b"0123456789");
    send_raw(&mut host, 1, 12, &p);
    host.expect("ERROR for the lying DATA", |_, m| {
        status_of(m, 9).filter(|s| s.result == FileXferResult::Error)
    });
    agent.expect("cancel", |m| match m {
        SessionMessage::FileXferCancel { id: 9 } => Some(()),
        SessionMessage::FileXferData { .. } => panic!("lying DATA forwarded to the agent"),
        _ => None,
    });
    still_serving(&mut host);

    // 4. A 4 GiB message header: refused before allocation → the port is closed and reopened.
    let mut b = Vec::new();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&20u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    host.s.write_all(&b).unwrap();
    let mut host = Host::accept(&s.listener);
    host.handshake();
    still_serving(&mut host);
    assert!(s.daemon.alive());

    // 5. A chunk over 2048 bytes → reopen, like spice-vdagentd.
    let mut b = Vec::new();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&4096u32.to_le_bytes());
    b.extend_from_slice(&[0u8; 4096]);
    let _ = host.s.write_all(&b);
    let mut host = Host::accept(&s.listener);
    host.handshake();
    still_serving(&mut host);

    // A second agent for the same (logind-less) session is refused.
    let mut second = SessionAgent::connect(&s.session_socket());
    second.expect("refusal", |m| match m {
        SessionMessage::Error { code, .. } => Some(code.clone()),
        _ => None,
    });
    assert!(s.daemon.alive(), "guestlinkd died");
}

#[test]
fn without_logind_and_without_no_logind_spice_only_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("state")).unwrap();
    let out = Command::new(guestlinkd_path())
        .args(["-m", "none"])
        .arg("-t")
        .arg(dir.path().join("state"))
        .arg("--spice-path")
        .arg(dir.path().join("vport"))
        .arg("--session-socket")
        .arg(dir.path().join("session.sock"))
        .env("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/bus")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-logind"), "no hint in: {err}");
}

/// Byte `i` of the test file of transfer `id`.
fn file_byte(id: u32, i: usize) -> u8 {
    (i.wrapping_mul(31).wrapping_add(id as usize * 7) % 251) as u8
}

/// START of transfer `id` (`size` bytes) from the host, answered CAN_SEND_DATA by the agent.
fn begin_transfer(host: &mut Host, agent: &mut SessionAgent, id: u32, size: usize) {
    host.send(
        Port::Client,
        &Message::FileXferStart(FileXferStart {
            id,
            name: format!("big{id}.bin"),
            size: size as u64,
            file_xfer_nr: None,
            file_xfer_total: None,
        }),
    );
    agent.expect("xfer start", |m| {
        matches!(m, SessionMessage::FileXferStart { id: i, .. } if *i == id).then_some(())
    });
    agent.send(&SessionMessage::FileXferStatus {
        id,
        status: 0,
        disk_free_space: None,
        error_code: None,
    });
    host.expect("CAN_SEND_DATA", |_, m| {
        status_of(m, id).filter(|s| s.result == FileXferResult::CanSendData)
    });
}

/// Starts file transfer `id` of `size` bytes: START, the agent's CAN_SEND_DATA, then a thread writing all DATA
/// messages (`piece` bytes each) to the port; the thread returns whether it wrote everything, and sets `done`.
fn start_transfer(
    host: &mut Host,
    agent: &mut SessionAgent,
    id: u32,
    size: usize,
    piece: usize,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<bool> {
    begin_transfer(host, agent, id, size);
    let mut w = host.s.try_clone().unwrap();
    let wire = host.wire;
    std::thread::spawn(move || {
        let mut ok = true;
        for start in (0..size).step_by(piece) {
            let data: Vec<u8> = (start..(start + piece).min(size))
                .map(|i| file_byte(id, i))
                .collect();
            let m = Message::FileXferData(FileXferData { id, data });
            let b = encode_message(Port::Client, &m, wire, ChunkMode::Split).unwrap();
            if w.write_all(&b).is_err() {
                ok = false;
                break;
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        ok
    })
}

/// Reads FileXferData of transfer `id` until `upto` bytes have arrived in total, checking every byte.
fn agent_read_data(agent: &mut SessionAgent, id: u32, got: &mut usize, upto: usize) {
    while *got < upto {
        let data = agent.expect("xfer data", |m| match m {
            SessionMessage::FileXferData { id: i, data } if *i == id => Some(data.clone()),
            _ => None,
        });
        for (k, b) in data.iter().enumerate() {
            assert_eq!(
                *b,
                file_byte(id, *got + k),
                "byte {} of transfer {id}",
                *got + k
            );
        }
        *got += data.len();
    }
    assert_eq!(*got, upto, "more data than the file size");
}

/// Backpressure (docs/spice.md "Flow control"): an agent that stops reading for a few seconds in the middle of a
/// multi-MiB transfer is not dropped — the daemon stops reading the port, so the host blocks — and the file
/// arrives intact; an agent that stops for longer than the stall timeout is dropped.
#[test]
fn slow_agent_gets_backpressure_and_a_stuck_one_is_dropped() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // The pause (3 s) leaves a wide margin below the stall timeout for a loaded machine.
    const STALL_MS: u64 = 10_000;
    const PAUSE: Duration = Duration::from_secs(3);
    const SIZE: usize = 8 << 20;
    const PIECE: usize = 8 * 1024;
    let mut s = Setup::start_with(&[("GUESTLINKD_SPICE_AGENT_STALL_MS", &STALL_MS.to_string())]);
    let mut agent = SessionAgent::connect(&s.session_socket());
    agent.hello_and_geometry();
    let mut host = Host::accept(&s.listener);
    host.handshake();

    // 1. A pause of a few seconds (below the stall timeout): backpressure, then the whole file.
    let done = Arc::new(AtomicBool::new(false));
    let writer = start_transfer(&mut host, &mut agent, 1, SIZE, PIECE, Arc::clone(&done));
    let mut got = 0;
    agent_read_data(&mut agent, 1, &mut got, 1 << 20);
    std::thread::sleep(PAUSE);
    assert!(
        !done.load(Ordering::SeqCst),
        "the host wrote all 8 MiB while the agent was not reading: no backpressure (memory grows)"
    );
    agent_read_data(&mut agent, 1, &mut got, SIZE);
    assert!(writer.join().unwrap(), "the host's DATA writes failed");
    agent.send(&SessionMessage::FileXferStatus {
        id: 1,
        status: 3,
        disk_free_space: None,
        error_code: None,
    });
    host.expect("SUCCESS", |_, m| {
        status_of(m, 1).filter(|s| s.result == FileXferResult::Success)
    });

    // 2. An agent that stops reading for good is dropped after the stall timeout (not at once): the transfer
    //    fails towards the host and the port closes (no agent left).
    let done = Arc::new(AtomicBool::new(false));
    let writer = start_transfer(&mut host, &mut agent, 2, SIZE, PIECE, Arc::clone(&done));
    let mut got = 0;
    agent_read_data(&mut agent, 2, &mut got, 1 << 20);
    let stopped = Instant::now();
    let deadline = stopped + TIMEOUT + Duration::from_millis(STALL_MS);
    loop {
        match host.recv_within(Duration::from_secs(1)) {
            None if Instant::now() > deadline => panic!("the stuck agent was never dropped"),
            None if port_closed(&mut host) => break,
            Some((_, m)) if status_of(&m, 2).is_some_and(|s| s.result == FileXferResult::Error) => {
                break
            }
            _ => {}
        }
    }
    let waited = stopped.elapsed();
    assert!(
        waited >= Duration::from_millis(STALL_MS - 2000),
        "the agent was dropped after {waited:?}, before the {STALL_MS} ms stall timeout"
    );
    // The daemon closes the port (no agent can serve), so the blocked host writer ends.
    drop(host);
    let _ = writer.join().unwrap();
    assert!(s.daemon.alive());
}

/// Bounded memory against a hostile host (docs/protocol/vdagent.md#hostile-input): FILE_XFER_DATA messages of 32 MiB
/// each (spice-gtk sends 64 KiB) for an agent that does not read are held only up to the agent queue's 16 MiB byte
/// budget plus the message in hand — not queued 256 deep, which let 256 such messages pile up (8 GiB) — and once the
/// agent reads again every byte arrives, in order.
#[test]
fn huge_data_messages_for_a_stalled_agent_stay_within_the_queue_budget() {
    const MSG: usize = 32 << 20;
    const COUNT: usize = 8;
    let mut s = Setup::start();
    let mut agent = SessionAgent::connect(&s.session_socket());
    agent.hello_and_geometry();
    let mut host = Host::accept(&s.listener);
    host.handshake();
    begin_transfer(&mut host, &mut agent, 5, MSG * COUNT);
    let data: Vec<u8> = (0..MSG).map(|i| (i % 251) as u8).collect();
    let m = Message::FileXferData(FileXferData {
        id: 5,
        data: data.clone(),
    });
    let bytes = encode_message(Port::Client, &m, host.wire, ChunkMode::Split).unwrap();
    let mut w = host.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || (0..COUNT).all(|_| w.write_all(&bytes).is_ok()));
    // The agent does not read: the daemon takes what it will (all of it, unbounded), then the host blocks.
    let until = Instant::now() + Duration::from_secs(6);
    while !writer.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.daemon.0.id())).unwrap();
    let hwm_kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    // Budget (16 MiB, a 32 MiB frame takes it alone) + the frame being written + one in the backlog + one being
    // reassembled, plus the daemon itself: about 110 MiB. Without the byte budget it was all 256 MiB and more.
    assert!(
        hwm_kib < 180 * 1024,
        "guestlinkd held {} MiB for an agent that did not read",
        hwm_kib / 1024
    );
    assert!(
        !writer.is_finished(),
        "the host wrote all {COUNT} messages: no backpressure"
    );
    for k in 0..COUNT {
        let got = agent.expect("xfer data", |m| match m {
            SessionMessage::FileXferData { id: 5, data: d } => Some(*d == data),
            _ => None,
        });
        assert!(got, "DATA message {k} arrived changed");
    }
    assert!(writer.join().unwrap(), "the host's DATA writes failed");
    assert!(s.daemon.alive());
}

//! The issue-18 wire checks that must hold on every transport of the SPICE port (a unix socket in
//! `spice_daemon_guard.rs`, a pty pair in `spice_daemon_pty.rs`): a hostile burst that resets the port, the newest
//! capabilities governing the wire after it, and PRIMARY never reaching a client without CLIPBOARD_SELECTION.

use std::time::Duration;

use guestlink_protocol::session::SessionMessage;
use guestlink_protocol::vdagent::{
    Capabilities, ClipboardType, Message, Port, Selection, WireFormat,
};

use super::daemon_peers::{Host, SessionAgent, SPICE_GTK_CAPS};

/// One raw vdagent chunk (port, size) holding one message header (protocol 1, `msg_type`, opaque 0) and `payload`,
/// written by hand so that a test can send what the codec would refuse to encode.
pub fn raw_chunk(port: u32, msg_type: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&port.to_le_bytes());
    b.extend_from_slice(&(20 + payload.len() as u32).to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&msg_type.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// Issue 18 bug 1's burst: malformed but well-framed messages (random types and sizes), capabilities with random
/// words and without CLIPBOARD_SELECTION (bit 6), then a chunk with an invalid port and a message header over the
/// size limit, after which guestlinkd resets the port. Deterministic (xorshift from a fixed seed).
pub fn malformed_burst() -> Vec<u8> {
    let mut burst = Vec::new();
    let mut x = 0x9e37_79b9u32;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    for _ in 0..20 {
        let t = 17 + rnd() % 200;
        let payload: Vec<u8> = (0..rnd() % 300).map(|_| rnd() as u8).collect();
        burst.extend(raw_chunk(1, t, &payload));
    }
    let mut caps = Vec::new();
    for w in [0u32, 0x1234_5601 & !(1 << 6), rnd(), rnd()] {
        caps.extend_from_slice(&w.to_le_bytes());
    }
    burst.extend(raw_chunk(1, 6, &caps));
    burst.extend(raw_chunk(7, 1, &[0; 13]));
    burst.extend(raw_chunk(1, 4, &[]));
    let n = burst.len();
    burst[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    burst
}

/// After a reset in which guestlinkd announced `ours` with request=1: a fresh client answers with spice-gtk's caps
/// (CLIPBOARD_SELECTION, GRAB_SERIAL) and grabs. The agent must get that grab, and the agent's request must reach
/// the host with the selection prefix (`Host` decodes with the negotiated format: a legacy 4-byte request fails).
pub fn check_newest_caps_govern(host: &mut Host, agent: &mut SessionAgent, ours: &Capabilities) {
    let client = Capabilities::from_words(&[SPICE_GTK_CAPS]);
    host.send(
        Port::Client,
        &Message::AnnounceCapabilities {
            request: false,
            caps: client.clone(),
        },
    );
    host.wire = WireFormat::negotiate(&client, ours);
    assert!(host.wire.selection && host.wire.grab_serial);
    host.send(
        Port::Client,
        &Message::ClipboardGrab {
            selection: Selection::Clipboard,
            serial: Some(0),
            types: vec![ClipboardType::Utf8Text],
        },
    );
    let types = agent.expect("the host's grab", |m| match m {
        SessionMessage::ClipboardGrab { selection, types }
            if *selection == Selection::Clipboard =>
        {
            Some(types.clone())
        }
        _ => None,
    });
    assert_eq!(
        types,
        vec![ClipboardType::Utf8Text],
        "grab read in the wrong format"
    );
    agent.send(&SessionMessage::ClipboardRequest {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
    });
    let sel = host.expect("the guest's request", |_, m| match m {
        Message::ClipboardRequest {
            selection,
            data_type: ClipboardType::Utf8Text,
        } => Some(*selection),
        _ => None,
    });
    assert_eq!(sel, Selection::Clipboard);
}

/// Issue 18 bug 2, from a freshly opened port: a client announcing spice-gtk's caps without CLIPBOARD_SELECTION (6)
/// and GRAB_SERIAL (17) gets no grab when the guest's PRIMARY changes; the CLIPBOARD grab that follows crosses.
pub fn check_primary_never_reaches_a_legacy_client(host: &mut Host, agent: &mut SessionAgent) {
    let (_, m) = host.recv();
    let Message::AnnounceCapabilities { caps: ours, .. } = m else {
        panic!("first message is not ANNOUNCE_CAPABILITIES: {m:?}");
    };
    let legacy = Capabilities::from_words(&[SPICE_GTK_CAPS & !(1 << 6) & !(1 << 17)]);
    host.send(
        Port::Client,
        &Message::AnnounceCapabilities {
            request: true,
            caps: legacy.clone(),
        },
    );
    host.wire = WireFormat::negotiate(&legacy, &ours);
    assert!(!host.wire.selection);
    host.expect("our caps", |_, m| {
        matches!(m, Message::AnnounceCapabilities { request: false, .. }).then_some(())
    });
    agent.send(&SessionMessage::ClipboardGrab {
        selection: Selection::Primary,
        types: vec![ClipboardType::Utf8Text],
    });
    // Then CLIPBOARD: the first grab the host sees must be this one.
    std::thread::sleep(Duration::from_millis(300));
    agent.send(&SessionMessage::ClipboardGrab {
        selection: Selection::Clipboard,
        types: vec![ClipboardType::ImagePng],
    });
    let types = host.expect("a grab", |_, m| match m {
        Message::ClipboardGrab { types, .. } => Some(types.clone()),
        _ => None,
    });
    assert_eq!(
        types,
        vec![ClipboardType::ImagePng],
        "the guest's PRIMARY grab reached a client without CLIPBOARD_SELECTION"
    );
}

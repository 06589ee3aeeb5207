//! Unit tests of [`super::router::Router`]: session activation, port wish, grab serials, transfer binding, the
//! clipboard of a locked session and of a login screen.

use guestlink_protocol::session::{GeometryMonitor, SessionMessage};
use guestlink_protocol::vdagent::{
    encode_message, Capabilities, ChunkMode, ClipboardType, FileXferResult, FileXferStart, Message,
    MonitorConfig, MonitorsConfig, MouseState, Port, Reassembler, ReassemblerConfig, Selection,
    WireFormat,
};

use super::router::{our_caps, Action, Router};

fn raw(m: &Message, wire: WireFormat) -> guestlink_protocol::vdagent::RawMessage {
    let bytes = encode_message(Port::Client, m, wire, ChunkMode::Split).unwrap();
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    r.feed(&bytes).pop().unwrap().unwrap().1
}

fn port_msgs(acts: &[Action], wire: WireFormat) -> Vec<Message> {
    let mut r = Reassembler::new(ReassemblerConfig::host_side());
    acts.iter()
        .filter_map(|a| match a {
            Action::Port(b) => Some(b.clone()),
            Action::PortData { head, data } => Some([head.as_slice(), data].concat()),
            _ => None,
        })
        .flat_map(|b| r.feed(&b))
        .map(|e| e.unwrap().1.decode(wire).unwrap())
        .collect()
}

fn geometry() -> SessionMessage {
    SessionMessage::Geometry {
        monitors: vec![GeometryMonitor {
            display_id: 0,
            x: 0,
            y: 0,
            width: 800,
            height: 600,
        }],
    }
}

/// A router with agent 1 of session "s1" active and a spice-gtk client connected.
fn ready() -> (Router, WireFormat) {
    let mut r = Router::new();
    r.set_active(Some("s1".into()), false, true);
    r.agent_connected(1, "s1".into()).unwrap();
    r.on_agent(1, geometry());
    assert!(r.wants_port());
    r.port_opened();
    let client = Capabilities::from_words(&[0x0003_5077]);
    let wire = WireFormat::negotiate(&our_caps(), &client);
    r.on_port(
        Port::Client,
        raw(
            &Message::AnnounceCapabilities {
                request: true,
                caps: client,
            },
            WireFormat::default(),
        ),
    );
    (r, wire)
}

#[test]
fn port_wanted_only_for_the_active_agent_with_geometry() {
    let mut r = Router::new();
    r.agent_connected(1, "s1".into()).unwrap();
    r.on_agent(1, geometry());
    assert!(!r.wants_port(), "no active session yet");
    r.set_active(Some("s2".into()), false, true);
    assert!(!r.wants_port(), "agent of another session");
    let acts = r.set_active(Some("s1".into()), false, true);
    assert!(r.wants_port());
    assert!(acts.iter().any(|a| matches!(a, Action::Tablet(_))));
    assert_eq!(
        r.agent_connected(2, "s1".into()).unwrap_err(),
        super::router::Refusal::SessionTaken
    );
    r.agent_gone(1);
    assert!(!r.wants_port());
}

#[test]
fn grab_serials_follow_vdagentd_rule() {
    let (mut r, wire) = ready();
    let grab = |serial| Message::ClipboardGrab {
        selection: Selection::Clipboard,
        serial: Some(serial),
        types: vec![ClipboardType::Utf8Text],
    };
    let forwarded = |acts: &[Action]| {
        acts.iter()
            .any(|a| matches!(a, Action::Agent(1, SessionMessage::ClipboardGrab { .. })))
    };
    assert!(forwarded(&r.on_port(Port::Client, raw(&grab(0), wire))));
    assert!(
        forwarded(&r.on_port(Port::Client, raw(&grab(0), wire))),
        "counter-1 is accepted (client wins)"
    );
    assert!(
        !forwarded(&r.on_port(Port::Client, raw(&grab(1000), wire))),
        "stale serial dropped"
    );
    // Guest grabs carry the shared counter.
    let acts = r.on_agent(
        1,
        SessionMessage::ClipboardGrab {
            selection: Selection::Clipboard,
            types: vec![ClipboardType::Utf8Text],
        },
    );
    assert!(matches!(
        port_msgs(&acts, wire)[..],
        [Message::ClipboardGrab {
            serial: Some(1),
            ..
        }]
    ));
}

#[test]
fn inactive_agents_see_nothing_and_transfers_stay_bound() {
    let (mut r, wire) = ready();
    r.agent_connected(2, "s2".into()).unwrap();
    // Agent 2 is not active: its request is answered empty, its grab never reaches the host.
    let acts = r.on_agent(
        2,
        SessionMessage::ClipboardRequest {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
        },
    );
    assert!(matches!(
        &acts[..],
        [Action::Agent(
            2,
            SessionMessage::ClipboardData {
                data_type: ClipboardType::None,
                ..
            }
        )]
    ));
    assert!(r
        .on_agent(
            2,
            SessionMessage::ClipboardGrab {
                selection: Selection::Clipboard,
                types: vec![]
            }
        )
        .is_empty());
    // A transfer is bound to agent 1; agent 2 cannot report on it.
    let start = Message::FileXferStart(FileXferStart {
        id: 5,
        name: "f".into(),
        size: 1,
        file_xfer_nr: None,
        file_xfer_total: None,
    });
    r.on_port(Port::Client, raw(&start, wire));
    let st = |status| SessionMessage::FileXferStatus {
        id: 5,
        status,
        disk_free_space: None,
        error_code: None,
    };
    assert!(r.on_agent(2, st(3)).is_empty());
    assert_eq!(port_msgs(&r.on_agent(1, st(0)), wire).len(), 1);
    // Switching the active session releases nothing that was not grabbed, and re-sends the stored state.
    let acts = r.set_active(Some("s2".into()), false, true);
    assert!(acts
        .iter()
        .all(|a| !matches!(a, Action::Port(_) | Action::PortData { .. })));
}

fn start(id: u32, name: &str) -> Message {
    Message::FileXferStart(FileXferStart {
        id,
        name: name.into(),
        size: 10,
        file_xfer_nr: None,
        file_xfer_total: None,
    })
}

fn start_result(acts: &[Action], wire: WireFormat) -> Option<FileXferResult> {
    port_msgs(acts, wire).into_iter().find_map(|m| match m {
        Message::FileXferStatus(st) => Some(st.result),
        _ => None,
    })
}

#[test]
fn locked_and_greeter_sessions_refuse_transfers_like_vdagentd() {
    let (mut r, wire) = ready();
    // Locked: START answered SESSION_LOCKED; nothing reaches the agent.
    r.set_active(Some("s1".into()), true, true);
    let acts = r.on_port(Port::Client, raw(&start(1, "a.txt"), wire));
    assert_eq!(
        start_result(&acts, wire),
        Some(FileXferResult::SessionLocked)
    );
    assert!(!acts.iter().any(|a| matches!(a, Action::Agent(..))));
    // Unlocked: the transfer goes to the agent.
    r.set_active(Some("s1".into()), false, true);
    let acts = r.on_port(Port::Client, raw(&start(2, "b.txt"), wire));
    assert!(acts.iter().any(|a| matches!(
        a,
        Action::Agent(1, SessionMessage::FileXferStart { id: 2, .. })
    )));
    // The same session losing file transfer: its agent is told, and STARTs are answered DISABLED.
    let acts = r.set_active(Some("s1".into()), false, false);
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::Agent(1, SessionMessage::FileXferDisable))));
    let acts = r.on_port(Port::Client, raw(&start(3, "c.txt"), wire));
    assert_eq!(start_result(&acts, wire), Some(FileXferResult::Disabled));
}

#[test]
fn a_greeter_agent_is_disabled_when_it_becomes_active_and_a_user_agent_is_not() {
    let mut r = Router::new();
    r.agent_connected(1, "greeter".into()).unwrap();
    r.on_agent(1, geometry());
    r.agent_connected(2, "user".into()).unwrap();
    r.on_agent(2, geometry());
    let acts = r.set_active(Some("greeter".into()), false, false);
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::Agent(1, SessionMessage::FileXferDisable))));
    // VT switch to the user's session: its agent is activated without FILE_XFER_DISABLE.
    let acts = r.set_active(Some("user".into()), false, true);
    assert_eq!(r.active_agent(), Some(2));
    assert!(!acts
        .iter()
        .any(|a| matches!(a, Action::Agent(_, SessionMessage::FileXferDisable))));
}

#[test]
fn streamed_clipboard_answers_go_to_the_port_only_from_the_active_agent() {
    let (mut r, wire) = ready();
    r.agent_connected(2, "s2".into()).unwrap();
    let answer = |_: usize| SessionMessage::ClipboardData {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: Vec::new(),
    };
    let acts = r.on_agent_stream(1, answer(0), 100_000);
    let [Action::PortStream {
        agent: 1,
        head,
        len: 100_000,
    }] = &acts[..]
    else {
        panic!("{acts:?}");
    };
    // The head followed by the data is the whole CLIPBOARD message.
    let data = vec![7u8; 100_000];
    let mut reasm = Reassembler::new(ReassemblerConfig::host_side());
    let got: Vec<_> = reasm
        .feed(&[head.as_slice(), &data].concat())
        .into_iter()
        .map(|e| e.unwrap().1.decode(wire).unwrap())
        .collect();
    assert_eq!(
        got,
        vec![Message::Clipboard {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data
        }]
    );
    // Not the active agent: dropped.
    assert!(r.on_agent_stream(2, answer(0), 100_000).is_empty());
    // Over the client's MAX_CLIPBOARD: an empty answer instead, and no stream.
    r.on_port(
        Port::Client,
        raw(&Message::MaxClipboard { max: 1000 }, wire),
    );
    let acts = r.on_agent_stream(1, answer(0), 100_000);
    assert!(!acts.iter().any(|a| matches!(a, Action::PortStream { .. })));
    assert!(matches!(
        &port_msgs(&acts, wire)[..],
        [Message::Clipboard { data, .. }] if data.is_empty()
    ));
}

/// A router like [`ready`] whose client announced `words` (with `request`).
fn ready_with(words: u32) -> (Router, WireFormat) {
    let (mut r, _) = ready();
    let client = Capabilities::from_words(&[words]);
    r.on_port(
        Port::Client,
        raw(
            &Message::AnnounceCapabilities {
                request: true,
                caps: client.clone(),
            },
            WireFormat::default(),
        ),
    );
    (r, WireFormat::negotiate(&our_caps(), &client))
}

/// Issue 18 bug 2: a client without CLIPBOARD_SELECTION gets no PRIMARY traffic from the guest (spice-vdagentd
/// sends only CLIPBOARD to such clients); CLIPBOARD still crosses.
#[test]
fn primary_does_not_reach_a_client_without_clipboard_selection() {
    // spice-gtk's caps without CLIPBOARD_SELECTION (bit 6) and GRAB_SERIAL (bit 17).
    let (mut r, wire) = ready_with(0x0003_5077 & !(1 << 6) & !(1 << 17));
    assert!(!wire.selection);
    let grab = |selection| SessionMessage::ClipboardGrab {
        selection,
        types: vec![ClipboardType::Utf8Text],
    };
    assert!(port_msgs(&r.on_agent(1, grab(Selection::Primary)), wire).is_empty());
    assert!(port_msgs(
        &r.on_agent(
            1,
            SessionMessage::ClipboardRelease {
                selection: Selection::Primary
            }
        ),
        wire
    )
    .is_empty());
    let acts = r.on_agent(
        1,
        SessionMessage::ClipboardRequest {
            selection: Selection::Primary,
            data_type: ClipboardType::Utf8Text,
        },
    );
    assert!(
        port_msgs(&acts, wire).is_empty(),
        "no PRIMARY request to the client"
    );
    assert!(acts.iter().any(|a| matches!(
        a,
        Action::Agent(
            1,
            SessionMessage::ClipboardData {
                data_type: ClipboardType::None,
                ..
            }
        )
    )));
    assert!(matches!(
        port_msgs(&r.on_agent(1, grab(Selection::Clipboard)), wire)[..],
        [Message::ClipboardGrab {
            selection: Selection::Clipboard,
            ..
        }]
    ));
    // With the capability, PRIMARY crosses.
    let (mut r, wire) = ready_with(0x0003_5077);
    assert!(matches!(
        port_msgs(&r.on_agent(1, grab(Selection::Primary)), wire)[..],
        [Message::ClipboardGrab {
            selection: Selection::Primary,
            ..
        }]
    ));
}

/// Issue 18 bug 1: after a port reset and after a new client, only the newest announcement decides the wire
/// format, both for what the guest sends (a REQUEST with the selection prefix) and for what it reads.
#[test]
fn the_newest_capabilities_govern_the_wire_after_a_reset_and_a_new_client() {
    let (mut r, _) = ready_with(0x0003_5077 & !(1 << 6) & !(1 << 17));
    // A hostile announcement with random words, then a reset (port closed and reopened).
    r.on_port(
        Port::Client,
        raw(
            &Message::AnnounceCapabilities {
                request: false,
                caps: Capabilities::from_words(&[0x1234_5678, 0xdead_beef, 7]),
            },
            WireFormat::default(),
        ),
    );
    r.port_closed();
    r.port_opened();
    let client = Capabilities::from_words(&[0x0003_5077]);
    let wire = WireFormat::negotiate(&our_caps(), &client);
    assert!(wire.selection && wire.grab_serial);
    r.on_port(
        Port::Client,
        raw(
            &Message::AnnounceCapabilities {
                request: false,
                caps: client,
            },
            WireFormat::default(),
        ),
    );
    let grab = Message::ClipboardGrab {
        selection: Selection::Clipboard,
        serial: Some(0),
        types: vec![ClipboardType::Utf8Text],
    };
    let acts = r.on_port(Port::Client, raw(&grab, wire));
    assert!(acts.iter().any(|a| matches!(
        a,
        Action::Agent(1, SessionMessage::ClipboardGrab { types, .. }) if types == &[ClipboardType::Utf8Text]
    )));
    let acts = r.on_agent(
        1,
        SessionMessage::ClipboardRequest {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
        },
    );
    let Some(Action::Port(bytes)) = acts.first() else {
        panic!("no request to the client: {acts:?}");
    };
    // Chunk header 8 + message header 20 + selection prefix 4 + type 4.
    assert_eq!(
        bytes.len(),
        36,
        "CLIPBOARD_REQUEST without the selection prefix"
    );
}

/// Issue 16 finding 5: a host grab with a huge type list reaches the agent capped; so does an agent's grab.
#[test]
fn grab_types_are_capped_both_ways() {
    let (mut r, wire) = ready();
    let many: Vec<ClipboardType> = (0..10_000)
        .map(|i| ClipboardType::from_u32(i % 7))
        .collect();
    let grab = Message::ClipboardGrab {
        selection: Selection::Clipboard,
        serial: Some(0),
        types: many.clone(),
    };
    let acts = r.on_port(Port::Client, raw(&grab, wire));
    let forwarded = acts.iter().find_map(|a| match a {
        Action::Agent(1, SessionMessage::ClipboardGrab { types, .. }) => Some(types.len()),
        _ => None,
    });
    assert_eq!(forwarded, Some(super::router::MAX_GRAB_TYPES));
    let acts = r.on_agent(
        1,
        SessionMessage::ClipboardGrab {
            selection: Selection::Clipboard,
            types: many,
        },
    );
    assert!(matches!(
        &port_msgs(&acts, wire)[..],
        [Message::ClipboardGrab { types, .. }] if types.len() == super::router::MAX_GRAB_TYPES
    ));
}

/// The clipboard actions in `acts`: frames to agent 1 and messages to the client.
fn clip_to_agent(acts: &[Action]) -> Vec<&SessionMessage> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Agent(
                1,
                m @ (SessionMessage::ClipboardGrab { .. }
                | SessionMessage::ClipboardRequest { .. }
                | SessionMessage::ClipboardData { .. }
                | SessionMessage::ClipboardRelease { .. }),
            ) => Some(m),
            _ => None,
        })
        .collect()
}

fn host_grab(serial: u32) -> Message {
    Message::ClipboardGrab {
        selection: Selection::Clipboard,
        serial: Some(serial),
        types: vec![ClipboardType::Utf8Text],
    }
}

fn host_request() -> Message {
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

fn guest_answer(text: &[u8]) -> SessionMessage {
    SessionMessage::ClipboardData {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: text.to_vec(),
    }
}

/// The client got exactly one CLIPBOARD, empty (type NONE): a refusal that ends spice-gtk's wait.
fn is_empty_answer(msgs: &[Message]) -> bool {
    matches!(
        msgs,
        [Message::Clipboard {
            data_type: ClipboardType::None,
            data,
            ..
        }] if data.is_empty()
    )
}

#[test]
fn a_locked_session_keeps_its_clipboard_and_unlock_offers_the_withheld_host_grab() {
    let (mut r, wire) = ready();
    // The guest owned the clipboard before the lock.
    assert_eq!(port_msgs(&r.on_agent(1, guest_grab()), wire).len(), 1);
    assert!(r.set_active(Some("s1".into()), true, true).is_empty());
    // The host pastes: answered empty at once, the locked agent is not asked.
    let acts = r.on_port(Port::Client, raw(&host_request(), wire));
    assert!(clip_to_agent(&acts).is_empty(), "{acts:?}");
    assert!(is_empty_answer(&port_msgs(&acts, wire)), "{acts:?}");
    // An answer the agent still sends (to a request from before the lock) leaves empty.
    let acts = r.on_agent(1, guest_answer(b"secret"));
    assert!(matches!(
        &port_msgs(&acts, wire)[..],
        [Message::Clipboard { data, .. }] if data.is_empty()
    ));
    let acts = r.on_agent_stream(1, guest_answer(b""), 100_000);
    assert!(!acts.iter().any(|a| matches!(a, Action::PortStream { .. })));
    assert!(matches!(
        &port_msgs(&acts, wire)[..],
        [Message::Clipboard { data, .. }] if data.is_empty()
    ));
    // A guest grab does not reach the host.
    assert!(port_msgs(&r.on_agent(1, guest_grab()), wire).is_empty());
    // The host grabs: not offered to the locked session; the agent's own request is answered empty.
    let acts = r.on_port(Port::Client, raw(&host_grab(0), wire));
    assert!(clip_to_agent(&acts).is_empty(), "{acts:?}");
    let acts = r.on_agent(
        1,
        SessionMessage::ClipboardRequest {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
        },
    );
    assert!(port_msgs(&acts, wire).is_empty());
    assert!(matches!(
        &clip_to_agent(&acts)[..],
        [SessionMessage::ClipboardData {
            data_type: ClipboardType::None,
            ..
        }]
    ));
    // Host data arriving while locked reaches the agent empty.
    let data = Message::Clipboard {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: b"host".to_vec(),
    };
    let acts = r.on_port(Port::Client, raw(&data, wire));
    assert!(matches!(
        &clip_to_agent(&acts)[..],
        [SessionMessage::ClipboardData { data, .. }] if data.is_empty()
    ));
    // Unlock: the host's grab (the newest) is offered, without a reconnect; the guest's older one is not.
    let acts = r.set_active(Some("s1".into()), false, true);
    assert!(matches!(
        &clip_to_agent(&acts)[..],
        [SessionMessage::ClipboardGrab { selection: Selection::Clipboard, types }]
            if types == &[ClipboardType::Utf8Text]
    ));
    assert!(port_msgs(&acts, wire).is_empty());
    // And the clipboard works both ways again.
    let acts = r.on_port(Port::Client, raw(&data, wire));
    assert!(matches!(
        &clip_to_agent(&acts)[..],
        [SessionMessage::ClipboardData { data, .. }] if data == b"host"
    ));
    let acts = r.on_port(Port::Client, raw(&host_request(), wire));
    assert!(matches!(
        &clip_to_agent(&acts)[..],
        [SessionMessage::ClipboardRequest { .. }]
    ));
    let acts = r.on_agent(1, guest_answer(b"after"));
    assert!(matches!(
        &port_msgs(&acts, wire)[..],
        [Message::Clipboard { data, .. }] if data == b"after"
    ));
}

#[test]
fn unlock_offers_only_the_newest_grab_and_only_if_still_current() {
    let (mut r, wire) = ready();
    r.set_active(Some("s1".into()), true, true);
    // Host grab, then a guest grab: on unlock the guest's goes to the client (with its serial), the host's not.
    r.on_port(Port::Client, raw(&host_grab(0), wire));
    r.on_agent(1, guest_grab());
    let acts = r.set_active(Some("s1".into()), false, true);
    assert!(clip_to_agent(&acts).is_empty(), "{acts:?}");
    assert!(matches!(
        &port_msgs(&acts, wire)[..],
        [Message::ClipboardGrab {
            selection: Selection::Clipboard,
            serial: Some(1), // the shared counter: the host's grab 0 was accepted
            ..
        }]
    ));
    // A host grab released while locked is not offered.
    r.set_active(Some("s1".into()), true, true);
    r.on_port(Port::Client, raw(&host_grab(1), wire));
    let release = Message::ClipboardRelease {
        selection: Selection::Clipboard,
    };
    r.on_port(Port::Client, raw(&release, wire));
    let acts = r.set_active(Some("s1".into()), false, true);
    assert!(clip_to_agent(&acts).is_empty(), "{acts:?}");
    // A host grab withheld from a client that then disconnected is not offered.
    r.set_active(Some("s1".into()), true, true);
    r.on_port(Port::Client, raw(&host_grab(2), wire));
    r.on_port(
        Port::Server,
        raw(&Message::ClientDisconnected, WireFormat::default()),
    );
    assert!(clip_to_agent(&r.set_active(Some("s1".into()), false, true)).is_empty());
}

#[test]
fn a_withheld_grab_is_not_offered_to_another_session() {
    let (mut r, wire) = ready();
    r.agent_connected(2, "s2".into()).unwrap();
    r.on_agent(2, geometry());
    r.set_active(Some("s1".into()), true, true);
    r.on_port(Port::Client, raw(&host_grab(0), wire));
    // VT switch to s2 (unlocked), then back to s1 unlocked: the grab withheld from s1 is offered to neither.
    let acts = r.set_active(Some("s2".into()), false, true);
    assert!(!acts
        .iter()
        .any(|a| matches!(a, Action::Agent(_, SessionMessage::ClipboardGrab { .. }))));
    let acts = r.set_active(Some("s1".into()), false, true);
    assert!(clip_to_agent(&acts).is_empty(), "{acts:?}");
}

#[test]
fn a_greeter_gets_resize_and_mouse_but_no_clipboard_either_way() {
    let (mut r, wire) = ready();
    let acts = r.set_active(Some("s1".into()), false, false);
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::Agent(1, SessionMessage::FileXferDisable))));
    // Host -> guest: the grab is not offered, host data would arrive empty.
    assert!(clip_to_agent(&r.on_port(Port::Client, raw(&host_grab(0), wire))).is_empty());
    // Guest -> host: no grab, a paste answered empty without asking the agent, an agent answer goes out empty.
    assert!(port_msgs(&r.on_agent(1, guest_grab()), wire).is_empty());
    let acts = r.on_port(Port::Client, raw(&host_request(), wire));
    assert!(clip_to_agent(&acts).is_empty());
    assert!(is_empty_answer(&port_msgs(&acts, wire)));
    assert!(matches!(
        &port_msgs(&r.on_agent(1, guest_answer(b"greeter")), wire)[..],
        [Message::Clipboard { data, .. }] if data.is_empty()
    ));
    // Resize: the client's monitors config reaches the greeter's agent (and is acknowledged).
    let mc = Message::MonitorsConfig(MonitorsConfig {
        flags: 0,
        monitors: vec![MonitorConfig {
            height: 768,
            width: 1024,
            depth: 32,
            x: 0,
            y: 0,
        }],
        physical_sizes: None,
    });
    let acts = r.on_port(Port::Client, raw(&mc, wire));
    assert!(acts.iter().any(|a| matches!(
        a,
        Action::Agent(1, SessionMessage::MonitorsConfig { monitors, .. })
            if monitors.len() == 1 && monitors[0].width == 1024
    )));
    // Mouse: the pointer moves.
    let mouse = Message::MouseState(MouseState {
        x: 10,
        y: 20,
        buttons: 2,
        display_id: 0,
    });
    let acts = r.on_port(Port::Server, raw(&mouse, wire));
    assert_eq!(acts, vec![Action::Mouse(10, 20, 2)]);
}

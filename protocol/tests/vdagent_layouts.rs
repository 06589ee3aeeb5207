//! Byte layouts measured on real peers (docs/protocol/vdagent.md#observed-reference-behaviour) decoded and re-encoded.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_protocol::vdagent::{
    encode_message, validate_file_name, Capabilities, Capability, ChunkMode, ClipboardType,
    FileNameError, FileXferDetail, FileXferResult, FileXferStart, FileXferStatus, GrabSerials,
    Message, MessageType, MonitorConfig, MonitorMm, MonitorsConfig, Port, Reassembler,
    ReassemblerConfig, Selection, SerialRule, VdagentError, WireFormat,
};

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn decode_one(stream: &[u8], config: ReassemblerConfig, wire: WireFormat) -> (Port, Message) {
    let mut r = Reassembler::new(config);
    let mut events = r.feed(stream);
    assert_eq!(events.len(), 1, "{events:?}");
    let (port, raw) = events.remove(0).unwrap();
    (port, raw.decode(wire).unwrap())
}

const VDAGENTD_CAPS: u32 = 0x0003_8de7;
const SPICE_GTK_CAPS: u32 = 0x0003_5077;

#[test]
fn vdagentd_caps_word_decodes_to_its_bits() {
    let caps = Capabilities::from_words(&[VDAGENTD_CAPS]);
    let bits: Vec<u32> = caps.iter().map(Capability::bit).collect();
    assert_eq!(bits, [0, 1, 2, 5, 6, 7, 8, 10, 11, 15, 16, 17]);
    assert!(!caps.has(Capability::DisplayConfig));
    assert!(!caps.has(Capability::FileXferDetailedErrors));
    assert!(!caps.has(Capability::MonitorsConfigPosition));
    let rebuilt: Capabilities = caps.iter().collect();
    assert_eq!(rebuilt.to_words(), vec![VDAGENTD_CAPS]);
}

#[test]
fn spice_gtk_caps_word_decodes_to_its_bits() {
    let caps = Capabilities::from_words(&[SPICE_GTK_CAPS]);
    let names: Vec<&str> = caps.iter().map(Capability::name).collect();
    assert_eq!(
        names,
        [
            "MOUSE_STATE",
            "MONITORS_CONFIG",
            "REPLY",
            "DISPLAY_CONFIG",
            "CLIPBOARD_BY_DEMAND",
            "CLIPBOARD_SELECTION",
            "MONITORS_CONFIG_POSITION",
            "FILE_XFER_DETAILED_ERRORS",
            "CLIPBOARD_NO_RELEASE_ON_REGRAB",
            "CLIPBOARD_GRAB_SERIAL",
        ]
    );
    let ours = Capabilities::from_words(&[VDAGENTD_CAPS]);
    let wire = WireFormat::negotiate(&ours, &caps);
    assert_eq!(
        wire,
        WireFormat {
            selection: true,
            grab_serial: true
        }
    );
    let no_serial = Capabilities::from_words(&[SPICE_GTK_CAPS]).with(Capability::Clipboard);
    let mut peer = no_serial.clone();
    peer.clear(Capability::ClipboardGrabSerial);
    assert_eq!(
        WireFormat::negotiate(&ours, &peer),
        WireFormat {
            selection: true,
            grab_serial: false
        }
    );
    assert_eq!(
        WireFormat::negotiate(&Capabilities::new(), &caps),
        WireFormat::default()
    );
}

#[test]
fn capability_bits_and_message_types_are_numbered_like_vd_agent_h() {
    for (i, c) in Capability::ALL.iter().enumerate() {
        assert_eq!(c.bit() as usize, i);
        assert_eq!(Capability::from_bit(i as u32), Some(*c));
    }
    assert_eq!(Capability::from_bit(18), None);
    for (i, t) in MessageType::ALL.iter().enumerate() {
        assert_eq!(t.as_u32() as usize, i + 1);
        assert_eq!(MessageType::from_u32(i as u32 + 1), Some(*t));
    }
    assert_eq!(MessageType::from_u32(0), None);
    assert_eq!(MessageType::from_u32(17), None);
    let mut caps = Capabilities::from_words(&[]);
    assert!(!caps.has(Capability::MouseState));
    caps.set(Capability::ClipboardGrabSerial);
    assert_eq!(caps.words(), &[1 << 17]);
    assert!(caps.has_bit(17) && !caps.has_bit(99));
}

#[test]
fn vdagentd_announce_on_the_wire() {
    // Observed chunk body (docs/protocol/vdagent.md#observed-reference-behaviour): ANNOUNCE_CAPABILITIES, request=1,
    // caps 0x00038de7, one chunk on port 1.
    let body = hex("01000000 06000000 0000000000000000 08000000 01000000 e78d0300");
    let mut stream = hex("01000000 1c000000");
    stream.extend_from_slice(&body);
    let (port, msg) = decode_one(
        &stream,
        ReassemblerConfig::host_side(),
        WireFormat::default(),
    );
    assert_eq!(port, Port::Client);
    let Message::AnnounceCapabilities { request, caps } = &msg else {
        panic!("{msg:?}")
    };
    assert!(*request);
    assert_eq!(caps.words(), &[VDAGENTD_CAPS]);
    // Re-encoding as the guest does (one chunk) gives the same bytes.
    let out = encode_message(Port::Client, &msg, WireFormat::default(), ChunkMode::Single).unwrap();
    assert_eq!(out, stream);
}

#[test]
fn spice_gtk_monitors_config_with_physical_size() {
    // 1 monitor, flags USE_POS|PHYSICAL_SIZE, height 768 width 1024 depth 32 at 0,0, then MM height 203 width 271.
    let payload = hex("01000000 03000000  00030000 00040000 20000000 00000000 00000000  cb00 0f01");
    let msg = Message::decode(2, &payload, WireFormat::default()).unwrap();
    let expected = MonitorsConfig {
        flags: 3,
        monitors: vec![MonitorConfig {
            height: 768,
            width: 1024,
            depth: 32,
            x: 0,
            y: 0,
        }],
        physical_sizes: Some(vec![MonitorMm {
            height: 203,
            width: 271,
        }]),
    };
    assert_eq!(msg, Message::MonitorsConfig(expected.clone()));
    assert_eq!(msg.encode_payload(WireFormat::default()).unwrap(), payload);
    // The same config without PHYSICAL_SIZE (what vdagentd 0.22.1 accepts) decodes too.
    let plain = hex("01000000 01000000  00030000 00040000 20000000 00000000 00000000");
    let Message::MonitorsConfig(m) = Message::decode(2, &plain, WireFormat::default()).unwrap()
    else {
        panic!()
    };
    assert_eq!(m.physical_sizes, None);
    assert_eq!(m.monitors, expected.monitors);
    // Flag set but MM array missing, or extra bytes: refused.
    let mut truncated = payload.clone();
    truncated.truncate(payload.len() - 4);
    assert!(matches!(
        Message::decode(2, &truncated, WireFormat::default()),
        Err(VdagentError::InvalidSize { .. })
    ));
    let mut extra = plain.clone();
    extra.push(0);
    assert!(Message::decode(2, &extra, WireFormat::default()).is_err());
}

#[test]
fn file_xfer_start_keyfile() {
    let mut payload = 7u32.to_le_bytes().to_vec();
    payload.extend_from_slice(b"[vdagent-file-xfer]\nname=report 2024.txt\nsize=12\n\0");
    let msg = Message::decode(10, &payload, WireFormat::default()).unwrap();
    let start = FileXferStart {
        id: 7,
        name: "report 2024.txt".into(),
        size: 12,
        file_xfer_nr: None,
        file_xfer_total: None,
    };
    assert_eq!(msg, Message::FileXferStart(start.clone()));
    assert_eq!(msg.encode_payload(WireFormat::default()).unwrap(), payload);

    // GLib escapes: \n becomes a real newline, \s a leading space, \\ a backslash; batch keys are read.
    let mut payload = 8u32.to_le_bytes().to_vec();
    payload.extend_from_slice(
        b"# comment\n[vdagent-file-xfer]\nname = \\sa\\nb\\tc\\rd\\\\e\nsize=5\nfile-xfer-nr=2\nfile-xfer-total=3\n\0",
    );
    let Message::FileXferStart(s) = Message::decode(10, &payload, WireFormat::default()).unwrap()
    else {
        panic!()
    };
    assert_eq!(s.name, " a\nb\tc\rd\\e");
    assert_eq!(
        (s.size, s.file_xfer_nr, s.file_xfer_total),
        (5, Some(2), Some(3))
    );
    let reencoded = Message::FileXferStart(s.clone())
        .encode_payload(WireFormat::default())
        .unwrap();
    assert_eq!(
        Message::decode(10, &reencoded, WireFormat::default()).unwrap(),
        Message::FileXferStart(s)
    );

    // Invalid escape \b, trailing backslash, missing size, missing group, non-numeric size: errors.
    for text in [
        &b"[vdagent-file-xfer]\nname=a\\bc\nsize=1\n\0"[..],
        b"[vdagent-file-xfer]\nname=abc\\\nsize=1\n\0",
        b"[vdagent-file-xfer]\nname=abc\n\0",
        b"name=abc\nsize=1\n\0",
        b"[other]\nname=abc\nsize=1\n\0",
        b"[vdagent-file-xfer]\nname=abc\nsize=-1\n\0",
        b"[vdagent-file-xfer]\nname=abc\nsize=99999999999999999999\n\0",
    ] {
        let mut payload = 1u32.to_le_bytes().to_vec();
        payload.extend_from_slice(text);
        let r = Message::decode(10, &payload, WireFormat::default());
        assert!(
            matches!(r, Err(VdagentError::Keyfile(_))),
            "{:?} -> {r:?}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn clipboard_grab_with_selection_and_serial() {
    // Host→guest GRAB observed (docs/protocol/vdagent.md#observed-reference-behaviour): [sel 0][serial 0][UTF8_TEXT].
    let payload = hex("00000000 00000000 01000000");
    let both = WireFormat {
        selection: true,
        grab_serial: true,
    };
    let msg = Message::decode(7, &payload, both).unwrap();
    assert_eq!(
        msg,
        Message::ClipboardGrab {
            selection: Selection::Clipboard,
            serial: Some(0),
            types: vec![ClipboardType::Utf8Text]
        }
    );
    assert_eq!(msg.encode_payload(both).unwrap(), payload);
    // Without the capabilities the same bytes are three types.
    let Message::ClipboardGrab { serial, types, .. } =
        Message::decode(7, &payload, WireFormat::default()).unwrap()
    else {
        panic!()
    };
    assert_eq!((serial, types.len()), (None, 3));
    // PRIMARY request with prefix; reserved prefix bytes are ignored.
    let req = Message::decode(8, &hex("01ffffff 01000000"), both).unwrap();
    assert_eq!(
        req,
        Message::ClipboardRequest {
            selection: Selection::Primary,
            data_type: ClipboardType::Utf8Text
        }
    );
    // Clipboard data from the guest.
    let data = Message::decode(4, &hex("00000000 01000000 6869"), both).unwrap();
    assert_eq!(
        data,
        Message::Clipboard {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: b"hi".to_vec()
        }
    );
}

#[test]
fn clipboard_release_forms() {
    let sel = WireFormat {
        selection: true,
        grab_serial: false,
    };
    assert_eq!(
        Message::decode(9, &hex("01000000"), sel).unwrap(),
        Message::ClipboardRelease {
            selection: Selection::Primary
        }
    );
    // spice-vdagentd's 1-byte RELEASE when its agent exits (docs/protocol/vdagent.md#observed-reference-behaviour).
    assert_eq!(
        Message::decode(9, &hex("00"), sel).unwrap(),
        Message::ClipboardRelease {
            selection: Selection::Clipboard
        }
    );
    assert_eq!(
        Message::decode(9, &[], WireFormat::default()).unwrap(),
        Message::ClipboardRelease {
            selection: Selection::Clipboard
        }
    );
    assert!(Message::decode(9, &hex("0000"), sel).is_err());
    assert!(Message::decode(9, &hex("00000000 00"), sel).is_err());
}

#[test]
fn file_xfer_status_details() {
    // NOT_ENOUGH_SPACE with u64 free bytes observed from vdagentd: ...0080385913000000 = 83.1 GB.
    let payload = hex("05000000 04000000 0080385913000000");
    let msg = Message::decode(11, &payload, WireFormat::default()).unwrap();
    let Message::FileXferStatus(FileXferStatus { id, result, detail }) = &msg else {
        panic!()
    };
    assert_eq!((*id, *result), (5, FileXferResult::NotEnoughSpace));
    assert_eq!(
        detail,
        &FileXferDetail::NotEnoughSpace {
            disk_free_space: 0x13_5938_8000
        }
    );
    assert_eq!(msg.encode_payload(WireFormat::default()).unwrap(), payload);
    // ERROR with {GLIB_IO, TOO_MANY_OPEN_FILES = 31}, 5 packed bytes.
    let payload = hex("09000000 02000000 00 1f000000");
    let Message::FileXferStatus(s) = Message::decode(11, &payload, WireFormat::default()).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        s.detail,
        FileXferDetail::Error {
            error_type: 0,
            error_code: 31
        }
    );
    assert_eq!(
        FileXferResult::SessionLocked.downgrade(),
        FileXferResult::Error
    );
    assert_eq!(FileXferResult::Success.downgrade(), FileXferResult::Success);
    assert!(Message::decode(11, &hex("09000000 0200"), WireFormat::default()).is_err());
}

#[test]
fn fixed_size_messages_reject_other_sizes() {
    let w = WireFormat::default();
    let mouse = hex("64000000 c8000000 02000000 00");
    assert!(
        matches!(Message::decode(1, &mouse, w).unwrap(), Message::MouseState(m) if m.x == 100 && m.y == 200 && m.buttons == 2)
    );
    assert!(Message::decode(1, &mouse[..12], w).is_err());
    assert_eq!(
        Message::decode(3, &hex("02000000 01000000"), w).unwrap(),
        Message::Reply {
            message_type: 2,
            result: guestlink_protocol::vdagent::ReplyResult::Success
        }
    );
    assert!(Message::decode(3, &hex("02000000 01000000 00"), w).is_err());
    assert_eq!(
        Message::decode(14, &hex("ffffffff"), w).unwrap(),
        Message::MaxClipboard { max: -1 }
    );
    assert!(Message::decode(13, &[0], w).is_err());
    assert_eq!(
        Message::decode(13, &[], w).unwrap(),
        Message::ClientDisconnected
    );
    assert!(matches!(
        Message::decode(0, &[], w),
        Err(VdagentError::UnknownType(0))
    ));
    assert!(matches!(
        Message::decode(17, &[], w),
        Err(VdagentError::UnknownType(17))
    ));
    // Volume sync: playback, not muted, 2 channels at unaligned offset 3.
    let Message::AudioVolumeSync(a) = Message::decode(15, &hex("01 00 02 ffff 0080"), w).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (a.is_playback, a.mute, a.volumes),
        (true, false, vec![0xffff, 0x8000])
    );
    assert!(Message::decode(15, &hex("01 00 02 ffff"), w).is_err());
}

#[test]
fn graphics_device_info_address() {
    let mut payload = hex("01000000 00000000 00000000 00000000");
    payload.extend_from_slice(&14u32.to_le_bytes());
    payload.extend_from_slice(b"pci/0000/02.0\0");
    let Message::GraphicsDeviceInfo(g) =
        Message::decode(16, &payload, WireFormat::default()).unwrap()
    else {
        panic!()
    };
    assert_eq!(g.displays.len(), 1);
    assert_eq!(g.displays[0].device_address, b"pci/0000/02.0");
    assert_eq!(
        Message::GraphicsDeviceInfo(g)
            .encode_payload(WireFormat::default())
            .unwrap(),
        payload
    );
}

#[test]
fn protocol_field_other_than_one_is_refused() {
    let mut stream = hex("02000000 14000000  02000000 0d000000 0000000000000000 00000000");
    stream[4] = 20;
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    let (_, raw) = r.feed(&stream).remove(0).unwrap();
    assert_eq!(
        raw.decode(WireFormat::default()),
        Err(VdagentError::BadProtocol(2))
    );
}

#[test]
fn file_names() {
    for ok in [
        "report.txt",
        ".hidden",
        "a;b$(c).txt",
        "ünïcödé ✓.png",
        &"x".repeat(255),
    ] {
        assert_eq!(validate_file_name(ok), Ok(()), "{ok}");
    }
    let long = "y".repeat(256);
    let cases: [(&str, FileNameError); 10] = [
        ("", FileNameError::Empty),
        (".", FileNameError::DotEntry),
        ("..", FileNameError::DotEntry),
        ("../x", FileNameError::Separator),
        ("/abs", FileNameError::Separator),
        ("a/../../x", FileNameError::Separator),
        ("a\\b.txt", FileNameError::Backslash),
        ("a\0b", FileNameError::Nul),
        ("line\nbreak", FileNameError::Control),
        (&long, FileNameError::TooLong(256)),
    ];
    for (name, err) in cases {
        assert_eq!(validate_file_name(name), Err(err), "{name:?}");
    }
    assert!(validate_file_name("del\u{7f}").is_err());
    assert!(!FileNameError::Separator.to_string().is_empty());
}

#[test]
fn grab_serial_rules() {
    let mut guest = GrabSerials::new();
    // vdagentd: serial == counter accepted, counter-1 accepted ("client grab wins"), others dropped.
    assert!(guest.accept(Selection::Clipboard, 0, SerialRule::Guest));
    assert_eq!(guest.current(Selection::Clipboard), 1);
    assert!(guest.accept(Selection::Clipboard, 0, SerialRule::Guest));
    assert_eq!(guest.current(Selection::Clipboard), 1);
    assert!(!guest.accept(Selection::Clipboard, 1000, SerialRule::Guest));
    // Our own grab uses the shared counter.
    assert_eq!(guest.next_outgoing(Selection::Clipboard), 1);
    assert_eq!(guest.current(Selection::Clipboard), 2);
    // Selections are independent.
    assert_eq!(guest.current(Selection::Primary), 0);
    // spice-gtk: only serial == counter.
    let mut client = GrabSerials::new();
    assert!(client.accept(Selection::Primary, 0, SerialRule::Client));
    assert!(!client.accept(Selection::Primary, 0, SerialRule::Client));
    // Reset on caps request=1.
    guest.reset();
    assert_eq!(guest.current(Selection::Clipboard), 0);
    assert!(!guest.accept(Selection::Clipboard, 1, SerialRule::Guest));
}

#[test]
fn split_chunks_are_at_most_2048_bytes() {
    let msg = Message::Clipboard {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: vec![b'x'; 5000],
    };
    let stream =
        encode_message(Port::Client, &msg, WireFormat::default(), ChunkMode::Split).unwrap();
    let mut sizes = Vec::new();
    let mut rest = &stream[..];
    while !rest.is_empty() {
        assert_eq!(&rest[..4], &1u32.to_le_bytes());
        let size = u32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
        sizes.push(size);
        rest = &rest[8 + size..];
    }
    assert_eq!(sizes, [2048, 2048, 20 + 5004 - 4096]);
    let single =
        encode_message(Port::Client, &msg, WireFormat::default(), ChunkMode::Single).unwrap();
    assert_eq!(
        u32::from_le_bytes(single[4..8].try_into().unwrap()),
        20 + 5004
    );
    let (_, back) = decode_one(
        &stream,
        ReassemblerConfig::guest_side(),
        WireFormat::default(),
    );
    assert_eq!(back, msg);
}

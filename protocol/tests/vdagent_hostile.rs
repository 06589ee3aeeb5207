//! Hostile input of docs/protocol/vdagent.md#hostile-input and reassembly edge cases: every case is an error, never a
//! panic, and memory stays proportional to the bytes that actually arrived.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_protocol::vdagent::{
    encode_message, encode_raw_message, encode_raw_message_into, ChunkMode, Message, MessageHeader,
    Port, Reassembler, ReassemblerConfig, VdagentError, WireFormat,
};

fn chunk(port: u32, body: &[u8]) -> Vec<u8> {
    let mut out = port.to_le_bytes().to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn message(msg_type: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = MessageHeader::new(msg_type, payload.len() as u32)
        .encode()
        .to_vec();
    out.extend_from_slice(payload);
    out
}

fn reassemble_one(stream: &[u8]) -> Result<Message, VdagentError> {
    let mut r = Reassembler::new(ReassemblerConfig::host_side());
    let mut events = r.feed(stream);
    assert_eq!(events.len(), 1, "{events:?}");
    let (_, raw) = events.remove(0)?;
    raw.decode(WireFormat::default())
}

#[test]
fn monitor_count_overflowing_32_bits_is_refused() {
    // 12-byte message claiming 0x0CCCCCCD monitors: 0x0CCCCCCD * 20 wraps to 4 in 32 bits (crashes vdagent 0.22.1).
    let mut payload = 0x0CCC_CCCDu32.to_le_bytes().to_vec();
    payload.extend_from_slice(&[0; 8]);
    let r = reassemble_one(&chunk(1, &message(2, &payload)));
    assert!(
        matches!(
            r,
            Err(VdagentError::TooMany {
                what: "monitors",
                count: 0x0CCC_CCCD,
                max: 256
            })
        ),
        "{r:?}"
    );
    // Just above the cap and at u32::MAX, with PHYSICAL_SIZE too.
    for (num, flags) in [(257u32, 0u32), (u32::MAX, 2), (0x4000_0000, 0)] {
        let mut p = num.to_le_bytes().to_vec();
        p.extend_from_slice(&flags.to_le_bytes());
        assert!(Message::decode(2, &p, WireFormat::default()).is_err());
    }
    // The cap itself with the right size is fine.
    let mut p = 256u32.to_le_bytes().to_vec();
    p.extend_from_slice(&0u32.to_le_bytes());
    p.resize(8 + 256 * 20, 0);
    assert!(Message::decode(2, &p, WireFormat::default()).is_ok());
}

#[test]
fn huge_device_address_length_is_refused() {
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&[0; 12]);
    payload.extend_from_slice(&0x7fff_fff0u32.to_le_bytes());
    payload.extend_from_slice(b"pci\0");
    let r = reassemble_one(&chunk(2, &message(16, &payload)));
    assert!(
        matches!(
            r,
            Err(VdagentError::LengthOutOfBounds {
                declared: 0x7fff_fff0,
                available: 4,
                ..
            })
        ),
        "{r:?}"
    );
    // A huge count with no entries, and a count larger than the cap.
    assert!(Message::decode(16, &0xffff_ffffu32.to_le_bytes(), WireFormat::default()).is_err());
    assert!(Message::decode(16, &200u32.to_le_bytes(), WireFormat::default()).is_err());
    // Truncated entry header.
    let mut p = 1u32.to_le_bytes().to_vec();
    p.extend_from_slice(&[0; 10]);
    assert!(Message::decode(16, &p, WireFormat::default()).is_err());
}

#[test]
fn file_data_size_larger_than_payload_is_refused() {
    // 10 real bytes with size = 0x20000 (vdagent 0.22.1 wrote 128 KiB of heap memory into the file).
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&0x20000u64.to_le_bytes());
    payload.extend_from_slice(b"0123456789");
    let r = reassemble_one(&chunk(1, &message(12, &payload)));
    assert_eq!(
        r,
        Err(VdagentError::FileDataSizeMismatch {
            declared: 0x20000,
            actual: 10
        })
    );
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(Message::decode(12, &payload, WireFormat::default()).is_err());
    // Smaller than the payload is refused as well (trailing bytes would be silently dropped).
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&2u64.to_le_bytes());
    payload.extend_from_slice(b"abc");
    assert!(Message::decode(12, &payload, WireFormat::default()).is_err());
    assert!(Message::decode(12, &[1, 0, 0, 0, 0], WireFormat::default()).is_err());
}

#[test]
fn four_gib_message_header_is_refused_without_allocating() {
    for config in [
        ReassemblerConfig::host_side(),
        ReassemblerConfig::guest_side(),
    ] {
        let mut r = Reassembler::new(config);
        let header = MessageHeader::new(4, u32::MAX).encode();
        let events = r.feed(&chunk(1, &header));
        assert_eq!(
            events,
            vec![Err(VdagentError::MessageTooLarge {
                size: u32::MAX as u64,
                max: config.max_message_size as u64
            })]
        );
        assert!(r.is_poisoned());
        assert!(r.buffered_bytes() < 64, "{}", r.buffered_bytes());
        assert_eq!(r.feed(b"more"), vec![Err(VdagentError::Poisoned)]);
        r.reset();
        assert!(!r.is_poisoned());
    }
    // A configured smaller cap is honoured.
    let mut r = Reassembler::new(ReassemblerConfig::host_side().with_max_message_size(1000));
    let events = r.feed(&chunk(1, &MessageHeader::new(4, 1001).encode()));
    assert!(matches!(
        events[..],
        [Err(VdagentError::MessageTooLarge {
            size: 1001,
            max: 1000
        })]
    ));
}

#[test]
fn bulk_messages_are_held_in_exactly_their_size() {
    // spice-gtk's 64 KiB DATA messages in 2048-byte chunks, several back to back in one batch: each comes out
    // whole and in a buffer of its own size (not the next power of two, which glibc would map and unmap per
    // message), and the batch is the messages' separate encodings one after the other.
    let payloads: Vec<Vec<u8>> = (0..3u8)
        .map(|i| (0..65_548u32).map(|b| (b as u8) ^ i).collect())
        .collect();
    let mut batch = Vec::new();
    let mut separate = Vec::new();
    for p in &payloads {
        encode_raw_message_into(&mut batch, Port::Client, 12, p, ChunkMode::Split).unwrap();
        separate.extend(encode_raw_message(Port::Client, 12, p, ChunkMode::Split).unwrap());
    }
    assert_eq!(batch, separate);
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    let mut got = Vec::new();
    for piece in batch.chunks(8192) {
        for ev in r.feed(piece) {
            let (_, raw) = ev.unwrap();
            assert_eq!(raw.payload.capacity(), raw.payload.len());
            got.push(raw.payload);
        }
    }
    assert_eq!(got, payloads);
}

#[test]
fn memory_grows_only_with_received_bytes() {
    // A legal 60 MiB message announced, only 100 payload bytes sent: the buffer stays small.
    let mut r = Reassembler::new(ReassemblerConfig::host_side());
    let mut stream = 1u32.to_le_bytes().to_vec();
    stream.extend_from_slice(&(20u32 + 60 * 1024 * 1024).to_le_bytes());
    stream.extend_from_slice(&MessageHeader::new(4, 60 * 1024 * 1024).encode());
    stream.extend_from_slice(&[0; 100]);
    assert!(r.feed(&stream).is_empty());
    assert!(r.buffered_bytes() < 4096, "{}", r.buffered_bytes());
}

#[test]
fn chunk_larger_than_2048_is_refused_on_the_guest_side() {
    let body = message(4, &vec![0; 4096 - 20]);
    let mut guest = Reassembler::new(ReassemblerConfig::guest_side());
    assert_eq!(
        guest.feed(&chunk(1, &body)),
        vec![Err(VdagentError::ChunkTooLarge {
            size: 4096,
            max: 2048
        })]
    );
    // 2048 exactly is fine; the host side takes any size.
    let ok = message(4, &vec![0; 2048 - 20]);
    let mut guest = Reassembler::new(ReassemblerConfig::guest_side());
    assert_eq!(guest.feed(&chunk(1, &ok)).len(), 1);
    let mut host = Reassembler::new(ReassemblerConfig::host_side());
    assert!(matches!(
        &host.feed(&chunk(1, &body))[..],
        [Ok((Port::Client, _))]
    ));
    // A chunk header alone announcing 4 GiB is refused at once on the guest side.
    let mut guest = Reassembler::new(ReassemblerConfig::guest_side());
    let mut hdr = 2u32.to_le_bytes().to_vec();
    hdr.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        guest.feed(&hdr)[..],
        [Err(VdagentError::ChunkTooLarge { .. })]
    ));
}

#[test]
fn ports_other_than_one_and_two_are_refused() {
    for port in [0u32, 3, 0xffff_ffff] {
        let mut r = Reassembler::new(ReassemblerConfig::host_side());
        assert_eq!(
            r.feed(&chunk(port, &message(13, &[]))),
            vec![Err(VdagentError::InvalidPort(port))]
        );
    }
}

#[test]
fn chunk_with_more_than_the_message_needs_is_lost_sync() {
    let mut body = message(13, &[]);
    body.extend_from_slice(&message(13, &[]));
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    assert_eq!(
        r.feed(&chunk(2, &body)),
        vec![Err(VdagentError::LostSync { extra: 20 })]
    );
    // Also when the extra bytes have not arrived yet: the chunk header already says they will.
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    let stream = chunk(2, &body);
    assert_eq!(
        r.feed(&stream[..8 + 20]),
        vec![Err(VdagentError::LostSync { extra: 20 })]
    );
    assert!(r.is_poisoned());
}

#[test]
fn headers_split_across_reads_and_interleaved_ports() {
    let a = Message::MaxClipboard { max: 1234 };
    let b = Message::Clipboard {
        selection: guestlink_protocol::vdagent::Selection::Primary,
        data_type: guestlink_protocol::vdagent::ClipboardType::Utf8Text,
        data: vec![7; 3000],
    };
    let w = WireFormat {
        selection: true,
        grab_serial: true,
    };
    let sa = encode_message(Port::Server, &a, w, ChunkMode::Split).unwrap();
    let sb = encode_message(Port::Client, &b, w, ChunkMode::Split).unwrap();
    // b's chunks: [8+2048][8+...]. Interleave: b chunk 1, a (whole), b chunk 2.
    let first_b = 8 + 2048;
    let mut stream = sb[..first_b].to_vec();
    stream.extend_from_slice(&sa);
    stream.extend_from_slice(&sb[first_b..]);
    // Feed one byte at a time: every header is split.
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    let mut got = Vec::new();
    for byte in &stream {
        for ev in r.feed(std::slice::from_ref(byte)) {
            let (port, raw) = ev.unwrap();
            got.push((port, raw.decode(w).unwrap()));
        }
    }
    assert_eq!(got, vec![(Port::Server, a), (Port::Client, b)]);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn message_header_split_between_chunks_of_the_same_port() {
    let msg = message(14, &5i32.to_le_bytes());
    let mut stream = chunk(1, &msg[..7]);
    stream.extend_from_slice(&chunk(2, &message(13, &[])));
    stream.extend_from_slice(&chunk(1, &msg[7..]));
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    let events: Vec<_> = r.feed(&stream).into_iter().map(|e| e.unwrap().0).collect();
    assert_eq!(events, [Port::Server, Port::Client]);
    // reset_port drops a partial message of that port.
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    assert!(r.feed(&chunk(1, &msg[..7])).is_empty());
    r.reset_port(Port::Client);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn encoder_refuses_unrepresentable_values() {
    use guestlink_protocol::vdagent::{
        AudioVolumeSync, DeviceDisplayInfo, GraphicsDeviceInfo, MonitorsConfig,
    };
    let w = WireFormat::default();
    let bad_mm = Message::MonitorsConfig(MonitorsConfig {
        flags: 0,
        monitors: vec![],
        physical_sizes: Some(vec![guestlink_protocol::vdagent::MonitorMm {
            height: 1,
            width: 1,
        }]),
    });
    assert!(bad_mm.encode_payload(w).is_err());
    let vol = Message::AudioVolumeSync(AudioVolumeSync {
        is_playback: true,
        mute: false,
        volumes: vec![0; 256],
    });
    assert!(vol.encode_payload(w).is_err());
    let nul = Message::GraphicsDeviceInfo(GraphicsDeviceInfo {
        displays: vec![DeviceDisplayInfo {
            channel_id: 0,
            monitor_id: 0,
            device_display_id: 0,
            device_address: vec![0],
        }],
    });
    assert!(nul.encode_payload(w).is_err());
    // Raw encoding of a malformed message still works (debug tooling).
    let raw = encode_raw_message(Port::Client, 99, b"junk", ChunkMode::Split).unwrap();
    let mut r = Reassembler::new(ReassemblerConfig::guest_side());
    let (_, m) = r.feed(&raw).remove(0).unwrap();
    assert_eq!(m.decode(w), Err(VdagentError::UnknownType(99)));
}

//! Property tests: encode → random chunking/interleaving → reassemble == original; random bytes never panic.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_protocol::vdagent::{
    encode_message, AudioVolumeSync, Capabilities, ChunkMode, ClipboardType, DeviceDisplayInfo,
    DisplayConfig, FileXferData, FileXferDetail, FileXferResult, FileXferStart, FileXferStatus,
    GraphicsDeviceInfo, Message, MessageHeader, MonitorConfig, MonitorMm, MonitorsConfig,
    MouseState, Port, RawMessage, Reassembler, ReassemblerConfig, ReplyResult, Selection,
    WireFormat,
};
use proptest::prelude::*;

fn wire() -> impl Strategy<Value = WireFormat> {
    (0usize..4).prop_map(|i| WireFormat::ALL[i])
}

fn selection(wire: WireFormat) -> BoxedStrategy<Selection> {
    if wire.selection {
        any::<u8>().prop_map(Selection::from_u8).boxed()
    } else {
        Just(Selection::Clipboard).boxed()
    }
}

fn ctype() -> impl Strategy<Value = ClipboardType> {
    prop_oneof![0u32..8, any::<u32>()].prop_map(ClipboardType::from_u32)
}

fn monitors() -> impl Strategy<Value = MonitorsConfig> {
    (
        any::<u32>(),
        prop::collection::vec(any::<(u32, u32, u32, i32, i32)>(), 0..6),
        any::<bool>(),
    )
        .prop_flat_map(|(flags, mons, physical)| {
            let n = mons.len();
            let monitors: Vec<MonitorConfig> = mons
                .into_iter()
                .map(|(height, width, depth, x, y)| MonitorConfig {
                    height,
                    width,
                    depth,
                    x,
                    y,
                })
                .collect();
            let mm = if physical {
                prop::collection::vec(any::<(u16, u16)>(), n)
                    .prop_map(|v| {
                        Some(
                            v.into_iter()
                                .map(|(height, width)| MonitorMm { height, width })
                                .collect(),
                        )
                    })
                    .boxed()
            } else {
                Just(None).boxed()
            };
            mm.prop_map(move |physical_sizes| MonitorsConfig {
                flags: (flags & !2) | if physical_sizes.is_some() { 2 } else { 0 },
                monitors: monitors.clone(),
                physical_sizes,
            })
        })
}

fn file_status() -> impl Strategy<Value = FileXferStatus> {
    (
        any::<u32>(),
        0u32..10,
        0u8..4,
        any::<u64>(),
        any::<(u8, u32)>(),
        prop::collection::vec(any::<u8>(), 1..20),
    )
        .prop_map(|(id, code, kind, free, (error_type, error_code), other)| {
            let mut result = FileXferResult::from_u32(code);
            let detail = match kind {
                0 => FileXferDetail::None,
                1 => {
                    result = FileXferResult::NotEnoughSpace;
                    FileXferDetail::NotEnoughSpace {
                        disk_free_space: free,
                    }
                }
                2 => {
                    result = FileXferResult::Error;
                    FileXferDetail::Error {
                        error_type,
                        error_code,
                    }
                }
                _ => {
                    let special = matches!(
                        (result, other.len()),
                        (FileXferResult::NotEnoughSpace, 8) | (FileXferResult::Error, 5)
                    );
                    if special {
                        result = FileXferResult::Success;
                    }
                    FileXferDetail::Other(other)
                }
            };
            FileXferStatus { id, result, detail }
        })
}

fn message(wire: WireFormat) -> BoxedStrategy<Message> {
    let serial = if wire.grab_serial {
        any::<u32>().prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    };
    prop_oneof![
        any::<(u32, u32, u32, u8)>().prop_map(|(x, y, buttons, display_id)| Message::MouseState(
            MouseState {
                x,
                y,
                buttons,
                display_id
            }
        )),
        monitors().prop_map(Message::MonitorsConfig),
        any::<(u32, u32)>().prop_map(|(t, r)| Message::Reply {
            message_type: t,
            result: ReplyResult::from_u32(r)
        }),
        (
            selection(wire),
            ctype(),
            prop::collection::vec(any::<u8>(), 0..5000)
        )
            .prop_map(|(selection, data_type, data)| Message::Clipboard {
                selection,
                data_type,
                data
            }),
        any::<(u32, u32)>()
            .prop_map(|(flags, depth)| Message::DisplayConfig(DisplayConfig { flags, depth })),
        (any::<bool>(), prop::collection::vec(any::<u32>(), 0..4)).prop_map(|(request, w)| {
            Message::AnnounceCapabilities {
                request,
                caps: Capabilities::from_words(&w),
            }
        }),
        (
            selection(wire),
            serial,
            prop::collection::vec(ctype(), 0..8)
        )
            .prop_map(|(selection, serial, types)| Message::ClipboardGrab {
                selection,
                serial,
                types
            }),
        (selection(wire), ctype()).prop_map(|(selection, data_type)| Message::ClipboardRequest {
            selection,
            data_type
        }),
        selection(wire).prop_map(|selection| Message::ClipboardRelease { selection }),
        (
            any::<u32>(),
            "[^\u{0}\u{b}\u{c}][^\u{0}]{0,40}",
            any::<u64>(),
            any::<Option<u32>>(),
            any::<Option<u32>>()
        )
            .prop_map(|(id, name, size, file_xfer_nr, file_xfer_total)| {
                Message::FileXferStart(FileXferStart {
                    id,
                    name,
                    size,
                    file_xfer_nr,
                    file_xfer_total,
                })
            }),
        file_status().prop_map(Message::FileXferStatus),
        (any::<u32>(), prop::collection::vec(any::<u8>(), 0..5000))
            .prop_map(|(id, data)| Message::FileXferData(FileXferData { id, data })),
        Just(Message::ClientDisconnected),
        any::<i32>().prop_map(|max| Message::MaxClipboard { max }),
        (
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(any::<u16>(), 0..255)
        )
            .prop_map(|(is_playback, mute, volumes)| Message::AudioVolumeSync(
                AudioVolumeSync {
                    is_playback,
                    mute,
                    volumes
                }
            )),
        prop::collection::vec(
            (
                any::<(u32, u32, u32)>(),
                prop::collection::vec(1u8..=255, 0..30)
            ),
            0..4
        )
        .prop_map(|v| Message::GraphicsDeviceInfo(GraphicsDeviceInfo {
            displays: v
                .into_iter()
                .map(
                    |((channel_id, monitor_id, device_display_id), device_address)| {
                        DeviceDisplayInfo {
                            channel_id,
                            monitor_id,
                            device_display_id,
                            device_address,
                        }
                    }
                )
                .collect()
        })),
    ]
    .boxed()
}

/// Splits a stream into its chunks (header included).
fn chunks(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let size = u32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
        out.push(rest[..8 + size].to_vec());
        rest = &rest[8 + size..];
    }
    out
}

fn feed_in_pieces(
    r: &mut Reassembler,
    stream: &[u8],
    cuts: &[usize],
    wire: WireFormat,
) -> Vec<(Port, Message)> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([stream.len()]) {
        for event in r.feed(&stream[start..cut]) {
            let (port, raw) = event.unwrap();
            let m = raw.decode(wire).unwrap();
            assert_eq!(raw.into_decoded(wire).unwrap(), m, "owned decoding differs");
            out.push((port, m));
        }
        start = cut;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_through_random_chunkings(
        (wire, msgs) in wire().prop_flat_map(|w| (Just(w), prop::collection::vec((message(w), any::<bool>()), 1..6))),
        single in any::<bool>(),
        interleave in prop::collection::vec(any::<bool>(), 0..64),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let mode = if single { ChunkMode::Single } else { ChunkMode::Split };
        // Per-port chunk queues, merged in a random order that keeps each port's order.
        let mut queues: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        let mut expected: [Vec<Message>; 2] = [Vec::new(), Vec::new()];
        for (msg, server) in &msgs {
            let port = if *server { Port::Server } else { Port::Client };
            let stream = encode_message(port, msg, wire, mode).unwrap();
            queues[port.index()].extend(chunks(&stream));
            expected[port.index()].push(msg.clone());
        }
        let mut stream = Vec::new();
        let (mut a, mut b) = (queues[0].iter(), queues[1].iter());
        let mut pick = interleave.iter().cycle();
        loop {
            let first = *pick.next().unwrap_or(&true);
            let next = if first { a.next().or_else(|| b.next()) } else { b.next().or_else(|| a.next()) };
            match next {
                Some(c) => stream.extend_from_slice(c),
                None => break,
            }
        }
        let config = if single { ReassemblerConfig::host_side() } else { ReassemblerConfig::guest_side() };
        let mut r = Reassembler::new(config);
        let got = feed_in_pieces(&mut r, &stream, &cuts, wire);
        let mut by_port: [Vec<Message>; 2] = [Vec::new(), Vec::new()];
        for (port, m) in got {
            by_port[port.index()].push(m);
        }
        prop_assert_eq!(&by_port, &expected);
        prop_assert_eq!(r.buffered_bytes(), 0);
    }

    #[test]
    fn caps_words_round_trip(words in prop::collection::vec(any::<u32>(), 0..5)) {
        let caps = Capabilities::from_words(&words);
        prop_assert_eq!(caps.to_words(), words.clone());
        for bit in 0..(words.len() as u32 * 32 + 8) {
            let expected = words.get((bit / 32) as usize).is_some_and(|w| w & (1 << (bit % 32)) != 0);
            prop_assert_eq!(caps.has_bit(bit), expected);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        for config in [ReassemblerConfig::guest_side(), ReassemblerConfig::host_side()] {
            let mut r = Reassembler::new(config);
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut start = 0;
            for cut in cuts.iter().copied().chain([bytes.len()]) {
                for (_, raw) in r.feed(&bytes[start..cut]).into_iter().flatten() {
                    for w in WireFormat::ALL {
                        let _ = raw.decode(w);
                    }
                }
                start = cut;
            }
            prop_assert!(r.buffered_bytes() <= bytes.len() * 2 + 64);
        }
    }

    #[test]
    fn random_payloads_never_panic(t in 0u32..20, payload in prop::collection::vec(any::<u8>(), 0..256)) {
        for w in WireFormat::ALL {
            if let Ok(m) = Message::decode(t, &payload, w) {
                // Whatever decodes re-encodes, and decodes to the same value again.
                let again = m.encode_payload(w).unwrap();
                prop_assert_eq!(Message::decode(t, &again, w).unwrap(), m);
            }
        }
    }

    #[test]
    fn owned_decoding_agrees_with_borrowed_decoding_on_any_payload(
        payload in prop::collection::vec(any::<u8>(), 0..64),
        t in prop_oneof![Just(4u32), Just(10u32), 0u32..20],
        w in wire(),
        protocol in prop_oneof![Just(1u32), any::<u32>()],
    ) {
        let mut header = MessageHeader::new(t, payload.len() as u32);
        header.protocol = protocol;
        let raw = RawMessage { header, payload };
        prop_assert_eq!(raw.decode(w), raw.clone().into_decoded(w));
    }
}

/// Found by `random_payloads_never_panic`: without the selection capability a 1-byte RELEASE (spice-vdagentd's
/// quirk) is CLIPBOARD whatever the byte says, so it re-encodes (as an empty payload) to the same value.
#[test]
fn legacy_one_byte_release_is_clipboard_and_round_trips() {
    for w in WireFormat::ALL.into_iter().filter(|w| !w.selection) {
        for byte in [0u8, 1, 2, 0xff] {
            let m = Message::decode(9, &[byte], w).unwrap();
            assert_eq!(
                m,
                Message::ClipboardRelease {
                    selection: Selection::Clipboard
                }
            );
            let again = m.encode_payload(w).unwrap();
            assert_eq!(Message::decode(9, &again, w).unwrap(), m);
        }
    }
}

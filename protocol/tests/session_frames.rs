//! Daemon ↔ session frames: layout, hostile input, property round trips.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_protocol::session::{
    decode_body, encode, FrameDecoder, FrameHeader, GeometryMonitor, SessionDeviceDisplay,
    SessionError, SessionMessage, SessionMonitor, FRAME_HEADER_SIZE, MAX_FRAME_BODY,
    SESSION_PROTOCOL_VERSION,
};
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use proptest::prelude::*;

fn frame(kind: u16, meta: &[u8], data: &[u8]) -> Vec<u8> {
    let body_len = (4 + meta.len() + data.len()) as u32;
    let mut out = FrameHeader {
        magic: u16::from_le_bytes(*b"GL"),
        version: 1,
        kind,
        flags: 0,
        length: body_len,
    }
    .encode()
    .to_vec();
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(meta);
    out.extend_from_slice(data);
    out
}

/// A predicate on the expected error.
type ErrorCheck = fn(&SessionError) -> bool;

fn decode_all(bytes: &[u8]) -> Vec<Result<SessionMessage, SessionError>> {
    FrameDecoder::new().feed(bytes)
}

#[test]
fn frame_layout() {
    let bytes = encode(&SessionMessage::ClientDisconnected).unwrap();
    let meta = br#"{"type":"client-disconnected"}"#;
    assert_eq!(&bytes[..8], b"GL\x01\x00\x0e\x00\x00\x00");
    assert_eq!(
        u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
        4 + meta.len()
    );
    assert_eq!(&bytes[12..16], &(meta.len() as u32).to_le_bytes());
    assert_eq!(&bytes[16..], meta);
    assert_eq!(bytes, frame(14, meta, &[]));
}

#[test]
fn data_travels_raw_not_base64() {
    let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let msg = SessionMessage::ClipboardData {
        selection: Selection::Primary,
        data_type: ClipboardType::ImagePng,
        data: data.clone(),
    };
    let bytes = encode(&msg).unwrap();
    assert!(bytes.len() < data.len() + 100, "{}", bytes.len());
    assert!(bytes.ends_with(&data));
    let meta_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let meta: serde_json::Value = serde_json::from_slice(&bytes[16..16 + meta_len]).unwrap();
    assert_eq!(
        meta,
        serde_json::json!({"type": "clipboard-data", "selection": 1, "data_type": 2})
    );
    assert_eq!(decode_all(&bytes), vec![Ok(msg)]);
}

#[test]
fn hello_round_trip_and_unknown_fields_ignored() {
    let hello = SessionMessage::Hello {
        version: SESSION_PROTOCOL_VERSION,
        session_id: "c2".into(),
        capabilities: vec!["clipboard".into(), "file-xfer".into()],
    };
    assert_eq!(
        decode_all(&encode(&hello).unwrap()),
        vec![Ok(hello.clone())]
    );
    let newer =
        br#"{"type":"hello","version":2,"session_id":"c2","capabilities":[],"future":true}"#;
    let got = decode_all(&frame(1, newer, &[]));
    assert!(
        matches!(&got[..], [Ok(SessionMessage::Hello { version: 2, .. })]),
        "{got:?}"
    );
}

#[test]
fn fatal_header_errors() {
    let good = encode(&SessionMessage::ClientConnected).unwrap();
    let mut bad_magic = good.clone();
    bad_magic[0] = b'X';
    let mut d = FrameDecoder::new();
    assert!(matches!(
        d.feed(&bad_magic)[..],
        [Err(SessionError::BadMagic(_))]
    ));
    assert!(d.is_poisoned());
    assert_eq!(d.feed(&good), vec![Err(SessionError::Poisoned)]);

    let mut bad_version = good.clone();
    bad_version[2] = 2;
    assert_eq!(
        decode_all(&bad_version),
        vec![Err(SessionError::UnsupportedVersion(2))]
    );

    // A 4 GiB length is refused from the header alone, without buffering anything.
    let mut huge = good[..FRAME_HEADER_SIZE].to_vec();
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut d = FrameDecoder::new();
    assert_eq!(
        d.feed(&huge),
        vec![Err(SessionError::FrameTooLarge {
            size: u32::MAX as u64,
            max: MAX_FRAME_BODY as u64
        })]
    );
    assert!(d.buffered_bytes() <= FRAME_HEADER_SIZE);
    let mut small = FrameDecoder::with_max_body(100);
    let big = encode(&SessionMessage::FileXferData {
        id: 1,
        data: vec![0; 200],
    })
    .unwrap();
    assert!(matches!(
        small.feed(&big)[..],
        [Err(SessionError::FrameTooLarge { max: 100, .. })]
    ));
}

#[test]
fn per_frame_errors_keep_the_stream_usable() {
    let next = encode(&SessionMessage::FileXferCancel { id: 9 }).unwrap();
    let cases: Vec<(Vec<u8>, ErrorCheck)> = vec![
        (frame(999, b"{}", &[]), |e| {
            matches!(e, SessionError::UnknownKind(999))
        }),
        (frame(0, b"{}", &[]), |e| {
            matches!(e, SessionError::UnknownKind(0))
        }),
        (frame(3, b"{not json", &[]), |e| {
            matches!(e, SessionError::BadBody(_))
        }),
        (frame(3, br#"{"type":"client-connected"}"#, &[]), |e| {
            matches!(
                e,
                SessionError::KindMismatch {
                    header: 3,
                    body: 13
                }
            )
        }),
        (frame(13, br#"{"type":"client-connected"}"#, b"xx"), |e| {
            matches!(e, SessionError::UnexpectedData(13))
        }),
        (frame(3, br#"{"type":"clipboard-grab"}"#, &[]), |e| {
            matches!(e, SessionError::BadBody(_))
        }),
    ];
    for (bad, is_expected) in cases {
        let mut stream = bad.clone();
        stream.extend_from_slice(&next);
        let got = decode_all(&stream);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(is_expected(got[0].as_ref().unwrap_err()), "{got:?}");
        assert_eq!(got[1], Ok(SessionMessage::FileXferCancel { id: 9 }));
    }
    // meta_len beyond the body, and a body shorter than 4 bytes.
    let mut bad = frame(13, br#"{"type":"client-connected"}"#, &[]);
    bad[12..16].copy_from_slice(&1000u32.to_le_bytes());
    assert!(matches!(
        decode_all(&bad)[..],
        [Err(SessionError::BadBody(_))]
    ));
    assert!(matches!(
        decode_body(13, &[1, 0]),
        Err(SessionError::BadBody(_))
    ));
    // Deep JSON nesting is bounded by serde_json's recursion limit, not the stack.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(
        decode_all(&frame(1, deep.as_bytes(), &[]))[..],
        [Err(SessionError::BadBody(_))]
    ));
}

#[test]
fn encode_refuses_oversized_frames() {
    let msg = SessionMessage::FileXferData {
        id: 1,
        data: vec![0; MAX_FRAME_BODY as usize],
    };
    assert!(matches!(encode(&msg), Err(SessionError::Encode(_))));
}

fn selection() -> impl Strategy<Value = Selection> {
    any::<u8>().prop_map(Selection::from_u8)
}

fn ctype() -> impl Strategy<Value = ClipboardType> {
    any::<u32>().prop_map(ClipboardType::from_u32)
}

fn message() -> impl Strategy<Value = SessionMessage> {
    prop_oneof![
        (
            any::<u32>(),
            ".{0,20}",
            prop::collection::vec("[a-z-]{0,12}", 0..4)
        )
            .prop_map(
                |(version, session_id, capabilities)| SessionMessage::Hello {
                    version,
                    session_id,
                    capabilities
                }
            ),
        prop::collection::vec(any::<(u32, i32, i32, u32, u32)>(), 0..5).prop_map(|v| {
            SessionMessage::Geometry {
                monitors: v
                    .into_iter()
                    .map(|(display_id, x, y, width, height)| GeometryMonitor {
                        display_id,
                        x,
                        y,
                        width,
                        height,
                    })
                    .collect(),
            }
        }),
        (selection(), prop::collection::vec(ctype(), 0..6))
            .prop_map(|(selection, types)| SessionMessage::ClipboardGrab { selection, types }),
        (selection(), ctype()).prop_map(|(selection, data_type)| {
            SessionMessage::ClipboardRequest {
                selection,
                data_type,
            }
        }),
        (
            selection(),
            ctype(),
            prop::collection::vec(any::<u8>(), 0..3000)
        )
            .prop_map(
                |(selection, data_type, data)| SessionMessage::ClipboardData {
                    selection,
                    data_type,
                    data
                }
            ),
        selection().prop_map(|selection| SessionMessage::ClipboardRelease { selection }),
        (
            any::<u32>(),
            prop::collection::vec(
                any::<(u32, u32, u32, i32, i32, Option<u16>, Option<u16>)>(),
                0..4
            )
        )
            .prop_map(|(flags, v)| SessionMessage::MonitorsConfig {
                flags,
                monitors: v
                    .into_iter()
                    .map(
                        |(width, height, depth, x, y, mm_width, mm_height)| SessionMonitor {
                            width,
                            height,
                            depth,
                            x,
                            y,
                            mm_width,
                            mm_height
                        }
                    )
                    .collect()
            }),
        (any::<u32>(), ".{0,40}", any::<u64>())
            .prop_map(|(id, name, size)| SessionMessage::FileXferStart { id, name, size }),
        (any::<u32>(), prop::collection::vec(any::<u8>(), 0..3000))
            .prop_map(|(id, data)| SessionMessage::FileXferData { id, data }),
        (
            any::<u32>(),
            any::<u32>(),
            any::<Option<u64>>(),
            any::<Option<u32>>()
        )
            .prop_map(|(id, status, disk_free_space, error_code)| {
                SessionMessage::FileXferStatus {
                    id,
                    status,
                    disk_free_space,
                    error_code,
                }
            }),
        any::<u32>().prop_map(|id| SessionMessage::FileXferCancel { id }),
        Just(SessionMessage::FileXferDisable),
        Just(SessionMessage::ClientConnected),
        Just(SessionMessage::ClientDisconnected),
        any::<i64>().prop_map(|max| SessionMessage::MaxClipboard { max }),
        prop::collection::vec((any::<(u32, u32, u32)>(), ".{0,20}"), 0..3).prop_map(|v| {
            SessionMessage::GraphicsDeviceInfo {
                displays: v
                    .into_iter()
                    .map(
                        |((channel_id, monitor_id, device_display_id), device_address)| {
                            SessionDeviceDisplay {
                                channel_id,
                                monitor_id,
                                device_display_id,
                                device_address,
                            }
                        },
                    )
                    .collect(),
            }
        }),
        (
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(any::<u16>(), 0..8)
        )
            .prop_map(
                |(is_playback, mute, volumes)| SessionMessage::AudioVolumeSync {
                    is_playback,
                    mute,
                    volumes
                }
            ),
        ("[a-z-]{0,12}", ".{0,40}")
            .prop_map(|(code, message)| SessionMessage::Error { code, message }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn frames_round_trip_through_random_splits(
        msgs in prop::collection::vec(message(), 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let stream: Vec<u8> = msgs.iter().flat_map(|m| encode(m).unwrap()).collect();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.sort_unstable();
        let mut d = FrameDecoder::new();
        let mut got = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain([stream.len()]) {
            got.extend(d.feed(&stream[start..cut]).into_iter().map(Result::unwrap));
            start = cut;
        }
        prop_assert_eq!(got, msgs);
        prop_assert_eq!(d.buffered_bytes(), 0);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 4 {
            // Give the header a chance to pass so bodies get decoded too.
            bytes[..4].copy_from_slice(b"GL\x01\x00");
        }
        let mut d = FrameDecoder::new();
        let _ = d.feed(&bytes);
        prop_assert!(d.buffered_bytes() <= bytes.len() * 2 + FRAME_HEADER_SIZE);
        for kind in 0..20u16 {
            let _ = decode_body(kind, &bytes);
        }
    }
}

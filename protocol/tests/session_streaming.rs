//! Daemon ↔ session frames, streaming decoder: large data parts come out in pieces with bounded memory, and
//! the result is the same as whole-frame decoding whatever the input splits.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_protocol::session::{
    encode, FrameDecoder, FrameEvent, FrameHeader, SessionError, SessionMessage, FRAME_HEADER_SIZE,
    MAX_FRAME_BODY,
};
use guestlink_protocol::vdagent::{ClipboardType, Selection};
use proptest::prelude::*;

/// Max body of the test decoders: small frames only, unless streamed.
const SMALL: u32 = 4096;
/// Data parts of at least this size are streamed.
const STREAM_MIN: usize = 1000;

fn clip(len: usize, seed: u8) -> SessionMessage {
    SessionMessage::ClipboardData {
        selection: Selection::Clipboard,
        data_type: ClipboardType::Utf8Text,
        data: (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect(),
    }
}

/// Rebuilds whole messages from streamed events, checking the event grammar on the way.
#[derive(Default)]
struct Rebuild {
    open: Option<(SessionMessage, usize, Vec<u8>)>,
    done: Vec<SessionMessage>,
    streamed: usize,
}

impl Rebuild {
    fn take(&mut self, ev: FrameEvent) {
        match ev {
            FrameEvent::Message(m) => {
                assert!(self.open.is_none(), "a message inside a stream");
                self.done.push(m);
            }
            FrameEvent::DataBegin { message, len } => {
                assert!(self.open.is_none(), "nested DataBegin");
                assert!(message.data().is_empty());
                assert!(len >= STREAM_MIN);
                self.open = Some((message, len, Vec::new()));
            }
            FrameEvent::Data(piece) => {
                assert!(!piece.is_empty(), "empty piece");
                let (_, len, got) = self.open.as_mut().expect("Data outside a stream");
                got.extend_from_slice(&piece);
                assert!(got.len() <= *len, "more data than announced");
            }
            FrameEvent::DataEnd => {
                let (m, len, got) = self.open.take().expect("DataEnd outside a stream");
                assert_eq!(got.len(), len);
                let SessionMessage::ClipboardData {
                    selection,
                    data_type,
                    ..
                } = m
                else {
                    panic!("only data kinds stream: {m:?}");
                };
                self.streamed += 1;
                self.done.push(SessionMessage::ClipboardData {
                    selection,
                    data_type,
                    data: got,
                });
            }
        }
    }
}

#[test]
fn large_data_is_streamed_with_bounded_memory() {
    let big = clip(3 << 20, 7);
    let bytes = encode(&big).unwrap();
    let mut d = FrameDecoder::with_max_body(SMALL).streaming(STREAM_MIN);
    let mut r = Rebuild::default();
    let mut pieces = 0;
    for part in bytes.chunks(65_536) {
        for ev in d.feed_events(part) {
            if matches!(ev, Ok(FrameEvent::Data(_))) {
                pieces += 1;
            }
            r.take(ev.unwrap());
        }
        assert!(
            d.buffered_bytes() <= 2 * SMALL as usize,
            "{} bytes held",
            d.buffered_bytes()
        );
    }
    assert_eq!(r.done, vec![big]);
    assert_eq!(r.streamed, 1);
    assert!(pieces >= 48, "data came in {pieces} pieces");
}

#[test]
fn small_data_and_plain_feed_stay_whole() {
    let small = clip(STREAM_MIN - 1, 1);
    let big = clip(STREAM_MIN * 3, 2);
    let stream: Vec<u8> = [&small, &big]
        .iter()
        .flat_map(|m| encode(m).unwrap())
        .collect();
    let got = FrameDecoder::with_max_body(MAX_FRAME_BODY)
        .streaming(STREAM_MIN)
        .feed_events(&stream);
    assert_eq!(got[0], Ok(FrameEvent::Message(small.clone())));
    assert!(matches!(got[1], Ok(FrameEvent::DataBegin { len, .. }) if len == STREAM_MIN * 3));
    // `feed` never streams, even on a streaming decoder.
    let whole = FrameDecoder::new().streaming(STREAM_MIN).feed(&stream);
    assert_eq!(whole, vec![Ok(small), Ok(big)]);
}

#[test]
fn oversized_frames_that_cannot_stream_are_refused() {
    // A kind without data above the cap: fatal, from the header alone.
    let grab = SessionMessage::ClipboardGrab {
        selection: Selection::Clipboard,
        types: vec![ClipboardType::Utf8Text; 20_000],
    };
    let mut d = FrameDecoder::with_max_body(SMALL).streaming(STREAM_MIN);
    let got = d.feed_events(&encode(&grab).unwrap());
    assert!(
        matches!(got[..], [Err(SessionError::FrameTooLarge { .. })]),
        "{got:?}"
    );
    assert!(d.is_poisoned());

    // A data kind above the cap whose metadata is too large to hold: that frame is skipped, the stream goes on.
    let next = encode(&SessionMessage::FileXferCancel { id: 3 }).unwrap();
    let meta = format!(
        r#"{{"type":"clipboard-data","selection":"clipboard","data_type":"utf8-text","pad":"{}"}}"#,
        "x".repeat(SMALL as usize)
    );
    let data = vec![b'a'; STREAM_MIN];
    let mut bad = FrameHeader {
        magic: u16::from_le_bytes(*b"GL"),
        version: 1,
        kind: 5,
        flags: 0,
        length: (4 + meta.len() + data.len()) as u32,
    }
    .encode()
    .to_vec();
    bad.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    bad.extend_from_slice(meta.as_bytes());
    bad.extend_from_slice(&data);
    bad.extend_from_slice(&next);
    let mut d = FrameDecoder::with_max_body(SMALL).streaming(STREAM_MIN);
    let got = d.feed_events(&bad);
    assert!(matches!(got[0], Err(SessionError::BadBody(_))), "{got:?}");
    assert_eq!(
        got[1..],
        [Ok(FrameEvent::Message(SessionMessage::FileXferCancel {
            id: 3
        }))]
    );
    assert!(d.buffered_bytes() <= 2 * SMALL as usize + FRAME_HEADER_SIZE);
}

fn message() -> impl Strategy<Value = SessionMessage> {
    prop_oneof![
        (0usize..3 * STREAM_MIN, any::<u8>()).prop_map(|(n, s)| clip(n, s)),
        any::<u32>().prop_map(|id| SessionMessage::FileXferCancel { id }),
        Just(SessionMessage::ClientConnected),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn streamed_decoding_matches_whole_decoding_through_random_splits(
        msgs in prop::collection::vec(message(), 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..24),
    ) {
        let stream: Vec<u8> = msgs.iter().flat_map(|m| encode(m).unwrap()).collect();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.sort_unstable();
        let mut d = FrameDecoder::with_max_body(SMALL).streaming(STREAM_MIN);
        let mut r = Rebuild::default();
        let mut start = 0;
        for cut in cuts.into_iter().chain([stream.len()]) {
            for ev in d.feed_events(&stream[start..cut]) {
                r.take(ev.unwrap());
            }
            prop_assert!(d.buffered_bytes() <= 2 * SMALL as usize + FRAME_HEADER_SIZE);
            start = cut;
        }
        prop_assert!(r.open.is_none());
        prop_assert_eq!(r.done, msgs);
        prop_assert_eq!(d.buffered_bytes(), 0);
    }

    #[test]
    fn random_bytes_never_panic_when_streaming(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let mut bytes = bytes;
        if bytes.len() >= 6 {
            bytes[..6].copy_from_slice(b"GL\x01\x00\x05\x00");
        }
        let mut d = FrameDecoder::with_max_body(64).streaming(8);
        for part in bytes.chunks(37) {
            let _ = d.feed_events(part);
            prop_assert!(d.buffered_bytes() <= 2 * 64 + FRAME_HEADER_SIZE);
        }
    }
}

#[test]
fn one_kind_streams_in_pieces_borrowed_from_the_input() {
    let file = SessionMessage::FileXferData {
        id: 4,
        data: (0..200_000u32).map(|i| (i % 253) as u8).collect(),
    };
    let big_clip = clip(STREAM_MIN * 5, 3);
    let stream: Vec<u8> = [&big_clip, &file, &big_clip]
        .iter()
        .flat_map(|m| encode(m).unwrap())
        .collect();
    let mut d = FrameDecoder::with_max_body(MAX_FRAME_BODY).streaming_kind(9, STREAM_MIN);
    let (mut whole, mut data, mut begun, mut ended) = (Vec::new(), Vec::new(), 0, 0);
    // Odd-sized inputs, so pieces start and end anywhere.
    for part in stream.chunks(7_777) {
        for ev in d.feed_borrowed(part) {
            match ev.unwrap() {
                FrameEvent::Message(m) => whole.push(m),
                FrameEvent::DataBegin { message, len } => {
                    assert_eq!(
                        message,
                        SessionMessage::FileXferData {
                            id: 4,
                            data: Vec::new()
                        }
                    );
                    assert_eq!(len, 200_000);
                    begun += 1;
                }
                FrameEvent::Data(piece) => {
                    // Borrowed from this input: it lies inside `part`.
                    let inside = part.as_ptr_range();
                    assert!(inside.contains(&piece.as_ptr()) && piece.len() <= part.len());
                    data.extend_from_slice(piece);
                }
                FrameEvent::DataEnd => ended += 1,
            }
        }
        assert!(d.buffered_bytes() < 2 * STREAM_MIN * 5 + 4096);
    }
    // The clipboard frames are collected whole, only the file data streams.
    assert_eq!(whole, vec![big_clip.clone(), big_clip]);
    assert_eq!((begun, ended), (1, 1));
    assert_eq!(data, file.data());
}

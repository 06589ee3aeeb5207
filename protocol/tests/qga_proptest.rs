//! Property tests: JSON values survive encode → arbitrary chunking → QEMU-style streamer; random bytes never
//! panic any decoder and give the same events however they are split.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use guestlink_protocol::qga::reply::to_qemu_json;
use guestlink_protocol::qga::schema::Command;
use guestlink_protocol::qga::stream::utf8::is_valid_codepoint;
use guestlink_protocol::qga::{
    encode_reply, JsonStreamer, Reply, ReplyDecoder, Request, StreamEvent,
};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn qemu_char() -> impl Strategy<Value = char> {
    any::<char>().prop_filter("QEMU rejects noncharacters", |c| {
        is_valid_codepoint(*c as u32)
    })
}

fn qemu_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_'\" -]{0,12}",
        proptest::collection::vec(qemu_char(), 0..12).prop_map(|v| v.into_iter().collect()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Non-integral doubles print with a '.' or an exponent under %.17g, so they come back as doubles.
        (-1.0e15f64..1.0e15)
            .prop_filter("non-integral", |f| f.fract() != 0.0)
            .prop_map(|f| Value::Number(Number::from_f64(f).unwrap_or_else(|| Number::from(0)))),
        qemu_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec((qemu_string(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn chunked(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut prev = 0;
    for p in points {
        out.push(bytes[prev..p].to_vec());
        prev = p;
    }
    out.push(bytes[prev..].to_vec());
    out
}

fn feed_chunks(s: &mut JsonStreamer, chunks: &[Vec<u8>]) -> Vec<StreamEvent> {
    chunks.iter().flat_map(|c| s.feed(c)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn values_round_trip_in_any_chunking(values in proptest::collection::vec(json_value(), 1..4),
                                         cuts in proptest::collection::vec(any::<usize>(), 0..8),
                                         compact in any::<bool>()) {
        let mut bytes = Vec::new();
        for v in &values {
            // Containers only: a bare scalar at the very end would wait for a following byte.
            let wrapped = Value::Array(vec![v.clone()]);
            let text = if compact { serde_json::to_string(&wrapped).unwrap() } else { to_qemu_json(&wrapped) };
            bytes.extend_from_slice(text.as_bytes());
            bytes.push(b'\n');
        }
        let mut s = JsonStreamer::default();
        let got = feed_chunks(&mut s, &chunked(&bytes, &cuts));
        let want: Vec<StreamEvent> = values.iter().map(|v| StreamEvent::Value(Value::Array(vec![v.clone()]))).collect();
        prop_assert_eq!(got, want);
        prop_assert!(s.is_idle());
    }

    #[test]
    fn replies_round_trip_through_decoder(values in proptest::collection::vec(json_value(), 1..4),
                                          cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let mut bytes = Vec::new();
        let sent: Vec<Reply> = values.iter().enumerate()
            .map(|(i, v)| Reply { id: Some(Value::from(i)), body: Ok(v.clone()), delimited: i == 0 })
            .collect();
        for r in &sent {
            encode_reply(r, &mut bytes);
        }
        let mut d = ReplyDecoder::new();
        let got: Vec<_> = chunked(&bytes, &cuts).iter().flat_map(|c| d.feed(c)).collect();
        let want: Vec<_> = sent.into_iter().map(guestlink_protocol::qga::ReplyEvent::Reply).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn random_bytes_never_panic_and_split_invariant(bytes in proptest::collection::vec(
            prop_oneof![any::<u8>(), Just(b'{'), Just(b'}'), Just(b'['), Just(b']'), Just(b'"'), Just(b'\''),
                        Just(b'\\'), Just(b':'), Just(b','), Just(b'u'), Just(0xFF)], 0..400),
                                                   cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let whole = JsonStreamer::default().feed(&bytes);
        let mut s = JsonStreamer::default();
        let split = feed_chunks(&mut s, &chunked(&bytes, &cuts));
        prop_assert_eq!(&split, &whole);
        for ev in whole {
            if let StreamEvent::Value(v) = ev {
                if let Ok(req) = Request::from_value(v) {
                    let _ = Command::parse(&req.execute, req.arguments.as_ref());
                }
            }
        }
        let mut d = ReplyDecoder::with_max_reply(64);
        let _ = d.feed(&bytes);
        prop_assert!(d.buffered() <= 64);
    }

    #[test]
    fn random_requests_parse_without_panic(execute in prop_oneof![
            Just("guest-exec".to_owned()), Just("guest-set-vcpus".to_owned()), Just("guest-file-seek".to_owned()),
            Just("guest-set-memory-blocks".to_owned()), Just("guestlink-exec-read".to_owned()), "[a-z-]{1,20}"],
                                           args in json_value()) {
        if let Value::Object(m) = &args {
            let _ = Command::parse(&execute, Some(m));
        }
    }
}

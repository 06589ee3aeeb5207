//! Unit tests of the reply encoder (byte-exact against qemu-ga 7.2's transcript) and the host-side decoder.

use super::*;
use crate::qga::error::{ErrorClass, QgaError};
use serde_json::json;

fn enc(reply: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    encode_reply(reply, &mut out);
    out
}

#[test]
fn transcript_replies_byte_exact() {
    let mut sync = Reply::ok(None, json!(42));
    sync.delimited = true;
    assert_eq!(enc(&sync), b"\xff{\"return\": 42}\n");
    assert_eq!(
        enc(&Reply::ok(Some(json!("__qmp#00001")), json!({}))),
        b"{\"return\": {}, \"id\": \"__qmp#00001\"}\n"
    );
    assert_eq!(
        enc(&Reply::ok(Some(json!(7)), json!({}))),
        b"{\"return\": {}, \"id\": 7}\n"
    );
    assert_eq!(
        enc(&Reply::err(None, QgaError::json_parse("invalid keyword 'garbage'"))),
        b"{\"error\": {\"class\": \"GenericError\", \"desc\": \"JSON parse error, invalid keyword 'garbage'\"}}\n"
    );
    assert_eq!(
        enc(&Reply::err(None, QgaError::json_parse("stray '\u{FFFD}'"))),
        b"{\"error\": {\"class\": \"GenericError\", \"desc\": \"JSON parse error, stray '\\uFFFD'\"}}\n"
    );
    assert_eq!(
        enc(&Reply::err(None, QgaError::disabled("guest-fsfreeze-freeze", None))),
        b"{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"Command guest-fsfreeze-freeze has been disabled\"}}\n"
    );
    assert_eq!(
        enc(&Reply::err(Some(json!([1, {"a": null}])), QgaError::not_found("guest-nonexistent"))),
        b"{\"id\": [1, {\"a\": null}], \"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command guest-nonexistent has not been found\"}}\n"
            .as_slice()
    );
}

#[test]
fn nested_values_and_escapes() {
    // Schema order in, QDict order out (as measured on qemu-ga 7.2's guest-exec-status reply).
    let v = json!({"exited": true, "exitcode": 0, "out-data": "eAo=", "out-truncated": false});
    assert_eq!(
        to_qemu_json(&v),
        r#"{"exitcode": 0, "out-data": "eAo=", "out-truncated": false, "exited": true}"#
    );
    let v = json!({"l": [1, -2, 18446744073709551615u64, 0.5]});
    assert_eq!(
        to_qemu_json(&v),
        r#"{"l": [1, -2, 18446744073709551615, 0.5]}"#
    );
    let s = "q\"b\\s/\u{8}\u{c}\n\r\t\u{1}\u{7f}é€😀\u{FFFE}\0";
    assert_eq!(
        to_qemu_json(&json!(s)),
        r#""q\"b\\s/\b\f\n\r\t\u0001\u007F\u00E9\u20AC\uD83D\uDE00\uFFFD\u0000""#
    );
    assert_eq!(to_qemu_json(&json!([])), "[]");
    assert_eq!(to_qemu_json(&json!({})), "{}");
}

#[test]
fn doubles_like_printf_g17() {
    for (v, want) in [
        (0.1, "0.10000000000000001"),
        (1.5, "1.5"),
        (1e300, "1.0000000000000001e+300"),
        (1e-5, "1.0000000000000001e-05"),
        (100.0, "100"),
        (0.0, "0"),
        (-0.0, "-0"),
        (1e17, "1e+17"),
        (123456789012345678.0, "1.2345678901234568e+17"),
        (0.0001, "0.0001"),
        (1700000000.123456, "1700000000.123456"),
        (2.5e-310, "2.5000000000000171e-310"),
        (f64::MAX, "1.7976931348623157e+308"),
        (1e16, "10000000000000000"),
        (12345678901234567.0, "12345678901234568"),
    ] {
        assert_eq!(format_g17(v), want, "{v:?}");
    }
}

fn replies(events: &[ReplyEvent]) -> Vec<Reply> {
    events
        .iter()
        .map(|e| match e {
            ReplyEvent::Reply(r) => r.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

#[test]
fn decoder_sync_delimited_flow() {
    let mut d = ReplyDecoder::new();
    d.expect_delimiter();
    assert!(d.is_waiting_for_delimiter());
    // Stale data (a half reply from an old session and a complete one) is discarded until the 0xFF.
    assert_eq!(d.feed(b"{\"return\": 1}\n{\"retu"), []);
    let ev = d.feed(b"rn\": 3}\n\xff{\"return\": 42}\n{\"return\": {}, \"id\": 7}\n");
    let r = replies(&ev);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].body, Ok(json!(42)));
    assert!(r[0].delimited);
    assert_eq!(r[1].id, Some(json!(7)));
    assert!(!r[1].delimited);
}

#[test]
fn decoder_split_invariance_and_errors() {
    let stream: &[u8] = b"junk\r\n\xff{\"return\": 5}\r\n{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"Command x has been disabled\"}, \"id\": \"a\"}\n\n[1]\n{\"return\": \"\\u00e9\"}\n";
    let whole = ReplyDecoder::new().feed(stream);
    assert_eq!(whole.len(), 5, "{whole:?}");
    assert!(matches!(&whole[0], ReplyEvent::Garbage { line, .. } if line == "junk"));
    let ReplyEvent::Reply(r) = &whole[1] else {
        panic!()
    };
    assert!(r.delimited);
    let ReplyEvent::Reply(r) = &whole[2] else {
        panic!()
    };
    assert_eq!(r.id, Some(json!("a")));
    let e = r.body.clone().unwrap_err();
    assert_eq!(e.class, ErrorClass::CommandNotFound);
    assert!(e.is_command_unavailable());
    assert!(matches!(&whole[3], ReplyEvent::Garbage { .. }));
    let ReplyEvent::Reply(r) = &whole[4] else {
        panic!()
    };
    assert_eq!(r.body, Ok(json!("é")));
    for cut in 0..=stream.len() {
        let mut d = ReplyDecoder::new();
        let mut got = d.feed(&stream[..cut]);
        got.extend(d.feed(&stream[cut..]));
        assert_eq!(got, whole, "cut {cut}");
    }
}

#[test]
fn decoder_bounds_memory() {
    let mut d = ReplyDecoder::with_max_reply(100);
    let mut events = Vec::new();
    for _ in 0..1000 {
        events.extend(d.feed(&[b'x'; 64]));
        assert!(d.buffered() <= 100);
    }
    events.extend(d.feed(b"yyy\n{\"return\": 1}\n"));
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], ReplyEvent::TooLarge { limit: 100 });
    assert_eq!(replies(&events[1..])[0].body, Ok(json!(1)));
    // A line of exactly the limit is fine.
    let mut d = ReplyDecoder::with_max_reply(13);
    assert_eq!(replies(&d.feed(b"{\"return\": 1}\n")).len(), 1);
    // 0xFF also ends the skipping of an oversized line.
    let mut d = ReplyDecoder::with_max_reply(10);
    let ev = d.feed(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xff{\"return\":2}\n");
    assert_eq!(ev[0], ReplyEvent::TooLarge { limit: 10 });
    assert_eq!(ev.len(), 2);
}

#[test]
fn round_trip_encoder_decoder() {
    let mut bytes = Vec::new();
    let sent = vec![
        Reply {
            id: None,
            body: Ok(json!(-9)),
            delimited: true,
        },
        Reply::ok(
            Some(json!({"k": [true]})),
            json!({"buf-b64": "", "count": 0, "eof": true}),
        ),
        Reply::err(Some(json!(1.5)), QgaError::param_unexpected("foo")),
    ];
    for r in &sent {
        encode_reply(r, &mut bytes);
    }
    assert_eq!(replies(&ReplyDecoder::new().feed(&bytes)), sent);
}

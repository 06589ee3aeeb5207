//! End-to-end QGA protocol tests without I/O: bytes in → streamer → request → command → reply bytes out.
//!
//! The expectations are qemu-ga 7.2.22's measured transcript (docs/protocol/qga.md#reference-transcript) and the
//! protocol cases of QEMU's `tests/unit/test-qga.c` (invalid-oob, invalid-args, invalid-cmd, id echo, sync-delimited).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

mod common;

use common::mini_agent;
use guestlink_protocol::qga::schema::Command;
use guestlink_protocol::qga::{
    encode_request, ErrorClass, JsonStreamer, Limits, QgaError, Reply, ReplyDecoder, ReplyEvent,
    Request, StreamEvent,
};
use serde_json::{json, Value};

/// A minimal agent core: answers sync, sync-delimited and ping; blocks one command like `-b`.
fn agent(s: &mut JsonStreamer, input: &[u8]) -> Vec<u8> {
    mini_agent(
        s,
        input,
        |name| (name == "guest-fsfreeze-freeze").then(|| QgaError::disabled(name, None)),
        |id, other| {
            Reply::err(
                id,
                QgaError::generic(format!("not in this test: {}", other.name())),
            )
        },
    )
}

#[test]
fn reference_transcript_7_2() {
    let mut s = JsonStreamer::new(Limits::default());
    let cases: &[(&[u8], &[u8])] = &[
        (b"{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":42}}\n", b"\xff{\"return\": 42}\n"),
        (b"{\"execute\":\"guest-ping\",\"id\":\"__qmp#00001\"}\n", b"{\"return\": {}, \"id\": \"__qmp#00001\"}\n"),
        (b"{\"execute\":\"guest-ping\",\"id\":7}", b"{\"return\": {}, \"id\": 7}\n"),
        (
            b"garbage\n",
            b"{\"error\": {\"class\": \"GenericError\", \"desc\": \"JSON parse error, invalid keyword 'garbage'\"}}\n",
        ),
        (
            b"\xff{\"execute\":\"guest-ping\"}\n",
            b"{\"error\": {\"class\": \"GenericError\", \"desc\": \"JSON parse error, stray '\\uFFFD'\"}}\n{\"return\": {}}\n",
        ),
        (
            b"{\"execute\":\"guest-fsfreeze-freeze\"}",
            b"{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"Command guest-fsfreeze-freeze has been disabled\"}}\n",
        ),
        (
            b"{\"execute\":\"guest-nonexistent\"}",
            b"{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command guest-nonexistent has not been found\"}}\n",
        ),
    ];
    for (sent, want) in cases {
        let got = agent(&mut s, sent);
        assert_eq!(
            got,
            *want,
            "sent {:?}: got {:?}",
            String::from_utf8_lossy(sent),
            String::from_utf8_lossy(&got)
        );
    }
}

#[test]
fn test_qga_protocol_cases() {
    let mut s = JsonStreamer::default();
    let mut ask = |input: &[u8]| {
        let out = agent(&mut s, input);
        let mut d = ReplyDecoder::new();
        let ev = d.feed(&out);
        assert_eq!(ev.len(), 1, "{ev:?}");
        match ev.into_iter().next() {
            Some(ReplyEvent::Reply(r)) => r,
            other => panic!("{other:?}"),
        }
    };
    // /qga/id
    assert_eq!(
        ask(b"{'execute': 'guest-ping', 'id': 1}").id,
        Some(json!(1))
    );
    // /qga/invalid-oob
    let r = ask(b"{'exec-oob': 'guest-ping'}");
    assert_eq!(r.body.unwrap_err().class, ErrorClass::GenericError);
    // /qga/invalid-cmd
    let e = ask(b"{'execute': 'guest-invalid-cmd'}").body.unwrap_err();
    assert_eq!(e.class, ErrorClass::CommandNotFound);
    assert!(!e.desc.is_empty());
    // /qga/invalid-args
    let e = ask(b"{'execute': 'guest-ping', 'arguments': {'foo': 42}}")
        .body
        .unwrap_err();
    assert_eq!(e.class, ErrorClass::GenericError);
    assert_eq!(e.desc, "Parameter 'foo' is unexpected");
    // Argument errors still echo the id; int64 range like measured.
    let r = ask(
        b"{\"execute\":\"guest-sync\",\"arguments\":{\"id\":18446744073709551615},\"id\":\"x\"}",
    );
    assert_eq!(r.id, Some(json!("x")));
    assert_eq!(
        r.body.unwrap_err().desc,
        "Invalid parameter type for 'id', expected: integer"
    );
    let r = ask(b"{\"execute\":\"guest-sync\",\"arguments\":{\"id\":1.5}}");
    assert_eq!(
        r.body.unwrap_err().desc,
        "Invalid parameter type for 'id', expected: integer"
    );
    let r = ask(b"{\"execute\":\"guest-sync\",\"arguments\":{\"id\":-9223372036854775808}}");
    assert_eq!(r.body, Ok(json!(i64::MIN)));
    // Envelope errors echo the id too, whatever its type.
    let r = ask(b"{\"execute\":\"guest-ping\",\"arguments\":[],\"id\":{\"a\":[null]}}");
    assert_eq!(r.id, Some(json!({"a": [null]})));
    assert_eq!(
        r.body.unwrap_err().desc,
        "QMP input member 'arguments' must be an object"
    );
    let r = ask(b"[]");
    assert_eq!(
        (r.id, r.body.unwrap_err().desc.as_str()),
        (None, "QMP input must be a JSON object")
    );
}

#[test]
fn sync_delimited_like_test_qga_and_proxmox() {
    // test-qga /qga/sync-delimited: a raw 0xFF, then guest-sync-delimited; the client reads up to the 0xFF.
    let mut s = JsonStreamer::default();
    let mut req = vec![0xFF];
    req.extend(encode_request(
        "guest-sync-delimited",
        json!({"id": 123456}).as_object(),
        None,
    ));
    let out = agent(&mut s, &req);
    let mut d = ReplyDecoder::new();
    d.expect_delimiter();
    let ev = d.feed(&out);
    assert_eq!(ev.len(), 1, "{ev:?}");
    let ReplyEvent::Reply(r) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert!(r.delimited);
    assert_eq!(r.body, Ok(json!(123456)));
    // Proxmox: sync-delimited and the command as two lines in one write; both answered, the first after 0xFF.
    let out = agent(
        &mut s,
        b"{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":1234501}}\n{\"execute\":\"guest-ping\"}\n",
    );
    assert!(
        out.starts_with(b"\xff{\"return\": 1234501}\n{\"return\": {}}\n"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    // A partial request left by a dead client is swallowed by the 0xFF reset with exactly one error.
    let mut s = JsonStreamer::default();
    assert!(agent(&mut s, b"{\"execute\":\"guest-pi").is_empty());
    let out = agent(&mut s, b"\xff{\"execute\":\"guest-ping\",\"id\":2}");
    let ev = ReplyDecoder::new().feed(&out);
    assert_eq!(ev.len(), 2);
    let ReplyEvent::Reply(r) = &ev[1] else {
        panic!()
    };
    assert_eq!(
        (r.id.clone(), r.body.clone()),
        (Some(json!(2)), Ok(json!({})))
    );
}

#[test]
fn request_encoder_round_trips_through_streamer() {
    let args =
        json!({"path": "/tmp/é x", "arg": ["a\"b", "\u{1F600}"], "capture-output": "merged"});
    let bytes = encode_request(
        "guest-exec",
        args.as_object(),
        Some(&Value::from("__qmp#00002")),
    );
    let ev = JsonStreamer::default().feed(&bytes);
    let [StreamEvent::Value(v)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    let req = Request::from_value(v.clone()).unwrap();
    assert_eq!(req.id, Some(json!("__qmp#00002")));
    let Command::GuestExec(a) = req.command().unwrap() else {
        panic!()
    };
    assert_eq!(a.arg.unwrap()[1], "\u{1F600}");
}

//! Throughput of the hot paths on near-maximal messages (45 MiB of file data, base64 = 60 MiB).
//!
//! Run with `cargo test --release -p protocol --test qga_throughput -- --nocapture` for the numbers;
//! the assertions are generous bounds so the test also holds in debug builds on a loaded machine.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test target: unwrap is how a set-up step fails

use std::time::Instant;

use guestlink_protocol::qga::schema::Command;
use guestlink_protocol::qga::{
    encode_reply, JsonStreamer, Reply, ReplyDecoder, ReplyEvent, Request, StreamEvent,
};
use serde_json::json;

#[test]
fn biggest_write_request_and_read_reply() {
    // A write request must stay under the 64 MiB token limit (all tokens together, so 48 MiB of data = 64 MiB of
    // base64 is already too much for qemu-ga too); 45 MiB of data = 60 MiB of base64.
    let b64_len = (45 << 20) / 3 * 4;
    let payload: String = "QUJD".repeat(b64_len / 4);
    let mut req =
        br#"{"execute":"guest-file-write","arguments":{"handle":1000,"buf-b64":""#.to_vec();
    req.extend_from_slice(payload.as_bytes());
    req.extend_from_slice(br#""},"id":1}"#);

    let t = Instant::now();
    let mut s = JsonStreamer::default();
    let mut events = Vec::new();
    for chunk in req.chunks(4096) {
        events.extend(s.feed(chunk));
    }
    let parse = t.elapsed();
    let [StreamEvent::Value(v)] = events.as_slice() else {
        panic!("{:?}", events.len())
    };
    let cmd = Request::from_value(v.clone()).unwrap().command().unwrap();
    let Command::GuestFileWrite(a) = cmd else {
        panic!()
    };
    assert_eq!(a.buf_b64.len(), payload.len());

    let reply = Reply::ok(
        Some(json!(1)),
        json!({"count": 45 << 20, "buf-b64": payload, "eof": false}),
    );
    let t = Instant::now();
    let mut out = Vec::with_capacity(payload.len() + 100);
    encode_reply(&reply, &mut out);
    let encode = t.elapsed();

    let t = Instant::now();
    let mut d = ReplyDecoder::new();
    let mut got = Vec::new();
    for chunk in out.chunks(65536) {
        got.extend(d.feed(chunk));
    }
    let decode = t.elapsed();
    assert!(matches!(got.as_slice(), [ReplyEvent::Reply(_)]));

    let mb = req.len() as f64 / 1e6;
    eprintln!(
        "{mb:.1} MB: stream+parse {:.0} MB/s, encode {:.0} MB/s, host decode {:.0} MB/s",
        mb / parse.as_secs_f64(),
        mb / encode.as_secs_f64(),
        mb / decode.as_secs_f64()
    );
    for (what, d) in [("parse", parse), ("encode", encode), ("decode", decode)] {
        assert!(d.as_secs() < 120, "{what} took {d:?}");
    }
}

//! Guest side: arbitrary bytes from a hostile host through the QEMU-style JSON streamer, the request envelope
//! check and the typed command parser, then the reply encoder and the host decoder.
//!
//! Checks: no panic; identical events whether the input arrives whole or in chunks; memory held by the streamer
//! stays within its limits; every reply the agent would send decodes back to one reply.
#![no_main]

use guestlink_protocol::qga::schema::Command;
use guestlink_protocol::qga::{
    encode_reply, JsonStreamer, Limits, Reply, ReplyDecoder, ReplyEvent, Request, StreamEvent,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits so the fuzzer can reach the limit paths with short inputs.
    let (limits, body) = match data.split_first() {
        Some((&b, rest)) if b & 1 == 1 => (
            Limits {
                max_token_bytes: 64 + usize::from(b),
                max_tokens: 16 + usize::from(b >> 2),
                max_depth: 8,
            },
            rest,
        ),
        Some((_, rest)) => (Limits::default(), rest),
        None => (Limits::default(), data),
    };
    let whole = JsonStreamer::new(limits).feed(body);

    let mut chunked = JsonStreamer::new(limits);
    let mut events = Vec::new();
    let step = 1 + data.first().map_or(0, |b| usize::from(b % 7));
    for chunk in body.chunks(step) {
        events.extend(chunked.feed(chunk));
        assert!(chunked.buffered() <= 2 * limits.max_token_bytes + 2);
    }
    assert_eq!(events, whole, "chunked feeding changed the events");

    let mut out = Vec::new();
    let mut sent = 0usize;
    for ev in whole {
        let reply = match ev {
            StreamEvent::Error(e) => Reply::err(None, e),
            StreamEvent::Value(v) => match Request::from_value(v) {
                Err(e) => Reply::err(e.id, e.error),
                Ok(req) => match Command::parse(&req.execute, req.arguments.as_ref()) {
                    Err(e) => Reply::err(req.id, e),
                    Ok(cmd) => {
                        // Arguments serialize back to an object that parses to the same command.
                        if let Some(args) = cmd.arguments() {
                            assert_eq!(Command::parse(cmd.name(), Some(&args)).as_ref(), Ok(&cmd));
                        }
                        Reply::ok(req.id, serde_json::Value::String(cmd.name().to_owned()))
                    }
                },
            },
        };
        encode_reply(&reply, &mut out);
        sent += 1;
    }
    let decoded = ReplyDecoder::new().feed(&out);
    assert_eq!(decoded.len(), sent);
    assert!(
        decoded.iter().all(|e| matches!(e, ReplyEvent::Reply(_))),
        "{decoded:?}"
    );
});

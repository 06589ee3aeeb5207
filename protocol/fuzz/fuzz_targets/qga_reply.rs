//! Host side: arbitrary bytes from a hostile agent through the reply decoder.
//!
//! Checks: no panic, the partial line held never exceeds the configured cap, chunking doesn't change the events.
#![no_main]

use guestlink_protocol::qga::ReplyDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&b, body)) = data.split_first() else {
        return;
    };
    let max = 8 + usize::from(b & 0x7F);
    let mut whole = ReplyDecoder::with_max_reply(max);
    if b & 0x80 != 0 {
        whole.expect_delimiter();
    }
    let want = whole.feed(body);
    assert!(whole.buffered() <= max);

    let mut chunked = ReplyDecoder::with_max_reply(max);
    if b & 0x80 != 0 {
        chunked.expect_delimiter();
    }
    let mut got = Vec::new();
    for chunk in body.chunks(1 + usize::from(b % 5)) {
        got.extend(chunked.feed(chunk));
        assert!(chunked.buffered() <= max);
    }
    assert_eq!(got, want);
});

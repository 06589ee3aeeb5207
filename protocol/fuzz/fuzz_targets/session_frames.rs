//! Fuzz target: arbitrary bytes → session `FrameDecoder` (split into pieces); every decoded message must
//! re-encode into a frame that decodes to the same message.
#![no_main]

use guestlink_protocol::session::{encode, FrameDecoder, FRAME_HEADER_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(control) + 1;
    let mut decoder = FrameDecoder::new();
    for part in stream.chunks(piece) {
        for message in decoder.feed(part).into_iter().flatten() {
            let frame = encode(&message).expect("a decoded message re-encodes");
            let again = FrameDecoder::new().feed(&frame);
            assert_eq!(again, vec![Ok(message)]);
        }
        assert!(decoder.buffered_bytes() <= 2 * stream.len() + FRAME_HEADER_SIZE);
    }
});

//! Fuzz target: arbitrary bytes → vdagent `Reassembler` (both chunk-size policies, split into pieces) → `Message`
//! decode with every `WireFormat`; whatever decodes must re-encode and decode to the same value.
#![no_main]

use guestlink_protocol::vdagent::{Message, Reassembler, ReassemblerConfig, WireFormat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let base = if control & 1 == 0 {
        ReassemblerConfig::guest_side()
    } else {
        ReassemblerConfig::host_side()
    };
    // Small message caps exercise the size check; the default exercises large announcements.
    let config = if control & 2 == 0 {
        base
    } else {
        base.with_max_message_size(4096)
    };
    let piece = usize::from(control >> 2) + 1;
    let mut reassembler = Reassembler::new(config);
    for part in stream.chunks(piece) {
        for event in reassembler.feed(part) {
            let Ok((_, raw)) = event else { continue };
            for wire in WireFormat::ALL {
                if let Ok(message) = raw.decode(wire) {
                    let payload = message
                        .encode_payload(wire)
                        .expect("a decoded message re-encodes");
                    let again = Message::decode(raw.header.msg_type, &payload, wire)
                        .expect("re-encoded decodes");
                    assert_eq!(again, message);
                }
            }
        }
        if reassembler.is_poisoned() {
            reassembler.reset();
        }
        // Memory is bounded by what arrived, never by what a header announced.
        assert!(reassembler.buffered_bytes() <= 2 * stream.len() + 64);
    }
});

//! Fuzz target: arbitrary bytes → session `FrameDecoder` (split into pieces); every decoded message must
//! re-encode into a frame that decodes to the same message, and a streaming decoder fed the same pieces must
//! give the same messages and errors once its streamed data parts are put back together.
#![no_main]

use guestlink_protocol::session::{
    encode, FrameDecoder, FrameEvent, SessionError, SessionMessage, FRAME_HEADER_SIZE,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(control & 0x7f) + 1;
    let stream_min = usize::from(control >> 4) + 1;
    let mut decoder = FrameDecoder::new();
    let mut streaming = FrameDecoder::new().streaming(stream_min);
    let mut whole: Vec<Result<SessionMessage, SessionError>> = Vec::new();
    let mut rebuilt: Vec<Result<SessionMessage, SessionError>> = Vec::new();
    let mut open: Option<(SessionMessage, usize, Vec<u8>)> = None;
    for part in stream.chunks(piece) {
        for result in decoder.feed(part) {
            if let Ok(message) = &result {
                let frame = encode(message).expect("a decoded message re-encodes");
                let again = FrameDecoder::new().feed(&frame);
                assert_eq!(again, vec![Ok(message.clone())]);
            }
            whole.push(result);
        }
        assert!(decoder.buffered_bytes() <= 2 * stream.len() + FRAME_HEADER_SIZE);
        for ev in streaming.feed_events(part) {
            match ev {
                Ok(FrameEvent::Message(m)) => rebuilt.push(Ok(m)),
                Ok(FrameEvent::DataBegin { message, len }) => {
                    assert!(open.is_none() && len >= stream_min);
                    open = Some((message, len, Vec::new()));
                }
                Ok(FrameEvent::Data(bytes)) => {
                    let (_, len, got) = open.as_mut().expect("data inside a stream");
                    got.extend_from_slice(&bytes);
                    assert!(got.len() <= *len);
                }
                Ok(FrameEvent::DataEnd) => {
                    let (m, len, got) = open.take().expect("end of an open stream");
                    assert_eq!(got.len(), len);
                    let m = match m {
                        SessionMessage::ClipboardData {
                            selection,
                            data_type,
                            ..
                        } => SessionMessage::ClipboardData {
                            selection,
                            data_type,
                            data: got,
                        },
                        SessionMessage::FileXferData { id, .. } => {
                            SessionMessage::FileXferData { id, data: got }
                        }
                        other => panic!("streamed a kind without data: {other:?}"),
                    };
                    rebuilt.push(Ok(m));
                }
                Err(e) => rebuilt.push(Err(e)),
            }
        }
        assert!(streaming.buffered_bytes() <= 2 * stream.len() + FRAME_HEADER_SIZE);
    }
    assert_eq!(whole, rebuilt);
});

//! Fuzz target: arbitrary bytes → session `FrameDecoder` (split into pieces); every decoded message must
//! re-encode into a frame that decodes to the same message, and two streaming decoders fed the same pieces must
//! give the same messages and errors once their streamed data parts are put back together: one streaming every
//! data kind (`feed_events`), one streaming file data only whose caller takes part of each piece of streamed
//! data itself (`stream_left`/`consumed`, as guestlink-session reads file data straight into its blocks).
#![no_main]

use guestlink_protocol::session::{
    encode, FrameDecoder, FrameEvent, SessionError, SessionMessage, FRAME_HEADER_SIZE,
    KIND_FILE_XFER_DATA,
};
use libfuzzer_sys::fuzz_target;

/// Whole messages rebuilt from streamed events.
#[derive(Default)]
struct Rebuild {
    open: Option<(SessionMessage, usize, Vec<u8>)>,
    done: Vec<Result<SessionMessage, SessionError>>,
}

impl Rebuild {
    fn event(&mut self, ev: Result<FrameEvent<&[u8]>, SessionError>, stream_min: usize) {
        match ev {
            Ok(FrameEvent::Message(m)) => self.done.push(Ok(m)),
            Ok(FrameEvent::DataBegin { message, len }) => {
                assert!(self.open.is_none() && len >= stream_min);
                self.open = Some((message, len, Vec::new()));
            }
            Ok(FrameEvent::Data(bytes)) => self.data(bytes),
            Ok(FrameEvent::DataEnd) => self.end(),
            Err(e) => self.done.push(Err(e)),
        }
    }

    fn data(&mut self, bytes: &[u8]) {
        let (_, len, got) = self.open.as_mut().expect("data inside a stream");
        got.extend_from_slice(bytes);
        assert!(got.len() <= *len);
    }

    fn end(&mut self) {
        let (m, len, got) = self.open.take().expect("end of an open stream");
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
        self.done.push(Ok(m));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(control & 0x7f) + 1;
    let stream_min = usize::from(control >> 4) + 1;
    let take = usize::from(control & 0x0f) * 97 + 1;
    let mut decoder = FrameDecoder::new();
    let mut streaming = FrameDecoder::new().streaming(stream_min);
    let mut taking = FrameDecoder::new().streaming_kind(KIND_FILE_XFER_DATA, 1);
    let mut whole: Vec<Result<SessionMessage, SessionError>> = Vec::new();
    let (mut rebuilt, mut taken) = (Rebuild::default(), Rebuild::default());
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
        for ev in streaming.feed_borrowed(part) {
            rebuilt.event(ev, stream_min);
        }
        assert!(streaming.buffered_bytes() <= 2 * stream.len() + FRAME_HEADER_SIZE);
        // The caller takes up to `take` bytes of streamed file data itself, then feeds the rest.
        let n = taking.stream_left().min(take).min(part.len());
        if n > 0 {
            taken.data(&part[..n]);
            if taking.consumed(n) {
                taken.end();
            }
        }
        for ev in taking.feed_borrowed(&part[n..]) {
            taken.event(ev, 1);
        }
    }
    assert_eq!(whole, rebuilt.done);
    assert_eq!(whole, taken.done);
});

//! The incremental [`FrameDecoder`]: bounded buffering, per-frame errors that keep the stream usable, and
//! optional streaming of large data parts ([`FrameDecoder::streaming`]), so a relay such as guestlinkd can pass
//! a 16 MiB clipboard answer on while it is still arriving instead of holding all of it first.
//!
//! Which entry points when:
//!
//! | The reader… | builds the decoder with | feeds with | gets |
//! |---|---|---|---|
//! | wants whole messages, data parts in memory (tests, tools) | [`new`](FrameDecoder::new) or [`with_max_body`](FrameDecoder::with_max_body) | [`feed`](FrameDecoder::feed) | [`SessionMessage`]s |
//! | relays large data parts on as they arrive (guestlinkd reading a session agent) | `with_max_body(cap)` + [`streaming`](FrameDecoder::streaming) | [`feed_events`](FrameDecoder::feed_events) | [`FrameEvent`]s with owned pieces |
//! | stores one kind's data elsewhere (guestlink-session writing a received file) | `new()` + [`streaming_kind`](FrameDecoder::streaming_kind) | [`feed_borrowed`](FrameDecoder::feed_borrowed) | [`FrameEvent`]s with pieces borrowed from the input |
//! | reads a streamed part straight into its destination | as above | [`stream_left`](FrameDecoder::stream_left), then [`consumed`](FrameDecoder::consumed) instead of feeding those bytes | `true` when the part is complete |
//!
//! Any reader stops on [`is_poisoned`](FrameDecoder::is_poisoned) (a fatal error: the stream is out of step);
//! [`buffered_bytes`](FrameDecoder::buffered_bytes) is for checking the memory bound (tests, fuzz targets).

use std::ops::Range;

use super::error::SessionError;
use super::frame::{
    FrameHeader, FRAME_HEADER_SIZE, FRAME_MAGIC, FRAME_VERSION, MAX_FRAME_BODY, MAX_META_SIZE,
};
use super::message::{SessionMessage, MAX_KIND};
use crate::growth::grow_within;

/// What [`FrameDecoder::feed_events`] produces (`D` = `Vec<u8>`), and [`FrameDecoder::feed_borrowed`] with the
/// data pieces borrowed from its input (`D` = `&[u8]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameEvent<D = Vec<u8>> {
    /// A whole message.
    Message(SessionMessage),
    /// A streamed message begins: `message` has an empty data part; `len` data bytes follow as
    /// [`FrameEvent::Data`] pieces, then [`FrameEvent::DataEnd`].
    DataBegin {
        /// The message without its data.
        message: SessionMessage,
        /// Length of the data part that follows.
        len: usize,
    },
    /// The next piece of the streamed data part (never empty; at most one `feed` input long).
    Data(D),
    /// The streamed data part is complete.
    DataEnd,
}

impl<D> FrameEvent<D> {
    /// The same event with its data piece mapped by `f`.
    fn map_data<E>(self, f: impl FnOnce(D) -> E) -> FrameEvent<E> {
        match self {
            Self::Message(m) => FrameEvent::Message(m),
            Self::DataBegin { message, len } => FrameEvent::DataBegin { message, len },
            Self::Data(d) => FrameEvent::Data(f(d)),
            Self::DataEnd => FrameEvent::DataEnd,
        }
    }
}

/// What [`FrameDecoder::run`] collects: streamed pieces as ranges of its input.
type Events = Vec<Result<FrameEvent<Range<usize>>, SessionError>>;

/// Where the decoder is within the current frame.
#[derive(Debug)]
enum Phase {
    /// Collecting the 12-byte header.
    Header,
    /// Collecting the 4-byte metadata length into `head`.
    Prefix,
    /// Collecting `meta_len` metadata bytes into `head` (after the prefix).
    Meta { meta_len: usize },
    /// Collecting the data part of `message`.
    Data {
        message: SessionMessage,
        data: Vec<u8>,
    },
    /// Passing the data part on as pieces.
    Stream,
    /// Discarding the rest of a frame whose error was already reported.
    Skip,
}

/// Incremental frame decoder with bounded buffering: it holds at most one partial frame, whose buffers grow
/// only as bytes arrive (at most twice the bytes received) and never beyond the body cap.
///
/// Fatal errors ([`SessionError::BadMagic`], [`SessionError::UnsupportedVersion`],
/// [`SessionError::FrameTooLarge`]) stop the decoder; later calls return [`SessionError::Poisoned`]. Other errors
/// concern one frame, which is skipped.
#[derive(Debug)]
pub struct FrameDecoder {
    max_body: u32,
    /// Stream data parts of at least this many bytes (see [`FrameDecoder::streaming`]).
    stream_min: Option<usize>,
    /// Stream only frames of this kind (see [`FrameDecoder::streaming_kind`]).
    stream_kind: Option<u16>,
    header_buf: [u8; FRAME_HEADER_SIZE],
    header_len: usize,
    /// Kind of the current frame.
    kind: u16,
    /// Body bytes of the current frame not consumed yet.
    left: usize,
    /// The metadata length prefix and the metadata of the current frame.
    head: Vec<u8>,
    phase: Phase,
    poisoned: bool,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder accepting bodies up to [`MAX_FRAME_BODY`].
    pub fn new() -> Self {
        Self::with_max_body(MAX_FRAME_BODY)
    }

    /// A decoder accepting bodies up to `max_body` (clamped to [`MAX_FRAME_BODY`]).
    pub fn with_max_body(max_body: u32) -> Self {
        Self {
            max_body: max_body.min(MAX_FRAME_BODY),
            stream_min: None,
            stream_kind: None,
            header_buf: [0; FRAME_HEADER_SIZE],
            header_len: 0,
            kind: 0,
            left: 0,
            head: Vec::new(),
            phase: Phase::Header,
            poisoned: false,
        }
    }

    /// Makes [`FrameDecoder::feed_events`] stream data parts of at least `min` bytes (at least 1): the message
    /// comes first as [`FrameEvent::DataBegin`], then the data in pieces as they arrive. Frames with such a data
    /// part may be as large as [`MAX_FRAME_BODY`] even when the body cap is smaller, as long as their metadata
    /// fits within the cap — so a decoder for small frames still passes large data on with bounded memory.
    pub fn streaming(mut self, min: usize) -> Self {
        self.stream_min = Some(min.max(1));
        self
    }

    /// [`FrameDecoder::streaming`] for frames of `kind` only (a kind with a data part); the others are collected
    /// as usual.
    pub fn streaming_kind(mut self, kind: u16, min: usize) -> Self {
        self.stream_kind = Some(kind);
        self.streaming(min)
    }

    /// Whether a fatal error stopped the decoder.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Data bytes of the data part being streamed that are still to come (0 when none is streaming). A caller
    /// may take up to that many next bytes of its stream itself (read them straight into their destination) and
    /// report them with [`FrameDecoder::consumed`] instead of feeding them.
    pub fn stream_left(&self) -> usize {
        match self.phase {
            Phase::Stream => self.left,
            _ => 0,
        }
    }

    /// The caller took the next `n` bytes of the streamed data part itself (at most
    /// [`FrameDecoder::stream_left`]; more are not counted); returns whether that completed the part — where
    /// feeding them would have ended with [`FrameEvent::DataEnd`].
    pub fn consumed(&mut self, n: usize) -> bool {
        if !matches!(self.phase, Phase::Stream) || n == 0 {
            return false;
        }
        debug_assert!(
            n <= self.left,
            "consumed {n} of {} streamed bytes",
            self.left
        );
        self.left -= n.min(self.left);
        if self.left > 0 {
            return false;
        }
        self.end_frame();
        true
    }

    /// Memory held for the partial frame (header bytes plus buffer capacities).
    pub fn buffered_bytes(&self) -> usize {
        let data = match &self.phase {
            Phase::Data { data, .. } => data.capacity(),
            _ => 0,
        };
        self.header_len + self.head.capacity() + data
    }

    /// Feeds bytes; returns one result per completed frame (data parts are never streamed here).
    pub fn feed(&mut self, input: &[u8]) -> Vec<Result<SessionMessage, SessionError>> {
        self.run(input, false)
            .into_iter()
            .filter_map(|r| match r {
                Ok(FrameEvent::Message(m)) => Some(Ok(m)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect()
    }

    /// Feeds bytes; returns whole messages and, for data parts of at least the [`FrameDecoder::streaming`]
    /// size, the streamed message's events.
    pub fn feed_events(&mut self, input: &[u8]) -> Vec<Result<FrameEvent, SessionError>> {
        self.feed_borrowed(input)
            .into_iter()
            .map(|r| r.map(|ev| ev.map_data(<[u8]>::to_vec)))
            .collect()
    }

    /// [`FrameDecoder::feed_events`] with the streamed data pieces borrowed from `input` instead of copied, for a
    /// receiver that stores them elsewhere anyway (guestlink-session writing a received file).
    pub fn feed_borrowed<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Vec<Result<FrameEvent<&'a [u8]>, SessionError>> {
        self.run(input, true)
            .into_iter()
            .map(|r| r.map(|ev| ev.map_data(|range| &input[range])))
            .collect()
    }

    /// Decodes `input`; streamed data pieces are given as their ranges in `input`.
    fn run(&mut self, input: &[u8], allow_stream: bool) -> Events {
        let whole = input.len();
        let mut input = input;
        let mut out = Vec::new();
        if self.poisoned {
            if !input.is_empty() {
                out.push(Err(SessionError::Poisoned));
            }
            return out;
        }
        loop {
            match &mut self.phase {
                Phase::Header => {
                    if input.is_empty() {
                        break;
                    }
                    let n = (FRAME_HEADER_SIZE - self.header_len).min(input.len());
                    self.header_buf[self.header_len..self.header_len + n]
                        .copy_from_slice(&input[..n]);
                    self.header_len += n;
                    input = &input[n..];
                    if self.header_len < FRAME_HEADER_SIZE {
                        break;
                    }
                    self.header_len = 0;
                    let h = FrameHeader::decode(&self.header_buf);
                    if let Err(e) = self.check_header(&h, allow_stream) {
                        self.poisoned = true;
                        out.push(Err(e));
                        return out;
                    }
                    self.start_frame(h, &mut out);
                }
                Phase::Prefix | Phase::Meta { .. } => {
                    let want = match self.phase {
                        Phase::Meta { meta_len } => 4 + meta_len,
                        _ => 4,
                    };
                    let n = (want - self.head.len()).min(input.len());
                    self.head.extend_from_slice(&input[..n]);
                    self.left -= n;
                    input = &input[n..];
                    if self.head.len() < want {
                        break;
                    }
                    if matches!(self.phase, Phase::Prefix) {
                        self.prefix_done(allow_stream, &mut out);
                    } else {
                        self.meta_done(allow_stream, &mut out);
                    }
                }
                Phase::Data { data, .. } => {
                    let n = self.left.min(input.len());
                    grow_within(data, n, data.len() + self.left);
                    data.extend_from_slice(&input[..n]);
                    self.left -= n;
                    input = &input[n..];
                    if self.left > 0 {
                        break;
                    }
                    if let Phase::Data { mut message, data } =
                        std::mem::replace(&mut self.phase, Phase::Header)
                    {
                        message.set_data(data);
                        out.push(Ok(FrameEvent::Message(message)));
                    }
                    self.end_frame();
                }
                Phase::Stream => {
                    let n = self.left.min(input.len());
                    if n > 0 {
                        let at = whole - input.len();
                        out.push(Ok(FrameEvent::Data(at..at + n)));
                        self.left -= n;
                        input = &input[n..];
                    }
                    if self.left > 0 {
                        break;
                    }
                    out.push(Ok(FrameEvent::DataEnd));
                    self.end_frame();
                }
                Phase::Skip => {
                    let n = self.left.min(input.len());
                    self.left -= n;
                    input = &input[n..];
                    if self.left > 0 {
                        break;
                    }
                    self.end_frame();
                }
            }
        }
        out
    }

    /// The header passed its checks: start on the body.
    fn start_frame(&mut self, h: FrameHeader, out: &mut Events) {
        self.kind = h.kind;
        self.left = h.length as usize;
        if h.kind == 0 || h.kind > MAX_KIND {
            self.fail(out, SessionError::UnknownKind(h.kind));
        } else if self.left < 4 {
            self.fail(
                out,
                SessionError::BadBody("body shorter than 4 bytes".into()),
            );
        } else {
            self.phase = Phase::Prefix;
        }
    }

    /// The metadata length is known: check it and whether the frame may be buffered or must be streamed.
    fn prefix_done(&mut self, allow_stream: bool, out: &mut Events) {
        let meta_len = u32::from_le_bytes([self.head[0], self.head[1], self.head[2], self.head[3]]);
        if meta_len > MAX_META_SIZE || meta_len as usize > self.left {
            let e = SessionError::BadBody(format!("metadata length {meta_len} out of bounds"));
            return self.fail(out, e);
        }
        let meta_len = meta_len as usize;
        let body = 4 + self.left;
        let fits = body <= self.max_body as usize;
        let streamed_fits = self.streams(allow_stream, self.left - meta_len)
            && 4 + meta_len <= self.max_body as usize;
        if !fits && !streamed_fits {
            let e = SessionError::BadBody(format!(
                "a body of {body} bytes exceeds the limit of {} bytes",
                self.max_body
            ));
            return self.fail(out, e);
        }
        self.phase = Phase::Meta { meta_len };
    }

    /// The metadata is complete: decode it, then collect or stream the data part.
    fn meta_done(&mut self, allow_stream: bool, out: &mut Events) {
        let data_len = self.left;
        let message = match decode_meta(self.kind, &self.head[4..], data_len == 0) {
            Ok(m) => m,
            Err(e) => return self.fail(out, e),
        };
        if data_len == 0 {
            out.push(Ok(FrameEvent::Message(message)));
            self.end_frame();
        } else if self.streams(allow_stream, data_len) {
            out.push(Ok(FrameEvent::DataBegin {
                message,
                len: data_len,
            }));
            self.phase = Phase::Stream;
        } else {
            self.phase = Phase::Data {
                message,
                data: Vec::new(),
            };
        }
    }

    /// Whether a data part of `data_len` bytes in the current frame is streamed.
    fn streams(&self, allow_stream: bool, data_len: usize) -> bool {
        allow_stream
            && self.streamed_kind(self.kind)
            && self.stream_min.is_some_and(|min| data_len >= min)
    }

    /// Whether data parts of frames of `kind` may be streamed.
    fn streamed_kind(&self, kind: u16) -> bool {
        SessionMessage::kind_has_data(kind) && self.stream_kind.is_none_or(|k| k == kind)
    }

    /// Reports a per-frame error and skips the rest of the frame.
    fn fail(&mut self, out: &mut Events, e: SessionError) {
        out.push(Err(e));
        self.phase = Phase::Skip;
    }

    /// Back to waiting for a header; no buffer is kept between frames.
    fn end_frame(&mut self) {
        self.phase = Phase::Header;
        self.head = Vec::new();
    }

    fn check_header(&self, h: &FrameHeader, allow_stream: bool) -> Result<(), SessionError> {
        if h.magic != FRAME_MAGIC {
            return Err(SessionError::BadMagic(h.magic));
        }
        if h.version != FRAME_VERSION {
            return Err(SessionError::UnsupportedVersion(h.version));
        }
        // A frame that may be streamed is only bounded by the protocol cap here; `prefix_done` checks the rest.
        let may_stream = allow_stream && self.stream_min.is_some() && self.streamed_kind(h.kind);
        let max = if may_stream {
            MAX_FRAME_BODY
        } else {
            self.max_body
        };
        if h.length > max {
            return Err(SessionError::FrameTooLarge {
                size: h.length.into(),
                max: max.into(),
            });
        }
        Ok(())
    }
}

/// The message described by the JSON metadata of a frame of `kind`; `no_data`: the frame carries no data part.
fn decode_meta(kind: u16, meta: &[u8], no_data: bool) -> Result<SessionMessage, SessionError> {
    let message: SessionMessage =
        serde_json::from_slice(meta).map_err(|e| SessionError::BadBody(e.to_string()))?;
    if message.kind() != kind {
        return Err(SessionError::KindMismatch {
            header: kind,
            body: message.kind(),
        });
    }
    if !SessionMessage::kind_has_data(kind) && !no_data {
        return Err(SessionError::UnexpectedData(kind));
    }
    Ok(message)
}

//! Frame layout, [`encode`], [`encode_head`] and [`decode_body`]; the incremental decoder is
//! [`FrameDecoder`] in `decoder.rs`.
//!
//! ```text
//! header (12 bytes, little endian)
//!   0  u16  magic   0x4c47 ("GL" on the wire)
//!   2  u16  version 1
//!   4  u16  kind    SessionMessage::kind()
//!   6  u16  flags   0 (reserved, ignored)
//!   8  u32  length  body bytes that follow (≤ MAX_FRAME_BODY)
//! body
//!   0  u32  meta_len (≤ MAX_META_SIZE)
//!   4  ...  metadata: compact JSON object of the message, {"type": "...", fields...}
//!   4+meta_len  data part: raw bytes (clipboard data, file chunks), only for kinds that carry data
//! ```

use super::decoder::FrameDecoder;
use super::error::SessionError;
use super::message::SessionMessage;

/// Frame magic: the bytes `G`, `L` read as a little-endian u16.
pub(crate) const FRAME_MAGIC: u16 = u16::from_le_bytes(*b"GL");
/// Frame format version.
pub(crate) const FRAME_VERSION: u16 = 1;
/// Size of the frame header.
pub const FRAME_HEADER_SIZE: usize = 12;
/// Largest frame body: 64 MiB of data plus 4 KiB for the metadata.
pub const MAX_FRAME_BODY: u32 = 64 * 1024 * 1024 + 4096;
/// Largest metadata part.
pub(crate) const MAX_META_SIZE: u32 = 1024 * 1024;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Magic; must be [`FRAME_MAGIC`].
    pub magic: u16,
    /// Version; must be [`FRAME_VERSION`].
    pub version: u16,
    /// Message kind.
    pub kind: u16,
    /// Reserved flags.
    pub flags: u16,
    /// Body length.
    pub length: u32,
}

impl FrameHeader {
    /// Decodes the 12 header bytes.
    pub fn decode(b: &[u8; FRAME_HEADER_SIZE]) -> Self {
        Self {
            magic: u16::from_le_bytes([b[0], b[1]]),
            version: u16::from_le_bytes([b[2], b[3]]),
            kind: u16::from_le_bytes([b[4], b[5]]),
            flags: u16::from_le_bytes([b[6], b[7]]),
            length: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
        }
    }

    /// Encodes the 12 header bytes.
    pub fn encode(&self) -> [u8; FRAME_HEADER_SIZE] {
        let mut out = [0u8; FRAME_HEADER_SIZE];
        out[0..2].copy_from_slice(&self.magic.to_le_bytes());
        out[2..4].copy_from_slice(&self.version.to_le_bytes());
        out[4..6].copy_from_slice(&self.kind.to_le_bytes());
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..12].copy_from_slice(&self.length.to_le_bytes());
        out
    }
}

/// Encodes `message` as one frame.
pub fn encode(message: &SessionMessage) -> Result<Vec<u8>, SessionError> {
    let mut out = encode_head(message)?;
    out.extend_from_slice(message.data());
    Ok(out)
}

/// The frame of `message` without its data part: writing these bytes and then [`SessionMessage::data`] gives
/// exactly [`encode`]'s frame, without copying the data into a new buffer.
pub fn encode_head(message: &SessionMessage) -> Result<Vec<u8>, SessionError> {
    let meta = serde_json::to_vec(message)
        .map_err(|_| SessionError::Encode("metadata not serializable"))?;
    if meta.len() > MAX_META_SIZE as usize {
        return Err(SessionError::Encode("metadata larger than MAX_META_SIZE"));
    }
    let data = message.data();
    let body_len = 4 + meta.len() + data.len();
    let length = u32::try_from(body_len)
        .ok()
        .filter(|l| *l <= MAX_FRAME_BODY)
        .ok_or(SessionError::Encode(
            "frame body larger than MAX_FRAME_BODY",
        ))?;
    let header = FrameHeader {
        magic: FRAME_MAGIC,
        version: FRAME_VERSION,
        kind: message.kind(),
        flags: 0,
        length,
    };
    let mut out = Vec::with_capacity(FRAME_HEADER_SIZE + body_len);
    out.extend_from_slice(&header.encode());
    // meta.len() ≤ MAX_META_SIZE, checked above.
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta);
    Ok(out)
}

/// Decodes one frame body of `kind` (the header's other fields taken as valid): [`FrameDecoder`] fed that one
/// frame, so both give the same messages and errors.
pub fn decode_body(kind: u16, body: &[u8]) -> Result<SessionMessage, SessionError> {
    let length = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME_BODY)
        .ok_or_else(|| SessionError::FrameTooLarge {
            size: body.len() as u64,
            max: MAX_FRAME_BODY.into(),
        })?;
    let header = FrameHeader {
        magic: FRAME_MAGIC,
        version: FRAME_VERSION,
        kind,
        flags: 0,
        length,
    };
    let mut decoder = FrameDecoder::new();
    let mut out = decoder.feed(&header.encode());
    out.extend(decoder.feed(body));
    // A whole frame was fed: exactly one result.
    out.pop()
        .unwrap_or_else(|| Err(SessionError::BadBody("incomplete frame".into())))
}

#[cfg(test)]
mod owned_tests {
    use super::*;
    use crate::vdagent::{ClipboardType, Selection};

    fn clip(len: usize) -> SessionMessage {
        SessionMessage::ClipboardData {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: (0..len).map(|i| (i % 251) as u8).collect(),
        }
    }

    #[test]
    fn head_plus_data_is_the_frame_and_decode_body_reads_it() {
        for msg in [clip(0), clip(5000), SessionMessage::ClientConnected] {
            let bytes = encode(&msg).unwrap();
            let kind = msg.kind();
            let mut joined = encode_head(&msg).unwrap();
            joined.extend_from_slice(msg.data());
            assert_eq!(joined, bytes, "head + data = the frame");
            assert_eq!(decode_body(kind, &bytes[FRAME_HEADER_SIZE..]).unwrap(), msg);
        }
        // Per-frame errors: short body, meta out of bounds, data on a kind without data, unknown kind.
        let connected = SessionMessage::ClientConnected;
        let mut with_data = encode(&connected).unwrap()[FRAME_HEADER_SIZE..].to_vec();
        with_data.push(1);
        let k = connected.kind();
        assert!(matches!(
            decode_body(k, &[1, 0]),
            Err(SessionError::BadBody(_))
        ));
        assert!(matches!(
            decode_body(k, &[200, 0, 0, 0, b'{']),
            Err(SessionError::BadBody(_))
        ));
        assert_eq!(
            decode_body(k, &with_data),
            Err(SessionError::UnexpectedData(k))
        );
        assert_eq!(decode_body(0, &[0; 8]), Err(SessionError::UnknownKind(0)));
    }

    #[test]
    fn body_buffer_is_bounded_by_received_bytes_and_ends_at_the_frame_size() {
        let msg = clip(3 << 20);
        let bytes = encode(&msg).unwrap();
        let length = bytes.len() - FRAME_HEADER_SIZE;
        let mut d = FrameDecoder::new();
        let mut fed = 0;
        let mut out = Vec::new();
        for piece in bytes.chunks(65_536) {
            out.extend(d.feed(piece));
            fed += piece.len();
            if out.is_empty() {
                assert!(
                    d.buffered_bytes() <= 2 * fed,
                    "{} after {fed}",
                    d.buffered_bytes()
                );
                assert!(d.buffered_bytes() <= length + FRAME_HEADER_SIZE);
            }
        }
        assert_eq!(out.len(), 1);
        assert_eq!(out.pop().unwrap().unwrap(), msg);
    }
}

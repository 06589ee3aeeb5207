//! Frame layout, [`encode`] and the incremental [`FrameDecoder`].
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

use super::error::SessionError;
use super::message::{SessionMessage, MAX_KIND};

/// Frame magic: the bytes `G`, `L` read as a little-endian u16.
pub const FRAME_MAGIC: u16 = u16::from_le_bytes(*b"GL");
/// Frame format version.
pub const FRAME_VERSION: u16 = 1;
/// Size of the frame header.
pub const FRAME_HEADER_SIZE: usize = 12;
/// Largest frame body: 64 MiB of data plus 4 KiB for the metadata.
pub const MAX_FRAME_BODY: u32 = 64 * 1024 * 1024 + 4096;
/// Largest metadata part.
pub const MAX_META_SIZE: u32 = 1024 * 1024;

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

/// Decodes one frame body of `kind`.
pub fn decode_body(kind: u16, body: &[u8]) -> Result<SessionMessage, SessionError> {
    if kind == 0 || kind > MAX_KIND {
        return Err(SessionError::UnknownKind(kind));
    }
    let (len_bytes, rest) = body
        .split_first_chunk::<4>()
        .ok_or_else(|| SessionError::BadBody("body shorter than 4 bytes".into()))?;
    let meta_len = u32::from_le_bytes(*len_bytes);
    if meta_len > MAX_META_SIZE || meta_len as usize > rest.len() {
        return Err(SessionError::BadBody(format!(
            "metadata length {meta_len} out of bounds"
        )));
    }
    let (meta, data) = rest.split_at(meta_len as usize);
    let mut message = decode_meta(kind, meta, data.is_empty())?;
    if SessionMessage::kind_has_data(kind) {
        message.set_data(data.to_vec());
    }
    Ok(message)
}

/// [`decode_body`] taking the body by value: the data part is handed out in the body's own allocation (the
/// metadata prefix is removed in place) instead of being copied — what [`FrameDecoder`] uses.
pub fn decode_body_owned(kind: u16, mut body: Vec<u8>) -> Result<SessionMessage, SessionError> {
    if kind == 0 || kind > MAX_KIND {
        return Err(SessionError::UnknownKind(kind));
    }
    let Some((len_bytes, rest)) = body.split_first_chunk::<4>() else {
        return Err(SessionError::BadBody("body shorter than 4 bytes".into()));
    };
    let meta_len = u32::from_le_bytes(*len_bytes);
    if meta_len > MAX_META_SIZE || meta_len as usize > rest.len() {
        return Err(SessionError::BadBody(format!(
            "metadata length {meta_len} out of bounds"
        )));
    }
    let (meta, data) = rest.split_at(meta_len as usize);
    let mut message = decode_meta(kind, meta, data.is_empty())?;
    if SessionMessage::kind_has_data(kind) {
        body.drain(..4 + meta_len as usize);
        message.set_data(body);
    }
    Ok(message)
}

/// The message described by the JSON metadata of a frame of `kind`; `no_data`: the frame carries no data part.
pub(crate) fn decode_meta(
    kind: u16,
    meta: &[u8],
    no_data: bool,
) -> Result<SessionMessage, SessionError> {
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

#[cfg(test)]
mod owned_tests {
    use super::*;
    use crate::session::FrameDecoder;
    use crate::vdagent::{ClipboardType, Selection};

    fn clip(len: usize) -> SessionMessage {
        SessionMessage::ClipboardData {
            selection: Selection::Clipboard,
            data_type: ClipboardType::Utf8Text,
            data: (0..len).map(|i| (i % 251) as u8).collect(),
        }
    }

    #[test]
    fn owned_and_borrowed_decoding_agree() {
        for msg in [clip(0), clip(5000), SessionMessage::ClientConnected] {
            let bytes = encode(&msg).unwrap();
            let kind = msg.kind();
            let body = bytes[FRAME_HEADER_SIZE..].to_vec();
            let mut joined = encode_head(&msg).unwrap();
            joined.extend_from_slice(msg.data());
            assert_eq!(joined, bytes, "head + data = the frame");
            assert_eq!(decode_body(kind, &body).unwrap(), msg);
            assert_eq!(decode_body_owned(kind, body).unwrap(), msg);
        }
        // Errors agree too: short body, meta out of bounds, data on a kind without data, unknown kind.
        let connected = SessionMessage::ClientConnected;
        let mut with_data = encode(&connected).unwrap()[FRAME_HEADER_SIZE..].to_vec();
        with_data.push(1);
        for (kind, body) in [
            (connected.kind(), vec![1, 0]),
            (connected.kind(), vec![200, 0, 0, 0, b'{']),
            (connected.kind(), with_data),
            (0, vec![0; 8]),
        ] {
            let a = decode_body(kind, &body).unwrap_err().to_string();
            let b = decode_body_owned(kind, body).unwrap_err().to_string();
            assert_eq!(a, b);
        }
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

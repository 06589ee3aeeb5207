//! Encoding messages into chunked stream bytes.
//!
//! Towards the guest every chunk body is ≤ 2048 bytes (`VD_AGENT_MAX_DATA_SIZE`, what spice-server delivers);
//! from the guest spice-vdagentd sends each message as one chunk of any size. Both are offered as [`ChunkMode`].
//!
//! Which encoder when:
//!
//! | You have | Use | Used by |
//! |---|---|---|
//! | a typed [`Message`] | [`encode_message`] | everyone, by default |
//! | a raw type and any payload, well-formed or not | [`encode_raw_message`] | hostile-input tests, debug tools |
//! | the same, appended to a buffer you reuse | [`encode_raw_message_into`] | the host batching SPICE messages |
//! | fixed fields now, bulk data later (read straight into the frames) | [`encode_raw_message_holes`] | the host's `send-file` |
//! | a CLIPBOARD head to send before relaying its data as it arrives | [`encode_single_head`] | guestlinkd relaying a session's clipboard |

use std::ops::Range;

use super::error::VdagentError;
use super::header::{
    ChunkHeader, MessageHeader, Port, CHUNK_HEADER_SIZE, MAX_CHUNK_DATA_SIZE, MESSAGE_HEADER_SIZE,
};
use super::message::{Message, WireFormat};
use super::wire::len_u32;

/// How a message is cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkMode {
    /// Chunk bodies of at most `VD_AGENT_MAX_DATA_SIZE` (2048) bytes: host → guest.
    Split,
    /// The whole message in one chunk: guest → host, like spice-vdagentd.
    Single,
}

/// Encodes `message` for `port`; returns the stream bytes (all chunks, headers included).
pub fn encode_message(
    port: Port,
    message: &Message,
    wire: WireFormat,
    mode: ChunkMode,
) -> Result<Vec<u8>, VdagentError> {
    let payload = message.encode_payload(wire)?;
    encode_raw_message(port, message.message_type().as_u32(), &payload, mode)
}

/// Encodes a message of raw type `msg_type` with an arbitrary payload (protocol 1, opaque 0), e.g. to send
/// deliberately malformed messages from a debug tool.
pub fn encode_raw_message(
    port: Port,
    msg_type: u32,
    payload: &[u8],
    mode: ChunkMode,
) -> Result<Vec<u8>, VdagentError> {
    let mut out = Vec::new();
    encode_raw_message_into(&mut out, port, msg_type, payload, mode)?;
    Ok(out)
}

/// [`encode_raw_message`] appending to `out`, for a sender that batches many messages into one write.
pub fn encode_raw_message_into(
    out: &mut Vec<u8>,
    port: Port,
    msg_type: u32,
    payload: &[u8],
    mode: ChunkMode,
) -> Result<(), VdagentError> {
    let header = MessageHeader::new(
        msg_type,
        len_u32(payload.len(), "payload larger than 4 GiB")?,
    );
    frame_into(out, port, &header.encode(), payload, mode)
}

/// [`encode_raw_message_into`] for a message whose payload is `fixed` followed by `data_len` bytes that are not
/// at hand yet: the data's places in `out` are zero-filled and their ranges pushed to `holes`, in order. Writing
/// the data into the holes gives exactly `encode_raw_message_into` of `fixed` + data, so a sender can read file
/// data straight into its frames (`preadv`) instead of copying it there, and reuse the frames for every batch
/// of the same shape.
pub fn encode_raw_message_holes(
    out: &mut Vec<u8>,
    port: Port,
    msg_type: u32,
    fixed: &[u8],
    data_len: usize,
    mode: ChunkMode,
    holes: &mut Vec<Range<usize>>,
) -> Result<(), VdagentError> {
    let header = MessageHeader::new(
        msg_type,
        len_u32(fixed.len() + data_len, "payload larger than 4 GiB")?,
    );
    frame_parts(
        out,
        port,
        &header.encode(),
        fixed,
        data_len,
        mode,
        |out, n| {
            let at = out.len();
            out.resize(at + n, 0);
            holes.push(at..at + n);
        },
    )
}

/// Appends message bytes (`header` then `payload`) wrapped in chunk headers to `out`.
fn frame_into(
    out: &mut Vec<u8>,
    port: Port,
    header: &[u8; MESSAGE_HEADER_SIZE],
    payload: &[u8],
    mode: ChunkMode,
) -> Result<(), VdagentError> {
    frame_parts(out, port, header, payload, 0, mode, |_, _| {})
}

/// Appends the chunks of a message whose bytes are `header`, then `known`, then `data_len` bytes that
/// `data(out, n)` appends (the next `n` of them, in order) — each chunk header followed by its share.
fn frame_parts(
    out: &mut Vec<u8>,
    port: Port,
    header: &[u8; MESSAGE_HEADER_SIZE],
    known: &[u8],
    data_len: usize,
    mode: ChunkMode,
    mut data: impl FnMut(&mut Vec<u8>, usize),
) -> Result<(), VdagentError> {
    let known_end = MESSAGE_HEADER_SIZE + known.len();
    let total = known_end + data_len;
    let max = match mode {
        ChunkMode::Split => MAX_CHUNK_DATA_SIZE,
        ChunkMode::Single => {
            len_u32(total, "message larger than 4 GiB")?;
            total
        }
    };
    let chunks = total.div_ceil(max.max(1));
    out.reserve(known_end + chunks * CHUNK_HEADER_SIZE);
    let mut offset = 0;
    while offset < total {
        let n = (total - offset).min(max);
        // n ≤ total, which was checked to fit in u32 (Single) or is ≤ 2048 (Split).
        out.extend_from_slice(
            &ChunkHeader {
                port: port.as_u32(),
                size: n as u32,
            }
            .encode(),
        );
        let end = offset + n;
        if offset < MESSAGE_HEADER_SIZE {
            out.extend_from_slice(&header[offset..end.min(MESSAGE_HEADER_SIZE)]);
        }
        if end > MESSAGE_HEADER_SIZE && offset < known_end {
            out.extend_from_slice(
                &known[offset.max(MESSAGE_HEADER_SIZE) - MESSAGE_HEADER_SIZE
                    ..end.min(known_end) - MESSAGE_HEADER_SIZE],
            );
        }
        if end > known_end {
            data(out, end - offset.max(known_end));
        }
        offset = end;
    }
    Ok(())
}

/// The head of a single-chunk message whose data part is not at hand yet, for a relay that writes the head and
/// then streams `data_len` data bytes behind it: the chunk and message headers count `data_len`, and the
/// payload's fixed fields come from `message` (a CLIPBOARD's own data is ignored). Only CLIPBOARD carries a
/// data part; for other messages `data_len` must be 0.
pub fn encode_single_head(
    port: Port,
    message: &Message,
    data_len: usize,
    wire: WireFormat,
) -> Result<Vec<u8>, VdagentError> {
    let fixed = match message {
        Message::Clipboard {
            selection,
            data_type,
            ..
        } => Message::Clipboard {
            selection: *selection,
            data_type: *data_type,
            data: Vec::new(),
        }
        .encode_payload(wire)?,
        _ if data_len > 0 => {
            return Err(VdagentError::Encode(
                "only CLIPBOARD carries a streamed data part",
            ))
        }
        _ => message.encode_payload(wire)?,
    };
    let payload_len = fixed.len() + data_len;
    let header = MessageHeader::new(
        message.message_type().as_u32(),
        len_u32(payload_len, "payload larger than 4 GiB")?,
    );
    let chunk = ChunkHeader {
        port: port.as_u32(),
        size: len_u32(
            MESSAGE_HEADER_SIZE + payload_len,
            "message larger than 4 GiB",
        )?,
    };
    let mut head = Vec::with_capacity(CHUNK_HEADER_SIZE + MESSAGE_HEADER_SIZE + fixed.len());
    head.extend_from_slice(&chunk.encode());
    head.extend_from_slice(&header.encode());
    head.extend_from_slice(&fixed);
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdagent::{ClipboardType, ReplyResult, Selection};

    /// Test oracle for [`encode_single_head`]: [`encode_message`] in [`ChunkMode::Single`], split into the bytes
    /// before the data (chunk header, message header and the payload's fixed fields) and the data, borrowed from
    /// `message`. `head` followed by `data` is exactly `encode_message(port, message, wire,
    /// ChunkMode::Single)`. Only CLIPBOARD carries its data this way; for other messages `data` is empty.
    fn encode_single_parts(
        port: Port,
        message: &Message,
        wire: WireFormat,
    ) -> Result<(Vec<u8>, &[u8]), VdagentError> {
        let data: &[u8] = match message {
            Message::Clipboard { data, .. } => data,
            _ => &[],
        };
        Ok((encode_single_head(port, message, data.len(), wire)?, data))
    }

    #[test]
    fn single_parts_concatenate_to_the_single_chunk_encoding() {
        let messages = [
            Message::Clipboard {
                selection: Selection::Primary,
                data_type: ClipboardType::Utf8Text,
                data: (0..70_000u32).map(|i| (i % 253) as u8).collect(),
            },
            Message::Clipboard {
                selection: Selection::Clipboard,
                data_type: ClipboardType::ImagePng,
                data: Vec::new(),
            },
            Message::Reply {
                message_type: 2,
                result: ReplyResult::Success,
            },
            Message::ClientDisconnected,
        ];
        for wire in WireFormat::ALL {
            for (i, m) in messages.iter().enumerate() {
                let (head, data) = encode_single_parts(Port::Client, m, wire).unwrap();
                let mut joined = head.clone();
                joined.extend_from_slice(data);
                let whole = encode_message(Port::Client, m, wire, ChunkMode::Single).unwrap();
                assert_eq!(joined, whole, "message {i}, {wire:?}");
                if i == 0 {
                    assert_eq!(data.len(), 70_000, "the clipboard data is not in the head");
                }
            }
        }
    }

    #[test]
    fn filled_holes_equal_the_whole_message() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i % 249) as u8).collect();
        let fixed = [7u8; 12];
        // Empty data, data that ends inside the first chunk, on a chunk edge, and across many chunks.
        for len in [0, 1, 2000, 2016, 2017, 4096, 65_536, 70_000] {
            for mode in [ChunkMode::Split, ChunkMode::Single] {
                let mut payload = fixed.to_vec();
                payload.extend_from_slice(&data[..len]);
                let mut whole = b"before".to_vec();
                encode_raw_message_into(&mut whole, Port::Client, 5, &payload, mode).unwrap();
                let mut framed = b"before".to_vec();
                let mut holes = Vec::new();
                encode_raw_message_holes(
                    &mut framed,
                    Port::Client,
                    5,
                    &fixed,
                    len,
                    mode,
                    &mut holes,
                )
                .unwrap();
                assert_eq!(framed.len(), whole.len(), "{len} {mode:?}");
                assert_eq!(holes.iter().map(|h| h.len()).sum::<usize>(), len);
                let mut next = 0;
                for h in &holes {
                    assert!(h.start >= 6 && framed[h.clone()].iter().all(|b| *b == 0));
                    framed[h.clone()].copy_from_slice(&data[next..next + h.len()]);
                    next += h.len();
                }
                assert_eq!(framed, whole, "{len} {mode:?}");
            }
        }
    }

    #[test]
    fn a_streamed_head_equals_the_head_of_the_whole_message() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let whole = Message::Clipboard {
            selection: Selection::Clipboard,
            data_type: ClipboardType::ImagePng,
            data: data.clone(),
        };
        let empty = Message::Clipboard {
            selection: Selection::Clipboard,
            data_type: ClipboardType::ImagePng,
            data: Vec::new(),
        };
        for wire in WireFormat::ALL {
            let (head, _) = encode_single_parts(Port::Client, &whole, wire).unwrap();
            let streamed = encode_single_head(Port::Client, &empty, data.len(), wire).unwrap();
            assert_eq!(streamed, head, "{wire:?}");
        }
        assert!(encode_single_head(
            Port::Client,
            &Message::ClientDisconnected,
            1,
            WireFormat::default()
        )
        .is_err());
    }
}

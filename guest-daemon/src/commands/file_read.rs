//! guest-file-read's data path: one read into a buffer sized from the file, and a reply encoder that base64-encodes
//! straight into the outgoing byte stream.
//!
//! qemu-ga peaks at ≈ 2.7 × count (raw buffer + base64 string + JSON copy). Here the raw bytes are the only large
//! allocation when the core writes the reply as a streamed reply ([`FileRead::reply_parts`] +
//! [`FileRead::b64_chunks`], ≈ 1 × count); [`FileRead::into_value`] (used for small answers, inlined whole) is
//! raw→base64 once, then the encoder's copy.

use std::fs::File;
use std::io::{ErrorKind, Read};

use base64::Engine;
use guestlink_protocol::qga::{encode_reply, Reply};
use serde_json::{json, Value};

use super::error::{CommandError, CommandResult};

/// The answer of guest-file-read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// Bytes read.
    pub count: i64,
    /// The bytes (base64-encoded only when the reply is written).
    pub data: Vec<u8>,
    /// Whether the read hit end of file.
    pub eof: bool,
}

/// Answers with at most this many bytes are encoded whole by [`FileRead::reply_parts`].
pub const INLINE_REPLY: usize = 48 * 1024;

/// Most base64 text per piece of a streamed answer. Small enough that the encoder's output buffer stays in the
/// CPU cache until the socket write copies it out (and comes from the heap, not a fresh zeroed mapping): with 4 MiB
/// pieces, zeroing, UTF-8-checking and copying the cold buffer cost about a fifth of the agent's CPU per 48 MiB
/// read (docs/BENCHMARKS.md, "Where guest-file-read's CPU goes").
pub const B64_PIECE: usize = 64 * 1024;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

impl FileRead {
    /// The base64 text of the data.
    #[cfg(test)]
    pub fn b64(&self) -> String {
        B64.encode(&self.data)
    }

    /// As a JSON value with the QAPI member names (`buf-b64` is `""` at EOF, like qemu-ga's empty string).
    pub fn into_value(self) -> Value {
        let b64 = B64.encode(&self.data);
        drop(self.data);
        json!({ "count": self.count, "buf-b64": b64, "eof": self.eof })
    }

    /// The complete reply line split around the base64 text: write `prefix`, then every piece of
    /// [`FileRead::b64_chunks`], then `suffix`. The framing (member order, `id`, 0xFF) is exactly what
    /// `encode_reply` produces for the same reply.
    ///
    /// Small answers (≤ [`INLINE_REPLY`] bytes of data) come back whole in `prefix` and then `b64_chunks` yields
    /// nothing, so a 4 KiB read costs one write instead of three.
    pub fn reply_parts(&self, id: Option<Value>, delimited: bool) -> (Vec<u8>, Vec<u8>) {
        if self.data.len() <= INLINE_REPLY {
            let mut r = Reply::ok(id, self.clone().into_value());
            r.delimited = delimited;
            let mut all = Vec::new();
            encode_reply(&r, &mut all);
            return (all, Vec::new());
        }
        const MARK: &str = "\u{1}guestlink-b64\u{1}";
        let mut reply = Reply::ok(
            id,
            json!({ "count": self.count, "buf-b64": MARK, "eof": self.eof }),
        );
        reply.delimited = delimited;
        let mut out = Vec::new();
        encode_reply(&reply, &mut out);
        // The marker is escaped by the encoder; find its escaped form.
        let escaped = b"\\u0001guestlink-b64\\u0001";
        match out.windows(escaped.len()).position(|w| w == escaped) {
            Some(i) => {
                let suffix = out.split_off(i + escaped.len());
                out.truncate(i);
                (out, suffix)
            }
            None => {
                // Cannot happen with the encoder's escaping; fall back to the plain (copying) encoding.
                let mut r = Reply::ok(reply.id.take(), self.clone().into_value());
                r.delimited = delimited;
                let mut all = Vec::new();
                encode_reply(&r, &mut all);
                (all, Vec::new())
            }
        }
    }

    /// The base64 text in pieces of about `chunk` bytes, at most [`B64_PIECE`] (a multiple of 4, except the last);
    /// nothing when [`FileRead::reply_parts`] already inlined it (small answers).
    pub fn b64_chunks(&self, chunk: usize) -> impl Iterator<Item = String> + '_ {
        let raw = (chunk.min(B64_PIECE) / 4).max(1) * 3;
        let data: &[u8] = if self.data.len() <= INLINE_REPLY {
            &[]
        } else {
            &self.data
        };
        data.chunks(raw).map(|c| B64.encode(c))
    }
}

/// The daemon writes guest-file-read's reply in pieces: [`FileRead::reply_parts`]'s prefix, the base64 pieces of at
/// most [`B64_PIECE`] bytes, the suffix.
impl crate::server::output::StreamedReply for FileRead {
    fn reply_parts(&self, id: Option<Value>, delimited: bool) -> (Vec<u8>, Vec<u8>) {
        FileRead::reply_parts(self, id, delimited)
    }

    fn chunks(&self) -> Box<dyn Iterator<Item = String> + '_> {
        Box::new(self.b64_chunks(B64_PIECE))
    }
}

const SMALL: usize = 64 * 1024;

/// Reads up to `count` bytes (until `count` or EOF; a non-blocking source returns what it has).
pub fn read_raw(file: &mut File, count: usize) -> CommandResult<FileRead> {
    // Size large buffers from what is left in a regular file, so small files don't reserve `count`; small counts
    // skip the two extra syscalls.
    let mut want = if count <= SMALL {
        count
    } else {
        match (file.metadata(), std::io::Seek::stream_position(file)) {
            (Ok(m), Ok(pos)) if m.is_file() => count.min(m.len().saturating_sub(pos) as usize + 1),
            _ => SMALL,
        }
    };
    let mut data = vec![0u8; want];
    let mut total = 0usize;
    let mut eof = false;
    while total < count {
        if total == data.len() {
            // The file grew or is not a regular file: grow up to `count`.
            want = (want * 2).max(4096).min(count);
            data.resize(want, 0);
        }
        match file.read(&mut data[total..]) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock && total > 0 => break,
            Err(e) => return Err(CommandError::io("failed to read file", &e)),
        }
    }
    data.truncate(total);
    Ok(FileRead {
        count: total as i64,
        data,
        eof,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fr(data: &[u8], eof: bool) -> FileRead {
        FileRead {
            count: data.len() as i64,
            data: data.to_vec(),
            eof,
        }
    }

    #[test]
    fn streamed_reply_equals_encoded_reply() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        for (id, delimited) in [
            (None, false),
            (Some(json!("__qmp#00001")), false),
            (Some(json!(7)), true),
        ] {
            let r = fr(&data, true);
            let (pre, suf) = r.reply_parts(id.clone(), delimited);
            let mut streamed = pre;
            let mut n = 0;
            for c in r.b64_chunks(4096) {
                assert!(c.len() <= 4096);
                streamed.extend_from_slice(c.as_bytes());
                n += 1;
            }
            assert!(n > 1, "large answers are streamed");
            streamed.extend_from_slice(&suf);
            let mut expect = Reply::ok(id, r.clone().into_value());
            expect.delimited = delimited;
            let mut out = Vec::new();
            encode_reply(&expect, &mut out);
            assert_eq!(streamed, out);
        }
        // small answers: whole line in the prefix, no chunks
        let small = fr(b"hello", false);
        let (pre, suf) = small.reply_parts(Some(json!(1)), false);
        assert_eq!(small.b64_chunks(4096).count(), 0);
        assert!(suf.is_empty());
        let mut expect = Vec::new();
        encode_reply(
            &Reply::ok(Some(json!(1)), small.clone().into_value()),
            &mut expect,
        );
        assert_eq!(pre, expect);
        let empty = fr(b"", true);
        assert_eq!(empty.b64_chunks(4096).count(), 0);
        // A large requested piece size is capped, and the capped pieces still concatenate to the whole text.
        let big = fr(&data, true);
        let pieces: Vec<String> = big.b64_chunks(3 << 20).collect();
        assert!(pieces.len() > 1 && pieces.iter().all(|p| p.len() <= B64_PIECE));
        assert_eq!(pieces.concat(), B64.encode(&data));
        assert_eq!(
            empty.into_value(),
            json!({"count": 0, "buf-b64": "", "eof": true})
        );
    }
}

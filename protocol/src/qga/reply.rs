//! Replies: QEMU's exact encoder (guest side) and a bounded, 0xFF-aware line decoder (host side).
//!
//! The encoder follows `qobject/qjson.c` + `json-writer.c` (`qobject_to_json`, not pretty): `": "` and `", "`
//! separators, object members in QEMU's QDict hash order (see [`crate::qga::qdict`]), strings escaped with
//! upper-case `\uXXXX` for control characters, DEL and everything non-ASCII (surrogate pairs above the BMP),
//! noncharacters replaced by `\uFFFD` (QEMU's modified-UTF-8 decoder rejects them), doubles printed with
//! `%.17g`, then `\n`.

use serde_json::{Map, Number, Value};

use crate::qga::error::QgaError;
use crate::qga::qdict::{bucket, qdict_order};
use crate::qga::stream::utf8::is_valid_codepoint;
use crate::qga::stream::{JsonStreamer, Limits, StreamEvent};

/// The 0xFF sentinel that precedes a `guest-sync-delimited` reply.
pub const DELIMITER: u8 = 0xFF;

/// Default cap on one reply line in [`ReplyDecoder`] (64 MiB, like qemu-ga's request limit).
pub const DEFAULT_MAX_REPLY: usize = 64 * 1024 * 1024;

/// One reply: `{"return": ...}` or `{"error": {...}}`, plus the echoed id.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The request's id, echoed verbatim; `None` when the request had none (and for parse errors).
    pub id: Option<Value>,
    /// `Ok(return value)` or `Err(error)`.
    pub body: Result<Value, QgaError>,
    /// Whether the reply is (encoder) or was (decoder) preceded by a 0xFF byte.
    pub delimited: bool,
}

impl Reply {
    /// A success reply.
    pub fn ok(id: Option<Value>, value: Value) -> Self {
        Reply {
            id,
            body: Ok(value),
            delimited: false,
        }
    }

    /// An error reply.
    pub fn err(id: Option<Value>, error: QgaError) -> Self {
        Reply {
            id,
            body: Err(error),
            delimited: false,
        }
    }
}

/// Appends the wire form of `reply` to `out`: optional 0xFF, the JSON object, `\n`.
///
/// Members come in QEMU's QDict order, so the bytes equal qemu-ga's: `{"return": {}, "id": 7}` but
/// `{"id": 7, "error": {"class": "GenericError", "desc": "..."}}`.
pub fn encode_reply(reply: &Reply, out: &mut Vec<u8>) {
    if reply.delimited {
        out.push(DELIMITER);
    }
    let body_key: &[u8] = if reply.body.is_ok() {
        b"return"
    } else {
        b"error"
    };
    let write_body = |out: &mut Vec<u8>| match &reply.body {
        Ok(v) => write_value(v, out),
        Err(e) => {
            out.extend_from_slice(b"{\"class\": ");
            write_str(e.class.as_str(), out);
            out.extend_from_slice(b", \"desc\": ");
            write_str(&e.desc, out);
            out.push(b'}');
        }
    };
    out.push(b'{');
    let id_first = reply.id.is_some()
        && bucket("id")
            < bucket(if reply.body.is_ok() {
                "return"
            } else {
                "error"
            });
    if let (true, Some(id)) = (id_first, &reply.id) {
        out.extend_from_slice(b"\"id\": ");
        write_value(id, out);
        out.extend_from_slice(b", ");
    }
    out.push(b'"');
    out.extend_from_slice(body_key);
    out.extend_from_slice(b"\": ");
    write_body(out);
    if let (false, Some(id)) = (id_first, &reply.id) {
        out.extend_from_slice(b", \"id\": ");
        write_value(id, out);
    }
    out.extend_from_slice(b"}\n");
}

/// Serializes `value` the way QEMU's `qobject_to_json()` does (compact but with `": "` and `", "`).
///
/// The output is pure ASCII: everything else is escaped.
pub fn to_qemu_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_value(value, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn write_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(x) => write_str(x, out),
        Value::Array(a) => {
            out.push(b'[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                write_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(m) => write_object(m, out),
    }
}

fn write_object(m: &Map<String, Value>, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (k, v)) in qdict_order(m).into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        write_str(k, out);
        out.extend_from_slice(b": ");
        write_value(v, out);
    }
    out.push(b'}');
}

fn write_number(n: &Number, out: &mut Vec<u8>) {
    let text = if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        format_g17(n.as_f64().unwrap_or(0.0))
    };
    out.extend_from_slice(text.as_bytes());
}

/// C's `printf("%.17g", f)` (what QEMU's JSON writer uses for doubles).
pub fn format_g17(f: f64) -> String {
    if f.is_nan() {
        return if f.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if f.is_infinite() {
        return if f < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    const P: i32 = 17;
    // 17 significant digits in scientific form; Rust rounds exactly like glibc (correctly rounded).
    let sig = (P - 1) as usize;
    let sci = format!("{f:.sig$e}");
    let (mant, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    if !(-4..P).contains(&exp) {
        let mant = trim_fraction(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (P - 1 - exp).max(0) as usize;
        let fixed = format!("{f:.decimals$}");
        trim_fraction(&fixed).to_owned()
    }
}

fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn hex4(v: u32, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(b"\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX[((v >> shift) & 0xF) as usize]);
    }
}

/// QEMU's `quoted_str()`: runs of printable ASCII are copied, everything else is escaped.
fn write_str(x: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let mut start = 0;
    for (i, c) in x.char_indices() {
        let cp = c as u32;
        if (0x20..0x7F).contains(&cp) && c != '"' && c != '\\' {
            continue;
        }
        out.extend_from_slice(&x.as_bytes()[start..i]);
        start = i + c.len_utf8();
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            _ if !is_valid_codepoint(cp) => hex4(0xFFFD, out),
            _ if cp > 0xFFFF => {
                let v = cp - 0x10000;
                hex4(0xD800 + (v >> 10), out);
                hex4(0xDC00 + (v & 0x3FF), out);
            }
            _ => hex4(cp, out),
        }
    }
    out.extend_from_slice(&x.as_bytes()[start..]);
    out.push(b'"');
}

/// What the host-side [`ReplyDecoder`] found in the agent's output.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyEvent {
    /// A well-formed reply line.
    Reply(Reply),
    /// A line that is not a reply (not JSON, or JSON without `return`/`error`); `line` is a lossy, shortened copy.
    Garbage {
        /// The start of the offending line (at most 256 bytes, lossily decoded).
        line: String,
        /// Why it was rejected.
        error: String,
    },
    /// A line longer than the decoder's limit; its bytes were discarded up to the next `\n` or 0xFF.
    TooLarge {
        /// The limit that was exceeded.
        limit: usize,
    },
}

/// Host-side decoder of the agent's reply stream: newline-framed JSON replies, 0xFF-aware, bounded.
///
/// A 0xFF byte always drops the partial line before it (it marks the start of a `guest-sync-delimited` reply);
/// after [`ReplyDecoder::expect_delimiter`] everything up to the next 0xFF is discarded.
#[derive(Debug, Clone)]
pub struct ReplyDecoder {
    buf: Vec<u8>,
    max_reply: usize,
    waiting_for_delimiter: bool,
    skipping_oversized: bool,
    next_delimited: bool,
}

impl Default for ReplyDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplyDecoder {
    /// A decoder with the default 64 MiB line limit.
    pub fn new() -> Self {
        Self::with_max_reply(DEFAULT_MAX_REPLY)
    }

    /// A decoder that refuses reply lines longer than `max_reply` bytes.
    pub fn with_max_reply(max_reply: usize) -> Self {
        ReplyDecoder {
            buf: Vec::new(),
            max_reply: max_reply.max(1),
            waiting_for_delimiter: false,
            skipping_oversized: false,
            next_delimited: false,
        }
    }

    /// Discards all input (and any buffered partial line) until the next 0xFF byte.
    pub fn expect_delimiter(&mut self) {
        self.waiting_for_delimiter = true;
        self.buf.clear();
        self.skipping_oversized = false;
        self.next_delimited = false;
    }

    /// Whether the decoder is still discarding input while waiting for a 0xFF.
    pub fn is_waiting_for_delimiter(&self) -> bool {
        self.waiting_for_delimiter
    }

    /// Bytes of the current partial line held in memory.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Feeds bytes read from the agent and returns the complete events they finish.
    pub fn feed(&mut self, mut input: &[u8]) -> Vec<ReplyEvent> {
        let mut events = Vec::new();
        while !input.is_empty() {
            if self.waiting_for_delimiter {
                match input.iter().position(|&b| b == DELIMITER) {
                    Some(p) => {
                        self.waiting_for_delimiter = false;
                        self.next_delimited = true;
                        input = &input[p + 1..];
                    }
                    None => return events,
                }
                continue;
            }
            let stop = input.iter().position(|&b| b == b'\n' || b == DELIMITER);
            let (chunk, terminator) = match stop {
                Some(p) => (&input[..p], Some(input[p])),
                None => (input, None),
            };
            if !self.skipping_oversized {
                if self.buf.len() + chunk.len() > self.max_reply {
                    self.buf = Vec::new();
                    self.skipping_oversized = true;
                    events.push(ReplyEvent::TooLarge {
                        limit: self.max_reply,
                    });
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            match terminator {
                None => return events,
                Some(DELIMITER) => {
                    // A sentinel: whatever came before it on this line is stale.
                    self.buf.clear();
                    self.skipping_oversized = false;
                    self.next_delimited = true;
                }
                Some(_) => {
                    if !self.skipping_oversized {
                        let line = std::mem::take(&mut self.buf);
                        if let Some(ev) = self.decode_line(&line) {
                            events.push(ev);
                        }
                    }
                    self.skipping_oversized = false;
                }
            }
            input = &input[chunk.len() + 1..];
        }
        events
    }

    fn decode_line(&mut self, line: &[u8]) -> Option<ReplyEvent> {
        let trimmed = trim_ascii(line);
        if trimmed.is_empty() {
            return None;
        }
        let delimited = std::mem::take(&mut self.next_delimited);
        let garbage = |error: String| ReplyEvent::Garbage {
            line: String::from_utf8_lossy(&trimmed[..trimmed.len().min(256)]).into_owned(),
            error,
        };
        let value = match parse_line(trimmed, self.max_reply) {
            Ok(v) => v,
            Err(e) => return Some(garbage(e)),
        };
        match parse_reply_value(value) {
            Ok(mut reply) => {
                reply.delimited = delimited;
                Some(ReplyEvent::Reply(reply))
            }
            Err(e) => Some(garbage(e)),
        }
    }
}

/// Parses one reply line with the same (QEMU) JSON rules the agent side uses: exact doubles, i64/u64 integers.
fn parse_line(line: &[u8], max_reply: usize) -> Result<Value, String> {
    let mut streamer = JsonStreamer::new(Limits {
        max_token_bytes: max_reply.saturating_add(2),
        max_tokens: usize::MAX,
        max_depth: Limits::default().max_depth,
    });
    let mut events = streamer.feed(line);
    events.extend(streamer.feed(b"\n"));
    if !streamer.is_idle() {
        return Err("incomplete JSON value".to_owned());
    }
    let mut events = events.into_iter();
    match (events.next(), events.next()) {
        (Some(StreamEvent::Value(v)), None) => Ok(v),
        (Some(StreamEvent::Error(e)), _)
        | (Some(StreamEvent::Value(_)), Some(StreamEvent::Error(e))) => Err(e.desc),
        (Some(StreamEvent::Value(_)), Some(StreamEvent::Value(_))) => {
            Err("more than one JSON value on a line".to_owned())
        }
        (None, _) => Err("no JSON value".to_owned()),
    }
}

fn trim_ascii(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// Interprets one decoded JSON value as a reply (`return` or `error`, optional `id`).
pub fn parse_reply_value(value: Value) -> Result<Reply, String> {
    let Value::Object(mut m) = value else {
        return Err("reply is not a JSON object".to_owned());
    };
    let id = m.remove("id");
    if let Some(ret) = m.remove("return") {
        return Ok(Reply {
            id,
            body: Ok(ret),
            delimited: false,
        });
    }
    if let Some(err) = m.remove("error") {
        return match serde_json::from_value::<QgaError>(err) {
            Ok(e) => Ok(Reply {
                id,
                body: Err(e),
                delimited: false,
            }),
            Err(e) => Err(format!("malformed error object: {e}")),
        };
    }
    Err("reply has neither 'return' nor 'error'".to_owned())
}

#[cfg(test)]
mod tests;

//! The dispatch loop: bytes from the transport → [`JsonStreamer`] → [`Handle::handle`] → reply encoding →
//! transport. One request at a time, in order; each reply is written before the next request is handled.

pub mod core;
pub mod dispatch;
pub mod output;
pub mod policy;
#[cfg(test)]
mod tests;

use guestlink_protocol::qga::{encode_reply, JsonStreamer, Limits, Reply, StreamEvent};

use crate::transport::{Channel, TransportError};
use dispatch::{Handle, Response};
use output::Output;

/// qemu-ga's read size (`QGA_READ_COUNT_DEFAULT`).
const READ_CHUNK: usize = 4096;

/// The response to one stream event: a request's reply, or the id-less error of a parse error.
async fn respond<D: Handle>(d: &D, ev: StreamEvent) -> Option<Response> {
    match ev {
        StreamEvent::Value(v) => d.handle(v).await,
        StreamEvent::Error(e) => Some(Response {
            id: None,
            body: Err(e),
            delimited: false,
        }),
    }
}

/// The pieces of a response on the wire, in order (a value is moved out of `resp`). An ordinary reply is one piece; a streamed one (guest-file-read)
/// is its prefix, the base64 chunks, and its suffix, so the large body is never joined into one buffer.
fn pieces<'a>(
    resp: &'a mut Response,
    out: &'a mut Vec<u8>,
) -> Box<dyn Iterator<Item = Piece<'a>> + 'a> {
    let reply = match &mut resp.body {
        Ok(Output::Streamed(body)) => {
            let (prefix, suffix) = body.reply_parts(resp.id.clone(), resp.delimited);
            return Box::new(
                std::iter::once(Piece::Owned(prefix))
                    .chain(body.chunks().map(|c| Piece::Owned(c.into_bytes())))
                    .chain(std::iter::once(Piece::Owned(suffix))),
            );
        }
        Ok(Output::Value(v)) => Reply {
            id: resp.id.clone(),
            body: Ok(std::mem::take(v)),
            delimited: resp.delimited,
        },
        Err(e) => Reply {
            id: resp.id.clone(),
            body: Err(e.clone()),
            delimited: resp.delimited,
        },
    };
    out.clear();
    encode_reply(&reply, out);
    Box::new(std::iter::once(Piece::Borrowed(&out[..])))
}

/// One piece of a reply.
enum Piece<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Piece<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Borrowed(b) => b,
            Piece::Owned(v) => v,
        }
    }
}

/// Feed `bytes` to the streamer and collect the replies, in order (the testable heart of [`serve`]).
#[cfg(test)]
pub async fn process<D: Handle>(
    streamer: &mut JsonStreamer,
    d: &D,
    bytes: &[u8],
    out: &mut Vec<u8>,
) {
    let mut buf = Vec::new();
    for ev in streamer.feed(bytes) {
        if let Some(mut resp) = respond(d, ev).await {
            for p in pieces(&mut resp, &mut buf) {
                out.extend_from_slice(p.bytes());
            }
        }
    }
}

/// Serve requests on `channel` until it fails (a device that disappeared); returns that error.
pub async fn serve<D: Handle>(
    channel: &mut Channel,
    d: &D,
    streamer: &mut JsonStreamer,
) -> TransportError {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut out = Vec::new();
    loop {
        let n = match channel.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => return e,
        };
        for ev in streamer.feed(&buf[..n]) {
            let Some(mut resp) = respond(d, ev).await else {
                continue;
            };
            for p in pieces(&mut resp, &mut out) {
                if let Err(e) = channel.write_all(p.bytes()).await {
                    return e;
                }
            }
            // Don't keep a large buffer around after a big reply.
            if out.capacity() > 1 << 20 {
                out = Vec::new();
            }
        }
    }
}

/// A fresh streamer with QEMU's limits.
pub fn new_streamer() -> JsonStreamer {
    JsonStreamer::new(Limits::default())
}

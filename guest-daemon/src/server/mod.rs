//! The dispatch loop: bytes from the transport → [`JsonStreamer`] → [`Dispatcher::handle`] → [`encode_reply`] →
//! transport. One request at a time, in order; replies are written before the next request is parsed.

pub mod dispatch;
pub mod policy;
#[cfg(test)]
mod tests;

use guestlink_protocol::qga::{encode_reply, JsonStreamer, Limits, Reply, StreamEvent};

use crate::transport::{Channel, TransportError};
use dispatch::{Backend, Dispatcher};

/// qemu-ga's read size (`QGA_READ_COUNT_DEFAULT`).
const READ_CHUNK: usize = 4096;

/// Feed `bytes` to the streamer and collect the replies to send, in order (the testable heart of [`serve`]).
#[cfg(test)]
pub async fn process<B: Backend>(
    streamer: &mut JsonStreamer,
    d: &Dispatcher<B>,
    bytes: &[u8],
    out: &mut Vec<u8>,
) {
    for ev in streamer.feed(bytes) {
        let reply = match ev {
            StreamEvent::Value(v) => d.handle(v).await,
            StreamEvent::Error(e) => Some(Reply::err(None, e)),
        };
        if let Some(r) = reply {
            encode_reply(&r, out);
        }
    }
}

/// Serve requests on `channel` until it fails (a device that disappeared); returns that error.
pub async fn serve<B: Backend>(
    channel: &mut Channel,
    d: &Dispatcher<B>,
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
            let reply = match ev {
                StreamEvent::Value(v) => d.handle(v).await,
                StreamEvent::Error(e) => Some(Reply::err(None, e)),
            };
            if let Some(r) = reply {
                out.clear();
                encode_reply(&r, &mut out);
                if let Err(e) = channel.write_all(&out).await {
                    return e;
                }
                // Don't keep a 64 MiB buffer around after a big file read.
                if out.capacity() > 1 << 20 {
                    out = Vec::new();
                }
            }
        }
    }
}

/// A fresh streamer with QEMU's limits.
pub fn new_streamer() -> JsonStreamer {
    JsonStreamer::new(Limits::default())
}

//! Helpers shared by the protocol crate's QGA integration tests (`mod common;`): a minimal agent core that runs
//! bytes through streamer → request → command → reply encoder, as guestlinkd's dispatcher does.

use guestlink_protocol::qga::schema::{Command, GuestSyncArgs};
use guestlink_protocol::qga::{encode_reply, JsonStreamer, QgaError, Reply, Request, StreamEvent};
use serde_json::{json, Value};

/// Feeds `input` to `s` and returns the encoded replies. Sync, sync-delimited and ping are answered here;
/// `refuse` may reject a command by name before its arguments are parsed (like `-b`); `other` answers any other
/// parsed command.
pub fn mini_agent(
    s: &mut JsonStreamer,
    input: &[u8],
    refuse: impl Fn(&str) -> Option<QgaError>,
    other: impl Fn(Option<Value>, Command) -> Reply,
) -> Vec<u8> {
    let mut out = Vec::new();
    for ev in s.feed(input) {
        let reply = match ev {
            StreamEvent::Error(e) => Reply::err(None, e),
            StreamEvent::Value(v) => match Request::from_value(v) {
                Err(e) => Reply::err(e.id, e.error),
                Ok(req) => {
                    let id = req.id.clone();
                    if let Some(e) = refuse(&req.execute) {
                        Reply::err(id, e)
                    } else {
                        match req.command() {
                            Err(e) => Reply::err(id, e),
                            Ok(Command::GuestSyncDelimited(GuestSyncArgs { id: n })) => Reply {
                                id,
                                body: Ok(json!(n)),
                                delimited: true,
                            },
                            Ok(Command::GuestSync(GuestSyncArgs { id: n })) => {
                                Reply::ok(id, json!(n))
                            }
                            Ok(Command::GuestPing) => Reply::ok(id, json!({})),
                            Ok(c) => other(id, c),
                        }
                    }
                }
            },
        };
        encode_reply(&reply, &mut out);
    }
    out
}

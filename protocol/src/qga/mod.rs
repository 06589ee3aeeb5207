//! QEMU guest agent protocol (QGA): stream framing, requests, schema, replies.
//!
//! Data flow in the guest: bytes → [`stream::JsonStreamer`] → `Value` → [`request::Request::from_value`] →
//! [`schema::Command::parse`] → daemon → [`reply::encode_reply`]. On the host: [`request::encode_request`] →
//! bytes → [`reply::ReplyDecoder`].

pub mod error;
pub(crate) mod qdict;
pub mod reply;
pub mod request;
pub mod schema;
pub mod stream;

pub use error::{ErrorClass, QgaError};
pub use reply::{encode_reply, Reply, ReplyDecoder, ReplyEvent};
pub use request::{encode_request, Request, RequestError};
pub use schema::{Command, CommandSpec, COMMANDS};
pub use stream::{JsonStreamer, Limits, StreamEvent};

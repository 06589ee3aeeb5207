//! What a QGA command hands back to the dispatch core: [`Output`], a JSON value or a [`StreamedReply`] written to
//! the channel in pieces. This is the one output type of every handler, core or not.

use serde_json::Value;

/// A reply written in pieces so a large body (guest-file-read's base64) is never held as one JSON string.
/// Implemented by `commands::file_read::FileRead`.
pub trait StreamedReply: Send + Sync + std::fmt::Debug {
    /// The reply line split around the large member: `(prefix, suffix)`, framing (0xFF, `id`, member order)
    /// exactly as `encode_reply` would produce it.
    fn reply_parts(&self, id: Option<Value>, delimited: bool) -> (Vec<u8>, Vec<u8>);
    /// The large member's text, in order, already JSON-safe (base64).
    fn chunks(&self) -> Box<dyn Iterator<Item = String> + '_>;
}

/// What a command handler returns on success.
#[derive(Debug)]
pub enum Output {
    /// Any return value, encoded whole.
    Value(Value),
    /// A reply to be written in pieces (guest-file-read).
    Streamed(Box<dyn StreamedReply>),
}

impl From<Value> for Output {
    fn from(v: Value) -> Self {
        Output::Value(v)
    }
}

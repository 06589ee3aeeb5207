//! QEMU's JSON lexer + streamer + parser (`qobject/json-*.c`) as a sans-I/O state machine.
//!
//! Work in progress: the API is final, the implementation follows.

use serde_json::Value;

use crate::qga::error::QgaError;

/// The streamer's limits (QEMU's `MAX_TOKEN_SIZE`, `MAX_TOKEN_COUNT`, `MAX_NESTING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Total bytes of all tokens of one message (64 MiB).
    pub max_token_bytes: usize,
    /// Tokens per message (2 Mi).
    pub max_tokens: usize,
    /// Nesting depth (1024).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_token_bytes: 64 << 20,
            max_tokens: 2 << 20,
            max_depth: 1024,
        }
    }
}

/// What the streamer produced.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A complete top-level JSON value.
    Value(Value),
    /// A parse or limit error, to be answered with an id-less error reply.
    Error(QgaError),
}

/// Incremental JSON stream parser with QEMU's semantics.
#[derive(Debug, Clone)]
pub struct JsonStreamer {
    limits: Limits,
}

impl JsonStreamer {
    /// A fresh streamer.
    pub fn new(limits: Limits) -> Self {
        JsonStreamer { limits }
    }

    /// The configured limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Feeds bytes; returns the values and errors they complete, in order.
    pub fn feed(&mut self, input: &[u8]) -> Vec<StreamEvent> {
        let _ = input;
        Vec::new()
    }
}

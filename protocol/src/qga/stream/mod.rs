//! QEMU's JSON lexer + streamer + parser (`qobject/json-*.c`) as a sans-I/O state machine.
//!
//! [`JsonStreamer::feed`] accepts bytes split at arbitrary points and returns every value or error they complete:
//! a top-level value is parsed as soon as its closing bracket arrives (a bare scalar once the next byte ends it).
//! Errors carry QEMU's texts and never stop the stream: a lexical error skips input up to the next structural or
//! control character, a 0xFF byte yields one "stray" error and resets everything, and the limits (64 MiB of token
//! bytes, 2 Mi tokens, nesting depth 1024 per message) discard the message so far. Memory stays bounded by the
//! limits whatever the input.

mod lexer;
mod parser;
pub mod utf8;

use serde_json::Value;

use self::lexer::{Lexer, TokenKind, TokenSink};
use self::parser::TokenStore;
use crate::qga::error::QgaError;

/// The streamer's limits (QEMU's `MAX_TOKEN_SIZE`, `MAX_TOKEN_COUNT`, `MAX_NESTING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Total bytes of all tokens of one message, and of any single token (64 MiB).
    pub max_token_bytes: usize,
    /// Tokens per message (2 Mi).
    pub max_tokens: usize,
    /// Nesting depth: open `{` plus `[` (1024).
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

/// The json-streamer part: counts brackets, enforces limits, collects a message's tokens and parses them.
#[derive(Debug, Clone)]
struct Streamer {
    limits: Limits,
    brace_count: i64,
    bracket_count: i64,
    tokens: TokenStore,
    token_size: usize,
    events: Vec<StreamEvent>,
}

impl Streamer {
    fn reset(&mut self) {
        self.brace_count = 0;
        self.bracket_count = 0;
        self.tokens.clear();
        self.token_size = 0;
    }

    fn emit_error(&mut self, error: QgaError) {
        self.reset();
        self.events.push(StreamEvent::Error(error));
    }
}

impl TokenSink for Streamer {
    fn token(&mut self, kind: TokenKind, text: &[u8]) {
        match kind {
            TokenKind::LCurly => self.brace_count += 1,
            TokenKind::RCurly => self.brace_count -= 1,
            TokenKind::LSquare => self.bracket_count += 1,
            TokenKind::RSquare => self.bracket_count -= 1,
            TokenKind::Error => {
                let text = utf8::c_string_lossy(text);
                self.emit_error(QgaError::json_parse(&format!("stray '{text}'")));
                return;
            }
            _ => {}
        }
        if self.token_size.saturating_add(text.len()).saturating_add(1)
            > self.limits.max_token_bytes
        {
            return self.emit_error(QgaError::json_token_size());
        }
        if self.tokens.len() + 1 > self.limits.max_tokens {
            return self.emit_error(QgaError::json_token_count());
        }
        if self.brace_count + self.bracket_count > self.limits.max_depth as i64 {
            return self.emit_error(QgaError::json_depth());
        }
        self.tokens.push(kind, text);
        self.token_size += text.len();
        if (self.brace_count > 0 || self.bracket_count > 0)
            && self.brace_count >= 0
            && self.bracket_count >= 0
        {
            return;
        }
        let result = parser::parse(&self.tokens);
        self.reset();
        self.events.push(match result {
            Ok(v) => StreamEvent::Value(v),
            Err(e) => StreamEvent::Error(e),
        });
    }
}

/// Incremental JSON stream parser with QEMU's semantics (see the module docs).
#[derive(Debug, Clone)]
pub struct JsonStreamer {
    lexer: Lexer,
    streamer: Streamer,
}

impl Default for JsonStreamer {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl JsonStreamer {
    /// A fresh streamer.
    pub fn new(limits: Limits) -> Self {
        JsonStreamer {
            lexer: Lexer::new(limits.max_token_bytes),
            streamer: Streamer {
                limits,
                brace_count: 0,
                bracket_count: 0,
                tokens: TokenStore::default(),
                token_size: 0,
                events: Vec::new(),
            },
        }
    }

    /// The configured limits.
    pub fn limits(&self) -> Limits {
        self.streamer.limits
    }

    /// Feeds bytes; returns the values and errors they complete, in order.
    pub fn feed(&mut self, input: &[u8]) -> Vec<StreamEvent> {
        self.lexer.feed(input, &mut self.streamer);
        std::mem::take(&mut self.streamer.events)
    }

    /// Forgets any partial input without producing an error (a fresh start, e.g. for a new host connection
    /// when the caller wants that; qemu-ga itself keeps the state across connections).
    pub fn reset(&mut self) {
        self.lexer = Lexer::new(self.streamer.limits.max_token_bytes);
        self.streamer.reset();
    }

    /// Bytes currently held for an unfinished message (lexer token plus stored tokens).
    pub fn buffered(&self) -> usize {
        self.lexer.pending() + self.streamer.token_size
    }

    /// Whether a message is partially received.
    pub fn is_idle(&self) -> bool {
        self.lexer.is_start() && self.lexer.pending() == 0 && self.streamer.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests;

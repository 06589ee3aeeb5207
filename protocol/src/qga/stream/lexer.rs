//! QEMU's JSON lexer (`qobject/json-lexer.c`): a byte-at-a-time DFA with lookahead and error recovery.
//!
//! Tokens are handed to a [`TokenSink`] as soon as they end. A lexical error emits an error token holding the
//! bytes seen so far (including the offending byte) and enters a recovery state that skips input until a
//! structural character (`{ } [ ] : ,`), an ASCII control character other than TAB, or byte 0xFE/0xFF.

/// Kinds of tokens the lexer emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `{`
    LCurly,
    /// `}`
    RCurly,
    /// `[`
    LSquare,
    /// `]`
    RSquare,
    /// `:`
    Colon,
    /// `,`
    Comma,
    /// An integer literal.
    Integer,
    /// A number with fraction or exponent.
    Float,
    /// `[a-z]+` (validated by the parser).
    Keyword,
    /// A single- or double-quoted string, quotes included (validated by the parser).
    String,
    /// A lexical error; the text is what was consumed of the bad token.
    Error,
    /// A token that outgrew the size limit while still incomplete.
    Oversized,
}

/// Receiver of lexer tokens.
pub trait TokenSink {
    /// Called for every complete token, error and oversized token.
    fn token(&mut self, kind: TokenKind, text: &[u8]);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Recovery,
    DqString,
    DqEscape,
    SqString,
    SqEscape,
    Zero,
    Sign,
    Digits,
    Mantissa,
    MantissaDigits,
    ExpE,
    ExpSign,
    ExpDigits,
    Keyword,
}

/// Result of one table lookup.
#[derive(Debug, Clone, Copy)]
enum Next {
    /// Consume the byte and go to the state.
    Go(State),
    /// Consume the byte; the token is complete.
    Emit(TokenKind),
    /// Don't consume the byte; the token ended before it.
    EmitBefore(TokenKind),
    /// Don't consume; leave recovery and re-read the byte in the start state.
    ResyncBefore,
    /// Consume the byte; lexical error.
    Error,
}

fn is_string_body(b: u8) -> bool {
    (0x20..=0xFD).contains(&b)
}

fn next(state: State, b: u8) -> Next {
    use Next::*;
    match state {
        State::Recovery => match b {
            b'\t' => Go(State::Recovery),
            0..=0x1F | 0xFE | 0xFF | b'[' | b']' | b'{' | b'}' | b':' | b',' => ResyncBefore,
            _ => Go(State::Recovery),
        },
        State::DqEscape => {
            if is_string_body(b) {
                Go(State::DqString)
            } else {
                Error
            }
        }
        State::DqString => match b {
            b'\\' => Go(State::DqEscape),
            b'"' => Emit(TokenKind::String),
            b if is_string_body(b) => Go(State::DqString),
            _ => Error,
        },
        State::SqEscape => {
            if is_string_body(b) {
                Go(State::SqString)
            } else {
                Error
            }
        }
        State::SqString => match b {
            b'\\' => Go(State::SqEscape),
            b'\'' => Emit(TokenKind::String),
            b if is_string_body(b) => Go(State::SqString),
            _ => Error,
        },
        State::Zero => match b {
            b'0'..=b'9' => Error,
            b'.' => Go(State::Mantissa),
            _ => EmitBefore(TokenKind::Integer),
        },
        State::ExpDigits => match b {
            b'0'..=b'9' => Go(State::ExpDigits),
            _ => EmitBefore(TokenKind::Float),
        },
        State::ExpSign => match b {
            b'0'..=b'9' => Go(State::ExpDigits),
            _ => Error,
        },
        State::ExpE => match b {
            b'-' | b'+' => Go(State::ExpSign),
            b'0'..=b'9' => Go(State::ExpDigits),
            _ => Error,
        },
        State::MantissaDigits => match b {
            b'0'..=b'9' => Go(State::MantissaDigits),
            b'e' | b'E' => Go(State::ExpE),
            _ => EmitBefore(TokenKind::Float),
        },
        State::Mantissa => match b {
            b'0'..=b'9' => Go(State::MantissaDigits),
            _ => Error,
        },
        State::Digits => match b {
            b'0'..=b'9' => Go(State::Digits),
            b'e' | b'E' => Go(State::ExpE),
            b'.' => Go(State::Mantissa),
            _ => EmitBefore(TokenKind::Integer),
        },
        State::Sign => match b {
            b'0' => Go(State::Zero),
            b'1'..=b'9' => Go(State::Digits),
            _ => Error,
        },
        State::Keyword => match b {
            b'a'..=b'z' => Go(State::Keyword),
            _ => EmitBefore(TokenKind::Keyword),
        },
        State::Start => match b {
            b'"' => Go(State::DqString),
            b'\'' => Go(State::SqString),
            b'0' => Go(State::Zero),
            b'1'..=b'9' => Go(State::Digits),
            b'-' => Go(State::Sign),
            b'{' => Emit(TokenKind::LCurly),
            b'}' => Emit(TokenKind::RCurly),
            b'[' => Emit(TokenKind::LSquare),
            b']' => Emit(TokenKind::RSquare),
            b',' => Emit(TokenKind::Comma),
            b':' => Emit(TokenKind::Colon),
            b'a'..=b'z' => Go(State::Keyword),
            b' ' | b'\t' | b'\r' | b'\n' => Go(State::Start),
            _ => Error,
        },
    }
}

/// The lexer state machine.
#[derive(Debug, Clone)]
pub struct Lexer {
    state: State,
    token: Vec<u8>,
    max_token: usize,
}

/// Buffers larger than this are freed (not just cleared) once their token is done.
const KEEP_CAPACITY: usize = 64 * 1024;

impl Lexer {
    /// A lexer whose single tokens may grow to `max_token` bytes.
    pub fn new(max_token: usize) -> Self {
        Lexer {
            state: State::Start,
            token: Vec::new(),
            max_token,
        }
    }

    /// Whether the lexer is between tokens (not inside a token and not skipping input after an error).
    pub fn is_start(&self) -> bool {
        self.state == State::Start
    }

    /// Bytes of the token currently being accumulated.
    pub fn pending(&self) -> usize {
        self.token.len()
    }

    fn clear_token(&mut self) {
        if self.token.capacity() > KEEP_CAPACITY {
            self.token = Vec::new();
        } else {
            self.token.clear();
        }
    }

    /// Feeds bytes, calling `sink` for every token they complete.
    pub fn feed(&mut self, input: &[u8], sink: &mut impl TokenSink) {
        let mut i = 0;
        while i < input.len() {
            if matches!(self.state, State::DqString | State::SqString) {
                // Fast path: copy a run of ordinary string bytes at once, never past the size limit.
                let quote = if self.state == State::DqString {
                    b'"'
                } else {
                    b'\''
                };
                let run = input[i..]
                    .iter()
                    .position(|&b| b == quote || b == b'\\' || !is_string_body(b))
                    .unwrap_or(input.len() - i);
                let room = (self.max_token + 1).saturating_sub(self.token.len());
                let take = run.min(room);
                if take > 0 {
                    self.token.extend_from_slice(&input[i..i + take]);
                    i += take;
                    self.check_size(sink);
                    continue;
                }
            }
            self.feed_byte(input[i], sink);
            i += 1;
        }
    }

    fn feed_byte(&mut self, b: u8, sink: &mut impl TokenSink) {
        loop {
            match next(self.state, b) {
                Next::Go(state) => {
                    self.token.push(b);
                    if matches!(state, State::Start | State::Recovery) {
                        self.clear_token();
                    }
                    self.state = state;
                    break;
                }
                Next::Emit(kind) => {
                    self.token.push(b);
                    sink.token(kind, &self.token);
                    self.clear_token();
                    self.state = State::Start;
                    break;
                }
                Next::EmitBefore(kind) => {
                    sink.token(kind, &self.token);
                    self.clear_token();
                    self.state = State::Start;
                }
                Next::ResyncBefore => {
                    self.clear_token();
                    self.state = State::Start;
                }
                Next::Error => {
                    self.token.push(b);
                    sink.token(TokenKind::Error, &self.token);
                    self.clear_token();
                    self.state = State::Recovery;
                    break;
                }
            }
        }
        self.check_size(sink);
    }

    /// QEMU: "Do not let a single token grow to an arbitrarily large size".
    fn check_size(&mut self, sink: &mut impl TokenSink) {
        if self.token.len() > self.max_token {
            sink.token(TokenKind::Oversized, &self.token);
            self.clear_token();
            self.state = State::Start;
        }
    }
}

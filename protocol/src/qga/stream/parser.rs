//! QEMU's JSON parser (`qobject/json-parser.c`): turns one message's tokens into a value, first error wins.
//!
//! Extensions and checks as in QEMU: single-quoted strings, `\'` escape, modified UTF-8 (`\u0000` and raw
//! `C0 80` are U+0000), noncharacters and lone surrogates rejected, duplicate keys rejected, integers kept as
//! i64 or u64 when they fit and turned into doubles otherwise.

use serde_json::{Map, Number, Value};

use super::lexer::TokenKind;
use super::utf8::{c_string_lossy, decode_codepoint, is_valid_codepoint};
use crate::qga::error::QgaError;

/// The tokens of one message, stored flat so memory stays proportional to the input.
#[derive(Debug, Clone, Default)]
pub struct TokenStore {
    kinds: Vec<(TokenKind, usize, usize)>,
    text: Vec<u8>,
}

const KEEP_CAPACITY: usize = 64 * 1024;

impl TokenStore {
    /// Appends a token.
    pub fn push(&mut self, kind: TokenKind, text: &[u8]) {
        let start = self.text.len();
        if !is_fixed(kind) {
            self.text.extend_from_slice(text);
        }
        self.kinds.push((kind, start, self.text.len()));
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Forgets all tokens, releasing large buffers.
    pub fn clear(&mut self) {
        if self.kinds.capacity() > KEEP_CAPACITY {
            self.kinds = Vec::new();
        } else {
            self.kinds.clear();
        }
        if self.text.capacity() > KEEP_CAPACITY {
            self.text = Vec::new();
        } else {
            self.text.clear();
        }
    }

    fn get(&self, i: usize) -> Option<(TokenKind, &[u8])> {
        self.kinds.get(i).map(|&(k, s, e)| (k, &self.text[s..e]))
    }
}

fn is_fixed(kind: TokenKind) -> bool {
    matches!(
        kind,
        TokenKind::LCurly
            | TokenKind::RCurly
            | TokenKind::LSquare
            | TokenKind::RSquare
            | TokenKind::Colon
            | TokenKind::Comma
    )
}

/// QEMU's `parse_error()`: "JSON parse error, " + the message cut to 1023 bytes (its `char message[1024]`).
fn parse_error(msg: &[u8]) -> QgaError {
    let cut = &msg[..msg.len().min(1023)];
    QgaError::json_parse(&c_string_lossy(cut))
}

fn premature_eoi() -> QgaError {
    parse_error(b"premature EOI")
}

struct Parser<'a> {
    tokens: &'a TokenStore,
    pos: usize,
}

type PResult<T> = Result<T, QgaError>;

/// Parses one complete message.
pub fn parse(tokens: &TokenStore) -> Result<Value, QgaError> {
    let mut p = Parser { tokens, pos: 0 };
    p.parse_value()
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<(TokenKind, &'a [u8])> {
        let tokens: &'a TokenStore = self.tokens;
        tokens.get(self.pos)
    }

    fn pop(&mut self) -> Option<(TokenKind, &'a [u8])> {
        let t = self.peek();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    fn parse_value(&mut self) -> PResult<Value> {
        let Some((kind, text)) = self.peek() else {
            return Err(premature_eoi());
        };
        match kind {
            TokenKind::LCurly => self.parse_object(),
            TokenKind::LSquare => self.parse_array(),
            TokenKind::Integer | TokenKind::Float | TokenKind::String => {
                self.pos += 1;
                parse_literal(kind, text)
            }
            TokenKind::Keyword => {
                self.pos += 1;
                match text {
                    b"true" => Ok(Value::Bool(true)),
                    b"false" => Ok(Value::Bool(false)),
                    b"null" => Ok(Value::Null),
                    _ => {
                        let mut msg = b"invalid keyword '".to_vec();
                        msg.extend_from_slice(text);
                        msg.push(b'\'');
                        Err(parse_error(&msg))
                    }
                }
            }
            _ => Err(parse_error(b"expecting value")),
        }
    }

    fn parse_pair(&mut self, dict: &mut Map<String, Value>) -> PResult<()> {
        if self.peek().is_none() {
            return Err(premature_eoi());
        }
        let key = match self.parse_value()? {
            Value::String(s) => s,
            _ => return Err(parse_error(b"key is not a string in object")),
        };
        match self.pop() {
            None => return Err(premature_eoi()),
            Some((TokenKind::Colon, _)) => {}
            Some(_) => return Err(parse_error(b"missing : in object pair")),
        }
        let value = self.parse_value()?;
        if dict.contains_key(&key) {
            return Err(parse_error(b"duplicate key"));
        }
        dict.insert(key, value);
        Ok(())
    }

    fn parse_object(&mut self) -> PResult<Value> {
        self.pos += 1; // '{'
        let mut dict = Map::new();
        match self.peek() {
            None => return Err(premature_eoi()),
            Some((TokenKind::RCurly, _)) => {
                self.pos += 1;
                return Ok(Value::Object(dict));
            }
            Some(_) => {}
        }
        self.parse_pair(&mut dict)?;
        loop {
            match self.pop() {
                None => return Err(premature_eoi()),
                Some((TokenKind::RCurly, _)) => return Ok(Value::Object(dict)),
                Some((TokenKind::Comma, _)) => self.parse_pair(&mut dict)?,
                Some(_) => return Err(parse_error(b"expected separator in dict")),
            }
        }
    }

    fn parse_array(&mut self) -> PResult<Value> {
        self.pos += 1; // '['
        let mut list = Vec::new();
        match self.peek() {
            None => return Err(premature_eoi()),
            Some((TokenKind::RSquare, _)) => {
                self.pos += 1;
                return Ok(Value::Array(list));
            }
            Some(_) => {}
        }
        list.push(self.parse_value()?);
        loop {
            match self.pop() {
                None => return Err(premature_eoi()),
                Some((TokenKind::RSquare, _)) => return Ok(Value::Array(list)),
                Some((TokenKind::Comma, _)) => list.push(self.parse_value()?),
                Some(_) => return Err(parse_error(b"expected separator in list")),
            }
        }
    }
}

fn parse_literal(kind: TokenKind, text: &[u8]) -> PResult<Value> {
    match kind {
        TokenKind::String => parse_string(text).map(Value::String),
        _ => Ok(Value::Number(parse_number(kind, text))),
    }
}

/// Integers become i64, else u64 (non-negative only), else a double; floats become doubles.
///
/// serde_json cannot hold infinities: a literal that overflows a double (QEMU's `strtod` gives ±inf) is clamped
/// to ±`f64::MAX`, which still counts as "a number that is not an integer" everywhere QEMU would look at it.
fn parse_number(kind: TokenKind, text: &[u8]) -> Number {
    // The lexer only produces ASCII digits, signs, '.', 'e' and 'E' here.
    let s = std::str::from_utf8(text).unwrap_or("0");
    if kind == TokenKind::Integer {
        if let Ok(i) = s.parse::<i64>() {
            return Number::from(i);
        }
        if !s.starts_with('-') {
            if let Ok(u) = s.parse::<u64>() {
                return Number::from(u);
            }
        }
    }
    let f = s.parse::<f64>().unwrap_or(0.0);
    let f = if f.is_finite() {
        f
    } else {
        f64::MAX.copysign(f)
    };
    Number::from_f64(f).unwrap_or_else(|| Number::from(0))
}

fn hex4(s: &[u8]) -> Option<u32> {
    let mut cp = 0u32;
    for i in 0..4 {
        let d = (*s.get(i)? as char).to_digit(16)?;
        cp = (cp << 4) | d;
    }
    Some(cp)
}

/// QEMU's `parse_string()` on a token that includes its quotes.
fn parse_string(token: &[u8]) -> PResult<String> {
    let quote = token[0];
    let body = &token[1..];
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() && body[i] != quote {
        match body[i] {
            b'\\' => {
                let beg = i;
                let esc = body.get(i + 1).copied().unwrap_or(0);
                i += 2;
                match esc {
                    b'"' => out.push('"'),
                    b'\'' => out.push('\''),
                    b'\\' => out.push('\\'),
                    b'/' => out.push('/'),
                    b'b' => out.push('\u{8}'),
                    b'f' => out.push('\u{c}'),
                    b'n' => out.push('\n'),
                    b'r' => out.push('\r'),
                    b't' => out.push('\t'),
                    b'u' => {
                        let mut cp = hex4(&body[i.min(body.len())..])
                            .map(i64::from)
                            .unwrap_or(-1);
                        i += 4;
                        if (0xD800..=0xDBFF).contains(&cp)
                            && body.get(i) == Some(&b'\\')
                            && body.get(i + 1) == Some(&b'u')
                        {
                            let lead = cp;
                            match hex4(&body[(i + 2).min(body.len())..]) {
                                Some(t) if (0xDC00..=0xDFFF).contains(&t) => {
                                    cp = 0x10000 + ((lead & 0x3FF) << 10) + i64::from(t & 0x3FF);
                                    i += 6;
                                }
                                _ => cp = -1,
                            }
                        }
                        let valid = u32::try_from(cp)
                            .ok()
                            .filter(|&c| is_valid_codepoint(c))
                            .and_then(char::from_u32);
                        match valid {
                            Some(c) => out.push(c),
                            None => {
                                // "%.*s" of the escape text, clipped at the end of the token (its NUL).
                                let end = i.min(token.len() - 1);
                                let mut msg = token[1 + beg..1 + end].to_vec();
                                msg.extend_from_slice(b" is not a valid Unicode character");
                                return Err(parse_error(&msg));
                            }
                        }
                    }
                    _ => return Err(parse_error(b"invalid escape sequence in string")),
                }
            }
            b if b.is_ascii() => {
                // Fast path: a run of plain ASCII (the lexer already rejected control characters).
                let run = body[i..]
                    .iter()
                    .position(|&c| !c.is_ascii() || c == b'\\' || c == quote)
                    .unwrap_or(body.len() - i);
                out.push_str(std::str::from_utf8(&body[i..i + run]).unwrap_or_default());
                i += run;
            }
            _ => {
                let (cp, used) = decode_codepoint(&body[i..]);
                match cp.and_then(char::from_u32) {
                    Some(c) => out.push(c),
                    None => return Err(parse_error(b"invalid UTF-8 sequence in string")),
                }
                i += used;
            }
        }
    }
    Ok(out)
}

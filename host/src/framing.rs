//! Host-side reply framing: replies are JSON lines; after a sync the client discards everything up to the
//! agent's 0xFF delimiter (see qga-protocol §2.7).
//!
//! This is a small local decoder; it only splits lines and skips to 0xFF. JSON parsing of each line is done by
//! the caller with serde_json.

/// Upper bound for one reply line: a 48 MiB guest-file-read is 64 MiB of base64 plus JSON overhead.
pub const MAX_REPLY_BYTES: usize = 80 << 20;

/// Splits the agent's byte stream into reply lines.
#[derive(Debug, Default)]
pub struct LineDecoder {
    buf: Vec<u8>,
    /// Start of unconsumed data in `buf`.
    pos: usize,
    /// Discard input until the next 0xFF byte.
    skipping: bool,
}

/// What the decoder produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// One complete line (without the trailing `\n`, `\r` trimmed).
    Line(Vec<u8>),
    /// The 0xFF delimiter that `expect_delimiter` waited for.
    Delimiter,
}

impl LineDecoder {
    /// A decoder that passes lines through.
    pub fn new() -> Self {
        Self::default()
    }

    /// Discard everything up to (and including) the next 0xFF byte, which is then reported as
    /// [`Frame::Delimiter`].
    pub fn expect_delimiter(&mut self) {
        self.skipping = true;
    }

    /// Append bytes read from the channel.
    pub fn feed(&mut self, data: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned as a frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete frame, if any.
    pub fn next_frame(&mut self) -> Option<Frame> {
        let rest = &self.buf[self.pos..];
        if self.skipping {
            return match rest.iter().position(|&b| b == 0xFF) {
                Some(i) => {
                    self.pos += i + 1;
                    self.skipping = false;
                    Some(Frame::Delimiter)
                }
                None => {
                    self.pos = self.buf.len();
                    None
                }
            };
        }
        let nl = rest.iter().position(|&b| b == b'\n')?;
        let mut line = rest[..nl].to_vec();
        self.pos += nl + 1;
        // A stray 0xFF (e.g. a delimited reply we did not wait for) is not part of the JSON.
        line.retain(|&b| b != 0xFF);
        while line.last() == Some(&b'\r') {
            line.pop();
        }
        if self.pos > (1 << 20) && self.pos * 2 > self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        Some(Frame::Line(line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_and_skips_to_delimiter() {
        let mut d = LineDecoder::new();
        d.expect_delimiter();
        d.feed(b"{\"return\": 1}\n{\"error\": {}}\n");
        assert_eq!(d.next_frame(), None);
        d.feed(b"junk\xff{\"return\": 42}\n{\"ret");
        assert_eq!(d.next_frame(), Some(Frame::Delimiter));
        assert_eq!(
            d.next_frame(),
            Some(Frame::Line(b"{\"return\": 42}".to_vec()))
        );
        assert_eq!(d.next_frame(), None);
        d.feed(b"urn\": {}}\r\n");
        assert_eq!(
            d.next_frame(),
            Some(Frame::Line(b"{\"return\": {}}".to_vec()))
        );
        assert_eq!(d.pending(), 0);
    }
}

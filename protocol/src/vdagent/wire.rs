//! Little-endian cursor helpers shared by the payload codecs.

use super::error::VdagentError;
use super::header::MessageType;

/// A bounds-checked little-endian reader over one payload.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    total: usize,
    msg_type: MessageType,
    expected: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader whose short-read errors name `msg_type` and the `expected` size rule.
    pub(crate) fn new(buf: &'a [u8], msg_type: MessageType, expected: &'static str) -> Self {
        Self {
            buf,
            total: buf.len(),
            msg_type,
            expected,
        }
    }

    /// The size error for this payload.
    pub(crate) fn short(&self) -> VdagentError {
        VdagentError::InvalidSize {
            msg_type: self.msg_type,
            size: self.total,
            expected: self.expected,
        }
    }

    /// Takes `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], VdagentError> {
        if self.buf.len() < n {
            return Err(self.short());
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, VdagentError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, VdagentError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, VdagentError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, VdagentError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, VdagentError> {
        Ok(self.u32()? as i32)
    }

    /// Bytes not yet read.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Number of bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(&self) -> Result<(), VdagentError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.short())
        }
    }
}

/// Little-endian append helpers for `Vec<u8>`.
pub(crate) trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_i32(&mut self, v: i32);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
}

/// Converts a length to the u32 the wire needs.
pub(crate) fn len_u32(len: usize, what: &'static str) -> Result<u32, VdagentError> {
    u32::try_from(len).map_err(|_| VdagentError::Encode(what))
}

//! QEMU's "modified UTF-8" rules (`util/unicode.c`): decoding, validity, and lossy conversion of error texts.
//!
//! Modified UTF-8 is UTF-8 where U+0000 may also be written as `C0 80`. Noncharacters (U+FDD0..U+FDEF and every
//! U+xxFFFE/U+xxFFFF) and surrogates are invalid, as are overlong forms other than `C0 80`.

/// QEMU's `is_valid_codepoint()`.
pub fn is_valid_codepoint(cp: u32) -> bool {
    if cp > 0x10FFFF {
        return false;
    }
    if (0xFDD0..=0xFDEF).contains(&cp) || (cp & 0xFFFE) == 0xFFFE {
        return false;
    }
    !(0xD800..=0xDFFF).contains(&cp)
}

/// QEMU's `mod_utf8_codepoint(s, 6, &end)` on a byte slice (the slice end acts as the C string's NUL).
///
/// Returns the code point (or `None` if invalid) and the number of bytes consumed (at least 1 unless `s` is
/// empty or starts with NUL).
pub(crate) fn decode_codepoint(s: &[u8]) -> (Option<u32>, usize) {
    const MIN_CP: [u32; 5] = [0x80, 0x800, 0x10000, 0x200000, 0x4000000];
    let Some(&first) = s.first() else {
        return (None, 0);
    };
    if first == 0 {
        return (None, 0);
    }
    if first < 0x80 {
        return (Some(u32::from(first)), 1);
    }
    if first >= 0xFE || first & 0x40 == 0 {
        // Impossible byte or unexpected continuation byte.
        return (None, 1);
    }
    let len = first.leading_ones() as usize; // 2..=6
    let mask = 0x80u32 >> len;
    let mut cp = u32::from(first) & (mask.wrapping_sub(1));
    let mut used = 1;
    for i in 1..len {
        let byte = s.get(i).copied().unwrap_or(0);
        if byte & 0xC0 != 0x80 {
            return (None, used);
        }
        used += 1;
        cp = (cp << 6) | u32::from(byte & 0x3F);
    }
    if !is_valid_codepoint(cp) || (cp < MIN_CP[len - 2] && !(cp == 0 && len == 2)) {
        return (None, used);
    }
    (Some(cp), used)
}

/// Converts bytes to text the way QEMU's JSON output treats a C string: stop at the first NUL, decode modified
/// UTF-8, and replace each invalid sequence with U+FFFD.
pub(crate) fn c_string_lossy(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let mut s = &bytes[..end];
    let mut out = String::with_capacity(s.len());
    while !s.is_empty() {
        let (cp, used) = decode_codepoint(s);
        out.push(cp.and_then(char::from_u32).unwrap_or('\u{FFFD}'));
        s = &s[used.max(1)..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_qemu() {
        assert_eq!(decode_codepoint(b"A"), (Some(0x41), 1));
        assert_eq!(decode_codepoint(b"\xC0\x80"), (Some(0), 2));
        assert_eq!(decode_codepoint(b"\xC1\x81"), (None, 2)); // overlong
        assert_eq!(decode_codepoint("é".as_bytes()), (Some(0xE9), 2));
        assert_eq!(decode_codepoint("\u{1F600}".as_bytes()), (Some(0x1F600), 4));
        assert_eq!(decode_codepoint(b"\xEF\xBF\xBE"), (None, 3)); // U+FFFE noncharacter
        assert_eq!(decode_codepoint(b"\xED\xA0\x80"), (None, 3)); // surrogate
        assert_eq!(decode_codepoint(b"\xE2\x82"), (None, 2)); // truncated: 1 + actual continuation bytes
        assert_eq!(decode_codepoint(b"\xE2\x41"), (None, 1));
        assert_eq!(decode_codepoint(b"\xFF"), (None, 1));
        assert_eq!(decode_codepoint(b"\x80"), (None, 1));
        assert_eq!(decode_codepoint(b"\xF8\x88\x80\x80\x80"), (None, 5));
    }

    #[test]
    fn lossy_stops_at_nul() {
        assert_eq!(c_string_lossy(b"\xFF"), "\u{FFFD}");
        assert_eq!(c_string_lossy(b"ab\0cd"), "ab");
        assert_eq!(c_string_lossy(b"\"x\xC0\x80"), "\"x\0");
    }
}

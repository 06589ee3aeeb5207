//! How the decoders grow a buffer for a part whose length the wire announced: with the bytes that actually
//! arrive, not with the announcement (a hostile header costs nothing), yet without ending past it.

/// Makes room in `buf` for `n` more bytes of a part that will be `total` bytes long: doubling as bytes arrive, so
/// the capacity stays within twice what was received, but never past `total`, so the last step is exact. (A
/// 64 KiB message then ends in a 64 KiB buffer, not a 128 KiB one that the allocator maps and unmaps for every
/// message of a bulk transfer.)
pub(crate) fn grow_within(buf: &mut Vec<u8>, n: usize, total: usize) {
    let len = buf.len();
    if buf.capacity() - len >= n {
        return;
    }
    let target = (buf.capacity() * 2).max(len + n).min(total);
    buf.reserve_exact(target.max(len + n) - len);
}

//! How the decoders grow a buffer for a part whose length the wire announced: with the bytes that actually
//! arrive, not with the announcement (a hostile header costs nothing), yet without ending past it.

/// Makes room in `buf` for `n` more bytes of a part that will be `total` bytes long: doubling as bytes arrive, so
/// the capacity stays within twice what was received, but never past `total`, so the last step is exact. (A
/// 64 KiB message then ends in a 64 KiB buffer, not a 128 KiB one that the allocator maps and unmaps for every
/// message of a bulk transfer.)
pub(crate) fn grow_within(buf: &mut Vec<u8>, n: usize, total: usize) {
    grow_ahead(buf, n, 0, total);
}

/// As [`grow_within`], but also counting `ahead` bytes that were already handed to the decoder behind these `n`
/// and may belong to the same part: they are room it will need at once, so it is reserved now instead of
/// doubling (and copying) again and again while they are appended. The capacity still stays within what was
/// actually received, or twice that, and never past `total`.
pub(crate) fn grow_ahead(buf: &mut Vec<u8>, n: usize, ahead: usize, total: usize) {
    let len = buf.len();
    if buf.capacity() - len >= n {
        return;
    }
    let target = (buf.capacity() * 2)
        .max(len.saturating_add(n).saturating_add(ahead))
        .min(total);
    buf.reserve_exact(target.max(len + n) - len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_by_doubling_and_ends_exactly_at_the_total() {
        let mut buf = Vec::new();
        let mut caps = Vec::new();
        for _ in 0..16 {
            grow_within(&mut buf, 4096, 64 * 1024);
            buf.extend_from_slice(&[0; 4096]);
            caps.push(buf.capacity());
        }
        assert_eq!(buf.len(), 64 * 1024);
        assert_eq!(buf.capacity(), 64 * 1024, "{caps:?}");
        assert!(
            caps.iter().zip(1..).all(|(&c, i)| c <= 2 * i * 4096),
            "{caps:?}"
        );
    }

    #[test]
    fn bytes_already_fed_are_reserved_at_once_but_never_past_the_total() {
        let mut buf = Vec::new();
        grow_ahead(&mut buf, 4096, 60 * 1024, 64 * 1024);
        assert_eq!(buf.capacity(), 64 * 1024);
        let mut small = Vec::new();
        grow_ahead(&mut small, 10, 100, 1 << 20);
        assert_eq!(small.capacity(), 110, "no more than was fed");
        let mut huge = Vec::new();
        grow_ahead(&mut huge, 1, usize::MAX, 1 << 20);
        assert_eq!(
            huge.capacity(),
            1 << 20,
            "an absurd `ahead` is capped by the total"
        );
    }
}

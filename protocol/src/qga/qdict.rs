//! QEMU's `QDict` iteration order, which decides the member order of every JSON object qemu-ga writes.
//!
//! A QDict is a 512-bucket hash table keyed with `tdb_hash()` (`qobject/qdict.c`); each bucket is a list with the
//! newest entry first, and iteration walks the buckets in order. So `{"return": {}, "id": 7}` but
//! `{"id": 7, "error": {...}}`, and `guest-exec-status` comes out as `exitcode, out-data, out-truncated, exited`.
//! The same order decides which offending envelope member qmp-dispatch reports first.

use serde_json::{Map, Value};

/// QEMU's `QDICT_BUCKET_MAX`.
pub const QDICT_BUCKETS: u32 = 512;

/// QEMU's `tdb_hash()` of a key, computed over its modified-UTF-8 bytes (U+0000 is `C0 80`).
pub fn tdb_hash(key: &str) -> u32 {
    let mut bytes = Vec::with_capacity(key.len());
    for c in key.chars() {
        if c == '\0' {
            bytes.extend_from_slice(&[0xC0, 0x80]);
        } else {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    // strlen() is a size_t; only its low 32 bits matter after the unsigned multiplication.
    let mut value = 0x238F_13AFu32.wrapping_mul(bytes.len() as u32);
    for (i, &b) in bytes.iter().enumerate() {
        let shift = (i as u32).wrapping_mul(5) % 24;
        value = value.wrapping_add(u32::from(b) << shift);
    }
    1_103_515_243u32.wrapping_mul(value).wrapping_add(12345)
}

/// The bucket a key lands in.
pub fn bucket(key: &str) -> u32 {
    tdb_hash(key) % QDICT_BUCKETS
}

/// The members of `map` (inserted in its iteration order) in the order QEMU's `qdict_first()`/`qdict_next()`
/// would visit them.
pub fn qdict_order(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(u32, usize, &String, &Value)> = map
        .iter()
        .enumerate()
        .map(|(i, (k, v))| (bucket(k), i, k, v))
        .collect();
    // Buckets ascending; inside a bucket the newest insertion comes first.
    entries.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    entries.into_iter().map(|(_, _, k, v)| (k, v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(v: Value) -> Vec<String> {
        let Value::Object(m) = v else { panic!() };
        qdict_order(&m)
            .into_iter()
            .map(|(k, _)| k.clone())
            .collect()
    }

    #[test]
    fn reply_member_order_matches_qemu_ga() {
        // Measured on qemu-ga 7.2: {"return": ..., "id": ...}, {"id": ..., "error": ...}, {"class", "desc"}.
        assert_eq!(keys(json!({"return": 1, "id": 2})), ["return", "id"]);
        assert_eq!(keys(json!({"error": 1, "id": 2})), ["id", "error"]);
        assert_eq!(keys(json!({"class": 1, "desc": 2})), ["class", "desc"]);
        // Measured guest-exec-status reply order (docs/protocol/qga.md#reply-member-order).
        assert_eq!(
            keys(
                json!({"exited": true, "exitcode": 0, "out-data": "eAo=", "out-truncated": false})
            ),
            ["exitcode", "out-data", "out-truncated", "exited"]
        );
    }
}

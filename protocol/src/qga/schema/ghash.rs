//! Which unexpected argument member QEMU reports first: a model of the GLib `GHashTable` that
//! `qobject-input-visitor.c` uses to track unvisited members.
//!
//! QEMU inserts every member (in QDict order) into a `g_str_hash` table, removes each member as the visitor
//! consumes it (schema order), then reports the first member left in table-slot order. Reproducing that needs
//! GLib's open addressing (`(hash * 11) % mod`, quadratic probing, tombstones) and its in-place resize. Only the
//! slot order of what remains matters, so keys are tracked by index.

use serde_json::{Map, Value};

use crate::qga::qdict::qdict_order;

const MIN_SHIFT: u32 = 3;
const UNUSED: u32 = 0;
const TOMBSTONE: u32 = 1;
const PRIME_MOD: [u32; 32] = [
    1, 2, 3, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071,
    262139, 524287, 1048573, 2097143, 4194301, 8388593, 16777213, 33554393, 67108859, 134217689,
    268435399, 536870909, 1073741789, 2147483647,
];

fn is_real(h: u32) -> bool {
    h >= 2
}

/// GLib's `g_str_hash()` (djb2 over *signed* chars) of a key's modified-UTF-8 bytes.
pub fn g_str_hash(key: &str) -> u32 {
    let mut h: u32 = 5381;
    for c in key.chars() {
        let mut buf = [0u8; 4];
        let bytes: &[u8] = if c == '\0' {
            &[0xC0, 0x80]
        } else {
            c.encode_utf8(&mut buf).as_bytes()
        };
        for &b in bytes {
            h = (h << 5)
                .wrapping_add(h)
                .wrapping_add(i32::from(b as i8) as u32);
        }
    }
    h
}

struct Table {
    hashes: Vec<u32>,
    keys: Vec<usize>,
    mod_: u32,
    mask: u32,
    nnodes: usize,
    noccupied: usize,
}

impl Table {
    fn new() -> Self {
        let mut t = Table {
            hashes: Vec::new(),
            keys: Vec::new(),
            mod_: 0,
            mask: 0,
            nnodes: 0,
            noccupied: 0,
        };
        t.set_shift(MIN_SHIFT);
        t.hashes = vec![UNUSED; t.size()];
        t.keys = vec![usize::MAX; t.size()];
        t
    }

    fn size(&self) -> usize {
        self.mask as usize + 1
    }

    fn set_shift(&mut self, shift: u32) {
        self.mod_ = PRIME_MOD[shift as usize];
        self.mask = (1u32 << shift) - 1;
    }

    fn set_shift_from_size(&mut self, size: usize) {
        let mut n = size;
        let mut shift = 0;
        while n != 0 {
            n >>= 1;
            shift += 1;
        }
        self.set_shift(shift.clamp(MIN_SHIFT, 31));
    }

    fn index(&self, hash: u32) -> u32 {
        hash.wrapping_mul(11) % self.mod_
    }

    /// `g_hash_table_lookup_node()`: the slot holding `key`, else the first tombstone or free slot.
    fn lookup(&self, hash: u32, key: usize) -> (usize, bool) {
        let mut i = self.index(hash);
        let mut step = 0;
        let mut tombstone = None;
        loop {
            let h = self.hashes[i as usize];
            if h == UNUSED {
                return (tombstone.unwrap_or(i as usize), false);
            }
            if h == hash && self.keys[i as usize] == key {
                return (i as usize, true);
            }
            if h == TOMBSTONE && tombstone.is_none() {
                tombstone = Some(i as usize);
            }
            step += 1;
            i = (i + step) & self.mask;
        }
    }

    fn insert(&mut self, hash: u32, key: usize) {
        let (slot, found) = self.lookup(hash, key);
        if found {
            return;
        }
        let old = self.hashes[slot];
        self.hashes[slot] = hash;
        self.keys[slot] = key;
        self.nnodes += 1;
        if old == UNUSED {
            self.noccupied += 1;
            self.maybe_resize();
        }
    }

    fn remove(&mut self, hash: u32, key: usize) {
        let (slot, found) = self.lookup(hash, key);
        if !found {
            return;
        }
        self.hashes[slot] = TOMBSTONE;
        self.keys[slot] = usize::MAX;
        self.nnodes -= 1;
        self.maybe_resize();
    }

    fn maybe_resize(&mut self) {
        let size = self.size();
        let occ = self.noccupied;
        if (size > self.nnodes * 4 && size > 1 << MIN_SHIFT) || size <= occ + occ / 16 {
            self.resize();
        }
    }

    /// `g_hash_table_resize()` + `resize_map()`: in-place rehash with eviction chains.
    fn resize(&mut self) {
        let old_size = self.size();
        // `nnodes * 1.333` converted to gint truncates.
        let target = (self.nnodes as f64 * 1.333) as usize;
        self.set_shift_from_size(target);
        let new_size = self.size();
        if new_size > old_size {
            self.hashes.resize(new_size, UNUSED);
            self.keys.resize(new_size, usize::MAX);
        }
        let mut moved = vec![false; new_size.max(old_size)];
        for i in 0..old_size {
            let mut node_hash = self.hashes[i];
            if !is_real(node_hash) {
                self.hashes[i] = UNUSED;
                continue;
            }
            if moved[i] {
                continue;
            }
            self.hashes[i] = UNUSED;
            let mut key = self.keys[i];
            self.keys[i] = usize::MAX;
            loop {
                let mut slot = self.index(node_hash);
                let mut step = 0;
                while moved[slot as usize] {
                    step += 1;
                    slot = (slot + step) & self.mask;
                }
                let slot = slot as usize;
                moved[slot] = true;
                let replaced = self.hashes[slot];
                self.hashes[slot] = node_hash;
                let replaced_key = std::mem::replace(&mut self.keys[slot], key);
                if !is_real(replaced) {
                    break;
                }
                node_hash = replaced;
                key = replaced_key;
            }
        }
        if new_size < old_size {
            self.hashes.truncate(new_size);
            self.keys.truncate(new_size);
        }
        self.noccupied = self.nnodes;
    }
}

/// The member `qobject_input_check_struct()` reports as unexpected, if any: `visited` are the schema members in
/// visit order (only those present in `obj` are consumed).
pub fn first_unexpected<'m>(obj: &'m Map<String, Value>, visited: &[&str]) -> Option<&'m str> {
    let ordered: Vec<&String> = qdict_order(obj).into_iter().map(|(k, _)| k).collect();
    if ordered.iter().all(|k| visited.contains(&k.as_str())) {
        return None;
    }
    let hashes: Vec<u32> = ordered.iter().map(|k| g_str_hash(k).max(2)).collect();
    let mut table = Table::new();
    for (i, &h) in hashes.iter().enumerate() {
        table.insert(h, i);
    }
    for name in visited {
        if let Some(i) = ordered.iter().position(|k| k.as_str() == *name) {
            table.remove(hashes[i], i);
        }
    }
    (0..table.size())
        .find(|&slot| is_real(table.hashes[slot]))
        .map(|slot| ordered[table.keys[slot]].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn str_hash_is_djb2_on_signed_chars() {
        assert_eq!(g_str_hash(""), 5381);
        assert_eq!(g_str_hash("a"), 5381 * 33 + 97);
        // 0xC3 as a signed char is -61.
        assert_eq!(
            g_str_hash("\u{e9}"),
            ((5381u32 * 33).wrapping_sub(61))
                .wrapping_mul(33)
                .wrapping_sub(87)
        );
    }

    #[test]
    fn measured_on_qemu_ga_7_2() {
        // guest-sync {"zeta":1,"alpha":2,"id":3} → "Parameter 'alpha' is unexpected".
        let m = json!({"zeta": 1, "alpha": 2, "id": 3});
        assert_eq!(
            first_unexpected(m.as_object().unwrap(), &["id"]),
            Some("alpha")
        );
        let m = json!({"id": 3});
        assert_eq!(first_unexpected(m.as_object().unwrap(), &["id"]), None);
    }
}

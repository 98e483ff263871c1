//! A hasher for the tagged layer's maps keyed by its own numbers (send and read ids,
//! peer ids, connection numbers): one multiply a word (FxHash's), where the standard
//! SipHash costs ~20 ns a lookup on a path that makes several per message. Only for
//! keys this layer hands out: maps keyed by what a peer says (its address) keep the
//! standard, keyed hasher, so that a peer cannot choose colliding keys.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl IdHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
}

pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_buckets() {
        // The bucket index is the hash's low bits, the control byte its top 7.
        let mut low = HashSet::new();
        let mut top = HashSet::new();
        for id in 0u64..1024 {
            let mut h = IdHasher::default();
            h.write_u64(id);
            low.insert(h.finish() & 1023);
            top.insert(h.finish() >> 57);
        }
        assert_eq!(low.len(), 1024);
        assert!(top.len() > 100, "{}", top.len());
    }
}

//! Cheap hashers for the decoding pass's maps: their keys (line numbers,
//! addresses, thread ids) are not adversarial input, and SipHash would cost
//! more than the rest of an access.

use std::hash::{BuildHasher, Hasher};

/// A multiplicative hash for any integer keys (addresses, thread ids).
#[derive(Clone, Copy, Debug, Default)]
pub struct BuildFastHasher;

impl BuildHasher for BuildFastHasher {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

/// See [`BuildFastHasher`].
#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v.into());
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(MULTIPLIER).rotate_left(29);
    }
}

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// A hash for cache-line numbers that keeps neighbours together: lines
/// `16k .. 16k + 15` land in adjacent buckets (the table's position is the
/// hash's low bits), so a sweep over an array touches one table cache line
/// per few lines instead of one each — a map of every line a trace touched
/// outgrows the CPU's caches, and sweeps are what programs do most. The
/// groups of sixteen are spread by a multiplicative hash, whose well-mixed
/// high bits make both the bucket and the tag byte.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuildLineHasher;

impl BuildHasher for BuildLineHasher {
    type Hasher = LineHasher;
    fn build_hasher(&self) -> LineHasher {
        LineHasher(FastHasher(0))
    }
}

/// See [`BuildLineHasher`]. Keys other than one `u64` hash as with
/// [`FastHasher`].
#[derive(Clone, Copy, Default)]
pub struct LineHasher(FastHasher);

/// Lines kept together: log2 of the group size.
const NEIGHBOUR_BITS: u32 = 4;

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0.finish()
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes)
    }
    fn write_u64(&mut self, line: u64) {
        let group = line >> NEIGHBOUR_BITS;
        let mixed = (self.0.0 ^ group).wrapping_mul(MULTIPLIER);
        // Top half: the mixed bits as they are (the tag byte comes from the
        // top); low half: mixed bits 32.. above the line's place in its group.
        let low = ((mixed >> 32) << NEIGHBOUR_BITS | line & ((1 << NEIGHBOUR_BITS) - 1)) & 0xffff_ffff;
        self.0.0 = mixed & !0xffff_ffff | low;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_hash(line: u64) -> u64 {
        BuildLineHasher.hash_one(line)
    }

    #[test]
    fn neighbouring_lines_hash_to_neighbouring_buckets() {
        let base = line_hash(0x1234_5670);
        for i in 0..16 {
            assert_eq!(line_hash(0x1234_5670 + i), base + i);
        }
        assert_ne!(line_hash(0x1234_5680) & 0xffff_fff0, base & 0xffff_fff0, "the next group lies elsewhere");
    }

    #[test]
    fn groups_spread_over_buckets_and_tags() {
        // 4096 groups of a sweep into 1024 buckets of 16: about 4 each.
        let mut buckets = vec![0u32; 1024];
        let mut tags = std::collections::HashSet::new();
        for g in 0..4096u64 {
            let h = line_hash(0x7f00_0000 + g * 16);
            buckets[((h >> 4) & 1023) as usize] += 1;
            tags.insert(h >> 57);
        }
        assert!(buckets.iter().all(|&n| n <= 16), "no bucket far above the mean of 4: {:?}", buckets.iter().max());
        assert_eq!(tags.len(), 128, "every tag value used");
    }
}

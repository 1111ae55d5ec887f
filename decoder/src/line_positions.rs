//! A map from cache-line numbers to positions in a dense vector, for the
//! hashed working set ([`crate::working_set::HashedLines`]).
//!
//! The working set churns: every miss inserts one line and, once the set is
//! full, removes one, a few times per read on a miss-heavy trace, in the
//! decoding pass and in every replay a zoomed-out picture makes. hashbrown
//! paid for that churn with tombstones, an out-of-line insert, and rehashes
//! when the tombstones used up its free slots.
//!
//! Open addressing with linear probing over one array of (line, position)
//! pairs, at most an eighth full; a removal shifts the rest of its probe run
//! back (no tombstones), so a lookup never walks further than the run its
//! line lives in. The set holds at most `max_rows` lines (512 by default):
//! the array (64 KiB then) stays in the CPU's nearest caches. Slots come from the high
//! bits of a multiplicative hash, which scatter a sweep's neighbouring lines.
//!
//! Pairs, not keys and positions in two arrays, though the pairs pass this
//! host's 32 KiB first-level cache: with the keys alone probed (32 KiB of
//! them at an eighth full, 16 KiB at a quarter), the 100M-read view-bench
//! trace's decode was no faster (a scratch binary calling `Model::decode`,
//! 6 alternating rounds: median 7.17 s as it is, 7.52 s and 7.33 s).

/// No line number is this large (lines are addresses shifted right by at
/// least one), so it marks an empty slot.
const EMPTY: u64 = u64::MAX;

/// Slots of a new map (a power of two).
const MIN_SLOTS: usize = 64;

/// The map grows when more than one slot in this many is taken.
const MAX_LOAD_INVERSE: usize = 8;

/// Fibonacci hashing's multiplier (2^64 / golden ratio).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Where an absent line goes ([`LinePositions::get_or_vacancy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vacancy(usize);

/// Line number -> position.
#[derive(Clone, Debug)]
pub struct LinePositions {
    slots: Vec<(u64, u32)>,
    /// `64 - log2(slots)`: the hash's top bits index the slots.
    shift: u32,
    len: usize,
}

impl Default for LinePositions {
    fn default() -> Self {
        LinePositions { slots: vec![(EMPTY, 0); MIN_SLOTS], shift: 64 - MIN_SLOTS.trailing_zeros(), len: 0 }
    }
}

impl LinePositions {
    #[inline]
    fn home(&self, line: u64) -> usize {
        (line.wrapping_mul(MULTIPLIER) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `line`, or the empty slot ending its probe run.
    #[inline]
    fn find(&self, line: u64) -> (usize, bool) {
        debug_assert_ne!(line, EMPTY);
        let mask = self.mask();
        let mut i = self.home(line);
        loop {
            let key = self.slots[i].0;
            if key == line {
                return (i, true);
            }
            if key == EMPTY {
                return (i, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// The position of `line`.
    #[inline]
    pub fn get(&self, line: u64) -> Option<u32> {
        match self.find(line) {
            (i, true) => Some(self.slots[i].1),
            _ => None,
        }
    }

    /// Sets the position of `line`, inserting it if it is new.
    #[inline]
    pub fn insert(&mut self, line: u64, position: u32) {
        let (i, found) = self.find(line);
        if found {
            self.slots[i].1 = position;
        } else {
            self.occupy(i, line, position);
        }
    }

    /// The position of `line`, or the vacant slot where it would go
    /// ([`LinePositions::occupy_vacant`]): one probe for a lookup and the
    /// insertion that follows a miss.
    #[inline]
    pub fn get_or_vacancy(&self, line: u64) -> Result<u32, Vacancy> {
        match self.find(line) {
            (i, true) => Ok(self.slots[i].1),
            (i, false) => Err(Vacancy(i)),
        }
    }

    /// Inserts `line` (absent) at `position` in the slot
    /// [`LinePositions::get_or_vacancy`] found, with no change to the map
    /// since.
    #[inline]
    pub fn occupy_vacant(&mut self, vacancy: Vacancy, line: u64, position: u32) {
        debug_assert_eq!(self.find(line), (vacancy.0, false));
        self.occupy(vacancy.0, line, position);
    }

    /// Puts `line` in the empty slot `i` that ends its probe run.
    #[inline]
    fn occupy(&mut self, i: usize, line: u64, position: u32) {
        self.slots[i] = (line, position);
        self.len += 1;
        // At most an eighth full, so that nearly every probe run is one
        // slot long: a miss-heavy trace looks up an absent line, inserts it
        // and removes another for most reads (512 lines: 4096 slots, 64
        // KiB; at most half full, `report` of the 100M-read benchmark
        // trace took 4-5% longer, a quarter full 2-3%).
        if self.len * MAX_LOAD_INVERSE > self.slots.len() {
            self.grow();
        }
    }

    /// Removes `line` if it is there; its position then.
    #[inline]
    pub fn remove(&mut self, line: u64) -> Option<u32> {
        let (mut hole, found) = self.find(line);
        if !found {
            return None;
        }
        let position = self.slots[hole].1;
        self.len -= 1;
        // Backward shift: move up every later entry of the run that may sit
        // in the hole (its home is not cyclically after the hole), so every
        // line stays reachable from its home without gaps.
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let key = self.slots[i].0;
            if key == EMPTY {
                break;
            }
            let home = self.home(key);
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[i];
                hole = i;
            }
        }
        self.slots[hole].0 = EMPTY;
        Some(position)
    }

    /// Removes every line.
    pub fn clear(&mut self) {
        self.slots.fill((EMPTY, 0));
        self.len = 0;
    }

    fn grow(&mut self) {
        let doubled = vec![(EMPTY, 0); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        self.shift -= 1;
        self.len = 0;
        for (line, position) in old.into_iter().filter(|(k, _)| *k != EMPTY) {
            self.insert(line, position);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `std`'s map, through growth and heavy churn (the removals
    /// are what backward shifting must get right).
    #[test]
    fn agrees_with_a_hash_map_under_churn() {
        let mut map = LinePositions::default();
        let mut reference = std::collections::HashMap::new();
        let mut seed = 7u64;
        for i in 0..200_000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // A window of live lines that drifts: neighbours, colliding
            // strides, and random lines, each removed some time later.
            let line = match i % 3 {
                0 => u64::from(i / 3 % 900),
                1 => u64::from(i % 500) << 20,
                _ => (seed >> 24) % 2_000,
            };
            if seed >> 62 == 0 {
                assert_eq!(map.remove(line), reference.remove(&line), "removing line {line}");
            } else if seed >> 62 == 1 {
                // A lookup, then an insertion where it found no line.
                match map.get_or_vacancy(line) {
                    Ok(p) => assert_eq!(Some(&p), reference.get(&line), "line {line}"),
                    Err(vacancy) => {
                        assert!(!reference.contains_key(&line), "line {line} is there");
                        map.occupy_vacant(vacancy, line, i);
                        reference.insert(line, i);
                    }
                }
            } else {
                map.insert(line, i);
                reference.insert(line, i);
            }
            assert_eq!(map.len, reference.len());
            let probe = (seed >> 8) % 2_500;
            assert_eq!(map.get(probe), reference.get(&probe).copied(), "line {probe} after step {i}");
        }
        for (&line, &position) in &reference {
            assert_eq!(map.get(line), Some(position));
        }
        map.clear();
        assert_eq!(map.len, 0);
        assert_eq!(map.get(5), None);
    }
}

//! A map from cache-line numbers to small values that can be asked to
//! bring a line's slot into the CPU cache ahead of its use.
//!
//! The decoding pass keeps one entry per line the trace touched; on a
//! miss-heavy trace that table outgrows the CPU's caches, and a lookup
//! waited on memory for most of its time (hashbrown: 60% of the reuse
//! distance's time in the probe's first load). Knowing the next lines a few
//! accesses early, a caller prefetches their slots ([`LineTable::prefetch`])
//! and the waits overlap.
//!
//! Open addressing over one array of (line, value) pairs, so a probe
//! reads one host cache line. Positions come from `BuildLineHasher`,
//! which places the sixteen lines of a group in sixteen neighbouring slots
//! (a sweep reads few host lines); a slot taken by another line sends the
//! probe on by one block of sixteen and one slot, not to the next slot: a
//! step of one walked along the filled runs that sweeps leave, and made the
//! table slower than hashbrown. The step is odd, so a probe visits every
//! slot and always ends (a step of sixteen would cycle through one slot in
//! sixteen, and lines that all sit at the same place in their groups, a
//! stride of 1 KiB, fill those). Entries are never removed.
//!
//! A smaller table is not faster. The view bench's 100M-read miss-heavy
//! trace touches 278,528 lines, which this table keeps in 2^21 slots: 32 MiB,
//! more than this host's last-level cache holds (a pointer chase took 17 ns
//! a load over 4 MiB, 50 ns over 16 MiB). A scratch build kept the reuse
//! distances' entries without keys instead, 8 bytes per line in dense
//! pages of 2^14 lines found through a small map (2.2 MiB for that trace).
//! The decode child of `cargo bench --bench decode`, 3 alternating rounds:
//! 8.03-8.20 s against 7.47-8.12 s, user CPU 15.45-15.55 s against
//! 14.10-15.41 s, peak RSS 303 MiB against 335 MiB. The reuse distances'
//! share of the samples did not fall (`perf record`, one run each: 22.3%
//! with the pages and their map, 18.9% with this table): the prefetches
//! already hide this table's waits.

use std::hash::BuildHasher;

use crate::hashing::BuildLineHasher;

/// No line number is this large (lines are addresses shifted right by at
/// least one), so it marks an empty slot.
const EMPTY: u64 = u64::MAX;

/// Slots of a new table (a power of two).
const MIN_SLOTS: usize = 1 << 10;

/// Distance between two probes: past one group of neighbouring lines (see
/// `NEIGHBOUR_BITS` in [`crate::hashing`]); odd, so that the probes of a
/// power-of-two table visit every slot.
const PROBE_STEP: usize = 17;

/// The table grows when more than one slot in this many would be taken: a
/// quarter full, so that a probe nearly always ends at the home slot its
/// prefetch loaded (at half full, `report` of the 100M-read benchmark
/// trace, 278,528 lines in 2^20 slots, took 3% longer), but half full past
/// 2^22 slots (64 MiB of 16-byte slots), where the table's memory weighs
/// more.
fn max_load_inverse(slots: usize) -> usize {
    if slots < 1 << 22 { 4 } else { 2 }
}

/// Line number -> `V`.
#[derive(Clone, Debug)]
pub struct LineTable<V> {
    slots: Vec<(u64, V)>,
    len: usize,
}

impl<V: Copy + Default> Default for LineTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Copy + Default> LineTable<V> {
    /// An empty table.
    pub fn new() -> Self {
        LineTable { slots: vec![(EMPTY, V::default()); MIN_SLOTS], len: 0 }
    }

    /// Lines in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn home(&self, line: u64) -> usize {
        BuildLineHasher.hash_one(line) as usize & (self.slots.len() - 1)
    }

    /// Starts loading the slot `line` would be found at into the CPU cache.
    /// A hint: it changes nothing, and costs one instruction.
    #[inline]
    pub fn prefetch(&self, line: u64) {
        crate::prefetch::prefetch(&self.slots[self.home(line)]);
    }

    /// The value of `line` if it is in its home slot, which a
    /// [`Self::prefetch`] a while ago should have brought in; otherwise
    /// `None`, having started loading the next slot its probe visits (a
    /// line whose home another line took). A hint for a lookup to come:
    /// it waits on memory at most once.
    #[inline]
    pub fn prefetch_probe(&self, line: u64) -> Option<&V> {
        let home = self.home(line);
        let (key, value) = &self.slots[home];
        if *key == line {
            return Some(value);
        }
        if *key != EMPTY {
            crate::prefetch::prefetch(&self.slots[(home + PROBE_STEP) & (self.slots.len() - 1)]);
        }
        None
    }

    /// The value of `line`, inserted as `V::default()` if it is new.
    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    pub fn entry(&mut self, line: u64) -> &mut V {
        debug_assert_ne!(line, EMPTY);
        if (self.len + 1) * max_load_inverse(self.slots.len()) > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(line);
        loop {
            let key = self.slots[i].0;
            if key == line {
                return &mut self.slots[i].1;
            }
            if key == EMPTY {
                self.slots[i].0 = line;
                self.len += 1;
                return &mut self.slots[i].1;
            }
            i = (i + PROBE_STEP) & mask;
        }
    }

    /// The value of `line`, if it is in the table.
    pub fn get_mut(&mut self, line: u64) -> Option<&mut V> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(line);
        loop {
            let key = self.slots[i].0;
            if key == line {
                return Some(&mut self.slots[i].1);
            }
            if key == EMPTY {
                return None;
            }
            i = (i + PROBE_STEP) & mask;
        }
    }

    /// Every (line, value), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.slots.iter().filter(|(k, _)| *k != EMPTY).map(|(k, v)| (*k, v))
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Every value, mutably, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.slots.iter_mut().filter(|(k, _)| *k != EMPTY).map(|(_, v)| v)
    }

    // Out of line: rare, and inlined into `entry` it kept `entry` a call.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let doubled = crate::huge_pages::filled_vec(self.slots.len() * 2, (EMPTY, V::default()));
        let old = std::mem::replace(&mut self.slots, doubled);
        self.len = 0;
        for (line, value) in old.into_iter().filter(|(k, _)| *k != EMPTY) {
            *self.entry(line) = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `std`'s map, over growth and colliding neighbours.
    #[test]
    fn agrees_with_a_hash_map() {
        let mut table = LineTable::<u32>::new();
        let mut reference = std::collections::HashMap::new();
        let mut seed = 11u64;
        for i in 0..50_000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Runs of neighbours, scattered lines, and lines that all sit
            // at the same place in their groups of sixteen; some repeated.
            let line = match i % 3 {
                0 => u64::from(i % 700),
                1 => u64::from(i % 12_000) * 16,
                _ => (seed >> 20) % 40_000,
            };
            table.prefetch(line);
            if let Some(v) = table.prefetch_probe(line) {
                assert_eq!(reference.get(&line), Some(v), "line {line}");
            }
            let before = table.len();
            *table.entry(line) += i;
            assert_eq!(table.len() > before, !reference.contains_key(&line), "line {line}");
            *reference.entry(line).or_insert(0) += i;
        }
        assert_eq!(table.len(), reference.len());
        for (line, v) in table.iter() {
            assert_eq!(reference.get(&line), Some(v), "line {line}");
        }
        assert_eq!(table.get_mut(1 << 40), None);
        assert_eq!(table.get_mut(5).copied(), reference.get(&5).copied());
    }
}

//! Recorded heap blocks and mappings, and an index that answers "which
//! block holds address A at column c" in O(log n + overlapping blocks)
//! instead of a scan per pixel.

use serde::Serialize;
use trace_rt::format::AllocKind;

/// A move of the program break (the end of malloc's brk heap), recorded
/// with `record --allocations`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProgramBreakMove {
    /// The allocation event during which it moved
    /// ([`AllocationRecord::alloc_event`]'s clock).
    pub event: u64,
    /// The break before.
    pub from: u64,
    /// The break after.
    pub to: u64,
}

/// One recorded heap block or mapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AllocationRecord {
    /// What created it.
    pub kind: AllocKind,
    /// First address.
    pub address: u64,
    /// Requested size.
    pub size: u64,
    /// Requested alignment (0: none).
    pub align: u64,
    /// The call that created it.
    pub callsite: u64,
    /// Column at which it was created.
    pub alloc_column: u64,
    /// Column at which it was freed (None: still live at the end).
    pub free_column: Option<u64>,
    /// Allocation event that created it: events (allocations, frees,
    /// mappings) are numbered from 0 in trace order, the time axis of the
    /// heap analysis ([`crate::heap`]).
    pub alloc_event: u64,
    /// Allocation event that freed it.
    pub free_event: Option<u64>,
    /// The allocator's usable size (`malloc_usable_size`; 0: not recorded,
    /// as by the ptrace backend).
    pub usable: u64,
    /// When it was allocated, CLOCK_MONOTONIC nanoseconds (`None`: not
    /// recorded).
    pub alloc_ns: Option<u64>,
    /// When it was freed.
    pub free_ns: Option<u64>,
    /// Its callers above `callsite` ([`crate::model::Model::alloc_stacks`]).
    pub stack: Option<u32>,
    /// Thread that created it.
    pub thread: u32,
    /// Reads that fell into it.
    pub reads: u64,
    /// Writes that fell into it.
    pub writes: u64,
    /// The custom allocator function that handed it out (its name in the
    /// trace's string table), for blocks of `record --allocations
    /// --alloc-fn`; `None` for malloc's blocks and mappings.
    pub allocator: Option<u32>,
}

/// [`AllocationRecord::contains`] for a block known by its address and
/// size alone.
#[inline]
pub(crate) fn block_contains(address: u64, size: u64, addr: u64) -> bool {
    addr >= address && addr - address < size.max(1)
}

impl AllocationRecord {
    /// A block for tests: allocated at event and column `alloc`, freed at
    /// `free`.
    #[cfg(test)]
    pub(crate) fn test_block(kind: AllocKind, address: u64, size: u64, alloc: u64, free: Option<u64>) -> Self {
        AllocationRecord {
            kind,
            address,
            size,
            align: 0,
            callsite: 0,
            alloc_column: alloc,
            free_column: free,
            thread: 1,
            reads: 0,
            writes: 0,
            alloc_event: alloc,
            free_event: free,
            usable: 0,
            alloc_ns: None,
            free_ns: None,
            stack: None,
            allocator: None,
        }
    }

    /// Whether `addr` is inside the block (a 0-byte block holds its first
    /// address, so accesses to it are still attributed).
    pub fn contains(&self, addr: u64) -> bool {
        block_contains(self.address, self.size, addr)
    }

    /// One past its last address (saturating).
    pub fn end(&self) -> u64 {
        self.address.saturating_add(self.size.max(1))
    }

    /// Whether it is live at `column`.
    pub fn live_at(&self, column: u64) -> bool {
        self.alloc_column <= column && self.free_column.is_none_or(|f| column < f)
    }
}

/// Blocks by address, with the largest end address seen so far, so that a
/// lookup scans back only over blocks that can still reach the address.
#[derive(Clone, Debug, Default)]
pub struct AllocationIndex {
    /// Indices into the records, by start address.
    by_start: Vec<u32>,
    starts: Vec<u64>,
    /// `max_end[i]`: largest end among `by_start[..=i]`.
    max_end: Vec<u64>,
}

impl AllocationIndex {
    /// Indexes `records`.
    pub fn new(records: &[AllocationRecord]) -> AllocationIndex {
        // Sorted as (address, index) pairs, not indices looked up in the
        // records while sorting: a record is big, and those lookups missed
        // the cache (60% of building the index of a million blocks).
        let mut keyed: Vec<(u64, u32)> = records.iter().enumerate().map(|(i, r)| (r.address, i as u32)).collect();
        keyed.sort_unstable();
        let by_start: Vec<u32> = keyed.iter().map(|&(_, i)| i).collect();
        let starts = keyed.into_iter().map(|(a, _)| a).collect();
        let mut max_end = Vec::with_capacity(by_start.len());
        let mut m = 0u64;
        for &i in &by_start {
            m = m.max(records[i as usize].end());
            max_end.push(m);
        }
        AllocationIndex { by_start, starts, max_end }
    }

    /// The block holding `addr` at `column`: of several (a block reused
    /// after a free the trace did not see), the latest allocated.
    pub fn holding<'r>(&self, records: &'r [AllocationRecord], addr: u64, column: u64) -> Option<&'r AllocationRecord> {
        self.overlapping(records, addr, addr.saturating_add(1), column).max_by_key(|r| r.alloc_column)
    }

    /// Blocks live at `column` that overlap `[lo, hi)`.
    pub fn overlapping<'r, 's>(
        &'s self,
        records: &'r [AllocationRecord],
        lo: u64,
        hi: u64,
        column: u64,
    ) -> impl Iterator<Item = &'r AllocationRecord> + 's
    where
        'r: 's,
    {
        let upto = self.starts.partition_point(|&s| s < hi);
        (0..upto)
            .rev()
            .take_while(move |&j| self.max_end[j] > lo)
            .map(move |j| &records[self.by_start[j] as usize])
            .filter(move |r| r.end() > lo && r.live_at(column))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(address: u64, size: u64, alloc: u64, free: Option<u64>) -> AllocationRecord {
        AllocationRecord::test_block(AllocKind::Malloc, address, size, alloc, free)
    }

    #[test]
    fn finds_the_live_block_holding_an_address() {
        let records = vec![
            block(0x1000, 0x100, 0, Some(10)),
            block(0x1000, 0x80, 10, None),     // reused after the free
            block(0x0800, 0x2000, 5, Some(6)), // huge, short-lived
            block(0x3000, 0x10, 0, None),
        ];
        let index = AllocationIndex::new(&records);
        assert_eq!(index.holding(&records, 0x1010, 3).map(|r| r.size), Some(0x100));
        assert_eq!(index.holding(&records, 0x1010, 12).map(|r| r.size), Some(0x80));
        assert_eq!(index.holding(&records, 0x10f0, 12), None, "past the smaller reuse");
        assert_eq!(index.holding(&records, 0x2500, 5).map(|r| r.size), Some(0x2000));
        assert_eq!(index.holding(&records, 0x2500, 6), None, "freed at 6");
        assert_eq!(index.holding(&records, 0x300f, 99).map(|r| r.address), Some(0x3000));
        assert_eq!(index.overlapping(&records, 0x0f00, 0x1001, 0).count(), 1);
        // Against a scan, on a grid of addresses and columns.
        for addr in (0x700..0x3100).step_by(0x40) {
            for column in 0..14 {
                let scan =
                    records.iter().filter(|r| r.contains(addr) && r.live_at(column)).max_by_key(|r| r.alloc_column);
                assert_eq!(index.holding(&records, addr, column), scan, "{addr:#x} at {column}");
            }
        }
    }
}

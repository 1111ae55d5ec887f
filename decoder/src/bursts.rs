//! Allocation bursts: the periods in which a program allocates much
//! faster than it does on average, and the functions that did it.
//!
//! The run (from the first allocation to the last) is cut into
//! [`WINDOWS`] equal windows of time; a window whose allocations reach
//! [`FACTOR`] times the mean per window (and at least [`MIN_ALLOCATIONS`])
//! starts a burst, and adjacent such windows make one burst. A burst then
//! takes in the windows on either side that are still busier than twice
//! the median window (the program's usual pace), so that the start and the
//! tail of a burst that straddle a window edge are not cut off; and bursts
//! fewer than [`MERGE_GAP`] windows apart are one (on a busy machine a
//! thread is descheduled in the middle of its burst for a few
//! milliseconds: a gap, not a quiet period). Time is
//! the wall clock when the trace has it (`record --allocations`), else the
//! read column (a traced function's allocations): bursts of allocation per
//! memory read.

use serde::Serialize;

use crate::allocations::AllocationRecord;
use crate::heap::{SiteRow, is_heap_block, sites};
use crate::symbols::Symbolizer;

/// Windows the run is cut into.
pub const WINDOWS: u64 = 100;
/// A window is in a burst at this many times the mean allocations per
/// window.
pub const FACTOR: f64 = 3.0;
/// ... and with at least this many allocations.
pub const MIN_ALLOCATIONS: u64 = 8;
/// Bursts with fewer windows than this between them are one.
pub const MERGE_GAP: usize = 5;
/// Functions listed per burst.
const FUNCTIONS: usize = 3;

/// What the burst times count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// Nanoseconds (CLOCK_MONOTONIC) since the first allocation.
    #[default]
    Nanoseconds,
    /// Read columns since the first allocation.
    Columns,
}

/// One burst.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Burst {
    /// Start, in [`BurstReport::clock`] units from the first allocation.
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// Blocks allocated in it.
    pub allocations: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// Its share of all allocations.
    pub share: f64,
    /// The functions that allocated most in it, most blocks first.
    pub functions: Vec<SiteRow>,
}

/// The bursts of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BurstReport {
    /// What `start`, `end` and `window` count.
    pub clock: Clock,
    /// Length of a window.
    pub window: u64,
    /// Allocations a window needs to start a burst.
    pub threshold: u64,
    /// Allocations a window next to a burst needs to be part of it.
    pub edge_threshold: u64,
    /// The bursts, in time order.
    pub bursts: Vec<Burst>,
}

/// Finds the bursts among `records`' heap blocks.
pub fn bursts(records: &[AllocationRecord], symbols: &Symbolizer) -> BurstReport {
    let heap: Vec<&AllocationRecord> = records.iter().filter(|r| is_heap_block(r)).collect();
    let wall = !heap.is_empty() && heap.iter().all(|r| r.alloc_ns.is_some());
    let clock = if wall { Clock::Nanoseconds } else { Clock::Columns };
    let time = |r: &AllocationRecord| if wall { r.alloc_ns.unwrap_or(0) } else { r.alloc_column };
    let (Some(first), Some(last)) = (heap.iter().map(|r| time(r)).min(), heap.iter().map(|r| time(r)).max()) else {
        return BurstReport { clock, ..BurstReport::default() };
    };
    let window = ((last - first) / WINDOWS + 1).max(1);
    let mut counts = vec![0u64; WINDOWS as usize + 1];
    let slot = |r: &AllocationRecord| ((time(r) - first) / window) as usize;
    for r in &heap {
        counts[slot(r)] += 1;
    }
    let mean = heap.len() as f64 / WINDOWS as f64;
    let threshold = ((FACTOR * mean).ceil() as u64).max(MIN_ALLOCATIONS);
    let median = {
        let mut sorted = counts[..WINDOWS as usize].to_vec();
        sorted.sort_unstable();
        sorted[sorted.len() / 2]
    };
    let edge_threshold = (2 * median).max(MIN_ALLOCATIONS).min(threshold);
    let mut report = BurstReport { clock, window, threshold, edge_threshold, bursts: Vec::new() };
    // Spans of windows [from, to), found then merged across short gaps.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut w = 0;
    while w < counts.len() {
        if counts[w] < threshold {
            w += 1;
            continue;
        }
        let previous_end = spans.last().map_or(0, |s| s.1);
        let mut from = w;
        while from > previous_end && counts[from - 1] >= edge_threshold {
            from -= 1;
        }
        while w < counts.len() && counts[w] >= edge_threshold {
            w += 1;
        }
        match spans.last_mut() {
            Some(last) if from - last.1 < MERGE_GAP => last.1 = w,
            _ => spans.push((from, w)),
        }
    }
    for (from, to) in spans {
        let inside: Vec<&AllocationRecord> = heap.iter().copied().filter(|r| (from..to).contains(&slot(r))).collect();
        let mut functions = sites(&inside, symbols);
        functions.sort_by(|a, b| b.blocks.cmp(&a.blocks).then(b.bytes.cmp(&a.bytes)).then(a.function.cmp(&b.function)));
        functions.truncate(FUNCTIONS);
        report.bursts.push(Burst {
            start: from as u64 * window,
            end: to as u64 * window,
            allocations: inside.len() as u64,
            bytes: inside.iter().map(|r| r.size).sum(),
            share: inside.len() as f64 / heap.len() as f64,
            functions,
        });
    }
    report
}

#[cfg(test)]
mod tests {
    use trace_rt::format::AllocKind;

    use super::*;

    fn at(ns: u64) -> AllocationRecord {
        AllocationRecord { alloc_ns: Some(ns), ..AllocationRecord::test_block(AllocKind::Malloc, ns, 16, 0, None) }
    }

    /// 200 allocations, one every 1000 ns from 0 to 199000, plus 100 at
    /// 50000..50100 and 60 at 150000..150060: windows of 199000 / 100 + 1
    /// = 1991 ns, mean 3.6 a window, threshold ceil(3 x 3.6) = 11; the
    /// trickle gives about 2 a window, the two bursts 102 and 62 in one
    /// window each.
    #[test]
    fn bursts_stand_out_of_the_trickle() {
        let mut records: Vec<AllocationRecord> = (0..200).map(|i| at(i * 1000)).collect();
        records.extend((0..100).map(|i| at(50_000 + i)));
        records.extend((0..60).map(|i| at(150_000 + i)));
        let r = bursts(&records, &Symbolizer::new(&[]));
        assert_eq!((r.clock, r.window, r.threshold), (Clock::Nanoseconds, 1991, 11));
        let found: Vec<(u64, u64, u64)> = r.bursts.iter().map(|b| (b.start, b.end, b.allocations)).collect();
        // 50000 / 1991 = window 25 (49775..51766): trickle at 50000 and
        // 51000 plus the 100; 150000 / 1991 = 75 (149325..151316): 150000,
        // 151000 and the 60.
        assert_eq!(found, vec![(25 * 1991, 26 * 1991, 102), (75 * 1991, 76 * 1991, 62)]);
        assert_eq!(r.bursts[0].functions.len(), 1, "one function (unsymbolized) allocated all");
        assert_eq!(r.bursts[0].functions[0].blocks, 102);
    }

    /// A burst that spills over a window edge keeps its tail: the trickle
    /// gives 2 a window; 100 at 50000 make window 25 102; 6 at 52000 make
    /// window 26 (51766..53757) 8 with the trickle: below the threshold
    /// ceil(3 x 306 / 100) = 10, at the edge threshold max(2 x median 2,
    /// 8) = 8.
    #[test]
    fn a_burst_keeps_its_tail() {
        let mut records: Vec<AllocationRecord> = (0..200).map(|i| at(i * 1000)).collect();
        records.extend((0..100).map(|i| at(50_000 + i)));
        records.extend((0..6).map(|i| at(52_000 + i)));
        let r = bursts(&records, &Symbolizer::new(&[]));
        assert_eq!((r.window, r.threshold, r.edge_threshold), (1991, 10, 8));
        let found: Vec<(u64, u64, u64)> = r.bursts.iter().map(|b| (b.start, b.end, b.allocations)).collect();
        assert_eq!(found, vec![(25 * 1991, 27 * 1991, 102 + 8)]);
    }

    /// A burst interrupted for 3 windows (a descheduled thread) is one
    /// burst; 10 windows apart they are two.
    #[test]
    fn a_burst_with_a_short_gap_is_one() {
        let mut records: Vec<AllocationRecord> = (0..200).map(|i| at(i * 1000)).collect();
        records.extend((0..50).map(|i| at(50_000 + i)));
        records.extend((0..50).map(|i| at(50_000 + 4 * 1991 + i)));
        records.extend((0..50).map(|i| at(120_000 + i)));
        let r = bursts(&records, &Symbolizer::new(&[]));
        let found: Vec<(u64, u64)> = r.bursts.iter().map(|b| (b.start / 1991, b.end / 1991)).collect();
        assert_eq!(found, vec![(25, 30), (60, 61)]);
    }

    #[test]
    fn a_steady_rate_has_no_burst_and_no_blocks_no_report() {
        let steady: Vec<AllocationRecord> = (0..1000).map(|i| at(i * 10)).collect();
        assert!(bursts(&steady, &Symbolizer::new(&[])).bursts.is_empty());
        assert_eq!(bursts(&[], &Symbolizer::new(&[])).bursts, vec![]);
    }
}

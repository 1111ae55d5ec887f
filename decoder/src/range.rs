//! Statistics of a column range (the viewer's selection, a frame): the same
//! tables and locality metrics as for the whole trace, computed by replaying
//! the range.
//!
//! Within a range: reads and writes are those of the range's accesses (a
//! write between two reads belongs to the range of the read after it);
//! line fetches are insertions into the working set inside the range;
//! reuse distances are measured within the range (a line's first read in
//! the range is cold). A function's total counts the reads and writes made
//! while it was on the stack, recursion once.

use std::collections::HashMap;

use serde::Serialize;

use crate::DecodeError;
use crate::calltree::Inclusive;
use crate::cursor::{ColumnCursor, Step};
use crate::model::{Model, SiteCounts};
use crate::reuse::{ReuseDistance, ReuseHistogram};
use crate::symbols::Symbolizer;
use crate::tables::{AccessRow, Grouping, group_accesses};
use crate::working_set::{FetchCounter, HashedLines, LineObserver};

/// What a range's replay found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RangeStats {
    /// First column.
    pub from: u64,
    /// One past the last column.
    pub to: u64,
    /// Reads (columns).
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Lines inserted into the working set.
    pub line_fetches: u64,
    /// Mean bytes read per fetched line: of the lines that left during the
    /// range or were in the set at its end, what was read from them while
    /// in the set (before the range too).
    pub mean_bytes_read_per_fetch: f64,
    /// Mean distinct bytes read per fetched line.
    pub mean_distinct_bytes_per_fetch: f64,
    /// Distinct bytes per fetch / line size.
    pub utilisation: f64,
    /// Reuse distances within the range.
    pub reuse: ReuseHistogram,
    /// Reads of the range that missed the simulated D1, and LL (the
    /// simulation runs over the whole trace: caches are as warm as the
    /// reads before the range left them).
    pub d1_read_misses: u64,
    /// Reads of the range that missed the simulated LL.
    pub ll_read_misses: u64,
    /// By function, most reads first.
    pub by_function: Vec<AccessRow>,
    /// By source line.
    pub by_line: Vec<AccessRow>,
}

impl RangeStats {
    /// The whole trace's figures as decoding counted them, in the shape of
    /// a range's, for a stats panel before any range is selected: no replay
    /// (a range of the whole trace replays every column, which takes as
    /// long as decoding did). The tables are left empty.
    pub fn whole_trace(model: &Model) -> RangeStats {
        let m = &model.metrics;
        RangeStats {
            from: 0,
            to: model.columns,
            reads: model.total.reads,
            writes: model.total.writes,
            bytes_read: model.total.bytes_read,
            line_fetches: m.line_fetches,
            mean_bytes_read_per_fetch: m.mean_bytes_read_per_fetch,
            mean_distinct_bytes_per_fetch: m.mean_distinct_bytes_per_fetch,
            utilisation: m.utilisation,
            reuse: m.reuse.clone(),
            d1_read_misses: model.cache.misses.d1_read,
            ll_read_misses: model.cache.misses.ll_read,
            by_function: Vec::new(),
            by_line: Vec::new(),
        }
    }
}

/// Replays columns `[from, to)` of `model` and sums them. `progress(done,
/// all)` may stop it by returning false.
pub fn range_stats(
    model: &Model,
    symbols: &Symbolizer,
    from: u64,
    to: u64,
    progress: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<RangeStats, DecodeError> {
    let to = to.min(model.columns);
    let from = from.min(to);
    let line_size = model.line_size();
    let mut cursor = ColumnCursor::<HashedLines>::with_calls(model, from)?;
    let mut counts = vec![SiteCounts::default(); model.sites.len()];
    let mut functions: HashMap<u64, Inclusive> = HashMap::new();
    let mut fetches = FetchCounter::default();
    let mut reuse = ReuseDistance::new();
    let mut stats = RangeStats { from, to, ..RangeStats::default() };
    let mut seen: Vec<u64> = Vec::new();
    // A write's column is the read after it: a range stops before the
    // writes that follow its last read, unless it ends the trace (the
    // writes after the trace's last read are in no other range).
    let to_the_end = to == model.columns;
    while cursor.column() < to || to_the_end {
        let Some(step) = cursor.next_access(&mut fetches)? else { break };
        let (thread, access) = match step {
            Step::Read(r) => (r.thread, r.access),
            Step::Write { thread, access } => (thread, access),
        };
        let c = &mut counts[access.site as usize];
        let (first, last) = line_size.lines(access.addr, access.size);
        if access.reads {
            c.reads += 1;
            c.bytes_read += access.size;
            stats.reads += 1;
            stats.bytes_read += access.size;
            for line in first..=last {
                reuse.access(line, 0);
            }
            if stats.reads.is_multiple_of(1 << 16) && !progress(stats.reads, to - from) {
                return Err(DecodeError::Cancelled);
            }
        }
        if access.writes {
            c.writes += 1;
            stats.writes += 1;
        }
        // Every function on the stack, once (recursion).
        seen.clear();
        if let Some(calls) = cursor.calls() {
            for f in calls.open_functions(thread) {
                if !seen.contains(&f) {
                    seen.push(f);
                    let e = functions.entry(f).or_default();
                    e.reads += u64::from(access.reads);
                    e.writes += u64::from(access.writes);
                }
            }
        }
    }
    // Lines still in the set at the range's end count as lines that left,
    // with what was read from them so far, as decoding counts the set at
    // the trace's end ([`RangeStats::whole_trace`]). Counted from the lines
    // that left only, a range in which none left (a working set that
    // fits) showed 0 bytes read a fetch and 0% utilisation.
    cursor.set_mut().drain(|d| fetches.departed(&d.state));
    stats.line_fetches = fetches.inserted;
    (stats.mean_bytes_read_per_fetch, stats.mean_distinct_bytes_per_fetch) = fetches.means();
    stats.utilisation = fetches.utilisation(line_size.bytes());
    stats.reuse = reuse.histogram().clone();
    (stats.d1_read_misses, stats.ll_read_misses) = model.cache.columns.count(from, to);
    stats.by_function = group_accesses(&model.sites, &counts, functions.into_iter(), symbols, Grouping::Function);
    stats.by_line = group_accesses(&model.sites, &counts, std::iter::empty(), symbols, Grouping::Line);
    Ok(stats)
}

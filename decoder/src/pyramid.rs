//! The multi-resolution summary of the bitmap, built while decoding: level
//! 0 holds one [`Span`] per block of `2^shift` columns, each coarser level
//! merges pairs of the level below as they come (above a very large level
//! 0, level 1 is left out once level 2 is made from it). Drawing a column
//! range at W pixels reads the level whose blocks are about a pixel wide:
//! O(W x rows), whatever the trace's length — no replay for a whole-trace
//! view.
//!
//! Cells are stored quantized (6 bytes per block and row). Level 0 holds at
//! most [`MAX_LEVEL0_CELLS`] cells: when a trace would need more, blocks
//! double in width (as the working-set snapshots do). When level 0 is that
//! large, the level of twice its width is left out
//! ([`SKIP_SECOND_LEVEL_CELLS`]), so the summary of any trace stays within
//! about 300 MB (200 MB of level 0, half as much in the coarser levels;
//! 225 MB for 100M reads of 512 rows).

use crate::spans::{CellMeans, RowMerger, Span, SpanRow};

/// Most cells (blocks x rows) level 0 keeps before its blocks double.
/// 2^24: a 100M-read trace of 512 rows keeps blocks of 4,096 columns (96
/// MiB of level 0 at most).
///
/// Every block is a span closed on the decoding pass's working-set thread,
/// its busiest, and closing one costs the same whatever its width: a pass
/// over every row (the rows' fill, the quantized cells, the merges into
/// the levels above) and a sort of the lines present. So the wider the
/// blocks, the less of that thread's time goes to them:
/// - 2^26 -> 2^25 (blocks of 1,024 -> 2,048 on the 100M-read view-bench
///   trace): that thread's CPU 6.9-8.3 s -> 5.3-6.4 s (3 alternating
///   rounds); the whole decode 9.3-10.4 s -> 7.7-8.8 s (4 more, faster in
///   each), peak RSS 562-564 -> 347-350 MiB.
/// - 2^25 -> 2^24, counted in instructions (`valgrind --tool=callgrind`,
///   the same on a host whose speed drifts by half from run to run), on
///   that pattern's 20M-read trace (blocks of 512 -> 1,024): the
///   working-set thread 17.4G -> 10.4G instructions, the whole pass
///   40.9G -> 33.8G; closing a block costs about 300,000 of them. On the
///   100M-read trace (2,048 -> 4,096), 6 alternating rounds, faster in 5:
///   median 10.07 -> 9.40 s, user CPU 19.4 -> 18.1 s, peak RSS 333 -> 259
///   MiB.
///
/// The cost is a coarser summary. A view of fewer columns a pixel than
/// level 0's blocks replays its range, unless the viewer summarized the
/// range at rest first ([`crate::range_summary`]). On the 100M-read trace
/// at 3,600 columns a pixel (`cargo bench --bench decode -- --draw`, 4
/// pictures): 272-412 ms replayed, 41-49 ms from the summary made at rest
/// (0.73-0.99 s), where blocks of 2,048 drew it from level 0 in 39-41 ms.
/// The widest view replayed is just under level 0's width a pixel: 7.9M
/// columns at 1,920 pixels (at 2^25, 3.46M columns at 1,802 columns a
/// pixel took 193-223 ms; at 2^26, 97-151 ms).
pub const MAX_LEVEL0_CELLS: usize = 1 << 24;
/// Level-0 cells above which the level of twice level 0's width is left
/// out (the next is four times as wide): its blocks are made, for level 2,
/// and not kept. Level 0 is then most of the summary's memory, and the
/// level above it half as much again; without it, a view of 2 to 4 blocks
/// a pixel merges that many level-0 blocks a pixel, which costs less than
/// the replay a missing finer level would. With the default
/// [`MAX_LEVEL0_CELLS`], no larger, level 0 reaches it only when a trace
/// turns out longer than decoding expected, just before its blocks double:
/// otherwise every level is kept.
pub const SKIP_SECOND_LEVEL_CELLS: usize = 1 << 24;
/// Width of level-0 blocks to start with: `2^9` columns. They double for
/// long traces: when level 0 would pass [`MAX_LEVEL0_CELLS`], and early,
/// when decoding expects the trace to ([`PyramidBuilder::expect`]), so a
/// long trace does not close twice as many spans as it keeps for most of
/// its length. A view of fewer columns a pixel than level 0's blocks is
/// drawn by replaying the working set: with blocks of 1,024 columns, the
/// zoom step of a 10M-read trace at 721 columns a pixel replayed 1.4M
/// columns, 149-175 ms to the sharp picture; drawn from blocks of 512,
/// 62-67 ms (two viewer sessions each, `view --bench-json`).
pub const FIRST_SHIFT: u32 = 9;

/// One row of one block, quantized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SummaryCell {
    /// Occupancy, `0..=65535` for 0..1.
    pub occupancy: u16,
    /// Means of the colour terms, `0..=255` for 0..1.
    pub fresh: u8,
    /// See [`CellMeans::fresh_bytes`].
    pub fresh_bytes: u8,
    /// See [`CellMeans::fresh_distinct`].
    pub fresh_distinct: u8,
    /// See [`CellMeans::tint`].
    pub tint: u8,
}

/// `0..1` to `0..=255`, rounded (adding one half: `f64::round` is a
/// library call, and this runs for every summary cell). No clamp: Rust's
/// float-to-integer casts saturate (and make NaN 0), which is what
/// clamping to `0..1` first gave.
fn q8(v: f64) -> u8 {
    (v * 255.0 + 0.5) as u8
}

impl SummaryCell {
    /// Quantizes a span row.
    pub fn from_row(r: &SpanRow) -> SummaryCell {
        SummaryCell {
            occupancy: (r.occupancy * 65535.0 + 0.5) as u16,
            fresh: q8(r.means.fresh),
            fresh_bytes: q8(r.means.fresh_bytes),
            fresh_distinct: q8(r.means.fresh_distinct),
            tint: q8(r.means.tint),
        }
    }

    /// Back to a span row. (Multiplying by reciprocals: a division costs
    /// several multiplications, and every coarser level converts each cell
    /// of the level below; the last-bit difference does not survive
    /// quantizing again.)
    pub fn row(&self) -> SpanRow {
        const PER_U16: f64 = 1.0 / 65535.0;
        const PER_U8: f64 = 1.0 / 255.0;
        SpanRow {
            occupancy: f64::from(self.occupancy) * PER_U16,
            means: CellMeans {
                fresh: f64::from(self.fresh) * PER_U8,
                fresh_bytes: f64::from(self.fresh_bytes) * PER_U8,
                fresh_distinct: f64::from(self.fresh_distinct) * PER_U8,
                tint: f64::from(self.tint) * PER_U8,
            },
        }
    }
}

/// One level: blocks of `2^shift` columns (the last one may be shorter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Level {
    /// Block width as a power of two.
    pub shift: u32,
    /// `offsets[i]..offsets[i + 1]` are block `i`'s cells.
    offsets: Vec<u32>,
    cells: Vec<SummaryCell>,
}

impl Level {
    fn new(shift: u32) -> Level {
        Level { shift, offsets: vec![0], cells: Vec::new() }
    }

    /// Number of blocks.
    pub fn blocks(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The rows of block `i`, row 0 first.
    pub fn block(&self, i: usize) -> &[SummaryCell] {
        &self.cells[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    pub(crate) fn push(&mut self, rows: impl IntoIterator<Item = SummaryCell>) {
        self.cells.extend(rows);
        self.offsets.push(self.cells.len() as u32);
    }

    /// An empty level with room for `blocks` blocks of `cells` cells in
    /// all: filled to that, it never grows into twice what it holds.
    pub(crate) fn with_capacity(shift: u32, blocks: usize, cells: usize) -> Level {
        let mut offsets = Vec::with_capacity(blocks + 1);
        offsets.push(0);
        Level { shift, offsets, cells: Vec::with_capacity(cells) }
    }

    /// Cells stored.
    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    /// The last block's rows.
    fn last_block(&self) -> &[SummaryCell] {
        self.blocks().checked_sub(1).map_or(&[], |i| self.block(i))
    }
}

/// Cells of a level of `2^shift`-column blocks over `columns` columns of
/// `rows` rows.
fn expected_cells(columns: u64, rows: u32, shift: u32) -> u64 {
    columns.div_ceil(1 << shift).saturating_mul(u64::from(rows.max(1)))
}

/// Reserves the room `level` is expected to need for `columns` columns of
/// `rows` rows ([`crate::reserve::for_estimate`]), if its blocks
/// are at least as wide as level 0's are to be (`2^wanted_shift`; finer
/// ones are on their way out). At most what the level can hold: level 0's
/// limit and a block, halved for each doubling of the width.
fn reserve_expected(level: &mut Level, (columns, rows): (u64, u32), wanted_shift: u32, max_level0_cells: usize) {
    let Some(doublings) = level.shift.checked_sub(wanted_shift) else { return };
    let most = (max_level0_cells as u64 >> doublings.min(63)) + u64::from(rows);
    let expected = expected_cells(columns, rows, level.shift);
    crate::reserve::for_estimate(&mut level.cells, expected as usize, most as usize);
}

/// The summary: level 0 finest.
#[derive(Clone, Debug, Default)]
pub struct BitmapPyramid {
    /// Levels, finest first. Block widths double from one level to the
    /// next, except that the second may be four times the first's
    /// ([`SKIP_SECOND_LEVEL_CELLS`]); [`BitmapPyramid::level_for`] picks.
    pub levels: Vec<Level>,
    /// Columns summarized.
    pub columns: u64,
}

impl BitmapPyramid {
    /// The coarsest level whose blocks are at most `columns_per_pixel`
    /// wide, if any level is that fine.
    pub fn level_for(&self, columns_per_pixel: f64) -> Option<&Level> {
        self.levels.iter().rev().find(|l| (1u64 << l.shift) as f64 <= columns_per_pixel)
    }

    /// Width of level-0 blocks in columns (0 when there are none).
    pub fn finest_block(&self) -> u64 {
        self.levels.first().map(|l| 1u64 << l.shift).unwrap_or(0)
    }

    /// Cells stored in every level.
    pub fn cells(&self) -> usize {
        self.levels.iter().map(Level::cells).sum()
    }
}

/// The summary as far as decoding has got, for a picture before the trace
/// is decoded: the blocks so far of one of the pyramid's levels, shared
/// with the decoding thread. At most one more than [`PREVIEW_BLOCKS`] of
/// them: past that, the preview moves to the level above (a preview
/// picture is a window wide), so it never holds a second copy of level 0.
///
/// And, once asked for ([`Preview::want_heap`]), copies of the heap
/// blocks decoded so far now and then ([`HeapSoFar`]).
#[derive(Debug, Default)]
pub struct Preview {
    inner: std::sync::Mutex<PreviewState>,
    wants_heap: std::sync::atomic::AtomicBool,
    heap: std::sync::Mutex<Option<HeapSoFar>>,
}

/// The allocation records decoded so far, for the allocations view's
/// picture before the trace is decoded.
#[derive(Clone, Debug)]
pub struct HeapSoFar {
    /// The records, as they were then: blocks freed later are still live.
    pub records: std::sync::Arc<[crate::allocations::AllocationRecord]>,
    /// Allocation events so far: the length of their time axis.
    pub events: u64,
    /// Which copy this is (1, 2, ...): each replaces the one before.
    pub serial: u32,
}

/// Most blocks a [`Preview`] keeps.
pub const PREVIEW_BLOCKS: usize = 4096;

/// A copy of the preview's state.
#[derive(Clone, Debug, Default)]
pub struct PreviewState {
    /// Width of the blocks (it doubles for very long traces).
    pub block_width: u64,
    /// Blocks decoded so far, row 0 first. Shared, not copied, with each
    /// copy of the state: a copy for each preview picture is made under
    /// the lock the decoder's pushes wait on.
    pub blocks: Vec<std::sync::Arc<[SummaryCell]>>,
    /// Bytes of the trace file read so far, and in all.
    pub bytes: (u64, u64),
}

impl Preview {
    fn lock(&self) -> std::sync::MutexGuard<'_, PreviewState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state now.
    pub fn state(&self) -> PreviewState {
        self.lock().clone()
    }

    /// Blocks decoded so far (cheap: no copy).
    pub fn blocks(&self) -> usize {
        self.lock().blocks.len()
    }

    /// Columns decoded so far (in whole preview blocks).
    pub fn columns(&self) -> u64 {
        let state = self.lock();
        state.blocks.len() as u64 * state.block_width
    }

    /// Asks the decoder for copies of the heap blocks so far (they cost a
    /// copy of the records each: a view that draws no heap does not ask).
    pub fn want_heap(&self) {
        self.wants_heap.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn wants_heap(&self) -> bool {
        self.wants_heap.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The latest copy of the heap blocks so far, if one was made.
    pub fn heap(&self) -> Option<HeapSoFar> {
        self.heap.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn show_heap(&self, heap: HeapSoFar) {
        *self.heap.lock().unwrap_or_else(|e| e.into_inner()) = Some(heap);
    }

    pub(crate) fn set_bytes(&self, done: u64, total: u64) {
        self.lock().bytes = (done, total);
    }

    /// Shows the blocks of `level` made so far (a level's or the width's
    /// first time).
    fn show_level(&self, level: &Level) {
        let mut state = self.lock();
        state.block_width = 1 << level.shift;
        state.blocks = (0..level.blocks()).map(|i| level.block(i).into()).collect();
    }

    /// Adds the next block of the level shown.
    fn add(&self, block: &[SummaryCell]) {
        self.lock().blocks.push(block.into());
    }
}

/// A level above level 0, made while decoding: the blocks of the level
/// below are merged in pairs as they come, while they are still in the
/// CPU's caches, and the decoding preview shows one of these levels. (Merged
/// from level 0 when decoding ended, the levels of a 100M-read trace's
/// summary took 0.39 s of both cores with nothing else to run, and the
/// preview merged every level-0 block a second time: decoding the benchmark
/// trace with a preview took 6.09 s, and 5.96 s so, in 5 alternating runs.)
#[derive(Debug)]
struct RisingLevel {
    /// Its blocks, when kept (see [`RisingLevel::keep`]).
    level: Level,
    /// Whether its blocks are kept. Only level 1's ever stop being kept:
    /// above a large level 0 it is left out of the pyramid
    /// ([`SKIP_SECOND_LEVEL_CELLS`]), and it still makes level 2's.
    keep: bool,
    /// The pair being merged.
    merger: RowMerger,
    /// Blocks of the level below in `merger` (0 or 1).
    pending: u32,
    /// Blocks made, kept or not.
    made: usize,
    /// The last block made, when blocks are not kept.
    last: Vec<SummaryCell>,
}

impl RisingLevel {
    fn new(shift: u32) -> RisingLevel {
        RisingLevel {
            level: Level::new(shift),
            keep: true,
            merger: RowMerger::default(),
            pending: 0,
            made: 0,
            last: Vec::new(),
        }
    }

    /// Adds the next block of the level below, `width` columns wide;
    /// returns the width of the block this completes, if it does.
    fn add(&mut self, block: &[SummaryCell], width: f64) -> Option<f64> {
        self.merger.add(block.iter().map(SummaryCell::row), width);
        self.pending += 1;
        (self.pending == 2).then(|| self.complete())
    }

    /// Makes a block of what is pending (a short group at the end);
    /// returns its width.
    fn complete(&mut self) -> f64 {
        let width = self.merger.width();
        let rows = self.merger.finish().iter().map(SummaryCell::from_row);
        if self.keep {
            self.level.push(rows);
        } else {
            self.last.clear();
            self.last.extend(rows);
        }
        self.merger.clear();
        self.pending = 0;
        self.made += 1;
        width
    }

    /// The last block made.
    fn last_block(&self) -> &[SummaryCell] {
        if self.keep { self.level.last_block() } else { &self.last }
    }

    /// Stops keeping blocks (they are made still, for the level above).
    fn drop_blocks(&mut self) {
        if self.keep {
            self.last = self.level.last_block().to_vec();
            self.level = Level::new(self.level.shift);
            self.keep = false;
        }
    }
}

/// Builds level 0 from spans of whole blocks, and the coarser levels as
/// level 0 grows.
pub struct PyramidBuilder {
    level0: Level,
    /// Levels 1, 2, ...: `rising[k]` merges the blocks of level `k`.
    rising: Vec<RisingLevel>,
    /// Columns of level 0's last block (the last span may be short).
    last_width: u64,
    /// The preview, and the level it shows.
    preview: Option<(std::sync::Arc<Preview>, usize)>,
    limits: Limits,
    /// Block width (as a shift) level 0 doubles to as soon as it can: what
    /// the trace's expected length needs ([`PyramidBuilder::expect`]).
    wanted_shift: u32,
    /// The expected length, columns and rows, if told.
    expected: Option<(u64, u32)>,
}

/// Level-0 sizes at which the pyramid's shape changes.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// See [`MAX_LEVEL0_CELLS`].
    max_level0_cells: usize,
    /// See [`SKIP_SECOND_LEVEL_CELLS`].
    skip_second_level_cells: usize,
}

impl Default for PyramidBuilder {
    fn default() -> Self {
        PyramidBuilder {
            level0: Level::new(FIRST_SHIFT),
            rising: Vec::new(),
            last_width: 0,
            preview: None,
            limits: Limits { max_level0_cells: MAX_LEVEL0_CELLS, skip_second_level_cells: SKIP_SECOND_LEVEL_CELLS },
            wanted_shift: FIRST_SHIFT,
            expected: None,
        }
    }
}

impl PyramidBuilder {
    /// Width of the blocks the next spans must have.
    pub fn block_width(&self) -> u64 {
        1 << self.level0.shift
    }

    /// A builder that also shows its blocks in `preview` as they come.
    pub fn with_preview(preview: std::sync::Arc<Preview>) -> Self {
        preview.show_level(&Level::new(FIRST_SHIFT));
        PyramidBuilder { preview: Some((preview, 0)), ..PyramidBuilder::default() }
    }

    /// The trace is expected to have `columns` columns of up to `rows`
    /// rows: level 0 doubles (at its next even block) to the narrowest
    /// blocks whose cells for that many columns stay within
    /// [`MAX_LEVEL0_CELLS`], as it would once it got there. An estimate
    /// too short costs nothing but the later doubling; one too long, a
    /// coarser level 0 than the trace needed.
    ///
    /// Memory, not only time: pages the summary writes for the first time
    /// are much of decoding's cost (2-9 us each on this project's
    /// machines, a fifth of a 10M-read trace's `render`). So the kept
    /// levels reserve the room they are expected to need, which spares
    /// the copies of growing them by doubling, and when level 0 is
    /// expected to be large, the level above it is left out from here on
    /// ([`SKIP_SECOND_LEVEL_CELLS`]) rather than once level 0 gets there.
    pub fn expect(&mut self, columns: u64, rows: u32) {
        let mut shift = self.wanted_shift.max(self.level0.shift);
        while shift < 63 && expected_cells(columns, rows, shift) > self.limits.max_level0_cells as u64 {
            shift += 1;
        }
        self.wanted_shift = shift;
        self.expected = Some((columns, rows));
        let levels =
            std::iter::once(&mut self.level0).chain(self.rising.iter_mut().filter(|r| r.keep).map(|r| &mut r.level));
        for level in levels {
            reserve_expected(level, (columns, rows), shift, self.limits.max_level0_cells);
        }
    }

    /// Whether level 0 is expected to outgrow [`SKIP_SECOND_LEVEL_CELLS`].
    fn expects_large_level0(&self) -> bool {
        self.expected.is_some_and(|(columns, rows)| {
            expected_cells(columns, rows, self.wanted_shift) > self.limits.skip_second_level_cells as u64
        })
    }

    /// Adds the span of the next block (the last may be shorter); its
    /// width is its columns, `start..end`.
    pub fn push(&mut self, span: &Span) {
        self.level0.push(span.rows.iter().map(SummaryCell::from_row));
        self.last_width = span.end.saturating_sub(span.start);
        self.made(0, self.last_width as f64);
        let too_fine = self.level0.cells() > self.limits.max_level0_cells || self.level0.shift < self.wanted_shift;
        if too_fine && self.level0.blocks().is_multiple_of(2) {
            self.double_level0();
        }
        if (self.level0.cells() > self.limits.skip_second_level_cells || self.expects_large_level0())
            && self.preview.as_ref().is_none_or(|(_, shown)| *shown >= 2)
            && let Some(level1) = self.rising.first_mut()
        {
            level1.drop_blocks();
        }
    }

    /// The level `k` (0: level 0) made a block `width` columns wide: shows
    /// it, and merges it into the levels above.
    fn made(&mut self, mut k: usize, mut width: f64) {
        loop {
            if self.rising.len() == k {
                let mut level = RisingLevel::new(self.level0.shift + k as u32 + 1);
                if let Some(expected) = self.expected {
                    reserve_expected(&mut level.level, expected, self.wanted_shift, self.limits.max_level0_cells);
                }
                self.rising.push(level);
            }
            let (below, above) = self.rising.split_at_mut(k);
            let (block, made) = match below.last() {
                Some(level) => (level.last_block(), level.made),
                None => (self.level0.last_block(), self.level0.blocks()),
            };
            if let Some((preview, shown)) = &mut self.preview
                && *shown == k
            {
                preview.add(block);
                if made > PREVIEW_BLOCKS {
                    // The level above holds this one's pairs so far (the
                    // last block waits for its pair, added just below).
                    *shown += 1;
                    preview.show_level(&above[0].level);
                }
            }
            let Some(merged) = above[0].add(block, width) else { return };
            (k, width) = (k + 1, merged);
        }
    }

    /// Level 0 over [`MAX_LEVEL0_CELLS`] (with an even number of blocks):
    /// its pairs become level 0, and the levels above move down one.
    fn double_level0(&mut self) {
        if self.rising.is_empty() {
            return;
        }
        let level1 = self.rising.remove(0);
        self.level0 = if level1.keep {
            level1.level
        } else {
            // Merged again from level 0: its blocks are whole but maybe the
            // last (the trace's last span).
            let mut pairs = RisingLevel::new(level1.level.shift);
            let last = self.level0.blocks().saturating_sub(1);
            for i in 0..self.level0.blocks() {
                let width = if i == last { self.last_width } else { self.block_width() };
                pairs.add(self.level0.block(i), width as f64);
            }
            pairs.level
        };
        // Made again, or left without its blocks: its room is reserved
        // now, or it would grow by copies.
        if let Some(expected) = self.expected {
            reserve_expected(&mut self.level0, expected, self.wanted_shift, self.limits.max_level0_cells);
        }
        if let Some((preview, shown)) = &mut self.preview {
            if *shown == 0 {
                preview.show_level(&self.level0);
            } else {
                *shown -= 1;
            }
        }
    }

    /// The summary of `columns` columns.
    pub fn finish(mut self, columns: u64) -> BitmapPyramid {
        if self.level0.blocks() == 0 {
            return BitmapPyramid { levels: Vec::new(), columns };
        }
        // Level 1 is left out when level 0 is large, or was expected to
        // be and its blocks are gone.
        let level1_gone = self.rising.first().is_some_and(|l| !l.keep);
        let skip =
            (self.level0.cells() > self.limits.skip_second_level_cells || level1_gone) && self.level0.blocks() > 1;
        // Short groups are merged as they are, bottom up, for as long as
        // the level below has more than one block: the coarsest level is
        // one block. (When level 1 is left out, level 2 is made all the
        // same.)
        let mut top = 0;
        loop {
            let blocks = if top == 0 { self.level0.blocks() } else { self.rising[top - 1].made };
            if blocks <= 1 && !(skip && top == 1) {
                break;
            }
            if self.rising[top].pending > 0 {
                let width = self.rising[top].complete();
                self.made(top + 1, width);
            }
            top += 1;
        }
        self.rising.truncate(top);
        let mut levels = vec![self.level0];
        levels.extend(self.rising.into_iter().enumerate().filter(|&(k, _)| !(skip && k == 0)).map(|(_, r)| r.level));
        BitmapPyramid { levels, columns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span of `columns` columns (the tests push them in order, so
    /// where they start does not matter).
    fn span_of(occ: &[f64], fresh: f64, columns: u64) -> Span {
        Span {
            start: 0,
            end: columns,
            rows: occ
                .iter()
                .map(|&o| SpanRow { occupancy: o, means: CellMeans { fresh, ..CellMeans::default() } })
                .collect(),
        }
    }

    /// A whole level-0 block.
    fn span(occ: &[f64], fresh: f64) -> Span {
        span_of(occ, fresh, 1 << FIRST_SHIFT)
    }

    fn with_limits(max_level0_cells: usize, skip_second_level_cells: usize) -> PyramidBuilder {
        PyramidBuilder { limits: Limits { max_level0_cells, skip_second_level_cells }, ..PyramidBuilder::default() }
    }

    /// Before block `at` is pushed, the trace is expected to have
    /// `columns` columns of `rows` rows ([`PyramidBuilder::expect`]).
    #[derive(Clone, Copy, Debug)]
    struct Expectation {
        at: usize,
        columns: u64,
        rows: u32,
    }

    /// The slow reference: level 0 as the builder keeps it (its blocks
    /// doubled as the builder doubles them, and to the width an
    /// expectation asks for), then each level merged in pairs from the
    /// one below once everything is in, and level 1 left out above a
    /// large level 0.
    fn reference(spans: &[Span], limits: Limits, expectation: Option<Expectation>) -> Vec<Level> {
        let pairs = |below: &Level, columns: u64| {
            let width = 1u64 << below.shift;
            let mut up = Level::new(below.shift + 1);
            for g in 0..below.blocks().div_ceil(2) {
                let mut merger = RowMerger::default();
                for i in 2 * g..(2 * g + 2).min(below.blocks()) {
                    let w = width.min(columns - i as u64 * width) as f64;
                    merger.add(below.block(i).iter().map(SummaryCell::row), w);
                }
                up.push(merger.finish().iter().map(SummaryCell::from_row));
            }
            up
        };
        let mut level0 = Level::new(FIRST_SHIFT);
        let mut columns = 0;
        let mut wanted = FIRST_SHIFT;
        let mut expected_large = false;
        for (i, span) in spans.iter().enumerate() {
            if let Some(e) = expectation.filter(|e| e.at == i) {
                let cells =
                    |s: u32| (e.columns / (1 << s) + u64::from(e.columns % (1 << s) != 0)) * u64::from(e.rows.max(1));
                // The narrowest blocks, by trying each width in turn.
                wanted = (level0.shift..64).find(|&s| cells(s) <= limits.max_level0_cells as u64).unwrap_or(63);
                expected_large = cells(wanted) > limits.skip_second_level_cells as u64;
            }
            level0.push(span.rows.iter().map(SummaryCell::from_row));
            columns += span.end - span.start;
            let too_fine = level0.cells() > limits.max_level0_cells || level0.shift < wanted;
            if too_fine && level0.blocks().is_multiple_of(2) {
                level0 = pairs(&level0, columns);
            }
        }
        if level0.blocks() == 0 {
            return Vec::new();
        }
        let skip = (level0.cells() > limits.skip_second_level_cells || expected_large) && level0.blocks() > 1;
        let mut levels = vec![level0];
        while let Some(last) = levels.last().filter(|l| l.blocks() > 1 || (skip && levels.len() == 2)) {
            let next = pairs(last, columns);
            levels.push(next);
        }
        if skip {
            levels.remove(1);
        }
        levels
    }

    /// Spans as the decoder makes them: whole blocks of the builder's
    /// width when each is pushed, the last `last_part` of one.
    fn push_all(builder: &mut PyramidBuilder, rows: &[Vec<(f64, f64)>], last_part: f64) -> Vec<Span> {
        push_expecting(builder, rows, last_part, None)
    }

    /// [`push_all`], telling the builder of `expectation`.
    fn push_expecting(
        builder: &mut PyramidBuilder,
        rows: &[Vec<(f64, f64)>],
        last_part: f64,
        expectation: Option<Expectation>,
    ) -> Vec<Span> {
        let mut spans = Vec::new();
        for (i, block) in rows.iter().enumerate() {
            if let Some(e) = expectation.filter(|e| e.at == i) {
                builder.expect(e.columns, e.rows);
            }
            let width = builder.block_width();
            let columns = if i + 1 == rows.len() { ((width as f64 * last_part) as u64).max(1) } else { width };
            let mut span = span_of(&[], 0.0, columns);
            span.rows = block
                .iter()
                .map(|&(occupancy, fresh)| SpanRow {
                    occupancy,
                    means: CellMeans { fresh, tint: fresh / 2.0, ..CellMeans::default() },
                })
                .collect();
            builder.push(&span);
            spans.push(span);
        }
        spans
    }

    proptest::proptest! {
        /// The levels made as level 0 grows are the levels merged from it
        /// at the end, cell for cell: with short last blocks, blocks of
        /// different heights, level 0 doubling its blocks and level 1 left
        /// out (limits small enough to reach), and when decoding expects a
        /// length early on (level 0 then doubles to the width that length
        /// needs at its next even block).
        #[test]
        fn levels_made_while_decoding_are_the_levels_merged_at_the_end(
            rows in proptest::collection::vec(proptest::collection::vec((0.0..=1.0f64, 0.0..=1.0f64), 0..6), 0..70),
            last_part in 0.01..=1.0f64,
            max_level0_cells in 8usize..200,
            skip_second_level_cells in 4usize..200,
            expected in proptest::option::of((0usize..20, 0u64..400, 0u32..8)),
        ) {
            let limits = Limits { max_level0_cells, skip_second_level_cells };
            let expectation =
                expected.map(|(at, blocks, rows)| Expectation { at, columns: blocks << FIRST_SHIFT, rows });
            let mut builder = with_limits(max_level0_cells, skip_second_level_cells);
            let spans = push_expecting(&mut builder, &rows, last_part, expectation);
            let columns = spans.iter().map(|s| s.end - s.start).sum();
            proptest::prop_assert_eq!(builder.finish(columns).levels, reference(&spans, limits, expectation));
        }
    }

    /// A long decoding's preview keeps at most PREVIEW_BLOCKS + 1 blocks,
    /// and they are the pyramid's blocks of that width, also for the
    /// blocks pushed after it moved to a coarser level.
    #[test]
    fn the_preview_holds_the_pyramid_level_of_its_width() {
        let preview = std::sync::Arc::new(Preview::default());
        let mut builder = PyramidBuilder::with_preview(preview.clone());
        let blocks = 10_001u64;
        for i in 0..blocks {
            let occupancy = [1.0, (i % 7) as f64 / 7.0, (i % 3) as f64 / 3.0];
            builder.push(&span(&occupancy[..1 + (i % 3) as usize], (i % 13) as f64 / 13.0));
            let state = preview.state();
            assert!(state.blocks.len() <= PREVIEW_BLOCKS + 1, "{} blocks after {i}", state.blocks.len());
            assert_eq!(preview.columns(), state.blocks.len() as u64 * state.block_width);
        }
        let state = preview.state();
        let pyramid = builder.finish(blocks << FIRST_SHIFT);
        assert_eq!(state.block_width, 4 << FIRST_SHIFT, "moved up twice");
        assert_eq!(state.blocks.len(), 2500, "the last block waits for its fourth part");
        let level = pyramid.levels.iter().find(|l| 1u64 << l.shift == state.block_width).expect("level");
        for (i, block) in state.blocks.iter().enumerate() {
            assert_eq!(**block, *level.block(i), "block {i}");
        }
    }

    /// When level 0's blocks double, the preview shows the new level 0's
    /// blocks (it was showing level 0). Above a large level 0, level 1's
    /// blocks are still kept while the preview may move to them.
    #[test]
    fn the_preview_follows_level_0_when_its_blocks_double() {
        let preview = std::sync::Arc::new(Preview::default());
        let mut builder = PyramidBuilder {
            limits: Limits { max_level0_cells: 30, skip_second_level_cells: 20 },
            ..PyramidBuilder::with_preview(preview.clone())
        };
        let rows: Vec<Vec<(f64, f64)>> = (0..21).map(|i| vec![(1.0, i as f64 / 21.0), (0.5, 0.25)]).collect();
        let spans = push_all(&mut builder, &rows, 1.0);
        // 21 blocks of 2 rows: level 0 doubles at the 16th (32 cells).
        let state = preview.state();
        assert!(state.block_width > 1 << FIRST_SHIFT, "level 0 doubled: {}", state.block_width);
        assert_eq!(state.block_width, builder.block_width());
        assert_eq!(state.blocks.len(), builder.level0.blocks());
        for (i, block) in state.blocks.iter().enumerate() {
            assert_eq!(**block, *builder.level0.block(i), "block {i}");
        }
        assert!(builder.level0.cells() > 20 && builder.rising[0].keep, "the preview may still move to level 1");
        let columns = spans.iter().map(|s| s.end - s.start).sum();
        let limits = builder.limits;
        assert_eq!(builder.finish(columns).levels, reference(&spans, limits, None));
    }

    /// Expecting 100 blocks of 3 rows with room for 60 cells, level 0
    /// takes blocks of 8 (13 blocks, 39 cells; of 4, 75 cells) as soon as
    /// it has an even number; a second, shorter expectation changes
    /// nothing (blocks never narrow).
    #[test]
    fn an_expected_length_widens_level_0_early() {
        let mut builder = with_limits(60, usize::MAX);
        let rows = vec![vec![(1.0, 0.5); 3]; 9];
        let spans =
            push_expecting(&mut builder, &rows, 1.0, Some(Expectation { at: 1, columns: 100 << FIRST_SHIFT, rows: 3 }));
        assert_eq!(builder.level0.shift, FIRST_SHIFT + 3);
        builder.expect(1, 1);
        assert_eq!(builder.wanted_shift, FIRST_SHIFT + 3);
        assert!(
            builder.level0.cells.capacity() >= 39,
            "room for 13 blocks of 3 rows, reserved when its level was made"
        );
        let columns: u64 = spans.iter().map(|s| s.end - s.start).sum();
        let pyramid = builder.finish(columns);
        assert_eq!(pyramid.finest_block(), 8 << FIRST_SHIFT);
        // Pushed at the builder's width: 1, 1, 2 and 4 first widths (a
        // doubling after each), then five of 8: 6 blocks of 8.
        assert_eq!(columns, 48 << FIRST_SHIFT);
        assert_eq!(pyramid.levels[0].blocks(), 6);
    }

    /// Above the threshold, the level of twice level 0's width is left
    /// out: level 1 is not kept, and level 2 is what two levels of pairs
    /// make.
    #[test]
    fn a_large_level_0_skips_the_level_above_it() {
        let build = |skip_above: usize| {
            let mut b = with_limits(MAX_LEVEL0_CELLS, skip_above);
            for i in 0..11u64 {
                let occupancy = [1.0, (i % 5) as f64 / 5.0, (i % 3) as f64 / 3.0];
                let columns = if i == 10 { (1 << FIRST_SHIFT) - 100 } else { 1 << FIRST_SHIFT };
                b.push(&span_of(&occupancy[..1 + (i % 3) as usize], (i % 7) as f64 / 7.0, columns));
            }
            let level1_kept = b.rising[0].keep;
            (b.finish((11 << FIRST_SHIFT) - 100), level1_kept)
        };
        let ((pairs, kept), (skipping, dropped)) = (build(usize::MAX), build(10));
        let shifts = |p: &BitmapPyramid| p.levels.iter().map(|l| l.shift - FIRST_SHIFT).collect::<Vec<_>>();
        assert_eq!(shifts(&pairs), vec![0, 1, 2, 3, 4]);
        assert_eq!(shifts(&skipping), vec![0, 2, 3, 4]);
        assert!(kept && !dropped, "level 1's blocks are dropped as level 0 grows past the threshold");
        assert_eq!(skipping.levels[1].blocks(), 3, "11 blocks in fours, the last group short");
        assert_eq!(pairs.levels[2..], skipping.levels[1..]);
        // A view of 3 blocks a pixel is drawn from level 0 when the level
        // of 2 blocks is left out.
        let w = (1u64 << FIRST_SHIFT) as f64;
        assert_eq!(skipping.level_for(w * 3.0).map(|l| l.shift), Some(FIRST_SHIFT));
        assert_eq!(pairs.level_for(w * 3.0).map(|l| l.shift), Some(FIRST_SHIFT + 1));
    }

    /// The widths [`MAX_LEVEL0_CELLS`]' docs promise: a 100M-read trace of
    /// 512 rows gets blocks of 4,096 columns and keeps every level; a
    /// 10M-read one keeps the first width and every level.
    #[test]
    fn the_default_limits_give_the_documented_block_widths() {
        let mut long = PyramidBuilder::default();
        long.expect(100_000_000, 512);
        assert_eq!(1u64 << long.wanted_shift, 4_096);
        assert!(!long.expects_large_level0(), "level 1 is kept");
        let mut short = PyramidBuilder::default();
        short.expect(10_000_000, 512);
        assert_eq!(short.wanted_shift, FIRST_SHIFT);
        assert!(!short.expects_large_level0());
    }

    #[test]
    fn quantizing_keeps_two_decimals() {
        let r = SpanRow {
            occupancy: 0.3333,
            means: CellMeans { fresh: 0.5, fresh_bytes: 0.25, fresh_distinct: 0.125, tint: 1.0 },
        };
        let back = SummaryCell::from_row(&r).row();
        assert!((back.occupancy - r.occupancy).abs() < 1e-4);
        assert!((back.means.fresh - 0.5).abs() < 0.003 && (back.means.tint - 1.0).abs() < 1e-9);
    }

    /// Values outside 0..1 (rounding in the sums) quantize as the nearest
    /// end would; NaN as 0.
    #[test]
    fn quantizing_saturates_at_both_ends() {
        for (v, q) in [(-1.0, 0), (-1e-9, 0), (-0.001, 0), (1.0 + 1e-9, 255), (7.0, 255), (f64::NAN, 0), (0.5, 128)] {
            let r = SpanRow { occupancy: v, means: CellMeans { fresh: v, fresh_bytes: v, fresh_distinct: v, tint: v } };
            let cell = SummaryCell::from_row(&r);
            assert_eq!((cell.fresh, cell.fresh_bytes, cell.fresh_distinct, cell.tint), (q, q, q, q), "{v}");
            let q16 = match q {
                0 => 0,
                255 => 65535,
                _ => 32768,
            };
            assert_eq!(cell.occupancy, q16, "{v}");
        }
    }

    #[test]
    fn coarser_levels_merge_by_width_and_occupancy() {
        let mut b = PyramidBuilder::default();
        // Three level-0 blocks, the last one a quarter as wide.
        let width = 1u64 << FIRST_SHIFT;
        b.push(&span(&[1.0, 1.0], 1.0));
        b.push(&span(&[1.0], 0.0));
        b.push(&span_of(&[0.5], 1.0, width / 4));
        let p = b.finish(width * 2 + width / 4);
        assert_eq!(p.levels.len(), 3);
        let l1 = &p.levels[1];
        assert_eq!(l1.blocks(), 2);
        let top = l1.block(0);
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].row().occupancy, 1.0);
        assert!((top[1].row().occupancy - 0.5).abs() < 1e-4, "row 1 held a line half the time");
        assert!((top[0].row().means.fresh - 0.5).abs() < 0.003, "fresh 1 and 0 in equal parts");
        let last = l1.block(1);
        assert!((last[0].row().occupancy - 0.5).abs() < 1e-4, "the short block keeps its own width");
        let w = width as f64;
        assert_eq!(p.level_for(w * 1.2).map(|l| l.shift), Some(FIRST_SHIFT));
        assert_eq!(p.level_for(w * 2.2).map(|l| l.shift), Some(FIRST_SHIFT + 1));
        assert!(p.level_for(w / 40.0).is_none());
    }
}

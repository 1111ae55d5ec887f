//! The multi-resolution summary of the bitmap, built while decoding: level
//! 0 holds one [`Span`] per block of `2^shift` columns, each coarser level
//! merges pairs of the level below (groups of four, for the first, above a
//! very large level 0). Drawing a column range at W pixels
//! reads the level whose blocks are about a pixel wide: O(W x rows),
//! whatever the trace's length — no replay for a whole-trace view.
//!
//! Cells are stored quantized (6 bytes per block and row). Level 0 holds at
//! most [`MAX_LEVEL0_CELLS`] cells: when a trace would need more, blocks
//! double in width (as the working-set snapshots do). When level 0 is that
//! large, the level of twice its width is left out
//! ([`SKIP_SECOND_LEVEL_CELLS`]), so the summary of any trace stays within
//! about 600 MB (400 MB of level 0, half as much in the coarser levels;
//! 450 MB for 100M reads of 512 rows).

use crate::spans::{CellMeans, RowMerger, Span, SpanRow};

/// Most cells (blocks x rows) level 0 keeps before its blocks double.
/// 2^26: a 100M-read trace of 512 rows keeps blocks of 1,024 columns, so
/// a view of 1,024 columns per pixel or more is drawn from the summary.
/// At 2^25 (blocks of 2,048), the zoom step at 1,802 replayed 3.1M
/// columns, 177-275 ms in the viewer; at 2^24 (4,096), the step at 3,604
/// replayed 6M columns, 340-380 ms. The viewer's peak memory on that
/// trace stays under 1 GiB because the level above level 0 is left out
/// ([`SKIP_SECOND_LEVEL_CELLS`]) and the decoding preview does not copy
/// level 0.
pub const MAX_LEVEL0_CELLS: usize = 1 << 26;
/// Level-0 cells above which the level of twice level 0's width is left
/// out (the next is four times as wide). Level 0 is then most of the
/// summary's memory, and the level above it half as much again; without
/// it, a view of 2 to 4 blocks a pixel merges that many level-0 blocks a
/// pixel, which costs less than the replay a missing finer level would.
pub const SKIP_SECOND_LEVEL_CELLS: usize = 1 << 25;
/// Width of level-0 blocks to start with: `2^10` columns (they double for
/// long traces).
pub const FIRST_SHIFT: u32 = 10;

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
#[derive(Clone, Debug, Default)]
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

    fn push(&mut self, rows: impl IntoIterator<Item = SummaryCell>) {
        self.cells.extend(rows);
        self.offsets.push(self.cells.len() as u32);
    }

    /// Cells stored.
    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    /// The level above: pairs of blocks merged (`columns` in all).
    fn coarser(&self, columns: u64) -> Level {
        self.merged(1, columns)
    }

    /// A coarser level: groups of `2^step` blocks merged (`columns` in
    /// all).
    fn merged(&self, step: u32, columns: u64) -> Level {
        let width = 1u64 << self.shift;
        let group = 1usize << step;
        // Groups `range` merged into one run of cells, with each merged
        // block's end in it; one merger's buffers serve every group.
        let merge_groups = |range: std::ops::Range<usize>| {
            let mut merger = RowMerger::default();
            let (mut cells, mut ends) = (Vec::new(), Vec::with_capacity(range.len()));
            for g in range {
                merger.clear();
                for i in g * group..((g + 1) * group).min(self.blocks()) {
                    let w = width.min(columns.saturating_sub(i as u64 * width)) as f64;
                    merger.add(self.block(i).iter().map(SummaryCell::row), w);
                }
                cells.extend(merger.finish().iter().map(SummaryCell::from_row));
                ends.push(cells.len() as u32);
            }
            (cells, ends)
        };
        let groups = self.blocks().div_ceil(group);
        // The levels are built when decoding ends, while the other thread
        // waits: long levels are merged half on each core.
        let parts = if groups >= PARALLEL_GROUPS {
            let half = groups / 2;
            std::thread::scope(|scope| {
                let upper = scope.spawn(|| merge_groups(half..groups));
                let lower = merge_groups(0..half);
                match upper.join() {
                    Ok(upper) => vec![lower, upper],
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            })
        } else {
            vec![merge_groups(0..groups)]
        };
        let mut up = Level::new(self.shift + step);
        up.cells.reserve(parts.iter().map(|(cells, _)| cells.len()).sum());
        for (cells, ends) in parts {
            let base = up.cells.len() as u32;
            up.offsets.extend(ends.iter().map(|&end| base + end));
            up.cells.extend(cells);
        }
        up
    }
}

/// Block groups from which a level is merged on two threads.
const PARALLEL_GROUPS: usize = 256;

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
/// is decoded: the blocks so far, shared with the decoding thread. At most
/// one more than [`PREVIEW_BLOCKS`] of them: past that, pairs merge (a
/// preview picture is a window wide), so the preview never holds a second
/// copy of level 0.
#[derive(Debug, Default)]
pub struct Preview {
    inner: std::sync::Mutex<PreviewBuild>,
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

/// The preview and what it is built from.
#[derive(Debug, Default)]
struct PreviewBuild {
    state: PreviewState,
    /// Width of level 0's blocks.
    source_width: u64,
    /// Level-0 blocks since the last preview block, when a preview block
    /// is several of them: merged as they come, one pass over each cell.
    /// (Kept as blocks and merged in pairs, as the pyramid's levels are, the
    /// merging was a ninth of the working-set thread's time, the decoding
    /// pass's bound, and the pyramid did it again at the end.)
    tail: RowMerger,
    /// Columns merged into `tail`.
    tail_columns: u64,
}

/// `blocks` of `width` columns each as a level (to merge as the pyramid's
/// levels are).
fn as_level(blocks: &[std::sync::Arc<[SummaryCell]>], width: u64) -> Level {
    let mut level = Level::new(width.trailing_zeros());
    for block in blocks {
        level.push(block.iter().copied());
    }
    level
}

impl Preview {
    /// The state now.
    pub fn state(&self) -> PreviewState {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).state.clone()
    }

    /// Blocks decoded so far (cheap: no copy).
    pub fn blocks(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).state.blocks.len()
    }

    /// Columns decoded so far (in whole preview blocks).
    pub fn columns(&self) -> u64 {
        let b = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        b.state.blocks.len() as u64 * b.state.block_width
    }

    pub(crate) fn set_bytes(&self, done: u64, total: u64) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).state.bytes = (done, total);
    }

    fn push(&self, level: &Level) {
        let mut b = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let width = 1u64 << level.shift;
        if b.source_width != width {
            // Level 0's blocks doubled (or this is the first): start over
            // from them.
            b.source_width = width;
            b.state.block_width = width;
            b.state.blocks = (0..level.blocks()).map(|i| level.block(i).into()).collect();
            b.tail.clear();
            b.tail_columns = 0;
        } else if let Some(i) = level.blocks().checked_sub(1) {
            b.tail.add(level.block(i).iter().map(SummaryCell::row), width as f64);
            b.tail_columns += width;
            if b.tail_columns >= b.state.block_width {
                let block: std::sync::Arc<[SummaryCell]> = b.tail.finish().iter().map(SummaryCell::from_row).collect();
                b.state.blocks.push(block);
                b.tail.clear();
                b.tail_columns = 0;
            }
        }
        while b.state.blocks.len() > PREVIEW_BLOCKS && b.state.blocks.len().is_multiple_of(2) {
            // Blocks are whole while decoding: merge pairs as a level does.
            let whole = as_level(&b.state.blocks, b.state.block_width);
            let merged = whole.coarser(b.state.blocks.len() as u64 * b.state.block_width);
            b.state.block_width *= 2;
            b.state.blocks = (0..merged.blocks()).map(|i| merged.block(i).into()).collect();
        }
    }
}

/// Builds level 0 from spans of whole blocks, then the coarser levels.
pub struct PyramidBuilder {
    level0: Level,
    preview: Option<std::sync::Arc<Preview>>,
}

impl Default for PyramidBuilder {
    fn default() -> Self {
        PyramidBuilder { level0: Level::new(FIRST_SHIFT), preview: None }
    }
}

impl PyramidBuilder {
    /// Width of the blocks the next spans must have.
    pub fn block_width(&self) -> u64 {
        1 << self.level0.shift
    }

    /// A builder that also shows its blocks in `preview` as they come.
    pub fn with_preview(preview: std::sync::Arc<Preview>) -> Self {
        PyramidBuilder { level0: Level::new(FIRST_SHIFT), preview: Some(preview) }
    }

    /// Adds the span of the next block (the last may be shorter).
    pub fn push(&mut self, span: &Span) {
        self.level0.push(span.rows.iter().map(SummaryCell::from_row));
        if self.level0.cells() > MAX_LEVEL0_CELLS && self.level0.blocks().is_multiple_of(2) {
            // Too fine for this trace: double the blocks. All blocks so far
            // are whole, so the merge is exact in widths.
            let columns = self.level0.blocks() as u64 * self.block_width();
            self.level0 = self.level0.coarser(columns);
        }
        if let Some(p) = &self.preview {
            p.push(&self.level0);
        }
    }

    /// The summary of `columns` columns.
    pub fn finish(self, columns: u64) -> BitmapPyramid {
        BitmapPyramid::from_level0(self.level0, columns, SKIP_SECOND_LEVEL_CELLS)
    }
}

impl BitmapPyramid {
    /// The levels above `level0`, each merging pairs of the level below,
    /// except that above a level 0 of more than `skip_above` cells the
    /// first merges groups of four (see [`SKIP_SECOND_LEVEL_CELLS`]).
    fn from_level0(level0: Level, columns: u64, skip_above: usize) -> BitmapPyramid {
        let mut levels = vec![level0];
        while let Some(last) = levels.last().filter(|l| l.blocks() > 1) {
            let step = if levels.len() == 1 && last.cells() > skip_above { 2 } else { 1 };
            let next = last.merged(step, columns);
            levels.push(next);
        }
        if levels[0].blocks() == 0 {
            levels.clear();
        }
        BitmapPyramid { levels, columns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(occ: &[f64], fresh: f64) -> Span {
        Span {
            start: 0,
            end: 0,
            rows: occ
                .iter()
                .map(|&o| SpanRow { occupancy: o, means: CellMeans { fresh, ..CellMeans::default() } })
                .collect(),
        }
    }

    /// A long decoding's preview keeps at most PREVIEW_BLOCKS + 1 blocks, and
    /// they are the pyramid's blocks of that width, also for the blocks
    /// pushed after it started merging: within one quantization step (the
    /// pyramid merges pairs of merged pairs, the preview all of a block's
    /// level-0 blocks at once).
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
        }
        let state = preview.state();
        let pyramid = builder.finish(blocks << FIRST_SHIFT);
        assert_eq!(state.block_width, 4 << FIRST_SHIFT, "halved twice");
        assert_eq!(state.blocks.len(), 2500, "the last block waits for its fourth part");
        let level = pyramid.levels.iter().find(|l| 1u64 << l.shift == state.block_width).expect("level");
        let near = |a: &SummaryCell, b: &SummaryCell| {
            let step = |x: u8, y: u8| x.abs_diff(y) <= 1;
            a.occupancy.abs_diff(b.occupancy) <= 1
                && step(a.fresh, b.fresh)
                && step(a.fresh_bytes, b.fresh_bytes)
                && step(a.fresh_distinct, b.fresh_distinct)
                && step(a.tint, b.tint)
        };
        for (i, block) in state.blocks.iter().enumerate() {
            let want = level.block(i);
            assert_eq!(block.len(), want.len(), "block {i}");
            assert!(block.iter().zip(want).all(|(a, b)| near(a, b)), "block {i}: {block:?} against {want:?}");
        }
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

    /// Above the threshold, the level of twice level 0's width is left
    /// out, and the level of four times its width merges groups of four
    /// as two levels of pairs would (within quantizing).
    #[test]
    fn a_large_level_0_skips_the_level_above_it() {
        let mut b = PyramidBuilder::default();
        let blocks = 11u64;
        for i in 0..blocks {
            let occupancy = [1.0, (i % 5) as f64 / 5.0, (i % 3) as f64 / 3.0];
            b.push(&span(&occupancy[..1 + (i % 3) as usize], (i % 7) as f64 / 7.0));
        }
        let columns = (blocks << FIRST_SHIFT) - 100;
        let level0 = b.level0;
        let pairs = BitmapPyramid::from_level0(level0.clone(), columns, level0.cells());
        let skipping = BitmapPyramid::from_level0(level0.clone(), columns, level0.cells() - 1);
        let shifts = |p: &BitmapPyramid| p.levels.iter().map(|l| l.shift - FIRST_SHIFT).collect::<Vec<_>>();
        assert_eq!(shifts(&pairs), vec![0, 1, 2, 3, 4]);
        assert_eq!(shifts(&skipping), vec![0, 2, 3, 4]);
        let (by_pairs, by_fours) = (&pairs.levels[2], &skipping.levels[1]);
        assert_eq!(by_fours.blocks(), 3, "11 blocks in fours, the last group short");
        for i in 0..by_fours.blocks() {
            let (a, b) = (by_pairs.block(i), by_fours.block(i));
            assert_eq!(a.len(), b.len(), "block {i}");
            for (x, y) in a.iter().zip(b) {
                assert!(
                    x.occupancy.abs_diff(y.occupancy) <= 2 && x.fresh.abs_diff(y.fresh) <= 1,
                    "block {i}: {x:?} {y:?}"
                );
            }
        }
        // A view of 3 blocks a pixel is drawn from level 0 when the level
        // of 2 blocks is left out.
        let w = (1u64 << FIRST_SHIFT) as f64;
        assert_eq!(skipping.level_for(w * 3.0).map(|l| l.shift), Some(FIRST_SHIFT));
        assert_eq!(pairs.level_for(w * 3.0).map(|l| l.shift), Some(FIRST_SHIFT + 1));
    }

    #[test]
    fn coarser_levels_merge_by_width_and_occupancy() {
        let mut b = PyramidBuilder::default();
        b.push(&span(&[1.0, 1.0], 1.0));
        b.push(&span(&[1.0], 0.0));
        b.push(&span(&[0.5], 1.0));
        // Three level-0 blocks, the last one a quarter as wide.
        let width = 1u64 << FIRST_SHIFT;
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

//! A finer summary of one column range, made after decoding, on demand.
//!
//! The summary made while decoding ([`crate::pyramid`]) stops at level 0's
//! blocks: 4,096 columns on a 100M-read trace. Finer ones would double the
//! memory and the decoding thread's work
//! ([`crate::pyramid::MAX_LEVEL0_CELLS`]). A view of fewer columns a pixel
//! is drawn by replaying its range and closing a span per pixel
//! ([`crate::raster`]). The widest such view, just under level 0's width,
//! is the slowest picture a zoom step asks for (at 3,600 columns a pixel,
//! 6.9M columns replayed in 272-412 ms).
//!
//! A viewer at rest knows where the next zoom step lands: inside the range
//! it shows. It replays that range once, into blocks at most a quarter of
//! its pixel wide ([`wanted_for`]); a zoom step in, at any point, then
//! draws from blocks no wider than a pixel (the rule the decoded summary
//! is drawn by), and so does the step after it.
//!
//! The blocks are made by the one span walk (`SpanWalk`) the span
//! drawing uses, on block edges that are multiples of the block width, so
//! a block is the span the decoded summary would hold at that width.
//!
//! ```no_run
//! # fn main() -> Result<(), decoder::DecodeError> {
//! use decoder::model::{DecodeOptions, Model};
//! use decoder::range_summary::{RangeSummary, wanted_for};
//! let model = Model::decode(std::path::Path::new("work.lntrace"), &DecodeOptions::default(), &mut |_| {})?;
//! // A view of a 1,734-pixel bitmap at 1,802 columns a pixel.
//! let view = (10_000_000.0, 10_000_000.0 + 1_734.0 * 1_802.0);
//! if let Some(want) = wanted_for(&model, view, 1_734, None) {
//!     let summary = RangeSummary::build(&model, want, &mut |_, _| true)?;
//!     assert!(summary.block_width() <= 1_802 / 4);
//! }
//! # Ok(())
//! # }
//! ```

use crate::DecodeError;
use crate::cursor::ColumnCursor;
use crate::drawing_threads::{in_two_parts, second_thread_allowed};
use crate::model::Model;
use crate::pyramid::{Level, SummaryCell};
use crate::raster::{BitmapView, EXACT_COLUMNS_PER_PIXEL, Progress};
use crate::spans::{Span, SpanAccumulator};
use crate::working_set::HashedLines;

/// Most cells (blocks x rows) a range summary holds: 48 MiB. The widest
/// view summarized is just under twice level 0's block width a pixel (its
/// step in would replay), in blocks of a quarter of level 0's width: eight
/// blocks a pixel, so 1,920 pixels of 512 rows make 7.9M cells, whatever
/// that width. (With level 0 at 1,024 columns, the 100M-read benchmark
/// trace's viewer peaked at 829 MiB without range summaries and 873 MiB
/// with them, one at a time.)
pub const MAX_RANGE_CELLS: u64 = 1 << 23;

/// Ranges narrower than this are not summarized: their spans replay in a
/// few milliseconds.
pub const MIN_RANGE_COLUMNS: u64 = 20_000;

/// What to summarize: columns `[from, to)` in blocks of `2^shift`
/// (`from` a multiple of the block width).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RangeRequest {
    /// First column, on a block edge.
    pub from: u64,
    /// One past the last column.
    pub to: u64,
    /// Block width as a power of two.
    pub shift: u32,
}

/// Blocks of `2^shift` columns over one column range of a decoded trace.
#[derive(Clone, Debug)]
pub struct RangeSummary {
    /// The blocks, in the parts they were made in (left to right), each
    /// part made in the room it needs at most. Grown by doubling and then
    /// joined, a summary took up to three times its size for a moment: the
    /// viewer's peak memory on the 100M-read benchmark trace was 927 MiB
    /// that way, 873 MiB in parts, 829 MiB without range summaries (`cargo
    /// bench --bench view`, level 0 at 1,024 columns then).
    parts: Vec<Level>,
    request: RangeRequest,
}

/// The range summary worth making for a view of `columns` on a bitmap
/// `width` pixels wide, if any: the range in view, in blocks of the widest
/// power of two at most a quarter of its columns a pixel, so that the next
/// two zoom steps in (each halving the columns a pixel) draw from blocks no
/// wider than a pixel. `None` when those steps are drawn without replay
/// anyway (from the decoded summary, or exactly), when `existing` already
/// serves them, or when the summary would be too large
/// ([`MAX_RANGE_CELLS`]) or too small to matter ([`MIN_RANGE_COLUMNS`]).
pub fn wanted_for(
    model: &Model,
    columns: (f64, f64),
    width: u32,
    existing: Option<&RangeSummary>,
) -> Option<RangeRequest> {
    let from = columns.0.max(0.0).floor() as u64;
    let to = (columns.1.max(0.0).ceil() as u64).min(model.columns);
    if to <= from || width == 0 {
        return None;
    }
    let next_step = (columns.1 - columns.0) / f64::from(width) / 2.0;
    if next_step <= EXACT_COLUMNS_PER_PIXEL || model.pyramid.level_for(next_step).is_some() {
        return None;
    }
    if existing.is_some_and(|s| s.serves((from as f64, to as f64), next_step)) {
        return None;
    }
    let shift = (next_step / 2.0).max(1.0).log2().floor() as u32;
    let width_of_block = 1u64 << shift;
    let from = from - from % width_of_block;
    let blocks = (to - from).div_ceil(width_of_block);
    let cells = blocks.saturating_mul(u64::from(model.metrics.max_rows.max(1)));
    (to - from >= MIN_RANGE_COLUMNS && cells <= MAX_RANGE_CELLS).then_some(RangeRequest { from, to, shift })
}

impl RangeSummary {
    /// Replays `request`'s columns into blocks: in two halves at once,
    /// split on a block edge, unless drawing is held to one thread
    /// ([`crate::drawing_threads`]). `progress` as in drawing.
    pub fn build(model: &Model, request: RangeRequest, progress: Progress<'_>) -> Result<RangeSummary, DecodeError> {
        let RangeRequest { from, to, shift } = request;
        let to = to.min(model.columns);
        if from >= to || shift >= 48 || !from.is_multiple_of(1 << shift) {
            return Err(DecodeError::InvalidSetting(format!(
                "no range summary of columns {from}..{to} in blocks of 2^{shift} columns"
            )));
        }
        let blocks = (to - from).div_ceil(1 << shift);
        let parts = if blocks < 2 || !second_thread_allowed() {
            vec![summarize_part(model, from, to, shift, progress)?]
        } else {
            let split = from + ((blocks / 2) << shift);
            let (left, right) = in_two_parts(
                progress,
                |p| summarize_part(model, from, split, shift, p),
                |p| summarize_part(model, split, to, shift, p),
            );
            vec![left?, right?]
        };
        Ok(RangeSummary { parts, request: RangeRequest { from, to, shift } })
    }

    /// What it was made for.
    pub fn request(&self) -> RangeRequest {
        self.request
    }

    /// Width of a block in columns.
    pub fn block_width(&self) -> u64 {
        1 << self.request.shift
    }

    /// Whether `columns` can be drawn from it at `per_pixel` columns a
    /// pixel: they are inside its range, and its blocks are no wider than
    /// a pixel. The one rule for drawing from a summary
    /// ([`RangeSummary::fits`]) and for not making another ([`wanted_for`]).
    pub fn serves(&self, columns: (f64, f64), per_pixel: f64) -> bool {
        columns.0 >= self.request.from as f64
            && columns.1 <= self.request.to as f64
            && self.block_width() as f64 <= per_pixel
    }

    /// Whether `view` can be drawn from it ([`RangeSummary::serves`]).
    pub fn fits(&self, view: &BitmapView) -> bool {
        self.serves(view.columns, view.columns_per_pixel())
    }

    /// The rows of each block, the first block starting at
    /// [`RangeRequest::from`].
    pub fn blocks(&self) -> Vec<&[SummaryCell]> {
        self.parts.iter().flat_map(|part| (0..part.blocks()).map(|i| part.block(i))).collect()
    }
}

/// One thread's part of [`RangeSummary::build`]: columns `[from, to)`,
/// `from` on a block edge.
fn summarize_part(model: &Model, from: u64, to: u64, shift: u32, progress: Progress<'_>) -> Result<Level, DecodeError> {
    // Room for every block at the most rows: the least memory a block
    // can take is what it gets (a Vec doubling as it fills held up to
    // twice the summary).
    let blocks = (to - from).div_ceil(1 << shift) as usize;
    let rows = model.metrics.max_rows.max(1) as usize;
    let mut level = Level::with_capacity(shift, blocks, blocks.saturating_mul(rows));
    let mut walk = SpanWalk::new(model, from)?;
    let mut block = 0u64;
    while walk.column() < to {
        let end = (from + ((block + 1) << shift)).min(to);
        let more = walk.walk_to(end)?;
        level.push(walk.close_span().rows.iter().map(SummaryCell::from_row));
        block += 1;
        if !more {
            break;
        }
        if block.is_multiple_of(64) && !progress(walk.column() - from, to - from) {
            return Err(DecodeError::Cancelled);
        }
    }
    Ok(level)
}

/// The working set replayed from a column on, summed into spans: what
/// drawing from spans and range summaries walk. Lines entering the set are
/// tinted by the allocations live at their column.
pub(crate) struct SpanWalk<'m> {
    model: &'m Model,
    cursor: ColumnCursor<'m, HashedLines>,
    spans: SpanAccumulator,
}

impl<'m> SpanWalk<'m> {
    /// A walk whose first span starts at column `from`.
    pub(crate) fn new(model: &'m Model, from: u64) -> Result<Self, DecodeError> {
        let mut cursor = ColumnCursor::<HashedLines>::new(model, from)?;
        let index = &model.allocation_index;
        let spans = SpanAccumulator::new(cursor.set_mut(), from, |lo, hi| {
            index.overlapping(&model.allocations, lo, hi, from).next().is_some()
        });
        Ok(SpanWalk { model, cursor, spans })
    }

    /// The column the next step reads.
    pub(crate) fn column(&self) -> u64 {
        self.cursor.column()
    }

    /// Reads the columns before `end` into the open span; false when the
    /// trace ended first.
    pub(crate) fn walk_to(&mut self, end: u64) -> Result<bool, DecodeError> {
        let (model, index) = (self.model, &self.model.allocation_index);
        while self.cursor.column() < end {
            let column = self.cursor.column();
            self.spans.begin_column(column);
            let tint = |lo, hi| index.overlapping(&model.allocations, lo, hi, column).next().is_some();
            if self.cursor.step(&mut self.spans.observer(tint))?.is_none() {
                return Ok(false);
            }
            self.spans.end_column(self.cursor.set());
        }
        Ok(true)
    }

    /// Closes the open span at the current column and opens the next.
    pub(crate) fn close_span(&mut self) -> Span {
        self.spans.close_span(self.cursor.set_mut())
    }
}

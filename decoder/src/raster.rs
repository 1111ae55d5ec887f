//! CPU rasterisation (RGBA) of the cache-line bitmap and of the flamegraph
//! bars: colours only. Text (frame labels, rulers) belongs to whoever makes
//! the picture (`linetrace render`, the viewer), so the decoder has no
//! graphics dependencies.
//!
//! Both share one x axis: pixel `x` covers columns `[a + x*(b-a)/W, a +
//! (x+1)*(b-a)/W)`. When many cells (column x row) fall into one pixel they
//! are combined with importance-based anti-aliasing:
//!
//! ```text
//! C = (F * c(sum f_i^alpha * a_i / F) + B * c_B) / (F + B)
//! F = sum f_i^alpha,  B = (1 - sum f_i)^alpha
//! ```
//!
//! where `f_i` is the fraction of the pixel covered by cell `i`, `a_i` its
//! colour (here `c` is the identity on colours, so the mean is taken in RGB)
//! and `c_B` the background ([`Coverage`]). With `alpha = 1` this is a plain
//! box filter; `alpha < 1` lifts thin isolated events so a single access
//! stays visible at any zoom; `alpha > 1` filters them out.
//!
//! A cell's colour ([`Palette::colour`]) is affine in its [`CellMeans`], so
//! the mean colour of many cells is the colour of their means: that is what
//! lets zoomed-out views be drawn from sums ([`crate::spans`]).
//!
//! Three ways to draw the bitmap, picked by columns per pixel
//! ([`rasterize_bitmap`]):
//! - at most [`EXACT_COLUMNS_PER_PIXEL`]: exact, cell by cell (runs of
//!   unchanged cells), replaying the range;
//! - where the summary has blocks no wider than a pixel: from the
//!   [`crate::pyramid::BitmapPyramid`], O(W x rows), no replay;
//! - in between: spans summed over each pixel while replaying the range,
//!   or, where a viewer made one, from a finer summary of the range in
//!   view ([`crate::range_summary`]).

use crate::DecodeError;
use crate::allocations::AllocationIndex;
use crate::calltree::Frame;
use crate::cursor::ColumnCursor;
use crate::drawing_threads::{in_two_parts, second_thread_allowed};
use crate::model::Model;
use crate::pyramid::SummaryCell;
use crate::range_summary::{RangeRequest, RangeSummary, SpanWalk};
use crate::spans::{CellMeans, RowMerger, SpanRow};
use crate::working_set::{Departure, HashedLines, LineState, OrderedWorkingSet, SortedLines};

/// An RGB colour with components in `[0, 1]`.
pub type Colour = [f64; 3];

/// Up to this many columns per pixel the bitmap is drawn exactly.
pub const EXACT_COLUMNS_PER_PIXEL: f64 = 4.0;

/// What the colour of a cell shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ColourBy {
    /// Bytes read from the line: purple (none) to green (a line's worth).
    #[default]
    BytesRead,
    /// Distinct bytes read: purple (none) to green (every byte).
    DistinctBytes,
    /// Age only: bright when just touched, fading.
    Age,
    /// The function whose read touched the line last, in the colour of its
    /// flamegraph frame, fading with age.
    Function,
    /// The allocation site of the block holding the line (the colour of
    /// the allocating function's frame); lines outside blocks are grey.
    Allocation,
    /// Whether the read that last touched the line missed the simulated
    /// caches ([`crate::cache`]): red an LL miss, orange a D1 miss, blue a
    /// hit, fading with age.
    CacheMisses,
}

impl ColourBy {
    /// Whether colours are categories (function, allocation site): those do
    /// not average into sums, so such views are drawn exactly.
    pub fn is_category(self) -> bool {
        matches!(self, ColourBy::Function | ColourBy::Allocation | ColourBy::CacheMisses)
    }

    /// For people: `function`, `cache misses`.
    pub fn name(self) -> &'static str {
        match self {
            ColourBy::BytesRead => "bytes read",
            ColourBy::DistinctBytes => "distinct bytes",
            ColourBy::Age => "age",
            ColourBy::Function => "function",
            ColourBy::Allocation => "allocation site",
            ColourBy::CacheMisses => "cache misses",
        }
    }
}

/// Colours of [`ColourBy::CacheMisses`]: an LL miss, a D1 miss, a hit.
pub const MISS_COLOURS: [Colour; 3] = [[0.93, 0.20, 0.16], [0.98, 0.62, 0.12], [0.25, 0.50, 0.90]];

/// Most columns a view coloured by a category covers: it is drawn exactly,
/// which replays the whole range.
pub const MAX_CATEGORY_COLUMNS: u64 = 4_000_000;

/// Names the function holding an address (a frame's entry, an allocation's
/// call site): colouring by category gives a cell the colour of that name's
/// flamegraph frame ([`frame_colour`]).
pub type FunctionNames<'a> = &'a (dyn Fn(u64) -> String + Sync);

/// Colour of lines outside any recorded block when colouring by allocation.
const NO_CATEGORY: Colour = [0.42, 0.42, 0.46];

/// Colours of the picture.
#[derive(Clone, Copy, Debug)]
pub struct Palette {
    /// Empty space.
    pub background: Colour,
    /// A line nothing was read from yet (0 bytes).
    pub unused: Colour,
    /// A line with `line_size` bytes or more read.
    pub used: Colour,
    /// A just-touched line when colouring by age.
    pub touched: Colour,
    /// Tint of lines inside allocations.
    pub allocation: Colour,
    /// How strongly the allocation tint shows (0..1).
    pub allocation_strength: f64,
}

impl Default for Palette {
    fn default() -> Self {
        Palette {
            background: [0.07, 0.07, 0.09],
            unused: [0.62, 0.16, 0.78],
            used: [0.16, 0.86, 0.35],
            touched: [0.95, 0.75, 0.2],
            allocation: [0.25, 0.45, 1.0],
            allocation_strength: 0.25,
        }
    }
}

impl Palette {
    /// The colour of a cell with these terms, or the mean colour of cells
    /// whose terms have these means: `lerp(background, lerp(unused, used,
    /// bytes), fresh)`, written affinely in `fresh` and `fresh * bytes`,
    /// then tinted towards the allocation colour.
    pub fn colour(&self, by: ColourBy, m: &CellMeans) -> Colour {
        let (bg, a, b) = (self.background, self.unused, self.used);
        let mut c = [0.0; 3];
        for k in 0..3 {
            c[k] = match by {
                ColourBy::BytesRead => bg[k] + m.fresh * (a[k] - bg[k]) + m.fresh_bytes * (b[k] - a[k]),
                ColourBy::DistinctBytes => bg[k] + m.fresh * (a[k] - bg[k]) + m.fresh_distinct * (b[k] - a[k]),
                ColourBy::Age => bg[k] + m.fresh * (self.touched[k] - bg[k]),
                // Categories are drawn cell by cell ([`category_colour`]);
                // summed cells can only show their freshness.
                ColourBy::Function | ColourBy::Allocation | ColourBy::CacheMisses => {
                    bg[k] + m.fresh * (NO_CATEGORY[k] - bg[k])
                }
            };
        }
        lerp(c, self.allocation, self.allocation_strength * m.tint.clamp(0.0, 1.0))
    }
}

/// Colour of a cell of category colour `category` (`None`: no category)
/// and freshness `fresh`: dims towards the background as the line ages,
/// never below a quarter so old lines keep their hue.
pub fn category_colour(palette: &Palette, category: Option<Colour>, fresh: f64) -> Colour {
    lerp(palette.background, category.unwrap_or(NO_CATEGORY), 0.25 + 0.75 * fresh.clamp(0.0, 1.0))
}

/// Colour of one working-set cell (bytes-read colouring, no tint).
pub fn cell_colour(palette: &Palette, bytes_read: u32, line_size: u32, age: u32, max_age: u32) -> Colour {
    let fresh = f64::from(age) / f64::from(max_age.max(1));
    let used = (f64::from(bytes_read) / f64::from(line_size.max(1))).min(1.0);
    palette.colour(ColourBy::BytesRead, &CellMeans { fresh, fresh_bytes: fresh * used, ..CellMeans::default() })
}

fn lerp(a: Colour, b: Colour, t: f64) -> Colour {
    [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t]
}

/// `f^alpha`, the weight of a fraction `f` (0..1) of a pixel in the
/// anti-aliasing formula. The common cases skip `powf` (a library call of
/// ~20 ns, a quarter of a heap picture's time when it ran for every block
/// and pixel): `alpha` 1, and `f` 1 or 0 (a pixel a block covers whole, a
/// pixel with nothing uncovered) — exactly what `powf` gives.
#[inline]
pub fn importance(f: f64, alpha: f64) -> f64 {
    if alpha == 1.0 || f == 1.0 || (f == 0.0 && alpha > 0.0) { f } else { power(f, alpha) }
}

/// `f.powf(alpha)` behind a call LLVM does not evaluate ahead of the
/// branch: `powf` is an intrinsic it may compute on both sides of a
/// condition and then select, and it did, so a picture at `alpha` 1 still
/// paid a `powf` per cell (14% of drawing a zoomed-out bitmap).
#[cold]
#[inline(never)]
fn power(f: f64, alpha: f64) -> f64 {
    f.powf(alpha)
}

/// Sums of one pixel for the anti-aliasing formula.
#[derive(Clone, Copy, Debug, Default)]
pub struct Coverage {
    sum_f: f64,
    sum_weight: f64,
    sum_colour: Colour,
}

impl Coverage {
    /// Adds a cell covering fraction `f` of the pixel.
    #[inline]
    pub fn add(&mut self, f: f64, colour: Colour, alpha: f64) {
        self.add_many(1.0, f, colour, alpha);
    }

    /// Adds `n` cells (not necessarily a whole number: summed occupancy)
    /// that each cover fraction `f` of the pixel.
    #[inline]
    pub fn add_many(&mut self, n: f64, f: f64, colour: Colour, alpha: f64) {
        if f <= 0.0 || n <= 0.0 {
            return;
        }
        self.add_weighted(n * f, n * importance(f, alpha), colour);
    }

    /// Adds cells covering `f` of the pixel in all, of weight `weight`
    /// ([`importance`] of each cell's fraction, summed): for callers that
    /// reuse one weight for many pixels.
    #[inline]
    pub fn add_weighted(&mut self, f: f64, weight: f64, colour: Colour) {
        self.sum_f += f;
        self.sum_weight += weight;
        for (sum, c) in self.sum_colour.iter_mut().zip(colour) {
            *sum += weight * c;
        }
    }

    /// True when nothing was added: the pixel is the background.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.sum_f == 0.0 && self.sum_weight == 0.0
    }

    /// The pixel colour.
    pub fn resolve(&self, background: Colour, alpha: f64) -> Colour {
        let uncovered = (1.0 - self.sum_f).max(0.0);
        let b = importance(uncovered, alpha);
        let denominator = self.sum_weight + b;
        if denominator <= 0.0 {
            return background;
        }
        let mut c = [0.0; 3];
        for k in 0..3 {
            c[k] = (self.sum_colour[k] + b * background[k]) / denominator;
        }
        c
    }

    /// The pixel's bytes: the background's when nothing was added.
    #[inline]
    fn pixel(&self, background: Colour, alpha: f64) -> [u8; 4] {
        to_rgba8(if self.is_empty() { background } else { self.resolve(background, alpha) })
    }
}

/// An RGBA8 image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Row-major RGBA bytes.
    pub rgba: Vec<u8>,
}

impl Image {
    /// An image filled with one colour.
    pub fn new(width: u32, height: u32, fill: Colour) -> Self {
        let rgba = to_rgba8(fill).repeat(width as usize * height as usize);
        Image { width, height, rgba }
    }

    /// The RGBA bytes of a pixel.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 4] {
        let i = (y as usize * self.width as usize + x as usize) * 4;
        [self.rgba[i], self.rgba[i + 1], self.rgba[i + 2], self.rgba[i + 3]]
    }

    /// Copies `from` into this image with its top left corner at (`left`,
    /// `top`), cut where it runs over the edges.
    pub fn copy_from(&mut self, from: &Image, left: u32, top: u32) {
        let w = from.width.min(self.width.saturating_sub(left)) as usize;
        for y in 0..from.height.min(self.height.saturating_sub(top)) {
            let src = y as usize * from.width as usize * 4;
            let dst = ((top + y) as usize * self.width as usize + left as usize) * 4;
            self.rgba[dst..dst + w * 4].copy_from_slice(&from.rgba[src..src + w * 4]);
        }
    }

    /// Sets a pixel (ignored outside the image).
    pub fn set(&mut self, x: u32, y: u32, c: Colour) {
        if x < self.width && y < self.height {
            let i = (y as usize * self.width as usize + x as usize) * 4;
            self.rgba[i..i + 4].copy_from_slice(&to_rgba8(c));
        }
    }

    /// Blends `c` over a pixel with opacity `t`.
    pub fn blend(&mut self, x: u32, y: u32, c: Colour, t: f64) {
        if x < self.width && y < self.height {
            let i = (y as usize * self.width as usize + x as usize) * 4;
            let old = [
                f64::from(self.rgba[i]) / 255.0,
                f64::from(self.rgba[i + 1]) / 255.0,
                f64::from(self.rgba[i + 2]) / 255.0,
            ];
            self.rgba[i..i + 4].copy_from_slice(&to_rgba8(lerp(old, c, t.clamp(0.0, 1.0))));
        }
    }

    /// Copies `other` into this image at row `y`.
    pub fn paste(&mut self, other: &Image, y: u32) {
        for row in 0..other.height.min(self.height.saturating_sub(y)) {
            let w = other.width.min(self.width) as usize * 4;
            let src = row as usize * other.width as usize * 4;
            let dst = (y + row) as usize * self.width as usize * 4;
            self.rgba[dst..dst + w].copy_from_slice(&other.rgba[src..src + w]);
        }
    }
}

/// An opaque RGBA8 pixel of a colour.
#[inline]
pub fn to_rgba8(c: Colour) -> [u8; 4] {
    // Rounding half up by adding a half and truncating: `f64::round` is a
    // libm call on the baseline x86-64 target, once per channel of every
    // pixel drawn.
    let q = |v: f64| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
    [q(c[0]), q(c[1]), q(c[2]), 255]
}

/// What part of the bitmap to draw, and how.
#[derive(Clone, Copy, Debug)]
pub struct BitmapView {
    /// Column range `[start, end)` (fractional allowed).
    pub columns: (f64, f64),
    /// Row range `[start, end)`.
    pub rows: (f64, f64),
    /// Output width in pixels.
    pub width: u32,
    /// Output height in pixels.
    pub height: u32,
    /// Anti-aliasing exponent.
    pub alpha: f64,
    /// What colours show.
    pub colour_by: ColourBy,
}

impl BitmapView {
    /// Columns per pixel.
    pub fn columns_per_pixel(&self) -> f64 {
        (self.columns.1 - self.columns.0) / f64::from(self.width.max(1))
    }
}

/// Fraction of the unit interval `[p, p+1)` covered by `[a, b)`.
#[inline]
fn overlap(a: f64, b: f64, p: f64) -> f64 {
    (b.min(p + 1.0) - a.max(p)).max(0.0)
}

/// Pixel rows covered by bitmap row `row` (rows from `r0`, `rh` rows per
/// pixel, `height` pixels), with the fraction of each covered.
fn pixel_rows(row: usize, r0: f64, rh: f64, height: usize) -> PixelRows {
    let y0 = (row as f64 - r0) / rh;
    let y1 = (row as f64 + 1.0 - r0) / rh;
    let first = y0.floor().max(0.0) as usize;
    let end = (y1.ceil().max(0.0) as usize).min(height);
    PixelRows { y0, y1, next: first, end }
}

/// `x.ceil()` for `x >= 0`, without the libm call.
#[inline]
fn ceil_of_non_negative(x: f64) -> u64 {
    let t = x as u64;
    if (t as f64) < x { t + 1 } else { t }
}

/// The pixel rows a bitmap row covers, with the fraction of each.
struct PixelRows {
    y0: f64,
    y1: f64,
    next: usize,
    end: usize,
}

impl Iterator for PixelRows {
    type Item = (usize, f64);

    #[inline]
    fn next(&mut self) -> Option<(usize, f64)> {
        while self.next < self.end {
            let py = self.next;
            self.next += 1;
            let f = overlap(self.y0, self.y1, py as f64);
            if f > 0.0 {
                return Some((py, f));
            }
        }
        None
    }
}

/// The picture of a grid drawn a pixel column at a time, left to right.
/// Finished columns gather in a strip of [`FinishedColumns::STRIP`]
/// columns, which goes into the row-major picture a row at a time. Written
/// straight in, each pixel of a column went to another host cache line of
/// an 8 MB picture (1920x1080): `finish_column` had 10.9% of the samples
/// of drawing 901 columns a pixel of the 100M-read trace, and has 8.6%
/// with the strip's copy (`perf record` of the decode bench's draw mode;
/// the wall times were within the machine's noise).
struct FinishedColumns {
    /// Row-major RGBA, `width x height`.
    rgba: Vec<u8>,
    width: usize,
    height: usize,
    /// Column-major: pixel (`strip_start + i`, `y`) at `i * height + y`.
    strip: Vec<[u8; 4]>,
    /// First pixel column of the strip.
    strip_start: usize,
    /// What columns never finished show.
    background: [u8; 4],
}

impl FinishedColumns {
    /// Pixel columns a strip holds: 64 bytes of each row.
    const STRIP: usize = 16;

    fn new(width: usize, height: usize, background: [u8; 4]) -> Self {
        FinishedColumns {
            rgba: background.repeat(width * height),
            width,
            height,
            strip: vec![background; Self::STRIP * height],
            strip_start: 0,
            background,
        }
    }

    /// The pixels of column `px`, top to bottom, to fill. Columns come
    /// left to right: a column past the strip sends the strip into the
    /// picture first.
    fn column(&mut self, px: usize) -> &mut [[u8; 4]] {
        debug_assert!(px >= self.strip_start && px < self.width, "column {px} out of order");
        if px >= self.strip_start + Self::STRIP {
            self.flush();
            self.strip_start = px - px % Self::STRIP;
        }
        let i = px - self.strip_start;
        &mut self.strip[i * self.height..(i + 1) * self.height]
    }

    /// Copies the strip into the picture and clears it.
    fn flush(&mut self) {
        let columns = Self::STRIP.min(self.width - self.strip_start);
        for y in 0..self.height {
            let row = (y * self.width + self.strip_start) * 4;
            for (i, pixel) in self.rgba[row..row + columns * 4].chunks_exact_mut(4).enumerate() {
                pixel.copy_from_slice(&self.strip[i * self.height + y]);
            }
        }
        self.strip.fill(self.background);
    }

    fn into_rgba(mut self) -> Vec<u8> {
        self.flush();
        self.rgba
    }
}

/// Accumulates cells into pixel coverage for one view, a pixel column at
/// a time, left to right: it keeps the sums of the column being drawn and
/// writes each finished column into the picture
/// ([`CoverageGrid::finish_column`]). A whole grid of sums was 80 MB at
/// 1920x1080; clearing it, filling it (each add another host cache line)
/// and reading it back was most of an exact picture's time at a few
/// columns a pixel (`add_run` 26% and `into_image` 18.5% of the samples of
/// `cargo bench --bench decode -- --draw /tmp/mh10m.lntrace 3.22 20`).
struct CoverageGrid<'v> {
    view: &'v BitmapView,
    /// Columns per pixel.
    cw: f64,
    /// The sums of pixel column [`CoverageGrid::open_pixel`], by pixel row.
    acc: Vec<Coverage>,
    /// The first pixel column not finished yet: the one `acc` holds.
    open_pixel: usize,
    /// The picture: each column written as it is finished.
    finished: FinishedColumns,
    /// The pixel rows of each bitmap row that can show (from the first of
    /// [`CoverageGrid::row_range`]): `row_pixels[row_starts[i]..row_starts[i + 1]]`.
    /// Worked out once per picture, not once per cell.
    row_starts: Vec<usize>,
    row_pixels: Vec<(usize, f64)>,
}

impl<'v> CoverageGrid<'v> {
    /// A grid for `view`, every pixel the background until drawn.
    fn new(view: &'v BitmapView, palette: &Palette) -> Result<Self, DecodeError> {
        let (w, h) = (view.width as usize, view.height as usize);
        let (a, b) = view.columns;
        let (r0, r1) = view.rows;
        if w == 0 || h == 0 || b <= a || r1 <= r0 || !(view.alpha > 0.0 && view.alpha.is_finite()) {
            return Err(DecodeError::InvalidSetting("empty view".to_string()));
        }
        let rh = (r1 - r0) / h as f64;
        let (first, end) = (r0.floor().max(0.0) as usize, r1.ceil().max(0.0) as usize);
        let mut row_starts = Vec::with_capacity(end - first + 1);
        let mut row_pixels = Vec::new();
        for row in first..end {
            row_starts.push(row_pixels.len());
            row_pixels.extend(pixel_rows(row, r0, rh, h));
        }
        row_starts.push(row_pixels.len());
        Ok(CoverageGrid {
            view,
            cw: (b - a) / w as f64,
            acc: vec![Coverage::default(); h],
            open_pixel: 0,
            finished: FinishedColumns::new(w, h, to_rgba8(palette.background)),
            row_starts,
            row_pixels,
        })
    }

    /// Writes pixel column `px` into the picture and starts the next
    /// column from empty sums. Columns come left to right.
    fn finish_column(&mut self, px: usize, palette: &Palette) {
        let alpha = self.view.alpha;
        for (pixel, c) in self.finished.column(px).iter_mut().zip(&mut self.acc) {
            *pixel = c.pixel(palette.background, alpha);
            *c = Coverage::default();
        }
        self.open_pixel = px + 1;
    }

    /// The pixel column holding the start of column `column` (may be past
    /// the picture).
    #[inline]
    fn pixel_of(&self, column: u64) -> usize {
        // A cast of a non-negative value: `floor` is a libm call on the
        // baseline x86-64 target, and exact drawing asks this per read.
        ((column as f64 - self.view.columns.0) / self.cw).max(0.0) as usize
    }

    /// The pixel column after the last one columns before `end` reach.
    #[inline]
    fn pixel_end(&self, end: u64) -> usize {
        let x = ((end as f64 - self.view.columns.0) / self.cw).max(0.0);
        ceil_of_non_negative(x).min(u64::from(self.view.width)) as usize
    }

    /// Rows of the bitmap that can show in the view.
    fn row_range(&self) -> (usize, usize) {
        (self.view.rows.0.floor().max(0.0) as usize, self.view.rows.1.ceil().max(0.0) as usize)
    }

    /// Adds the cells of one row over columns `[start, end)`, all of one
    /// colour, to the pixel columns not finished yet. Every cell stays its
    /// own element of the anti-aliasing sum (its own `f^alpha`); cells
    /// wholly inside a pixel share one `f`, so a run costs O(pixels it
    /// spans), not O(columns).
    fn add_run(&mut self, row: usize, start: u64, end: u64, colour: Colour) {
        let first = self.pixel_of(start).max(self.open_pixel);
        let last = self.pixel_end(end);
        debug_assert!(last <= first + 1 || start == end, "a run over pixel columns drawn later: {first}..{last}");
        for px in first..last {
            self.add_run_to_pixel(px, row, start, end, colour);
        }
    }

    /// The part of a run ([`CoverageGrid::add_run`]) in pixel column `px`,
    /// added to the open column's sums.
    #[inline]
    fn add_run_to_pixel(&mut self, px: usize, row: usize, start: u64, end: u64, colour: Colour) {
        let (a, cw, alpha) = (self.view.columns.0, self.cw, self.view.alpha);
        let (start, end) = (start as f64, end as f64);
        // The run's columns that fall into this pixel.
        let pixel_lo = a + px as f64 * cw;
        let pixel_hi = pixel_lo + cw;
        let lo = start.max(pixel_lo);
        let hi = end.min(pixel_hi);
        if hi <= lo {
            return;
        }
        let (from, to) = self.row_span(row);
        if alpha == 1.0 {
            // Importance is the covered fraction itself (`f^1`): the run's
            // cells in this pixel add up to one term, the part of the pixel
            // they cover. One add instead of three.
            let cover = (hi - lo) / cw;
            for &(py, fy) in &self.row_pixels[from..to] {
                let f = cover * fy;
                self.acc[py].add_weighted(f, f, colour);
            }
            return;
        }
        let first = lo as u64;
        let last = ceil_of_non_negative(hi).saturating_sub(1);
        let cover = |c: u64| overlap(pixel_lo, pixel_hi, c as f64) / cw;
        let (cover_first, cover_last) = (cover(first), cover(last));
        let interior = last.saturating_sub(first).saturating_sub(1);
        for &(py, fy) in &self.row_pixels[from..to] {
            let cell = &mut self.acc[py];
            cell.add(cover_first * fy, colour, alpha);
            if last > first {
                cell.add(cover_last * fy, colour, alpha);
            }
            if interior > 0 {
                cell.add_many(interior as f64, fy / cw, colour, alpha);
            }
        }
    }

    /// Finishes the pixel columns before `until` that are still open, with
    /// the part of each open run (`runs[i]` of row `first_row + i`: its
    /// start column and colour) up to column `end` in each. Runs left open
    /// go on from where they were: [`CoverageGrid::add_run`] adds only to
    /// columns not finished.
    fn finish_columns_with_runs(
        &mut self,
        until: usize,
        end: u64,
        runs: &[(u64, Colour)],
        first_row: usize,
        palette: &Palette,
    ) {
        while self.open_pixel < until.min(self.view.width as usize) {
            let px = self.open_pixel;
            for (i, &(start, colour)) in runs.iter().enumerate() {
                self.add_run_to_pixel(px, first_row + i, start, end, colour);
            }
            self.finish_column(px, palette);
        }
    }

    /// Where the pixel rows of `row` are in `row_pixels`.
    #[inline]
    fn row_span(&self, row: usize) -> (usize, usize) {
        let i = row.wrapping_sub(self.row_range().0);
        match (self.row_starts.get(i), self.row_starts.get(i + 1)) {
            (Some(&from), Some(&to)) => (from, to),
            _ => (0, 0),
        }
    }

    /// Adds summed rows to the open pixel column: `columns` columns' worth,
    /// each row's cells as many as its occupancy says.
    fn add_rows(&mut self, rows: &[SpanRow], columns: f64, palette: &Palette) {
        let (first, end) = self.row_range();
        for (r, row) in rows.iter().enumerate().take(end).skip(first) {
            let cells = row.occupancy * columns;
            if cells <= 0.0 {
                continue;
            }
            let colour = palette.colour(self.view.colour_by, &row.means);
            let (cw, alpha) = (self.cw, self.view.alpha);
            let (from, to) = self.row_span(r);
            for &(py, fy) in &self.row_pixels[from..to] {
                self.acc[py].add_many(cells, fy / cw, colour, alpha);
            }
        }
    }

    fn into_image(self) -> Image {
        Image { width: self.view.width, height: self.view.height, rgba: self.finished.into_rgba() }
    }
}

/// How a long drawing reports progress and can be stopped: called now and
/// then with (work done, work in all); returning false stops it with
/// [`DecodeError::Cancelled`].
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64) -> bool;

/// Rasterises the working-set bitmap for `view`, the best way for its
/// scale (see the module documentation).
pub fn rasterize_bitmap(model: &Model, view: &BitmapView, palette: &Palette) -> Result<Image, DecodeError> {
    rasterize_bitmap_with_progress(model, view, palette, &|pc| format!("{pc:#x}"), &mut |_, _| true)
}

/// [`rasterize_bitmap`] with progress and cancellation; `names` names
/// functions for colouring by category.
pub fn rasterize_bitmap_with_progress(
    model: &Model,
    view: &BitmapView,
    palette: &Palette,
    names: FunctionNames<'_>,
    progress: Progress<'_>,
) -> Result<Image, DecodeError> {
    rasterize_bitmap_refined(model, None, view, palette, names, progress)
}

/// [`rasterize_bitmap_with_progress`], drawing from `refined` a view that
/// would otherwise be drawn from spans, if it fits
/// ([`RangeSummary::fits`]): its blocks are no wider than a pixel, as the
/// decoded summary's are where that is drawn from.
pub fn rasterize_bitmap_refined(
    model: &Model,
    refined: Option<&RangeSummary>,
    view: &BitmapView,
    palette: &Palette,
    names: FunctionNames<'_>,
    progress: Progress<'_>,
) -> Result<Image, DecodeError> {
    let cw = view.columns_per_pixel();
    if view.colour_by.is_category() {
        let wide = (view.columns.1 - view.columns.0).max(0.0);
        if wide > MAX_CATEGORY_COLUMNS as f64 {
            return Err(DecodeError::InvalidSetting(format!(
                "colouring by {} draws every column: views of at most {} columns (this one has {}); zoom in",
                view.colour_by.name(),
                MAX_CATEGORY_COLUMNS,
                wide as u64
            )));
        }
        rasterize_exact_with(model, view, palette, names, progress)
    } else if cw <= EXACT_COLUMNS_PER_PIXEL {
        rasterize_exact(model, view, palette, progress)
    } else if model.pyramid.level_for(cw).is_some() {
        rasterize_from_summary(model, view, palette)
    } else if let Some(refined) = refined.filter(|r| r.fits(view)) {
        let RangeRequest { from, to, .. } = refined.request();
        rasterize_blocks(&refined.blocks(), refined.block_width(), (from, to), view, palette)
    } else {
        rasterize_from_spans(model, view, palette, progress)
    }
}

/// Whether the allocation tint applies to `line` at `column`.
fn tinted(model: &Model, index: &AllocationIndex, line: u64, column: u64) -> bool {
    let ls = model.line_size();
    let lo = ls.start_of(line);
    index.overlapping(&model.allocations, lo, lo.saturating_add(u64::from(ls.bytes())), column).next().is_some()
}

/// Exact drawing, cell by cell. A line's cells only change colour when the
/// line is touched or when any line is inserted (every age drops; rows
/// below shift), so the replay keeps one open run per row and closes runs
/// at those moments. Each pixel column is finished as the replay passes
/// it, with its part of the open runs, so only one column of pixel sums
/// is kept: O(hits + (misses + pixel columns) x rows) for the range.
pub fn rasterize_exact(
    model: &Model,
    view: &BitmapView,
    palette: &Palette,
    progress: Progress<'_>,
) -> Result<Image, DecodeError> {
    rasterize_exact_with(model, view, palette, &|pc| format!("{pc:#x}"), progress)
}

/// [`rasterize_exact`], naming functions for colouring by category. A
/// range of many columns is drawn in two halves at once ([`in_two_halves`]).
fn rasterize_exact_with(
    model: &Model,
    view: &BitmapView,
    palette: &Palette,
    names: FunctionNames<'_>,
    progress: Progress<'_>,
) -> Result<Image, DecodeError> {
    in_two_halves(view, palette, PARALLEL_EXACT_COLUMNS, progress, |half, progress| {
        rasterize_exact_part(model, half, palette, names, progress)
    })
}

/// Columns above which exact drawing splits its pixels between two threads
/// (each replays its half from its own snapshot): about a frame's worth of
/// drawing, more than the second replay up to the half costs.
const PARALLEL_EXACT_COLUMNS: f64 = 1_000.0;

/// One thread's part of [`rasterize_exact_with`].
fn rasterize_exact_part(
    model: &Model,
    view: &BitmapView,
    palette: &Palette,
    names: FunctionNames<'_>,
    progress: Progress<'_>,
) -> Result<Image, DecodeError> {
    let mut grid = CoverageGrid::new(view, palette)?;
    let config = model.working_set.config;
    let line_size = model.line_size();
    // Allocation lifetimes change tints, so they close runs like a miss.
    let mut boundaries: Vec<u64> =
        model.allocations.iter().flat_map(|r| [r.alloc_column, r.free_column.unwrap_or(u64::MAX)]).collect();
    boundaries.sort_unstable();
    let (first_row, row_end) = grid.row_range();
    let (a, b) = view.columns;
    let (from, to) = (a.floor().max(0.0) as u64, (b.ceil() as u64).min(model.columns));
    let by_function = view.colour_by == ColourBy::Function;
    let mut cursor = if by_function {
        ColumnCursor::<SortedLines>::with_calls(model, from)?
    } else {
        ColumnCursor::<SortedLines>::new(model, from)?
    };
    let mut categories = Categories::new(model, names, view.colour_by);
    if by_function {
        // Lines touched before the range: who touched them.
        let mut earlier: Vec<u64> = cursor.set().lines().iter().map(|l| l.last_column).collect();
        earlier.sort_unstable();
        earlier.dedup();
        categories.toucher.extend(functions_at(model, &earlier)?);
    }
    let colour_of = |categories: &mut Categories, set: &OrderedWorkingSet, line: &LineState, column: u64| {
        if view.colour_by.is_category() {
            let fresh = f64::from(set.age(line)) / f64::from(config.max_age.max(1));
            return category_colour(palette, categories.of_line(line, column), fresh);
        }
        let tint = tinted(model, &model.allocation_index, line.line, column);
        palette.colour(view.colour_by, &CellMeans::of_line(line, set.age(line), &config, tint))
    };
    // Open runs of the rows in view, by row - first_row: (start, colour).
    let mut runs: Vec<(u64, Colour)> = Vec::new();
    let mut clock = None;
    let mut next_boundary = boundaries.partition_point(|&c| c <= from);
    let mut last_column = from;
    while cursor.column() < to {
        let Some(read) = cursor.step(&mut |_: Departure| {})? else { break };
        if by_function {
            let innermost = cursor.calls().and_then(|c| c.open_functions(read.thread).last());
            categories.note_toucher(read.column, innermost);
        }
        let (column, set) = (read.column, cursor.set());
        last_column = column + 1;
        // The cells before `column` are drawn: the pixel columns no later
        // cell reaches are finished, so the grid holds one column of sums.
        grid.finish_columns_with_runs(grid.pixel_of(column), column, &runs, first_row, palette);
        if column % (1 << 14) == 0 && !progress(column - from, to - from) {
            return Err(DecodeError::Cancelled);
        }
        let lines = set.lines();
        let crossed = next_boundary < boundaries.len() && boundaries[next_boundary] <= column;
        while next_boundary < boundaries.len() && boundaries[next_boundary] <= column {
            next_boundary += 1;
        }
        if clock != Some(set.clock()) || crossed {
            // Everything changed (ages, rows, tints): close all runs.
            for (i, &(start, colour)) in runs.iter().enumerate() {
                grid.add_run(first_row + i, start, column, colour);
            }
            clock = Some(set.clock());
            let end = row_end.min(lines.len());
            runs.clear();
            runs.extend(
                (first_row..end.max(first_row))
                    .map(|row| (column, colour_of(&mut categories, set, &lines[row], column))),
            );
            continue;
        }
        // A hit: only the lines this read touched changed colour.
        let (first_line, last_line) = line_size.lines(read.access.addr, read.access.size);
        for line in first_line..=last_line {
            let Ok(row) = lines.binary_search_by_key(&line, |l| l.line) else { continue };
            let Some(run) = row.checked_sub(first_row).and_then(|i| runs.get_mut(i)) else { continue };
            let colour = colour_of(&mut categories, set, &lines[row], column);
            grid.add_run(row, run.0, column, run.1);
            *run = (column, colour);
        }
    }
    grid.finish_columns_with_runs(grid.pixel_end(last_column), last_column, &runs, first_row, palette);
    Ok(grid.into_image())
}

/// Category colours of lines, cached by function: the function that last
/// touched a line (by the column of that touch), or the allocating function
/// of the block holding it.
struct Categories<'a> {
    model: &'a Model,
    names: FunctionNames<'a>,
    by: ColourBy,
    /// Innermost function by column, for the columns whose lines are drawn.
    toucher: std::collections::HashMap<u64, u64>,
    colours: std::collections::HashMap<u64, Colour>,
}

impl<'a> Categories<'a> {
    fn new(model: &'a Model, names: FunctionNames<'a>, by: ColourBy) -> Self {
        Categories { model, names, by, toucher: Default::default(), colours: Default::default() }
    }

    fn note_toucher(&mut self, column: u64, function: Option<u64>) {
        if let Some(f) = function {
            self.toucher.insert(column, f);
        }
    }

    fn colour_of_function(&mut self, pc: u64) -> Colour {
        let names = self.names;
        *self.colours.entry(pc).or_insert_with(|| frame_colour(&names(pc)))
    }

    fn of_line(&mut self, line: &LineState, column: u64) -> Option<Colour> {
        match self.by {
            ColourBy::Function => {
                let f = *self.toucher.get(&line.last_column)?;
                Some(self.colour_of_function(f))
            }
            ColourBy::CacheMisses => {
                let (d1, ll) = self.model.cache.columns.get(line.last_column);
                Some(
                    MISS_COLOURS[if ll {
                        0
                    } else if d1 {
                        1
                    } else {
                        2
                    }],
                )
            }
            ColourBy::Allocation => {
                let ls = self.model.line_size();
                let lo = ls.start_of(line.line);
                let block = self
                    .model
                    .allocation_index
                    .overlapping(&self.model.allocations, lo, lo.saturating_add(u64::from(ls.bytes())), column)
                    .max_by_key(|r| r.alloc_column)?;
                let callsite = block.callsite;
                Some(self.colour_of_function(callsite))
            }
            _ => None,
        }
    }
}

/// The innermost function executing the read of each of `columns` (sorted):
/// from the stored call tree when it kept every frame, else by one replay
/// of the columns' range.
fn functions_at(model: &Model, columns: &[u64]) -> Result<Vec<(u64, u64)>, DecodeError> {
    let (Some(&first), Some(&last)) = (columns.first(), columns.last()) else { return Ok(Vec::new()) };
    if model.call_tree.pruned_below == 0 {
        // Pre-order: of the frames holding a column, the last is innermost.
        return Ok(columns
            .iter()
            .filter_map(|&c| model.call_tree.overlapping(c, c + 1).last().map(|f| (c, f.function)))
            .collect());
    }
    let mut found = Vec::with_capacity(columns.len());
    let mut cursor = ColumnCursor::<HashedLines>::with_calls(model, first)?;
    let mut wanted = columns.iter().peekable();
    while cursor.column() <= last {
        let Some(read) = cursor.step(&mut |_: Departure| {})? else { break };
        while wanted.next_if(|&&c| c < read.column).is_some() {}
        if wanted.next_if(|&&c| c == read.column).is_some()
            && let Some(f) = cursor.calls().and_then(|c| c.open_functions(read.thread).last())
        {
            found.push((read.column, f));
        }
    }
    Ok(found)
}

/// Drawing from the precomputed summary: each pixel adds the blocks of the
/// coarsest level that is at least as fine as a pixel, a block cut by a
/// pixel edge in proportion.
pub fn rasterize_from_summary(model: &Model, view: &BitmapView, palette: &Palette) -> Result<Image, DecodeError> {
    let Some(level) = model.pyramid.level_for(view.columns_per_pixel()) else {
        return Err(DecodeError::InvalidSetting("no summary level fits this view".into()));
    };
    let blocks: Vec<&[SummaryCell]> = (0..level.blocks()).map(|i| level.block(i)).collect();
    rasterize_blocks(&blocks, 1 << level.shift, (0, model.columns), view, palette)
}

/// Draws summary blocks of `block_width` columns each over columns
/// `columns.0..columns.1` (the first block starts at `columns.0`; the last
/// may be shorter) for `view`: the summary's levels, the blocks decoded so
/// far while a trace is being decoded, or a range summary
/// ([`crate::range_summary`]). Pixels outside the columns stay the
/// background. In two halves at once: nearly all the work is per pixel
/// (each pixel's blocks merged, then every row added and resolved): a
/// 1920x1080 picture of 600-1,200 columns a pixel took 53-65 ms on one
/// thread, 32-34 ms in halves (medians, 10M-read benchmark trace, `cargo
/// bench --bench decode -- --draw`).
pub fn rasterize_blocks(
    blocks: &[&[SummaryCell]],
    block_width: u64,
    columns: (u64, u64),
    view: &BitmapView,
    palette: &Palette,
) -> Result<Image, DecodeError> {
    in_two_halves(view, palette, 0.0, &mut |_, _| true, |half, _| {
        rasterize_blocks_part(blocks, block_width, columns, half, palette)
    })
}

/// One thread's part of [`rasterize_blocks`].
fn rasterize_blocks_part(
    blocks: &[&[SummaryCell]],
    block_width: u64,
    columns: (u64, u64),
    view: &BitmapView,
    palette: &Palette,
) -> Result<Image, DecodeError> {
    let mut grid = CoverageGrid::new(view, palette)?;
    let cw = grid.cw;
    let width = block_width.max(1) as f64;
    // Columns from the first block's start.
    let (origin, columns) = (columns.0 as f64, columns.1.saturating_sub(columns.0) as f64);
    let a = view.columns.0 - origin;
    // The blocks under one pixel merge into one row list first, so each
    // pixel row is added once.
    let mut merged = RowMerger::default();
    for px in 0..view.width as usize {
        let x0 = (a + px as f64 * cw).max(0.0);
        let x1 = (a + (px + 1) as f64 * cw).min(columns);
        if x1 <= x0 {
            continue;
        }
        let first = (x0 / width).floor() as usize;
        let last = ((x1 / width).ceil() as usize).min(blocks.len());
        merged.clear();
        for (i, block) in blocks.iter().enumerate().take(last).skip(first) {
            let start = i as f64 * width;
            let end = (start + width).min(columns);
            let part = x1.min(end) - x0.max(start);
            if part > 0.0 {
                merged.add(block.iter().map(SummaryCell::row), part);
            }
        }
        let covered = merged.width();
        if covered > 0.0 {
            grid.add_rows(merged.finish(), covered, palette);
            grid.finish_column(px, palette);
        }
    }
    Ok(grid.into_image())
}

/// Columns above which span drawing splits its pixels between two threads
/// (each replays its half from its own snapshot). Low: closing a pixel's
/// span costs as much as replaying several hundred columns (every row of
/// the set is summed, sorted and drawn; at 90 columns a pixel, two thirds
/// of a picture's samples against a tenth for the replay, `perf record`),
/// so even a view of few columns a pixel is mostly per-pixel work, which
/// halves. At 200,000, views of up to 104 columns a pixel at 1920 pixels
/// were drawn on one thread: 1920x1080 pictures at 8, 30 and 90 columns a
/// pixel took 140, 158 and 155 ms (medians, 10M-read benchmark trace)
/// against 82, 87 and 91 ms split, for about the same CPU time (`cargo
/// bench --bench decode -- --draw`).
const PARALLEL_SPAN_COLUMNS: f64 = 10_000.0;

/// Pictures at least this wide are drawn from spans in two halves
/// whatever their columns: their spans alone are worth a second thread.
/// (Span drawing starts above [`EXACT_COLUMNS_PER_PIXEL`], so a viewer's
/// bitmap of 1,700 pixels is under [`PARALLEL_SPAN_COLUMNS`] up to 5.9
/// columns a pixel: drawn on one thread, such a step of the 10M-read
/// benchmark trace took 114-132 ms, against 64-79 ms for the split step
/// at twice the columns a pixel.)
const PARALLEL_SPAN_PIXELS: u32 = 512;

/// Drawing by summing spans, one per pixel, while replaying the range. A
/// long range is drawn in two halves at once, split on a pixel edge (the
/// result is the same: every pixel is its own span).
pub fn rasterize_from_spans(
    model: &Model,
    view: &BitmapView,
    palette: &Palette,
    progress: Progress<'_>,
) -> Result<Image, DecodeError> {
    let min_columns = if view.width >= PARALLEL_SPAN_PIXELS { 0.0 } else { PARALLEL_SPAN_COLUMNS };
    in_two_halves(view, palette, min_columns, progress, |half, progress| {
        rasterize_spans_part(model, half, palette, progress)
    })
}

/// Views narrower than this are drawn whole, on one thread.
const MIN_SPLIT_PIXELS: u32 = 64;

/// Draws `view` as two pictures at once, of the pixels left and right of a
/// pixel edge, with `part` (a thread each; this thread's part reports the
/// progress of both), and puts them side by side; a view of fewer than
/// `min_columns` columns or [`MIN_SPLIT_PIXELS`] pixels, or drawn
/// [`crate::drawing_threads::on_one_thread`], is `part` of the whole.
/// Every pixel is drawn by one part, from the same cells, so the picture
/// is the one `part` would draw of the whole view.
fn in_two_halves(
    view: &BitmapView,
    palette: &Palette,
    min_columns: f64,
    progress: Progress<'_>,
    part: impl Fn(&BitmapView, Progress<'_>) -> Result<Image, DecodeError> + Sync,
) -> Result<Image, DecodeError> {
    let (a, b) = view.columns;
    if b - a < min_columns || view.width < MIN_SPLIT_PIXELS || !second_thread_allowed() {
        return part(view, progress);
    }
    let k = view.width / 2;
    let split = a + f64::from(k) * view.columns_per_pixel();
    let left = BitmapView { columns: (a, split), width: k, ..*view };
    let right = BitmapView { columns: (split, b), width: view.width - k, ..*view };
    let (l, r) = in_two_parts(progress, |p| part(&left, p), |p| part(&right, p));
    let (l, r) = (l?, r?);
    let mut image = Image::new(view.width, view.height, palette.background);
    image.copy_from(&l, 0, 0);
    image.copy_from(&r, l.width, 0);
    Ok(image)
}

/// One thread's part of [`rasterize_from_spans`].
fn rasterize_spans_part(
    model: &Model,
    view: &BitmapView,
    palette: &Palette,
    progress: Progress<'_>,
) -> Result<Image, DecodeError> {
    let mut grid = CoverageGrid::new(view, palette)?;
    let cw = grid.cw;
    let (a, b) = view.columns;
    let to = (b.ceil() as u64).min(model.columns);
    // Pixel edges on whole columns.
    let edge = |px: usize| ((a + px as f64 * cw).round().max(0.0) as u64).min(to);
    let start = edge(0);
    let mut walk = SpanWalk::new(model, start)?;
    for px in 0..view.width as usize {
        walk.walk_to(edge(px + 1))?;
        let span = walk.close_span();
        if span.end > span.start {
            grid.add_rows(&span.rows, (span.end - span.start) as f64, palette);
            grid.finish_column(px, palette);
        }
        if px % 64 == 0 && !progress(walk.column().saturating_sub(start), to - start) {
            return Err(DecodeError::Cancelled);
        }
    }
    Ok(grid.into_image())
}

/// Flamegraph colour of a function: a warm hue from its name.
pub fn frame_colour(name: &str) -> Colour {
    let mut h: u32 = 2166136261;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(16777619);
    }
    let t = f64::from(h % 1000) / 1000.0;
    let v = f64::from((h / 1000) % 1000) / 1000.0;
    [0.85 + 0.15 * v, 0.35 + 0.45 * t, 0.15 + 0.2 * v]
}

/// Colour of bars that stand for several frames too narrow to draw.
pub const MERGED_FRAMES_COLOUR: Colour = [0.55, 0.52, 0.5];

/// Differential flamegraph: a frame with no partner in the other trace.
pub const UNMATCHED_FRAME_COLOUR: Colour = [0.42, 0.42, 0.45];

/// Differential flamegraph colour of a normalised delta
/// ([`crate::compare::normalised_delta`], -1..1): blue for fewer in B,
/// near-white unchanged, red for more; saturation grows with the change.
pub fn delta_colour(delta: f64) -> Colour {
    const SAME: Colour = [0.88, 0.88, 0.86];
    const MORE: Colour = [0.87, 0.16, 0.12];
    const FEWER: Colour = [0.16, 0.38, 0.92];
    let d = delta.clamp(-1.0, 1.0);
    let (to, t) = if d >= 0.0 { (MORE, d) } else { (FEWER, -d) };
    // sqrt: a 20% change is already clearly tinted.
    let t = t.sqrt();
    [0, 1, 2].map(|i| SAME[i] + (to[i] - SAME[i]) * t)
}

/// One bar of the flamegraph, in pixels of the view.
#[derive(Clone, Debug, PartialEq)]
pub struct FlameBar {
    /// Left edge (fractional pixels).
    pub x0: f64,
    /// Right edge.
    pub x1: f64,
    /// Depth (0: the traced function).
    pub depth: u32,
    /// The frame it draws (an index into the frames given), or `None` for
    /// a summary bar of several frames each narrower than a pixel.
    pub frame: Option<usize>,
    /// Frames the bar stands for.
    pub frames: u32,
    /// The function of every frame the bar stands for, if they share one
    /// (a summary of one function's calls still has a name).
    pub function: Option<u64>,
}

/// The bars of `frames` over columns `[a, b)` at `width` pixels: one per
/// frame at least [`MIN_BAR_PIXELS`] wide; runs of narrower neighbours at
/// the same depth merge into summary bars (never one draw per frame); each
/// run of frames the stored tree dropped (`pruned`,
/// [`Model::pruned_runs_for_view`]) is a summary bar too.
pub fn flame_bars(
    frames: &[Frame],
    pruned: &[crate::calltree::PrunedRun],
    columns: (f64, f64),
    width: u32,
) -> Vec<FlameBar> {
    let (a, b) = columns;
    let cw = (b - a) / f64::from(width.max(1));
    let mut bars = Vec::new();
    // The open summary bar of each depth.
    let mut merging: Vec<Option<FlameBar>> = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let x0 = (f.first_column as f64 - a) / cw;
        let x1 = (f.end_column as f64 - a) / cw;
        if x1 <= 0.0 || x0 >= f64::from(width) || f.end_column == f.first_column {
            continue;
        }
        let depth = f.depth as usize;
        if merging.len() <= depth {
            merging.resize(depth + 1, None);
        }
        if x1 - x0 >= MIN_BAR_PIXELS {
            if let Some(m) = merging[depth].take() {
                bars.push(m);
            }
            bars.push(FlameBar { x0, x1, depth: f.depth, frame: Some(i), frames: 1, function: Some(f.function) });
            continue;
        }
        match &mut merging[depth] {
            Some(m) if x0 <= m.x1 + 0.5 => {
                m.x1 = m.x1.max(x1);
                m.frames += 1;
                m.frame = None;
                m.function = m.function.filter(|&shared| shared == f.function);
            }
            slot => {
                if let Some(m) = slot.take() {
                    bars.push(m);
                }
                let function = Some(f.function);
                *slot = Some(FlameBar { x0, x1, depth: f.depth, frame: Some(i), frames: 1, function });
            }
        }
    }
    bars.extend(merging.into_iter().flatten());
    for run in pruned {
        let (x0, x1) = ((run.first_column as f64 - a) / cw, (run.end_column as f64 - a) / cw);
        if x1 <= 0.0 || x0 >= f64::from(width) {
            continue;
        }
        let frames = u32::try_from(run.frames).unwrap_or(u32::MAX);
        bars.push(FlameBar { x0, x1, depth: run.depth, frame: None, frames, function: run.function });
    }
    bars
}

/// Bars narrower than this (in pixels) merge with their neighbours.
pub const MIN_BAR_PIXELS: f64 = 1.0;

/// Fewest pixels between the lines `render` draws where invocations start.
const INVOCATION_LINE_GAP: u32 = 4;

/// Where a flamegraph names a function: one bar of one frame, or a run of
/// neighbouring bars of one function (calls one after another, each too
/// narrow for the name: a traced `strlen` called 847 times was a bar of its
/// colour with no name anywhere).
#[derive(Clone, Debug, PartialEq)]
pub struct BarLabel {
    /// Left edge of the first bar (fractional pixels).
    pub x0: f64,
    /// Right edge of the last bar.
    pub x1: f64,
    /// Depth of the bars.
    pub depth: u32,
    /// The function.
    pub function: u64,
    /// The calls (frames) in the run.
    pub calls: u32,
}

impl BarLabel {
    /// The text of the label: the name, and the calls when more than one.
    pub fn text(&self, name: &str) -> String {
        if self.calls == 1 { name.to_string() } else { format!("{name} ({} calls)", self.calls) }
    }

    /// [`BarLabel::text`] in at most `chars` characters: whole when it
    /// fits, else cut and ended by `ellipsis` (the viewer's font has `…`,
    /// `render`'s ASCII font writes `..`); `None` when not even one
    /// character of the name fits before the ellipsis.
    pub fn text_within(&self, name: &str, chars: usize, ellipsis: &str) -> Option<String> {
        let text = self.text(name);
        if text.chars().count() <= chars {
            return Some(text);
        }
        let kept = chars.checked_sub(ellipsis.chars().count()).filter(|&k| k > 0)?;
        Some(text.chars().take(kept).chain(ellipsis.chars()).collect())
    }
}

/// The labels of `bars` (as [`flame_bars`] made them): a bar of one
/// function (of one frame, or a summary of calls of that function) starts
/// a run at its depth, and the next bar at that depth joins it if it is of
/// the same function and touches it, with no bar of a shallower depth
/// between them (a new caller). Summary bars of several functions end a
/// run and get no label.
pub fn bar_labels(bars: &[FlameBar]) -> Vec<BarLabel> {
    let mut labels = Vec::new();
    // The open run of each depth.
    let mut open: Vec<Option<BarLabel>> = Vec::new();
    for bar in bars {
        let depth = bar.depth as usize;
        if open.len() <= depth {
            open.resize(depth + 1, None);
        }
        // A bar ends the runs below it: their caller is over.
        for run in open.iter_mut().skip(depth + 1) {
            labels.extend(run.take());
        }
        match (&mut open[depth], bar.function) {
            // Touching on either side: the bars of dropped frames come
            // after the others.
            (Some(run), Some(f)) if run.function == f && bar.x0 <= run.x1 + 0.5 && bar.x1 + 0.5 >= run.x0 => {
                (run.x0, run.x1) = (run.x0.min(bar.x0), run.x1.max(bar.x1));
                run.calls += bar.frames;
            }
            (slot, function) => {
                labels.extend(slot.take());
                let (x0, x1, depth, calls) = (bar.x0, bar.x1, bar.depth, bar.frames);
                *slot = function.map(|function| BarLabel { x0, x1, depth, function, calls });
            }
        }
    }
    labels.extend(open.into_iter().flatten());
    labels
}

/// Rasterises flamegraph bars: root on top, `bar_height` pixels a level, a
/// 1-pixel gap under each bar; `colour` gives each bar's colour.
pub fn rasterize_flamegraph(
    bars: &[FlameBar],
    width: u32,
    height: u32,
    bar_height: f64,
    palette: &Palette,
    mut colour: impl FnMut(&FlameBar) -> Colour,
) -> Image {
    let mut image = Image::new(width, height, palette.background);
    for bar in bars {
        let c = colour(bar);
        let y0 = (f64::from(bar.depth) * bar_height).round() as u32;
        let y1 = ((f64::from(bar.depth) + 1.0) * bar_height).round() as u32;
        let px_first = bar.x0.floor().max(0.0) as u32;
        let px_end = (bar.x1.ceil().min(f64::from(width))).max(0.0) as u32;
        for px in px_first..px_end {
            let cover = overlap(bar.x0, bar.x1, f64::from(px));
            for py in y0..y1.saturating_sub(1).max(y0 + 1) {
                image.blend(px, py, c, cover);
            }
        }
    }
    image
}

/// Largest image `render` draws (about 400 MB of accumulators).
pub const MAX_PIXELS: u64 = 1 << 24;

/// What `render` draws.
#[derive(Clone, Copy, Debug)]
pub struct RenderOptions {
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Column range (default: all).
    pub columns: Option<(u64, u64)>,
    /// Anti-aliasing exponent.
    pub alpha: f64,
    /// What colours show.
    pub colour_by: ColourBy,
}

/// The whole picture's pixels and where its flamegraph bars are, so that
/// the caller can label them.
pub struct Picture {
    /// Flamegraph on top, a separator line, the bitmap beneath.
    pub image: Image,
    /// The frames drawn (bars refer to them by index).
    pub frames: Vec<Frame>,
    /// The bars, in pixels.
    pub bars: Vec<FlameBar>,
    /// Height of one flamegraph level in pixels.
    pub bar_height: f64,
    /// Height of the flamegraph area.
    pub flame_height: u32,
}

/// The whole picture: flamegraph on top, the bitmap beneath on the same x
/// scale, a separator line between them. `name` names a function entry
/// address (for bar colours).
pub fn render(
    model: &Model,
    options: &RenderOptions,
    name: FunctionNames<'_>,
    progress: Progress<'_>,
) -> Result<Picture, DecodeError> {
    let (a, b) = options.columns.unwrap_or((0, model.columns));
    if b <= a || b > model.columns {
        return Err(DecodeError::InvalidSetting(format!(
            "column range {a}..{b} is empty or outside the trace's {} columns",
            model.columns
        )));
    }
    if options.width < 16 || options.height < 32 {
        return Err(DecodeError::InvalidSetting("image must be at least 16x32 pixels".to_string()));
    }
    if u64::from(options.width) * u64::from(options.height) > MAX_PIXELS {
        return Err(DecodeError::InvalidSetting(format!(
            "{}x{} is larger than the {MAX_PIXELS}-pixel limit; draw a column range instead",
            options.width, options.height
        )));
    }
    if !(options.alpha > 0.0 && options.alpha.is_finite()) {
        return Err(DecodeError::InvalidSetting(format!("alpha {} must be a positive number", options.alpha)));
    }
    let palette = Palette::default();
    let per_pixel = (b - a) as f64 / f64::from(options.width.max(1));
    let frames = model.frames_for_view(a, b, per_pixel * MIN_BAR_PIXELS, &mut || true)?;
    let pruned = model.pruned_runs_for_view(a, b, per_pixel * MIN_BAR_PIXELS);
    let depth = crate::calltree::height(&frames).max(1);
    let flame_height = (depth * 16).min(options.height * 2 / 5).max(8);
    let bar_height = (f64::from(flame_height) / f64::from(depth)).clamp(1.0, 16.0);
    let bitmap_height = options.height - flame_height - 2;
    let columns = (a as f64, b as f64);
    let bars = flame_bars(&frames, &pruned, columns, options.width);
    let mut flame =
        rasterize_flamegraph(&bars, options.width, flame_height, bar_height, &palette, |bar| match bar.frame {
            Some(i) if bar.frames == 1 => frame_colour(&name(frames[i].function)),
            _ => MERGED_FRAMES_COLOUR,
        });
    // A line where each invocation starts, where invocations are at least
    // a few pixels apart: closer, the lines were a solid light block (the
    // last sixth of a trace of 312,500 calls of 69 reads each).
    let mut last_line: Option<u32> = None;
    for f in frames.iter().filter(|f| f.parent.is_none() && f.first_column > a) {
        let x = ((f.first_column as f64 - columns.0) / (columns.1 - columns.0) * f64::from(options.width)) as u32;
        let end = ((f.end_column as f64 - columns.0) / (columns.1 - columns.0) * f64::from(options.width)) as u32;
        let apart = last_line.is_none_or(|l| x >= l + INVOCATION_LINE_GAP) && end >= x + INVOCATION_LINE_GAP;
        if apart {
            for y in 0..flame_height {
                flame.set(x, y, [0.9, 0.9, 0.95]);
            }
            last_line = Some(x);
        }
    }
    let rows = f64::from(model.metrics.max_rows.max(1));
    let view = BitmapView {
        columns,
        rows: (0.0, rows),
        width: options.width,
        height: bitmap_height,
        alpha: options.alpha,
        colour_by: options.colour_by,
    };
    let bitmap = rasterize_bitmap_with_progress(model, &view, &palette, name, progress)?;
    let mut image = Image::new(options.width, options.height, palette.background);
    image.paste(&flame, 0);
    for x in 0..options.width {
        image.set(x, flame_height, [0.35, 0.35, 0.4]);
    }
    image.paste(&bitmap, flame_height + 2);
    Ok(Picture { image, frames, bars, bar_height, flame_height })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls of one function one after another share a label; a call of
    /// another function, or of a new caller, starts a new one.
    #[test]
    fn neighbouring_calls_of_one_function_share_a_label() {
        let frame = |function: u64, depth: u32, first_column: u64, end_column: u64| Frame {
            function,
            callsite: 0,
            parent: None,
            depth,
            invocation: 0,
            thread: 1,
            first_column,
            end_column,
            self_reads: end_column - first_column,
            self_writes: 0,
            total_reads: end_column - first_column,
            total_writes: 0,
            unfinished: false,
        };
        let (f, g, h, p, q) = (0xf, 0x9, 0x8, 0x1, 0x2);
        let frames = [
            frame(f, 0, 0, 2),
            frame(f, 0, 2, 4),
            frame(f, 0, 4, 6),
            frame(g, 0, 6, 8),
            frame(f, 0, 8, 10),
            frame(p, 0, 10, 14),
            frame(h, 1, 12, 14),
            frame(q, 0, 14, 18),
            frame(h, 1, 14, 16),
        ];
        let bars = flame_bars(&frames, &[], (0.0, 18.0), 18);
        let mut labels: Vec<(u32, f64, f64, u64, u32)> =
            bar_labels(&bars).into_iter().map(|l| (l.depth, l.x0, l.x1, l.function, l.calls)).collect();
        labels.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let want = vec![
            (0, 0.0, 6.0, f, 3),
            (0, 6.0, 8.0, g, 1),
            (0, 8.0, 10.0, f, 1),
            (0, 10.0, 14.0, p, 1),
            (0, 14.0, 18.0, q, 1),
            (1, 12.0, 14.0, h, 1),
            (1, 14.0, 16.0, h, 1),
        ];
        assert_eq!(labels, want);

        // Calls narrower than a pixel merge into a summary bar: of one
        // function, it is named with their number; of two, it is not.
        let calls: Vec<Frame> = (0..100).map(|c| frame(f, 0, c, c + 1)).collect();
        let summary = bar_labels(&flame_bars(&calls, &[], (0.0, 100.0), 10));
        let got: Vec<(f64, f64, u64, u32)> = summary.iter().map(|l| (l.x0, l.x1, l.function, l.calls)).collect();
        assert_eq!(got, vec![(0.0, 10.0, f, 100)]);
        let mixed: Vec<Frame> = (0..100).map(|c| frame(if c % 2 == 0 { f } else { g }, 0, c, c + 1)).collect();
        assert_eq!(bar_labels(&flame_bars(&mixed, &[], (0.0, 100.0), 10)), vec![]);

        // Calls the stored tree dropped are a summary bar of their own,
        // after the others, and join the label of the calls kept after them.
        let dropped =
            crate::calltree::PrunedRun { depth: 0, first_column: 0, end_column: 60, frames: 60, function: Some(f) };
        let kept: Vec<Frame> = (60..100).map(|c| frame(f, 0, c, c + 1)).collect();
        let bars = flame_bars(&kept, &[dropped], (0.0, 100.0), 10);
        assert_eq!(bars.last().map(|b| (b.x0, b.x1, b.frames, b.function)), Some((0.0, 6.0, 60, Some(f))));
        let got: Vec<(f64, f64, u32)> = bar_labels(&bars).iter().map(|l| (l.x0, l.x1, l.calls)).collect();
        assert_eq!(got, vec![(0.0, 10.0, 100)]);

        let three = BarLabel { x0: 0.0, x1: 6.0, depth: 0, function: f, calls: 3 };
        assert_eq!(three.text("strlen"), "strlen (3 calls)");
        assert_eq!(BarLabel { calls: 1, ..three }.text("strlen"), "strlen");
        assert_eq!(three.text_within("strlen", 16, "…").as_deref(), Some("strlen (3 calls)"));
        assert_eq!(three.text_within("strlen", 15, "…").as_deref(), Some("strlen (3 call…"));
        assert_eq!(three.text_within("strlen", 5, "..").as_deref(), Some("str.."));
        assert_eq!(three.text_within("strlen", 2, ".."), None, "no room for a character of the name");
        assert_eq!(three.text_within("strlen", 0, "…"), None);
    }

    /// Random summary blocks: `rows` rows each, some rows empty.
    fn random_blocks(n: usize, rows: usize, seed: u64) -> Vec<Vec<SummaryCell>> {
        let mut next = crate::xorshift(seed);
        (0..n)
            .map(|_| {
                (0..rows)
                    .map(|_| SummaryCell {
                        occupancy: if next().is_multiple_of(5) { 0 } else { next() as u16 },
                        fresh: next() as u8,
                        fresh_bytes: next() as u8,
                        fresh_distinct: next() as u8,
                        tint: next() as u8,
                    })
                    .collect()
            })
            .collect()
    }

    /// Drawn in two halves at once, a picture of summary blocks is the one
    /// drawn whole on one thread, at pixel-aligned and unaligned ranges,
    /// blocks wider and narrower than a pixel, and every alpha's path.
    #[test]
    fn blocks_drawn_in_two_halves_are_the_picture_drawn_whole() {
        let blocks = random_blocks(700, 37, 11);
        let cells: Vec<&[SummaryCell]> = blocks.iter().map(Vec::as_slice).collect();
        let (block_width, columns) = (64, 700 * 64 - 20);
        for (range, width, alpha) in [
            ((0.0, columns as f64), 301, 1.0),
            ((1234.5, 20000.25), 200, 0.6),
            ((100.0, 7000.0), 999, 1.0),
            ((3.0, 44_000.0), 130, 1.7),
        ] {
            let view = BitmapView {
                columns: range,
                rows: (0.5, 33.0),
                width,
                height: 91,
                alpha,
                colour_by: ColourBy::BytesRead,
            };
            let palette = Palette::default();
            let halves = rasterize_blocks(&cells, block_width, (0, columns), &view, &palette).expect("halves");
            let whole = rasterize_blocks_part(&cells, block_width, (0, columns), &view, &palette).expect("whole");
            assert_eq!((halves.width, halves.height), (whole.width, whole.height));
            for (i, (h, w)) in halves.rgba.iter().zip(&whole.rgba).enumerate() {
                let (x, y) = ((i / 4) % width as usize, i / 4 / width as usize);
                assert!(
                    h.abs_diff(*w) <= 1,
                    "pixel ({x}, {y}) of {range:?} at {width}: {h} drawn in halves, {w} whole"
                );
            }
        }
    }

    /// Blocks that start past column 0 (a range summary's) draw the
    /// picture the same blocks draw among all of them; pixels before the
    /// first block stay the background.
    #[test]
    fn blocks_starting_past_column_zero_draw_where_they_are() {
        let blocks = random_blocks(400, 29, 5);
        let all: Vec<&[SummaryCell]> = blocks.iter().map(Vec::as_slice).collect();
        let (block_width, columns) = (32u64, 400 * 32);
        let first = 150;
        let origin = first as u64 * block_width;
        let palette = Palette::default();
        let view = |range, width| BitmapView {
            columns: range,
            rows: (0.0, 29.0),
            width,
            height: 40,
            alpha: 0.7,
            colour_by: ColourBy::BytesRead,
        };
        for (range, width) in [((4800.0, 12800.0), 200), ((5000.5, 9000.25), 77)] {
            let v = view(range, width);
            let from_zero = rasterize_blocks(&all, block_width, (0, columns), &v, &palette).expect("all");
            let from_origin =
                rasterize_blocks(&all[first..], block_width, (origin, columns), &v, &palette).expect("part");
            for (i, (z, o)) in from_zero.rgba.iter().zip(&from_origin.rgba).enumerate() {
                assert!(z.abs_diff(*o) <= 1, "byte {i} of {range:?} at {width}: {z} from 0, {o} from the origin");
            }
        }
        // Half the view before the first block: the background there.
        let v = view((origin as f64 - 3200.0, origin as f64 + 3200.0), 100);
        let part = rasterize_blocks(&all[first..], block_width, (origin, columns), &v, &palette).expect("part");
        let background = to_rgba8(palette.background);
        assert_eq!(part.pixel(10, 20), background);
        assert_ne!(part.pixel(90, 20), background, "the blocks are drawn");
    }
}

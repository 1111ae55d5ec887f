//! CPU rasterisation (RGBA) of the flamegraph and the cache-line bitmap.
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
//! and `c_B` the background. With `alpha = 1` this is a plain box filter;
//! `alpha < 1` lifts thin isolated events so a single access stays visible
//! at any zoom; `alpha > 1` filters them out.
//!
//! Cell colour: purple when 0 bytes were read from the line, green at
//! `line_size` bytes or more, linear in between; then faded towards the
//! background in proportion to the line's age (fresh lines are brightest).
//! Lines inside a recorded allocation that is live at that column get a
//! faint blue band tint.

use embedded_graphics::mono_font::{MonoTextStyle, ascii::FONT_6X10};
use embedded_graphics::pixelcolor::Rgb888;
use embedded_graphics::prelude::*;
use embedded_graphics::text::{Baseline, Text};

use crate::DecodeError;
use crate::calltree::Frame;
use crate::model::Model;
use crate::symbols::Symbolizer;

/// An RGB colour with components in `[0, 1]`.
pub type Colour = [f64; 3];

/// Colours of the picture.
#[derive(Clone, Copy, Debug)]
pub struct Palette {
    /// Empty space.
    pub background: Colour,
    /// A line nothing was read from yet (0 bytes).
    pub unused: Colour,
    /// A line with `line_size` bytes or more read.
    pub used: Colour,
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
            allocation: [0.25, 0.45, 1.0],
            allocation_strength: 0.25,
        }
    }
}

/// Colour of one working-set cell.
pub fn cell_colour(palette: &Palette, bytes_read: u32, line_size: u32, age: u32, max_age: u32) -> Colour {
    let used = (f64::from(bytes_read) / f64::from(line_size.max(1))).min(1.0);
    let base = lerp(palette.unused, palette.used, used);
    let fresh = f64::from(age) / f64::from(max_age.max(1));
    lerp(palette.background, base, fresh.clamp(0.0, 1.0))
}

fn lerp(a: Colour, b: Colour, t: f64) -> Colour {
    [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t]
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
        if f <= 0.0 {
            return;
        }
        let w = if alpha == 1.0 { f } else { f.powf(alpha) };
        self.sum_f += f;
        self.sum_weight += w;
        for (sum, c) in self.sum_colour.iter_mut().zip(colour) {
            *sum += w * c;
        }
    }

    /// Adds `n` cells that each cover fraction `f` of the pixel.
    #[inline]
    pub fn add_many(&mut self, n: u64, f: f64, colour: Colour, alpha: f64) {
        if f <= 0.0 || n == 0 {
            return;
        }
        let n = n as f64;
        let w = n * if alpha == 1.0 { f } else { f.powf(alpha) };
        self.sum_f += n * f;
        self.sum_weight += w;
        for (sum, c) in self.sum_colour.iter_mut().zip(colour) {
            *sum += w * c;
        }
    }

    /// The pixel colour.
    pub fn resolve(&self, background: Colour, alpha: f64) -> Colour {
        let b = (1.0 - self.sum_f).max(0.0).powf(alpha);
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
        let px = to_rgba8(fill);
        let rgba = px.iter().copied().cycle().take(width as usize * height as usize * 4).collect();
        Image { width, height, rgba }
    }

    /// The RGBA bytes of a pixel.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 4] {
        let i = (y as usize * self.width as usize + x as usize) * 4;
        [self.rgba[i], self.rgba[i + 1], self.rgba[i + 2], self.rgba[i + 3]]
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

fn to_rgba8(c: Colour) -> [u8; 4] {
    let q = |v: f64| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
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
}

/// Fraction of the unit interval `[p, p+1)` covered by `[a, b)`.
#[inline]
fn overlap(a: f64, b: f64, p: f64) -> f64 {
    (b.min(p + 1.0) - a.max(p)).max(0.0)
}

/// A line keeping its row and colour over columns `[start, ..)`.
#[derive(Clone, Copy)]
struct Segment {
    start: u64,
    colour: Colour,
}

/// Accumulates cells into pixel coverage for one view.
struct CoverageGrid<'v> {
    view: &'v BitmapView,
    /// Columns per pixel, rows per pixel.
    cw: f64,
    rh: f64,
    acc: Vec<Coverage>,
}

impl CoverageGrid<'_> {
    /// Adds the cells of one row over columns `[start, end)`, all of one
    /// colour. Every cell stays its own element of the anti-aliasing sum
    /// (its own `f^alpha`); cells wholly inside a pixel share one `f`, so a
    /// run costs O(pixels it spans), not O(columns).
    fn add_run(&mut self, row: usize, start: u64, end: u64, colour: Colour) {
        let (w, h) = (self.view.width as usize, self.view.height as usize);
        let (a, _) = self.view.columns;
        let (r0, _) = self.view.rows;
        let y0 = (row as f64 - r0) / self.rh;
        let y1 = (row as f64 + 1.0 - r0) / self.rh;
        let py_first = y0.floor().max(0.0) as usize;
        let py_end = (y1.ceil().max(0.0) as usize).min(h);
        let x0 = (start as f64 - a) / self.cw;
        let x1 = (end as f64 - a) / self.cw;
        let px_first = x0.floor().max(0.0) as usize;
        let px_end = (x1.ceil().max(0.0) as usize).min(w);
        for px in px_first..px_end {
            // The run's columns that fall into this pixel.
            let pixel_lo = a + px as f64 * self.cw;
            let pixel_hi = pixel_lo + self.cw;
            let lo = (start as f64).max(pixel_lo);
            let hi = (end as f64).min(pixel_hi);
            if hi <= lo {
                continue;
            }
            let first = lo.floor() as u64;
            let last = (hi.ceil() as u64).saturating_sub(1);
            let cover = |c: u64| overlap(pixel_lo, pixel_hi, c as f64) / self.cw;
            let interior = last.saturating_sub(first).saturating_sub(1);
            for py in py_first..py_end {
                let fy = overlap(y0, y1, py as f64);
                let cell = &mut self.acc[py * w + px];
                cell.add(cover(first) * fy, colour, self.view.alpha);
                if last > first {
                    cell.add(cover(last) * fy, colour, self.view.alpha);
                }
                if interior > 0 {
                    cell.add_many(interior, fy / self.cw, colour, self.view.alpha);
                }
            }
        }
    }
}

/// Rasterises the working-set bitmap for `view` by replaying the trace.
///
/// A line's cells only change colour when the line is touched (bytes read)
/// or when any line is inserted (every age drops; rows below shift), so the
/// replay keeps one open run per row and closes runs at those moments:
/// the cost is O(hits + misses x rows), not O(columns x rows).
pub fn rasterize_bitmap(model: &Model, view: &BitmapView, palette: &Palette) -> Result<Image, DecodeError> {
    rasterize_bitmap_with_progress(model, view, palette, &mut |_, _| {})
}

/// [`rasterize_bitmap`], calling `progress(columns done, columns in all)`
/// now and then: a long trace takes a while.
pub fn rasterize_bitmap_with_progress(
    model: &Model,
    view: &BitmapView,
    palette: &Palette,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Image, DecodeError> {
    let (w, h) = (view.width as usize, view.height as usize);
    let (a, b) = view.columns;
    let (r0, r1) = view.rows;
    if w == 0 || h == 0 || b <= a || r1 <= r0 {
        return Err(DecodeError::InvalidSetting("empty view".to_string()));
    }
    let mut grid =
        CoverageGrid { view, cw: (b - a) / w as f64, rh: (r1 - r0) / h as f64, acc: vec![Coverage::default(); w * h] };
    let config = model.working_set.config;
    let shift = config.line_size.trailing_zeros();
    // Allocations as line ranges with their lifetime in columns; a lifetime
    // boundary changes tints, so it closes every run like a miss does.
    let bands: Vec<(u64, u64, u64, u64)> = model
        .allocations
        .iter()
        .filter(|r| r.size > 0)
        .map(|r| {
            (
                r.address >> shift,
                r.address.saturating_add(r.size - 1) >> shift,
                r.alloc_column,
                r.free_column.unwrap_or(u64::MAX),
            )
        })
        .collect();
    let mut boundaries: Vec<u64> = bands.iter().flat_map(|&(_, _, c0, c1)| [c0, c1]).collect();
    boundaries.sort_unstable();
    let colour_of = |set: &crate::working_set::OrderedWorkingSet, line: &crate::working_set::LineState, column: u64| {
        let colour = cell_colour(palette, line.bytes_read, config.line_size, set.age(line), config.max_age);
        let in_block =
            bands.iter().any(|&(l0, l1, c0, c1)| line.line >= l0 && line.line <= l1 && column >= c0 && column < c1);
        if in_block { lerp(colour, palette.allocation, palette.allocation_strength) } else { colour }
    };
    let first_row = r0.floor().max(0.0) as usize;
    let row_end = r1.ceil().max(0.0) as usize;
    let (from, to) = (a.floor().max(0.0) as u64, b.ceil() as u64);
    // Open runs of the rows in view, by row - first_row.
    let mut runs: Vec<Segment> = Vec::new();
    let mut clock = None;
    let mut next_boundary = boundaries.partition_point(|&c| c <= from);
    let mut last_column = from;
    model.replay(from, to, |column, set, access| {
        last_column = column + 1;
        if column % (1 << 16) == 0 {
            progress(column - from, to - from);
        }
        let lines = set.lines();
        let crossed = next_boundary < boundaries.len() && boundaries[next_boundary] <= column;
        while next_boundary < boundaries.len() && boundaries[next_boundary] <= column {
            next_boundary += 1;
        }
        if clock != Some(set.clock()) || crossed {
            // Everything changed (ages, rows, tints): close all runs.
            for (i, run) in runs.iter().enumerate() {
                grid.add_run(first_row + i, run.start, column, run.colour);
            }
            clock = Some(set.clock());
            let end = row_end.min(lines.len());
            runs = (first_row..end.max(first_row))
                .map(|row| Segment { start: column, colour: colour_of(set, &lines[row], column) })
                .collect();
            return;
        }
        // A hit: only the lines this read touched changed colour.
        let first_line = access.addr >> shift;
        let last_line = access.addr.saturating_add(access.size.max(1) - 1) >> shift;
        for line in first_line..=last_line {
            let Ok(row) = lines.binary_search_by_key(&line, |l| l.line) else { continue };
            let Some(run) = row.checked_sub(first_row).and_then(|i| runs.get_mut(i)) else { continue };
            let colour = colour_of(set, &lines[row], column);
            grid.add_run(row, run.start, column, run.colour);
            *run = Segment { start: column, colour };
        }
    })?;
    for (i, run) in runs.iter().enumerate() {
        grid.add_run(first_row + i, run.start, last_column, run.colour);
    }
    let mut image = Image::new(view.width, view.height, palette.background);
    for (i, c) in grid.acc.iter().enumerate() {
        image.set((i % w) as u32, (i / w) as u32, c.resolve(palette.background, view.alpha));
    }
    Ok(image)
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

/// Rasterises the call tree over columns `[a, b)`: one bar per frame, root
/// on top, names where they fit, a line where each invocation starts.
pub fn rasterize_flamegraph(
    frames: &[Frame],
    symbols: &Symbolizer,
    columns: (f64, f64),
    width: u32,
    height: u32,
    palette: &Palette,
) -> Image {
    let mut image = Image::new(width, height, palette.background);
    let depth = crate::calltree::height(frames).max(1);
    let bar = (f64::from(height) / f64::from(depth)).clamp(1.0, 16.0);
    let (a, b) = columns;
    let cw = (b - a) / f64::from(width.max(1));
    let mut target = Canvas(&mut image);
    let text = MonoTextStyle::new(&FONT_6X10, Rgb888::BLACK);
    for f in frames {
        let x0 = (f.first_column as f64 - a) / cw;
        let x1 = (f.end_column as f64 - a) / cw;
        if x1 <= 0.0 || x0 >= f64::from(width) || f.end_column == f.first_column {
            continue;
        }
        let name = symbols.locate(f.function).function.clone();
        let colour = frame_colour(&name);
        let y0 = (f64::from(f.depth) * bar).round() as u32;
        let y1 = ((f64::from(f.depth) + 1.0) * bar).round() as u32;
        let px_first = x0.floor().max(0.0) as u32;
        let px_end = (x1.ceil().min(f64::from(width))) as u32;
        for px in px_first..px_end {
            let cover = overlap(x0, x1, f64::from(px));
            // A 1-pixel gap under each bar keeps rows apart.
            for py in y0..y1.saturating_sub(1).max(y0 + 1) {
                target.0.blend(px, py, colour, cover);
            }
        }
        if f.parent.is_none() && f.first_column > 0 {
            for py in 0..height {
                target.0.set(px_first, py, [0.9, 0.9, 0.95]);
            }
        }
        let room = ((x1.min(f64::from(width)) - x0.max(0.0)) as i64 - 4) / 6;
        if bar >= 11.0 && room >= 3 {
            let label: String = if name.chars().count() as i64 <= room {
                name
            } else {
                name.chars().take((room - 2) as usize).chain("..".chars()).collect()
            };
            let _ = Text::with_baseline(
                &label,
                Point::new(x0.max(0.0) as i32 + 2, y0 as i32 + ((bar as i32 - 10) / 2).max(0)),
                text,
                Baseline::Top,
            )
            .draw(&mut target);
        }
    }
    image
}

/// embedded-graphics drawing onto an [`Image`].
struct Canvas<'a>(&'a mut Image);

impl OriginDimensions for Canvas<'_> {
    fn size(&self) -> Size {
        Size::new(self.0.width, self.0.height)
    }
}

impl DrawTarget for Canvas<'_> {
    type Color = Rgb888;
    type Error = std::convert::Infallible;

    fn draw_iter<I: IntoIterator<Item = Pixel<Rgb888>>>(&mut self, pixels: I) -> Result<(), Self::Error> {
        for Pixel(p, c) in pixels {
            if p.x >= 0 && p.y >= 0 {
                let colour = [f64::from(c.r()) / 255.0, f64::from(c.g()) / 255.0, f64::from(c.b()) / 255.0];
                self.0.set(p.x as u32, p.y as u32, colour);
            }
        }
        Ok(())
    }
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
}

/// The whole picture: flamegraph on top, the bitmap beneath on the same x
/// scale, a separator line between them.
pub fn render(
    model: &Model,
    symbols: &Symbolizer,
    options: &RenderOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Image, DecodeError> {
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
    let frames = model.frames_in(a, b)?;
    let depth = crate::calltree::height(&frames).max(1);
    let flame_h = (depth * 16).min(options.height * 2 / 5).max(8);
    let bitmap_h = options.height - flame_h - 2;
    let columns = (a as f64, b as f64);
    let flame = rasterize_flamegraph(&frames, symbols, columns, options.width, flame_h, &palette);
    let rows = f64::from(model.metrics.max_rows.max(1));
    let view = BitmapView { columns, rows: (0.0, rows), width: options.width, height: bitmap_h, alpha: options.alpha };
    let bitmap = rasterize_bitmap_with_progress(model, &view, &palette, progress)?;
    let mut image = Image::new(options.width, options.height, palette.background);
    image.paste(&flame, 0);
    for x in 0..options.width {
        image.set(x, flame_h, [0.35, 0.35, 0.4]);
    }
    image.paste(&bitmap, flame_h + 2);
    Ok(image)
}

//! Correlated views of the heap (the allocation-visualisation paper's
//! section 4.1.4): one picture per size class ("bin"), laid out in a grid
//! aligned along the time axis (bins stacked, one x for all) or along the
//! address axis (bins side by side, each scaled to the same height), and
//! *cushion cursors* drawn across all of them.
//!
//! - **Bins.** Each bin is a heap picture
//!   ([`crate::heap_raster::render_scene`]) of one [`SizeClass`] with its
//!   own address layout and occupancy bar; the time axis is the whole
//!   run's in every bin, so a burst at one moment lines up in all of them.
//! - **Cushion cursors.** A cursor is not a line but a soft vertical band
//!   whose opacity falls off logarithmically with the distance from its
//!   centre ([`cursor_opacity`]): it disturbs the picture beneath less
//!   than a line and several of them, unevenly spaced, stay readable. The
//!   viewer paints them over its textures with the same profile.

use std::sync::Arc;

use crate::allocations::AllocationRecord;
use crate::heap::SizeClass;
use crate::heap_raster::{HeapPicture, HeapView, MIN_PICTURE_HEIGHT, TimeWindow, render_scene};
use crate::heap_scene::{HeapScene, HeapScenes};
use crate::raster::{Colour, FunctionNames, Image};

/// Half-width of a cushion cursor, in pixels: opacity reaches 0 there.
pub const CURSOR_RADIUS_PX: f64 = 14.0;
/// What a cursor brightens towards.
const CURSOR_COLOUR: Colour = [1.0, 0.97, 0.85];
/// Pixels between bins.
const BIN_GAP: u32 = 3;
const GAP_COLOUR: Colour = [0.20, 0.20, 0.24];

/// Narrowest bin, in pixels.
const MIN_BIN_WIDTH: u32 = 16;

/// Why bins cannot be drawn.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BinsError {
    /// No heap block, so no bin.
    #[error("there are no heap blocks to draw")]
    NoBlocks,
    /// The picture cannot hold every bin at its smallest: drawn anyway,
    /// bins would be cut off.
    #[error("{width}x{height} is too small for {bins} size-class views laid out so: at least {min_width}x{min_height}")]
    TooSmall {
        /// Asked-for size.
        width: u32,
        /// Asked-for size.
        height: u32,
        /// Bins with blocks.
        bins: u32,
        /// Smallest size that holds them.
        min_width: u32,
        /// Smallest size that holds them.
        min_height: u32,
    },
}

/// How the bins are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinLayout {
    /// Stacked top to bottom, sharing x: activity at one moment lines up.
    Time,
    /// Side by side, each bin's addresses over the full height: relative
    /// occupancies compare.
    Address,
}

/// One view of a grid of heap pictures: a bin of a [`BinPictures`] (or,
/// in the viewer, the single picture of every block at (0, 0)).
pub struct BinCell {
    /// Left pixel column in the whole image.
    pub left: u32,
    /// Top pixel row in the whole image.
    pub top: u32,
    /// Its picture (the image is the cell's pixels, also copied into the
    /// whole image).
    pub picture: HeapPicture,
}

impl BinCell {
    /// The size class it shows (`None`: every block).
    pub fn class(&self) -> Option<SizeClass> {
        self.picture.class
    }

    /// Whether pixel (`x`, `y`) of the whole image is in this cell.
    pub fn contains(&self, x: f64, y: f64) -> bool {
        let (w, h) = (f64::from(self.picture.image.width), f64::from(self.picture.image.height));
        let (left, top) = (f64::from(self.left), f64::from(self.top));
        x >= left && x < left + w && y >= top && y < top + h
    }
}

/// The bins of a heap, drawn into one image.
pub struct BinPictures {
    /// All bins, gaps between them.
    pub image: Image,
    /// The bins that hold blocks, smallest class first.
    pub cells: Vec<BinCell>,
}

impl BinPictures {
    /// The bin under pixel (`x`, `y`) of the whole image.
    pub fn cell_at(&self, x: f64, y: f64) -> Option<&BinCell> {
        cell_at(&self.cells, x, y)
    }
}

/// The cell of `cells` under pixel (`x`, `y`) of their whole image.
pub fn cell_at(cells: &[BinCell], x: f64, y: f64) -> Option<&BinCell> {
    cells.iter().find(|c| c.contains(x, y))
}

/// Draws one picture per size class that has blocks in `records` (as
/// [`crate::heap_raster::render_heap`] does for all of them; `view.class`
/// is ignored), in a `view.width` x `view.height` grid laid out by
/// `layout`, from the scenes of `scenes` (which belong to `records`).
pub fn render_bins(
    scenes: &HeapScenes,
    records: &[AllocationRecord],
    events: u64,
    view: &HeapView,
    layout: BinLayout,
    name: FunctionNames<'_>,
) -> Result<BinPictures, BinsError> {
    let classes: Vec<(SizeClass, Arc<HeapScene>)> = SizeClass::ALL
        .into_iter()
        .map(|c| (c, scenes.get(records, events, view.clock, Some(c))))
        .filter(|(_, scene)| !scene.blocks.is_empty())
        .collect();
    let n = u32::try_from(classes.len()).ok().filter(|&n| n > 0).ok_or(BinsError::NoBlocks)?;
    let gaps = BIN_GAP * (n - 1);
    let (min_width, min_height) = match layout {
        BinLayout::Time => (MIN_BIN_WIDTH, n * MIN_PICTURE_HEIGHT + gaps),
        BinLayout::Address => (n * MIN_BIN_WIDTH + gaps, MIN_PICTURE_HEIGHT),
    };
    if view.width < min_width || view.height < min_height {
        let (width, height) = (view.width, view.height);
        return Err(BinsError::TooSmall { width, height, bins: n, min_width, min_height });
    }
    let (cell_w, cell_h) = match layout {
        BinLayout::Time => (view.width, view.height.saturating_sub(gaps) / n),
        BinLayout::Address => (view.width.saturating_sub(gaps) / n, view.height),
    };
    let mut image = Image::new(view.width.max(1), view.height.max(1), GAP_COLOUR);
    let mut cells = Vec::with_capacity(classes.len());
    for (i, (class, scene)) in (0u32..).zip(classes) {
        let cell_view = HeapView { width: cell_w.max(1), height: cell_h, class: Some(class), ..*view };
        let picture = render_scene(&scene, &cell_view, name);
        let (left, top) = match layout {
            BinLayout::Time => (0, i * (picture.image.height + BIN_GAP)),
            BinLayout::Address => (i * (picture.image.width + BIN_GAP), 0),
        };
        image.copy_from(&picture.image, left, top);
        cells.push(BinCell { left, top, picture });
    }
    Ok(BinPictures { image, cells })
}

/// Opacity of a cushion cursor `distance` pixels from its centre, at
/// `strength` (0..1, the opacity at the centre): `strength * (1 -
/// ln(1 + d) / ln(1 + R))` for `d < R` ([`CURSOR_RADIUS_PX`]), 0 beyond —
/// a sharp bright core fading softly into the picture.
pub fn cursor_opacity(distance: f64, strength: f64) -> f64 {
    let d = distance.abs();
    if d >= CURSOR_RADIUS_PX {
        return 0.0;
    }
    strength.clamp(0.0, 1.0) * (1.0 - (1.0 + d).ln() / (1.0 + CURSOR_RADIUS_PX).ln())
}

/// A part of an image: columns `[left, right)`, rows `[top, bottom)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelRect {
    /// First column.
    pub left: u32,
    /// First row.
    pub top: u32,
    /// One past the last column.
    pub right: u32,
    /// One past the last row.
    pub bottom: u32,
}

/// Blends cushion cursors centred on pixel columns `xs` (fractional, of
/// the whole image) into the part `clip` of `image`.
pub fn draw_cursors(image: &mut Image, clip: PixelRect, xs: &[f64], strength: f64) {
    let (right, bottom) = (clip.right.min(image.width), clip.bottom.min(image.height));
    for &centre in xs {
        let first = ((centre - CURSOR_RADIUS_PX).floor().max(0.0) as u32).max(clip.left);
        let last = ((centre + CURSOR_RADIUS_PX).ceil().max(0.0) as u32).min(right);
        for x in first..last {
            let o = cursor_opacity(f64::from(x) + 0.5 - centre, strength);
            if o <= 0.0 {
                continue;
            }
            for y in clip.top..bottom {
                let p = image.pixel(x, y);
                let c: Colour = std::array::from_fn(|i| {
                    let under = f64::from(p[i]) / 255.0;
                    under * (1.0 - o) + CURSOR_COLOUR[i] * o
                });
                image.set(x, y, c);
            }
        }
    }
}

/// Draws cushion cursors at axis positions `at` across every bin of
/// `bins`.
pub fn draw_bin_cursors(bins: &mut BinPictures, at: &[f64], strength: f64) {
    for cell in &bins.cells {
        let (w, h) = (cell.picture.image.width, cell.picture.image.height);
        let clip = PixelRect { left: cell.left, top: cell.top, right: cell.left + w, bottom: cell.top + h };
        draw_window_cursors(&mut bins.image, clip, &cell.picture.window, at, strength);
    }
}

/// Draws cushion cursors at axis positions `at` into the part `clip` of
/// `image` that shows `window` of the time axis, clipped to it (side by
/// side, a cursor near a bin's edge must not spill into the next one,
/// whose x means another time).
pub fn draw_window_cursors(image: &mut Image, clip: PixelRect, window: &TimeWindow, at: &[f64], strength: f64) {
    let xs: Vec<f64> = at.iter().map(|&t| f64::from(clip.left) + window.x(t)).collect();
    draw_cursors(image, clip, &xs, strength);
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_rt::format::AllocKind;

    fn block(address: u64, size: u64, alloc: u64, free: Option<u64>) -> AllocationRecord {
        AllocationRecord::test_block(AllocKind::Malloc, address, size, alloc, free)
    }

    fn view(width: u32, height: u32) -> HeapView {
        HeapView::for_tests(width, height)
    }

    /// Three bins (fast, large, huge; no small block): each holds only its
    /// class's colour, and a fast block at events 20..40 sits at the same
    /// x in the time layout as in a picture of all blocks.
    #[test]
    fn each_bin_draws_only_its_class_on_the_shared_time_axis() {
        let records = vec![
            block(0x1000, 32, 20, Some(40)),
            block(0x1020, 32, 0, None),
            block(0x2000, 4000, 10, Some(90)),
            block(0x10_0000, 200 << 10, 50, None),
        ];
        let bins = render_bins(
            &HeapScenes::default(),
            &records,
            100,
            &view(100, 3 * 60 + 2 * BIN_GAP),
            BinLayout::Time,
            &|_| String::new(),
        )
        .expect("bins");
        let classes: Vec<SizeClass> = bins.cells.iter().filter_map(|c| c.class()).collect();
        assert_eq!(classes, [SizeClass::Fast, SizeClass::Large, SizeClass::Huge]);
        let colour_of = |class: SizeClass| crate::raster::to_rgba8(crate::heap_raster::CLASS_COLOURS[class as usize]);
        for (i, cell) in (0u32..).zip(&bins.cells) {
            assert_eq!(cell.picture.image.height, 60);
            assert_eq!(cell.top, i * (60 + BIN_GAP));
            let rows = cell.picture.occupancy_top - 4;
            let mut colours = std::collections::BTreeSet::new();
            for y in 0..rows {
                for x in 0..100 {
                    colours.insert(bins.image.pixel(x, cell.top + y));
                }
            }
            colours.remove(&crate::raster::to_rgba8([0.07, 0.07, 0.09]));
            assert_eq!(
                colours.into_iter().collect::<Vec<_>>(),
                [colour_of(cell.class().expect("a class"))],
                "bin {:?}",
                cell.class()
            );
        }
        // The fast block 0x1000 (events 20..40) is the top half of the
        // fast bin's only region, at x 20..40 as in every bin.
        let fast = &bins.cells[0];
        assert_eq!(fast.picture.window.x(20.0), 20.0);
        assert_eq!(bins.image.pixel(30, 5), colour_of(SizeClass::Fast));
        assert_eq!(bins.image.pixel(45, 5), crate::raster::to_rgba8([0.07, 0.07, 0.09]), "freed at 40");
        assert_eq!(bins.cell_at(30.0, 65.0).and_then(|c| c.class()), Some(SizeClass::Large));
        assert!(bins.cell_at(30.0, 61.0).is_none(), "a gap between bins");
    }

    /// Side by side: each bin is as tall as the picture and its own
    /// addresses fill it (relative occupancy), the huge block included.
    #[test]
    fn side_by_side_bins_each_span_the_full_height() {
        let records = vec![block(0x1000, 32, 0, None), block(0x10_0000, 200 << 10, 0, None)];
        let bins =
            render_bins(&HeapScenes::default(), &records, 10, &view(2 * 50 + BIN_GAP, 80), BinLayout::Address, &|_| {
                String::new()
            })
            .expect("bins");
        assert_eq!(bins.cells.len(), 2);
        assert_eq!((bins.cells[1].left, bins.cells[1].top), (50 + BIN_GAP, 0));
        for cell in &bins.cells {
            assert_eq!(cell.picture.image.height, 80);
            let top = cell.picture.bands.first().expect("a region").top;
            assert!(top.abs() < 1e-9, "its region starts at the top: {top}");
        }
    }

    /// Four bins stacked need four smallest pictures and their gaps: a
    /// picture one row short is refused rather than cut; none without
    /// blocks.
    #[test]
    fn bins_that_do_not_fit_are_refused() {
        let sizes = [16u64, 500, 4000, 200 << 10];
        let records: Vec<AllocationRecord> =
            sizes.iter().enumerate().map(|(i, &s)| block(0x1000 << (4 * i), s, 0, None)).collect();
        let fits = 4 * MIN_PICTURE_HEIGHT + 3 * BIN_GAP;
        let draw = |h: u32| {
            render_bins(&HeapScenes::default(), &records, 1, &view(100, h), BinLayout::Time, &|_| String::new())
                .map(|b| b.cells.len())
        };
        assert_eq!(draw(fits), Ok(4));
        assert!(matches!(draw(fits - 1), Err(BinsError::TooSmall { bins: 4, .. })), "{:?}", draw(fits - 1));
        let none = render_bins(&HeapScenes::default(), &[], 1, &view(100, 100), BinLayout::Address, &|_| String::new())
            .map(|b| b.cells.len());
        assert_eq!(none, Err(BinsError::NoBlocks));
    }

    #[test]
    fn cursor_opacity_falls_logarithmically_to_zero_at_the_radius() {
        assert_eq!(cursor_opacity(0.0, 0.5), 0.5);
        let mut last = 1.0;
        for d in 0..CURSOR_RADIUS_PX as u32 {
            let o = cursor_opacity(f64::from(d), 1.0);
            assert!(o < last || d == 0, "falls: {d} {o}");
            last = o;
        }
        assert_eq!(cursor_opacity(CURSOR_RADIUS_PX, 1.0), 0.0);
        assert_eq!(cursor_opacity(-CURSOR_RADIUS_PX - 3.0, 1.0), 0.0);
        // Logarithmic: the first pixel loses more than the last.
        let first = cursor_opacity(0.0, 1.0) - cursor_opacity(1.0, 1.0);
        let late = cursor_opacity(CURSOR_RADIUS_PX - 2.0, 1.0) - cursor_opacity(CURSOR_RADIUS_PX - 1.0, 1.0);
        assert!(first > 3.0 * late, "{first} {late}");
    }

    /// A cursor at event 50 brightens column 50 in every stacked bin, most
    /// at its centre, and leaves columns beyond its radius alone.
    #[test]
    fn cursors_cross_every_bin_at_the_same_time() {
        let records = vec![block(0x1000, 32, 0, None), block(0x10_0000, 200 << 10, 0, None)];
        let v = view(200, 2 * 60 + BIN_GAP);
        let plain =
            render_bins(&HeapScenes::default(), &records, 200, &v, BinLayout::Time, &|_| String::new()).expect("bins");
        let mut with =
            render_bins(&HeapScenes::default(), &records, 200, &v, BinLayout::Time, &|_| String::new()).expect("bins");
        draw_bin_cursors(&mut with, &[50.0], 0.8);
        let luma = |p: [u8; 4]| u32::from(p[0]) + u32::from(p[1]) + u32::from(p[2]);
        for cell in &with.cells {
            let y = cell.top + 10;
            let centre = luma(with.image.pixel(50, y));
            assert!(centre > luma(plain.image.pixel(50, y)) + 100, "brighter at the cursor, bin {:?}", cell.class());
            assert!(centre > luma(with.image.pixel(56, y)), "softer away from it");
            assert!(luma(with.image.pixel(56, y)) > luma(plain.image.pixel(56, y)), "still some at 6 px");
            assert_eq!(with.image.pixel(80, y), plain.image.pixel(80, y), "none beyond the radius");
        }
        assert_eq!(with.image.pixel(50, 60), plain.image.pixel(50, 60), "the gap between bins is not a bin");
    }
}

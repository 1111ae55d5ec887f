//! The dense time x address picture of a heap (`render --allocations`):
//! every block a rectangle, its lifetime (allocation events, x) by its
//! address range (y), with an occupancy bar beneath.
//!
//! - **Address axis.** The heap's regions ([`crate::heap::REGION_GAP`])
//!   are stacked top to bottom by address, each as tall as its share of
//!   the bytes they span (at least [`MIN_REGION_PX`]), with a marker band
//!   between them: the gaps of unmapped address space are collapsed, so
//!   the picture is not 99.99% empty.
//! - **Anti-aliasing.** Blocks smaller than a pixel are combined with the
//!   importance-based formula of [`crate::raster::Coverage`] (one
//!   definition for every picture): `alpha < 1` keeps tiny short-lived
//!   blocks visible.
//! - **Cushions.** A block's colour is shaded across its height
//!   (parabolic, or a plateau with shaded edges) so neighbouring blocks of
//!   one colour stay apart.
//! - **Occupancy bar.** Beneath, per pixel column, the highest live bytes
//!   in its events over the peak: blue low, red high.
//! - **Time.** x counts allocation events, or wall-clock time where the
//!   calls were timed ([`TimeAxis`]).

use std::collections::HashMap;

use crate::allocations::AllocationRecord;
use crate::drawing_threads::second_thread_allowed;
use crate::heap::{SizeClass, address_regions, extent, is_heap_block};
use crate::heap_scene::{HeapScene, OccupancyStep};
use crate::raster::{Colour, FunctionNames, Image, frame_colour, importance};

/// Pixel sums kept from one heap picture to the next. A picture's sums are
/// a buffer of tens of megabytes; a fresh one is paid for in page faults as
/// it is first written, a reused one only in clearing it. (The bitmap's
/// pictures keep one pixel column of sums: they need none of this.)
mod spare_grids {
    use crate::raster::Coverage;
    use std::sync::Mutex;

    /// Buffers kept: one (the largest). Each is a picture's worth of
    /// memory held between pictures.
    const KEPT: usize = 1;

    static SPARE: Mutex<Vec<Vec<Coverage>>> = Mutex::new(Vec::new());

    /// `n` cleared sums, in a kept buffer when there is one.
    pub(super) fn take(n: usize) -> Vec<Coverage> {
        let spare = SPARE.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match spare {
            Some(mut v) => {
                v.clear();
                v.resize(n, Coverage::default());
                v
            }
            None => vec![Coverage::default(); n],
        }
    }

    /// Keeps `v` for a later picture (the largest ones, at most [`KEPT`]).
    pub(super) fn give_back(v: Vec<Coverage>) {
        let mut spare = SPARE.lock().unwrap_or_else(|p| p.into_inner());
        spare.push(v);
        spare.sort_unstable_by_key(|v| std::cmp::Reverse(v.capacity()));
        spare.truncate(KEPT);
    }
}

/// Fewest pixels a region gets.
pub const MIN_REGION_PX: f64 = 6.0;
/// Height of the band marking collapsed address space.
pub const MARKER_PX: f64 = 4.0;
/// Height of the occupancy bar, and of the space above it.
pub const OCCUPANCY_PX: u32 = 20;
const OCCUPANCY_GAP: u32 = 4;
/// The smallest heap picture: the occupancy bar, its gap and 8 rows.
pub const MIN_PICTURE_HEIGHT: u32 = OCCUPANCY_PX + OCCUPANCY_GAP + 8;
const BACKGROUND: Colour = [0.07, 0.07, 0.09];
const MARKER: Colour = [0.30, 0.30, 0.34];

/// What a block's colour says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeapColourBy {
    /// A hue per allocating function.
    #[default]
    Function,
    /// A hue per thread.
    Thread,
    /// glibc's size class ([`SizeClass`]).
    SizeClass,
    /// Lifetime: blue short, red long (log scale), grey never freed.
    Lifetime,
}

/// How blocks are shaded across their height.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cushion {
    /// Flat.
    None,
    /// Brightest in the middle, darker towards the edges.
    #[default]
    Parabolic,
    /// Flat in the middle 70%, shaded edges.
    Plateau,
}

impl Cushion {
    /// Brightness at relative height `t` (0..1) of a block.
    pub fn shade(self, t: f64) -> f64 {
        let t = t.clamp(0.0, 1.0);
        match self {
            Cushion::None => 1.0,
            Cushion::Parabolic => 0.55 + 0.45 * (1.0 - (2.0 * t - 1.0).powi(2)),
            Cushion::Plateau => {
                let edge = (t.min(1.0 - t) / 0.15).min(1.0);
                0.55 + 0.45 * edge
            }
        }
    }
}

/// What the x axis counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Clock {
    /// Allocation events: every allocator call one step.
    #[default]
    Events,
    /// Wall-clock time (nanoseconds since the first call), where the
    /// recorder timed the calls (`record --allocations`); quiet periods
    /// become visible.
    Wall,
}

/// The x axis of a heap picture: where each block starts and ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeAxis {
    /// The clock actually used (wall clock falls back to events when the
    /// calls were not timed).
    pub clock: Clock,
    /// First time (wall clock, ns).
    origin: u64,
    /// Length of the axis: events, or nanoseconds.
    pub extent: f64,
}

impl TimeAxis {
    /// The axis of `clock` for a run of `events` events.
    pub fn new(records: &[AllocationRecord], events: u64, clock: Clock) -> TimeAxis {
        let by_events = TimeAxis { clock: Clock::Events, origin: 0, extent: events.max(1) as f64 };
        if clock != Clock::Wall {
            return by_events;
        }
        // One pass over the blocks, and none for the events axis: the
        // viewer makes the axis on its UI thread when a trace comes in, and
        // three passes over heap_mix's 635,000 blocks took ~22 ms there
        // (`perf` of the allocations view).
        let mut span: Option<(u64, u64)> = None;
        for r in records.iter().filter(|r| is_drawn(r)) {
            // A block without times: the run was not timed.
            let Some(alloc) = r.alloc_ns else { return by_events };
            for t in [Some(alloc), r.free_ns].into_iter().flatten() {
                span = Some(span.map_or((t, t), |(first, last)| (first.min(t), last.max(t))));
            }
        }
        match span {
            Some((first, last)) => TimeAxis { clock: Clock::Wall, origin: first, extent: (last - first).max(1) as f64 },
            None => by_events,
        }
    }

    /// Where a block starts on the axis.
    pub fn start(&self, r: &AllocationRecord) -> f64 {
        match self.clock {
            Clock::Events => r.alloc_event as f64,
            Clock::Wall => r.alloc_ns.map_or(0.0, |t| t.saturating_sub(self.origin) as f64),
        }
    }

    /// Where it ends (never, if never freed: infinity).
    pub fn end(&self, r: &AllocationRecord) -> f64 {
        let end = match self.clock {
            Clock::Events => r.free_event.map(|e| e as f64),
            Clock::Wall => r.free_ns.map(|t| t.saturating_sub(self.origin) as f64),
        };
        end.unwrap_or(f64::INFINITY)
    }

    /// The block holding `address` at axis position `x`: a custom
    /// allocator's block before the malloc block it was carved from.
    pub fn block_at<'r>(&self, records: &'r [AllocationRecord], address: u64, x: f64) -> Option<&'r AllocationRecord> {
        self.block_of_class_at(records, None, address, x)
    }

    /// [`TimeAxis::block_at`] among the blocks of one size class (`None`:
    /// all), as a bin of [`crate::heap_bins`] shows them.
    pub fn block_of_class_at<'r>(
        &self,
        records: &'r [AllocationRecord],
        class: Option<SizeClass>,
        address: u64,
        x: f64,
    ) -> Option<&'r AllocationRecord> {
        records
            .iter()
            .filter(|r| {
                is_drawn(r) && in_class(r, class) && r.contains(address) && self.start(r) <= x && x < self.end(r)
            })
            .max_by_key(|r| (r.allocator.is_some(), r.alloc_event))
    }
}

/// Whether the picture draws a record: malloc's blocks, and on top of them
/// the custom allocators' (a pool's blocks inside its arena).
pub fn is_drawn(r: &AllocationRecord) -> bool {
    is_heap_block(r) || r.allocator.is_some()
}

/// Whether `r` is of size class `class` (`None`: any).
pub fn in_class(r: &AllocationRecord, class: Option<SizeClass>) -> bool {
    class.is_none_or(|c| SizeClass::of(r.size) == c)
}

/// The picture wanted.
#[derive(Clone, Copy, Debug)]
pub struct HeapView {
    /// Pixels.
    pub width: u32,
    /// Pixels, occupancy bar included.
    pub height: u32,
    /// Anti-aliasing exponent.
    pub alpha: f64,
    /// Colours.
    pub colour_by: HeapColourBy,
    /// Shading.
    pub cushion: Cushion,
    /// What x counts.
    pub clock: Clock,
    /// The part of the axis shown, `[from, to)` in its units (`None`: all).
    pub range: Option<(f64, f64)>,
    /// The part of the address axis shown, `[from, to)` as fractions of the
    /// whole layout's height (`None`: all of it). The layout is made for
    /// the whole axis at this height and the part is stretched to fill it,
    /// so a fraction always means the same address at every zoom.
    pub rows: Option<(f64, f64)>,
    /// Only the blocks of one size class (a bin of the correlated views,
    /// [`crate::heap_bins`]), laid out on their own; `None`: all. The time
    /// axis stays the whole run's, so bins line up in time.
    pub class: Option<SizeClass>,
}

#[cfg(test)]
impl HeapView {
    /// A whole-run view of `width` x `height` pixels, flat, coloured by size
    /// class, box-filtered: exact colours for tests.
    pub(crate) fn for_tests(width: u32, height: u32) -> HeapView {
        HeapView {
            width,
            height,
            alpha: 1.0,
            colour_by: HeapColourBy::SizeClass,
            cushion: Cushion::None,
            clock: Clock::Events,
            range: None,
            rows: None,
            class: None,
        }
    }
}

/// Where a region of the address space is in the picture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionBand {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Top pixel row (fractional).
    pub top: f64,
    /// Bottom pixel row.
    pub bottom: f64,
}

impl HeapPicture {
    /// The address at pixel row `y`, if it is inside a region.
    pub fn address_at(&self, y: f64) -> Option<u64> {
        self.bands.iter().find(|b| y >= b.top && y < b.bottom).map(|b| b.address(y))
    }

    /// The lowest and highest address in view (the rows above the
    /// occupancy bar and its gap), if any region is in view.
    pub fn visible_addresses(&self) -> Option<(u64, u64)> {
        let rows = f64::from(self.occupancy_top.saturating_sub(OCCUPANCY_GAP));
        let mut seen = self.bands.iter().filter(|b| b.bottom > 0.0 && b.top < rows);
        let first = seen.next()?;
        let last = seen.next_back().unwrap_or(first);
        Some((first.address(0.0), last.address(rows)))
    }
}

impl RegionBand {
    /// The address at pixel row `y` (rows outside the band give its ends):
    /// the inverse of [`RegionBand::y`].
    pub fn address(&self, y: f64) -> u64 {
        let t = ((y - self.top) / (self.bottom - self.top).max(1e-9)).clamp(0.0, 1.0);
        self.start + (t * (self.end - self.start) as f64) as u64
    }

    /// The pixel row of `address` (inside the band).
    pub fn y(&self, address: u64) -> f64 {
        let span = (self.end - self.start).max(1) as f64;
        self.top + (address.saturating_sub(self.start) as f64 / span).min(1.0) * (self.bottom - self.top)
    }
}

/// The picture and its layout.
pub struct HeapPicture {
    /// RGBA.
    pub image: Image,
    /// The regions, top to bottom.
    pub bands: Vec<RegionBand>,
    /// Top row of the occupancy bar.
    pub occupancy_top: u32,
    /// The x axis.
    pub axis: TimeAxis,
    /// The part of the axis drawn, over the picture's width.
    pub window: TimeWindow,
    /// The size class drawn (`None`: all).
    pub class: Option<SizeClass>,
}

/// A part of the time axis over a number of pixel columns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeWindow {
    /// First axis position shown.
    pub from: f64,
    /// Axis units shown.
    pub span: f64,
    /// Pixel columns.
    pub width: u32,
}

impl TimeWindow {
    /// The pixel column (fractional) of axis position `t`: the one
    /// definition of x for blocks, the occupancy bar and cursors.
    pub fn x(&self, t: f64) -> f64 {
        (t - self.from) / self.span * f64::from(self.width)
    }

    /// The axis position at pixel column `x`: the inverse of
    /// [`TimeWindow::x`].
    pub fn time(&self, x: f64) -> f64 {
        self.from + x / f64::from(self.width.max(1)) * self.span
    }
}

/// Colours of the size classes, in [`SizeClass`] order: blue, green,
/// yellow, red.
pub const CLASS_COLOURS: [Colour; 4] = [[0.35, 0.75, 0.95], [0.45, 0.85, 0.45], [0.95, 0.80, 0.30], [0.90, 0.35, 0.35]];

/// Draws the heap blocks of `records` (a run of `events` allocation
/// events); `name` gives a callsite's function. (A viewer drawing many
/// pictures of one run keeps its scenes: [`render_scene`].)
pub fn render_heap(records: &[AllocationRecord], events: u64, view: &HeapView, name: FunctionNames<'_>) -> HeapPicture {
    render_scene(&HeapScene::new(records, events, view.clock, view.class), view, name)
}

/// Draws `scene` (made for `view.clock` and `view.class`) for `view`.
pub fn render_scene(scene: &HeapScene, view: &HeapView, name: FunctionNames<'_>) -> HeapPicture {
    let (w, h) = (view.width.max(1), view.height.max(MIN_PICTURE_HEIGHT));
    let main_h = h - OCCUPANCY_PX - OCCUPANCY_GAP;
    let axis = scene.axis;
    let (from, to) = view.range.unwrap_or((0.0, axis.extent));
    let span = (to - from).max(1e-9);
    let (top, bottom) = view.rows.map_or((0.0, 1.0), |(a, b)| (a.clamp(0.0, 1.0), b.clamp(0.0, 1.0)));
    let stretch = 1.0 / (bottom - top).max(1e-9);
    let bands: Vec<RegionBand> = layout(&scene.regions, f64::from(main_h))
        .into_iter()
        .map(|b| RegionBand {
            top: (b.top - top * f64::from(main_h)) * stretch,
            bottom: (b.bottom - top * f64::from(main_h)) * stretch,
            ..b
        })
        .collect();
    let window = TimeWindow { from, span, width: w };
    let mut image = Image::new(w, h, BACKGROUND);
    let paint = |columns: (u32, u32)| paint_blocks(scene, view, &bands, &window, main_h, columns, name);
    // Two halves at once: the work is per block crossing a pixel, and a
    // scene of a million allocator calls took 225 ms of CPU for the whole
    // run on one thread. Every pixel is painted by one half, from the same
    // blocks in the same order, so the picture is the one-thread picture.
    if w >= MIN_SPLIT_WIDTH && scene.blocks.len() >= MIN_SPLIT_BLOCKS && second_thread_allowed() {
        let k = w / 2;
        let (left, right) = std::thread::scope(|s| {
            let right = s.spawn(|| paint((k, w)));
            (paint((0, k)), right.join())
        });
        image.copy_from(&left, 0, 0);
        // A panic of the other half is this thread's to raise (the same
        // code just ran here).
        match right {
            Ok(right) => image.copy_from(&right, k, 0),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    } else {
        image.copy_from(&paint((0, w)), 0, 0);
    }
    for pair in bands.windows(2) {
        let (from, to) = (pair[0].bottom, pair[1].top);
        let mid = (from + to) / 2.0;
        if mid < 0.0 || mid >= f64::from(main_h) {
            continue;
        }
        let mid = mid as u32;
        for x in 0..w {
            if x % 6 < 3 {
                image.set(x, mid, MARKER);
            }
        }
    }
    let occupancy_top = main_h + OCCUPANCY_GAP;
    let mut cushions = ActivityCushions::new(w, view.cushion, view.alpha);
    for (x, level) in occupancy(scene.steps_around(&window), scene.peak, &window, &mut cushions).into_iter().enumerate()
    {
        let shade = cushions.shade(x);
        let colour = [0.15 + 0.8 * level, 0.25 + 0.2 * (1.0 - level), 0.9 - 0.75 * level].map(|c| c * shade);
        let bar = (level * f64::from(OCCUPANCY_PX)).ceil() as u32;
        for y in 0..OCCUPANCY_PX {
            let c = if OCCUPANCY_PX - y <= bar.max(1) { colour } else { [0.12, 0.12, 0.15] };
            image.set(x as u32, occupancy_top + y, c);
        }
    }
    HeapPicture { image, bands, occupancy_top, axis, window, class: view.class }
}

/// Pictures wider than this, of more blocks than [`MIN_SPLIT_BLOCKS`], are
/// painted in two halves at once ([`render_scene`]; not when drawn
/// [`crate::drawing_threads::on_one_thread`]).
const MIN_SPLIT_WIDTH: u32 = 64;
/// Scenes of fewer blocks are painted on one thread: a thread's start
/// would cost more than it saves.
const MIN_SPLIT_BLOCKS: usize = 2_000;

/// The blocks of `scene` painted over pixel columns `[columns.0,
/// columns.1)` of the main area (`main_h` rows of the `bands`' layout, x by
/// `window`): a picture of those columns only, the background where no
/// block is. Malloc's blocks, and the custom allocators' drawn over them.
fn paint_blocks(
    scene: &HeapScene,
    view: &HeapView,
    bands: &[RegionBand],
    window: &TimeWindow,
    main_h: u32,
    (first_px, end_px): (u32, u32),
    name: FunctionNames<'_>,
) -> Image {
    let (w, pw) = (window.width, end_px - first_px);
    let mut image = Image::new(pw, main_h, BACKGROUND);
    let pixels = pw as usize * main_h as usize;
    let mut cells = spare_grids::take(pixels);
    // Custom allocators' blocks, over malloc's: a second layer only when
    // there are some (40 bytes a pixel: 70 MB at 1920x1000).
    let mut inner = if scene.blocks.iter().any(|b| b.custom) { spare_grids::take(pixels) } else { Vec::new() };
    let x_of = |t: f64| window.x(t).clamp(-1.0, f64::from(w) + 1.0);
    let mut names: HashMap<u64, Colour> = HashMap::new();
    for r in &scene.blocks {
        // Outside the columns first: at high zoom, that is most blocks.
        let (x0, x1) = (x_of(r.start), x_of(r.end).max(x_of(r.start) + 1e-3));
        if x1 <= f64::from(first_px) || x0 >= f64::from(end_px) {
            continue;
        }
        let cells = if r.custom { &mut inner } else { &mut cells };
        let Some(band) = bands.iter().find(|b| r.address >= b.start && r.address < b.end) else { continue };
        if band.bottom <= 0.0 || band.top >= f64::from(main_h) {
            continue;
        }
        let x0 = x0.max(0.0);
        let (y0, y1) = (band.y(r.address), band.y(r.address.saturating_add(r.size.max(1))));
        let y1 = y1.max(y0 + 1e-3);
        if y1 <= 0.0 || y0 >= f64::from(main_h) {
            continue;
        }
        let y0 = y0.max(0.0);
        let base = match view.colour_by {
            HeapColourBy::Function => *names.entry(r.callsite).or_insert_with(|| frame_colour(&name(r.callsite))),
            HeapColourBy::Thread => frame_colour(&format!("thread {}", r.thread)),
            HeapColourBy::SizeClass => CLASS_COLOURS[SizeClass::of(r.size) as usize],
            HeapColourBy::Lifetime => {
                if r.freed {
                    let t = ((r.end - r.start).max(0.0) + 1.0).ln() / (scene.axis.extent + 1.0).ln();
                    [0.2 + 0.75 * t, 0.35, 0.95 - 0.75 * t]
                } else {
                    [0.6, 0.6, 0.6]
                }
            }
        };
        for py in (y0.floor() as u32)..(y1.ceil() as u32).min(main_h) {
            let fy = (y1.min(f64::from(py) + 1.0) - y0.max(f64::from(py))).max(0.0);
            let centre = ((f64::from(py) + 0.5).clamp(y0, y1) - y0) / (y1 - y0);
            let shade = view.cushion.shade(centre);
            let colour = base.map(|c| c * shade);
            // The pixels a block crosses whole (`fx` 1) share one weight: a
            // long-lived block spans the picture, and `powf` per pixel was
            // most of a zoomed-in picture's time. (Blocks narrower than a
            // pixel cross none: no `powf` for them.)
            let whole = if x1 - x0 >= 1.0 { importance(fy, view.alpha) } else { 0.0 };
            for px in (x0.floor() as u32).max(first_px)..(x1.ceil() as u32).min(end_px) {
                let fx = (x1.min(f64::from(px) + 1.0) - x0.max(f64::from(px))).max(0.0);
                let f = fx * fy;
                if f <= 0.0 {
                    continue;
                }
                let weight = if fx == 1.0 { whole } else { importance(f, view.alpha) };
                cells[py as usize * pw as usize + (px - first_px) as usize].add_weighted(f, weight, colour);
            }
        }
    }
    for y in 0..main_h {
        for x in 0..pw {
            let i = y as usize * pw as usize + x as usize;
            let inner_cell = inner.get(i).filter(|c| !c.is_empty());
            if cells[i].is_empty() && inner_cell.is_none() {
                continue; // the background `image` was filled with
            }
            let under = cells[i].resolve(BACKGROUND, view.alpha);
            image.set(x, y, inner_cell.map_or(under, |c| c.resolve(under, view.alpha)));
        }
    }
    spare_grids::give_back(cells);
    if !inner.is_empty() {
        spare_grids::give_back(inner);
    }
    image
}

/// The part of the address axis (fractions of the layout's height, as
/// [`HeapView::rows`] takes them) that shows addresses `[from, to)` in a
/// picture `height` pixels high (occupancy bar included); `None` when no
/// region holds any of them.
pub fn address_rows(records: &[AllocationRecord], height: u32, from: u64, to: u64) -> Option<(f64, f64)> {
    let regions = address_regions(records.iter().filter(|r| is_drawn(r)).map(extent));
    let main_h = f64::from(height.max(MIN_PICTURE_HEIGHT) - OCCUPANCY_PX - OCCUPANCY_GAP);
    let bands = layout(&regions, main_h);
    let inside: Vec<&RegionBand> = bands.iter().filter(|b| b.start < to && from < b.end).collect();
    let top = inside.first()?.y(from);
    let bottom = inside.last()?.y(to);
    Some((top / main_h, (bottom / main_h).max(top / main_h + 1e-6)))
}

/// `regions` stacked top to bottom in `height` pixels.
fn layout(regions: &[(u64, u64)], height: f64) -> Vec<RegionBand> {
    let n = regions.len() as f64;
    let room = (height - MARKER_PX * (n - 1.0).max(0.0) - MIN_REGION_PX * n).max(0.0);
    let total: f64 = regions.iter().map(|r| (r.1 - r.0) as f64).sum::<f64>().max(1.0);
    let mut top = 0.0;
    regions
        .iter()
        .map(|&(start, end)| {
            let h = MIN_REGION_PX.min(height / n.max(1.0)) + room * (end - start) as f64 / total;
            let band = RegionBand { start, end, top, bottom: top + h };
            top += h + MARKER_PX;
            band
        })
        .collect()
}

/// The occupancy bar's activity cushions (the paper's figure 5 d, e):
/// every interval between two consecutive events of the blocks drawn gets
/// a cushion across its width, and a column averages the cushions over it,
/// weighted as blocks are ([`crate::raster::Coverage`]'s `f^alpha`). Busy
/// columns hold many sub-pixel intervals and average out flat; a quiet
/// period wider than a few pixels shows its cushion's shape, so bursts
/// stand apart from lulls. Columns with no interval stay flat (1).
struct ActivityCushions {
    cushion: Cushion,
    alpha: f64,
    weight: Vec<f64>,
    shaded: Vec<f64>,
}

impl ActivityCushions {
    fn new(width: u32, cushion: Cushion, alpha: f64) -> Self {
        let columns = if cushion == Cushion::None { 0 } else { width as usize };
        ActivityCushions { cushion, alpha, weight: vec![0.0; columns], shaded: vec![0.0; columns] }
    }

    /// Adds the interval between events at pixel columns `a` < `b`.
    fn add(&mut self, a: f64, b: f64) {
        let width = self.weight.len();
        if b <= 0.0 || a >= width as f64 {
            return;
        }
        for px in (a.max(0.0).floor() as usize)..(b.ceil() as usize).min(width) {
            let (lo, hi) = (a.max(px as f64), b.min(px as f64 + 1.0));
            if hi <= lo {
                continue;
            }
            let w = importance(hi - lo, self.alpha);
            self.weight[px] += w;
            self.shaded[px] += w * self.cushion.shade(((lo + hi) / 2.0 - a) / (b - a));
        }
    }

    /// The brightness of column `x`.
    fn shade(&self, x: usize) -> f64 {
        match (self.weight.get(x), self.shaded.get(x)) {
            (Some(&w), Some(&s)) if w > 0.0 => s / w,
            _ => 1.0,
        }
    }
}

/// Per pixel column, the highest live bytes in its events over `peak`,
/// over `window`; the intervals between events go to `cushions` on the
/// way. `steps` may leave out any before the last one ahead of the window
/// and any after the first one past it ([`HeapScene::steps_around`]).
fn occupancy(steps: &[OccupancyStep], peak: i64, window: &TimeWindow, cushions: &mut ActivityCushions) -> Vec<f64> {
    let width = window.width;
    let mut column_max = vec![-1i64; width as usize];
    let mut before = 0i64;
    let mut previous: Option<f64> = None;
    for step in steps {
        let x = window.x(step.at);
        if let Some(p) = previous.filter(|&p| p < x) {
            cushions.add(p, x);
        }
        previous = Some(x);
        if x < 0.0 {
            before = step.live;
        } else if x < f64::from(width) {
            let x = x as usize;
            column_max[x] = column_max[x].max(step.live);
        }
    }
    // Columns with no event keep the level of the last one.
    let mut last = before;
    for v in &mut column_max {
        if *v < 0 {
            *v = last;
        }
        last = *v;
    }
    let peak = peak as f64;
    column_max.into_iter().map(|v| v.max(0) as f64 / peak).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raster::{Coverage, to_rgba8};
    use trace_rt::format::AllocKind;

    fn block(address: u64, size: u64, alloc: u64, free: Option<u64>) -> AllocationRecord {
        AllocationRecord::test_block(AllocKind::Malloc, address, size, alloc, free)
    }

    /// `count` blocks of four sizes at random addresses of a 256 KiB region,
    /// allocated at random among `events`, two in three freed within
    /// `longest` events, from five call sites.
    fn random_blocks(seed: u64, count: usize, events: u64, longest: u64) -> Vec<AllocationRecord> {
        let mut next = crate::xorshift(seed);
        (0..count)
            .map(|_| {
                let alloc = next() % events;
                let free = (!next().is_multiple_of(3)).then(|| alloc + 1 + next() % longest);
                let size = [16, 48, 200, 3000][(next() % 4) as usize];
                let b = block(0x10_0000 + (next() % 0x4000) * 16, size, alloc, free);
                AllocationRecord { callsite: next() % 5, ..b }
            })
            .collect()
    }

    fn view(alpha: f64) -> HeapView {
        HeapView { alpha, ..HeapView::for_tests(100, 100 + OCCUPANCY_PX + OCCUPANCY_GAP) }
    }

    #[test]
    fn a_block_fills_exactly_its_lifetime_and_range() {
        // One region 0x1000..0x2000; a block of its first half living
        // events 0..50 of 100, another block keeps the region's extent.
        let records = vec![block(0x1000, 0x800, 0, Some(50)), block(0x1800, 0x800, 60, None)];
        let p = render_heap(&records, 100, &view(1.0), &|_| String::new());
        let large = crate::raster::to_rgba8(CLASS_COLOURS[2]);
        let band = p.bands[0];
        assert_eq!(p.bands.len(), 1);
        assert!((band.y(0x1800) - 50.0).abs() < 1.0, "half way down: {band:?}");
        assert_eq!(p.image.pixel(10, 10), large, "inside the first block (2 KiB: large)");
        assert_eq!(p.image.pixel(55, 10), crate::raster::to_rgba8(BACKGROUND), "freed at 50");
        assert_eq!(p.image.pixel(55, 80), crate::raster::to_rgba8(BACKGROUND), "the second starts at 60");
        assert_eq!(p.image.pixel(80, 80), large);
    }

    /// The lower half of the address axis stretched over the picture: the
    /// second block (0x1800..0x2000) fills it, the first is out of view,
    /// and rows map to the second block's addresses.
    #[test]
    fn a_part_of_the_address_axis_fills_the_height() {
        let records = vec![block(0x1000, 0x800, 0, Some(50)), block(0x1800, 0x800, 0, None)];
        let rows = address_rows(&records, 100 + OCCUPANCY_PX + OCCUPANCY_GAP, 0x1800, 0x2000).expect("in a region");
        assert!((rows.0 - 0.5).abs() < 0.01 && (rows.1 - 1.0).abs() < 0.01, "{rows:?}");
        let p = render_heap(&records, 100, &HeapView { rows: Some(rows), ..view(1.0) }, &|_| String::new());
        let large = crate::raster::to_rgba8(CLASS_COLOURS[2]);
        for y in [1, 50, 98] {
            assert_eq!(p.image.pixel(80, y), large, "row {y}: the second block");
        }
        assert_eq!(p.image.pixel(10, 50), large, "the second block from event 0; the first is above the view");
        let at = p.address_at(50.0).expect("an address");
        assert!(at.abs_diff(0x1C00) < 0x20, "{at:#x}");
        let (lo, hi) = p.visible_addresses().expect("in view");
        assert!(lo.abs_diff(0x1800) < 0x20 && hi.abs_diff(0x2000) < 0x20, "{lo:#x}..{hi:#x}");
        assert_eq!(address_rows(&records, 100, 0x9000, 0xA000), None, "no region there");
    }

    /// A pool's block (a custom allocator's, 256 bytes: small) is drawn
    /// over its arena (a 4 KiB malloc block: large) while it lives, the
    /// arena shows around and after it, and hover finds the pool's block
    /// first.
    #[test]
    fn custom_blocks_are_drawn_over_their_arena() {
        let arena = block(0x1000, 0x1000, 0, None);
        let pooled = AllocationRecord { allocator: Some(7), ..block(0x1000, 0x100, 10, Some(20)) };
        let records = vec![arena, pooled];
        let p = render_heap(&records, 100, &view(1.0), &|_| String::new());
        let (small, large) = (crate::raster::to_rgba8(CLASS_COLOURS[1]), crate::raster::to_rgba8(CLASS_COLOURS[2]));
        assert_eq!(p.image.pixel(15, 2), small, "the pool's block");
        assert_eq!(p.image.pixel(15, 50), large, "the rest of the arena");
        assert_eq!(p.image.pixel(50, 2), large, "after the block is released");
        let axis = TimeAxis::new(&records, 100, Clock::Events);
        assert_eq!(axis.block_at(&records, 0x1010, 15.0).map(|b| b.allocator), Some(Some(7)));
        assert_eq!(axis.block_at(&records, 0x1010, 50.0).map(|b| b.allocator), Some(None));
    }

    /// A scene large enough to be painted in two halves at once: its
    /// picture is, byte for byte, the one painted on one thread (blocks
    /// across the middle, a custom allocator's blocks over malloc's,
    /// colours by function through the names).
    #[test]
    fn two_halves_paint_the_one_thread_picture() {
        let events = 5000;
        let mut records = random_blocks(0x51_7cc1_b727_220a, 3000, events, 3000);
        for b in records.iter_mut().step_by(10) {
            b.allocator = Some(3);
        }
        let (w, main_h) = (301u32, 120u32);
        let v = HeapView {
            alpha: 0.6,
            colour_by: HeapColourBy::Function,
            ..HeapView::for_tests(w, main_h + OCCUPANCY_PX + OCCUPANCY_GAP)
        };
        let scene = HeapScene::new(&records, events, Clock::Events, None);
        assert!(scene.blocks.len() >= MIN_SPLIT_BLOCKS && w >= MIN_SPLIT_WIDTH, "the scene is split");
        let name = |pc: u64| format!("f{pc}");
        let p = render_scene(&scene, &v, &name);
        let whole = paint_blocks(&scene, &v, &p.bands, &p.window, main_h, (0, w), &name);
        let painted = (0..main_h).flat_map(|y| (0..w).map(move |x| (x, y)));
        let background = to_rgba8(BACKGROUND);
        assert!(painted.clone().filter(|&(x, y)| whole.pixel(x, y) != background).count() > 1000, "blocks drawn");
        for (x, y) in painted {
            assert_eq!(p.image.pixel(x, y), whole.pixel(x, y), "pixel ({x}, {y})");
        }
    }

    /// Random blocks, most narrower than a pixel, at alpha 0.6: every
    /// pixel is within a level of the formula applied straight, block by
    /// block and pixel by pixel, with the weight of the whole fraction a
    /// block covers (a faster drawing must keep to this).
    #[test]
    fn painted_blocks_match_the_formula_pixel_by_pixel() {
        let events = 2000;
        let records = random_blocks(0x9e37_79b9_7f4a_7c15, 300, events, 40);
        let (w, main_h) = (260u32, 260u32);
        let v = HeapView { alpha: 0.6, ..HeapView::for_tests(w, main_h + OCCUPANCY_PX + OCCUPANCY_GAP) };
        let scene = HeapScene::new(&records, events, Clock::Events, None);
        let p = render_scene(&scene, &v, &|_| String::new());
        // The reference: each block's pixels, the weight of the whole
        // covered fraction at once.
        let mut sums = vec![Coverage::default(); (w * main_h) as usize];
        for b in &scene.blocks {
            let band = p.bands.iter().find(|band| b.address >= band.start && b.address < band.end).expect("a band");
            let x = |t: f64| p.window.x(t).clamp(-1.0, f64::from(w) + 1.0);
            let (x0, x1) = (x(b.start).max(0.0), x(b.end).max(x(b.start) + 1e-3));
            let (y0, y1) = (band.y(b.address), band.y(b.address + b.size));
            let colour = CLASS_COLOURS[SizeClass::of(b.size) as usize];
            for py in (y0.floor() as u32)..(y1.ceil() as u32).min(main_h) {
                for px in (x0.floor() as u32)..(x1.ceil() as u32).min(w) {
                    let fx = (x1.min(f64::from(px) + 1.0) - x0.max(f64::from(px))).max(0.0);
                    let fy = (y1.min(f64::from(py) + 1.0) - y0.max(f64::from(py))).max(0.0);
                    if fx * fy > 0.0 {
                        sums[(py * w + px) as usize].add_weighted(fx * fy, importance(fx * fy, 0.6), colour);
                    }
                }
            }
        }
        let mut drawn = 0;
        for py in 0..main_h {
            for px in 0..w {
                let sum = &sums[(py * w + px) as usize];
                let want = if sum.is_empty() { BACKGROUND } else { sum.resolve(BACKGROUND, 0.6) };
                let (got, want) = (p.image.pixel(px, py), to_rgba8(want));
                drawn += usize::from(!sum.is_empty());
                for c in 0..3 {
                    assert!(got[c].abs_diff(want[c]) <= 1, "pixel ({px}, {py}): {got:?} vs {want:?}");
                }
            }
        }
        assert!(drawn > 1000, "the blocks cover pixels: {drawn}");
    }

    #[test]
    fn alpha_below_one_keeps_a_tiny_block_visible() {
        // A 16-byte block in a 1 MiB region living one event of 10000.
        let records = vec![block(0x10_0000, 16, 5000, Some(5001)), block(0x1F_FFF0, 16, 0, None)];
        let mut v = view(1.0);
        v.width = 50;
        let bright = |alpha: f64| {
            let p = render_heap(&records, 10_000, &HeapView { alpha, ..v }, &|_| String::new());
            let px = p.image.pixel(25, 0);
            u32::from(px[0]) + u32::from(px[1]) + u32::from(px[2])
        };
        let bg = crate::raster::to_rgba8(BACKGROUND).iter().take(3).map(|&c| u32::from(c)).sum::<u32>();
        assert!(bright(1.0) <= bg + 3, "box filter: lost in the background");
        assert!(bright(0.3) > bright(1.0) && bright(0.1) > bright(0.3), "lower alpha, brighter");
        assert!(bright(0.1) > bg + 60, "alpha 0.1: visible ({} vs {bg})", bright(0.1));
    }

    #[test]
    fn a_window_of_events_fills_the_width() {
        let records = vec![block(0x1000, 0x800, 0, Some(50)), block(0x1800, 0x800, 60, None)];
        let v = HeapView { range: Some((40.0, 70.0)), ..view(1.0) };
        let p = render_heap(&records, 100, &v, &|_| String::new());
        let bg = crate::raster::to_rgba8(BACKGROUND);
        // Events 40..70 over 100 pixels: the first block until x 33, the
        // second from x 67.
        assert_ne!(p.image.pixel(30, 10), bg);
        assert_eq!(p.image.pixel(36, 10), bg);
        assert_eq!(p.image.pixel(64, 80), bg);
        assert_ne!(p.image.pixel(70, 80), bg);
    }

    #[test]
    fn the_wall_clock_places_blocks_by_time() {
        // Two blocks back to back in events, but the second starts after a
        // long pause: on the wall clock it starts at 90% of the width.
        let mut a = block(0x1000, 0x800, 0, Some(1));
        let mut b = block(0x1800, 0x800, 2, None);
        (a.alloc_ns, a.free_ns, b.alloc_ns) = (Some(1_000), Some(2_000), Some(9_100));
        let records = vec![a, b];
        let axis = TimeAxis::new(&records, 3, Clock::Wall);
        assert_eq!((axis.clock, axis.extent), (Clock::Wall, 8_100.0));
        assert_eq!(axis.start(&records[1]), 8_100.0, "from the first call");
        let p = render_heap(&records, 3, &HeapView { clock: Clock::Wall, ..view(1.0) }, &|_| String::new());
        let bg = crate::raster::to_rgba8(BACKGROUND);
        assert_eq!(p.image.pixel(50, 80), bg, "the pause");
        // Untimed records: events, whatever was asked.
        let untimed = vec![block(0x1000, 16, 0, None)];
        assert_eq!(TimeAxis::new(&untimed, 1, Clock::Wall).clock, Clock::Events);
        assert!(
            axis.block_at(&records, 0x1900, 8_100.0).is_some() && axis.block_at(&records, 0x1900, 8_099.0).is_none()
        );
    }

    /// A quiet period on the wall clock (nothing between 3% and 97% of the
    /// run) gets a cushion in the occupancy bar: brightest in its middle,
    /// darker towards its edges; the busy columns and a flat bar do not.
    #[test]
    fn quiet_periods_get_a_cushion_in_the_occupancy_bar() {
        let mut records = Vec::new();
        for (i, t) in [0u64, 1, 2, 97, 98, 99, 100].into_iter().enumerate() {
            let mut r = block(0x1000 + 0x40 * i as u64, 0x40, i as u64, None);
            r.alloc_ns = Some(t * 1000);
            records.push(r);
        }
        let bar_row = |cushion: Cushion| {
            let v = HeapView { clock: Clock::Wall, cushion, ..view(1.0) };
            let p = render_heap(&records, 7, &v, &|_| String::new());
            let y = p.occupancy_top + OCCUPANCY_PX - 1;
            (0..100).map(|x| p.image.pixel(x, y)).collect::<Vec<_>>()
        };
        let luma = |p: [u8; 4]| u32::from(p[0]) + u32::from(p[1]) + u32::from(p[2]);
        let shaded = bar_row(Cushion::Parabolic);
        let (middle, edge) = (luma(shaded[50]), luma(shaded[5]));
        assert!(middle > edge + 60, "middle {middle} edge {edge}");
        let flat = bar_row(Cushion::None);
        assert_eq!(flat[5], flat[50], "no cushion: one colour at one level");
        assert_eq!(luma(shaded[50]), luma(flat[50]), "the cushion's top is the bar's own colour");
    }

    /// The bar drawn from the steps around a window equals the one drawn
    /// from every step (levels and cushions), for windows anywhere: before
    /// the first event, inside, across either end, past the last.
    #[test]
    fn the_steps_around_a_window_draw_what_all_steps_draw() {
        let mut seed = 5u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let records: Vec<AllocationRecord> = (0..400u64)
            .map(|i| {
                let alloc = i * 3 + next(3);
                let free = (next(4) > 0).then(|| alloc + 1 + next(200));
                block(0x1000 + 0x100 * next(300), 1 + next(500), alloc, free)
            })
            .collect();
        let scene = HeapScene::new(&records, 1400, Clock::Events, None);
        assert!(scene.steps.len() > 600, "{}", scene.steps.len());
        let bar = |steps: &[OccupancyStep], window: &TimeWindow| {
            let mut cushions = ActivityCushions::new(window.width, Cushion::Parabolic, 0.6);
            let levels = occupancy(steps, scene.peak, window, &mut cushions);
            (levels, cushions.weight, cushions.shaded)
        };
        for (from, span) in
            [(-500.0, 300.0), (-50.0, 200.0), (0.0, 1400.0), (333.3, 7.5), (700.0, 0.9), (1300.0, 400.0)]
        {
            for width in [1, 37, 300] {
                let window = TimeWindow { from, span, width };
                let around = scene.steps_around(&window);
                assert!(around.len() < scene.steps.len() || span >= 1000.0, "{from} {span}: {}", around.len());
                assert_eq!(bar(around, &window), bar(&scene.steps, &window), "window {from} + {span} at {width} px");
            }
        }
    }

    #[test]
    fn distant_regions_are_stacked_with_a_marker() {
        let records = vec![block(0x1000, 64, 0, None), block(0x7f00_0000_0000, 64, 1, None)];
        let p = render_heap(&records, 2, &view(1.0), &|_| String::new());
        assert_eq!(p.bands.len(), 2);
        assert!(p.bands[1].top >= p.bands[0].bottom + MARKER_PX - 1e-9);
        assert!(p.bands[1].bottom <= 100.0 + 1e-9);
    }

    #[test]
    fn cushions_are_brightest_inside() {
        for c in [Cushion::Parabolic, Cushion::Plateau] {
            assert!(c.shade(0.5) > c.shade(0.02) + 0.3, "{c:?}");
            assert_eq!(c.shade(0.5), 1.0);
        }
        assert_eq!(Cushion::None.shade(0.0), 1.0);
    }
}

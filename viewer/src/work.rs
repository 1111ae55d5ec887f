//! What the viewer computes in the background, each kind a [`Job`] keyed by
//! what it depends on: the picture of the current view (bitmap and
//! flamegraph bars), the preview while decoding, the overview strip, what is
//! under the pointer, the row labels, the columns touching a line, the
//! statistics of the selection, a source file, and function names.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bevy::prelude::*;
use bevy_egui::egui;
use decoder::DecodeError;
use decoder::calltree::Frame;
use decoder::inspect::{Inspection, Inspector, RowBand};
use decoder::model::Model;
use decoder::pyramid::PreviewState;
use decoder::range::RangeStats;
use decoder::range_summary::{RangeRequest, RangeSummary};
use decoder::raster::{
    BitmapView, ColourBy, FlameBar, Image, MIN_BAR_PIXELS, Palette, flame_bars, rasterize_bitmap_refined,
    rasterize_bitmap_with_progress,
};
use decoder::symbols::Symbolizer;
use decoder::tables::{Grouping, access_table};

use crate::jobs::{Cancel, Job};
use crate::session::Loaded;
use crate::view::{PictureThreads, Viewport};

/// What a picture of the view depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderKey {
    /// Model generation.
    pub generation: u32,
    /// Columns shown.
    pub columns: (f64, f64),
    /// Rows shown.
    pub rows: (f64, f64),
    /// Bitmap size in pixels.
    pub size: (u32, u32),
    /// Anti-aliasing exponent.
    pub alpha: f64,
    /// Colouring.
    pub colour_by: ColourBy,
}

impl RenderKey {
    /// The picture `view` needs on a bitmap of `pixels` (see
    /// [`Viewport::picture`]).
    pub fn of_view(generation: u32, view: &Viewport, pixels: (u32, u32), alpha: f64, colour_by: ColourBy) -> RenderKey {
        let picture = view.picture(pixels);
        RenderKey { generation, columns: picture.columns, rows: picture.rows, size: picture.size, alpha, colour_by }
    }

    /// The bitmap's part of the picture, as the decoder draws it.
    pub fn bitmap_view(&self) -> BitmapView {
        BitmapView {
            columns: self.columns,
            rows: self.rows,
            width: self.size.0,
            height: self.size.1,
            alpha: self.alpha,
            colour_by: self.colour_by,
        }
    }
}

/// A picture of a view.
pub struct Rendered {
    /// The bitmap, shared with the texture made of it.
    pub image: Arc<egui::ColorImage>,
    /// The frames overlapping the view.
    pub frames: Vec<Frame>,
    /// Their bars, in pixels of the picture's width.
    pub bars: Vec<FlameBar>,
    /// Rows the frames' flamegraph needs (`decoder::calltree::height`),
    /// worked out once with the picture, not at every frame that lays the
    /// view out ([`crate::session::Loaded::flame_depth`]).
    pub flame_height: u32,
    /// How long it took.
    pub took: Duration,
    /// CPU time of the thread that drew it (the drawing's other half ran
    /// beside it): about what it takes with the cores to itself, which
    /// `took` is not while the renderer draws a frame on them.
    pub cpu: Duration,
}

/// What the preview picture depends on: blocks decoded, size.
pub type PreviewKey = (usize, u32, u32);

/// A picture of the trace while it is decoded.
pub struct PreviewPicture {
    /// The bitmap of what is decoded so far, at the estimated full width.
    pub image: Arc<egui::ColorImage>,
    /// Columns decoded so far, and the estimate of all.
    pub columns: (u64, u64),
}

/// The statistics of a range or the whole trace, or why a range could not
/// be summed.
pub type StatsResult = Result<RangeStats, String>;

/// A source file with per-line counts.
pub struct SourceText {
    /// Where it was looked for and found (or not).
    pub path: String,
    /// Its lines, or why there are none.
    pub lines: Result<Vec<String>, String>,
    /// Two counts by line number (reads and writes; blocks and bytes).
    pub counts: HashMap<u32, (u64, u64)>,
    /// What the two counts are, for the gutter's heading.
    pub gutter: &'static str,
    /// The line to show.
    pub line: u32,
    /// Why the lines may not be the ones the trace counts: the file
    /// changed after the recording.
    pub changed: Option<String>,
}

impl SourceText {
    /// Reads `file` (as the debug info names it) to show `line`, with
    /// `counts` in the gutter. `recorded_unix_ms` is when the recording
    /// started (0: unknown): a file modified after it was edited since the
    /// program ran, and its lines may have moved under the counts.
    pub fn read(
        file: &str,
        line: u32,
        counts: HashMap<u32, (u64, u64)>,
        gutter: &'static str,
        recorded_unix_ms: u64,
    ) -> SourceText {
        let lines = match std::fs::read_to_string(file) {
            Ok(text) => Ok(text.lines().map(str::to_string).collect()),
            Err(e) => Err(format!("cannot read {file}: {e} (looked at the path the debug info records)")),
        };
        let modified_ms = std::fs::metadata(file)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64);
        let changed = modified_ms.filter(|&m| recorded_unix_ms > 0 && m > recorded_unix_ms).map(|m| {
            let after = std::time::Duration::from_millis(m - recorded_unix_ms);
            format!("changed {} after the recording: its lines may not be the ones counted", elapsed_label(after))
        });
        SourceText { path: file.to_string(), lines, counts, gutter, line, changed }
    }
}

/// "40 s", "12 min", "3 h", "2 days": how long ago, roughly.
fn elapsed_label(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

/// Every background job of the viewer.
#[derive(Resource)]
pub struct Work {
    /// The current view's picture.
    pub render: Job<RenderKey, Rendered>,
    /// The picture while decoding.
    pub preview: Job<PreviewKey, PreviewPicture>,
    /// The overview strip: (generation, width, height).
    pub overview: Job<(u32, u32, u32), Arc<egui::ColorImage>>,
    /// Under the pointer: (generation, column, row).
    pub inspect: Job<(u32, u64, Option<usize>), Result<Inspection, String>>,
    /// Row labels at a column: (generation, column).
    pub bands: Job<(u32, u64), Vec<RowBand>>,
    /// Columns touching a line: (generation, line, from, to).
    pub touching: Job<(u32, u64, u64, u64), Vec<u64>>,
    /// Statistics: (generation, range).
    pub stats: Job<(u32, Option<(u64, u64)>), StatsResult>,
    /// A source file: (generation, file, line).
    pub source: Job<(u32, String, u32), SourceText>,
    /// The finer summary of the columns in view, made once the view's
    /// picture is in, for the zoom steps into it: (generation, range).
    pub refine: Job<(u32, RangeRequest), Arc<RangeSummary>>,
    /// Function names by entry address.
    pub names: Names,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            // The view's picture: the other jobs' results wait for it.
            render: Job::picture(),
            preview: Job::default(),
            overview: Job::default(),
            inspect: Job::default(),
            bands: Job::default(),
            touching: Job::default(),
            stats: Job::default(),
            source: Job::default(),
            refine: Job::default(),
            names: Names::default(),
        }
    }
}

impl Work {
    /// Forgets everything computed for an older model.
    pub fn clear(&mut self) {
        self.render.clear();
        self.overview.clear();
        self.inspect.clear();
        self.bands.clear();
        self.touching.clear();
        self.stats.clear();
        self.source.clear();
        self.refine.clear();
        self.names = Names::default();
    }

    /// True while any work is running: the app keeps drawing frames until
    /// its result is in.
    pub fn busy(&self) -> bool {
        self.render.busy()
            || self.preview.busy()
            || self.overview.busy()
            || self.inspect.busy()
            || self.bands.busy()
            || self.touching.busy()
            || self.stats.busy()
            || self.source.busy()
            || self.refine.busy()
            || self.names.job.busy()
            || !self.names.wanted.is_empty()
    }

    /// Takes in whatever finished.
    pub fn poll(&mut self) {
        self.render.poll();
        self.preview.poll();
        self.overview.poll();
        self.inspect.poll();
        self.bands.poll();
        self.touching.poll();
        self.stats.poll();
        self.source.poll();
        self.refine.poll();
        self.names.poll();
    }
}

/// A picture as egui takes it, converted on the job's thread. Shared: a
/// texture made of it takes the `Arc`; made of a `ColorImage`, each new
/// picture's pixels (a few MB at 1920 wide) were copied on the UI thread,
/// which `perf record` of a compare-mode session showed under
/// `PictureTexture::paint`.
fn to_egui(image: &Image) -> Arc<egui::ColorImage> {
    Arc::new(egui::ColorImage::from_rgba_unmultiplied([image.width as usize, image.height as usize], &image.rgba))
}

/// Starts the picture of `key`, on as many threads as `threads` allows.
/// Once it is in, starts the finer summary of its columns for the zoom
/// steps into it ([`decoder::range_summary`]); a new picture stops that
/// first, for the cores.
pub fn want_render(work: &mut Work, loaded: &Loaded, key: RenderKey, threads: PictureThreads) {
    if work.render.result_for(&key).is_some() {
        want_refine(work, loaded, &key);
        return;
    }
    work.refine.stop();
    let refined = work.refine.latest().filter(|((g, _), _)| *g == loaded.generation).map(|(_, s)| s.clone());
    let (model, symbols) = (loaded.model.clone(), loaded.symbols.clone());
    let k = key.clone();
    work.render
        .want_fallible(key, move |cancel| threads.draw(|| render(&model, &symbols, refined.as_deref(), &k, &cancel)));
}

/// Starts the range summary the view of `key` wants, if any.
fn want_refine(work: &mut Work, loaded: &Loaded, key: &RenderKey) {
    // Colouring by category draws every column exactly, whatever the zoom.
    if key.colour_by.is_category() {
        return;
    }
    let existing = work.refine.latest().filter(|((g, _), _)| *g == loaded.generation).map(|(_, s)| s.as_ref());
    let Some(request) = decoder::range_summary::wanted_for(&loaded.model, key.columns, key.size.0, existing) else {
        return;
    };
    // The summary it replaces goes first: one summary at a time (up to
    // `MAX_RANGE_CELLS`) keeps the viewer of the 100M-read benchmark trace
    // under 1 GiB.
    work.refine.forget_result();
    let model = loaded.model.clone();
    work.refine.want_fallible((loaded.generation, request), move |cancel| {
        match RangeSummary::build(&model, request, &mut |_, _| !cancel.is_set()) {
            Ok(summary) => Some(Ok(Arc::new(summary))),
            Err(DecodeError::Cancelled) => None,
            Err(e) => Some(Err(e.to_string())),
        }
    });
}

/// The picture of `key` (drawn from `refined` where it fits); `None` when
/// cancelled.
fn render(
    model: &Model,
    symbols: &Symbolizer,
    refined: Option<&RangeSummary>,
    key: &RenderKey,
    cancel: &Cancel,
) -> Option<Result<Rendered, String>> {
    let stopwatch = crate::jobs::Stopwatch::start();
    let (a, b) = key.columns;
    let per_pixel = (b - a) / f64::from(key.size.0.max(1));
    let (from, to) = (a.floor().max(0.0) as u64, (b.ceil() as u64).min(model.columns));
    let outcome = |e: DecodeError| match e {
        DecodeError::Cancelled => None,
        e => Some(Err(e.to_string())),
    };
    let frames = match model.frames_for_view(from, to, per_pixel * MIN_BAR_PIXELS, &mut || !cancel.is_set()) {
        Ok(frames) => frames,
        Err(e) => return outcome(e),
    };
    let pruned = model.pruned_runs_for_view(from, to, per_pixel * MIN_BAR_PIXELS);
    let bars = flame_bars(&frames, &pruned, key.columns, key.size.0);
    let view = key.bitmap_view();
    let names = |pc: u64| symbols.locate(pc).function.clone();
    match rasterize_bitmap_refined(model, refined, &view, &Palette::default(), &names, &mut |_, _| !cancel.is_set()) {
        Ok(image) => {
            let (took, cpu) = (stopwatch.wall(), stopwatch.cpu());
            let flame_height = decoder::calltree::height(&frames);
            Some(Ok(Rendered { image: to_egui(&image), frames, bars, flame_height, took, cpu }))
        }
        Err(e) => outcome(e),
    }
}

/// Starts the preview picture of what is decoded so far.
pub fn want_preview(work: &mut Work, state: PreviewState, size: (u32, u32), colour_by: ColourBy) {
    let key = (state.blocks.len(), size.0, size.1);
    work.preview.want(key, move |_| {
        let done = state.blocks.len() as u64 * state.block_width;
        let (read, total) = state.bytes;
        // Columns are about proportional to bytes of the file.
        let estimate = if read > 0 { (done as f64 * total as f64 / read as f64) as u64 } else { done }.max(done).max(1);
        let rows = state.blocks.iter().map(|b| b.len()).max().unwrap_or(1).max(1) as f64;
        let view = BitmapView {
            columns: (0.0, estimate as f64),
            rows: (0.0, rows),
            width: size.0,
            height: size.1,
            alpha: 1.0,
            colour_by,
        };
        let blocks: Vec<&[decoder::pyramid::SummaryCell]> = state.blocks.iter().map(|b| &b[..]).collect();
        let image =
            decoder::raster::rasterize_blocks(&blocks, state.block_width, (0, done), &view, &Palette::default())
                .ok()?;
        Some(PreviewPicture { image: to_egui(&image), columns: (done, estimate) })
    });
}

/// Starts the overview strip: the whole trace, small.
pub fn want_overview(work: &mut Work, loaded: &Loaded, width: u32, height: u32) {
    let model = loaded.model.clone();
    work.overview.want_fallible((loaded.generation, width, height), move |cancel| {
        let view = BitmapView {
            columns: (0.0, model.columns.max(1) as f64),
            rows: (0.0, f64::from(model.metrics.max_rows.max(1))),
            width,
            height,
            alpha: 0.6,
            colour_by: ColourBy::BytesRead,
        };
        let names = |pc: u64| format!("{pc:#x}");
        let image =
            rasterize_bitmap_with_progress(&model, &view, &Palette::default(), &names, &mut |_, _| !cancel.is_set());
        outcome_for_people(&model, image.map(|image| to_egui(&image)))
    });
}

/// What the inspection of a row the working set does not reach at its
/// column gives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RowPastSet {
    /// The column alone: the pointer is over the bitmap's empty rows.
    ShowColumn,
    /// The error: a row asked for by number (`--hover COLUMN,ROW`), which
    /// showing the column alone would answer with some other point.
    Refuse,
}

/// Starts the inspection of a point.
pub fn want_inspect(work: &mut Work, loaded: &Loaded, column: u64, row: Option<usize>, past_set: RowPastSet) {
    let (model, symbols) = (loaded.model.clone(), loaded.symbols.clone());
    work.inspect.want((loaded.generation, column, row), move |_| {
        let result = Inspector::new(&model, &symbols).inspect(column, row);
        let result = match result {
            Err(_) if row.is_some() && past_set == RowPastSet::ShowColumn => {
                Inspector::new(&model, &symbols).inspect(column, None)
            }
            other => other,
        };
        Some(result.map_err(|e| e.to_string()))
    });
}

/// Starts the row labels at a column.
pub fn want_bands(work: &mut Work, loaded: &Loaded, column: u64) {
    let (model, symbols) = (loaded.model.clone(), loaded.symbols.clone());
    work.bands.want_fallible((loaded.generation, column), move |_| {
        outcome_for_people(&model, decoder::inspect::row_bands(&model, &symbols, column))
    });
}

/// Most columns scanned for the row highlight.
pub const MAX_TOUCH_SCAN: u64 = 4_000_000;

/// Starts finding the columns in `[from, to)` that touch `line`.
pub fn want_touching(work: &mut Work, loaded: &Loaded, line: u64, from: u64, to: u64) {
    let model = loaded.model.clone();
    let to = to.min(from.saturating_add(MAX_TOUCH_SCAN));
    work.touching.want_fallible((loaded.generation, line, from, to), move |_| {
        outcome_for_people(&model, decoder::inspect::columns_touching(&model, line, from, to))
    });
}

/// The columns to highlight as touching `line`: the newest found for it
/// (those of an older range stand in while the view's are found), none
/// once finding them for the view failed — the status line says why, and
/// an older range's columns would contradict it.
pub fn touching_to_draw(work: &Work, line: u64) -> Option<&[u64]> {
    if work.touching.failure().is_some() {
        return None;
    }
    work.touching.latest().filter(|(key, _)| key.1 == line).map(|(_, columns)| columns.as_slice())
}

/// The statistics of columns `range` of `model`, or why they cannot be
/// summed (the replay reads the trace file, which can be gone or changed
/// since it was decoded): said in the panel, not left "working"; `None`
/// when cancelled.
pub fn summed_range(model: &Model, symbols: &Symbolizer, range: (u64, u64), cancel: &Cancel) -> Option<StatsResult> {
    outcome_for_people(
        model,
        decoder::range::range_stats(model, symbols, range.0, range.1, &mut |_, _| !cancel.is_set()),
    )
}

/// A job's outcome from work on `model` that can replay its trace: `None`
/// when cancelled, else the value or why not, naming the trace file (a
/// replay reads it, and it can be gone or changed since it was decoded).
/// Said, not dropped: a job whose work returned nothing counted as
/// cancelled and was asked for again every frame, its labels or highlight
/// "working" for ever.
fn outcome_for_people<T>(model: &Model, result: Result<T, DecodeError>) -> Option<Result<T, String>> {
    match result {
        Err(DecodeError::Cancelled) => None,
        result => {
            Some(result.map_err(|e| format!("{}: {}", model.trace_path.display(), decoder::symbols::error_chain(&e))))
        }
    }
}

/// Starts the statistics of a range (or the whole trace).
pub fn want_stats(work: &mut Work, loaded: &Loaded, range: Option<(u64, u64)>) {
    let (model, symbols) = (loaded.model.clone(), loaded.symbols.clone());
    work.stats.want((loaded.generation, range), move |cancel| match range {
        Some(columns) => summed_range(&model, &symbols, columns, &cancel),
        None => Some(Ok(RangeStats {
            by_function: access_table(&model, &symbols, Grouping::Function),
            by_line: access_table(&model, &symbols, Grouping::Line),
            ..RangeStats::whole_trace(&model)
        })),
    });
}

/// Starts loading a source file with its per-line counts.
pub fn want_source(work: &mut Work, loaded: &Loaded, file: String, line: u32) {
    let (model, symbols) = (loaded.model.clone(), loaded.symbols.clone());
    work.source
        .want((loaded.generation, file.clone(), line), move |_| Some(load_source(&model, &symbols, &file, line)));
}

fn load_source(model: &Model, symbols: &Symbolizer, file: &str, line: u32) -> SourceText {
    let mut counts: HashMap<u32, (u64, u64)> = HashMap::new();
    for (site, c) in model.sites.iter().zip(&model.site_counts) {
        if c.reads == 0 && c.writes == 0 {
            continue;
        }
        let l = symbols.locate(site.pc);
        if l.file.as_deref() == Some(file)
            && let Some(n) = l.line
        {
            let e = counts.entry(n).or_default();
            e.0 += c.reads;
            e.1 += c.writes;
        }
    }
    SourceText::read(file, line, counts, "reads, writes by line", model.metadata.start_unix_ms)
}

/// Function names by entry address, found in the background.
#[derive(Default)]
pub struct Names {
    known: HashMap<u64, String>,
    wanted: HashSet<u64>,
    job: Job<u64, Vec<(u64, String)>>,
    asked: u64,
}

impl Names {
    /// The name of the function at `entry`, if known yet.
    pub fn get(&self, entry: u64) -> Option<&str> {
        self.known.get(&entry).map(String::as_str)
    }

    /// Records a name (as a lookup would).
    pub fn insert(&mut self, entry: u64, name: String) {
        self.known.insert(entry, name);
    }

    /// Asks for names of `entries` (those not known are looked up).
    pub fn want(&mut self, entries: impl IntoIterator<Item = u64>) {
        for e in entries {
            if !self.known.contains_key(&e) {
                self.wanted.insert(e);
            }
        }
    }

    /// Starts looking up what was asked for.
    pub fn start(&mut self, symbols: &Arc<Symbolizer>) {
        if self.wanted.is_empty() || self.job.busy() {
            return;
        }
        let entries: Vec<u64> = self.wanted.drain().collect();
        let symbols = symbols.clone();
        self.asked += 1;
        self.job.want(self.asked, move |_| {
            Some(entries.iter().map(|&e| (e, symbols.locate(e).function.clone())).collect())
        });
    }

    fn poll(&mut self) {
        if self.job.poll()
            && let Some((_, names)) = self.job.latest()
        {
            self.known.extend(names.iter().cloned());
        }
    }

    /// Entries whose name contains `text` (case-insensitive).
    pub fn matching(&self, text: &str) -> HashSet<u64> {
        let text = text.to_lowercase();
        self.known.iter().filter(|(_, n)| n.to_lowercase().contains(&text)).map(|(&e, _)| e).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small checked-in trace, decoded (generation 1).
    fn a_decoded_trace() -> Loaded {
        let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/lookup_hash_work.lntrace");
        let model = Model::decode(&trace, &decoder::model::DecodeOptions::default(), &mut |_| {}).expect("decode");
        let symbols = Arc::new(Symbolizer::new(&model.modules));
        bevy::tasks::AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        Loaded::new(model, symbols, 1, Duration::ZERO)
    }

    /// [`a_decoded_trace`], whose file is gone since, and no work yet.
    fn a_trace_whose_file_is_gone() -> (Loaded, Work) {
        let Loaded { model, symbols, generation, .. } = a_decoded_trace();
        let mut model = Arc::into_inner(model).expect("the only reference");
        model.trace_path = std::env::temp_dir().join(format!("linetrace-gone-{}.lntrace", std::process::id()));
        (Loaded::new(model, symbols, generation, Duration::ZERO), Work::default())
    }

    /// A range whose replay fails (the trace file is gone since it was
    /// decoded) is an error in the panel's result, not a result that never
    /// comes; the whole trace's figures need no replay.
    #[test]
    fn a_range_that_cannot_be_replayed_says_why() {
        let (loaded, mut work) = a_trace_whose_file_is_gone();
        for range in [Some((100, 400)), None] {
            want_stats(&mut work, &loaded, range);
            assert!(work.stats.wait_for(&(1, range), Duration::from_secs(60)), "{range:?} summed");
            match (range, work.stats.result_for(&(1, range))) {
                (Some(_), Some(Err(e))) => assert!(e.contains("linetrace-gone"), "{e}"),
                (None, Some(Ok(s))) => assert_eq!(s.reads, loaded.model.columns),
                (_, other) => panic!("{range:?}: {:?}", other.map(|r| r.as_ref().map(|s| s.reads))),
            }
        }
    }

    /// The row labels, the row highlight's columns and the overview strip
    /// of a trace whose file is gone say why they cannot be made, once
    /// each (a failure is not asked for again), and the status line says it
    /// once for all three. Before, their work returned nothing, which
    /// counted as cancelled: asked for again every frame, and the labels
    /// pending for ever.
    #[test]
    fn labels_highlight_and_overview_that_cannot_be_made_say_why() {
        let (loaded, mut work) = a_trace_whose_file_is_gone();
        // Wide enough for the overview to be drawn column by column, which
        // replays the trace.
        want_overview(&mut work, &loaded, 4 * loaded.model.columns as u32, 8);
        want_bands(&mut work, &loaded, 500);
        want_touching(&mut work, &loaded, 0, 0, loaded.model.columns);
        let failed = |work: &mut Work| {
            work.poll();
            [
                work.overview.failure().map(|f| &f.1),
                work.bands.failure().map(|f| &f.1),
                work.touching.failure().map(|f| &f.1),
            ]
            .map(|why| why.cloned())
        };
        assert!(crate::jobs::wakes::until(|| failed(&mut work).iter().all(Option::is_some)), "{:?}", failed(&mut work));
        for why in failed(&mut work) {
            let why = why.unwrap_or_default();
            assert!(why.contains("linetrace-gone"), "names the file: {why}");
        }
        // Asked for again, as every frame does: kept, not run again.
        want_bands(&mut work, &loaded, 500);
        assert!(!work.bands.busy(), "a failed key is not run again");
        let said = crate::ui::failures_said(&work, true).expect("said");
        assert!(
            said.starts_with("cannot draw the overview, label the rows, find the columns touching the line: "),
            "{said}"
        );
        assert_eq!(said.matches("linetrace-gone").count(), 1, "one cause said once: {said}");
        // With the row highlight off, its old failure is not said.
        let said = crate::ui::failures_said(&work, false).expect("said");
        assert!(said.starts_with("cannot draw the overview, label the rows: "), "{said}");
    }

    /// The row highlight shows the columns found for an older range while
    /// the view's are found, and none once finding them failed: before, the
    /// older range's columns stayed lit next to the status line's "cannot
    /// find the columns touching the line".
    #[test]
    fn a_row_highlight_that_cannot_be_found_lights_no_older_columns() {
        let (gone, mut work) = a_trace_whose_file_is_gone();
        let present = a_decoded_trace();
        let line = Inspector::new(&present.model, &present.symbols)
            .inspect(10, Some(0))
            .expect("inspect")
            .line
            .expect("row 0")
            .line;
        let columns = present.model.columns;
        want_touching(&mut work, &present, line, 0, columns);
        assert!(work.touching.wait_for(&(present.generation, line, 0, columns), Duration::from_secs(60)), "found");
        let found = touching_to_draw(&work, line).expect("columns of the line").to_vec();
        assert!(!found.is_empty(), "row 0's line at column 10 is touched");
        assert_eq!(touching_to_draw(&work, line + 1), None, "another line's");
        // The view moves on, and the trace file is gone since.
        want_touching(&mut work, &gone, line, 1, columns);
        assert!(
            crate::jobs::wakes::until(|| {
                work.poll();
                work.touching.failure().is_some()
            }),
            "fails"
        );
        assert_eq!(touching_to_draw(&work, line), None, "no columns of the older range");
    }

    /// Once a view's picture is in, the columns in view are summarized for
    /// the zoom steps into them, and the next step's picture is drawn from
    /// that summary.
    #[test]
    fn a_view_at_rest_is_summarized_for_the_steps_into_it() {
        // Its work may end unawaited and wake the window: a turn of the
        // tests that count wake-ups.
        let (_, _turn) = crate::jobs::wakes::count();
        let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/matmul_naive_O0.lntrace");
        let model = Model::decode(&trace, &decoder::model::DecodeOptions::default(), &mut |_| {}).expect("decode");
        let symbols = Arc::new(Symbolizer::new(&model.modules));
        bevy::tasks::AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let loaded = Loaded::new(model, symbols, 1, Duration::ZERO);
        let mut work = Work::default();
        let model = loaded.model.clone();
        let columns = model.columns as f64;
        let rows = (0.0, f64::from(model.metrics.max_rows));
        let key = |columns: (f64, f64), width: u32| RenderKey {
            generation: 1,
            columns,
            rows,
            size: (width, 120),
            alpha: 1.0,
            colour_by: ColourBy::BytesRead,
        };
        // 100 columns a pixel: the step in, to 50, is drawn from spans.
        let whole = key((0.0, columns), (columns / 100.0) as u32);
        want_render(&mut work, &loaded, whole.clone(), PictureThreads::Two);
        assert!(work.render.wait_for(&whole, Duration::from_secs(60)), "the view's picture");
        assert!(!work.refine.busy() && work.refine.latest().is_none(), "no summary before the picture is in");
        want_render(&mut work, &loaded, whole.clone(), PictureThreads::Two);
        let request = decoder::range_summary::wanted_for(&model, whole.columns, whole.size.0, None).expect("wanted");
        assert!(work.refine.wait_for(&(1, request), Duration::from_secs(60)), "the summary of the view");
        let summary = work.refine.latest().map(|(_, s)| s.clone()).expect("summary");
        assert!(summary.serves((0.0, columns), 25.0), "the whole view, in blocks of at most a quarter of the step");
        // The step in, at 50 columns a pixel.
        let step = key((columns * 0.3, columns * 0.8), whole.size.0);
        let palette = Palette::default();
        let from_blocks = decoder::raster::rasterize_blocks(
            &summary.blocks(),
            summary.block_width(),
            (summary.request().from, summary.request().to),
            &step.bitmap_view(),
            &palette,
        )
        .expect("blocks");
        let from_spans = decoder::raster::rasterize_from_spans(&model, &step.bitmap_view(), &palette, &mut |_, _| true)
            .expect("spans");
        assert_ne!(from_blocks, from_spans, "the two ways differ somewhere on this trace");
        want_render(&mut work, &loaded, step.clone(), PictureThreads::Two);
        assert!(work.render.wait_for(&step, Duration::from_secs(60)), "the step's picture");
        let drawn = work.render.result_for(&step).expect("picture").image.clone();
        assert_eq!(*drawn, *to_egui(&from_blocks), "the step is drawn from the summary");
    }

    /// A source file modified after the recording started says so; one
    /// older than it, or a recording of unknown time, does not.
    #[test]
    fn a_source_file_edited_after_the_recording_is_flagged() {
        let dir = std::env::temp_dir().join(format!("linetrace-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("f.c");
        std::fs::write(&file, "int x;\n").expect("write");
        let path = file.to_str().expect("utf-8");
        let modified = std::fs::metadata(&file).and_then(|m| m.modified()).expect("mtime");
        let ms = modified.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_millis() as u64;
        let read = |recorded| SourceText::read(path, 1, HashMap::new(), "g", recorded);
        let before = read(ms - 3_600_000);
        assert_eq!(before.lines.as_ref().map(Vec::len), Ok(1));
        let note = before.changed.expect("edited an hour after the recording");
        assert!(note.starts_with("changed 60 min after the recording"), "{note}");
        assert!(read(ms + 1000).changed.is_none(), "recorded after the edit");
        assert!(read(0).changed.is_none(), "recording time unknown");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

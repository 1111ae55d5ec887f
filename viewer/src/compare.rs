//! Compare mode (`linetrace view A B`): two traces in one window, A above
//! B, each with its flamegraph over its bitmap, drawn by the same code as
//! the single-trace view ([`crate::paint`], [`crate::work`]).
//!
//! - **Linked navigation.** The x axes are each trace's own read columns,
//!   so they are linked by frames ([`decoder::compare`]): zooming, panning
//!   or fitting a frame in one pane shows the same place, through the
//!   matching invocation, in the other. `L` unlinks.
//! - **Differential flamegraph.** Frames are coloured by the normalised
//!   delta of reads (or D1 / LL read misses) between a frame and its
//!   partner: blue fewer in B, red more, grey no partner; in both panes, so
//!   a red frame costs more in B wherever it is seen. Hover says A, B and
//!   the delta.
//! - **Statistics.** The side panel shows `linetrace diff`'s tables for the
//!   whole traces, the clicked frame and its partner, or a range dragged on
//!   either ruler and its linked counterpart.

use std::sync::Arc;

use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};
use decoder::calltree::Frame;
use decoder::compare::{DeltaMetric, FrameDelta, FrameMatching, Side, frame_index};
use decoder::diff::{DiffRow, MetricPair, diff, range_diff};
use decoder::raster::{ColourBy, UNMATCHED_FRAME_COLOUR, delta_colour, frame_colour};
use decoder::tables::Grouping;

use crate::jobs::Job;
use crate::pacing::Activity;
use crate::paint::{self, BAR_H, PictureTexture, c32, rect4, short};
use crate::session::{Loaded, Session};
use crate::ui::{Hover, PaneReport, UiReport};
use crate::view::{PaintedView, PictureThreads, ViewCommand, Viewport};
use crate::work::{self, RenderKey, Rendered, Work};
use crate::{ScreenshotRequest, ViewerOptions};

const HEADER_H: f32 = 18.0;
const RULER_H: f32 = 18.0;
const MARGIN_W: f32 = 26.0;

/// One trace of the comparison.
pub struct Pane {
    /// Which.
    pub side: Side,
    /// Its trace.
    pub session: Session,
    /// What of it is on screen.
    pub view: Viewport,
    /// Its background work.
    pub work: Work,
    picture: PictureTexture,
    generation: u32,
    /// The differential colours of its newest picture's flamegraph.
    picture_deltas: PictureDeltas,
    /// Where its picture was last painted.
    painted_view: PaintedView,
    /// The sketch of its trace while the traces decode.
    preview: paint::DecodingPreview,
}

impl Pane {
    fn new(side: Side, session: Session) -> Pane {
        Pane {
            side,
            session,
            view: Viewport::default(),
            work: Work::default(),
            picture: PictureTexture::default(),
            generation: 0,
            picture_deltas: PictureDeltas::default(),
            painted_view: PaintedView::default(),
            preview: paint::DecodingPreview::default(),
        }
    }

    fn letter(&self) -> &'static str {
        match self.side {
            Side::A => "A",
            Side::B => "B",
        }
    }
}

/// The differential colours of one picture's flamegraph: the normalised
/// delta of each frame the picture draws as a bar of its own (`None`: no
/// partner), made once for the picture, the metric and the two traces.
/// (Made in every frame for every frame in the picture, they took 5 ms of
/// each pane's UI pass while panning the bench's compare session; and,
/// kept per frame across metrics, a frame seen before a change of metric
/// kept the old metric's colour.)
#[derive(Default)]
struct PictureDeltas {
    made_for: Option<(RenderKey, DeltaMetric, [u32; 2])>,
    /// By index into the picture's frames.
    deltas: Vec<Option<f64>>,
}

impl PictureDeltas {
    /// The delta of the picture's frame `i`.
    fn get(&self, i: usize) -> Option<f64> {
        self.deltas.get(i).copied().flatten()
    }

    /// Makes the deltas of `picture` (of pane `side`, `key`) unless made
    /// already; `generations` are the two traces' the matching is of.
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        key: &RenderKey,
        picture: &Rendered,
        metric: DeltaMetric,
        matching: &FrameMatching,
        side: Side,
        models: [&decoder::model::Model; 2],
        generations: [u32; 2],
    ) {
        let made_for = (key.clone(), metric, generations);
        if self.made_for.as_ref() == Some(&made_for) {
            return;
        }
        let tree = &models[side.index()].call_tree;
        let mut deltas = vec![None; picture.frames.len()];
        for i in picture.bars.iter().filter(|b| b.frames == 1).filter_map(|b| b.frame) {
            deltas[i] = frame_index(tree, &picture.frames[i])
                .and_then(|j| FrameDelta::of(metric, matching, side, j, models))
                .and_then(|d| d.normalised());
        }
        *self = PictureDeltas { made_for: Some(made_for), deltas };
    }
}

/// Column ranges of A and B the statistics are about.
pub type Ranges = [(u64, u64); 2];

/// The statistics panel's content: `linetrace diff` of two ranges.
pub struct CompareStats {
    /// What is compared.
    pub title: String,
    /// Metrics side by side.
    pub metrics: Vec<MetricPair>,
    /// By function.
    pub by_function: Vec<DiffRow>,
    /// By line.
    pub by_line: Vec<DiffRow>,
}

/// The two traces and what the window does with them.
#[derive(Resource)]
pub struct Comparison {
    /// A, then B.
    pub panes: [Pane; 2],
    /// Differential colouring of frames (`None`: a hue per function).
    pub metric: Option<DeltaMetric>,
    /// Whether moving one pane moves the other.
    pub linked: bool,
    /// The ranges of the statistics (`None`: whole traces).
    pub selection: Option<Ranges>,
    /// Bitmap colouring.
    pub colour_by: ColourBy,
    matching: Job<(u32, u32), Arc<FrameMatching>>,
    stats: Job<(u32, u32, Option<Ranges>), Result<CompareStats, String>>,
    start: Option<(u64, u64)>,
    /// A word for the status line (columns asked for past A's end).
    notice: Option<String>,
    show_stats: bool,
    show_help: bool,
    forced_hover: Option<u64>,
    ignore_pointer: bool,
    drag_select: Option<(Side, f64)>,
    hover: Option<(Side, Hover)>,
}

impl Comparison {
    /// The comparison of traces A and B (decoding or decoded).
    pub fn open(options: &ViewerOptions, [a, b]: [Session; 2]) -> Comparison {
        Comparison {
            panes: [Pane::new(Side::A, a), Pane::new(Side::B, b)],
            metric: Some(DeltaMetric::Reads),
            linked: true,
            selection: None,
            colour_by: ColourBy::BytesRead,
            matching: Job::default(),
            stats: Job::default(),
            start: options.columns,
            notice: None,
            // The diff tables are what a comparison is read by: shown
            // from the start.
            show_stats: true,
            show_help: false,
            forced_hover: options.screenshot.as_ref().and_then(|r: &ScreenshotRequest| r.hover).map(|h| h.0),
            ignore_pointer: options.screenshot.is_some() || options.bench.is_some(),
            drag_select: None,
            hover: None,
        }
    }

    fn loaded(&self) -> Option<[Loaded; 2]> {
        Some([self.panes[0].session.loaded.clone()?, self.panes[1].session.loaded.clone()?])
    }

    /// The frame matching of the current models, once computed.
    pub fn matching(&self) -> Option<Arc<FrameMatching>> {
        let [a, b] = self.loaded()?;
        self.matching.result_for(&(a.generation, b.generation)).cloned()
    }

    /// Applies a command to pane `side` and, when linked, shows the same
    /// place in the other pane.
    pub fn command(&mut self, side: Side, command: ViewCommand) {
        match command {
            ViewCommand::Select(range) => {
                self.selection = range.and_then(|r| self.linked_ranges(side, r));
                return;
            }
            ViewCommand::Reset if self.linked => {
                self.panes.iter_mut().for_each(|p| p.view.reset());
                return;
            }
            _ => {}
        }
        crate::view::apply(&mut self.panes[side.index()].view, command);
        if self.linked && !matches!(command, ViewCommand::ScrollRows(_) | ViewCommand::ZoomRows { .. }) {
            self.follow(side);
        }
    }

    /// How many threads the panes' pictures may take: one while either
    /// pane is panned, as in the single view
    /// ([`PaintedView::picture_threads`]); the other pane follows it
    /// through the matched frames, at a scale the matching may stretch.
    fn picture_threads(&self) -> PictureThreads {
        let mut each = self.panes.iter().map(|p| p.painted_view.picture_threads(&p.view));
        if each.any(|t| t == PictureThreads::One) { PictureThreads::One } else { PictureThreads::Two }
    }

    /// Moves the other pane to where pane `side` is.
    fn follow(&mut self, side: Side) {
        let Some(matching) = self.matching() else { return };
        let columns = self.panes[side.index()].view.columns;
        let (x0, x1) = matching.warp.map_view(side, columns);
        self.panes[side.other().index()].view.fit(x0, x1, 0.0);
    }

    /// A range of pane `side` and its counterpart in the other.
    fn linked_ranges(&self, side: Side, range: (u64, u64)) -> Option<Ranges> {
        let [a, b] = self.loaded()?;
        let other = [a.model.columns, b.model.columns][side.other().index()];
        let (x0, x1) = self.matching()?.warp.map_view(side, (range.0 as f64, range.1 as f64));
        let mapped = (x0.max(0.0).round() as u64, (x1.max(0.0).round() as u64).min(other));
        let mut ranges = [range, range];
        ranges[side.other().index()] = mapped;
        Some(ranges)
    }

    /// Selects frame `frame` (model index) of pane `side` and its partner.
    fn select_frame(&mut self, side: Side, frame: usize) {
        let (Some([a, b]), Some(matching)) = (self.loaded(), self.matching()) else { return };
        let trees = [&a.model.call_tree, &b.model.call_tree];
        let Some(partner) = matching.partner(side, frame) else {
            self.selection = None;
            return;
        };
        let span = |t: &decoder::calltree::CallTree, i: usize| (t.frames[i].first_column, t.frames[i].end_column);
        let mut ranges = [(0, 0); 2];
        ranges[side.index()] = span(trees[side.index()], frame);
        ranges[side.other().index()] = span(trees[side.other().index()], partner);
        self.selection = Some(ranges);
    }
}

/// The compare mode's resources and systems.
pub struct ComparePlugin {
    /// How it was opened (`options.compare` is trace B).
    pub options: ViewerOptions,
    /// Traces A and B, decoding.
    pub sessions: [crate::session::Opened; 2],
}

impl Plugin for ComparePlugin {
    fn build(&self, app: &mut App) {
        let [a, b] = &self.sessions;
        app.insert_resource(Comparison::open(&self.options, [a.take(), b.take()]))
            .init_resource::<UiReport>()
            .add_message::<ViewCommand>()
            .add_systems(Update, (poll_panes, apply_view_commands.in_set(crate::ViewCommandsApplied)).chain())
            .add_systems(bevy_egui::EguiPrimaryContextPass, compare_ui);
    }
}

/// Takes in decoded traces, starts the frame matching, fits the first view.
fn poll_panes(mut comparison: ResMut<Comparison>) {
    let c = &mut *comparison;
    for pane in &mut c.panes {
        pane.session.poll(&mut pane.view);
    }
    let Some([a, b]) = c.loaded() else { return };
    let a_columns = a.model.columns;
    c.matching.want((a.generation, b.generation), move |_| {
        Some(Arc::new(FrameMatching::new(&a.model, &a.symbols, &b.model, &b.symbols)))
    });
    c.matching.poll();
    if c.matching().is_some()
        && let Some(range) = c.start.take()
    {
        match crate::view::within_trace("the column range", range, a_columns, "columns") {
            Ok((from, to)) => c.command(Side::A, ViewCommand::Fit { from: from as f64, to: to as f64 }),
            Err(why) => c.notice = Some(format!("A: {why}")),
        }
    }
}

/// The frame's [`ViewCommand`]s from outside the UI (a script: the bench),
/// before the UI pass that shows them: they steer A, as a user's input on
/// A does (B follows when linked).
fn apply_view_commands(mut comparison: ResMut<Comparison>, mut commands: MessageReader<ViewCommand>) {
    for command in commands.read() {
        comparison.command(Side::A, *command);
    }
}

/// The window, once per frame.
fn compare_ui(
    mut contexts: EguiContexts,
    mut comparison: ResMut<Comparison>,
    mut report: ResMut<UiReport>,
    mut activity: ResMut<Activity>,
) -> Result {
    let stopwatch = crate::jobs::Stopwatch::start();
    let ctx = contexts.ctx_mut()?.clone();
    let c = &mut *comparison;
    let ppp = ctx.pixels_per_point();
    let matching = c.matching();
    for pane in &mut c.panes {
        pane.work.poll();
        if let Some(l) = &pane.session.loaded {
            if l.generation != pane.generation {
                pane.generation = l.generation;
                pane.work.clear();
                pane.picture.clear();
                pane.picture_deltas = PictureDeltas::default();
                pane.work.names.want(l.model.call_tree.frames.iter().map(|f| f.function));
            }
            pane.work.names.start(&l.symbols);
        }
    }
    *report = UiReport { loaded: c.loaded().is_some(), ..UiReport::default() };
    let mut commands: Vec<(Side, ViewCommand)> = Vec::new();
    keyboard(&ctx, c, &mut commands);

    let mut root =
        egui::Ui::new(ctx.clone(), "linetrace-compare".into(), egui::UiBuilder::new().max_rect(ctx.content_rect()));
    egui::Panel::top("toolbar").show(&mut root, |ui| toolbar(ui, c, &mut commands));
    egui::Panel::bottom("status").show(&mut root, |ui| {
        for pane in &c.panes {
            let text = status_line(pane);
            ui.label(egui::RichText::new(&text).monospace().size(11.0));
            report.status.push_str(&text);
            report.status.push('\n');
        }
        if let (Some(m), Some([a, b])) = (&matching, c.loaded()) {
            let frames = |n: usize| if n == 1 { "1 frame".to_string() } else { format!("{n} frames") };
            let text = format!(
                "{} of A's {} and of B's {} matched by function and occurrence",
                m.pairs(),
                frames(a.model.call_tree.frames.len()),
                frames(b.model.call_tree.frames.len())
            );
            ui.label(egui::RichText::new(&text).monospace().size(11.0));
        }
        if let Some(n) = &c.notice {
            ui.label(egui::RichText::new(n).monospace().size(11.0));
            report.status.push_str(n);
            report.status.push('\n');
        }
    });
    if c.show_stats {
        egui::Panel::right("side").resizable(true).default_size(420.0).show(&mut root, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| report.stats_shown = stats_panel(ui, c));
        });
    }
    let mut hover = None;
    // Decided before either pane paints (which moves its painted view).
    let threads = c.picture_threads();
    let pointer_down = ctx.input(|i| i.pointer.any_down());
    let zoom_step = c.panes.iter().any(|p| p.painted_view.zoom_step_to(&p.view, pointer_down));
    crate::paint::central_panel(&ctx).show(&mut root, |ui| {
        let full = ui.available_rect_before_wrap();
        let rects = pane_rects(full);
        let areas = want_pictures(c, rects, threads, zoom_step, ppp);
        for ((side, rect), areas) in [Side::A, Side::B].into_iter().zip(rects).zip(areas) {
            let m = matching.as_deref();
            if let Some(h) = pane_view(ui, &ctx, c, side, rect, areas, m, &mut commands, &mut report, ppp) {
                hover = Some((side, h));
            }
        }
        let split = rects[0].bottom() + 1.0;
        ui.painter().hline(full.x_range(), split, egui::Stroke::new(2.0, egui::Color32::from_gray(90)));
    });
    c.hover = hover;
    report.summarise_panes();
    for (side, command) in commands {
        c.command(side, command);
    }
    if c.show_help {
        help(&ctx, &mut c.show_help);
    }
    if let Some(e) = c.panes.iter().find_map(|p| p.session.error.as_ref().map(|e| (p.session.path.clone(), e))) {
        report.error = Some(format!("the trace {} could not be decoded: {}", e.0.display(), e.1));
    }
    let hover_ready = c.forced_hover.is_none() || !report.tooltip.is_empty();
    let stats_ready = !c.show_stats || report.stats_shown;
    report.complete = report.loaded
        && matching.is_some()
        && c.start.is_none()
        && report.panes.iter().all(|p| p.sharp)
        && hover_ready
        && stats_ready;
    *activity = Activity::of(
        c.panes.iter().any(|p| p.session.loading.is_some()),
        c.panes.iter().any(|p| p.work.busy()) || c.matching.busy() || c.stats.busy(),
    );
    report.ui_cpu_ms = stopwatch.cpu().as_secs_f64() * 1e3;
    Ok(())
}

fn keyboard(ctx: &egui::Context, c: &mut Comparison, commands: &mut Vec<(Side, ViewCommand)>) {
    if ctx.input(|i| i.key_pressed(egui::Key::Escape)) {
        c.show_help = false;
    }
    if ctx.egui_wants_keyboard_input() {
        return;
    }
    let side = c.hover.map_or(Side::A, |(s, _)| s);
    let hovered = c.hover.and_then(|(s, h)| Some((s, h.frame?)));
    ctx.input(|i| {
        let pressed = |k| i.key_pressed(k);
        let mut push = |command| commands.push((side, command));
        if pressed(egui::Key::A) || pressed(egui::Key::ArrowLeft) {
            push(ViewCommand::Pan(-0.1));
        }
        if pressed(egui::Key::D) || pressed(egui::Key::ArrowRight) {
            push(ViewCommand::Pan(0.1));
        }
        if pressed(egui::Key::W) || pressed(egui::Key::ArrowUp) {
            push(ViewCommand::Zoom { at: 0.5, factor: 0.8 });
        }
        if pressed(egui::Key::S) || pressed(egui::Key::ArrowDown) {
            push(ViewCommand::Zoom { at: 0.5, factor: 1.25 });
        }
        if pressed(egui::Key::Num0) {
            push(ViewCommand::Reset);
        }
        if pressed(egui::Key::L) {
            c.linked = !c.linked;
        }
        if i.events.iter().any(|e| matches!(e, egui::Event::Text(t) if t == "?")) {
            c.show_help = !c.show_help;
        }
        if pressed(egui::Key::F)
            && let Some((s, i)) = hovered
            && let Some(f) = paint::picture_frame(&c.panes[s.index()].work, i)
        {
            commands.push((s, ViewCommand::Fit { from: f.first_column as f64, to: f.end_column as f64 }));
        }
    });
}

fn toolbar(ui: &mut egui::Ui, c: &mut Comparison, commands: &mut Vec<(Side, ViewCommand)>) {
    ui.horizontal(|ui| {
        ui.strong("linetrace — compare");
        ui.separator();
        if ui.button("Fit all (0)").clicked() {
            commands.push((Side::A, ViewCommand::Reset));
            commands.push((Side::B, ViewCommand::Reset));
        }
        ui.toggle_value(&mut c.linked, "Linked (L)");
        ui.toggle_value(&mut c.show_stats, "Stats");
        ui.separator();
        ui.label("frames:");
        egui::ComboBox::from_id_salt("delta-metric")
            .selected_text(c.metric.map_or("function colours".to_string(), |m| format!("Δ {}", m.name())))
            .show_ui(ui, |ui| {
                for m in DeltaMetric::ALL {
                    ui.selectable_value(&mut c.metric, Some(m), format!("Δ {}", m.name()));
                }
                ui.selectable_value(&mut c.metric, None, "function colours");
            });
        ui.label("bitmap:");
        egui::ComboBox::from_id_salt("colour-by").selected_text(c.colour_by.name()).show_ui(ui, |ui| {
            for k in
                [ColourBy::BytesRead, ColourBy::DistinctBytes, ColourBy::Age, ColourBy::Function, ColourBy::CacheMisses]
            {
                ui.selectable_value(&mut c.colour_by, k, k.name());
            }
        });
        if ui.button("?").clicked() {
            c.show_help = !c.show_help;
        }
        if let Some(m) = c.metric {
            ui.separator();
            let legend = |ui: &mut egui::Ui, d: f64, text: &str| {
                ui.label(egui::RichText::new(text).background_color(c32(delta_colour(d))).color(egui::Color32::BLACK));
            };
            legend(ui, -1.0, "fewer in B");
            legend(ui, 0.0, "same");
            legend(ui, 1.0, "more in B");
            ui.label(
                egui::RichText::new("no partner")
                    .background_color(c32(UNMATCHED_FRAME_COLOUR))
                    .color(egui::Color32::WHITE),
            );
            ui.label(egui::RichText::new(format!("({})", m.name())).small());
        }
    });
}

fn status_line(pane: &Pane) -> String {
    let file = pane.session.path.display().to_string();
    if let Some(e) = &pane.session.error {
        return format!("{}: {file}: cannot show this trace: {e}", pane.letter());
    }
    let Some(l) = &pane.session.loaded else {
        return format!("{}: {file}: decoding… {:.0}%", pane.letter(), 100.0 * pane.session.progress().unwrap_or(0.0));
    };
    let m = &l.model;
    let parts = [
        format!("{}: {file}", pane.letter()),
        m.metadata.argv.join(" "),
        format!("function {}", m.metadata.function.as_deref().unwrap_or("?")),
        format!("{} reads", short(m.columns as f64)),
        format!("view {}..{}", pane.view.columns.0 as u64, pane.view.columns.1 as u64),
    ];
    paint::status_parts(parts.into_iter().chain(l.notes()))
}

/// A pane's header (its trace's name) in the pane's `rect`.
fn header_of(rect: egui::Rect) -> egui::Rect {
    egui::Rect::from_min_size(rect.min + egui::vec2(MARGIN_W, 0.0), egui::vec2(rect.width() - MARGIN_W, HEADER_H))
}

/// Where a decoded pane's ruler, flamegraph and bitmap go in its `rect`,
/// and the key of its bitmap's picture.
struct PaneAreas {
    ruler: egui::Rect,
    flame: egui::Rect,
    bitmap: egui::Rect,
    /// Flamegraph rows laid out ([`Loaded::flame_depth`]), and the levels
    /// of them shown.
    depth: u32,
    levels: u32,
    key: RenderKey,
}

impl PaneAreas {
    /// The areas of `pane` (trace `l`) in `rect`; `None` when the pane
    /// shows no picture (no reads, or too small).
    fn of(pane: &Pane, l: &Loaded, rect: egui::Rect, colour_by: ColourBy, ppp: f32) -> Option<PaneAreas> {
        if l.model.columns == 0 {
            return None;
        }
        let header = header_of(rect);
        let ruler = egui::Rect::from_min_size(header.left_bottom(), egui::vec2(header.width(), RULER_H));
        let depth = l.flame_depth(pane.work.render.latest().map(|(_, r)| r.flame_height));
        let (flame, bitmap, levels) = paint::flame_and_bitmap(ruler, rect.bottom(), depth, 0.45);
        if bitmap.height() < 8.0 || bitmap.width() < 8.0 {
            return None;
        }
        let size = ((bitmap.width() * ppp).round() as u32, (bitmap.height() * ppp).round() as u32);
        let key = RenderKey::of_view(l.generation, &pane.view, size, 1.0, colour_by);
        Some(PaneAreas { ruler, flame, bitmap, depth, levels, key })
    }
}

/// Lays out both panes (in `rects`) and asks for their pictures before
/// either is painted, and on a zoom step's frame (`zoom_step`) waits a
/// little for them: the step's frame then shows them sharp. Returns the
/// panes' areas, for painting them. Asked for and painted pane by pane,
/// B's picture was asked for after A had painted, and never waited for:
/// the step's frame, drawn by the CPU renderer while the pictures were,
/// showed both stretched, and each picture that came drew another. The
/// compare session of the view bench's script (`linetrace view A B
/// --bench-json`, two 10M-read traces), zoom step to the sharp pictures,
/// median and slowest: 98-125 ms and 297-349 ms in 5 sessions before,
/// 57-61 ms and 122-133 ms in 2 after (with the layout of
/// [`Loaded::flame_depth`]).
fn want_pictures(
    c: &mut Comparison,
    rects: [egui::Rect; 2],
    threads: PictureThreads,
    zoom_step: bool,
    ppp: f32,
) -> [Option<PaneAreas>; 2] {
    let Some(pair) = c.loaded() else { return [None, None] };
    let colour_by = c.colour_by;
    let areas = [Side::A, Side::B].map(|side| {
        let (pane, l) = (&mut c.panes[side.index()], &pair[side.index()]);
        let areas = PaneAreas::of(pane, l, rects[side.index()], colour_by, ppp)?;
        work::want_render(&mut pane.work, l, areas.key.clone(), threads);
        Some(areas)
    });
    if zoom_step {
        // One wait for both: the step's frame is held back by at most one
        // [`crate::jobs::ZOOM_WAIT`].
        let started = std::time::Instant::now();
        for (pane, areas) in c.panes.iter_mut().zip(&areas) {
            let Some(key) = areas.as_ref().map(|a| &a.key) else { continue };
            let last_cost = pane.work.render.latest().map(|(_, r)| r.cpu);
            if !pane.work.render.wait_for_zoom_step(key, last_cost, started) {
                break;
            }
        }
    }
    areas
}

/// Where each pane goes in the central panel's `full` area: A above B.
fn pane_rects(full: egui::Rect) -> [egui::Rect; 2] {
    let half = full.height() / 2.0;
    [Side::A, Side::B].map(|side| {
        let top = full.top() + half * side.index() as f32;
        egui::Rect::from_min_max(egui::pos2(full.left(), top), egui::pos2(full.right(), top + half - 3.0))
    })
}

/// One pane: header, ruler, flamegraph, bitmap, in `rect` (`areas`: where
/// [`want_pictures`] laid them out, `None` when the pane shows no picture).
/// Returns what is hovered.
#[allow(clippy::too_many_arguments)]
fn pane_view(
    ui: &mut egui::Ui,
    ctx: &egui::Context,
    c: &mut Comparison,
    side: Side,
    rect: egui::Rect,
    areas: Option<PaneAreas>,
    matching: Option<&FrameMatching>,
    commands: &mut Vec<(Side, ViewCommand)>,
    report: &mut UiReport,
    ppp: f32,
) -> Option<Hover> {
    let loaded = c.loaded();
    let (metric, colour_by, forced_hover, ignore_pointer) = (c.metric, c.colour_by, c.forced_hover, c.ignore_pointer);
    let selection = c.selection;
    let pane = &mut c.panes[side.index()];
    let painter = ui.painter_at(rect);
    painter.text(
        rect.left_top() + egui::vec2(6.0, 2.0),
        egui::Align2::LEFT_TOP,
        pane.letter(),
        egui::FontId::proportional(18.0),
        egui::Color32::WHITE,
    );
    let header = header_of(rect);
    painter.text(
        header.left_center(),
        egui::Align2::LEFT_CENTER,
        pane.session.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        egui::FontId::proportional(12.0),
        egui::Color32::LIGHT_GRAY,
    );
    let Some(pair) = loaded else {
        // Redrawn at the decoding pace (`pace_frames`), not every frame.
        if let Some(e) = &pane.session.error {
            paint::centred_message(&painter, rect, format!("cannot show this trace: {e}"), 14.0);
            return None;
        }
        // The sketch of what is decoded, where the picture will be, until
        // both traces are in.
        let area = egui::Rect::from_min_max(header.left_bottom() + egui::vec2(0.0, RULER_H), rect.max);
        let sketch = pane.preview.show(&painter, area, pane.session.loading.as_ref(), &mut pane.work, colour_by, ppp);
        report.picture |= sketch;
        let text = match pane.session.progress() {
            Some(done) => format!("decoding… {:.0}%", 100.0 * done),
            None => "decoded; waiting for the other trace".to_string(),
        };
        if sketch {
            let at = header.left_bottom() + egui::vec2(0.0, 2.0);
            painter.text(at, egui::Align2::LEFT_TOP, text, egui::FontId::proportional(12.0), egui::Color32::LIGHT_GRAY);
        } else {
            paint::centred_message(&painter, rect, text, 14.0);
        }
        return None;
    };
    let l = &pair[side.index()];
    let models: [&decoder::model::Model; 2] = [&pair[0].model, &pair[1].model];
    if l.model.columns == 0 {
        let text = if l.model.metadata.records_allocations_only() {
            "this trace has no memory reads: a trace of record --allocations (its heap: view --allocations FILE; \
             the heap metrics are beside)"
        } else {
            "this trace has no memory reads"
        };
        paint::centred_message(&painter, rect, text, 14.0);
        if let Some(column) = forced_hover.filter(|_| side == Side::A) {
            report.error = Some(crate::unanswerable_hover((column, None), &format!("A: {text}")));
        }
        return None;
    }
    if let Some(column) = forced_hover.filter(|&column| side == Side::A && column >= l.model.columns) {
        let why = format!("column {column} is past A's {} columns", l.model.columns);
        report.error = Some(crate::unanswerable_hover((column, None), &why));
    }
    let PaneAreas { ruler, flame, bitmap, depth, levels, key } = areas?;
    let view = pane.view;

    // The picture of this view (asked for by `want_pictures`).
    let shown =
        pane.picture.paint(ui, if side == Side::A { "bitmap-a" } else { "bitmap-b" }, &pane.work, &view, bitmap, &key);
    pane.painted_view.painted_at(view);
    if shown.error.is_some() {
        report.error = shown.error.clone();
    }

    // Ruler, selection.
    paint::draw_ruler(&painter, ruler, &view);
    let rr = ui.interact(ruler, ui.id().with(("ruler", side.index())), egui::Sense::drag());
    if rr.drag_started() {
        c.drag_select = rr.interact_pointer_pos().map(|p| (side, paint::column_at(&view, p.x, ruler)));
    }
    if let (Some((s, start)), Some(p)) = (c.drag_select.filter(|(s, _)| *s == side), rr.interact_pointer_pos()) {
        let now = paint::column_at(&view, p.x, ruler);
        let (a, b) = (start.min(now), start.max(now));
        painter.rect_filled(
            egui::Rect::from_x_y_ranges(
                paint::x_of(&view, a, ruler)..=paint::x_of(&view, b, ruler),
                ruler.top()..=bitmap.bottom(),
            ),
            0.0,
            egui::Color32::from_rgba_unmultiplied(120, 160, 255, 40),
        );
        if rr.drag_stopped() {
            c.drag_select = None;
            commands.push((s, ViewCommand::Select(Some((a.max(0.0) as u64, b.max(0.0).ceil() as u64)))));
            c.show_stats = true;
        }
    }
    let pane = &mut c.panes[side.index()];
    if let Some(ranges) = selection {
        let (a, b) = ranges[side.index()];
        let r = egui::Rect::from_x_y_ranges(
            paint::x_of(&view, a as f64, ruler).max(ruler.left())
                ..=paint::x_of(&view, b as f64, ruler).min(ruler.right()),
            ruler.y_range(),
        );
        painter.rect_filled(r, 0.0, egui::Color32::from_rgba_unmultiplied(120, 160, 255, 110));
    }

    // Flamegraph: differential colours.
    let tree = &l.model.call_tree;
    if let (Some(m), Some(matching)) = (metric, matching)
        && let Some((k, r)) = pane.work.render.latest()
    {
        pane.picture_deltas.update(k, r, m, matching, side, models, [pair[0].generation, pair[1].generation]);
    }
    let picture_deltas = &pane.picture_deltas;
    let fill = |frame: Option<(usize, &Frame)>, name: &str| {
        let Some((i, _)) = frame else { return egui::Color32::GRAY };
        match metric {
            None => c32(frame_colour(if name.is_empty() { "?" } else { name })),
            Some(_) => picture_deltas.get(i).map_or(c32(UNMATCHED_FRAME_COLOUR), |d| c32(delta_colour(d))),
        }
    };
    let pointer = ctx.pointer_hover_pos().filter(|_| !ignore_pointer);
    let scroll = view.flame_scroll.min(f64::from(depth.saturating_sub(levels))) as u32;
    let (bars, hovered_frame) = paint::paint_flame(ui, flame, &view, &mut pane.work, scroll, levels, &fill, pointer);
    let bar_frames: Vec<Option<f64>> = {
        // Bars carry their frame's delta in the report (tests read it).
        let r = pane.work.render.latest();
        r.map(|(_, r)| {
            r.bars
                .iter()
                .filter(|b| b.depth >= scroll && b.depth < scroll + levels)
                .map(|b| b.frame.filter(|_| b.frames == 1).and_then(|i| picture_deltas.get(i)))
                .collect()
        })
        .unwrap_or_default()
    };
    let pane_report = PaneReport {
        trace: pane.session.path.display().to_string(),
        flame: rect4(flame, ppp),
        bitmap: rect4(bitmap, ppp),
        columns: view.columns,
        bars: bars
            .into_iter()
            .zip(bar_frames.into_iter().chain(std::iter::repeat(None)))
            .map(|((name, x0, x1, d), delta)| (name, x0 * ppp, x1 * ppp, d, delta))
            .collect(),
        sharp: shown.sharp,
        picture: shown.drawn,
        render_ms: shown.render_ms,
    };

    // Pointer.
    let main_rect = egui::Rect::from_min_max(flame.min, bitmap.max);
    let response = ui.interact(main_rect, ui.id().with(("main", side.index())), egui::Sense::click_and_drag());
    commands.extend(paint::navigate(ui, &response, flame, bitmap, pointer).into_iter().map(|k| (side, k)));
    let total = l.model.columns as f64;
    let frames: &[Frame] = pane.work.render.latest().map_or(&[], |(_, r)| &r.frames);
    let hover = match forced_hover {
        // Headless: hover the deepest frame drawn at this column of A.
        Some(column) if side == Side::A => {
            let x = paint::x_of(&view, column as f64 + 0.5, flame);
            let deepest = frames
                .iter()
                .enumerate()
                .filter(|(_, f)| f.first_column <= column && column < f.end_column && f.depth < scroll + levels)
                .max_by_key(|(_, f)| f.depth);
            deepest.map(|(i, f)| Hover {
                column,
                row: None,
                frame: Some(i),
                pos: egui::pos2(x, flame.top() + (f.depth.saturating_sub(scroll) as f32 + 0.5) * BAR_H),
            })
        }
        Some(_) => None,
        None => pointer.filter(|p| main_rect.contains(*p)).map(|p| {
            let column = paint::column_at(&view, p.x, bitmap).floor().clamp(0.0, total - 1.0) as u64;
            let row = bitmap
                .contains(p)
                .then(|| view.row_at(f64::from((p.y - bitmap.top()) / bitmap.height())).floor().max(0.0) as usize);
            Hover { column, row, frame: hovered_frame, pos: p }
        }),
    };
    // Copied out of the picture: the pane is borrowed mutably below.
    let hovered: Option<Frame> = hover.and_then(|h| h.frame).and_then(|i| frames.get(i)).cloned();
    if let Some(h) = hover {
        painter.line_segment(
            [
                egui::pos2(paint::x_of(&view, h.column as f64, bitmap), flame.top()),
                egui::pos2(paint::x_of(&view, h.column as f64, bitmap), bitmap.bottom()),
            ],
            egui::Stroke::new(1.0, egui::Color32::from_white_alpha(90)),
        );
        if h.frame.is_none() {
            work::want_inspect(&mut pane.work, l, h.column, h.row, work::RowPastSet::ShowColumn);
        }
    }
    let clicked_frame = hovered.as_ref().and_then(|f| frame_index(tree, f));
    if response.double_clicked() {
        if let Some(f) = &hovered {
            commands.push((side, ViewCommand::Fit { from: f.first_column as f64, to: f.end_column as f64 }));
        }
    } else if response.clicked()
        && let Some(i) = clicked_frame
    {
        c.select_frame(side, i);
        c.show_stats = true;
    }

    // Tooltip.
    let pane = &c.panes[side.index()];
    if let Some(h) = hover {
        let lines = match &hovered {
            Some(f) => frame_lines(f, l, &pane.work, matching, side, models, metric.unwrap_or_default()),
            None => match pane.work.inspect.result_for(&(l.generation, h.column, h.row)) {
                Some(Ok(i)) => crate::ui::inspection_tooltip(i),
                Some(Err(e)) => vec![e.clone()],
                None => vec![format!("column {} …", h.column)],
            },
        };
        let mut lines = lines;
        if let Some(first) = lines.first_mut() {
            *first = format!("{}: {first}", pane.letter());
        }
        paint::tooltip(ctx, h.pos, &lines);
        report.tooltip = lines;
    }
    report.panes.push(pane_report);
    hover
}

/// A frame's tooltip: the metric in A and B and the delta, then reads.
fn frame_lines(
    f: &Frame,
    l: &Loaded,
    work: &Work,
    matching: Option<&FrameMatching>,
    side: Side,
    models: [&decoder::model::Model; 2],
    metric: DeltaMetric,
) -> Vec<String> {
    let name = paint::frame_label(&work.names, f);
    let mut lines = vec![name, l.symbols.locate(f.function).file_line()];
    let index = frame_index(&l.model.call_tree, f);
    let partner = index.and_then(|i| matching?.partner(side, i));
    let other = models[side.other().index()];
    match (index, partner) {
        (Some(i), Some(j)) => {
            let m = matching.expect("a partner comes from a matching");
            for k in [metric, DeltaMetric::Reads] {
                if let Some(d) = FrameDelta::of(k, m, side, i, models) {
                    let (a, b) = (d.a.unwrap_or(0), d.b.unwrap_or(0));
                    let change = b as i64 - a as i64;
                    let pct =
                        if a == 0 { String::new() } else { format!(" ({:+.0}%)", 100.0 * change as f64 / a as f64) };
                    lines.push(format!("{:<15} A {a:>10}  B {b:>10}  Δ {change:+}{pct}", k.name()));
                }
                if metric == DeltaMetric::Reads {
                    break;
                }
            }
            let g = &other.call_tree.frames[j];
            lines.push(format!(
                "columns {}..{} here, {}..{} in {}",
                f.first_column,
                f.end_column,
                g.first_column,
                g.end_column,
                match side.other() {
                    Side::A => "A",
                    Side::B => "B",
                }
            ));
        }
        (Some(_), None) if matching.is_some() => {
            lines.push(format!("reads {} — no matching frame in the other trace", f.total_reads));
        }
        _ => lines.push(format!("reads {} (matching frames…)", f.total_reads)),
    }
    lines
}

/// The statistics panel's content for `selection` (the whole traces when
/// none), or why a side's range cannot be summed (its trace file is gone
/// or changed since it was decoded); `None` when cancelled.
fn compared(
    a: &Loaded,
    b: &Loaded,
    selection: Option<Ranges>,
    cancel: &crate::jobs::Cancel,
) -> Option<Result<CompareStats, String>> {
    let Some([ra, rb]) = selection else {
        let by_function = diff(&a.model, &a.symbols, &b.model, &b.symbols, Grouping::Function);
        let by_line = diff(&a.model, &a.symbols, &b.model, &b.symbols, Grouping::Line);
        return Some(Ok(CompareStats {
            title: "whole traces".into(),
            metrics: by_function.metrics,
            by_function: by_function.rows,
            by_line: by_line.rows,
        }));
    };
    let sa = match work::summed_range(&a.model, &a.symbols, ra, cancel)? {
        Ok(s) => s,
        Err(e) => return Some(Err(format!("A: {e}"))),
    };
    let sb = match work::summed_range(&b.model, &b.symbols, rb, cancel)? {
        Ok(s) => s,
        Err(e) => return Some(Err(format!("B: {e}"))),
    };
    let d = range_diff(&sa, &sb);
    Some(Ok(CompareStats {
        title: "ranges".into(),
        metrics: d.metrics,
        by_function: d.by_function,
        by_line: d.by_line,
    }))
}

/// The statistics panel; true once its tables (or why there are none) are
/// shown.
fn stats_panel(ui: &mut egui::Ui, c: &mut Comparison) -> bool {
    let Some([a, b]) = c.loaded() else {
        crate::paint::working(ui);
        return false;
    };
    let selection = c.selection;
    match selection {
        Some([ra, rb]) => ui.heading(format!("A {}..{}  vs  B {}..{}", ra.0, ra.1, rb.0, rb.1)),
        None => ui.heading("Whole traces"),
    };
    ui.label(egui::RichText::new("click a frame or drag on a ruler to compare a part").small());
    if selection.is_some() && ui.button("whole traces").clicked() {
        c.selection = None;
    }
    let key = (a.generation, b.generation, selection);
    c.stats.want(key, move |cancel| compared(&a, &b, selection, &cancel));
    c.stats.poll();
    let s = match c.stats.result_for(&key) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            ui.colored_label(egui::Color32::LIGHT_RED, format!("cannot compare these ranges: {e}"));
            return true;
        }
        None => {
            crate::paint::working(ui);
            return false;
        }
    };
    egui::Grid::new("compare-metrics").striped(true).show(ui, |ui| {
        for h in ["metric", "A", "B", "B/A"] {
            ui.strong(h);
        }
        ui.end_row();
        for m in &s.metrics {
            ui.label(m.name);
            ui.label(format_metric(m.a));
            ui.label(format_metric(m.b));
            ui.label(m.ratio().map_or("-".into(), |r| format!("{r:.3}x")));
            ui.end_row();
        }
    });
    for (title, rows) in [("by function", &s.by_function), ("by line", &s.by_line)] {
        ui.separator();
        ui.strong(format!("{title} ({})", s.title));
        egui::Grid::new(title).striped(true).show(ui, |ui| {
            for h in ["total A", "total B", "delta", ""] {
                ui.label(h);
            }
            ui.end_row();
            for row in rows.iter().take(25) {
                let total = |r: &Option<decoder::tables::AccessRow>| {
                    r.as_ref().map_or("-".into(), |r| r.total_reads.to_string())
                };
                ui.label(total(&row.a));
                ui.label(total(&row.b));
                let colour = c32(delta_colour(decoder::compare::normalised_delta(
                    row.a.as_ref().map_or(0, |r| r.total_reads),
                    row.b.as_ref().map_or(0, |r| r.total_reads),
                )));
                ui.label(egui::RichText::new(format!("{:+}", row.delta_total_reads)).color(colour));
                ui.label(&row.key);
                ui.end_row();
            }
        });
    }
    true
}

fn format_metric(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.3}") }
}

fn help(ctx: &egui::Context, open: &mut bool) {
    egui::Window::new("Keys").collapsible(false).open(open).show(ctx, |ui| {
        egui::Grid::new("keys").show(ui, |ui| {
            for (k, v) in [
                ("wheel / drag", "zoom / pan the pane under the pointer (the other follows)"),
                ("W A S D / arrows", "zoom and pan"),
                ("F / double-click", "fit the frame under the pointer (and its partner)"),
                ("click a frame", "statistics of the frame and its partner"),
                ("drag on a ruler", "statistics of a range and its linked range"),
                ("L", "link or unlink the panes"),
                ("0", "whole traces"),
                ("?", "this help"),
            ] {
                ui.monospace(k);
                ui.label(v);
                ui.end_row();
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use decoder::model::{DecodeOptions, Model};
    use decoder::raster::flame_bars;
    use decoder::symbols::{SymbolPaths, Symbolizer};

    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(name)
    }

    /// A picture's differential colours are of the metric asked for: a
    /// change of metric makes them anew (kept per frame, a frame seen
    /// before the change kept the old metric's colour). Two builds of
    /// examples/c/lookup.c, whose reads and D1 misses change differently.
    #[test]
    fn picture_deltas_are_of_the_metric_asked_for() {
        let decode = |name| Model::decode(&fixture(name), &DecodeOptions::default(), &mut |_| {}).expect("decode");
        let (a, b) = (decode("lookup_scan_work.lntrace"), decode("lookup_hash_work.lntrace"));
        let paths = SymbolPaths { module_dirs: vec![fixture("")], ..SymbolPaths::default() };
        let symbols = |m: &Model| Symbolizer::with_paths(&m.modules, paths.clone());
        let matching = FrameMatching::new(&a, &symbols(&a), &b, &symbols(&b));
        let columns = (0.0, a.columns as f64);
        let frames = a.call_tree.frames.clone();
        let bars = flame_bars(&frames, &[], columns, 4000);
        let picture = Rendered {
            image: Arc::new(egui::ColorImage::filled([1, 1], egui::Color32::BLACK)),
            flame_height: decoder::calltree::height(&frames),
            frames,
            bars,
            took: Duration::ZERO,
            cpu: Duration::ZERO,
        };
        let key = RenderKey {
            generation: 1,
            columns,
            rows: (0.0, 1.0),
            size: (4000, 1),
            alpha: 1.0,
            colour_by: ColourBy::BytesRead,
        };
        let models = [&a, &b];
        let shown: Vec<usize> = picture.bars.iter().filter(|b| b.frames == 1).filter_map(|b| b.frame).collect();
        let mut deltas = PictureDeltas::default();
        let mut seen = Vec::new();
        for metric in [DeltaMetric::Reads, DeltaMetric::D1Misses, DeltaMetric::Reads] {
            deltas.update(&key, &picture, metric, &matching, Side::A, models, [1, 1]);
            let got: Vec<Option<f64>> = shown.iter().map(|&i| deltas.get(i)).collect();
            let want: Vec<Option<f64>> = shown
                .iter()
                .map(|&i| {
                    let j = frame_index(&a.call_tree, &picture.frames[i])?;
                    FrameDelta::of(metric, &matching, Side::A, j, models)?.normalised()
                })
                .collect();
            assert_eq!(got, want, "{metric:?}");
            seen.push(got);
        }
        assert!(seen[0].iter().any(Option::is_some), "frames with partners");
        assert_ne!(seen[0], seen[1], "reads and D1 misses change differently");
        assert_eq!(seen[0], seen[2]);
    }

    /// Ranges of a trace whose file is gone since it was decoded cannot be
    /// summed: the panel's result says which side and why (it was dropped,
    /// and the panel said "working" for ever); the whole traces need no
    /// replay, and two readable ranges are compared.
    #[test]
    fn ranges_that_cannot_be_replayed_say_which_side_and_why() {
        let decode = |name| Model::decode(&fixture(name), &DecodeOptions::default(), &mut |_| {}).expect("decode");
        let loaded = |model: Model| {
            let symbols = Arc::new(Symbolizer::new(&model.modules));
            Loaded::new(model, symbols, 1, Duration::ZERO)
        };
        let a = loaded(decode("lookup_scan_work.lntrace"));
        let mut gone = decode("lookup_hash_work.lntrace");
        gone.trace_path = std::env::temp_dir().join(format!("linetrace-gone-b-{}.lntrace", std::process::id()));
        let b = loaded(gone);
        let cancel = crate::jobs::Cancel::default();
        let ranges = Some([(10, 200), (10, 200)]);
        match compared(&a, &b, ranges, &cancel) {
            Some(Err(e)) => assert!(e.starts_with("B: ") && e.contains("linetrace-gone-b"), "{e}"),
            other => panic!("{:?}", other.map(|r| r.map(|s| s.title))),
        }
        let whole = compared(&a, &b, None, &cancel).expect("not cancelled").expect("no replay");
        assert_eq!(whole.title, "whole traces");
        let both = compared(&a, &a, ranges, &cancel).expect("not cancelled").expect("readable");
        let reads = both.metrics.iter().find(|m| m.name == "reads").expect("a reads metric");
        assert_eq!((reads.a, reads.b), (190.0, 190.0));
    }
}

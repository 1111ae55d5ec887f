//! The window: drawn with egui every frame from what the background work
//! last produced ([`crate::work`]), never waiting for it. The picture of a
//! view stays on screen, stretched to the current view, until the picture
//! of the current view arrives.

use std::collections::HashSet;

use bevy::prelude::*;
use bevy::window::RequestRedraw;
use bevy_egui::{EguiContexts, egui};
use decoder::calltree::Frame;
use decoder::inspect::{Inspection, RowBand};
use decoder::range::RangeStats;
use decoder::raster::{ColourBy, frame_colour};
use decoder::reuse::ReuseHistogram;
use decoder::timeline::{Census, ThreadChoice};
use decoder::working_set::WorkingSetConfig;

use crate::paint::{PictureTexture, c32, draw_ruler, rect4, short};
use crate::search::{SearchCommand, SearchState};
use crate::session::{Loaded, Session};
use crate::view::{PaintedView, Selection, ViewCommand, Viewport};
use crate::work::{self, RenderKey, Work};

/// Height of the overview strip, the ruler and a flamegraph level (points).
const OVERVIEW_H: f32 = 26.0;
const RULER_H: f32 = 20.0;
/// Width of the row-label gutter.
const GUTTER_W: f32 = 170.0;
/// Which highlight the pointer drives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Highlight {
    /// None.
    #[default]
    Off,
    /// X: the lines the read under the pointer's column touched.
    Column,
    /// Y: the columns that touched the line under the pointer.
    Row,
}

/// How flamegraph bars are coloured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FrameColours {
    /// A hue per function name.
    #[default]
    Function,
    /// A hue per module.
    Module,
    /// Heat: share of the frame's reads made by itself.
    SelfReads,
}

/// A point under the pointer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hover {
    /// Column.
    pub column: u64,
    /// Bitmap row, when over the bitmap.
    pub row: Option<usize>,
    /// Flamegraph frame (index into the last picture's frames), when over one.
    pub frame: Option<usize>,
    /// Where to put the tooltip.
    pub pos: egui::Pos2,
}

/// What the UI remembers between frames.
#[derive(Resource)]
pub struct UiState {
    /// A message for the status line (a linked view that could not open).
    pub notice: Option<String>,
    /// The view the pictures were last painted at.
    pub painted_view: PaintedView,
    /// Width of the bitmap on screen in pixels (last frame).
    pub bitmap_pixels: f32,
    /// Size of the bitmap on screen in pixels (last frame): the picture a
    /// view command asks for is started with it ([`render_ahead`]).
    pub bitmap_size: (u32, u32),
    /// Highlight mode.
    pub highlight: Highlight,
    /// Bitmap colouring.
    pub colour_by: ColourBy,
    /// Anti-aliasing exponent.
    pub alpha: f64,
    /// Flamegraph colouring.
    pub frame_colours: FrameColours,
    /// Panels shown.
    pub show_help: bool,
    /// Settings panel.
    pub show_settings: bool,
    /// Statistics panel.
    pub show_stats: bool,
    /// Source view: (file, line).
    pub source: Option<(String, u32)>,
    /// Under the pointer now.
    pub hover: Option<Hover>,
    /// A point to treat as hovered (headless screenshots).
    pub forced_hover: Option<(u64, Option<usize>)>,
    /// Ignore the pointer (headless: the display's pointer is nobody's).
    pub ignore_pointer: bool,
    /// Where a ruler drag started (a column).
    drag_select: Option<f64>,
    /// Working-set settings being edited.
    edit: WorkingSetConfig,
    /// The threads of the trace, from the last model that counted them.
    census: Option<Census>,
    bitmap: PictureTexture,
    preview: crate::paint::DecodingPreview,
    overview: Option<(egui::TextureHandle, (u32, u32, u32))>,
}

impl Default for UiState {
    fn default() -> Self {
        UiState {
            notice: None,
            highlight: Highlight::Column,
            colour_by: ColourBy::BytesRead,
            alpha: 1.0,
            frame_colours: FrameColours::Function,
            show_help: false,
            show_settings: false,
            show_stats: false,
            source: None,
            hover: None,
            forced_hover: None,
            ignore_pointer: false,
            painted_view: PaintedView::default(),
            bitmap_pixels: 1.0,
            bitmap_size: (0, 0),
            drag_select: None,
            edit: WorkingSetConfig::default(),
            census: None,
            bitmap: PictureTexture::default(),
            preview: crate::paint::DecodingPreview::default(),
            overview: None,
        }
    }
}

/// What the UI showed this frame, for headless runs and tests: where things
/// are on screen and what the tooltip says.
#[derive(Resource, Default, Clone, Debug, serde::Serialize)]
pub struct UiReport {
    /// Flamegraph area: [left, top, right, bottom] in pixels.
    pub flame: [f32; 4],
    /// Bitmap area.
    pub bitmap: [f32; 4],
    /// Row-label gutter.
    pub gutter: [f32; 4],
    /// Visible columns.
    pub columns: (f64, f64),
    /// Visible rows.
    pub rows: (f64, f64),
    /// Tooltip lines shown (empty: none).
    pub tooltip: Vec<String>,
    /// Cushion cursors of the allocations view, at times of its axis.
    pub cursors: Vec<f64>,
    /// The allocations view's selected part of its time axis.
    pub selection: Option<(f64, f64)>,
    /// The statistics shown, `name: value`: the allocations view's side
    /// panel totals, the single view's Stats panel figures.
    pub stats: Vec<String>,
    /// The source file and line shown (allocations view), and whether it
    /// could be read.
    pub source: Option<(String, u32, bool)>,
    /// Flamegraph bars drawn: (name, left, right, depth).
    pub bars: Vec<(String, f32, f32, u32)>,
    /// Row labels drawn: (label, first row, rows).
    pub bands: Vec<(String, usize, usize)>,
    /// The status line.
    pub status: String,
    /// Whether the bitmap on screen is the picture of the current view.
    pub sharp: bool,
    /// Whether the trace is decoded.
    pub loaded: bool,
    /// Whether any picture of the trace (preview or final) is on screen.
    pub picture: bool,
    /// Render time of the last picture, milliseconds.
    pub render_ms: f64,
    /// CPU time this frame's UI pass took on its thread, milliseconds.
    pub ui_cpu_ms: f64,
    /// Why the view could not be drawn, if it could not.
    pub error: Option<String>,
    /// Everything asked for is on screen: the trace decoded, the picture
    /// of the current view, its row labels, the tooltip of a forced hover.
    pub complete: bool,
    /// The row labels on screen are not yet those of the current view
    /// (they are asked for once its picture is drawn).
    pub labels_pending: bool,
    /// Whether the statistics panel shows its figures (compare mode: its
    /// tables).
    pub stats_shown: bool,
    /// Allocations mode: the context strip's area (the whole address axis).
    pub context: [f32; 4],
    /// Allocations mode: the addresses at the top and bottom rows of the
    /// picture on screen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addresses: Option<(u64, u64)>,
    /// Compare mode: what each pane showed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub panes: Vec<PaneReport>,
}

/// What one pane of the compare mode showed.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PaneReport {
    /// The trace.
    pub trace: String,
    /// Flamegraph area: [left, top, right, bottom] in pixels.
    pub flame: [f32; 4],
    /// Bitmap area.
    pub bitmap: [f32; 4],
    /// Visible columns.
    pub columns: (f64, f64),
    /// Flamegraph bars drawn: (name, left, right, depth, normalised delta
    /// of the frame against its partner, `None` without one).
    pub bars: Vec<(String, f32, f32, u32, Option<f64>)>,
    /// Whether its picture is of the current view.
    pub sharp: bool,
    /// Whether any picture of it (preview or final) is on screen.
    pub picture: bool,
    /// Render time of its last picture, milliseconds.
    pub render_ms: f64,
}

impl UiReport {
    /// The compare mode's panes as the whole window, for what reads a
    /// report without knowing the mode (the bench script): A's columns
    /// and bitmap (A is what the script steers), sharp when every pane
    /// is, a picture when any is, the slower pane's render time.
    pub fn summarise_panes(&mut self) {
        let Some(a) = self.panes.first() else { return };
        self.columns = a.columns;
        self.bitmap = a.bitmap;
        self.sharp = self.panes.iter().all(|p| p.sharp);
        self.picture = self.panes.iter().any(|p| p.picture);
        self.render_ms = self.panes.iter().map(|p| p.render_ms).fold(0.0, f64::max);
    }
}

/// The UI, once per frame.
#[allow(clippy::too_many_arguments)]
pub fn ui_system(
    mut contexts: EguiContexts,
    mut session: ResMut<Session>,
    (mut view, mut selection): (ResMut<Viewport>, ResMut<Selection>),
    mut work: ResMut<Work>,
    mut state: ResMut<UiState>,
    mut redraw: MessageWriter<RequestRedraw>,
    (mut search, mut searches): (ResMut<SearchState>, MessageWriter<SearchCommand>),
    (mut report, mut activity): (ResMut<UiReport>, ResMut<crate::pacing::Activity>),
    mut input_shown: ResMut<crate::pacing::InputShown>,
    mut last_generation: Local<u32>,
) -> Result {
    let stopwatch = crate::jobs::Stopwatch::start();
    let ctx = contexts.ctx_mut()?.clone();
    work.poll();
    let loaded = session.loaded.clone();
    if let Some(l) = &loaded {
        if l.generation != *last_generation {
            *last_generation = l.generation;
            work.clear();
            state.bitmap.clear();
            state.overview = None;
            state.edit = l.model.working_set.config;
            work.names.want(l.model.call_tree.frames.iter().map(|f| f.function));
        }
        work.names.start(&l.symbols);
    }
    let ppp = ctx.pixels_per_point();
    // The frame's input (keys, the toolbar, the wheel and drags over the
    // pictures) moves the view before the pictures are painted, so the
    // input's own frame shows where it went. (Commands from other systems
    // were applied before the UI pass: `apply_view_commands`.)
    let (mut v, mut sel) = (*view, *selection);
    let mut commands: Vec<ViewCommand> = Vec::new();
    *report = UiReport { columns: v.columns, rows: v.rows, loaded: loaded.is_some(), ..UiReport::default() };
    keyboard(&ctx, &mut state, &search, &work, &mut commands, &mut searches);
    search.focus = false;

    let mut root =
        egui::Ui::new(ctx.clone(), "linetrace-root".into(), egui::UiBuilder::new().max_rect(ctx.content_rect()));
    egui::Panel::top("toolbar").show(&mut root, |ui| toolbar(ui, &mut state, &mut commands, &mut searches));
    // The status line's place; its text is written once the view is known.
    let status_line = egui::Panel::bottom("status").show(&mut root, crate::paint::reserve_status_line).inner;
    if search.open {
        egui::Panel::top("search").show(&mut root, |ui| search_bar(ui, &search, &work, loaded.as_ref(), &mut searches));
    }
    if let (Some((file, line)), Some(l)) = (state.source.clone(), &loaded) {
        work::want_source(&mut work, l, file, line);
        egui::Panel::bottom("source")
            .resizable(true)
            .default_size(220.0)
            .show(&mut root, |ui| source_view(ui, &mut state, &work));
    }
    if state.show_settings || state.show_stats {
        egui::Panel::right("side").resizable(true).default_size(380.0).show(&mut root, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                if state.show_settings {
                    settings(ui, &mut state, &mut session);
                    ui.separator();
                }
                if state.show_stats {
                    if let Some(l) = &loaded {
                        work::want_stats(&mut work, l, selection.0);
                    }
                    report.stats_shown = stats(ui, &work, selection.0, &mut state, &mut report.stats);
                }
            });
        });
    }
    let painted_after_commands = crate::paint::central_panel(&ctx)
        .show(&mut root, |ui| {
            main_view(
                ui,
                &ctx,
                &mut state,
                &search,
                &session,
                loaded.as_ref(),
                (&mut v, &mut sel),
                &mut work,
                &mut commands,
                &mut report,
                ppp,
            )
        })
        .inner;
    // The view moved (by the frame's input, or by commands applied before
    // its UI pass), and this frame shows it: egui's next frame would show
    // nothing new (see `InputShown`).
    let moved_and_shown = painted_after_commands && state.painted_view.painted_at(v);
    // Commands given after the pictures were painted (a double click's
    // fit, a selection; all of them if there was no picture to paint)
    // show in the next frame.
    let late = crate::view::apply_all(&mut v, &mut sel, commands.drain(..));
    if late {
        redraw.write(RequestRedraw);
    }
    input_shown.0 = moved_and_shown && !late;
    let row_highlight = state.highlight == Highlight::Row;
    let mut text = status_text(&session, loaded.as_ref(), &v, &work, state.bitmap_pixels, row_highlight);
    if let Some(n) = &state.notice {
        text = format!("{text}  ·  {n}");
    }
    crate::paint::status_line(&ctx, status_line, &text);
    report.status = text;
    view.set_if_neq(v);
    selection.set_if_neq(sel);
    if state.show_help {
        help(&ctx, &mut state);
    }
    if let Some(e) = &session.error {
        report.error = Some(format!("the trace could not be decoded: {e}"));
    }
    let tooltip_ready = state.forced_hover.is_none()
        || report.tooltip.first().is_some_and(|l| !l.ends_with('…')) && !report.bands.is_empty();
    let stats_ready = !state.show_stats || report.stats_shown;
    report.complete = report.loaded && report.sharp && tooltip_ready && !report.labels_pending && stats_ready;
    *activity = crate::pacing::Activity::of(session.loading.is_some(), work.busy());
    report.ui_cpu_ms = stopwatch.cpu().as_secs_f64() * 1e3;
    Ok(())
}

/// Starts the picture of the view as the frame's commands left it, at the
/// bitmap's size of this frame: the next frame asks for the same picture
/// (unless the bitmap's size changed) and finds it started, or done, a
/// whole frame sooner than if it started it itself — on a CPU renderer a
/// frame is the larger part of a zoom's latency.
pub fn render_ahead(session: Res<Session>, view: Res<Viewport>, state: Res<UiState>, mut work: ResMut<Work>) {
    let (Some(l), (width, height)) = (&session.loaded, state.bitmap_size) else { return };
    if !view.is_changed() || width < 8 || height < 8 {
        return;
    }
    let key = RenderKey::of_view(l.generation, &view, (width, height), state.alpha, state.colour_by);
    work::want_render(&mut work, l, key, state.painted_view.picture_threads(&view));
}

fn keyboard(
    ctx: &egui::Context,
    state: &mut UiState,
    search: &SearchState,
    work: &Work,
    commands: &mut Vec<ViewCommand>,
    searches: &mut MessageWriter<SearchCommand>,
) {
    let (ctrl_f, escape) =
        ctx.input(|i| (i.modifiers.command && i.key_pressed(egui::Key::F), i.key_pressed(egui::Key::Escape)));
    if ctrl_f {
        searches.write(SearchCommand::Open);
    }
    if escape {
        searches.write(SearchCommand::Close);
        state.show_help = false;
    }
    if ctx.egui_wants_keyboard_input() {
        return;
    }
    ctx.input(|i| {
        let pressed = |k| i.key_pressed(k);
        if pressed(egui::Key::A) || pressed(egui::Key::ArrowLeft) {
            commands.push(ViewCommand::Pan(-0.1));
        }
        if pressed(egui::Key::D) || pressed(egui::Key::ArrowRight) {
            commands.push(ViewCommand::Pan(0.1));
        }
        if pressed(egui::Key::W) || pressed(egui::Key::ArrowUp) {
            commands.push(ViewCommand::Zoom { at: 0.5, factor: 0.8 });
        }
        if pressed(egui::Key::S) || pressed(egui::Key::ArrowDown) {
            commands.push(ViewCommand::Zoom { at: 0.5, factor: 1.25 });
        }
        if pressed(egui::Key::Num0) {
            commands.push(ViewCommand::Reset);
        }
        if i.events.iter().any(|e| matches!(e, egui::Event::Text(t) if t == "?")) {
            state.show_help = !state.show_help;
        }
        if pressed(egui::Key::X) {
            state.highlight = if state.highlight == Highlight::Column { Highlight::Off } else { Highlight::Column };
        }
        if pressed(egui::Key::Y) {
            state.highlight = if state.highlight == Highlight::Row { Highlight::Off } else { Highlight::Row };
        }
        if pressed(egui::Key::F)
            && !i.modifiers.command
            && let Some(f) = hovered_frame(state, work)
        {
            commands.push(ViewCommand::Fit { from: f.first_column as f64, to: f.end_column as f64 });
        }
        if pressed(egui::Key::Enter) && search.open {
            searches.write(SearchCommand::Step(if i.modifiers.shift { -1 } else { 1 }));
        }
    });
}

fn hovered_frame<'w>(state: &UiState, work: &'w Work) -> Option<&'w Frame> {
    let i = state.hover?.frame?;
    work.render.latest().and_then(|(_, r)| r.frames.get(i))
}

fn toolbar(
    ui: &mut egui::Ui,
    state: &mut UiState,
    commands: &mut Vec<ViewCommand>,
    searches: &mut MessageWriter<SearchCommand>,
) {
    ui.horizontal(|ui| {
        ui.strong("linetrace");
        ui.separator();
        if ui.button("Fit all (0)").clicked() {
            commands.push(ViewCommand::Reset);
        }
        ui.toggle_value(&mut state.show_stats, "Stats");
        ui.toggle_value(&mut state.show_settings, "Settings");
        if ui.button("Search (Ctrl+F)").clicked() {
            searches.write(SearchCommand::Open);
        }
        ui.separator();
        ui.label("highlight:");
        ui.selectable_value(&mut state.highlight, Highlight::Column, "X column");
        ui.selectable_value(&mut state.highlight, Highlight::Row, "Y row");
        ui.selectable_value(&mut state.highlight, Highlight::Off, "off");
        ui.separator();
        ui.label("colour:");
        egui::ComboBox::from_id_salt("colour-by").selected_text(state.colour_by.name()).show_ui(ui, |ui| {
            for c in [
                ColourBy::BytesRead,
                ColourBy::DistinctBytes,
                ColourBy::Age,
                ColourBy::Function,
                ColourBy::Allocation,
                ColourBy::CacheMisses,
            ] {
                ui.selectable_value(&mut state.colour_by, c, c.name());
            }
        });
        if ui.button("?").clicked() {
            state.show_help = !state.show_help;
        }
    });
}

/// The zoom as a person reads it: columns per pixel when zoomed out, pixels
/// per column when zoomed in.
fn scale_label(columns_per_pixel: f64) -> String {
    if columns_per_pixel >= 10.0 {
        format!("{} col/px", short(columns_per_pixel))
    } else if columns_per_pixel >= 1.0 {
        format!("{columns_per_pixel:.1} col/px")
    } else {
        format!("{:.0} px/col", 1.0 / columns_per_pixel.max(1e-9))
    }
}

/// What background work on the view could not do, and why: "cannot draw
/// this view, label the rows: FILE: ...". One sentence per cause, naming
/// each thing it stopped (a trace file gone since decoding stops the
/// picture, the labels and the highlight alike: said once, not thrice).
/// The row highlight's only while it is on (`row_highlight`): its job
/// keeps its last failure after the highlight is turned off.
pub(crate) fn failures_said(work: &Work, row_highlight: bool) -> Option<String> {
    let failed = [
        ("draw this view", work.render.failure().map(|(_, why)| why)),
        ("draw the overview", work.overview.failure().map(|(_, why)| why)),
        ("label the rows", work.bands.failure().map(|(_, why)| why)),
        ("find the columns touching the line", work.touching.failure().filter(|_| row_highlight).map(|(_, why)| why)),
    ];
    let mut causes: Vec<(&String, Vec<&str>)> = Vec::new();
    for (what, why) in failed.iter().filter_map(|(what, why)| Some((*what, (*why)?))) {
        match causes.iter_mut().find(|(w, _)| *w == why) {
            Some((_, whats)) => whats.push(what),
            None => causes.push((why, vec![what])),
        }
    }
    let said: Vec<String> = causes.iter().map(|(why, whats)| format!("cannot {}: {why}", whats.join(", "))).collect();
    (!said.is_empty()).then(|| crate::paint::status_parts(said))
}

fn status_text(
    session: &Session,
    loaded: Option<&Loaded>,
    view: &Viewport,
    work: &Work,
    pixels: f32,
    row_highlight: bool,
) -> String {
    let file = session.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(e) = &session.error {
        return format!("{file}: cannot show this trace: {e}");
    }
    let Some(l) = loaded else {
        let p = session.progress().unwrap_or(0.0);
        return format!("{file}: decoding… {:.0}%", 100.0 * p);
    };
    let m = &l.model;
    let mut parts = vec![
        file,
        m.metadata.argv.join(" "),
        format!("function {}", m.metadata.function.as_deref().unwrap_or("?")),
        format!("{} reads", short(m.columns as f64)),
        format!(
            "view {}..{} ({})",
            view.columns.0 as u64,
            view.columns.1 as u64,
            scale_label(view.width() / f64::from(pixels.max(1.0)))
        ),
    ];
    parts.extend(l.notes());
    if let Some(thread) = m.timeline_note() {
        parts.push(thread);
    }
    let skipped = m.skipped_invocations();
    if skipped > 0 {
        parts.push(format!("{skipped} invocations on other threads not traced"));
    }
    if session.loading.is_some() {
        parts.push(format!("re-decoding {:.0}%", 100.0 * session.progress().unwrap_or(0.0)));
    }
    parts.extend(failures_said(work, row_highlight));
    // A picture that cannot be drawn is said with the other failures.
    if work.render.failure().is_none() {
        if work.render.busy() {
            parts.push("drawing…".to_string());
        } else if let Some((_, r)) = work.render.latest() {
            parts.push(format!("drawn in {} ms", r.took.as_millis()));
        }
    }
    crate::paint::status_parts(parts)
}

fn search_bar(
    ui: &mut egui::Ui,
    search: &SearchState,
    work: &Work,
    loaded: Option<&Loaded>,
    searches: &mut MessageWriter<SearchCommand>,
) {
    ui.horizontal(|ui| {
        ui.label("Find frames:");
        let mut text = search.text.clone();
        let r = ui.text_edit_singleline(&mut text);
        if search.focus {
            r.request_focus();
        }
        if text != search.text {
            searches.write(SearchCommand::Set(text));
        }
        if r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
            let back = ui.input(|i| i.modifiers.shift);
            searches.write(SearchCommand::Step(if back { -1 } else { 1 }));
            r.request_focus();
        }
        let count = loaded.map_or(0, |l| {
            crate::search::matching_frames(&l.model.call_tree.frames, &work.names.matching(&search.text)).len()
        });
        match search.current {
            Some(i) if count > 0 && !search.text.is_empty() => ui.label(format!("{} of {count}", i + 1)),
            _ => ui.label(format!("{count} matches (Enter: next, Shift+Enter: previous)")),
        };
        if ui.button("close").clicked() {
            searches.write(SearchCommand::Close);
        }
    });
}

fn settings(ui: &mut egui::Ui, state: &mut UiState, session: &mut Session) {
    ui.heading("Settings");
    ui.add(egui::Slider::new(&mut state.alpha, 0.05..=4.0).logarithmic(true).text("anti-aliasing alpha"));
    ui.label(egui::RichText::new("below 1 keeps isolated accesses visible; above 1 filters them").small());
    egui::ComboBox::from_label("frames coloured by")
        .selected_text(match state.frame_colours {
            FrameColours::Function => "function",
            FrameColours::Module => "module",
            FrameColours::SelfReads => "self reads",
        })
        .show_ui(ui, |ui| {
            ui.selectable_value(&mut state.frame_colours, FrameColours::Function, "function");
            ui.selectable_value(&mut state.frame_colours, FrameColours::Module, "module");
            ui.selectable_value(&mut state.frame_colours, FrameColours::SelfReads, "self reads");
        });
    ui.separator();
    ui.label("Working set (decodes the trace again):");
    ui.add(egui::DragValue::new(&mut state.edit.max_age).range(1..=65536).prefix("max age "));
    ui.add(egui::DragValue::new(&mut state.edit.max_rows).range(1..=65536).prefix("max rows "));
    egui::ComboBox::from_label("line size").selected_text(format!("{} bytes", state.edit.line_size)).show_ui(
        ui,
        |ui| {
            for s in [32, 64, 128] {
                ui.selectable_value(&mut state.edit.line_size, s, format!("{s} bytes"));
            }
        },
    );
    let changed = state.edit != session.options.working_set;
    if ui.add_enabled(changed && session.loading.is_none(), egui::Button::new("Apply")).clicked() {
        let mut options = session.options;
        options.working_set = state.edit;
        session.redecode(options);
    }
    thread_picker(ui, session, &mut state.census);
}

/// The thread whose reads are the columns, picked among the threads the
/// trace has (decodes again).
fn thread_picker(ui: &mut egui::Ui, session: &mut Session, seen: &mut Option<Census>) {
    // A model of every thread has no census: keep the last one seen, so the
    // way back to one thread stays.
    if let Some(census) = session.loaded.as_ref().and_then(|l| l.model.census.as_ref())
        && seen.as_ref() != Some(census)
    {
        *seen = Some(census.clone());
    }
    let Some(census) = seen.as_ref() else { return };
    let shown = session.loaded.as_ref().and_then(|l| l.model.timeline);
    let readers: Vec<(u32, u64)> = census.iter().filter(|(_, c)| c.reads > 0).map(|(&t, c)| (t, c.reads)).collect();
    if readers.len() < 2 {
        return;
    }
    ui.separator();
    ui.label("Timeline (decodes the trace again):");
    let label = |thread: Option<u32>| match thread {
        Some(t) => format!("thread {t} ({} reads)", census.get(&t).map_or(0, |c| c.reads)),
        None => "all threads, in the order written".to_string(),
    };
    let mut picked = shown;
    egui::ComboBox::from_label("columns of").selected_text(label(shown)).show_ui(ui, |ui| {
        for &(thread, _) in &readers {
            ui.selectable_value(&mut picked, Some(thread), label(Some(thread)));
        }
        ui.selectable_value(&mut picked, None, label(None));
    });
    if picked != shown && session.loading.is_none() {
        let mut options = session.options;
        options.thread = match picked {
            Some(t) => ThreadChoice::Only(t),
            None => ThreadChoice::All,
        };
        session.redecode(options);
    }
}

/// A range's (or the whole trace's) figures: the grid of counts and the
/// reuse histogram. Each figure also goes to `shown` as `name: value`.
fn figures(ui: &mut egui::Ui, r: &RangeStats, shown: &mut Vec<String>) {
    egui::Grid::new("range-metrics").show(ui, |ui| {
        for (k, v) in [
            ("reads", r.reads.to_string()),
            ("writes", r.writes.to_string()),
            ("line fetches", r.line_fetches.to_string()),
            ("bytes read / fetch", format!("{:.1}", r.mean_bytes_read_per_fetch)),
            ("utilisation", format!("{:.0}%", 100.0 * r.utilisation)),
            ("D1 read misses", r.d1_read_misses.to_string()),
            ("LL read misses", r.ll_read_misses.to_string()),
        ] {
            ui.label(k);
            ui.label(&v);
            ui.end_row();
            shown.push(format!("{k}: {v}"));
        }
    });
    reuse_histogram(ui, &r.reuse, shown);
}

/// The reuse distances as bars, one a bucket from the first to the last
/// that has reads, with the cold (first) reads on top; bar lengths are
/// shares of the largest count.
fn reuse_histogram(ui: &mut egui::Ui, reuse: &ReuseHistogram, shown: &mut Vec<String>) {
    ui.label("reuse distance (distinct lines between reads of a line)");
    let last = reuse.buckets.iter().rposition(|&n| n > 0).map_or(0, |k| k + 1);
    let rows = std::iter::once(("cold".to_string(), reuse.cold))
        .chain(reuse.buckets[..last].iter().enumerate().map(|(k, &n)| (ReuseHistogram::bucket_label(k), n)));
    let largest = reuse.buckets.iter().copied().chain([reuse.cold]).max().unwrap_or(0).max(1);
    egui::Grid::new("reuse-histogram").spacing([6.0, 1.0]).show(ui, |ui| {
        for (label, n) in rows {
            ui.label(egui::RichText::new(label.as_str()).small());
            let (rect, _) = ui.allocate_exact_size(egui::vec2(90.0, 10.0), egui::Sense::hover());
            let share = n as f32 / largest as f32;
            let bar = egui::Rect::from_min_size(rect.min, egui::vec2(rect.width() * share, rect.height()));
            ui.painter().rect_filled(bar, 0.0, egui::Color32::from_rgb(110, 150, 210));
            ui.label(egui::RichText::new(n.to_string()).small());
            ui.end_row();
            shown.push(format!("reuse {label}: {n}"));
        }
    });
}

/// The statistics panel; true once its figures are on screen (they go to
/// `shown` too).
fn stats(
    ui: &mut egui::Ui,
    work: &Work,
    range: Option<(u64, u64)>,
    state: &mut UiState,
    shown: &mut Vec<String>,
) -> bool {
    match range {
        Some((a, b)) => ui.heading(format!("Columns {a}..{b}")),
        None => ui.heading("Whole trace"),
    };
    ui.label(egui::RichText::new("drag on the ruler to select a range").small());
    let s = match work.stats.latest().filter(|(k, _)| k.1 == range) {
        Some((_, Ok(s))) => s,
        Some((_, Err(e))) => {
            let message = format!("cannot sum this range: {e}");
            ui.colored_label(egui::Color32::LIGHT_RED, &message);
            shown.push(message);
            return true;
        }
        None => {
            crate::paint::working(ui);
            return false;
        }
    };
    figures(ui, s, shown);
    for (title, rows) in [("by function", &s.by_function), ("by line", &s.by_line)] {
        ui.separator();
        ui.strong(title);
        egui::Grid::new(title).striped(true).show(ui, |ui| {
            ui.label("reads");
            ui.label("total");
            ui.label("writes");
            ui.label("");
            ui.end_row();
            for row in rows.iter().take(25) {
                ui.label(row.self_reads.to_string());
                ui.label(row.total_reads.to_string());
                ui.label(row.self_writes.to_string());
                if ui.link(row.label()).clicked()
                    && title == "by line"
                    && let Some((file, line)) = row.key.rsplit_once(':')
                    && let Ok(line) = line.parse()
                {
                    state.source = Some((file.to_string(), line));
                }
                ui.end_row();
            }
        });
    }
    true
}

fn source_view(ui: &mut egui::Ui, state: &mut UiState, work: &Work) {
    let Some((_, src)) = work.source.latest() else {
        crate::paint::working(ui);
        return;
    };
    if source_text(ui, src) {
        state.source = None;
    }
}

/// A source file with its per-line counts in a gutter (reads and writes,
/// or blocks and bytes allocated), scrolled to and highlighting its line;
/// true when "close" was clicked. Shared by the access and allocations
/// views.
pub fn source_text(ui: &mut egui::Ui, src: &crate::work::SourceText) -> bool {
    let mut close = false;
    ui.horizontal(|ui| {
        ui.strong(&src.path);
        ui.label(src.gutter);
        close = ui.button("close").clicked();
    });
    if let Some(changed) = &src.changed {
        ui.colored_label(egui::Color32::from_rgb(230, 180, 60), changed);
    }
    match &src.lines {
        Err(e) => {
            ui.label(e);
        }
        Ok(lines) => {
            egui::ScrollArea::vertical().auto_shrink([false, false]).show(ui, |ui| {
                for (i, text) in lines.iter().enumerate() {
                    let n = i as u32 + 1;
                    let (r, w) = src.counts.get(&n).copied().unwrap_or((0, 0));
                    let gutter = if r + w > 0 { format!("{r:>8} {w:>8}") } else { format!("{:>17}", "") };
                    let line = format!("{gutter} {n:>5}  {text}");
                    let mut rich = egui::RichText::new(line).monospace().size(12.0);
                    if n == src.line {
                        rich = rich.background_color(egui::Color32::from_rgb(70, 70, 20));
                    }
                    let label = ui.label(rich);
                    if n == src.line {
                        label.scroll_to_me(Some(egui::Align::Center));
                    }
                }
            });
        }
    }
    close
}

fn help(ctx: &egui::Context, state: &mut UiState) {
    egui::Window::new("Keys").collapsible(false).open(&mut state.show_help).show(ctx, |ui| {
        egui::Grid::new("keys").show(ui, |ui| {
            for (k, v) in [
                ("wheel", "zoom at the pointer"),
                ("drag", "pan"),
                ("Shift+wheel", "scroll rows (over the flamegraph: its levels)"),
                ("Ctrl+wheel", "zoom rows"),
                ("W A S D / arrows", "zoom and pan"),
                ("F / double-click", "fit the frame under the pointer"),
                ("0", "whole trace"),
                ("drag on the ruler", "select columns: statistics of the range"),
                ("click", "source of the frame or read under the pointer"),
                ("X / Y", "highlight: lines the read touched / reads of the line"),
                ("L", "the block under the pointer in the allocations view (a new window)"),
                ("Ctrl+F", "find frames; Enter / Shift+Enter cycles"),
                ("?", "this help"),
            ] {
                ui.monospace(k);
                ui.label(v);
                ui.end_row();
            }
        });
    });
}

/// The main view: overview strip, ruler, flamegraph, gutter and bitmap,
/// with their input. The frame's `commands` and the input over the
/// pictures move the view before anything is painted; commands given after
/// painting are left in `commands`. Whether the pictures were painted
/// (false: a message instead, and every command is left).
#[allow(clippy::too_many_arguments)]
fn main_view(
    ui: &mut egui::Ui,
    ctx: &egui::Context,
    state: &mut UiState,
    search: &SearchState,
    session: &Session,
    loaded: Option<&Loaded>,
    (view, selection): (&mut Viewport, &mut Selection),
    work: &mut Work,
    commands: &mut Vec<ViewCommand>,
    report: &mut UiReport,
    ppp: f32,
) -> bool {
    let full = ui.available_rect_before_wrap();
    let painter = ui.painter_at(full);
    let Some(l) = loaded else {
        loading_view(&painter, full, state, session, work, report, ppp);
        return false;
    };
    let model = &l.model;
    if model.columns == 0 {
        crate::paint::centred_message(&painter, full, "this trace has no memory reads", 16.0);
        // Final: there is no picture to wait for (a screenshot waited for
        // one until it gave up).
        (report.sharp, report.picture) = (true, true);
        if let Some(forced) = state.forced_hover {
            report.error = Some(crate::unanswerable_hover(forced, "this trace has no memory reads to hover"));
        }
        return false;
    }
    // Layout.
    let overview = egui::Rect::from_min_size(
        full.min + egui::vec2(GUTTER_W, 0.0),
        egui::vec2(full.width() - GUTTER_W, OVERVIEW_H),
    );
    let ruler =
        egui::Rect::from_min_size(overview.left_bottom() + egui::vec2(0.0, 2.0), egui::vec2(overview.width(), RULER_H));
    let depth = l.flame_depth(work.render.latest().map(|(_, r)| r.flame_height));
    let (flame, bitmap, levels) = crate::paint::flame_and_bitmap(ruler, full.bottom(), depth, 0.4);
    let gutter = egui::Rect::from_min_max(
        egui::pos2(full.left(), bitmap.top()),
        egui::pos2(bitmap.left() - 2.0, bitmap.bottom()),
    );
    report.flame = rect4(flame, ppp);
    report.bitmap = rect4(bitmap, ppp);
    report.gutter = rect4(gutter, ppp);
    if bitmap.height() < 8.0 || bitmap.width() < 8.0 {
        return false;
    }
    let total = model.columns as f64;

    // Input first: the view it asks for is the one painted below.
    // Pointer: drag pans, the wheel zooms (hover and clicks further down).
    let main_rect = egui::Rect::from_min_max(flame.min, bitmap.max);
    let response = ui.interact(main_rect, ui.id().with("main"), egui::Sense::click_and_drag());
    let pointer = ctx.pointer_hover_pos().filter(|_| !state.ignore_pointer);
    commands.extend(crate::paint::navigate(ui, &response, flame, bitmap, pointer));
    crate::view::apply_all(view, selection, commands.drain(..));
    // A click or drag on the overview centres the view there.
    let ov = ui.interact(overview, ui.id().with("overview"), egui::Sense::click_and_drag());
    if let Some(p) = ov.interact_pointer_pos().filter(|_| ov.clicked() || ov.dragged()) {
        let c = f64::from((p.x - overview.left()) / overview.width()) * total;
        let w = view.width();
        crate::view::apply(view, ViewCommand::Fit { from: c - w / 2.0, to: c + w / 2.0 });
    }
    (report.columns, report.rows) = (view.columns, view.rows);
    let (view, selection): (&Viewport, &Selection) = (view, selection);
    let x_of = |c: f64, r: egui::Rect| crate::paint::x_of(view, c, r);
    let column_at = |x: f32, r: egui::Rect| crate::paint::column_at(view, x, r);

    // Ask for the picture of this view.
    let size = ((bitmap.width() * ppp).round() as u32, (bitmap.height() * ppp).round() as u32);
    state.bitmap_pixels = size.0 as f32;
    state.bitmap_size = size;
    let key = RenderKey::of_view(l.generation, view, size, state.alpha, state.colour_by);
    work::want_render(work, l, key.clone(), state.painted_view.picture_threads(view));
    if state.painted_view.zoom_step_to(view, ui.input(|i| i.pointer.any_down())) {
        let last_cost = work.render.latest().map(|(_, r)| r.cpu);
        work.render.wait_for_zoom_step(&key, last_cost, std::time::Instant::now());
    }
    work::want_overview(work, l, (overview.width() * ppp) as u32, (overview.height() * ppp) as u32);

    // Overview strip with the visible range.
    if let Some((k, img)) = work.overview.latest()
        && state.overview.as_ref().is_none_or(|(_, have)| have != k)
    {
        let tex = ctx.load_texture("overview", img.clone(), egui::TextureOptions::LINEAR);
        state.overview = Some((tex, *k));
    }
    if let Some((tex, _)) = &state.overview {
        painter.image(
            tex.id(),
            overview,
            egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
            egui::Color32::WHITE,
        );
    }
    let vis = egui::Rect::from_x_y_ranges(
        overview.left() + (view.columns.0 / total) as f32 * overview.width()
            ..=overview.left() + (view.columns.1 / total) as f32 * overview.width(),
        overview.y_range(),
    );
    painter.rect_stroke(vis, 0.0, egui::Stroke::new(1.5, egui::Color32::WHITE), egui::StrokeKind::Inside);
    painter.text(
        full.min + egui::vec2(4.0, 6.0),
        egui::Align2::LEFT_TOP,
        "overview",
        egui::FontId::proportional(11.0),
        egui::Color32::GRAY,
    );

    // Ruler: ticks, and range selection by dragging.
    draw_ruler(&painter, ruler, view);
    let rr = ui.interact(ruler, ui.id().with("ruler"), egui::Sense::drag());
    if rr.drag_started() {
        state.drag_select = rr.interact_pointer_pos().map(|p| column_at(p.x, ruler));
    }
    if let (Some(start), Some(p)) = (state.drag_select, rr.interact_pointer_pos()) {
        let now = column_at(p.x, ruler);
        let (a, b) = (start.min(now), start.max(now));
        painter.rect_filled(
            egui::Rect::from_x_y_ranges(x_of(a, ruler)..=x_of(b, ruler), ruler.top()..=bitmap.bottom()),
            0.0,
            egui::Color32::from_rgba_unmultiplied(120, 160, 255, 40),
        );
        if rr.drag_stopped() {
            state.drag_select = None;
            commands.push(ViewCommand::Select(Some((a.max(0.0) as u64, b.max(0.0).ceil() as u64))));
            state.show_stats = true;
        }
    }
    if let Some((a, b)) = selection.0 {
        let r = egui::Rect::from_x_y_ranges(
            x_of(a as f64, ruler).max(ruler.left())..=x_of(b as f64, ruler).min(ruler.right()),
            ruler.y_range(),
        );
        painter.rect_filled(r, 0.0, egui::Color32::from_rgba_unmultiplied(120, 160, 255, 110));
    }

    // Bitmap: the newest picture, placed where its columns are now.
    let shown = state.bitmap.paint(ui, "bitmap", work, view, bitmap, &key);
    report.sharp = shown.sharp;
    report.picture |= shown.drawn;
    report.render_ms = shown.render_ms;
    if shown.error.is_some() {
        report.error = shown.error;
    }

    // Flamegraph bars of the newest picture.
    let matches: HashSet<u64> =
        if search.open && !search.text.is_empty() { work.names.matching(&search.text) } else { HashSet::new() };
    let scroll = view.flame_scroll.min(f64::from(depth.saturating_sub(levels))) as u32;
    let fill = |frame: Option<(usize, &Frame)>, name: &str| {
        let Some((_, f)) = frame else { return egui::Color32::GRAY };
        let colour = frame_fill(state.frame_colours, f, name, &l.symbols);
        match (matches.is_empty(), matches.contains(&f.function)) {
            (true, _) => colour,
            (false, true) => egui::Color32::from_rgb(255, 230, 60),
            (false, false) => colour.gamma_multiply(0.3),
        }
    };
    let (bars, hovered_frame) = crate::paint::paint_flame(ui, flame, view, work, scroll, levels, &fill, pointer);
    report.bars.extend(bars.into_iter().map(|(name, x0, x1, depth)| (name, x0 * ppp, x1 * ppp, depth)));

    // Pointer: hover, click for source, double click to fit.
    let hover = match state.forced_hover {
        Some((column, row)) => {
            let x = x_of(column as f64 + 0.5, bitmap);
            let y = row.map_or(flame.center().y, |r| {
                bitmap.top() + ((r as f64 + 0.5 - view.rows.0) / view.height()) as f32 * bitmap.height()
            });
            Some(Hover { column, row, frame: None, pos: egui::pos2(x, y) })
        }
        None => pointer.filter(|p| main_rect.contains(*p)).map(|p| {
            let column = column_at(p.x, bitmap).floor().clamp(0.0, total - 1.0) as u64;
            let row = bitmap
                .contains(p)
                .then(|| view.row_at(f64::from((p.y - bitmap.top()) / bitmap.height())).floor().max(0.0) as usize);
            Hover { column, row, frame: hovered_frame, pos: p }
        }),
    };
    state.hover = hover;
    if let Some(h) = hover
        && h.frame.is_none()
    {
        let past_set =
            if state.forced_hover.is_some() { work::RowPastSet::Refuse } else { work::RowPastSet::ShowColumn };
        work::want_inspect(work, l, h.column, h.row, past_set);
    }
    if response.double_clicked() {
        if let Some(f) = hovered_frame.and_then(|i| work.render.latest().and_then(|(_, r)| r.frames.get(i))) {
            commands.push(ViewCommand::Fit { from: f.first_column as f64, to: f.end_column as f64 });
        }
    } else if response.clicked() {
        let target = match (hover.and_then(|h| h.frame), work.inspect.latest()) {
            (Some(i), _) => {
                work.render.latest().and_then(|(_, r)| r.frames.get(i)).map(|f| l.symbols.locate(f.function))
            }
            (None, Some((_, Ok(insp)))) => insp.access.as_ref().map(|a| l.symbols.locate(a.pc)),
            _ => None,
        };
        if let Some(loc) = target
            && let (Some(file), Some(line)) = (&loc.file, loc.line)
        {
            state.source = Some((file.clone(), line));
        }
    }

    // Highlights.
    let inspection = hover
        .and_then(|h| work.inspect.result_for(&(l.generation, h.column, h.row)))
        .and_then(|r| r.as_ref().ok())
        .cloned();
    let inspection = inspection.as_ref();
    // L: the block under the pointer in the allocations view (a window
    // of its own).
    if ctx.input(|i| i.key_pressed(egui::Key::L))
        && !ctx.egui_wants_keyboard_input()
        && let Some(b) = inspection.and_then(|i| i.allocation.as_ref())
    {
        let block = crate::linked::LinkedBlock::from(b);
        let args = crate::linked::allocations_view_args(&session.path, &session.symbol_paths, &block);
        state.notice = crate::linked::open(&args).err();
    }
    let painter_b = ui.painter_at(bitmap);
    let row_y = |r: f64| bitmap.top() + ((r - view.rows.0) / view.height()) as f32 * bitmap.height();
    let glow = egui::Color32::from_rgba_unmultiplied(255, 240, 80, 90);
    if let Some(h) = hover {
        let x = x_of(h.column as f64, bitmap);
        painter.line_segment(
            [egui::pos2(x, flame.top()), egui::pos2(x, bitmap.bottom())],
            egui::Stroke::new(1.0, egui::Color32::from_white_alpha(90)),
        );
    }
    if let (Highlight::Column, Some(i)) = (state.highlight, inspection) {
        for &r in &i.rows_touched {
            let rect = egui::Rect::from_x_y_ranges(
                bitmap.x_range(),
                row_y(r as f64)..=row_y(r as f64 + 1.0).max(row_y(r as f64) + 1.0),
            );
            painter_b.rect_filled(rect, 0.0, glow);
        }
    }
    if let (Highlight::Row, Some(line)) = (state.highlight, inspection.and_then(|i| i.line.as_ref())) {
        let (from, to) = (view.columns.0.max(0.0) as u64, (view.columns.1.ceil() as u64).min(model.columns));
        work::want_touching(work, l, line.line, from, to);
        if let Some(cols) = work::touching_to_draw(work, line.line) {
            for &c in cols {
                let x = x_of(c as f64, bitmap);
                painter_b.line_segment(
                    [egui::pos2(x, bitmap.top()), egui::pos2(x, bitmap.bottom())],
                    egui::Stroke::new(1.0, glow),
                );
            }
        }
        let r = line.row as f64;
        painter_b.rect_stroke(
            egui::Rect::from_x_y_ranges(bitmap.x_range(), row_y(r)..=row_y(r + 1.0).max(row_y(r) + 1.0)),
            0.0,
            egui::Stroke::new(1.0, egui::Color32::YELLOW),
            egui::StrokeKind::Outside,
        );
    }

    // Gutter: what the rows hold, at the hovered column or the view's end.
    let reference = hover.map(|h| h.column).unwrap_or(((view.columns.1 - 1.0).max(0.0) as u64).min(model.columns - 1));
    // Not while a picture draws (unless hovering, where the labels answer
    // the pointer): the picture needs both cores, and the labels of the
    // view's end are asked for again when it is done.
    if hover.is_some() || !work.render.busy() {
        work::want_bands(work, l, reference);
    }
    let labels_key = (l.generation, reference);
    // Labels that cannot be made are not pending: the status line says why.
    report.labels_pending =
        work.bands.result_for(&labels_key).is_none() && work.bands.failure().is_none_or(|(k, _)| *k != labels_key);
    if let Some((_, bands)) = work.bands.latest() {
        let painter_g = ui.painter_at(gutter);
        // The caption at the gutter's foot keeps its own strip: a band's
        // label is centred in the part of the band above it that shows (a
        // label centred in a band reaching the bottom was drawn over it).
        let caption_top = gutter.bottom() - 14.0;
        let shown = |b: &RowBand| {
            let (y0, y1) = (row_y(b.first_row as f64), row_y((b.first_row + b.rows) as f64));
            (y1 >= gutter.top() && y0 <= gutter.bottom()).then_some((y0, y1))
        };
        // Every band's shade before any label: a label overhangs a band of
        // 9 to 14 points, and the next band's shade cut off its descenders
        // (`_nl_category_names` read "nl category names").
        for (k, (y0, y1)) in bands.iter().enumerate().filter_map(|(k, b)| shown(b).map(|ys| (k, ys))) {
            let shade = if k % 2 == 0 { egui::Color32::from_gray(38) } else { egui::Color32::from_gray(30) };
            painter_g.rect_filled(egui::Rect::from_x_y_ranges(gutter.x_range(), y0..=y1.max(y0 + 1.0)), 0.0, shade);
        }
        for b in bands {
            let Some((y0, y1)) = shown(b) else { continue };
            let (shown_top, shown_bottom) = (y0.max(gutter.top()), y1.min(caption_top));
            if shown_bottom - shown_top >= 9.0 {
                let text: String = b.label.chars().take(26).collect();
                painter_g.text(
                    egui::pos2(gutter.left() + 4.0, (shown_top + shown_bottom) / 2.0),
                    egui::Align2::LEFT_CENTER,
                    text,
                    egui::FontId::proportional(11.0),
                    egui::Color32::LIGHT_GRAY,
                );
            }
            report.bands.push((b.label.clone(), b.first_row, b.rows));
        }
        // Rows are working-set positions, not addresses: the labels hold at
        // one column only, so say which.
        painter_g.text(
            egui::pos2(gutter.left() + 4.0, gutter.bottom() - 3.0),
            egui::Align2::LEFT_BOTTOM,
            format!("rows at column {reference}"),
            egui::FontId::proportional(10.0),
            egui::Color32::GRAY,
        );
    }

    // Tooltip.
    if let Some(h) = hover {
        let lines = match h.frame.and_then(|i| work.render.latest().and_then(|(_, r)| r.frames.get(i))) {
            Some(f) => frame_tooltip(f, l, &work.names),
            None => match hover.and_then(|h| work.inspect.result_for(&(l.generation, h.column, h.row))) {
                Some(Ok(i)) => inspection_tooltip(i),
                Some(Err(e)) => {
                    if let Some(forced) = state.forced_hover {
                        report.error = Some(crate::unanswerable_hover(forced, e));
                    }
                    vec![e.clone()]
                }
                None => vec![format!("column {} …", h.column)],
            },
        };
        crate::paint::tooltip(ctx, h.pos, &lines);
        report.tooltip = lines;
    }
    true
}

fn frame_fill(colours: FrameColours, f: &Frame, name: &str, symbols: &decoder::symbols::Symbolizer) -> egui::Color32 {
    match colours {
        FrameColours::Function if !name.is_empty() => c32(frame_colour(name)),
        FrameColours::Function => c32(frame_colour(&format!("{:x}", f.function))),
        FrameColours::Module => c32(frame_colour(&symbols.module_name_at(f.function).unwrap_or_default())),
        FrameColours::SelfReads => {
            let t = f.self_reads as f64 / f.total_reads.max(1) as f64;
            c32([0.3 + 0.7 * t, 0.35 + 0.2 * (1.0 - t), 0.9 - 0.7 * t])
        }
    }
}

fn frame_tooltip(f: &Frame, l: &Loaded, names: &work::Names) -> Vec<String> {
    let loc = l.symbols.locate(f.function);
    let name = names.get(f.function).unwrap_or(&loc.function).to_string();
    let invocations = l.model.call_tree.frames.iter().filter(|g| g.function == f.function).count();
    let share = 100.0 * f.total_reads as f64 / l.model.columns.max(1) as f64;
    vec![
        name,
        format!("{} ({})", loc.file_line(), loc.module.as_deref().unwrap_or("?")),
        format!("reads  {} total, {} self ({share:.1}% of the trace)", f.total_reads, f.self_reads),
        format!("writes {} total, {} self", f.total_writes, f.self_writes),
        format!("columns {}..{}, {} frames of it stored", f.first_column, f.end_column, invocations),
    ]
}

pub(crate) fn inspection_tooltip(i: &Inspection) -> Vec<String> {
    let mut lines = Vec::new();
    match &i.access {
        Some(a) => {
            lines.push(format!("{} at {}", a.function, a.file_line));
            lines.push(format!("column {}: {} of {} bytes at {:#x}", i.column, a.kind, a.size, a.address));
            let module = a.module.as_ref().and_then(|m| m.file_name()).map(|n| n.to_string_lossy().into_owned());
            match (module, a.module_address) {
                (Some(m), Some(addr)) => lines.push(format!("pc {:#x} ({m}+{addr:#x}), thread {}", a.pc, a.thread)),
                _ => lines.push(format!("pc {:#x}, thread {}", a.pc, a.thread)),
            }
            for f in &a.inlined {
                let file = f.file.as_deref().map(decoder::symbols::short_path).unwrap_or("??");
                lines.push(format!(
                    "  inlined {} at {file}:{}",
                    f.function,
                    f.line.map_or("??".into(), |l| l.to_string())
                ));
            }
        }
        None => lines.push(format!("column {}", i.column)),
    }
    if let Some(line) = &i.line {
        lines.push(format!(
            "line {:#x} (row {}): {} bytes read, {} distinct, age {}{}",
            line.address,
            line.row,
            line.bytes_read,
            line.distinct_bytes,
            line.age,
            if line.touched_here { ", read here" } else { "" }
        ));
    }
    if let Some(b) = &i.allocation {
        let freed = b.free_column.map_or("end".to_string(), |c| c.to_string());
        lines.push(format!("block: {} of {} bytes at {:#x}", b.kind, b.size, b.address));
        lines.push(format!("  from {}, live {}..{freed}", b.allocated_by, b.alloc_column));
    }
    if !i.frames.is_empty() {
        let stack: Vec<&str> = i.frames.iter().map(|f| f.function.as_str()).collect();
        lines.push(format!("stack: {}", stack.join(" > ")));
    }
    lines
}

#[allow(clippy::too_many_arguments)]
fn loading_view(
    painter: &egui::Painter,
    full: egui::Rect,
    state: &mut UiState,
    session: &Session,
    work: &mut Work,
    report: &mut UiReport,
    ppp: f32,
) {
    if let Some(e) = &session.error {
        painter.text(
            full.center(),
            egui::Align2::CENTER_CENTER,
            format!("cannot show this trace: {e}"),
            egui::FontId::proportional(15.0),
            egui::Color32::from_rgb(255, 140, 120),
        );
        return;
    }
    let Some(loading) = &session.loading else { return };
    let progress = session.progress().unwrap_or(0.0);
    let bar = egui::Rect::from_min_size(
        full.min + egui::vec2(GUTTER_W, 8.0),
        egui::vec2((full.width() - GUTTER_W - 8.0) * progress as f32, 6.0),
    );
    painter.rect_filled(bar, 2.0, egui::Color32::from_rgb(90, 140, 255));
    painter.text(
        full.min + egui::vec2(8.0, 4.0),
        egui::Align2::LEFT_TOP,
        format!("decoding {:.0}%", 100.0 * progress),
        egui::FontId::proportional(12.0),
        egui::Color32::LIGHT_GRAY,
    );
    let area = egui::Rect::from_min_max(full.min + egui::vec2(GUTTER_W, 24.0), full.max);
    report.picture |= state.preview.show(painter, area, Some(loading), work, state.colour_by, ppp);
    // No repaint request: while decoding, frames come at the pace
    // `pace_frames` sets, slow enough to leave the cores to the decoder.
}

//! Allocations mode (`linetrace view --allocations FILE`): the heap as a
//! dense time x address picture ([`decoder::heap_raster`]), drawn in the
//! background at the window's size, with hover telling which block, from
//! which function, how big and how long it lived.
//!
//! - The wheel zooms the allocation events at the pointer, drag pans,
//!   Ctrl+wheel zooms the addresses, Shift+wheel or a vertical drag scrolls
//!   them, `0` shows all. The address axis stacks every region (unmapped
//!   space collapsed); the context strip at the right is the whole of it
//!   and of the run, with the part in view framed: a click or drag there
//!   moves the view's addresses (a scroll bar over the address space).
//! - The toolbar picks what colours say (function, thread, size class,
//!   lifetime), the cushion profile and the anti-aliasing exponent.
//! - The side panel is `report --allocations`: totals, peak, leaks, waste,
//!   size classes.
//! - Correlated views ([`decoder::heap_bins`]): the toolbar splits the
//!   picture into one view per size class, stacked on one time axis or
//!   side by side; a click drops a cushion cursor at that time across all
//!   of them, a right click removes the nearest, a slider sets their
//!   opacity.
//! - Shift+drag selects a stretch of the run: the side panel analyses the
//!   blocks allocated in it (Esc: the whole run again).
//! - Ctrl+click on a block opens the source at its allocating line, the
//!   blocks and bytes allocated by each line in the gutter; `L` opens it in
//!   the access view ([`crate::linked`]).

use std::sync::Arc;

use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};
use decoder::heap::HeapReport;
use decoder::heap_bins::{BinCell, BinLayout, CURSOR_RADIUS_PX, cell_at, cursor_opacity, render_bins};
use decoder::heap_raster::{Clock, Cushion, HeapColourBy, HeapPicture, HeapView, TimeAxis, address_rows, render_scene};
use decoder::heap_scene::HeapScenes;

use crate::ViewerOptions;
use crate::jobs::Job;
use crate::pacing::Activity;
use crate::session::{Loaded, Session};
use crate::ui::UiReport;
use crate::view::{PaintedView, ViewCommand, Viewport};
use crate::work::SourceText;

/// Units of the address axis in the [`Viewport`]'s rows: a row range
/// `[a, b)` shows fractions `a / ROWS .. b / ROWS` of the layout, and the
/// view zooms down to [`crate::view::MIN_ROWS`] of them.
const ROWS: f64 = 100_000.0;
/// Width of the context strip, in points.
const CONTEXT_WIDTH: f32 = 56.0;

/// What the picture depends on (the context strip's: all of the run and
/// of the address axis).
#[derive(Clone, Debug, PartialEq)]
struct PictureKey {
    generation: u32,
    size: (u32, u32),
    range: Option<(f64, f64)>,
    rows: Option<(f64, f64)>,
    clock: Clock,
    colour_by: HeapColourBy,
    cushion: Cushion,
    alpha: f64,
    bins: Option<BinLayout>,
}

/// The allocations mode's state.
#[derive(Resource)]
pub struct HeapMode {
    session: Session,
    /// The part of the time axis in view (x) and the whole run: a
    /// [`Viewport`] whose columns are events or nanoseconds.
    pub view: Viewport,
    clock: Clock,
    /// The axis the view is of (its clock may have fallen back to events).
    axis: Option<TimeAxis>,
    /// The model generation and clock asked for that `axis` is of.
    axis_of: Option<(u32, Clock)>,
    colour_by: HeapColourBy,
    cushion: Cushion,
    alpha: f64,
    picture: Job<PictureKey, Arc<DrawnHeap>>,
    context: Job<PictureKey, Arc<DrawnHeap>>,
    /// What every picture of the loaded model (its generation) draws
    /// from, prepared once per clock and size class by the first picture
    /// that needs it.
    scenes: Option<(u32, Arc<HeapScenes>)>,
    analysis: Job<u32, Arc<HeapReport>>,
    texture: Option<(egui::TextureHandle, PictureKey)>,
    context_texture: Option<(egui::TextureHandle, PictureKey)>,
    /// Addresses to show once the picture's size is known (`--addresses`).
    addresses: Option<(u64, u64)>,
    /// `--addresses` that no heap block lies in (said in the status line
    /// instead of silently showing everything).
    addresses_missed: Option<(u64, u64)>,
    forced_hover: Option<(u64, Option<usize>)>,
    ignore_pointer: bool,
    /// One view per size class, and how they are laid out (`None`: one
    /// view of every block).
    bins: Option<BinLayout>,
    /// Cushion cursors, at positions of the time axis (they stay at their
    /// time through zooms and pans).
    cursors: Vec<f64>,
    /// Their opacity at the centre.
    cursor_strength: f64,
    /// A part of the time axis selected (Shift+drag): the side panel
    /// analyses the blocks allocated in it.
    selection: Option<(f64, f64)>,
    /// Whether the selection asked for on the command line is still to be
    /// checked against the trace's events.
    check_selection: bool,
    /// Where a Shift+drag selecting began.
    selecting_from: Option<f64>,
    window_analysis: Job<(u32, Clock, (f64, f64)), Arc<HeapReport>>,
    /// The source file and line shown (Ctrl+click on a block).
    source: Option<(String, u32)>,
    source_text: Job<(u32, String, u32), Arc<SourceText>>,
    /// Screenshots: open the hovered block's source.
    open_hovered_source: bool,
    /// A message for the status line (a linked view that could not open).
    notice: Option<String>,
    /// While decoding: the picture of the heap blocks so far, by the
    /// serial of their copy ([`decoder::pyramid::HeapSoFar`]) and size.
    preview_picture: Job<(u32, (u32, u32)), Arc<DrawnHeap>>,
    preview_texture: Option<(egui::TextureHandle, u32)>,
    /// The view the picture was last painted at.
    painted_view: PaintedView,
}

/// Heap pictures (one, or one per size class) and their pixels as an
/// egui image, made on the drawing job's thread: converted on the UI
/// thread, a 1920x1080 picture held up the frame it arrived in (pan
/// frames' p99).
struct DrawnHeap {
    /// The views and where they are in the image: one at (0, 0), or the
    /// size-class bins.
    cells: Vec<BinCell>,
    image: Arc<egui::ColorImage>,
    /// How long it took to draw.
    took: std::time::Duration,
    /// CPU time of the thread that drew it: what a zoom step's frame
    /// expects the next picture to cost ([`Job::wait_for_zoom_step`]).
    cpu: std::time::Duration,
}

impl DrawnHeap {
    fn new(image: &decoder::raster::Image, cells: Vec<BinCell>) -> DrawnHeap {
        let size = [image.width as usize, image.height as usize];
        let image = Arc::new(egui::ColorImage::from_rgba_unmultiplied(size, &image.rgba));
        DrawnHeap { cells, image, took: std::time::Duration::ZERO, cpu: std::time::Duration::ZERO }
    }

    fn single(picture: HeapPicture) -> DrawnHeap {
        let cell = BinCell { left: 0, top: 0, picture };
        DrawnHeap::new(&cell.picture.image.clone(), vec![cell])
    }
}

/// The allocations mode's resources and systems.
pub struct HeapPlugin {
    /// How it was opened.
    pub options: ViewerOptions,
    /// The trace, decoding.
    pub session: crate::session::Opened,
}

impl Plugin for HeapPlugin {
    fn build(&self, app: &mut App) {
        let o = &self.options;
        app.insert_resource(HeapMode {
            session: {
                let mut session = self.session.take();
                session.want_heap_preview();
                session
            },
            view: Viewport::default(),
            clock: Clock::Events,
            axis: None,
            axis_of: None,
            colour_by: HeapColourBy::Function,
            cushion: Cushion::Parabolic,
            alpha: 0.6,
            picture: Job::picture(),
            context: Job::default(),
            scenes: None,
            analysis: Job::default(),
            texture: None,
            context_texture: None,
            addresses: o.addresses,
            addresses_missed: None,
            forced_hover: o.screenshot.as_ref().and_then(|s| s.hover),
            ignore_pointer: o.screenshot.is_some() || o.bench.is_some(),
            bins: o.bins,
            cursors: o.cursors.clone(),
            cursor_strength: o.cursor_strength,
            selection: o.selection.map(|(a, b)| (a as f64, b as f64)),
            check_selection: o.selection.is_some(),
            selecting_from: None,
            window_analysis: Job::default(),
            source: None,
            source_text: Job::default(),
            open_hovered_source: o.screenshot.as_ref().is_some_and(|s| s.open_source),
            notice: None,
            preview_picture: Job::picture(),
            preview_texture: None,
            painted_view: PaintedView::default(),
        })
        .init_resource::<UiReport>()
        .add_message::<ViewCommand>()
        .add_systems(bevy_egui::EguiPrimaryContextPass, heap_ui)
        .add_systems(Update, apply_view_commands.in_set(crate::ViewCommandsApplied));
    }
}

/// The frame's [`ViewCommand`]s from outside the UI (a script: the bench),
/// before the UI pass that shows them.
fn apply_view_commands(mut mode: ResMut<HeapMode>, mut commands: MessageReader<ViewCommand>) {
    for command in commands.read() {
        crate::view::apply(&mut mode.view, *command);
    }
}

fn heap_ui(
    mut contexts: EguiContexts,
    mut mode: ResMut<HeapMode>,
    mut report: ResMut<UiReport>,
    (mut activity, mut input_shown): (ResMut<Activity>, ResMut<crate::pacing::InputShown>),
) -> Result {
    let stopwatch = crate::jobs::Stopwatch::start();
    let ctx = contexts.ctx_mut()?.clone();
    let m = &mut *mode;
    let HeapMode { session, view, .. } = m;
    session.poll(view);
    m.picture.poll();
    m.context.poll();
    m.analysis.poll();
    m.window_analysis.poll();
    m.source_text.poll();
    m.preview_picture.poll();
    *report = UiReport { loaded: m.session.loaded.is_some(), ..UiReport::default() };
    let loaded = m.session.loaded.clone();
    if let Some(l) = &loaded {
        // A new model or clock: the view is of another axis.
        if m.axis_of != Some((l.generation, m.clock)) {
            let axis = TimeAxis::new(&l.model.allocations, l.model.total.allocations, m.clock);
            m.view = Viewport::whole(axis.extent, ROWS);
            m.axis = Some(axis);
            m.axis_of = Some((l.generation, m.clock));
        }
        // The selection asked for is of events (the axis it opens on).
        if std::mem::take(&mut m.check_selection)
            && let Some((a, b)) = m.selection
        {
            let events = l.model.total.allocations;
            let asked = (a as u64, b as u64);
            m.selection = match crate::view::within_trace("the selection", asked, events, "allocation events") {
                Ok((a, b)) => Some((a as f64, b as f64)),
                Err(why) => {
                    m.notice = Some(why);
                    None
                }
            };
        }
    }
    let mut root =
        egui::Ui::new(ctx.clone(), "linetrace-heap".into(), egui::UiBuilder::new().max_rect(ctx.content_rect()));
    egui::Panel::top("toolbar").show(&mut root, |ui| toolbar(ui, m));
    // The status line's place; its text is written once the view is known.
    let status_line = egui::Panel::bottom("status").show(&mut root, crate::paint::reserve_status_line).inner;
    egui::Panel::right("side").resizable(true).default_size(360.0).show(&mut root, |ui| {
        egui::ScrollArea::vertical().show(ui, |ui| report.stats_shown = side_panel(ui, m, &mut report));
    });
    if let (Some((file, line)), Some(l)) = (m.source.clone(), loaded.as_ref()) {
        let (model, symbols) = (l.model.clone(), l.symbols.clone());
        let wanted = file.clone();
        m.source_text.want((l.generation, file.clone(), line), move |_| {
            Some(Arc::new(allocation_source(&model, &symbols, &wanted, line)))
        });
        egui::Panel::bottom("source").resizable(true).default_size(220.0).show(&mut root, |ui| {
            match m.source_text.latest().filter(|(k, _)| k.1 == file && k.2 == line) {
                Some((_, src)) => {
                    report.source = Some((src.path.clone(), src.line, src.lines.is_ok()));
                    if crate::ui::source_text(ui, src) {
                        m.source = None;
                    }
                }
                None => {
                    crate::paint::working(ui);
                }
            }
        });
    }
    let painted = crate::paint::central_panel(&ctx)
        .show(&mut root, |ui| main_view(ui, &ctx, m, loaded.as_ref(), &mut report))
        .inner;
    // The view moved (by the frame's input, or by commands applied before
    // the UI pass) and this frame shows it: egui's next frame would show
    // nothing new (see `InputShown`).
    input_shown.0 = painted && m.painted_view.painted_at(m.view);
    let text = status(m, loaded.as_ref());
    crate::paint::status_line(&ctx, status_line, &text);
    report.status = text;
    // The analysis for the side panel once the first picture is there: the
    // jobs share the cores with the renderer, and the picture is what the
    // user waits for.
    if let Some(l) = loaded.as_ref().filter(|_| report.picture) {
        let (model, symbols) = (l.model.clone(), l.symbols.clone());
        m.analysis.want(l.generation, move |_| Some(Arc::new(decoder::heap::analyse(&model, &symbols))));
    }
    if let (Some(l), Some(selection), Some(axis)) = (loaded.as_ref(), m.selection, m.axis) {
        let (model, symbols) = (l.model.clone(), l.symbols.clone());
        m.window_analysis.want((l.generation, axis.clock, selection), move |_| {
            let (records, events) = (&model.allocations, model.total.allocations);
            Some(Arc::new(decoder::heap::analyse_window(records, events, &symbols, &axis, selection)))
        });
    }
    if let Some(e) = &m.session.error {
        report.error = Some(format!("the trace could not be decoded: {e}"));
    }
    let hover_ready =
        (m.forced_hover.is_none() || !report.tooltip.is_empty()) && (!m.open_hovered_source || report.source.is_some());
    report.complete = report.loaded && report.sharp && report.stats_shown && hover_ready;
    *activity = Activity::of(
        m.session.loading.is_some(),
        m.picture.busy()
            || m.context.busy()
            || m.analysis.busy()
            || m.window_analysis.busy()
            || m.preview_picture.busy(),
    );
    report.ui_cpu_ms = stopwatch.cpu().as_secs_f64() * 1e3;
    Ok(())
}

fn toolbar(ui: &mut egui::Ui, m: &mut HeapMode) {
    ui.horizontal_wrapped(|ui| {
        ui.strong("linetrace — allocations");
        ui.separator();
        if ui.button("Fit all (0)").clicked() {
            m.view.reset();
        }
        ui.label("x:");
        ui.selectable_value(&mut m.clock, Clock::Events, "allocation events");
        ui.selectable_value(&mut m.clock, Clock::Wall, "wall clock");
        ui.label("colour:");
        egui::ComboBox::from_id_salt("heap-colour").selected_text(colour_name(m.colour_by)).show_ui(ui, |ui| {
            for c in [HeapColourBy::Function, HeapColourBy::Thread, HeapColourBy::SizeClass, HeapColourBy::Lifetime] {
                ui.selectable_value(&mut m.colour_by, c, colour_name(c));
            }
        });
        ui.label("cushion:");
        egui::ComboBox::from_id_salt("cushion").selected_text(format!("{:?}", m.cushion).to_lowercase()).show_ui(
            ui,
            |ui| {
                for c in [Cushion::Parabolic, Cushion::Plateau, Cushion::None] {
                    ui.selectable_value(&mut m.cushion, c, format!("{c:?}").to_lowercase());
                }
            },
        );
        ui.add(egui::Slider::new(&mut m.alpha, 0.05..=2.0).logarithmic(true).text("alpha"));
        ui.separator();
        ui.label("size classes:");
        egui::ComboBox::from_id_salt("bins").selected_text(bins_name(m.bins)).show_ui(ui, |ui| {
            for b in [None, Some(BinLayout::Time), Some(BinLayout::Address)] {
                ui.selectable_value(&mut m.bins, b, bins_name(b));
            }
        });
        ui.separator();
        ui.label(format!("cursors: {}", m.cursors.len()))
            .on_hover_text("click the picture to drop a cushion cursor, right-click to remove the nearest");
        if ui.add_enabled(!m.cursors.is_empty(), egui::Button::new("clear")).clicked() {
            m.cursors.clear();
        }
        ui.add(egui::Slider::new(&mut m.cursor_strength, 0.1..=1.0).text("opacity"));
    });
}

fn bins_name(b: Option<BinLayout>) -> &'static str {
    match b {
        None => "together",
        Some(BinLayout::Time) => "one per class, stacked (time aligned)",
        Some(BinLayout::Address) => "one per class, side by side (address aligned)",
    }
}

fn colour_name(c: HeapColourBy) -> &'static str {
    match c {
        HeapColourBy::Function => "allocating function",
        HeapColourBy::Thread => "thread",
        HeapColourBy::SizeClass => "size class",
        HeapColourBy::Lifetime => "lifetime",
    }
}

fn status(m: &HeapMode, loaded: Option<&Loaded>) -> String {
    let file = m.session.path.display().to_string();
    if let Some(e) = &m.session.error {
        return format!("{file}: cannot show this trace: {e}");
    }
    let Some(l) = loaded else {
        return format!("{file}: decoding… {:.0}%", 100.0 * m.session.progress().unwrap_or(0.0));
    };
    let axis = match m.axis {
        Some(a) if a.clock == Clock::Wall => {
            format!("{:.3} s, view {:.6}..{:.6} s", a.extent / 1e9, m.view.columns.0 / 1e9, m.view.columns.1 / 1e9)
        }
        _ => format!(
            "{} allocation events, view {:.0}..{:.0}",
            l.model.total.allocations, m.view.columns.0, m.view.columns.1
        ),
    };
    let fallback = if m.clock == Clock::Wall && m.axis.is_some_and(|a| a.clock != Clock::Wall) {
        "  ·  the calls were not timed: x counts events"
    } else {
        ""
    };
    let shown =
        m.picture.latest().filter(|_| m.bins.is_none()).and_then(|(_, p)| p.cells[0].picture.visible_addresses());
    let addresses = match (m.addresses_missed, shown) {
        (Some((lo, hi)), _) => format!("  ·  no heap block lies in {lo:#x}..{hi:#x}: showing every address"),
        (None, Some((lo, hi))) if m.view.rows != (0.0, ROWS) => format!("  ·  addresses {lo:#x}..{hi:#x}"),
        _ => String::new(),
    };
    let notice = m.notice.as_ref().map_or(String::new(), |n| format!("  ·  {n}"));
    // A cut trace shows fewer blocks than the run had: say so.
    let note: String = l.notes().iter().map(|n| format!("  ·  {n}")).collect();
    format!("{file}  ·  {}  ·  {axis}{addresses}{fallback}{note}{notice}", l.model.metadata.argv.join(" "))
}

/// The context strip: the whole run and address axis, the view's part
/// framed; a click or drag centres the view's addresses there.
fn context_strip(
    ui: &mut egui::Ui,
    painter: &egui::Painter,
    strip: egui::Rect,
    m: &mut HeapMode,
    report: &mut UiReport,
) {
    painter.rect_filled(strip, 0.0, egui::Color32::from_gray(12));
    if let Some((tex, _)) = &m.context_texture {
        let full = egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0));
        painter.image(tex.id(), strip, full, egui::Color32::WHITE);
    }
    let y = |rows: f64| strip.top() + (rows / ROWS) as f32 * strip.height();
    let x = |column: f64| strip.left() + (column / m.view.total_columns) as f32 * strip.width();
    let frame = egui::Rect::from_min_max(
        egui::pos2(x(m.view.columns.0), y(m.view.rows.0)),
        egui::pos2(x(m.view.columns.1), y(m.view.rows.1).max(y(m.view.rows.0) + 2.0)),
    );
    painter.rect_filled(frame, 0.0, egui::Color32::from_white_alpha(36));
    painter.rect_stroke(frame, 0.0, egui::Stroke::new(1.0, egui::Color32::WHITE), egui::StrokeKind::Inside);
    report.context = crate::paint::rect4(strip, ui.ctx().pixels_per_point());
    let response = ui.interact(strip, ui.id().with("heap-context"), egui::Sense::click_and_drag());
    if let Some(p) = response.interact_pointer_pos().filter(|_| response.clicked() || response.dragged()) {
        let centre = f64::from((p.y - strip.top()) / strip.height()) * ROWS;
        let half = m.view.height() / 2.0;
        m.view.scroll_rows((centre - half - m.view.rows.0) / m.view.height());
    }
}

/// The `report --allocations` numbers; true once they are shown.
fn side_panel(ui: &mut egui::Ui, m: &mut HeapMode, report: &mut UiReport) -> bool {
    report.selection = m.selection;
    let h = match m.selection {
        Some((a, b)) => {
            let unit = |t: f64| match m.axis.map(|a| a.clock) {
                Some(Clock::Wall) => format!("{:.6} s", t / 1e9),
                _ => format!("event {t:.0}"),
            };
            ui.heading("Selection");
            ui.label(format!("blocks allocated from {} to {}", unit(a), unit(b)));
            if ui.button("whole run (Esc)").clicked() || ui.input(|i| i.key_pressed(egui::Key::Escape)) {
                m.selection = None;
            }
            let key = m.window_analysis.latest().map(|(k, _)| k.2);
            match m.window_analysis.latest().filter(|_| key == m.selection) {
                Some((_, h)) => h.clone(),
                None => {
                    crate::paint::working(ui);
                    return false;
                }
            }
        }
        None => {
            let Some((_, h)) = m.analysis.latest() else {
                crate::paint::working(ui);
                return false;
            };
            ui.heading("Heap");
            h.clone()
        }
    };
    let h = &*h;
    report.stats = Vec::new();
    egui::Grid::new("heap-totals").striped(true).show(ui, |ui| {
        for (k, v) in [
            ("blocks", format!("{} ({} bytes)", h.blocks, h.bytes)),
            ("freed", h.frees.to_string()),
            ("reallocs", format!("{} in place, {} moved", h.reallocs_in_place, h.reallocs_moved)),
            ("peak", format!("{} bytes in {} blocks at event {}", h.peak.bytes, h.peak.blocks, h.peak.event)),
            ("at end", format!("{} bytes in {} blocks", h.at_end.bytes, h.at_end.blocks)),
            ("waste", format!("{} bytes over {} blocks", h.waste, h.usable_known)),
            ("mappings", format!("{} ({} bytes)", h.mappings, h.mapped_bytes)),
        ] {
            report.stats.push(format!("{k}: {v}"));
            ui.label(k);
            ui.label(v);
            ui.end_row();
        }
    });
    ui.separator();
    ui.strong("size classes");
    egui::Grid::new("classes").striped(true).show(ui, |ui| {
        for c in &h.size_classes {
            ui.label(c.class);
            ui.label(format!("{} blocks, {} bytes, {} waste", c.blocks, c.bytes, c.waste));
            ui.end_row();
        }
    });
    ui.separator();
    ui.strong("live at the end, by allocating function");
    for r in h.leaks.iter().take(15) {
        ui.label(format!("{:>8} B {:>5}  {} ({})", r.bytes, r.blocks, r.function, r.line));
    }
    ui.separator();
    ui.strong("most bytes allocated");
    for r in h.top_by_bytes.iter().take(15) {
        ui.label(format!("{:>10} B {:>6}  {}", r.bytes, r.blocks, r.function));
    }
    for c in &h.custom {
        ui.separator();
        ui.strong(format!("custom allocator {}", c.allocator));
        ui.label(format!("{} blocks ({} bytes), {} released", c.blocks, c.bytes, c.freed));
        ui.label(format!("peak {} bytes in {} blocks at event {}", c.peak.bytes, c.peak.blocks, c.peak.event));
        let sizes: Vec<String> = c.sizes.iter().map(|(size, n)| format!("{size} B x{n}")).collect();
        ui.label(format!("sizes: {}", sizes.join(", ")));
    }
    true
}

/// The picture of `k` (the main view's or the context strip's), drawn
/// from the run's `scenes`.
fn draw_heap(
    model: &decoder::model::Model,
    symbols: &decoder::symbols::Symbolizer,
    scenes: &HeapScenes,
    k: &PictureKey,
) -> Option<Result<Arc<DrawnHeap>, String>> {
    let stopwatch = crate::jobs::Stopwatch::start();
    let view = HeapView {
        width: k.size.0,
        height: k.size.1,
        alpha: k.alpha,
        colour_by: k.colour_by,
        cushion: k.cushion,
        clock: k.clock,
        range: k.range,
        rows: k.rows,
        class: None,
    };
    let name = |pc: u64| symbols.locate(pc).function.clone();
    let (records, events) = (&model.allocations, model.total.allocations);
    let mut drawn = match k.bins {
        None => DrawnHeap::single(render_scene(&scenes.get(records, events, k.clock, None), &view, &name)),
        Some(layout) => match render_bins(scenes, records, events, &view, layout, &name) {
            Ok(bins) => DrawnHeap::new(&bins.image, bins.cells),
            Err(e) => return Some(Err(e.to_string())),
        },
    };
    (drawn.took, drawn.cpu) = (stopwatch.wall(), stopwatch.cpu());
    Some(Ok(Arc::new(drawn)))
}

/// The picture, the context strip and their input. The input over the
/// picture moves the view before anything is painted. Whether the picture
/// was painted (false: no decoded trace, or no heap block in it).
fn main_view(
    ui: &mut egui::Ui,
    ctx: &egui::Context,
    m: &mut HeapMode,
    loaded: Option<&Loaded>,
    report: &mut UiReport,
) -> bool {
    let whole = ui.available_rect_before_wrap();
    let painter = ui.painter_at(whole);
    let Some(l) = loaded else {
        preview(ctx, &painter, whole, m, report);
        return false;
    };
    if !l.model.allocations.iter().any(decoder::heap::is_heap_block) {
        crate::paint::centred_message(&painter, whole, "this trace has no heap blocks", 15.0);
        // Final: there is no picture to wait for (a screenshot waited for
        // one until it gave up).
        (report.sharp, report.picture) = (true, true);
        if let Some(forced) = m.forced_hover {
            report.error = Some(crate::unanswerable_hover(forced, "this trace has no heap blocks to hover"));
        }
        return false;
    }
    let (rect, strip) = {
        let split = whole.right() - CONTEXT_WIDTH;
        (
            egui::Rect::from_min_max(whole.min, egui::pos2(split - 4.0, whole.bottom())),
            egui::Rect::from_min_max(egui::pos2(split, whole.top()), whole.max),
        )
    };
    let ppp = ctx.pixels_per_point();
    let pixels =
        |r: egui::Rect| ((r.width() * ppp).round().max(16.0) as u32, (r.height() * ppp).round().max(64.0) as u32);
    let size = pixels(rect);
    // Input first, so the input's own frame shows where it went: the wheel
    // zooms events at the pointer, drag pans, Ctrl+wheel zooms addresses,
    // Shift+wheel scrolls them.
    let response = ui.interact(rect, ui.id().with("heap"), egui::Sense::click_and_drag());
    let pointer = ctx.pointer_hover_pos().filter(|_| !m.ignore_pointer);
    // Shift+drag selects a part of the time axis for the side panel;
    // any other drag pans.
    let t_at = |view: &crate::view::Viewport, x: f32| view.column_at(f64::from((x - rect.left()) / rect.width()));
    if response.drag_started() && ui.input(|i| i.modifiers.shift) {
        m.selecting_from = ui.input(|i| i.pointer.press_origin()).map(|p| t_at(&m.view, p.x));
    }
    match (m.selecting_from, response.interact_pointer_pos()) {
        (Some(from), Some(p)) if response.dragged() => {
            let to = t_at(&m.view, p.x);
            m.selection = Some((from.min(to).max(0.0), from.max(to).min(m.view.total_columns)));
        }
        _ => {
            for command in crate::paint::navigate(ui, &response, egui::Rect::NOTHING, rect, pointer) {
                crate::view::apply(&mut m.view, command);
            }
        }
    }
    if response.drag_stopped() {
        m.selecting_from = None;
    }
    if ctx.input(|i| i.key_pressed(egui::Key::Num0)) && !ctx.egui_wants_keyboard_input() {
        m.view.reset();
    }
    if let Some((lo, hi)) = m.addresses.take() {
        match address_rows(&l.model.allocations, size.1, lo, hi) {
            Some((a, b)) => m.view.rows = (a * ROWS, b * ROWS),
            None => m.addresses_missed = Some((lo, hi)),
        }
    }
    let clock = m.axis.map_or(Clock::Events, |a| a.clock);
    let key = PictureKey {
        generation: l.generation,
        size,
        range: Some(m.view.columns),
        rows: Some((m.view.rows.0 / ROWS, m.view.rows.1 / ROWS)),
        clock,
        colour_by: m.colour_by,
        cushion: m.cushion,
        alpha: m.alpha,
        bins: m.bins,
    };
    // The context strip: the whole run and address axis, at the main
    // picture's height so its rows line up with the layout's fractions.
    let context_key =
        PictureKey { size: (pixels(strip).0, size.1), range: None, rows: None, bins: None, ..key.clone() };
    // The context strip once the main view has a picture: drawing it costs
    // nearly as much (the work is per block, not per pixel), and on two
    // cores shared with the renderer it held the first picture back.
    let jobs = [(&mut m.picture, key.clone()), (&mut m.context, context_key.clone())];
    let have_picture = m.texture.is_some();
    let scenes = match &m.scenes {
        Some((generation, scenes)) if *generation == l.generation => scenes.clone(),
        _ => {
            let scenes = Arc::<HeapScenes>::default();
            m.scenes = Some((l.generation, scenes.clone()));
            scenes
        }
    };
    let threads = m.painted_view.picture_threads(&m.view);
    for (job, k) in jobs.into_iter().take(if have_picture { 2 } else { 1 }) {
        let (model, symbols, scenes) = (l.model.clone(), l.symbols.clone(), scenes.clone());
        job.want_fallible(k.clone(), move |_| threads.draw(|| draw_heap(&model, &symbols, &scenes, &k)));
    }
    if m.painted_view.zoom_step_to(&m.view, ui.input(|i| i.pointer.any_down())) {
        let last_cost = m.picture.latest().map(|(_, d)| d.cpu);
        m.picture.wait_for_zoom_step(&key, last_cost, std::time::Instant::now());
    }
    for (job, texture, name) in
        [(&m.picture, &mut m.texture, "heap"), (&m.context, &mut m.context_texture, "heap-context")]
    {
        if let Some((k, p)) = job.latest()
            && texture.as_ref().is_none_or(|(_, have)| have != k)
        {
            *texture = Some((ctx.load_texture(name, p.image.clone(), egui::TextureOptions::NEAREST), k.clone()));
        }
    }
    stand_in_preview(ctx, &painter, rect, m, report);
    if let Some((tex, k)) = &m.texture {
        // An older picture stretched to where its part of the axes is now.
        let x = |e: f64| rect.left() + ((e - m.view.columns.0) / m.view.width()) as f32 * rect.width();
        let y = |f: f64| rect.top() + ((f * ROWS - m.view.rows.0) / m.view.height()) as f32 * rect.height();
        let (columns, rows) = (k.range.unwrap_or(m.view.columns), k.rows.unwrap_or((0.0, 1.0)));
        let placed = egui::Rect::from_x_y_ranges(x(columns.0)..=x(columns.1), y(rows.0)..=y(rows.1));
        let full = egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0));
        painter.with_clip_rect(rect).image(tex.id(), placed, full, egui::Color32::WHITE);
        report.sharp = *k == key;
        report.picture = true;
    }
    if let Some((_, drawn)) = m.picture.latest() {
        report.render_ms = drawn.took.as_secs_f64() * 1e3;
    }
    if let Some((k, drawn)) = m.picture.latest().filter(|(k, _)| k.bins == m.bins) {
        cushion_cursors(&painter, rect, ppp, m, k, drawn);
        for cell in drawn.cells.iter().filter(|_| *k == key) {
            if let Some(label) = cell.class().map(|c| c.name()) {
                let at = rect.min + egui::vec2(cell.left as f32, cell.top as f32) / ppp + egui::vec2(4.0, 2.0);
                painter.text(at, egui::Align2::LEFT_TOP, label, egui::FontId::monospace(11.0), egui::Color32::WHITE);
            }
        }
    }
    // A picture that cannot be drawn says why (size-class views in a
    // window too small for them) instead of leaving the old one up.
    if let Some((_, why)) = m.picture.failure().filter(|(k, _)| *k == key) {
        painter.rect_filled(rect, 0.0, crate::paint::background());
        crate::paint::centred_message(&painter, rect, why, 14.0);
        // Final for this view: what there is to show is shown.
        (report.sharp, report.picture) = (true, true);
    } else {
        cushion_profile(&painter, rect, m.cushion);
    }
    context_strip(ui, &painter, strip, m, report);
    report.bitmap = crate::paint::rect4(rect, ppp);
    report.columns = m.view.columns;
    report.rows = m.view.rows;

    if let Some((a, b)) = m.selection {
        let x = |t: f64| rect.left() + ((t - m.view.columns.0) / m.view.width()) as f32 * rect.width();
        let band = egui::Rect::from_x_y_ranges(x(a).max(rect.left())..=x(b).min(rect.right()), rect.y_range());
        if band.width() > 0.0 {
            painter.rect_filled(band, 0.0, egui::Color32::from_rgba_unmultiplied(90, 140, 255, 36));
            painter.rect_stroke(
                band,
                0.0,
                egui::Stroke::new(1.0, egui::Color32::from_rgb(120, 160, 255)),
                egui::StrokeKind::Inside,
            );
        }
    }
    // A click drops a cushion cursor at its time, a right click removes
    // the nearest within a cursor's reach.
    let ctrl = ui.input(|i| i.modifiers.command);
    let clicked = response.clicked() && !ctrl;
    if let Some(p) = response.interact_pointer_pos().filter(|_| clicked || response.secondary_clicked()) {
        let t = m.view.column_at(f64::from((p.x - rect.left()) / rect.width()));
        let t = match (m.bins, m.picture.latest()) {
            (Some(BinLayout::Address), Some((_, drawn))) => {
                let x = f64::from((p.x - rect.left()) * ppp);
                let y = f64::from((p.y - rect.top()) * ppp);
                cell_at(&drawn.cells, x, y).map_or(t, |c| c.picture.window.time(x - f64::from(c.left)))
            }
            _ => t,
        };
        if clicked {
            m.cursors.push(t);
        } else {
            let reach = m.view.width() / f64::from(rect.width()) * CURSOR_RADIUS_PX / f64::from(ppp);
            let nearest =
                (0..m.cursors.len()).min_by(|&a, &b| (m.cursors[a] - t).abs().total_cmp(&(m.cursors[b] - t).abs()));
            if let Some(i) = nearest.filter(|&i| (m.cursors[i] - t).abs() <= reach) {
                m.cursors.remove(i);
            }
        }
    }
    report.cursors = m.cursors.clone();
    if let Some((_, drawn)) = m.picture.latest().filter(|(k, _)| *k == key && k.bins.is_none()) {
        report.addresses = drawn.cells[0].picture.visible_addresses();
    }

    // Hover: the block under the pointer.
    let Some((_, drawn)) = m.picture.latest().filter(|(k, _)| *k == key) else { return true };
    if let Some(forced) = m.forced_hover {
        let clock = m.axis.map_or(m.clock, |a| a.clock);
        if let Some(why) = off_the_picture(forced, &m.view, clock, size.1) {
            report.error = Some(crate::unanswerable_hover(forced, &why));
            return true;
        }
    }
    let at = match m.forced_hover {
        Some((event, row)) => {
            let y = row.unwrap_or(0) as f32 / ppp;
            Some(egui::pos2(
                rect.left() + ((event as f64 + 0.5 - m.view.columns.0) / m.view.width()) as f32 * rect.width(),
                rect.top() + y,
            ))
        }
        None => pointer.filter(|p| rect.contains(*p)),
    };
    let Some(p) = at else { return true };
    let (px, py) = (f64::from((p.x - rect.left()) * ppp), f64::from((p.y - rect.top()) * ppp));
    let Some(cell) = cell_at(&drawn.cells, px, py) else {
        if let Some(forced) = m.forced_hover {
            report.error = Some(crate::unanswerable_hover(forced, "no picture is drawn at that point"));
        }
        return true;
    };
    let picture = &cell.picture;
    let x = picture.window.time(px - f64::from(cell.left)).max(0.0);
    let axis = picture.axis;
    let when = match axis.clock {
        Clock::Events => format!("event {x:.0}"),
        Clock::Wall => format!("{:.6} s", x / 1e9),
    };
    let lines = match picture.address_at(py - f64::from(cell.top)) {
        Some(address) => match axis.block_of_class_at(&l.model.allocations, picture.class, address, x) {
            Some(b) => {
                // Ctrl+click: the block's allocating line in the source view.
                if (response.clicked() && ctrl) || std::mem::take(&mut m.open_hovered_source) {
                    let at = l.symbols.locate(b.callsite);
                    if let (Some(file), Some(line)) = (at.file.clone(), at.line) {
                        m.source = Some((file, line));
                    }
                }
                // L: the block's lifetime in the access view (a window of
                // its own).
                if ctx.input(|i| i.key_pressed(egui::Key::L)) && !ctx.egui_wants_keyboard_input() {
                    let block = crate::linked::LinkedBlock::from(b);
                    let paths = &m.session.symbol_paths;
                    m.notice = match crate::linked::access_view_args(&m.session.path, paths, &block, l.model.columns) {
                        Some(args) => crate::linked::open(&args).err(),
                        None => Some("no reads were traced while that block lived: no access view of it".into()),
                    };
                }
                block_lines(b, l, &when)
            }
            None => vec![when.clone(), format!("{address:#x}: free")],
        },
        None => vec![when.clone()],
    };
    painter.line_segment(
        [egui::pos2(p.x, rect.top()), egui::pos2(p.x, rect.bottom())],
        egui::Stroke::new(1.0, egui::Color32::from_white_alpha(80)),
    );
    crate::paint::tooltip(ctx, p, &lines);
    report.tooltip = lines;
    true
}

/// Why a forced hover at (time, pixel row) is outside the picture of
/// `view`, `height` pixels tall, if it is. Decided on the numbers, not by
/// where the point lands: a time just past the end could round into the
/// picture's last pixel column.
fn off_the_picture(
    (time, row): (u64, Option<usize>),
    view: &crate::view::Viewport,
    clock: Clock,
    height: u32,
) -> Option<String> {
    let unit = match clock {
        Clock::Events => "allocation events",
        Clock::Wall => "nanoseconds",
    };
    if time as f64 >= view.total_columns {
        return Some(format!("{time} is past the trace's {:.0} {unit}", view.total_columns));
    }
    row.filter(|&row| row >= height as usize).map(|row| format!("pixel row {row} is below the picture's {height} rows"))
}

/// Until the decoded trace's first picture is in, the preview of its
/// blocks stands in for it, finished if it was still being drawn when the
/// trace was decoded; then it is dropped. Cancelled there, the first
/// picture was the decoded trace's, 225-450 ms after decoding: one
/// session in three of the view bench's allocations view showed its first
/// picture after more than a second (1,087-1,255 ms, against 482-648).
fn stand_in_preview(
    ctx: &egui::Context,
    painter: &egui::Painter,
    rect: egui::Rect,
    m: &mut HeapMode,
    report: &mut UiReport,
) {
    if m.texture.is_some() {
        m.preview_texture = None;
        m.preview_picture.clear();
        return;
    }
    load_preview_texture(ctx, m);
    if let Some((texture, _)) = &m.preview_texture {
        let full = egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0));
        painter.image(texture.id(), rect, full, egui::Color32::WHITE);
        report.picture = true;
    }
}

/// The newest preview picture into its texture, if not yet.
fn load_preview_texture(ctx: &egui::Context, m: &mut HeapMode) {
    if let Some(((serial, _), drawn)) = m.preview_picture.latest()
        && m.preview_texture.as_ref().is_none_or(|(_, have)| have != serial)
    {
        let texture = ctx.load_texture("heap-preview", drawn.image.clone(), egui::TextureOptions::LINEAR);
        m.preview_texture = Some((texture, *serial));
    }
}

/// The preview picture has this many times fewer pixels across and down
/// than the view (stretched to it): a sketch of the blocks so far,
/// replaced when the trace is decoded. Its drawing takes a core from the
/// decoder.
const PREVIEW_DOWNSCALE: u32 = 2;

/// While the trace decodes: the heap blocks decoded so far, once the
/// decoder has copied some (a fifth of a second in, then now and then),
/// on the time axis of the events so far. Coloured by size class when
/// the view colours by function: the functions' names come with the
/// decoded trace.
fn preview(ctx: &egui::Context, painter: &egui::Painter, whole: egui::Rect, m: &mut HeapMode, report: &mut UiReport) {
    let so_far = m.session.loading.as_ref().and_then(|l| l.preview.heap());
    let ppp = ctx.pixels_per_point();
    let size = (
        ((whole.width() * ppp) as u32 / PREVIEW_DOWNSCALE).max(16),
        ((whole.height() * ppp) as u32 / PREVIEW_DOWNSCALE).max(64),
    );
    if let Some(heap) = so_far.filter(|h| m.preview_picture.latest().is_none_or(|(k, _)| k.0 != h.serial))
        && !m.preview_picture.busy()
    {
        let colour_by = match m.colour_by {
            HeapColourBy::Function => HeapColourBy::SizeClass,
            other => other,
        };
        let view = HeapView {
            width: size.0,
            height: size.1,
            alpha: m.alpha,
            colour_by,
            cushion: m.cushion,
            clock: Clock::Events,
            range: None,
            rows: None,
            class: None,
        };
        m.preview_picture.want((heap.serial, size), move |_| {
            let picture = decoder::heap_raster::render_heap(&heap.records, heap.events, &view, &|_| String::new());
            Some(Arc::new(DrawnHeap::single(picture)))
        });
    }
    load_preview_texture(ctx, m);
    if let Some(e) = &m.session.error {
        // A trace that failed to decode half way: its blocks so far are
        // not what it holds.
        m.preview_texture = None;
        crate::paint::centred_message(painter, whole, format!("cannot show this trace: {e}"), 15.0);
        return;
    }
    // Redrawn at the decoding pace (`pace_frames`), not every frame.
    let Some((texture, _)) = &m.preview_texture else {
        crate::paint::centred_message(painter, whole, "decoding…", 15.0);
        return;
    };
    let full = egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0));
    painter.image(texture.id(), whole, full, egui::Color32::WHITE);
    report.picture = true;
    let banner = egui::Rect::from_min_size(whole.min, egui::vec2(whole.width(), 22.0));
    painter.rect_filled(banner, 0.0, crate::paint::background());
    let done = m.session.progress().unwrap_or(1.0);
    let note = format!("decoding {:.0}%: the blocks decoded so far, on their own time axis", 100.0 * done);
    crate::paint::centred_message(painter, banner, note, 13.0);
}

/// The cushion's profile in the bottom right corner of the view (above
/// the occupancy bar): the brightness across a block's height, drawn from
/// [`Cushion::shade`], so the shading reads as shading, not as data.
fn cushion_profile(painter: &egui::Painter, rect: egui::Rect, cushion: Cushion) {
    let size = egui::vec2(64.0, 44.0);
    let min = egui::pos2(rect.right() - size.x - 6.0, rect.bottom() - size.y - 34.0);
    let frame = egui::Rect::from_min_size(min, size);
    painter.rect_filled(frame, 3.0, egui::Color32::from_black_alpha(170));
    // Under the label: brightness 0 at the bottom, 1 at the top.
    let inner = egui::Rect::from_min_max(frame.min + egui::vec2(5.0, 15.0), frame.max - egui::vec2(5.0, 4.0));
    let points: Vec<egui::Pos2> = (0..=32)
        .map(|i| {
            let t = f64::from(i) / 32.0;
            let y = inner.bottom() - (cushion.shade(t) as f32) * inner.height();
            egui::pos2(inner.left() + t as f32 * inner.width(), y)
        })
        .collect();
    painter.add(egui::Shape::line(points, egui::Stroke::new(1.5, egui::Color32::from_rgb(240, 220, 160))));
    painter.text(
        frame.left_top() + egui::vec2(4.0, 2.0),
        egui::Align2::LEFT_TOP,
        "cushion",
        egui::FontId::proportional(9.0),
        egui::Color32::from_gray(200),
    );
}

/// `file` with the blocks and bytes allocated at each of its lines (every
/// distinct calling instruction located once).
fn allocation_source(
    model: &decoder::model::Model,
    symbols: &decoder::symbols::Symbolizer,
    file: &str,
    line: u32,
) -> SourceText {
    let mut by_site: std::collections::HashMap<u64, (u64, u64)> = std::collections::HashMap::new();
    for r in model.allocations.iter().filter(|r| decoder::heap_raster::is_drawn(r)) {
        let e = by_site.entry(r.callsite).or_default();
        e.0 += 1;
        e.1 += r.size;
    }
    let mut counts: std::collections::HashMap<u32, (u64, u64)> = std::collections::HashMap::new();
    for (pc, (blocks, bytes)) in by_site {
        let at = symbols.locate(pc);
        if let (Some(f), Some(n)) = (at.file.as_deref(), at.line)
            && f == file
        {
            let e = counts.entry(n).or_default();
            e.0 += blocks;
            e.1 += bytes;
        }
    }
    SourceText::read(file, line, counts, "blocks, bytes allocated by line", model.metadata.start_unix_ms)
}

/// Paints the cushion cursors over the picture's views (each view maps
/// time to x its own way when side by side), with the profile the
/// headless pictures use ([`cursor_opacity`]).
fn cushion_cursors(
    painter: &egui::Painter,
    rect: egui::Rect,
    ppp: f32,
    m: &HeapMode,
    k: &PictureKey,
    drawn: &DrawnHeap,
) {
    let x_in = |left: f32, width: f32, t: f64| left + ((t - m.view.columns.0) / m.view.width()) as f32 * width;
    for cell in &drawn.cells {
        // Where the view is on screen: side by side, a cell's share of the
        // width; stacked or alone, all of it.
        let (left, width) = match k.bins {
            Some(BinLayout::Address) => (rect.left() + cell.left as f32 / ppp, cell.picture.image.width as f32 / ppp),
            _ => (rect.left(), rect.width()),
        };
        let (top, bottom) = match k.bins {
            Some(BinLayout::Time) => {
                let top = rect.top() + cell.top as f32 / ppp;
                (top, top + cell.picture.image.height as f32 / ppp)
            }
            _ => (rect.top(), rect.bottom()),
        };
        for &t in &m.cursors {
            let centre = x_in(left, width, t);
            let reach = CURSOR_RADIUS_PX as i32;
            for d in -reach..reach {
                let x = centre + (d as f32 + 0.5) / ppp;
                if x < left || x >= left + width {
                    continue;
                }
                let o = cursor_opacity(f64::from(d) + 0.5, m.cursor_strength);
                let colour = egui::Color32::from_rgba_unmultiplied(255, 248, 217, (o * 255.0) as u8);
                painter
                    .with_clip_rect(rect)
                    .line_segment([egui::pos2(x, top), egui::pos2(x, bottom)], egui::Stroke::new(1.0 / ppp, colour));
            }
        }
    }
}

fn block_lines(b: &decoder::allocations::AllocationRecord, l: &Loaded, when: &str) -> Vec<String> {
    let mut lines = decoder::heap::describe_block(b, &l.model, &l.symbols);
    if let Some(class) = lines.last_mut() {
        class.push_str(&format!("; hovered at {when}"));
    }
    lines
}

//! Drawing shared by every mode of the window: a view's bitmap picture,
//! its flamegraph bars, the ruler, tooltips, and turning pointer gestures
//! into [`ViewCommand`]s. Each takes the rectangle to draw in and the
//! pane's own data, so one trace or two draw the same way.

use std::time::{Duration, Instant};

use bevy_egui::egui;
use decoder::calltree::Frame;
use decoder::raster::{ColourBy, MERGED_FRAMES_COLOUR, Palette};

use crate::session::Loading;
use crate::view::{ViewCommand, Viewport};
use crate::work::{self, Names, RenderKey, Work};

/// Height of a flamegraph level (points).
pub const BAR_H: f32 = 17.0;

/// An egui colour from 0..1 RGB.
pub fn c32(c: [f64; 3]) -> egui::Color32 {
    let q = |v: f64| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    egui::Color32::from_rgb(q(c[0]), q(c[1]), q(c[2]))
}

/// The colour behind every view: the bitmap's background, and the colour
/// the renderer clears each frame to (the `ClearColor` the camera is
/// spawned with).
pub fn background() -> egui::Color32 {
    c32(Palette::default().background)
}

/// The central panel of every mode, without a fill of its own: the clear
/// colour ([`background`]) is its background. On a CPU renderer (lavapipe)
/// every layer costs its pixels: a panel fill and a view's background under
/// a picture that covers them made three layers of the whole window, about
/// half of a frame's cost.
pub fn central_panel(ctx: &egui::Context) -> egui::CentralPanel {
    egui::CentralPanel::default()
        .frame(egui::Frame::central_panel(&ctx.global_style()).fill(egui::Color32::TRANSPARENT))
}

/// A rectangle in pixels, as the UI report gives areas.
pub fn rect4(r: egui::Rect, ppp: f32) -> [f32; 4] {
    [r.left() * ppp, r.top() * ppp, r.right() * ppp, r.bottom() * ppp]
}

/// The unit a count is written in: thousands from 10,000, millions,
/// billions; with its suffix.
fn count_unit(n: f64) -> (f64, &'static str) {
    let a = n.abs();
    if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    }
}

/// Short form of a count: 12k, 3.4M.
pub fn short(n: f64) -> String {
    let (unit, suffix) = count_unit(n);
    let decimals = if unit >= 1e6 { 1 } else { 0 };
    format!("{:.*}{suffix}", decimals, n / unit)
}

/// The label of ruler tick `c`, ticks `step` apart (a power of ten times
/// 1, 2 or 5): [`short`]'s units, with the decimals that tell neighbouring
/// ticks apart. With [`short`]'s one decimal, a view of columns
/// 5,000,000..5,004,000 labelled every tick "5.0M".
pub fn tick_label(c: f64, step: f64) -> String {
    let (unit, suffix) = count_unit(c);
    // Digits of the step below the unit: a step of 500 in millions needs
    // 4 (5.0005M).
    let decimals = (unit.log10().round() - step.max(1.0).log10().floor()).max(0.0) as usize;
    format!("{:.*}{suffix}", decimals, c / unit)
}

/// The x of column `c` in `rect` under `view`.
pub fn x_of(view: &Viewport, c: f64, rect: egui::Rect) -> f32 {
    rect.left() + (view.x_of(c) as f32) * rect.width()
}

/// The column at `x` in `rect` under `view`.
pub fn column_at(view: &Viewport, x: f32, rect: egui::Rect) -> f64 {
    view.column_at(f64::from((x - rect.left()) / rect.width()))
}

/// What a panel shows while its content is being worked out. Still text,
/// not egui's spinner: a spinner asks for the next frame as it draws, so
/// the window drew continuously while a trace decoded or a job ran,
/// whatever [`crate::pacing`] set (the allocations view, whose side panel
/// waits for its analysis: a frame every 60-100 ms while it drew its first
/// picture, each ~45 ms of lavapipe's CPU; 80-200 ms apart without). The
/// window draws again when the work ends ([`crate::jobs`] wakes it).
pub fn working(ui: &mut egui::Ui) {
    ui.label(egui::RichText::new("working…").weak());
}

/// The status line's font.
const STATUS_FONT: egui::FontId = egui::FontId::monospace(11.0);

/// Room for the status line, filled by [`status_line`] once the frame's
/// input has moved the view it describes (the line's panel comes before
/// the pictures, whose input moves the view).
pub fn reserve_status_line(ui: &mut egui::Ui) -> egui::Rect {
    let height = ui.fonts_mut(|f| f.row_height(&STATUS_FONT));
    ui.allocate_exact_size(egui::vec2(ui.available_width(), height), egui::Sense::hover()).0
}

/// The parts of a status line, between dots; empty ones are left out (a
/// synthetic trace, or one cut before its program's command line, has
/// none: it left an empty part between two dots).
pub fn status_parts(parts: impl IntoIterator<Item = String>) -> String {
    parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join("  ·  ")
}

/// Writes the status line in its room: one line, cut short with "…" when
/// the window is too narrow for it.
pub fn status_line(ctx: &egui::Context, room: egui::Rect, text: &str) {
    let colour = ctx.global_style().visuals.text_color();
    let mut job = egui::text::LayoutJob::simple_singleline(text.to_string(), STATUS_FONT, colour);
    job.wrap = egui::text::TextWrapping::truncate_at_width(room.width());
    let painter = egui::Painter::new(ctx.clone(), egui::LayerId::background(), room);
    let galley = painter.layout_job(job);
    painter.galley(room.left_top(), galley, colour);
}

/// Text in the middle of `rect` (no trace yet, nothing to draw).
pub fn centred_message(painter: &egui::Painter, rect: egui::Rect, text: impl ToString, size: f32) {
    // Wrapped to the rectangle: a long message in a small view stays
    // readable instead of running off both sides.
    let wrap = (rect.width() - 16.0).max(40.0);
    let galley = painter.layout(text.to_string(), egui::FontId::proportional(size), egui::Color32::LIGHT_GRAY, wrap);
    let at = rect.center() - galley.size() / 2.0;
    painter.galley(at, galley, egui::Color32::LIGHT_GRAY);
}

/// The flamegraph's and the bitmap's rectangles beneath `ruler`, down to
/// `bottom`: the flamegraph gets `depth` levels, at most `share` of the
/// height (at least 2 levels), the bitmap the rest. Also the levels shown.
pub fn flame_and_bitmap(ruler: egui::Rect, bottom: f32, depth: u32, share: f32) -> (egui::Rect, egui::Rect, u32) {
    let room = ((bottom - ruler.bottom()) * share / BAR_H).floor().max(2.0) as u32;
    let levels = depth.max(1).min(room);
    let flame = egui::Rect::from_min_size(
        ruler.left_bottom() + egui::vec2(0.0, 2.0),
        egui::vec2(ruler.width(), levels as f32 * BAR_H),
    );
    let bitmap =
        egui::Rect::from_min_max(flame.left_bottom() + egui::vec2(0.0, 4.0), egui::pos2(ruler.right(), bottom));
    (flame, bitmap, levels)
}

/// The texture of the last picture of a view, kept between frames.
#[derive(Default)]
pub struct PictureTexture(Option<(egui::TextureHandle, RenderKey)>);

/// What [`PictureTexture::paint`] put on screen.
#[derive(Clone, Debug, Default)]
pub struct PictureShown {
    /// A picture is on screen.
    pub drawn: bool,
    /// It is the picture of `key` (not an older one stretched).
    pub sharp: bool,
    /// How long the newest picture took, milliseconds.
    pub render_ms: f64,
    /// Why the view cannot be drawn.
    pub error: Option<String>,
}

impl PictureTexture {
    /// Forgets the texture (a new model).
    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Draws the newest picture of `work` into `bitmap`, placed where its
    /// columns and rows are in `view` now; `key` is the picture the view
    /// wants.
    pub fn paint(
        &mut self,
        ui: &egui::Ui,
        name: &str,
        work: &Work,
        view: &Viewport,
        bitmap: egui::Rect,
        key: &RenderKey,
    ) -> PictureShown {
        let mut shown = PictureShown::default();
        if let Some((k, r)) = work.render.latest() {
            if self.0.as_ref().is_none_or(|(_, have)| have != k) {
                let tex = ui.ctx().load_texture(name, r.image.clone(), egui::TextureOptions::NEAREST);
                self.0 = Some((tex, k.clone()));
            }
            shown.render_ms = r.took.as_secs_f64() * 1e3;
        }
        let painter = ui.painter_at(bitmap);
        if let Some((tex, k)) = &self.0 {
            shown.sharp = k == key;
            shown.drawn = true;
            let row_y = |r: f64| bitmap.top() + ((r - view.rows.0) / view.height()) as f32 * bitmap.height();
            painter.image(
                tex.id(),
                egui::Rect::from_min_max(
                    egui::pos2(x_of(view, k.columns.0, bitmap), row_y(k.rows.0)),
                    egui::pos2(x_of(view, k.columns.1, bitmap), row_y(k.rows.1)),
                ),
                egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
                egui::Color32::WHITE,
            );
        }
        if let Some((_, why)) = work.render.failure() {
            let text = format!("cannot draw this view: {why}");
            let galley = painter.layout(
                text.clone(),
                egui::FontId::proportional(14.0),
                egui::Color32::from_rgb(255, 200, 120),
                bitmap.width() * 0.8,
            );
            let at = bitmap.center() - galley.size() / 2.0;
            painter.rect_filled(
                egui::Rect::from_min_size(at, galley.size()).expand(8.0),
                4.0,
                egui::Color32::from_black_alpha(220),
            );
            painter.galley(at, galley, egui::Color32::WHITE);
            shown.error = Some(text);
        }
        shown
    }
}

/// Least time between two preview pictures while a trace decodes: a
/// picture of a 100M-read trace's summary took a fifth of the CPU when it
/// was redrawn at every frame. A little under the loading frames' pace
/// ([`crate::pacing::LOADING_FRAME`]), so that each loading frame starts
/// one, which the next shows.
const PREVIEW_EVERY: Duration = crate::pacing::LOADING_FRAME.saturating_sub(Duration::from_millis(100));

/// The preview picture has this many times fewer pixels across and down
/// than the area it fills (stretched to it): it is a sketch, replaced by
/// the sharp picture once decoded. At full size, each picture of the
/// 100M-read benchmark trace took 17-23 ms of the CPU the decoder runs
/// on, 8-14 ms at half (`perf record` of a session), and the first
/// picture came at 136-154 ms instead of 36-59 ms.
const PREVIEW_DOWNSCALE: u32 = 2;

/// The sketch of a trace while it decodes: the bitmap of the summary
/// decoded so far, redrawn as decoding goes on ([`work::want_preview`]).
/// Its texture outlives the decoding, so a compare pane whose trace is in
/// shows its last sketch while the other decodes. (A decoding again with
/// new settings does not show it: the window keeps the model it has until
/// the new one is in.)
#[derive(Default)]
pub struct DecodingPreview {
    /// The newest sketch on screen, and the reads it shows and estimates.
    shown: Option<(egui::TextureHandle, work::PreviewKey, (u64, u64))>,
    /// When the last sketch was started.
    started: Option<Instant>,
}

impl DecodingPreview {
    /// Starts a new sketch of `loading` (when more is decoded, the last is
    /// done, and it is due), and paints the newest into `area`, with how
    /// much is decoded while decoding. Whether a sketch is on screen.
    pub fn show(
        &mut self,
        painter: &egui::Painter,
        area: egui::Rect,
        loading: Option<&Loading>,
        work: &mut Work,
        colour_by: ColourBy,
        ppp: f32,
    ) -> bool {
        if let Some(loading) = loading {
            let size =
                ((area.width() * ppp) as u32 / PREVIEW_DOWNSCALE, (area.height() * ppp) as u32 / PREVIEW_DOWNSCALE);
            let blocks = loading.preview.blocks();
            let stale = work.preview.latest().is_none_or(|(k, _)| *k != (blocks, size.0, size.1));
            let due = self.started.is_none_or(|t| t.elapsed() >= PREVIEW_EVERY);
            if blocks > 0 && size.0 > 8 && size.1 > 8 && stale && due && !work.preview.busy() {
                self.started = Some(Instant::now());
                // Only the first sketch draws a frame when it is done (the
                // first picture comes at once); later ones wait for the
                // next loading frame, which comes anyway: a frame of its
                // own for each cost the decoder as much CPU as drawing it.
                work.preview.set_wakes_window(self.shown.is_none());
                work::want_preview(work, loading.preview.state(), size, colour_by);
            }
        }
        if let Some((k, p)) = work.preview.latest()
            && self.shown.as_ref().is_none_or(|(_, have, _)| have != k)
        {
            let texture = painter.ctx().load_texture("preview", p.image.clone(), egui::TextureOptions::NEAREST);
            self.shown = Some((texture, *k, p.columns));
        }
        let Some((texture, _, (done, estimate))) = &self.shown else { return false };
        painter.image(
            texture.id(),
            area,
            egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
            egui::Color32::WHITE,
        );
        if loading.is_some() {
            painter.text(
                area.min + egui::vec2(4.0, 4.0),
                egui::Align2::LEFT_TOP,
                format!("{} of about {} reads decoded", short(*done as f64), short(*estimate as f64)),
                egui::FontId::proportional(11.0),
                egui::Color32::GRAY,
            );
        }
        true
    }
}

/// Bars narrower than this (points) are drawn without rounded corners.
const ROUNDED_BAR_MIN_WIDTH: f32 = 12.0;
/// Bars narrower than this (points) merge with neighbours of their colour.
const NARROW_BAR_WIDTH: f32 = 3.0;

/// A flamegraph bar as drawn: (name, left, right, depth), left and right
/// in pixels.
pub type DrawnBar = (String, f32, f32, u32);

/// The colour of a flamegraph bar of one frame, given as its index into
/// the picture's frames and the frame (`None`: a bar of several frames),
/// and its name.
pub type BarFill<'a> = dyn Fn(Option<(usize, &Frame)>, &str) -> egui::Color32 + 'a;

/// Draws the flamegraph bars of the newest picture of `work` into `flame`,
/// levels `scroll..scroll + levels`; `fill` colours a bar. Returns the bars
/// drawn and the frame under `pointer` (an index into the picture's
/// frames).
#[allow(clippy::too_many_arguments)]
pub fn paint_flame(
    ui: &egui::Ui,
    flame: egui::Rect,
    view: &Viewport,
    work: &mut Work,
    scroll: u32,
    levels: u32,
    fill: &BarFill,
    pointer: Option<egui::Pos2>,
) -> (Vec<DrawnBar>, Option<usize>) {
    let (mut drawn, mut hovered) = (Vec::new(), None);
    let Some((k, r)) = work.render.latest() else { return (drawn, hovered) };
    let painter = ui.painter_at(flame);
    let bar_x = |x: f64| -> f32 {
        x_of(view, k.columns.0 + x * (k.columns.1 - k.columns.0) / f64::from(k.size.0.max(1)), flame)
    };
    let mut run = BarRun::default();
    let wanted: Vec<u64> = r.bars.iter().filter_map(|b| b.frame).map(|i| r.frames[i].function).collect();
    for bar in &r.bars {
        if bar.depth < scroll || bar.depth >= scroll + levels {
            continue;
        }
        let (x0, x1) = (bar_x(bar.x0), bar_x(bar.x1));
        if x1 < flame.left() || x0 > flame.right() {
            continue;
        }
        let y0 = flame.top() + (bar.depth - scroll) as f32 * BAR_H;
        let rect = egui::Rect::from_min_max(egui::pos2(x0, y0), egui::pos2(x1.max(x0 + 1.0), y0 + BAR_H - 1.0));
        let frame = bar.frame.filter(|_| bar.frames == 1).map(|i| (i, &r.frames[i]));
        let name = frame.and_then(|(_, f)| work.names.get(f.function)).unwrap_or("");
        // Rounded corners only where they show: a rounded rectangle is
        // three times the triangles, and on a CPU renderer (lavapipe) a
        // flamegraph of many narrow bars paid for each of them.
        let colour = if frame.is_none() { c32(MERGED_FRAMES_COLOUR) } else { fill(frame, name) };
        if rect.width() < NARROW_BAR_WIDTH {
            run.add(&painter, rect, colour);
        } else {
            run.flush(&painter);
            let rounding = if rect.width() >= ROUNDED_BAR_MIN_WIDTH { 1.0 } else { 0.0 };
            painter.rect_filled(rect, rounding, colour);
        }
        drawn.push((name.to_string(), x0, x1, bar.depth));
        if let (Some(p), Some(i)) = (pointer, bar.frame.filter(|_| bar.frames == 1))
            && rect.contains(p)
        {
            hovered = Some(i);
        }
    }
    run.flush(&painter);
    // Names over the bars: of a frame, or of a run of calls of one function.
    for label in decoder::raster::bar_labels(&r.bars) {
        if label.depth < scroll || label.depth >= scroll + levels {
            continue;
        }
        let (x0, x1) = (bar_x(label.x0).max(flame.left()), bar_x(label.x1).min(flame.right()));
        let Some(name) = work.names.get(label.function).filter(|n| !n.is_empty() && x1 - x0 > 28.0) else { continue };
        let chars = ((x1 - x0 - 6.0) / 6.6) as usize;
        let Some(text) = label.text_within(name, chars, "…") else { continue };
        let y = flame.top() + (label.depth - scroll) as f32 * BAR_H + (BAR_H - 1.0) / 2.0;
        painter.text(
            egui::pos2(x0 + 3.0, y),
            egui::Align2::LEFT_CENTER,
            &text,
            egui::FontId::monospace(11.0),
            egui::Color32::BLACK,
        );
    }
    work.names.want(wanted);
    (drawn, hovered)
}

/// Neighbouring narrow bars of one colour on one level, drawn as one
/// rectangle (the level of detail a flamegraph of many short calls needs:
/// a thousand one-pixel bars were ten thousand triangles a frame, a tenth
/// of a frame's cost on lavapipe), a shade darker than one bar so that
/// many calls do not read as one. Hover still sees every bar.
#[derive(Default)]
struct BarRun(Option<(egui::Rect, egui::Color32, u32)>);

impl BarRun {
    fn add(&mut self, painter: &egui::Painter, rect: egui::Rect, colour: egui::Color32) {
        if let Some((run, c, bars)) = &mut self.0 {
            let touches = rect.left() <= run.right() + 0.5 && rect.top() == run.top();
            if *c == colour && touches {
                run.max.x = run.max.x.max(rect.right());
                *bars += 1;
                return;
            }
        }
        self.flush(painter);
        self.0 = Some((rect, colour, 1));
    }

    fn flush(&mut self, painter: &egui::Painter) {
        if let Some((rect, colour, bars)) = self.0.take() {
            let shade = |v: u8| (f32::from(v) * 0.8) as u8;
            let colour = if bars > 1 {
                egui::Color32::from_rgb(shade(colour.r()), shade(colour.g()), shade(colour.b()))
            } else {
                colour
            };
            painter.rect_filled(rect, 0.0, colour);
        }
    }
}

/// The frame of the newest picture with index `i`.
pub fn picture_frame(work: &Work, i: usize) -> Option<&Frame> {
    work.render.latest().and_then(|(_, r)| r.frames.get(i))
}

/// Drag pans, the wheel zooms at the pointer, Shift+wheel scrolls rows (or,
/// over the flamegraph, its levels), Ctrl+wheel zooms rows.
pub fn navigate(
    ui: &egui::Ui,
    response: &egui::Response,
    flame: egui::Rect,
    bitmap: egui::Rect,
    pointer: Option<egui::Pos2>,
) -> Vec<ViewCommand> {
    let mut commands = Vec::new();
    if response.dragged() {
        let d = response.drag_delta();
        commands.push(ViewCommand::Pan(-f64::from(d.x / bitmap.width())));
        if d.y.abs() > 0.0 && bitmap.contains(response.interact_pointer_pos().unwrap_or_default()) {
            commands.push(ViewCommand::ScrollRows(-f64::from(d.y / bitmap.height())));
        }
    }
    let (Some(p), true) = (pointer, response.hovered()) else { return commands };
    let (scroll, mods) = (wheel_delta(ui), ui.input(|i| i.modifiers));
    let dy = if scroll.y != 0.0 { scroll.y } else { scroll.x };
    if dy == 0.0 {
        return commands;
    }
    let factor = (-f64::from(dy) * 0.003).exp();
    if mods.shift {
        if flame.contains(p) {
            commands.push(ViewCommand::ScrollFlame(-f64::from(dy) / 40.0));
        } else {
            commands.push(ViewCommand::ScrollRows(-f64::from(dy) / 400.0));
        }
    } else if mods.command {
        commands.push(ViewCommand::ZoomRows { at: f64::from((p.y - bitmap.top()) / bitmap.height()), factor });
    } else {
        commands.push(ViewCommand::Zoom { at: f64::from((p.x - bitmap.left()) / bitmap.width()), factor });
    }
    commands
}

/// How far the wheel turned in this frame's events, in points, whole.
///
/// Not egui's `smooth_scroll_delta`, which spreads a notch over the frames
/// of the next tenth of a second: each of those frames moved the view a
/// little and asked for a picture of its own, so the sharp picture came
/// only after the last of them. And not while Ctrl is held either, when
/// egui turns the wheel into its own zoom and the smoothed delta is zero.
fn wheel_delta(ui: &egui::Ui) -> egui::Vec2 {
    let line = ui.ctx().options(|o| o.input_options.line_scroll_speed);
    let page = ui.ctx().content_rect().height();
    ui.input(|i| {
        i.events
            .iter()
            .filter_map(|e| match e {
                egui::Event::MouseWheel { unit, delta, .. } => Some(match unit {
                    egui::MouseWheelUnit::Point => *delta,
                    egui::MouseWheelUnit::Line => *delta * line,
                    egui::MouseWheelUnit::Page => *delta * page,
                }),
                _ => None,
            })
            .fold(egui::Vec2::ZERO, |sum, d| sum + d)
    })
}

/// Draws the ruler: column ticks.
pub fn draw_ruler(painter: &egui::Painter, ruler: egui::Rect, view: &Viewport) {
    painter.rect_filled(ruler, 0.0, egui::Color32::from_gray(24));
    let target = view.width() / f64::from((ruler.width() / 90.0).max(1.0));
    let magnitude = 10f64.powf(target.max(1.0).log10().floor());
    let step =
        [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= target).unwrap_or(10.0 * magnitude).max(1.0);
    let mut c = (view.columns.0 / step).ceil() * step;
    while c < view.columns.1 {
        let x = x_of(view, c, ruler);
        painter.line_segment(
            [egui::pos2(x, ruler.bottom() - 6.0), egui::pos2(x, ruler.bottom())],
            egui::Stroke::new(1.0, egui::Color32::GRAY),
        );
        painter.text(
            egui::pos2(x + 2.0, ruler.top() + 2.0),
            egui::Align2::LEFT_TOP,
            tick_label(c, step),
            egui::FontId::proportional(10.0),
            egui::Color32::GRAY,
        );
        c += step;
    }
}

/// A tooltip at `pos`: the first line strong, the rest monospace.
pub fn tooltip(ctx: &egui::Context, pos: egui::Pos2, lines: &[String]) {
    egui::Area::new(egui::Id::new("tooltip"))
        .order(egui::Order::Tooltip)
        .fixed_pos(pos + egui::vec2(14.0, 14.0))
        .constrain(true)
        .show(ctx, |ui| {
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
                for (i, line) in lines.iter().enumerate() {
                    if i == 0 {
                        ui.strong(line);
                    } else {
                        ui.monospace(line);
                    }
                }
            });
        });
}

/// A function's name once known: frames are named in the background.
pub fn frame_label(names: &Names, f: &Frame) -> String {
    names.get(f.function).map_or_else(|| format!("{:#x}", f.function), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Neighbouring ruler ticks have different labels at every scale,
    /// and the labels read as the columns they mark.
    #[test]
    fn ruler_ticks_are_told_apart() {
        assert_eq!(tick_label(5_000_500.0, 500.0), "5.0005M");
        assert_eq!(tick_label(20_200.0, 200.0), "20.2k");
        assert_eq!(tick_label(20_000.0, 1000.0), "20k");
        assert_eq!(tick_label(7_200_000_000.0, 1e8), "7.2G");
        assert_eq!(tick_label(1234.0, 1.0), "1234");
        assert_eq!([short(1234.0), short(56_789.0), short(3_450_000.0), short(2.5e9)], ["1234", "57k", "3.5M", "2.5G"]);
        for step in [1.0f64, 2.0, 5.0, 10.0, 50.0, 200.0, 1e3, 5e4, 2e6] {
            for start in [0.0, 9_000.0, 123_000.0, 5_000_000.0, 99_999_000.0, 4_000_000_000.0] {
                let first = (start / step).ceil() * step;
                let labels: Vec<String> = (0..12).map(|i| tick_label(first + f64::from(i) * step, step)).collect();
                for pair in labels.windows(2) {
                    assert_ne!(pair[0], pair[1], "ticks {step} apart from {start}: {labels:?}");
                }
            }
        }
    }

    #[test]
    fn status_parts_leave_empty_ones_out() {
        let parts = ["t.lntrace", "", "function ?", "0 reads"].map(String::from);
        assert_eq!(status_parts(parts), "t.lntrace  ·  function ?  ·  0 reads");
        assert_eq!(status_parts(Vec::new()), "");
    }

    /// The navigation of each of a run of egui passes over an 800x600
    /// screen, each pass with its events and modifiers: the flamegraph on
    /// the upper half, the bitmap on the lower.
    fn navigation(passes: Vec<(Vec<egui::Event>, egui::Modifiers)>) -> Vec<Vec<ViewCommand>> {
        let ctx = egui::Context::default();
        let flame = egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(800.0, 300.0));
        let bitmap = egui::Rect::from_min_max(egui::pos2(0.0, 300.0), egui::pos2(800.0, 600.0));
        let screen = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(800.0, 600.0));
        passes
            .into_iter()
            .map(|(mut events, modifiers)| {
                events.insert(0, egui::Event::ModifiersChanged(modifiers));
                let input = egui::RawInput { screen_rect: Some(screen), events, ..Default::default() };
                let mut commands = Vec::new();
                let mut output = ctx.run_ui(input, |ui| {
                    let main = ui.interact(flame.union(bitmap), ui.id().with("main"), egui::Sense::click_and_drag());
                    commands = navigate(ui, &main, flame, bitmap, ui.ctx().pointer_hover_pos());
                });
                // No renderer to hand the font texture to (egui insists, in
                // debug builds).
                output.textures_delta.clear();
                commands
            })
            .collect()
    }

    fn notch(modifiers: egui::Modifiers) -> egui::Event {
        egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Line,
            delta: egui::vec2(0.0, 1.0),
            phase: egui::TouchPhase::Move,
            modifiers,
        }
    }

    /// A wheel notch zooms at the pointer by the whole notch in the frame
    /// of its event, and the frames after it do not zoom on (egui's
    /// smoothed delta would have spread it over them).
    #[test]
    fn a_wheel_notch_zooms_whole_in_its_own_frame() {
        let none = egui::Modifiers::NONE;
        let steps = navigation(vec![
            (vec![egui::Event::PointerMoved(egui::pos2(200.0, 450.0))], none),
            (vec![notch(none)], none),
            (vec![], none),
            (vec![], none),
        ]);
        assert_eq!(steps[0], vec![], "no wheel, no zoom");
        let line = egui::InputOptions::default().line_scroll_speed;
        let factor = (-f64::from(line) * 0.003).exp();
        assert_eq!(steps[1], vec![ViewCommand::Zoom { at: 0.25, factor }], "zoomed in at the pointer");
        assert!(factor < 0.95, "a notch zooms visibly: {factor}");
        assert_eq!(steps[2..], [vec![], vec![]], "nothing left for the next frames");
    }

    /// Ctrl+wheel zooms the rows at the pointer's height (egui keeps that
    /// wheel for its own zoom, out of the smoothed delta), Shift+wheel
    /// scrolls them.
    #[test]
    fn modified_wheels_zoom_and_scroll_rows() {
        let (none, ctrl, shift) = (egui::Modifiers::NONE, egui::Modifiers::COMMAND, egui::Modifiers::SHIFT);
        let steps = navigation(vec![
            (vec![egui::Event::PointerMoved(egui::pos2(200.0, 450.0))], none),
            (vec![notch(ctrl)], ctrl),
            (vec![notch(shift)], shift),
        ]);
        let line = f64::from(egui::InputOptions::default().line_scroll_speed);
        assert_eq!(steps[1], vec![ViewCommand::ZoomRows { at: 0.5, factor: (-line * 0.003).exp() }]);
        assert!(matches!(steps[2][..], [ViewCommand::ScrollRows(dy)] if dy < 0.0), "{:?}", steps[2]);
    }
}

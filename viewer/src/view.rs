//! The visible part of a trace: a column range (x) and a row range of the
//! bitmap (y), and the maths of zooming, panning and fitting. Plain data,
//! no Bevy: [`apply`] and the systems apply [`ViewCommand`]s to it.

use bevy::prelude::*;

/// Fewest columns a view shows (zooming in stops there).
pub const MIN_COLUMNS: f64 = 8.0;
/// Fewest rows a view shows.
pub const MIN_ROWS: f64 = 4.0;

/// What part of the trace is on screen.
#[derive(Clone, Copy, Debug, PartialEq, Resource)]
pub struct Viewport {
    /// Visible columns `[start, end)`.
    pub columns: (f64, f64),
    /// Visible bitmap rows `[start, end)`.
    pub rows: (f64, f64),
    /// Columns in the trace.
    pub total_columns: f64,
    /// Rows the bitmap has (the working set's largest size).
    pub total_rows: f64,
    /// Flamegraph levels scrolled past at the top (deep stacks).
    pub flame_scroll: f64,
}

impl Default for Viewport {
    fn default() -> Self {
        Viewport::whole(1.0, 1.0)
    }
}

impl Viewport {
    /// The whole trace.
    pub fn whole(total_columns: f64, total_rows: f64) -> Viewport {
        let total_columns = total_columns.max(1.0);
        let total_rows = total_rows.max(1.0);
        Viewport {
            columns: (0.0, total_columns),
            rows: (0.0, total_rows),
            total_columns,
            total_rows,
            flame_scroll: 0.0,
        }
    }

    /// Visible columns.
    pub fn width(&self) -> f64 {
        self.columns.1 - self.columns.0
    }

    /// Visible rows.
    pub fn height(&self) -> f64 {
        self.rows.1 - self.rows.0
    }

    /// Whether this view is at another scale than `before` (a zoom of the
    /// columns or the rows, not a pan).
    pub fn zoomed_from(&self, before: &Viewport) -> bool {
        self.width() != before.width() || self.height() != before.height()
    }

    /// The column at fraction `x` (0..1) of the width.
    pub fn column_at(&self, x: f64) -> f64 {
        self.columns.0 + x * self.width()
    }

    /// The row at fraction `y` (0..1) of the bitmap's height.
    pub fn row_at(&self, y: f64) -> f64 {
        self.rows.0 + y * self.height()
    }

    /// The cell under a point: `x` a fraction of the width, `y` of the
    /// bitmap's height (`None`: not over the bitmap). Columns and rows are
    /// whole and inside the trace.
    pub fn hit(&self, x: f64, y: Option<f64>) -> (u64, Option<usize>) {
        let column = self.column_at(x).floor().clamp(0.0, self.total_columns - 1.0) as u64;
        let row = y.map(|y| self.row_at(y).floor().clamp(0.0, self.total_rows - 1.0) as usize);
        (column, row)
    }

    /// Where column `c` is, as a fraction of the width.
    pub fn x_of(&self, c: f64) -> f64 {
        (c - self.columns.0) / self.width()
    }

    /// Zooms by `factor` (< 1 zooms in) keeping the column at fraction `x`
    /// of the width where it is.
    pub fn zoom_at(&mut self, x: f64, factor: f64) {
        let x = x.clamp(0.0, 1.0);
        let anchor = self.column_at(x);
        let width = (self.width() * factor).clamp(MIN_COLUMNS.min(self.total_columns), self.total_columns);
        self.columns = (anchor - x * width, anchor - x * width + width);
        self.clamp();
    }

    /// Zooms the rows by `factor` keeping the row at fraction `y` in place.
    pub fn zoom_rows_at(&mut self, y: f64, factor: f64) {
        let y = y.clamp(0.0, 1.0);
        let anchor = self.row_at(y);
        let height = (self.height() * factor).clamp(MIN_ROWS.min(self.total_rows), self.total_rows);
        self.rows = (anchor - y * height, anchor - y * height + height);
        self.clamp();
    }

    /// Moves by `dx` widths (positive: towards later columns).
    pub fn pan(&mut self, dx: f64) {
        let shift = dx * self.width();
        self.columns = (self.columns.0 + shift, self.columns.1 + shift);
        self.clamp();
    }

    /// Scrolls the rows by `dy` heights (positive: down, higher addresses).
    pub fn scroll_rows(&mut self, dy: f64) {
        let shift = dy * self.height();
        self.rows = (self.rows.0 + shift, self.rows.1 + shift);
        self.clamp();
    }

    /// Shows columns `[a, b)` (with a margin of `margin` widths each side).
    pub fn fit(&mut self, a: f64, b: f64, margin: f64) {
        let width = (b - a).max(MIN_COLUMNS.min(self.total_columns));
        let pad = width * margin;
        self.columns = (a - pad, a + width + pad);
        self.clamp();
    }

    /// The picture this view needs on a `size` pixel area: its columns,
    /// rows and pixel size. Zoomed in past one pixel per column (or row),
    /// the picture has one pixel per whole column (row) in view, and the
    /// texture is stretched without filtering — the same pixels, so
    /// zooming in costs no more than the cells in view, and panning within
    /// the same columns needs no new picture.
    pub fn picture(&self, size: (u32, u32)) -> PictureSpec {
        fn axis(range: (f64, f64), total: f64, pixels: u32) -> ((f64, f64), u32) {
            if range.1 - range.0 >= f64::from(pixels) {
                return (range, pixels);
            }
            let a = range.0.floor().max(0.0);
            let b = range.1.ceil().min(total.max(a + 1.0)).max(a + 1.0);
            ((a, b), (b - a) as u32)
        }
        let (columns, width) = axis(self.columns, self.total_columns, size.0.max(1));
        let (rows, height) = axis(self.rows, self.total_rows, size.1.max(1));
        PictureSpec { columns, rows, size: (width.max(1), height.max(1)) }
    }

    /// Back to the whole trace.
    pub fn reset(&mut self) {
        *self = Viewport::whole(self.total_columns, self.total_rows);
    }

    /// The trace's size changed (decoded anew, or more decoded).
    pub fn set_extent(&mut self, total_columns: f64, total_rows: f64) {
        let whole = self.columns == (0.0, self.total_columns);
        let all_rows = self.rows == (0.0, self.total_rows);
        self.total_columns = total_columns.max(1.0);
        self.total_rows = total_rows.max(1.0);
        if whole {
            self.columns = (0.0, self.total_columns);
        }
        if all_rows {
            self.rows = (0.0, self.total_rows);
        }
        self.clamp();
    }

    /// Keeps the view inside the trace, widths positive.
    fn clamp(&mut self) {
        let width = self.width().clamp(MIN_COLUMNS.min(self.total_columns), self.total_columns);
        let start = self.columns.0.clamp(0.0, self.total_columns - width);
        self.columns = (start, start + width);
        let height = self.height().clamp(MIN_ROWS.min(self.total_rows), self.total_rows);
        let top = self.rows.0.clamp(0.0, self.total_rows - height);
        self.rows = (top, top + height);
        self.flame_scroll = self.flame_scroll.max(0.0);
    }
}

/// The view a mode's pictures were last painted at: whether a frame's view
/// is a zoom step (whose frame waits a little for its picture), and
/// whether it is new (whose frame needs no second one,
/// [`crate::pacing::InputShown`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PaintedView(Option<Viewport>);

impl PaintedView {
    /// Whether `view` is at another scale than the last painted one (none
    /// painted yet: no).
    pub fn zoomed_to(&self, view: &Viewport) -> bool {
        self.0.is_some_and(|before| view.zoomed_from(&before))
    }

    /// Whether the frame showing `view` is a zoom step's, which waits a
    /// little for the step's pictures ([`crate::jobs::Job::wait_for_zoom_step`]):
    /// at another scale than the last painted one, and not while the
    /// pointer is down (a drag's frames follow the pointer). The one rule
    /// of every mode.
    pub fn zoom_step_to(&self, view: &Viewport, pointer_down: bool) -> bool {
        self.zoomed_to(view) && !pointer_down
    }

    /// Whether `view` is the last painted one moved at its scale (none
    /// painted yet: no).
    pub fn panned_to(&self, view: &Viewport) -> bool {
        self.0.is_some_and(|before| before != *view && !view.zoomed_from(&before))
    }

    /// How many threads the picture of `view` may take: one for a pan,
    /// whose frames follow the pointer with a new picture wanted in each
    /// (on two cores, pictures of the allocations view on both held a
    /// pan's frame updates back: median 4.6 -> 8.5 ms, 3 sessions each).
    pub fn picture_threads(&self, view: &Viewport) -> PictureThreads {
        if self.panned_to(view) { PictureThreads::One } else { PictureThreads::Two }
    }

    /// The pictures were painted at `view`; whether they were not at the
    /// last painting.
    pub fn painted_at(&mut self, view: Viewport) -> bool {
        self.0.replace(view) != Some(view)
    }
}

/// How many threads a picture may take ([`PaintedView::picture_threads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PictureThreads {
    /// A large picture is drawn in two halves at once.
    Two,
    /// The picture is drawn on its job's thread alone
    /// ([`decoder::drawing_threads::on_one_thread`]).
    One,
}

impl PictureThreads {
    /// Runs `draw` with its pictures on as many threads as this allows.
    pub fn draw<T>(self, draw: impl FnOnce() -> T) -> T {
        match self {
            PictureThreads::Two => draw(),
            PictureThreads::One => decoder::drawing_threads::on_one_thread(draw),
        }
    }
}

/// Something the user asked of the view.
#[derive(Clone, Copy, Debug, PartialEq, Message)]
pub enum ViewCommand {
    /// Zoom by a factor around a point (fraction of the width).
    Zoom {
        /// Where, 0..1.
        at: f64,
        /// Width multiplier (< 1 zooms in).
        factor: f64,
    },
    /// Zoom the rows around a point (fraction of the bitmap's height).
    ZoomRows {
        /// Where, 0..1.
        at: f64,
        /// Height multiplier.
        factor: f64,
    },
    /// Pan by a fraction of the width.
    Pan(f64),
    /// Scroll the bitmap's rows by a fraction of its height.
    ScrollRows(f64),
    /// Scroll the flamegraph by levels.
    ScrollFlame(f64),
    /// Show a column range (a frame).
    Fit {
        /// First column.
        from: f64,
        /// One past the last.
        to: f64,
    },
    /// Show everything.
    Reset,
    /// Select a column range for the statistics (`None` clears).
    Select(Option<(u64, u64)>),
}

/// The columns the statistics are about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Resource)]
pub struct Selection(pub Option<(u64, u64)>);

/// A range of the time axis asked for on the command line (`what` names it
/// for people: "the selection"), against a trace of `extent` steps of
/// `unit` ("columns", "allocation events"): cut at the trace's end, or,
/// wholly past it, why it is not used (for the status line). Used as they
/// were, a view of columns past the end showed the trace's last columns,
/// and a selection past it an analysis of nothing, saying nothing.
pub fn within_trace(what: &str, (a, b): (u64, u64), extent: u64, unit: &str) -> Result<(u64, u64), String> {
    if a < extent {
        Ok((a, b.min(extent)))
    } else {
        Err(format!("{what} {a}..{b} is past the trace's {extent} {unit}"))
    }
}

/// Applies the commands other systems sent this frame (a search's fit, a
/// script), before the frame's UI pass: the frame shows them. The UI
/// applies its own input itself, before it paints ([`apply_all`]).
pub fn apply_view_commands(
    mut commands: MessageReader<ViewCommand>,
    mut view: ResMut<Viewport>,
    mut selection: ResMut<Selection>,
) {
    let (mut v, mut sel) = (*view, *selection);
    if apply_all(&mut v, &mut sel, commands.read().copied()) {
        view.set_if_neq(v);
        selection.set_if_neq(sel);
    }
}

/// Applies `commands` to a view and its selection, in order; whether there
/// was any.
pub fn apply_all(
    view: &mut Viewport,
    selection: &mut Selection,
    commands: impl IntoIterator<Item = ViewCommand>,
) -> bool {
    let mut any = false;
    for command in commands {
        match command {
            ViewCommand::Select(range) => {
                selection.0 = range.map(|(a, b)| (a.min(b), a.max(b))).filter(|(a, b)| b > a);
            }
            other => apply(view, other),
        }
        any = true;
    }
    any
}

/// Applies a command that moves the view (a selection is not the view's:
/// it is ignored here).
pub fn apply(view: &mut Viewport, command: ViewCommand) {
    match command {
        ViewCommand::Zoom { at, factor } => view.zoom_at(at, factor),
        ViewCommand::ZoomRows { at, factor } => view.zoom_rows_at(at, factor),
        ViewCommand::Pan(dx) => view.pan(dx),
        ViewCommand::ScrollRows(dy) => view.scroll_rows(dy),
        ViewCommand::ScrollFlame(levels) => view.flame_scroll = (view.flame_scroll + levels).max(0.0),
        ViewCommand::Fit { from, to } => view.fit(from, to, 0.02),
        ViewCommand::Reset => view.reset(),
        ViewCommand::Select(_) => {}
    }
}

/// What a view's picture covers ([`Viewport::picture`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PictureSpec {
    /// Columns `[start, end)`.
    pub columns: (f64, f64),
    /// Rows `[start, end)`.
    pub rows: (f64, f64),
    /// Pixels.
    pub size: (u32, u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Commands reach the view before the frame's UI pass, which shows
    /// them: a frame without commands leaves the view (and its change
    /// detection, which starts pictures ahead) alone.
    #[test]
    fn view_commands_change_the_view_only_when_given() {
        #[derive(Resource, Default)]
        struct Changes(u32);
        let mut app = App::new();
        app.add_plugins(MinimalPlugins)
            .insert_resource(Viewport::whole(1000.0, 64.0))
            .init_resource::<Selection>()
            .init_resource::<Changes>()
            .add_message::<ViewCommand>()
            .add_systems(
                Update,
                (apply_view_commands, |v: Res<Viewport>, mut c: ResMut<Changes>| c.0 += u32::from(v.is_changed()))
                    .chain(),
            );
        app.update();
        app.update();
        assert_eq!(app.world().resource::<Changes>().0, 1, "inserted once, then untouched");
        app.world_mut().write_message(ViewCommand::Zoom { at: 0.5, factor: 0.5 });
        app.world_mut().write_message(ViewCommand::Pan(0.1));
        app.update();
        assert_eq!(app.world().resource::<Viewport>().columns, (300.0, 800.0), "zoomed, then panned");
        assert_eq!(app.world().resource::<Changes>().0, 2);
        app.world_mut().write_message(ViewCommand::Pan(-1.0));
        app.update();
        app.world_mut().write_message(ViewCommand::Pan(-1.0));
        app.update();
        assert_eq!(app.world().resource::<Viewport>().columns, (0.0, 500.0));
        assert_eq!(app.world().resource::<Changes>().0, 3, "a pan past the start changes nothing");
    }

    #[test]
    fn zooms_are_told_from_pans() {
        let before = Viewport::whole(1000.0, 64.0);
        let mut v = before;
        v.zoom_at(0.5, 0.5);
        assert!(v.zoomed_from(&before), "columns zoomed");
        let zoomed = v;
        v.pan(0.2);
        assert!(!v.zoomed_from(&zoomed), "a pan is not a zoom");
        v.zoom_rows_at(0.5, 0.5);
        assert!(v.zoomed_from(&zoomed), "rows zoomed");
        assert!(!before.zoomed_from(&before));
    }

    #[test]
    fn painted_views_tell_new_views_and_zoom_steps() {
        let mut painted = PaintedView::default();
        let mut v = Viewport::whole(1000.0, 64.0);
        assert!(!painted.zoomed_to(&v), "nothing painted yet: no zoom step");
        assert!(painted.painted_at(v), "the first painting is new");
        assert!(!painted.painted_at(v), "the same view again is not");
        v.pan(0.1);
        v.zoom_at(0.5, 0.5);
        assert!(painted.zoomed_to(&v));
        assert!(painted.zoom_step_to(&v, false), "a zoom step's frame waits for its picture");
        assert!(!painted.zoom_step_to(&v, true), "not while the pointer is down: a drag's frames follow it");
        assert_eq!(painted.picture_threads(&v), PictureThreads::Two, "a zoom step's picture takes two");
        assert!(painted.painted_at(v));
        assert_eq!(painted.picture_threads(&v), PictureThreads::Two, "the painted view's too");
        v.pan(0.1);
        assert!(!painted.zoomed_to(&v), "a pan from the last painted view");
        assert!(painted.panned_to(&v));
        assert_eq!(painted.picture_threads(&v), PictureThreads::One, "a pan's picture takes one");
        assert!(painted.painted_at(v), "but a new view");
        assert!(!painted.panned_to(&v), "painted there now");
    }

    /// The bench's pans (a 100M-column trace at a twentieth, 240 steps of
    /// a hundredth of the width) each take one thread: a pan keeps the
    /// width exactly (the clamp puts the end at the start plus the width),
    /// so none passes for a zoom step.
    #[test]
    fn every_pan_of_a_long_trace_is_a_pan() {
        let mut v = Viewport::whole(1e8, 512.0);
        v.zoom_at(0.5, 0.05);
        let mut painted = PaintedView::default();
        painted.painted_at(v);
        let mut zooms = 0;
        for n in 0..240 {
            v.pan(if (n / 60) % 2 == 0 { 0.01 } else { -0.01 });
            if painted.picture_threads(&v) != PictureThreads::One {
                zooms += 1;
            }
            painted.painted_at(v);
        }
        assert_eq!(zooms, 0, "pans taken for zoom steps");
    }

    #[test]
    fn zooming_keeps_the_point_under_the_cursor() {
        let mut v = Viewport::whole(1000.0, 64.0);
        let before = v.column_at(0.25);
        v.zoom_at(0.25, 0.5);
        assert_eq!(v.width(), 500.0);
        assert!((v.column_at(0.25) - before).abs() < 1e-9);
        v.zoom_at(0.25, 1e-9);
        assert_eq!(v.width(), MIN_COLUMNS, "zooming in stops");
        v.zoom_at(0.5, 1e9);
        assert_eq!(v.columns, (0.0, 1000.0), "zooming out stops at the whole trace");
    }

    #[test]
    fn zoomed_in_pictures_have_a_pixel_per_cell() {
        let mut v = Viewport::whole(1_000_000.0, 512.0);
        let whole = v.picture((1900, 800));
        assert_eq!(whole, PictureSpec { columns: (0.0, 1e6), rows: (0.0, 512.0), size: (1900, 512) });
        v.fit(100.3, 110.6, 0.0);
        let p = v.picture((1900, 800));
        assert_eq!(p.columns, (100.0, 111.0));
        assert_eq!(p.size.0, 11, "one pixel per whole column in view");
        v.pan(0.01);
        assert_eq!(v.picture((1900, 800)), p, "panning inside the same columns needs no new picture");
        let mut tall = Viewport::whole(10.0, 4000.0);
        tall.rows = (10.5, 1210.5);
        assert_eq!(tall.picture((800, 600)).rows, (10.5, 1210.5), "more rows than pixels: as asked");
        assert_eq!(tall.picture((800, 600)).size, (10, 600));
    }

    #[test]
    fn panning_and_fitting_stay_inside_the_trace() {
        let mut v = Viewport::whole(1000.0, 64.0);
        v.zoom_at(0.0, 0.1);
        v.pan(-3.0);
        assert_eq!(v.columns, (0.0, 100.0));
        v.pan(100.0);
        assert_eq!(v.columns, (900.0, 1000.0));
        v.fit(200.0, 300.0, 0.0);
        assert_eq!(v.columns, (200.0, 300.0));
        v.fit(990.0, 1000.0, 0.5);
        assert_eq!(v.columns.1, 1000.0);
        v.reset();
        assert_eq!(v.columns, (0.0, 1000.0));
    }

    #[test]
    fn hits_land_on_whole_cells_inside_the_trace() {
        let mut v = Viewport::whole(376.0, 64.0);
        assert_eq!(v.hit(0.0, Some(0.0)), (0, Some(0)));
        assert_eq!(v.hit(100.5 / 376.0, Some(25.5 / 64.0)), (100, Some(25)));
        assert_eq!(v.hit(1.0, Some(1.0)), (375, Some(63)), "the far edge is the last cell");
        assert_eq!(v.hit(0.5, None), (188, None));
        v.fit(100.0, 110.0, 0.0);
        assert_eq!(v.hit(0.55, None), (105, None));
    }

    #[test]
    fn rows_scroll_and_zoom() {
        let mut v = Viewport::whole(10.0, 512.0);
        v.zoom_rows_at(0.0, 0.25);
        assert_eq!(v.rows, (0.0, 128.0));
        v.scroll_rows(1.0);
        assert_eq!(v.rows, (128.0, 256.0));
        v.scroll_rows(10.0);
        assert_eq!(v.rows, (384.0, 512.0));
    }
}

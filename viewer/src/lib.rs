//! The linetrace viewer: a Bevy app that shows a trace's flamegraph over
//! its cache-line bitmap on one x axis (one column per memory read), and
//! answers, for every pixel, which code, which cache line and which
//! allocation it is.
//!
//! Design constraints:
//! - Nothing slow runs on the UI thread: decoding runs on a thread of its
//!   own with a live preview of the summary ([`session`]); pictures, hover
//!   inspection, row labels, statistics and names are background jobs on
//!   Bevy's async compute pool ([`work`], [`jobs`]). The UI draws whatever
//!   they last produced, stretched to the current view, every frame.
//! - Pictures are screen-sized (within the device's 16384 texture limit),
//!   never a texture or an entity per column; flamegraph frames narrower
//!   than a pixel merge into summary bars (decoder's `flame_bars`).
//! - The app is plugins around shared resources ([`session::Session`],
//!   [`view::Viewport`]); another mode (allocations, two traces compared)
//!   is another plugin.
//!
//! ```no_run
//! let options = viewer::ViewerOptions::new("work.lntrace".into());
//! viewer::run(options)?;
//! # Ok::<(), viewer::ViewerError>(())
//! ```

pub mod bench;
pub mod compare;
pub mod display;
pub mod egui_shader;
pub mod heap;
pub mod jobs;
pub mod linked;
pub mod pacing;
pub mod paint;
pub mod search;
pub mod session;
pub mod ui;
pub mod view;
pub mod work;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bevy::app::{TaskPoolOptions, TaskPoolPlugin, TaskPoolThreadAssignmentPolicy};
use bevy::log::{Level, LogPlugin};
use bevy::prelude::*;
use bevy::render::view::screenshot::{Screenshot, ScreenshotCaptured};
use bevy::window::WindowResolution;
use bevy_egui::{EguiPlugin, EguiPrimaryContextPass};
use decoder::model::DecodeOptions;
use decoder::symbols::SymbolPaths;

use crate::session::Session;
use crate::ui::{UiReport, UiState};
use crate::view::{Selection, ViewCommand, Viewport, apply_view_commands};
use crate::work::Work;

/// Everything that can stop the viewer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ViewerError {
    /// There is no display to open a window on.
    #[error("{0}; set DISPLAY to a running X server, or use --screenshot to draw offscreen")]
    Display(display::DisplayProblem),
    /// Nothing to draw with (see [`display::vulkan_missing`]).
    #[error("{0}: the viewer draws with Vulkan (on Debian without a GPU: apt-get install mesa-vulkan-drivers)")]
    NoVulkan(&'static str),
    /// A headless run could not produce its picture.
    #[error("the screenshot was not taken: {0}")]
    Screenshot(String),
    /// A measuring run (`--bench-json`) stopped before its report.
    #[error("the measuring run stopped: {0}")]
    Bench(String),
    /// Writing the UI state file failed.
    #[error("cannot write {path}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// The app stopped with an error.
    #[error("the viewer stopped with an error")]
    App,
}

/// A headless run: draw, save a screenshot, exit.
#[derive(Clone, Debug)]
pub struct ScreenshotRequest {
    /// PNG to write.
    pub path: PathBuf,
    /// JSON of the UI state to write next to it (layout, tooltip, bars).
    pub state: Option<PathBuf>,
    /// A point to hover: (column, row).
    pub hover: Option<(u64, Option<usize>)>,
    /// Allocations mode: open the source of the hovered block, as a
    /// Ctrl+click does.
    pub open_source: bool,
}

/// Why a screenshot's `--hover` point has nothing to show, for the error
/// the run ends with: a tooltip saying so was saved in the picture with
/// exit status 0, or (where no tooltip came) the run waited for one until
/// it gave up, ten minutes later.
pub(crate) fn unanswerable_hover((x, row): (u64, Option<usize>), why: &str) -> String {
    match row {
        Some(row) => format!("--hover {x},{row}: {why}"),
        None => format!("--hover {x}: {why}"),
    }
}

/// How to open the viewer.
#[derive(Clone, Debug)]
pub struct ViewerOptions {
    /// The trace.
    pub trace: PathBuf,
    /// Decoding settings.
    pub decode: DecodeOptions,
    /// Where to find modules and debug files.
    pub symbol_paths: SymbolPaths,
    /// Window size in pixels.
    pub size: (u32, u32),
    /// Columns to show first (default: all).
    pub columns: Option<(u64, u64)>,
    /// Allocations mode: addresses to show first (default: all).
    pub addresses: Option<(u64, u64)>,
    /// Headless: draw once, save, exit.
    pub screenshot: Option<ScreenshotRequest>,
    /// Scripted measuring run: write its report here and exit.
    pub bench: Option<PathBuf>,
    /// A second trace: compare mode, `trace` is A and this is B.
    pub compare: Option<PathBuf>,
    /// Allocations mode: the heap's time x address picture.
    pub allocations: bool,
    /// Allocations mode: one view per size class, laid out so.
    pub bins: Option<decoder::heap_bins::BinLayout>,
    /// Allocations mode: cushion cursors at these times.
    pub cursors: Vec<f64>,
    /// Allocations mode: their opacity.
    pub cursor_strength: f64,
    /// A part of the time axis selected at first: columns (the single
    /// view, whose statistics panel then shows the range), or allocation
    /// events (the allocations view, whose side panel analyses them).
    pub selection: Option<(u64, u64)>,
    /// The single view: open with the statistics panel shown.
    pub stats: bool,
}

impl ViewerOptions {
    /// Defaults for a trace.
    pub fn new(trace: PathBuf) -> ViewerOptions {
        ViewerOptions {
            trace,
            decode: DecodeOptions::default(),
            symbol_paths: SymbolPaths::default(),
            size: (1600, 900),
            columns: None,
            addresses: None,
            screenshot: None,
            bench: None,
            compare: None,
            allocations: false,
            bins: None,
            cursors: Vec::new(),
            cursor_strength: 0.6,
            selection: None,
            stats: false,
        }
    }
}

/// Frames to wait before a screenshot: lavapipe compiles pipelines in the
/// background, and the first frames can miss some of them.
pub const SCREENSHOT_MIN_FRAMES: u32 = 150;
/// Frames after which a headless run gives up waiting for its picture.
pub const SCREENSHOT_MAX_FRAMES: u32 = 20_000;

/// Whether a window can open here (a Vulkan driver, an X server that
/// answers): what [`run`] checks first, for callers that want to know
/// before long work (`record --view` before the recording).
pub fn check_window() -> Result<(), ViewerError> {
    if let Some(missing) = display::vulkan_missing() {
        return Err(ViewerError::NoVulkan(missing));
    }
    display::check_display().map_err(ViewerError::Display)
}

/// Opens the window (or draws offscreen with a screenshot request) and
/// runs until it is closed.
pub fn run(options: ViewerOptions) -> Result<(), ViewerError> {
    let launched = std::time::Instant::now();
    check_window()?;
    // Decoding starts before the app is built: it needs no window, and it
    // is what the first picture waits for (see `session::Opened`).
    let open = |path: &PathBuf| session::Opened::start(path.clone(), options.decode, options.symbol_paths.clone());
    let trace = open(&options.trace);
    let compared = options.compare.as_ref().map(open);
    let failure = Arc::new(std::sync::Mutex::new(None::<String>));
    let mut app = App::new();
    let title = match &options.compare {
        Some(b) => format!("linetrace — {} vs {}", options.trace.display(), b.display()),
        None => format!("linetrace — {}", options.trace.display()),
    };
    app.add_plugins(
        DefaultPlugins
            .set(WindowPlugin {
                primary_window: Some(Window {
                    title,
                    resolution: WindowResolution::new(options.size.0, options.size.1),
                    ..default()
                }),
                ..default()
            })
            .set(LogPlugin { level: Level::ERROR, filter: "wgpu=error,naga=error".into(), ..default() })
            .set(TaskPoolPlugin {
                task_pool_options: TaskPoolOptions {
                    async_compute: TaskPoolThreadAssignmentPolicy {
                        min_threads: 2,
                        max_threads: 4,
                        percent: 0.5,
                        on_thread_spawn: None,
                        on_thread_destroy: None,
                    },
                    ..default()
                },
            }),
    )
    .add_plugins((EguiPlugin::default(), egui_shader::EguiShaderPlugin))
    .add_systems(Startup, spawn_camera);
    match compared {
        Some(b) => app.add_plugins(compare::ComparePlugin { options: options.clone(), sessions: [trace, b] }),
        None if options.allocations => app.add_plugins(heap::HeapPlugin { options: options.clone(), session: trace }),
        None => app.add_plugins(ViewerPlugin { options: options.clone(), session: trace }),
    };
    // Headless runs draw continuously once the trace is in (a screenshot
    // waits on frames for the pipelines to compile); while it is decoding
    // they pace frames as a window does. A bench paces frames as a window
    // does, but while it pans (`bench`), so it measures what a user waits
    // for.
    app.add_plugins(pacing::PacingPlugin { always_draw: options.screenshot.is_some() });
    if let Some(request) = options.screenshot.clone() {
        app.add_plugins(HeadlessPlugin { request, failure: failure.clone() });
    }
    if let Some(out) = options.bench.clone() {
        app.add_plugins(bench::BenchPlugin { out, launched, failure: failure.clone() });
    }
    // Last, so that it sees every schedule the other plugins made.
    app.add_plugins(SystemsOnTheFrameThread);
    let exit = app.run();
    if let Some(why) = failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(if options.bench.is_some() { ViewerError::Bench(why) } else { ViewerError::Screenshot(why) });
    }
    match exit {
        AppExit::Success => Ok(()),
        AppExit::Error(_) => Err(ViewerError::App),
    }
}

/// Runs the systems of every schedule of the main world one after another
/// on the thread that runs the frame (Bevy's single-threaded executor),
/// instead of handing them to the compute pool.
///
/// Why: the viewer's systems are small (the UI pass costs under a
/// millisecond), while the two cores are shared with lavapipe's threads and
/// the background pictures. Each hand-off to a pool thread waited for a
/// core: with the multi-threaded executor, a pan frame's update took 20-32
/// ms at p99 for about 1 ms of work. The render world keeps its own
/// executor (running it on one thread made frames no faster).
///
/// Add it after the other plugins: it changes the schedules that exist
/// when the app finishes building.
pub struct SystemsOnTheFrameThread;

impl Plugin for SystemsOnTheFrameThread {
    fn build(&self, _app: &mut App) {}

    fn cleanup(&self, app: &mut App) {
        let mut schedules = app.world_mut().resource_mut::<Schedules>();
        for (_, schedule) in schedules.iter_mut() {
            schedule.set_executor(bevy::ecs::schedule::SingleThreadedExecutor::new());
        }
    }
}

/// The viewer's resources and systems.
pub struct ViewerPlugin {
    /// How it was opened.
    pub options: ViewerOptions,
    /// The trace, decoding.
    pub session: session::Opened,
}

/// Where a mode applies the [`ViewCommand`]s other systems send, in
/// `Update`, before the UI pass that shows them: systems that send
/// commands run before it (in `First` or earlier in `Update`).
#[derive(SystemSet, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ViewCommandsApplied;

/// Columns to fit once the trace is decoded, and whether the selection
/// asked for is still to be checked against the trace's columns.
#[derive(Resource)]
struct StartView {
    columns: Option<(u64, u64)>,
    check_selection: bool,
}

impl Plugin for ViewerPlugin {
    fn build(&self, app: &mut App) {
        let o = &self.options;
        let session = self.session.take();
        let mut ui = UiState::default();
        if let Some(r) = &o.screenshot {
            ui.forced_hover = r.hover;
            ui.ignore_pointer = true;
        }
        ui.ignore_pointer |= o.bench.is_some();
        ui.show_stats = o.stats || o.selection.is_some();
        app.insert_resource(session)
            .insert_resource(StartView { columns: o.columns, check_selection: o.selection.is_some() })
            .insert_resource(ui)
            .init_resource::<Viewport>()
            .insert_resource(Selection(o.selection))
            .init_resource::<Work>()
            .init_resource::<UiReport>()
            .init_resource::<search::SearchState>()
            .add_message::<ViewCommand>()
            .add_message::<search::SearchCommand>()
            .add_systems(
                Update,
                (
                    session::poll_decoding,
                    start_view,
                    search::apply_search_commands,
                    apply_view_commands.in_set(ViewCommandsApplied),
                )
                    .chain(),
            )
            .add_systems(EguiPrimaryContextPass, ui::ui_system)
            // The picture of a view the UI moved after painting (a double
            // click's fit), started at the frame's end, not a frame later.
            .add_systems(Last, ui::render_ahead);
    }
}

/// The one camera egui draws with. No multisampling: every shape is an
/// axis-aligned rectangle or text, and on a CPU renderer (lavapipe) 4x
/// MSAA multiplies the cost of every frame. The clear colour is the views'
/// background ([`paint::background`]): the panels under the pictures have
/// no fill of their own.
fn spawn_camera(mut c: Commands) {
    let [r, g, b, _] = paint::background().to_array();
    c.insert_resource(ClearColor(Color::srgb_u8(r, g, b)));
    c.spawn((
        Camera2d,
        Msaa::Off,
        bevy::core_pipeline::tonemapping::Tonemapping::None,
        bevy::core_pipeline::tonemapping::DebandDither::Disabled,
    ));
}

fn start_view(
    session: Res<Session>,
    mut start: ResMut<StartView>,
    mut view: ResMut<Viewport>,
    mut selection: ResMut<Selection>,
    mut ui: ResMut<UiState>,
) {
    let Some(loaded) = &session.loaded else { return };
    let columns = loaded.model.columns;
    let mut notices = Vec::new();
    // Ranges reaching past the trace are cut at its end; one wholly past
    // it is not used (the whole trace is shown), and said.
    if let Some(range) = start.columns.take() {
        match crate::view::within_trace("the column range", range, columns, "columns") {
            Ok((a, b)) => view.fit(a as f64, b as f64, 0.0),
            Err(why) => notices.push(why),
        }
    }
    if std::mem::take(&mut start.check_selection)
        && let Some(range) = selection.0
    {
        selection.0 = match crate::view::within_trace("the selection", range, columns, "columns") {
            Ok(cut) => Some(cut),
            Err(why) => {
                notices.push(why);
                None
            }
        };
    }
    if !notices.is_empty() {
        ui.notice = Some(notices.join("; "));
    }
}

/// Headless runs: wait until the picture of the view (and the tooltip, if
/// a hover is asked for) is on screen, save it, write the UI state, exit.
struct HeadlessPlugin {
    request: ScreenshotRequest,
    failure: Arc<std::sync::Mutex<Option<String>>>,
}

#[derive(Resource)]
struct Headless {
    request: ScreenshotRequest,
    frames: u32,
    ready_frames: u32,
    asked: bool,
    saved: Arc<AtomicBool>,
    failure: Arc<std::sync::Mutex<Option<String>>>,
}

impl Plugin for HeadlessPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(Headless {
            request: self.request.clone(),
            frames: 0,
            ready_frames: 0,
            asked: false,
            saved: Arc::new(AtomicBool::new(false)),
            failure: self.failure.clone(),
        })
        .add_systems(Last, headless_system);
    }
}

fn headless_system(
    mut commands: Commands,
    mut headless: ResMut<Headless>,
    report: Res<UiReport>,
    mut exit: MessageWriter<AppExit>,
) {
    headless.frames += 1;
    if headless.saved.load(Ordering::SeqCst) {
        if let Some(path) = &headless.request.state {
            let written = serde_json::to_vec_pretty(&*report)
                .map_err(std::io::Error::other)
                .and_then(|json| std::fs::write(path, json));
            if let Err(cause) = written {
                *headless.failure.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(ViewerError::State { path: path.clone(), cause }.to_string());
            }
        }
        exit.write(AppExit::Success);
        return;
    }
    if headless.asked {
        return;
    }
    if let Some(why) = &report.error {
        *headless.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        exit.write(AppExit::error());
        return;
    }
    let ready = report.complete;
    headless.ready_frames = if ready { headless.ready_frames + 1 } else { 0 };
    let give_up = headless.frames >= SCREENSHOT_MAX_FRAMES;
    if (headless.ready_frames >= 10 && headless.frames >= SCREENSHOT_MIN_FRAMES) || give_up {
        if give_up {
            *headless.failure.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("the picture was not ready after {SCREENSHOT_MAX_FRAMES} frames"));
        }
        headless.asked = true;
        let (saved, failure, path) = (headless.saved.clone(), headless.failure.clone(), headless.request.path.clone());
        commands.spawn(Screenshot::primary_window()).observe(move |captured: On<ScreenshotCaptured>| {
            let written = captured
                .image
                .clone()
                .try_into_dynamic()
                .map_err(|e| e.to_string())
                .and_then(|img| img.to_rgb8().save(&path).map_err(|e| e.to_string()));
            if let Err(e) = written {
                *failure.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(format!("cannot write {}: {e}", path.display()));
            }
            saved.store(true, Ordering::SeqCst);
        });
    }
}

//! A scripted run for measuring the viewer (`linetrace view --bench-json`):
//! time to the first picture, to the decoded trace, CPU time of the frames
//! while panning, and latency from each zoom step to the sharp picture,
//! written as JSON. `cargo bench --bench view` drives it, in the access
//! view and in the allocations view (`--allocations`): the script sees a
//! mode only through its [`UiReport`] and steers it with [`ViewCommand`]s.
//!
//! A command enters as a user's input does: the script decides it at the
//! end of a frame, asks for the next one, and sends it when that frame
//! starts, where its time is taken. Every mode applies it before its UI
//! pass ([`crate::ViewCommandsApplied`]), which shows it in that frame, as
//! it shows the frame's input.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy::window::RequestRedraw;
use serde::Serialize;

use crate::ui::UiReport;
use crate::view::ViewCommand;

/// Frames panned.
const PAN_FRAMES: usize = 240;
/// Longest wait for one zoom step's picture.
const ZOOM_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest wait for the work after a zoom step's picture.
const REST_TIMEOUT: Duration = Duration::from_secs(5);
/// Time between a zoom step's sharp picture (and the end of the work on
/// its view) and the next step: more than a frame takes lavapipe at
/// 1920x1080 here (70-110 ms), whose drawing goes on after the frame's
/// update.
const REST: Duration = Duration::from_millis(200);

/// What the run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BenchReport {
    /// From the viewer's launch ([`crate::run`] called) to the first
    /// picture on screen (preview or final).
    pub first_picture_ms: f64,
    /// From the viewer's launch to the decoded trace.
    pub decoded_ms: f64,
    /// Wall time of each frame's update (input, jobs, UI; not the GPU
    /// work) while panning, milliseconds. Background work competes for
    /// the cores, so this is noisy.
    pub pan_frame_ms: Vec<f64>,
    /// Time from one frame to the next while panning (update and drawing
    /// on the renderer, lavapipe here), milliseconds.
    pub pan_interval_ms: Vec<f64>,
    /// CPU time of each frame's UI pass on its thread while panning,
    /// milliseconds: what the UI itself costs.
    pub pan_ui_cpu_ms: Vec<f64>,
    /// Zoom steps: (columns per pixel after the step, ms from the start of
    /// the step's frame to the sharp picture, ms of that the drawing job
    /// took, columns on screen after the step). Each step starts from a
    /// window at rest (see `Phase::Rest`).
    pub zoom_ms: Vec<(f64, f64, f64, f64)>,
    /// Columns of the trace.
    pub columns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    Loading,
    Settle,
    Pan(usize),
    Zoom {
        step: u32,
        /// When the step's command went in (the start of its frame).
        sent: Instant,
        frames: u32,
        /// The columns on screen before the step: a report of these is of
        /// a frame that has not shown the step yet.
        from: (f64, f64),
    },
    /// A zoom step's picture is sharp: the next step waits for the rest of
    /// the work on this view (the row labels, and the summary of its
    /// columns for the steps in, `decoder::range_summary`) to end, and
    /// then [`REST`], as a person looks at the picture before turning the
    /// wheel again. (A step sent sooner stops the summary and is drawn
    /// from spans: `cargo bench --bench decode -- --draw` times both.)
    /// Steps sent at once measured something else: the step's picture was
    /// drawn while lavapipe still drew the last frame, on the same two
    /// cores, and while the labels' job ended, whose wake-up and the
    /// step's command made bevy_winit draw two frames.
    Rest {
        step: u32,
        since: Instant,
    },
    Done,
}

#[derive(Resource)]
struct Bench {
    out: PathBuf,
    started: Instant,
    frame_start: Instant,
    phase: Phase,
    report: BenchReport,
    /// The command for the next frame, sent when it starts.
    next: Option<ViewCommand>,
    /// Not before this (a zoom step's [`REST`]).
    not_before: Option<Instant>,
    failure: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

/// The bench script as a plugin.
pub struct BenchPlugin {
    /// Where to write the JSON.
    pub out: PathBuf,
    /// When the viewer was asked for ([`crate::run`] called): times to the
    /// first picture and the decoded trace count from here, the window's
    /// and the renderer's start included, as a user waits for them.
    pub launched: Instant,
    /// Where to report failure.
    pub failure: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl Plugin for BenchPlugin {
    fn build(&self, app: &mut App) {
        let now = Instant::now();
        app.insert_resource(Bench {
            out: self.out.clone(),
            started: self.launched,
            frame_start: now,
            phase: Phase::Loading,
            report: BenchReport::default(),
            next: None,
            not_before: None,
            failure: self.failure.clone(),
        })
        .add_systems(First, frame_start)
        .add_systems(Last, step);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A frame starts: the script's command for it goes in now, as input
/// read at the start of a frame does.
fn frame_start(mut b: ResMut<Bench>, mut commands: MessageWriter<ViewCommand>) {
    if let Some(at) = b.not_before.take() {
        // Nothing else needs this thread meanwhile: the jobs run on the
        // pool, and nothing is drawn until the command is in.
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
    }
    let now = Instant::now();
    let interval = now - b.frame_start;
    if matches!(b.phase, Phase::Pan(n) if n > 2) {
        b.report.pan_interval_ms.push(ms(interval));
    }
    b.frame_start = now;
    if let Some(command) = b.next.take() {
        commands.write(command);
        if let Phase::Zoom { sent, .. } = &mut b.phase {
            *sent = now;
        }
    }
}

/// Sends `command` at the start of the next frame, and asks for that frame
/// (input would wake the window).
fn send(bench: &mut Bench, redraw: &mut MessageWriter<RequestRedraw>, command: ViewCommand) {
    bench.next = Some(command);
    redraw.write(RequestRedraw);
}

fn step(
    mut bench: ResMut<Bench>,
    mut pacing: ResMut<crate::pacing::FramePacing>,
    (report, activity): (Res<UiReport>, Res<crate::pacing::Activity>),
    mut redraw: MessageWriter<RequestRedraw>,
    mut exit: MessageWriter<AppExit>,
) {
    let frame = bench.frame_start.elapsed();
    // Panning steps once a frame, as a drag does: frames come continuously
    // then. Otherwise the window paces itself as it does for a user.
    let panning = matches!(bench.phase, Phase::Pan(_));
    if pacing.scripted_input != panning {
        pacing.scripted_input = panning;
    }
    if let Some(e) = &report.error {
        *bench.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
        exit.write(AppExit::error());
        return;
    }
    if bench.report.first_picture_ms == 0.0 && report.picture {
        bench.report.first_picture_ms = ms(bench.started.elapsed());
    }
    // The visible columns (the access view's reads, the allocations view's
    // events or nanoseconds).
    let width = report.columns.1 - report.columns.0;
    match bench.phase {
        Phase::Loading => {
            if report.loaded {
                bench.report.decoded_ms = ms(bench.started.elapsed());
                bench.phase = Phase::Settle;
            }
        }
        Phase::Settle => {
            if report.sharp {
                // The whole trace is in view at first.
                bench.report.columns = width.round() as u64;
                send(&mut bench, &mut redraw, ViewCommand::Zoom { at: 0.5, factor: 0.05 });
                bench.phase = Phase::Pan(0);
            }
        }
        Phase::Pan(n) => {
            if n > 2 {
                bench.report.pan_frame_ms.push(ms(frame));
                bench.report.pan_ui_cpu_ms.push(report.ui_cpu_ms);
            }
            if n >= PAN_FRAMES {
                send(&mut bench, &mut redraw, ViewCommand::Reset);
                bench.phase = Phase::Zoom { step: 0, sent: Instant::now(), frames: 0, from: report.columns };
            } else {
                let dx = if (n / 60) % 2 == 0 { 0.01 } else { -0.01 };
                send(&mut bench, &mut redraw, ViewCommand::Pan(dx));
                bench.phase = Phase::Pan(n + 1);
            }
        }
        Phase::Zoom { step, sent, frames, from } => {
            let waited = sent.elapsed();
            bench.phase = Phase::Zoom { step, sent, frames: frames + 1, from };
            if std::env::var_os("LINETRACE_BENCH_TRACE").is_some() {
                eprintln!(
                    "zoom {step} frame {frames} at {:.1} ms sharp {} busy {}",
                    ms(waited),
                    report.sharp,
                    report.render_ms
                );
            }
            // Not yet sent, or not yet shown (a report of the columns before
            // the step is of a frame that has not drawn it).
            let shown = bench.next.is_none() && report.columns != from;
            if shown && report.sharp || waited > ZOOM_TIMEOUT {
                if step > 0 {
                    let per_pixel = width / (report.bitmap[2] - report.bitmap[0]).max(1.0) as f64;
                    bench.report.zoom_ms.push((per_pixel, ms(waited), report.render_ms, width));
                }
                bench.phase = if width <= crate::view::MIN_COLUMNS * 2.0 || step > 40 {
                    Phase::Done
                } else {
                    Phase::Rest { step, since: Instant::now() }
                };
            }
        }
        Phase::Rest { step, since } => {
            if *activity == crate::pacing::Activity::Idle || since.elapsed() > REST_TIMEOUT {
                bench.not_before = Some(Instant::now() + REST);
                send(&mut bench, &mut redraw, ViewCommand::Zoom { at: 0.37, factor: 0.5 });
                let from = report.columns;
                bench.phase = Phase::Zoom { step: step + 1, sent: Instant::now(), frames: 0, from };
            }
        }
        Phase::Done => {
            let written = serde_json::to_vec_pretty(&bench.report)
                .map_err(std::io::Error::other)
                .and_then(|json| std::fs::write(&bench.out, json));
            if let Err(e) = written {
                *bench.failure.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(format!("cannot write {}: {e}", bench.out.display()));
            }
            exit.write(AppExit::Success);
        }
    }
}

//! How often the window draws.
//!
//! A frame on a CPU renderer (Mesa lavapipe) costs tens of milliseconds of
//! the same cores the decoder and the background jobs run on, so the
//! viewer draws only when something changes: on input, when background
//! work ends (it wakes the window, [`crate::jobs::set_waker`]), a few frames
//! a second while a trace decodes or work runs, so an idle viewer costs
//! nothing and work in the background gets the cores.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy::window::RequestRedraw;
use bevy::winit::{EventLoopProxyWrapper, UpdateMode, WinitSettings, WinitUserEvent};
use bevy_egui::{EguiContext, EguiInput, EguiPostUpdateSet, EguiPreUpdateSet, egui};

/// What is under way, which sets how often the window draws. Each mode
/// sets it once per frame from what it runs.
#[derive(Resource, Default, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Activity {
    /// Nothing: frames follow input.
    #[default]
    Idle,
    /// A trace is being decoded: a few frames a second show its progress
    /// and preview, and leave the cores to the decoder.
    Loading,
    /// Background work whose result the next frames show: drawn when it
    /// ends, and a few frames a second meanwhile.
    Working,
}

impl Activity {
    /// From what is running; loading counts first (while it lasts, the
    /// preview jobs it starts do not make the window draw faster).
    pub fn of(loading: bool, working: bool) -> Activity {
        match (loading, working) {
            (true, _) => Activity::Loading,
            (false, true) => Activity::Working,
            (false, false) => Activity::Idle,
        }
    }
}

/// How long an idle window waits for input before it draws again.
const IDLE_WAIT: Duration = Duration::from_millis(250);

/// Time between frames while a trace decodes (input still draws at once):
/// the progress bar and the preview move once a second. Continuous frames
/// (~100 ms of CPU each at 1920x1080 on lavapipe then, about 40 ms since the
/// panels lost their fills and egui's shader its `pow`) took one of the two
/// cores and doubled the time to the decoded trace; five a second took a
/// third; two a second, and a frame for each preview picture, about a
/// second of the 100M-read benchmark trace's eight (no frames at all:
/// 7.15-7.3 s against 8.0-8.5 s).
pub const LOADING_FRAME: Duration = Duration::from_millis(1000);

/// Time between frames while background work runs (its end draws at
/// once). Continuous frames, as before, cost lavapipe ~40 ms of CPU each
/// at 1920x1080: they took about half of the two cores from the picture
/// being drawn, and a zoom step on a 100M-read trace took twice as long to
/// turn sharp as the picture's drawing alone.
///
/// These frames come from a timer ([`wake_in`]), not from a winit update
/// mode of their own: winit draws a frame at once whenever the mode
/// changes, and going from idle to working and back drew frames that
/// showed nothing new on the cores the new picture was being drawn on (a
/// 100M-read trace's slowest zoom step drew three frames before its
/// picture; now one, the stretched old picture, with
/// [`forget_answered_redraws`]).
pub const WORKING_FRAME: Duration = Duration::from_millis(200);

/// A wake-up of the window at a time to come (at most one pending).
struct Timer {
    due: Mutex<Option<Instant>>,
    changed: Condvar,
}

static TIMER: OnceLock<Arc<Timer>> = OnceLock::new();

/// The timer, and its thread on first use.
fn timer() -> &'static Arc<Timer> {
    TIMER.get_or_init(|| {
        let timer = Arc::new(Timer { due: Mutex::new(None), changed: Condvar::new() });
        let t = timer.clone();
        let spawned = std::thread::Builder::new().name("linetrace-pacer".into()).spawn(move || {
            let mut due = t.due.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                due = match *due {
                    None => t.changed.wait(due).unwrap_or_else(|p| p.into_inner()),
                    Some(at) if at <= Instant::now() => {
                        *due = None;
                        drop(due);
                        crate::jobs::wake_window();
                        t.due.lock().unwrap_or_else(|p| p.into_inner())
                    }
                    Some(at) => t.changed.wait_timeout(due, at - Instant::now()).unwrap_or_else(|p| p.into_inner()).0,
                };
            }
        });
        if let Err(e) = spawned {
            // Frames still come on input, at the idle pace and when work ends.
            warn!("no timer for frames while work runs: {e}");
        }
        timer
    })
}

/// Wakes the window `after` from now (instead of any wake-up pending): a
/// frame comes when no other frame came for `after`.
fn wake_in(after: Duration) {
    let timer = timer();
    *timer.due.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + after);
    timer.changed.notify_one();
}

/// Forgets the pending wake-up, if any.
fn cancel_wake() {
    if let Some(timer) = TIMER.get() {
        *timer.due.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Paces the window's frames by [`Activity`].
pub struct PacingPlugin {
    /// Draw continuously whenever no trace is decoding (headless runs,
    /// which count frames).
    pub always_draw: bool,
}

impl Plugin for PacingPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(FramePacing { always_draw: self.always_draw, scripted_input: false })
            .init_resource::<Activity>()
            .init_resource::<InputShown>()
            .init_resource::<EguiRepaintAsked>()
            .add_systems(Startup, wake_on_finished_work)
            .add_systems(
                PreUpdate,
                (
                    take_egui_repaint_requests.after(EguiPreUpdateSet::InitContexts),
                    drop_unchanged_modifiers.after(EguiPreUpdateSet::ProcessInput),
                )
                    .before(EguiPreUpdateSet::BeginPass),
            )
            .add_systems(PostUpdate, answer_egui_repaint.after(EguiPostUpdateSet::ProcessOutput))
            .add_systems(First, forget_answered_redraws)
            .add_systems(Last, pace_frames);
    }
}

/// Empties the [`RequestRedraw`] messages when a frame starts: winit has
/// answered them at the end of the update that wrote them. It reads them
/// with a new cursor after every update, and messages live two updates, so
/// each one drew a second frame that showed nothing new.
fn forget_answered_redraws(mut redraws: ResMut<Messages<RequestRedraw>>) {
    redraws.clear();
}

/// Whether the frame painted the pictures at a view they were not painted
/// at before (moved by the frame's input, or by commands applied before
/// its UI pass), with nothing left for a later frame (a mode sets it in
/// its UI pass; [`answer_egui_repaint`] reads and clears it).
///
/// egui draws a second frame after any input, because its widgets answer
/// input one frame late. After a zoom or a pan that frame shows nothing
/// new: the input's own frame showed the moved view (the old picture
/// stretched, or the new one), and a new picture wakes the window when it
/// is drawn. On lavapipe that frame cost 70-110 ms of CPU on the two cores
/// the new picture was being drawn on. Other input (a button, a key that
/// opens a panel) keeps its second frame.
#[derive(Resource, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputShown(pub bool);

/// Set when egui asks to be drawn again at once; answered once the frame's
/// UI pass is over, by [`answer_egui_repaint`].
#[derive(Resource, Default)]
struct EguiRepaintAsked(Arc<AtomicBool>);

/// Takes egui's requests for an immediate frame from bevy_egui, which
/// wakes the window for each (before the UI pass has run, so before
/// anyone knows whether the frame will need a successor): they set
/// [`EguiRepaintAsked`] instead. Requests for a frame later are ignored,
/// as bevy_egui ignores them.
fn take_egui_repaint_requests(mut contexts: Query<&mut EguiContext, Added<EguiContext>>, asked: Res<EguiRepaintAsked>) {
    for mut context in &mut contexts {
        let asked = asked.0.clone();
        context.get_mut().set_request_repaint_callback(move |info| {
            if info.delay.is_zero() {
                asked.store(true, Ordering::Relaxed);
            }
        });
    }
}

/// Answers egui's wish for another frame, unless the frame's input was
/// already shown ([`InputShown`]): then the frame bevy_egui asked for is
/// dropped too.
fn answer_egui_repaint(
    mut shown: ResMut<InputShown>,
    asked: Res<EguiRepaintAsked>,
    mut redraws: ResMut<Messages<RequestRedraw>>,
) {
    let asked = asked.0.swap(false, Ordering::Relaxed);
    if std::mem::take(&mut shown.0) {
        redraws.clear();
    } else if asked {
        redraws.write(RequestRedraw);
    }
}

/// Why frames may be drawn continuously whatever the activity (but while
/// a trace decodes).
#[derive(Resource)]
pub struct FramePacing {
    /// Always: headless screenshot runs, which count frames.
    always_draw: bool,
    /// While input is scripted each frame (the bench panning, as a drag
    /// gives input each frame).
    pub scripted_input: bool,
}

/// Lets finished background work wake the window (there is no event loop
/// to wake without a window).
fn wake_on_finished_work(proxy: Option<Res<EventLoopProxyWrapper>>) {
    if let Some(proxy) = proxy {
        let proxy = (**proxy).clone();
        crate::jobs::set_waker(move || {
            // Fails only when the event loop is gone: nothing to draw then.
            let _ = proxy.send_event(WinitUserEvent::WakeUp);
        });
    }
}

fn pace_frames(activity: Res<Activity>, pacing: Res<FramePacing>, mut settings: ResMut<WinitSettings>) {
    let (focused, unfocused) = match *activity {
        Activity::Loading => (UpdateMode::reactive(LOADING_FRAME), UpdateMode::reactive(LOADING_FRAME)),
        _ if pacing.always_draw || pacing.scripted_input => (UpdateMode::Continuous, UpdateMode::Continuous),
        // Working differs from idle by the timer's frames only (see
        // `WORKING_FRAME`).
        Activity::Working | Activity::Idle => {
            (UpdateMode::reactive(IDLE_WAIT), UpdateMode::reactive_low_power(IDLE_WAIT * 4))
        }
    };
    if *activity == Activity::Working {
        wake_in(WORKING_FRAME);
    } else {
        cancel_wake();
    }
    if settings.focused_mode != focused || settings.unfocused_mode != unfocused {
        settings.focused_mode = focused;
        settings.unfocused_mode = unfocused;
    }
}

/// bevy_egui 0.42 sends egui a `ModifiersChanged` event every frame,
/// changed or not; egui takes any input event as a reason to repaint at
/// once, and bevy_egui turns that into a redraw request, so the window
/// never rested (it drew continuously even when idle, and while decoding).
/// Only a change of the modifier keys goes through.
fn drop_unchanged_modifiers(
    mut inputs: Query<(Entity, &mut EguiInput)>,
    mut last: Local<HashMap<Entity, egui::Modifiers>>,
) {
    for (entity, mut input) in &mut inputs {
        let known = last.get(&entity).copied();
        let mut seen = known;
        input.events.retain(|event| match event {
            egui::Event::ModifiersChanged(m) => {
                let changed = seen != Some(*m);
                seen = Some(*m);
                changed
            }
            _ => true,
        });
        if let Some(m) = seen {
            last.insert(entity, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::wakes;

    /// A redraw asked for in an update is there when the update ends (winit
    /// reads it then), and gone when the next one starts.
    #[test]
    fn redraw_requests_are_answered_once() {
        let mut app = App::new();
        app.add_plugins(MinimalPlugins)
            .add_message::<RequestRedraw>()
            .add_systems(First, forget_answered_redraws)
            .add_systems(Update, |mut redraw: MessageWriter<RequestRedraw>, mut asked: Local<bool>| {
                if !*asked {
                    *asked = true;
                    redraw.write(RequestRedraw);
                }
            });
        let stored = |app: &App| app.world().resource::<Messages<RequestRedraw>>().len();
        app.update();
        assert_eq!(stored(&app), 1, "there for winit after the update that asked");
        app.update();
        assert_eq!(stored(&app), 0, "gone before the next update could answer it again");
    }

    /// egui's wish for a frame after input is answered with one, unless
    /// the frame already showed where its input moved the view: then the
    /// request bevy_egui wrote for it is dropped as well. Once per frame.
    #[test]
    fn egui_repaints_are_dropped_after_shown_input_only() {
        /// Stands for bevy_egui's output, which asks for a frame when
        /// egui does.
        #[derive(Resource, Default)]
        struct EguiWrites(bool);
        let mut app = App::new();
        app.add_plugins(MinimalPlugins)
            .add_message::<RequestRedraw>()
            .init_resource::<InputShown>()
            .init_resource::<EguiRepaintAsked>()
            .init_resource::<EguiWrites>()
            .add_systems(First, forget_answered_redraws)
            .add_systems(Update, |w: Res<EguiWrites>, mut redraw: MessageWriter<RequestRedraw>| {
                if w.0 {
                    redraw.write(RequestRedraw);
                }
            })
            .add_systems(PostUpdate, answer_egui_repaint);
        let frame = |app: &mut App, asked: bool, egui_writes: bool, shown: bool| {
            app.world().resource::<EguiRepaintAsked>().0.store(asked, Ordering::Relaxed);
            app.world_mut().resource_mut::<EguiWrites>().0 = egui_writes;
            app.world_mut().resource_mut::<InputShown>().0 = shown;
            app.update();
            app.world().resource::<Messages<RequestRedraw>>().len()
        };
        assert_eq!(frame(&mut app, false, false, false), 0, "nothing asked");
        assert_eq!(frame(&mut app, true, false, false), 1, "egui asked: a frame");
        assert_eq!(frame(&mut app, true, true, false), 2, "asked twice, answered (winit reads one)");
        assert_eq!(frame(&mut app, true, true, true), 0, "the input was shown: no frame");
        assert!(!app.world().resource::<InputShown>().0, "read once");
        assert!(!app.world().resource::<EguiRepaintAsked>().0.load(Ordering::Relaxed), "answered");
        assert_eq!(frame(&mut app, false, false, true), 0, "shown, nothing asked");
    }

    /// The timer wakes the window once when due, and not when cancelled.
    #[test]
    fn the_working_timer_wakes_the_window_once() {
        let (before, _turn) = wakes::count();
        wake_in(Duration::from_millis(10));
        assert!(wakes::until(|| wakes::since(before) > 0), "it comes");
        assert_eq!(wakes::since(before), 1, "due after 10 ms");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(wakes::since(before), 1, "once");
        wake_in(Duration::from_millis(30));
        cancel_wake();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(wakes::since(before), 1, "a cancelled wake-up does not come");
    }
}

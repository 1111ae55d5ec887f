//! How often the window draws.
//!
//! A frame on a CPU renderer (Mesa lavapipe) costs tens of milliseconds of
//! the same cores the decoder and the background jobs run on, so the
//! viewer draws only when something changes: on input, when background
//! work ends (it wakes the window, [`crate::jobs::set_waker`]), a few frames
//! a second while a trace decodes or work runs, so an idle viewer costs
//! nothing and work in the background gets the cores.

use std::collections::HashMap;
use std::time::Duration;

use bevy::prelude::*;
use bevy::winit::{EventLoopProxyWrapper, UpdateMode, WinitSettings, WinitUserEvent};
use bevy_egui::{EguiInput, EguiPreUpdateSet, egui};

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
/// the progress bar moves twice a second. Continuous frames (~100 ms of CPU
/// each at 1920x1080 on lavapipe then, about 40 ms since the panels lost
/// their fills and egui's shader its `pow`) took one of the two cores and
/// doubled the time to the decoded trace; five a second took a third.
pub const LOADING_FRAME: Duration = Duration::from_millis(500);

/// Time between frames while background work runs (its end draws at
/// once). Continuous frames, as before, cost lavapipe ~40 ms of CPU each
/// at 1920x1080: they took about half of the two cores from the picture
/// being drawn, and a zoom step on a 100M-read trace took twice as long to
/// turn sharp as the picture's drawing alone.
pub const WORKING_FRAME: Duration = Duration::from_millis(200);

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
            .add_systems(Startup, wake_on_finished_work)
            .add_systems(
                PreUpdate,
                drop_unchanged_modifiers.after(EguiPreUpdateSet::ProcessInput).before(EguiPreUpdateSet::BeginPass),
            )
            .add_systems(Last, pace_frames);
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
        Activity::Working => (UpdateMode::reactive(WORKING_FRAME), UpdateMode::reactive(WORKING_FRAME)),
        Activity::Idle => (UpdateMode::reactive(IDLE_WAIT), UpdateMode::reactive_low_power(IDLE_WAIT * 4)),
    };
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

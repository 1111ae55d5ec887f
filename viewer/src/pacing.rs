//! How often the window draws.
//!
//! A frame on a CPU renderer (Mesa lavapipe) costs tens of milliseconds of
//! the same cores the decoder and the background jobs run on, so the
//! viewer draws only when something changes: continuously while a job's
//! result is coming, a few frames a second while a trace decodes, and on
//! input otherwise, so an idle viewer costs nothing.

use std::collections::HashMap;
use std::time::Duration;

use bevy::prelude::*;
use bevy::winit::{UpdateMode, WinitSettings};
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
    /// Background work whose result the next frames show: draw
    /// continuously until it is in.
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

/// Paces the window's frames by [`Activity`].
pub struct PacingPlugin {
    /// Draw continuously whenever no trace is decoding (headless and
    /// measuring runs, which count frames).
    pub always_draw: bool,
}

impl Plugin for PacingPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(FramePacing { always_draw: self.always_draw })
            .init_resource::<Activity>()
            .add_systems(
                PreUpdate,
                drop_unchanged_modifiers.after(EguiPreUpdateSet::ProcessInput).before(EguiPreUpdateSet::BeginPass),
            )
            .add_systems(Last, pace_frames);
    }
}

#[derive(Resource)]
struct FramePacing {
    always_draw: bool,
}

fn pace_frames(activity: Res<Activity>, pacing: Res<FramePacing>, mut settings: ResMut<WinitSettings>) {
    let (focused, unfocused) = match *activity {
        Activity::Loading => (UpdateMode::reactive(LOADING_FRAME), UpdateMode::reactive(LOADING_FRAME)),
        _ if pacing.always_draw => (UpdateMode::Continuous, UpdateMode::Continuous),
        Activity::Working => (UpdateMode::Continuous, UpdateMode::Continuous),
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

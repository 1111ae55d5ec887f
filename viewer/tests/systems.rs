//! The viewer's systems under MinimalPlugins: no window, no GPU. Zoom and
//! pan maths through messages, range selection, and search.

use std::path::{Path, PathBuf};

use bevy::prelude::*;
use bevy::window::RequestRedraw;
use decoder::model::{DecodeOptions, Model};
use decoder::symbols::SymbolPaths;
use viewer::search::{SearchCommand, SearchState, apply_search_commands};
use viewer::session::Session;
use viewer::view::{Selection, ViewCommand, Viewport, apply_view_commands};
use viewer::work::Work;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/array_sweep_work.lntrace")
}

fn app(view: Viewport) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .insert_resource(view)
        .init_resource::<Selection>()
        .add_message::<ViewCommand>()
        .add_message::<RequestRedraw>()
        .add_systems(Update, apply_view_commands);
    app
}

fn send(app: &mut App, command: ViewCommand) {
    app.world_mut().write_message(command);
    app.update();
}

#[test]
fn zoom_pan_and_reset_through_messages() {
    let mut app = app(Viewport::whole(1000.0, 64.0));
    send(&mut app, ViewCommand::Zoom { at: 0.25, factor: 0.5 });
    let v = *app.world().resource::<Viewport>();
    assert_eq!(v.width(), 500.0);
    assert!((v.column_at(0.25) - 250.0).abs() < 1e-9, "the column under the pointer stays: {v:?}");
    send(&mut app, ViewCommand::Pan(0.5));
    assert_eq!(app.world().resource::<Viewport>().columns, (375.0, 875.0));
    send(&mut app, ViewCommand::Fit { from: 100.0, to: 200.0 });
    let v = *app.world().resource::<Viewport>();
    assert!(v.columns.0 < 100.0 && v.columns.1 > 200.0 && v.width() < 110.0, "{v:?}");
    send(&mut app, ViewCommand::Reset);
    assert_eq!(app.world().resource::<Viewport>().columns, (0.0, 1000.0));
}

#[test]
fn a_selection_is_ordered_and_never_empty() {
    let mut app = app(Viewport::whole(1000.0, 64.0));
    send(&mut app, ViewCommand::Select(Some((300, 100))));
    assert_eq!(app.world().resource::<Selection>().0, Some((100, 300)), "dragged right to left");
    send(&mut app, ViewCommand::Select(Some((5, 5))));
    assert_eq!(app.world().resource::<Selection>().0, None, "a click is no range");
}

#[test]
fn search_steps_through_matching_frames_and_fits_them() {
    let model = Model::decode(&fixture(), &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let columns = model.columns as f64;
    let work_entry = model.call_tree.frames[0].function;
    let session = Session::from_model(fixture(), model, SymbolPaths::default());
    let mut work = Work::default();
    work.names.insert(work_entry, "work".to_string());
    let mut view = Viewport::whole(columns, 64.0);
    view.fit(10.0, 20.0, 0.0);
    let mut app = app(view);
    app.insert_resource(session)
        .insert_resource(work)
        .init_resource::<SearchState>()
        .add_message::<SearchCommand>()
        .add_systems(Update, apply_search_commands.before(apply_view_commands));
    app.world_mut().write_message(SearchCommand::Open);
    app.world_mut().write_message(SearchCommand::Set("wor".to_string()));
    app.update();
    assert!(app.world().resource::<SearchState>().open);
    app.world_mut().write_message(SearchCommand::Step(1));
    app.update();
    assert_eq!(app.world().resource::<SearchState>().current, Some(0));
    assert_eq!(app.world().resource::<Viewport>().columns, (0.0, columns), "fitted to the one frame of work");
    app.world_mut().write_message(SearchCommand::Set("nothing".to_string()));
    app.world_mut().write_message(SearchCommand::Step(1));
    app.update();
    assert_eq!(app.world().resource::<SearchState>().current, None);
}

/// The systems of each schedule on a thread of their own, recording where
/// they ran, over `frames` frames.
fn threads_systems_ran_on(
    plugin: Option<viewer::SystemsOnTheFrameThread>,
    frames: usize,
) -> Vec<std::thread::ThreadId> {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    // Independent systems: a multi-threaded executor may run them at once.
    for _ in 0..16 {
        let seen = seen.clone();
        app.add_systems(Update, move || seen.lock().expect("not poisoned").push(std::thread::current().id()));
    }
    if let Some(plugin) = plugin {
        app.add_plugins(plugin);
    }
    app.finish();
    app.cleanup();
    for _ in 0..frames {
        app.update();
    }
    let mut threads = seen.lock().expect("not poisoned").clone();
    threads.sort_by_key(|t| format!("{t:?}"));
    threads.dedup();
    threads
}

#[test]
fn every_system_runs_on_the_frame_thread() {
    let here = std::thread::current().id();
    assert_eq!(threads_systems_ran_on(Some(viewer::SystemsOnTheFrameThread), 20), vec![here]);
    // The check can see another thread: without the plugin, systems run on
    // the compute pool too.
    let pooled = threads_systems_ran_on(None, 20);
    assert!(pooled.iter().any(|t| *t != here), "{pooled:?}");
}

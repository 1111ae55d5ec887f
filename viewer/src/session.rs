//! The trace being viewed: decoding it (on a thread of its own: it is one
//! long job) with a live preview of the summary, and decoding it again when
//! a setting that shapes the model changes, keeping the old model on screen
//! meanwhile.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use decoder::model::{DecodeOptions, Model};
use decoder::pyramid::Preview;
use decoder::symbols::{SymbolPaths, Symbolizer};

use crate::view::Viewport;

/// A decoded trace, shared with background work.
#[derive(Clone)]
pub struct Loaded {
    /// The model.
    pub model: Arc<Model>,
    /// Its symbols.
    pub symbols: Arc<Symbolizer>,
    /// Changes with every decoding: results of background work carry it.
    pub generation: u32,
    /// How long decoding took.
    pub decode_time: Duration,
    /// Rows the whole call tree's flamegraph needs ([`Loaded::flame_depth`]).
    tree_height: u32,
}

impl Loaded {
    /// A decoded trace, and its symbols.
    pub fn new(model: Model, symbols: Arc<Symbolizer>, generation: u32, decode_time: Duration) -> Loaded {
        let tree_height = decoder::calltree::height(&model.call_tree.frames);
        Loaded { model: Arc::new(model), symbols, generation, decode_time, tree_height }
    }

    /// The flamegraph rows a view lays out, given the rows the newest
    /// picture's frames (those of its view) need: those of the whole call
    /// tree, or of the picture if more (frames the tree dropped as too
    /// narrow, rebuilt for a view zoomed in), at least one.
    ///
    /// Why the whole tree's: the bitmap gets the height the flamegraph
    /// leaves. Laid out by the picture's frames alone, a zoom step that
    /// changed how deep the frames in view go drew its picture twice, for
    /// the old bitmap height and then for the new (the 10M-read compare
    /// session's step to 103 columns a pixel: 288-350 ms to the sharp
    /// pictures, against 112-134 ms for the next step). The rows also stay
    /// in place from one zoom to the next; the cost is empty flamegraph
    /// rows under a shallow part of a deep tree.
    pub fn flame_depth(&self, picture_height: Option<u32>) -> u32 {
        self.tree_height.max(picture_height.unwrap_or(0)).max(1)
    }

    /// What a status line adds about this trace beside its name and view:
    /// that it is cut or damaged, and what its symbols could not give.
    pub fn notes(&self) -> Vec<String> {
        [self.model.status_note(), self.symbol_note()].into_iter().flatten().collect()
    }

    /// What the symbols could not give (an unreadable or changed module:
    /// its code shows as ??; no debug info: no source lines), for a status
    /// line: the first warning, and how many more. The command line prints
    /// them all; the window would otherwise show "??" without a reason.
    fn symbol_note(&self) -> Option<String> {
        let warnings = self.symbols.warnings();
        let first = warnings.first()?;
        Some(match warnings.len() {
            1 => first.clone(),
            n => format!("{first} (and {} more symbol warnings)", n - 1),
        })
    }
}

/// A decoding under way.
pub struct Loading {
    /// The decoding thread: it puts its outcome in `outcome`, then wakes
    /// the window, then ends.
    handle: JoinHandle<()>,
    /// The decoded model or why not, put here before the window is woken:
    /// the frame the wake-up draws finds it (the thread itself is finished
    /// only a moment later, and a frame that waited for that would leave
    /// the decoded trace to the next paced frame, up to a second later).
    outcome: Arc<std::sync::Mutex<Option<Result<Model, String>>>>,
    /// The summary so far.
    pub preview: Arc<Preview>,
    /// Bytes of the file read so far.
    pub bytes: Arc<AtomicU64>,
    /// File size.
    pub total_bytes: u64,
    /// When it started.
    pub started: Instant,
    /// With what settings.
    pub options: DecodeOptions,
}

/// The trace of this window.
#[derive(Resource)]
pub struct Session {
    /// The trace file.
    pub path: PathBuf,
    /// Settings the current (or coming) model is decoded with.
    pub options: DecodeOptions,
    /// Where modules and debug files are looked for.
    pub symbol_paths: SymbolPaths,
    /// The decoded trace, once there is one.
    pub loaded: Option<Loaded>,
    /// Decoding in progress.
    pub loading: Option<Loading>,
    /// Why decoding failed, if it did.
    pub error: Option<String>,
    generation: u32,
    /// Whether decodings copy the heap blocks so far into their preview
    /// ([`Session::want_heap_preview`]).
    heap_preview: bool,
}

impl Session {
    /// A session that starts decoding `path`.
    pub fn open(path: PathBuf, options: DecodeOptions, symbol_paths: SymbolPaths) -> Session {
        let mut s = Session {
            path,
            options,
            symbol_paths,
            loaded: None,
            loading: None,
            error: None,
            generation: 0,
            heap_preview: false,
        };
        s.start();
        s
    }

    /// A session over a model decoded already (tests, other tools).
    pub fn from_model(path: PathBuf, model: Model, symbol_paths: SymbolPaths) -> Session {
        let symbols = Arc::new(Symbolizer::with_paths(&model.modules, symbol_paths.clone()));
        let options = DecodeOptions {
            working_set: model.working_set.config,
            cache: model.cache.config,
            ..DecodeOptions::default()
        };
        Session {
            path,
            options,
            symbol_paths,
            loaded: Some(Loaded::new(model, symbols, 1, Duration::ZERO)),
            loading: None,
            error: None,
            generation: 1,
            heap_preview: false,
        }
    }

    /// Decodes again with `options` (a working-set setting changed).
    pub fn redecode(&mut self, options: DecodeOptions) {
        self.options = options;
        self.start();
    }

    /// Asks this decoding and the next ones for copies of the heap blocks
    /// so far (the allocations view draws them while the trace decodes),
    /// and wakes the window when one comes: while decoding, frames are a
    /// second apart ([`crate::pacing::LOADING_FRAME`]).
    pub fn want_heap_preview(&mut self) {
        self.heap_preview = true;
        if let Some(l) = &self.loading {
            watch_heap_preview(&l.preview);
        }
    }

    fn start(&mut self) {
        let preview = Arc::new(Preview::default());
        if self.heap_preview {
            watch_heap_preview(&preview);
        }
        let bytes = Arc::new(AtomicU64::new(0));
        let total_bytes = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        let (path, options, p, b) = (self.path.clone(), self.options, preview.clone(), bytes.clone());
        let outcome = Arc::new(std::sync::Mutex::new(None));
        let slot = outcome.clone();
        let handle = std::thread::Builder::new().name("linetrace-decode".into()).spawn(move || {
            let model = Model::decode_with_preview(&path, &options, &mut |done| b.store(done, Ordering::Relaxed), p)
                .map_err(|e| decoder::symbols::error_chain(&e));
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(model);
            // Frames are a second apart while loading: show the
            // decoded trace (or the error) now.
            crate::jobs::wake_window();
        });
        match handle {
            Ok(handle) => {
                self.loading = Some(Loading {
                    handle,
                    outcome,
                    preview,
                    bytes,
                    total_bytes,
                    started: Instant::now(),
                    options: self.options,
                })
            }
            Err(e) => self.error = Some(format!("cannot start decoding: {e}")),
        }
    }

    /// Fraction of the file decoded, while decoding.
    pub fn progress(&self) -> Option<f64> {
        self.loading.as_ref().map(|l| l.bytes.load(Ordering::Relaxed) as f64 / l.total_bytes.max(1) as f64)
    }
}

/// Asks `preview` for the heap blocks so far, and wakes the window each
/// time a new copy comes, from a thread of its own that checks every
/// [`HEAP_PREVIEW_POLL`] (a wait of no CPU to speak of) until the preview
/// is dropped: the decoding and the session are done with it.
fn watch_heap_preview(preview: &Arc<Preview>) {
    preview.want_heap();
    let watched = Arc::downgrade(preview);
    let watcher = std::thread::Builder::new().name("linetrace-heap-preview".into()).spawn(move || {
        let mut seen = 0;
        while let Some(preview) = watched.upgrade() {
            let serial = preview.heap().map_or(0, |h| h.serial);
            drop(preview);
            if serial > seen {
                seen = serial;
                crate::jobs::wake_window();
            }
            std::thread::sleep(HEAP_PREVIEW_POLL);
        }
    });
    // Without the thread, the copy shows at the next loading frame.
    drop(watcher);
}

/// How often the heap preview's watcher looks for a new copy.
const HEAP_PREVIEW_POLL: Duration = Duration::from_millis(10);

/// A session started before the app is built, for the plugin of its mode
/// to take when it builds (a plugin builds from `&self`). Why: decoding
/// then runs while Bevy, the window and the renderer start (150-350 ms of
/// the main thread on lavapipe), instead of after them. The allocations
/// view of the view bench's heap_mix trace, timed from [`crate::run`]:
/// first picture 1,373 -> 1,176 ms, decoded 830 -> 669 ms (means of 4
/// alternating sessions).
pub struct Opened {
    path: PathBuf,
    options: DecodeOptions,
    symbol_paths: SymbolPaths,
    session: std::sync::Mutex<Option<Session>>,
}

impl Opened {
    /// Starts decoding `path`.
    pub fn start(path: PathBuf, options: DecodeOptions, symbol_paths: SymbolPaths) -> Opened {
        let session = Session::open(path.clone(), options, symbol_paths.clone());
        Opened { path, options, symbol_paths, session: std::sync::Mutex::new(Some(session)) }
    }

    /// The session started; a new one if it was taken already (a plugin
    /// built twice).
    pub fn take(&self) -> Session {
        let started = self.session.lock().unwrap_or_else(|e| e.into_inner()).take();
        started.unwrap_or_else(|| Session::open(self.path.clone(), self.options, self.symbol_paths.clone()))
    }
}

/// Takes in a finished decoding.
pub fn poll_decoding(mut session: ResMut<Session>, mut view: ResMut<Viewport>) {
    session.poll(&mut view);
}

impl Session {
    /// Takes in a finished decoding, fitting `view` to the new model's
    /// extent; true when a new model arrived.
    pub fn poll(&mut self, view: &mut Viewport) -> bool {
        let Some(loading) = self.loading.as_ref() else { return false };
        let outcome = loading.outcome.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Finished without an outcome: the decoder panicked (a bug; the
        // message is on stderr).
        let Some(outcome) =
            outcome.or_else(|| loading.handle.is_finished().then(|| Err("decoding failed unexpectedly".to_string())))
        else {
            return false;
        };
        let Some(loading) = self.loading.take() else { return false };
        let elapsed = loading.started.elapsed();
        // Done or about to be: nothing to wait for.
        drop(loading.handle);
        match outcome {
            Ok(model) => {
                self.generation += 1;
                let symbols = Arc::new(Symbolizer::with_paths(&model.modules, self.symbol_paths.clone()));
                view.set_extent(model.columns as f64, f64::from(model.metrics.max_rows.max(1)));
                self.loaded = Some(Loaded::new(model, symbols, self.generation, elapsed));
                self.error = None;
                return true;
            }
            Err(e) => self.error = Some(e),
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_rt::format::{AccessKind, Event, Implied, Metadata, Site, TraceWriter, Trailer};

    /// The end of a decoding wakes the window (frames are a second
    /// apart while loading), and the frame it wakes takes the model in,
    /// even if the decoding thread has not quite ended yet.
    #[test]
    fn finished_decoding_wakes_the_window() {
        let path = std::env::temp_dir().join(format!("linetrace-session-{}.lntrace", std::process::id()));
        let mut w =
            TraceWriter::new(std::fs::File::create(&path).expect("create"), &Metadata::new("t")).expect("header");
        let site =
            w.add_site(Site { pc: 0x10, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
        w.push(1, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x8000 }).expect("push");
        for i in 0..100u64 {
            w.push(1, &Event::Access { site, addr: i * 8 }).expect("push");
        }
        w.finish(&Trailer::default()).expect("finish");
        let (before, _turn) = crate::jobs::wakes::count();
        let mut session = Session::open(path.clone(), DecodeOptions::default(), SymbolPaths::default());
        let start = Instant::now();
        while crate::jobs::wakes::since(before) == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "decoding a 100-read trace takes seconds");
            std::thread::yield_now();
        }
        assert!(session.poll(&mut Viewport::default()), "the frame the wake-up draws takes the model in");
        assert_eq!(crate::jobs::wakes::since(before), 1);
        assert_eq!(session.loaded.as_ref().map(|l| l.model.total.reads), Some(100));
        let _ = std::fs::remove_file(&path);
    }

    /// The flamegraph is laid out for the whole call tree, whatever the
    /// newest picture's frames: a zoom into a shallow part keeps the
    /// bitmap's height (and its picture); only frames deeper than the tree
    /// (dropped as narrow, rebuilt for a view) deepen it.
    #[test]
    fn the_flamegraph_is_laid_out_for_the_whole_tree() {
        let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/lookup_hash_work.lntrace");
        let model = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
        let symbols = Arc::new(Symbolizer::new(&model.modules));
        let loaded = Loaded::new(model, symbols, 1, Duration::ZERO);
        let frames = &loaded.model.call_tree.frames;
        let tree = decoder::calltree::height(frames);
        assert!(tree >= 2, "the fixture calls functions from work: {tree} levels");
        let root = decoder::calltree::height(&frames[..1]);
        assert_eq!(root, 1);
        assert_eq!(loaded.flame_depth(Some(root)), tree, "a picture of the root alone");
        assert_eq!(loaded.flame_depth(None), tree, "no picture yet");
        let mut deeper = frames[..1].to_vec();
        deeper[0].depth = tree + 2;
        let deeper = decoder::calltree::height(&deeper);
        assert_eq!(loaded.flame_depth(Some(deeper)), tree + 3, "frames deeper than the stored tree");
        let mut flat = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
        flat.call_tree.frames.clear();
        let symbols = Arc::new(Symbolizer::new(&flat.modules));
        assert_eq!(Loaded::new(flat, symbols, 2, Duration::ZERO).flame_depth(None), 1, "at least one row");
    }
}

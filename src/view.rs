//! `linetrace view` and `linetrace demo`: the viewer, on screen or
//! offscreen.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cli::{DemoArgs, ViewArgs};
use crate::output::{PendingOutput, Replace};

/// Opens the viewer (or draws a screenshot) of a trace.
pub fn view(args: ViewArgs) -> Result<()> {
    // Both reads refuse a pipe given as a trace. `None` for a file without
    // a header: left to the viewer, which says what is wrong with it.
    let a_meta = crate::progress::header(&args.file)?;
    if let Some(b) = &args.compare
        && let (Some(a_meta), Some(b_meta)) = (&a_meta, crate::progress::header(b)?)
    {
        crate::heap::refuse_mixed_kinds((&args.file, a_meta), (b, &b_meta), "view A B")?;
    }
    if args.compare.is_some() {
        crate::heap::refuse_heap_options(
            &args.heap_options_given(),
            "view A B compares reads (a heap: view --allocations FILE)",
        )?;
    } else if !args.allocations {
        crate::heap::refuse_heap_options_for_reads(&args.heap_options_given(), &args.file, a_meta.as_ref(), "view")?;
    }
    let inputs: Vec<&Path> = std::iter::once(args.file.as_path()).chain(args.compare.as_deref()).collect();
    let replace = if args.force { Replace::Anything } else { Replace::NotTracesOrPrograms };
    let json = [args.state.as_deref(), args.bench_json.as_deref()];
    check_outputs(args.screenshot.as_deref(), json, &inputs, replace)?;
    let mut options = viewer::ViewerOptions::new(args.file.clone());
    options.decode = args.decode.options();
    options.decode.validate().map_err(anyhow::Error::msg)?;
    options.symbol_paths = args.decode.symbol_paths();
    options.size = args.size;
    options.columns = args.columns;
    options.addresses = args.addresses;
    options.bins = args.correlate.bins.map(Into::into);
    options.cursors = args.correlate.cursors.clone();
    options.cursor_strength = args.correlate.cursor_strength;
    options.selection = args.select;
    options.stats = args.stats;
    options.screenshot = args.screenshot.map(|path| viewer::ScreenshotRequest {
        path,
        state: args.state,
        hover: args.hover,
        open_source: args.open_source,
    });
    options.bench = args.bench_json;
    // A trace of `record --allocations` opens the allocations view, the
    // only one with something to show (said on stderr).
    options.allocations = args.allocations
        || (args.compare.is_none() && a_meta.as_ref().is_some_and(|m| crate::heap::heap_implied(m, "view")));
    if options.allocations
        && let Some((a, b)) = args.columns
    {
        // The allocations view's time axis is allocation events, not read
        // columns: ignored, --columns showed the whole heap and said nothing.
        bail!(
            "--columns {a}..{b}: the allocations view has no read columns; its time axis is allocation events \
             (--select A..B selects events, --addresses LO..HI shows addresses)"
        );
    }
    if options.allocations && args.stats {
        // Reached only when the trace implies the view (clap refuses
        // --stats with --allocations): was ignored, silently.
        bail!(
            "--stats: this trace opens the allocations view, whose side panel always shows the heap's statistics \
             (--select A..B scopes them to events A..B)"
        );
    }
    options.compare = args.compare;
    run_viewer(options)
}

/// The files a run writes when it ends (the screenshot, the UI's state,
/// a bench report), checked before anything is decoded or drawn, as
/// `render` checks its output: a missing directory or an image format the
/// viewer cannot write was found only after the picture was made, and
/// `--state` naming the trace replaced the trace with JSON.
fn check_outputs(
    screenshot: Option<&Path>,
    json: [Option<&Path>; 2],
    inputs: &[&Path],
    replace: Replace,
) -> Result<()> {
    for path in std::iter::once(screenshot).chain(json).flatten() {
        PendingOutput::new(path, inputs, replace)?;
    }
    if let Some(path) = screenshot {
        let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        if ext != "png" {
            bail!("--screenshot {}: the viewer's screenshots are PNG images; name it .png", path.display());
        }
    }
    Ok(())
}

/// Runs the viewer, on a display of its own when there is none and it
/// only draws offscreen (a screenshot, a measuring run).
pub fn run_viewer(options: viewer::ViewerOptions) -> Result<()> {
    prepare_environment();
    let offscreen = options.screenshot.is_some() || options.bench.is_some();
    let no_window = viewer::display::check_display().is_err();
    let _xvfb = if offscreen && no_window { Some(Xvfb::start(options.size)?) } else { None };
    let shot = options.screenshot.as_ref().map(|s| s.path.clone());
    viewer::run(options).context("viewer")?;
    if let Some(path) = shot {
        eprintln!("linetrace: wrote {}", path.display());
    }
    Ok(())
}

/// Winit wants a runtime directory; a bare shell (CI, ssh) may lack one.
///
/// One directory per user, reused by every run: a directory per process
/// was never removed and piled up in /tmp (hundreds after a test run).
/// Like a real `XDG_RUNTIME_DIR` it is the user's own, mode 0700; one that
/// is not (another user made it first, or a symlink) is not used.
fn prepare_environment() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_some() {
        return;
    }
    if let Some(dir) = private_runtime_dir() {
        // SAFETY: called before the viewer starts any thread; nothing
        // else reads the environment concurrently.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
}

/// `$TMPDIR/linetrace-runtime-UID`, created if missing, when it is a
/// directory this user owns and only this user can enter.
fn private_runtime_dir() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    // The owner of /proc/self is this process's effective user.
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let dir = std::env::temp_dir().join(format!("linetrace-runtime-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    let private = meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0;
    private.then_some(dir)
}

/// An X server of our own (Xvfb) for offscreen drawing, stopped on drop.
struct Xvfb {
    child: Child,
}

impl Xvfb {
    /// Starts Xvfb on a display number it picks itself (`-displayfd`):
    /// choosing a free number here and starting the server after would
    /// race with another linetrace doing the same (parallel tests, CI), and
    /// two of them would share one server until the first stopped it.
    fn start(size: (u32, u32)) -> Result<Xvfb> {
        let mut command = Command::new("Xvfb");
        command
            .args(["-displayfd", "1"])
            .args(["-screen", "0", &format!("{}x{}x24", size.0.max(1024), size.1.max(768)), "-nolisten", "tcp"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        // SAFETY: the closure runs in the child between fork and exec and
        // only makes one async-signal-safe system call.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                // A linetrace that is killed outright (no Drop) takes its
                // server with it instead of leaving it running.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = command.spawn().context("no display, and Xvfb cannot be started (apt-get install xvfb)")?;
        let stdout = child.stdout.take().context("Xvfb's output")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
            let _ = tx.send(line);
        });
        let mut xvfb = Xvfb { child };
        let display = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(line) => match line.trim().parse::<u32>() {
                Ok(n) => n,
                Err(_) => bail!("Xvfb did not start (it said {:?})", line.trim()),
            },
            Err(_) => bail!("Xvfb did not start within 10 s"),
        };
        // SAFETY: as in `prepare_environment`: before the viewer's threads.
        unsafe { std::env::set_var("DISPLAY", format!(":{display}")) };
        xvfb.child.stdout = None;
        Ok(xvfb)
    }
}

impl Drop for Xvfb {
    /// SIGTERM first: Xvfb then removes its socket and lock file, which a
    /// SIGKILL leaves behind in /tmp. SIGKILL only if it has not gone
    /// within a second.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: a plain system call on our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            for _ in 0..100 {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds `examples/c/array_sweep.c` (or takes the prebuilt copy when
/// there is no C compiler), records `work`, prints its per-line table and
/// shows it: in a window, or as a screenshot when there is no display.
pub fn demo(args: DemoArgs) -> Result<ExitCode> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(&args.dir).with_context(|| format!("cannot create {}", args.dir.display()))?;
    let binary = demo_binary(root, &args.dir)?;
    let trace = args.dir.join("array_sweep_work.lntrace");
    let me = std::env::current_exe().context("cannot find the linetrace binary")?;
    let linetrace = |what: &str, args: &[&std::ffi::OsStr]| -> Result<()> {
        let status = Command::new(&me).args(args).status().with_context(|| format!("cannot run linetrace {what}"))?;
        if !status.success() {
            bail!("linetrace {what} failed");
        }
        Ok(())
    };
    linetrace(
        "record",
        &[
            "record".as_ref(),
            "--force".as_ref(),
            "-f".as_ref(),
            "work".as_ref(),
            "-o".as_ref(),
            trace.as_os_str(),
            "--".as_ref(),
            binary.as_os_str(),
        ],
    )?;
    linetrace("report", &["report".as_ref(), trace.as_os_str(), "--by".as_ref(), "line".as_ref()])?;

    let problem = viewer::display::check_display().err();
    let offscreen = args.screenshot || problem.is_some();
    if !offscreen {
        run_viewer(viewer::ViewerOptions::new(trace))?;
        return Ok(ExitCode::SUCCESS);
    }
    let path = args.dir.join("array_sweep_work.png");
    if let Some(missing) = offscreen_viewer_missing() {
        // The CPU rasteriser draws the same flamegraph and bitmap without
        // an X server or a Vulkan driver: still a picture, only no panels.
        eprintln!(
            "linetrace: {} and {missing}: drawing with `linetrace render` instead of the viewer \
             (apt-get install xvfb mesa-vulkan-drivers for the viewer's screenshot)",
            problem.as_ref().map_or("a screenshot asked for".to_string(), |p| p.to_string())
        );
        linetrace(
            "render",
            &["render".as_ref(), trace.as_os_str(), "--force".as_ref(), "-o".as_ref(), path.as_os_str()],
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(problem) = &problem {
        eprintln!("linetrace: {problem}: drawing the viewer offscreen to {}", path.display());
    }
    let mut options = viewer::ViewerOptions::new(trace);
    options.screenshot =
        Some(viewer::ScreenshotRequest { path, state: None, hover: Some((100, Some(25))), open_source: false });
    options.size = (1400, 800);
    run_viewer(options)?;
    Ok(ExitCode::SUCCESS)
}

/// The demo's source and its checked-in build (gcc -O2 -g), inside the
/// binary too: an installed linetrace runs the demo without the source
/// tree it was built from.
const DEMO_SOURCE: &str = include_str!("../examples/c/array_sweep.c");
const DEMO_PREBUILT: &[u8] = include_bytes!("../tests/data/array_sweep");

/// The demo's target: built from source with gcc when there is one, else
/// the checked-in build of the same source. The source tree's files when
/// they are there (the source view then shows the file the tree has),
/// else the copies inside the binary, written to `dir`.
fn demo_binary(root: &Path, dir: &Path) -> Result<PathBuf> {
    let write = |name: &str, bytes: &[u8], mode: u32| -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
        Ok(path)
    };
    let source = match root.join("examples/c/array_sweep.c") {
        tree if tree.is_file() => tree,
        _ => write("array_sweep.c", DEMO_SOURCE.as_bytes(), 0o644)?,
    };
    let binary = dir.join("array_sweep");
    eprintln!("linetrace: building {} with gcc -O2 -g", source.display());
    match Command::new("gcc").args(["-O2", "-g"]).arg(&source).arg("-o").arg(&binary).status() {
        Ok(status) if status.success() => Ok(binary),
        Ok(_) => bail!("gcc failed on {}", source.display()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let prebuilt = match root.join("tests/data/array_sweep") {
                tree if tree.is_file() => tree,
                _ => write("array_sweep-prebuilt", DEMO_PREBUILT, 0o755)?,
            };
            eprintln!("linetrace: no gcc here: using the prebuilt {}", prebuilt.display());
            Ok(prebuilt)
        }
        Err(error) => Err(error).context("cannot run gcc"),
    }
}

/// Why the viewer cannot draw offscreen here, if it cannot: it needs an X
/// server of its own (Xvfb) and a Vulkan driver (lavapipe on a machine
/// without a GPU).
fn offscreen_viewer_missing() -> Option<&'static str> {
    let on_path = |name: &str| {
        std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
    };
    if !on_path("Xvfb") {
        return Some("no Xvfb");
    }
    viewer::display::vulkan_missing()
}

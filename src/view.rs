//! `linetrace view` and `linetrace demo`: the viewer, on screen or
//! offscreen.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cli::{DemoArgs, ViewArgs};

/// Opens the viewer (or draws a screenshot) of a trace.
pub fn view(args: ViewArgs) -> Result<()> {
    if !args.file.is_file() {
        bail!("cannot read {}: no such file", args.file.display());
    }
    let mut options = viewer::ViewerOptions::new(args.file.clone());
    options.decode = args.decode.options();
    options.decode.working_set.validate().map_err(anyhow::Error::msg)?;
    options.symbol_paths = args.decode.symbol_paths();
    options.size = args.size;
    options.columns = args.columns;
    options.screenshot =
        args.screenshot.map(|path| viewer::ScreenshotRequest { path, state: args.state, hover: args.hover });
    options.bench = args.bench_json;
    run_viewer(options)
}

/// Runs the viewer, on a display of its own when there is none and it
/// only draws offscreen (a screenshot, a measuring run).
pub fn run_viewer(options: viewer::ViewerOptions) -> Result<()> {
    prepare_environment();
    let offscreen = options.screenshot.is_some() || options.bench.is_some();
    let _xvfb = if no_display() && offscreen { Some(Xvfb::start(options.size)?) } else { None };
    let shot = options.screenshot.as_ref().map(|s| s.path.clone());
    viewer::run(options).context("viewer")?;
    if let Some(path) = shot {
        eprintln!("linetrace: wrote {}", path.display());
    }
    Ok(())
}

fn no_display() -> bool {
    std::env::var_os("DISPLAY").is_none() && std::env::var_os("WAYLAND_DISPLAY").is_none()
}

/// Winit wants a runtime directory; a bare shell (CI, ssh) may lack one.
fn prepare_environment() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join(format!("linetrace-runtime-{}", std::process::id()));
        if std::fs::create_dir_all(&dir).is_ok() {
            // SAFETY: called before the viewer starts any thread; nothing
            // else reads the environment concurrently.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
    }
}

/// An X server of our own (Xvfb) for offscreen drawing, stopped on drop.
struct Xvfb {
    child: Child,
}

impl Xvfb {
    fn start(size: (u32, u32)) -> Result<Xvfb> {
        let display =
            (99..200).find(|n| !Path::new(&format!("/tmp/.X{n}-lock")).exists()).context("no free X display number")?;
        let child = Command::new("Xvfb")
            .arg(format!(":{display}"))
            .args(["-screen", "0", &format!("{}x{}x24", size.0.max(1024), size.1.max(768)), "-nolisten", "tcp"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("no display, and Xvfb cannot be started (apt-get install xvfb)")?;
        let socket = PathBuf::from(format!("/tmp/.X11-unix/X{display}"));
        let started = Instant::now();
        while !socket.exists() {
            if started.elapsed() > Duration::from_secs(10) {
                bail!("Xvfb did not start within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as in `prepare_environment`: before the viewer's threads.
        unsafe { std::env::set_var("DISPLAY", format!(":{display}")) };
        Ok(Xvfb { child })
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds `examples/c/array_sweep.c`, records `work`, and shows it.
pub fn demo(args: DemoArgs) -> Result<ExitCode> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/array_sweep.c");
    std::fs::create_dir_all(&args.dir).with_context(|| format!("cannot create {}", args.dir.display()))?;
    let binary = args.dir.join("array_sweep");
    eprintln!("linetrace: building {} with gcc -O2 -g", source.display());
    let status = Command::new("gcc")
        .args(["-O2", "-g"])
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .status()
        .context("cannot run gcc (apt-get install gcc)")?;
    if !status.success() {
        bail!("gcc failed on {}", source.display());
    }
    let trace = args.dir.join("array_sweep_work.lntrace");
    let me = std::env::current_exe().context("cannot find the linetrace binary")?;
    let status = Command::new(&me)
        .args(["record", "--force", "-f", "work", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&binary)
        .status()
        .context("cannot run linetrace record")?;
    if !status.success() {
        bail!("recording failed");
    }
    let mut options = viewer::ViewerOptions::new(trace);
    if args.screenshot || no_display() {
        let path = args.dir.join("array_sweep_work.png");
        if no_display() {
            eprintln!("linetrace: no display: drawing offscreen to {}", path.display());
        }
        options.screenshot = Some(viewer::ScreenshotRequest { path, state: None, hover: Some((100, Some(25))) });
        options.size = (1400, 800);
    }
    run_viewer(options)?;
    Ok(ExitCode::SUCCESS)
}

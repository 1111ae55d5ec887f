//! `linetrace record`: run a program under the ptrace tracer.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::RecordArgs;
use crate::output::{self, PendingOutput, Replace};

/// Where a trace goes when no `-o` is given.
const DEFAULT_OUTPUT: &str = "trace.lntrace";

/// Records a trace; returns the exit code of the traced program.
pub fn record(args: RecordArgs) -> Result<ExitCode> {
    instrument::interrupt::install().context("installing signal handlers")?;
    let mut command = args.command.into_iter();
    let program: PathBuf = command.next().context("no program given")?.into();
    let path = args.output.unwrap_or_else(|| output::numbered(Path::new(DEFAULT_OUTPUT)));
    let replace = if args.force { Replace::Anything } else { Replace::TracesOnly };
    let out = PendingOutput::new(&path, &[&program], replace)?;
    // Before the recording, which may be long: a window that cannot open
    // after it would only waste it.
    if let (true, Err(e)) = (args.view, viewer::check_window()) {
        anyhow::bail!(
            "record --view: {e} (here: record without --view, then `linetrace view {} --screenshot OUT.png`)",
            path.display()
        );
    }
    if args.allocations {
        return record_allocations(
            program,
            command.collect(),
            usize::from(args.alloc_stack),
            args.alloc_fn.clone(),
            out,
            args.quiet,
        );
    }
    let show_progress = !args.quiet;
    let tty = std::io::stderr().is_terminal();
    let progress: Box<dyn FnMut(&instrument::Progress)> = Box::new(move |p: &instrument::Progress| {
        if !show_progress {
            return;
        }
        let rate = p.instructions as f64 / p.elapsed.as_secs_f64().max(1e-9);
        let line = format!(
            "linetrace: {} instructions traced ({:.0}/s), {} accesses, {} invocations",
            p.instructions, rate, p.accesses, p.invocations
        );
        if tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
    });
    let result = instrument::record(instrument::RecordOptions {
        program,
        args: command.collect(),
        function: Some(args.function),
        output: out.partial().to_path_buf(),
        max_invocations: args.max_invocations,
        progress: Some(progress),
        backend: args.backend.into(),
    });
    if tty && show_progress {
        eprint!("\r\x1b[K");
    }
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            // A partial trace of a run that went wrong can still be read.
            if out.partial().metadata().is_ok_and(|m| m.len() > 0) {
                eprintln!("linetrace: what was recorded is in {}", out.partial().display());
            } else {
                out.abandon();
            }
            return Err(e.into());
        }
    };
    let final_path = out.path().to_path_buf();
    out.commit()?;
    if args.max_invocations == Some(0) {
        eprintln!("linetrace: --max-invocations 0: no invocation traced, as asked");
    } else if summary.invocations == 0 {
        eprintln!(
            "linetrace: warning: no invocation of {} was traced (never called?); the trace has no accesses",
            summary.function
        );
    }
    if let Some(note) = skipped_note(&summary.skipped_invocations) {
        eprintln!("linetrace: {note}");
    }
    if summary.approximated > 0 {
        eprintln!(
            "linetrace: {} gather/scatter instruction(s) with ZMM indices were recorded without their elements",
            summary.approximated
        );
    }
    if let Some(program) = &summary.exec {
        eprintln!("linetrace: the program exec'd {program}; tracing stopped there and the new program ran untraced");
    }
    if show_progress {
        let state = match summary.truncated {
            Some(r) => format!(" (truncated: {r:?})"),
            None => String::new(),
        };
        eprintln!(
            "linetrace: traced {} invocation(s) of {}: {} instructions, {} accesses -> {} ({} bytes){state}",
            summary.invocations,
            summary.function,
            summary.instructions,
            summary.accesses,
            final_path.display(),
            summary.trace_bytes
        );
    }
    if args.view {
        crate::view::run_viewer(viewer::ViewerOptions::new(final_path.clone()))?;
    }
    Ok(exit_code(summary.exit, summary.truncated))
}

/// linetrace's exit code: the program's, or, when an interrupt cut the
/// recording, as a shell reports death by that signal (130 for Ctrl-C),
/// not as the target we had to kill.
fn exit_code(exit: instrument::TargetExit, truncated: Option<instrument::TruncationReason>) -> ExitCode {
    let interrupted_by = instrument::interrupt::signal();
    if truncated == Some(instrument::TruncationReason::Interrupted) && interrupted_by > 0 {
        return ExitCode::from((128 + interrupted_by) as u8);
    }
    match exit {
        instrument::TargetExit::Code(c) => ExitCode::from(c as u8),
        instrument::TargetExit::Signal(s) => ExitCode::from((128 + s) as u8),
    }
}

/// `record --allocations`: the whole program's allocator calls.
fn record_allocations(
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    stack: usize,
    alloc_fns: Vec<instrument::alloc_hooks::AllocFnSpec>,
    out: PendingOutput,
    quiet: bool,
) -> Result<ExitCode> {
    // A line rewritten in place on a terminal (a log would only fill up:
    // the summary at the end says the same).
    let tty = std::io::stderr().is_terminal() && !quiet;
    let progress: Option<Box<dyn FnMut(u64, std::time::Duration)>> = tty.then(|| {
        Box::new(|calls: u64, elapsed: std::time::Duration| {
            eprint!("\rlinetrace: {calls} allocator calls recorded in {:.0} s\x1b[K", elapsed.as_secs_f64());
        }) as Box<dyn FnMut(u64, std::time::Duration)>
    });
    let result = instrument::record_allocations(instrument::AllocationOptions {
        program,
        args,
        output: out.partial().to_path_buf(),
        stack,
        alloc_fns,
        progress,
    });
    if tty {
        eprint!("\r\x1b[K");
    }
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            out.abandon();
            return Err(e.into());
        }
    };
    let final_path = out.path().to_path_buf();
    out.commit()?;
    if summary.dropped > 0 {
        eprintln!(
            "linetrace: warning: {} allocator calls were not recorded: the agent's log filled its file system \
             (/dev/shm or $TMPDIR); the program ran on",
            summary.dropped
        );
    }
    if summary.missing > 0 {
        eprintln!("linetrace: {} allocator calls were cut short by the program's end and are missing", summary.missing);
    }
    if !summary.unhooked.is_empty() {
        eprintln!(
            "linetrace: warning: the agent could not patch {} (its code in the running program differs from the \
             file's, or there was no room for a trampoline within 2 GiB): their calls are not recorded",
            summary.unhooked.join(", ")
        );
    }
    if summary.too_deep > 0 {
        eprintln!(
            "linetrace: warning: {} calls of --alloc-fn functions were not recorded: they were nested in each other \
             more than 16 deep",
            summary.too_deep
        );
    }
    let unwinding = summary.unwinding;
    if unwinding.mismatched > 0 || std::env::var_os(trace_rt::agent::UNWIND_CHECK_ENV).is_some() {
        eprintln!(
            "linetrace: stacks: {} by the agent's unwinder ({} of them differ from backtrace()'s), {} by backtrace()",
            unwinding.fast, unwinding.mismatched, unwinding.slow
        );
    }
    if !quiet {
        eprintln!(
            "linetrace: recorded {} allocator calls on {} thread(s) in {:.2} s -> {} ({} bytes)",
            summary.events,
            summary.threads,
            summary.run_time.as_secs_f64(),
            final_path.display(),
            summary.trace_bytes
        );
    }
    Ok(exit_code(summary.exit, summary.truncated))
}

/// "9 invocations on 3 other threads were not traced ...", if any were.
pub fn skipped_note(skipped: &std::collections::BTreeMap<u32, u64>) -> Option<String> {
    let total: u64 = skipped.values().sum();
    (total > 0).then(|| {
        format!(
            "{total} invocation(s) on {} thread(s) were not traced (made while another thread was single-stepped, \
             or by code the traced call runs natively)",
            skipped.len()
        )
    })
}

//! `linetrace record`: run a program under the ptrace tracer.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::RecordArgs;

/// Records a trace; returns the exit code of the traced program.
pub fn record(args: RecordArgs) -> Result<ExitCode> {
    instrument::interrupt::install().context("installing signal handlers")?;
    let mut command = args.command.into_iter();
    let program = command.next().context("no program given")?;
    let show_progress = !args.quiet;
    let tty = std::io::stderr().is_terminal();
    let progress: Box<dyn FnMut(&instrument::Progress)> = Box::new(move |p: &instrument::Progress| {
        if !show_progress {
            return;
        }
        let rate = p.instructions as f64 / p.elapsed.as_secs_f64().max(1e-9);
        let line = format!(
            "linetrace: {} instructions stepped ({:.0}/s), {} accesses, {} invocations",
            p.instructions, rate, p.accesses, p.invocations
        );
        if tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
    });
    let output = args.output.clone();
    let summary = instrument::record(instrument::RecordOptions {
        program: program.into(),
        args: command.collect(),
        function: Some(args.function),
        output: args.output,
        max_invocations: args.max_invocations,
        progress: Some(progress),
    })?;
    if tty && show_progress {
        eprint!("\r\x1b[K");
    }
    if summary.invocations == 0 {
        eprintln!(
            "linetrace: warning: no invocation of {} was traced (never called?); the trace has no accesses",
            summary.function
        );
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
            output.display(),
            summary.trace_bytes
        );
    }
    Ok(match summary.exit {
        instrument::TargetExit::Code(c) => ExitCode::from(c as u8),
        instrument::TargetExit::Signal(s) => ExitCode::from((128 + s) as u8),
    })
}

//! The `linetrace` command.

mod cli;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

use cli::{Cli, Command, DumpArgs, RecordArgs, ReportArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(args) => record(args),
        Command::Report(args) => report(args).map(|()| ExitCode::SUCCESS),
        Command::Dump(args) => dump(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        // `linetrace dump FILE | head` closes the pipe early: not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("linetrace: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn record(args: RecordArgs) -> Result<ExitCode> {
    instrument::interrupt::install().context("installing signal handlers")?;
    let mut command = args.command.into_iter();
    let program = command.next().context("no program given")?;
    let show_progress = !args.quiet;
    let tty = std::io::stderr().is_terminal();
    let progress: Box<dyn FnMut(&instrument::Progress)> =
        Box::new(move |p: &instrument::Progress| {
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

fn report(args: ReportArgs) -> Result<()> {
    let summary = decoder::summary::summarize_file(&args.file, args.line_size)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
        return Ok(());
    }
    let m = &summary.metadata;
    writeln!(out, "trace:      {}", args.file.display())?;
    writeln!(out, "program:    {}", m.argv.join(" "))?;
    writeln!(out, "function:   {}", m.function.as_deref().unwrap_or("?"))?;
    writeln!(out, "backend:    {}", m.backend)?;
    writeln!(out, "status:     {}", summary.end)?;
    let exit = match summary.exit {
        Some(instrument::TargetExit::Code(c)) => format!("exited with code {c}"),
        Some(instrument::TargetExit::Signal(s)) => format!("killed by signal {s}"),
        None => "unknown (recording did not see the end)".to_string(),
    };
    writeln!(out, "target:     {exit}")?;
    let row = |out: &mut dyn Write, name: &str, t: &decoder::summary::Totals| {
        writeln!(
            out,
            "{name:>10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8} {:>8}",
            t.instructions,
            t.reads,
            t.writes,
            t.bytes_read,
            t.unique_lines,
            t.allocations,
            t.invocations
        )
    };
    writeln!(
        out,
        "{:>10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8} {:>8}",
        "thread", "instructions", "reads", "writes", "bytes read", "lines", "allocs", "invocs"
    )?;
    for (tid, t) in &summary.threads {
        row(&mut out, &tid.to_string(), t)?;
    }
    if summary.threads.len() != 1 {
        row(&mut out, "total", &summary.total)?;
    }
    Ok(())
}

fn dump(args: DumpArgs) -> Result<()> {
    use trace_rt::format::{Event, TraceReader};
    let mut reader = TraceReader::open(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut n = 0u64;
    while let Some(rec) = reader
        .next_record()
        .with_context(|| format!("reading {}", args.file.display()))?
    {
        if args.limit.is_some_and(|l| n >= l) {
            break;
        }
        n += 1;
        match rec.event {
            Event::Access { site, addr } => {
                let s = reader.sites()[site as usize];
                writeln!(
                    out,
                    "{} access {:?} pc={:#x} addr={addr:#x} size={}",
                    rec.thread, s.kind, s.pc, s.size
                )?;
            }
            Event::AccessSized { site, addr, size } => {
                let s = reader.sites()[site as usize];
                writeln!(
                    out,
                    "{} access {:?} pc={:#x} addr={addr:#x} size={size} elem={} rep",
                    rec.thread, s.kind, s.pc, s.size
                )?;
            }
            Event::Alloc(a) => writeln!(
                out,
                "{} alloc {} size={} align={} in={:#x} out={:#x} callsite={:#x}",
                rec.thread,
                a.kind.name(),
                a.size,
                a.align,
                a.ptr_in,
                a.ptr_out,
                a.callsite
            )?,
            Event::Call {
                callsite,
                target,
                sp,
            } => writeln!(
                out,
                "{} call callsite={callsite:#x} target={target:#x} sp={sp:#x}",
                rec.thread
            )?,
            Event::TailCall {
                callsite,
                target,
                sp,
            } => writeln!(
                out,
                "{} tailcall callsite={callsite:#x} target={target:#x} sp={sp:#x}",
                rec.thread
            )?,
            Event::Return { sp } => writeln!(out, "{} return sp={sp:#x}", rec.thread)?,
            Event::InvocationStart { index, pc, sp } => writeln!(
                out,
                "{} invocation-start index={index} pc={pc:#x} sp={sp:#x}",
                rec.thread
            )?,
            Event::Signal { signo, pc, addr } => writeln!(
                out,
                "{} signal signo={signo} pc={pc:#x} addr={addr:#x}",
                rec.thread
            )?,
            other => writeln!(out, "{} {other:?}", rec.thread)?,
        }
    }
    if let Some(end) = reader.end() {
        writeln!(out, "# end: {}", end.describe())?;
    }
    Ok(())
}

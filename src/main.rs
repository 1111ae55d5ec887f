//! The `linetrace` command.

mod cli;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

use std::path::Path;
use std::time::{Duration, Instant};

use cli::{Cli, Command, DumpArgs, RecordArgs, RenderArgs, ReportArgs, ReportGrouping};
use decoder::model::Model;
use decoder::raster::RenderOptions;
use decoder::symbols::Symbolizer;
use decoder::tables::{AccessRow, AllocationSiteRow, Grouping, access_table, allocation_table};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use trace_rt::format::TraceEnd;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(args) => record(args),
        Command::Report(args) => report(args).map(|()| ExitCode::SUCCESS),
        Command::Render(args) => render(args).map(|()| ExitCode::SUCCESS),
        Command::Dump(args) => dump(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        // `linetrace dump FILE | head` closes the pipe early: not an error.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) => {
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

/// Decodes a trace, with a progress bar when that takes over a second.
fn decode(file: &Path, args: &cli::DecodeArgs) -> Result<Model> {
    let total = std::fs::metadata(file).with_context(|| format!("reading {}", file.display()))?.len();
    let mut bar = LazyProgress::new("decoding");
    let model = Model::decode(file, &args.options(), &mut |done| bar.update(done, total))
        .with_context(|| format!("decoding {}", file.display()));
    bar.finish();
    model
}

/// A progress bar on stderr that only appears once work has taken more
/// than a second (short runs stay quiet).
struct LazyProgress {
    label: &'static str,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl LazyProgress {
    fn new(label: &'static str) -> Self {
        LazyProgress { label, started: Instant::now(), bar: None }
    }

    fn update(&mut self, done: u64, total: u64) {
        if self.bar.is_none() && self.started.elapsed() > Duration::from_secs(1) {
            let bar = ProgressBar::new(total);
            let template = format!("{} {{bar:40}} {{percent}}% ({{eta}} left)", self.label);
            bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()));
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The whole `report --json` document.
#[derive(Serialize)]
struct Report<'a> {
    trace: String,
    metadata: &'a trace_rt::format::Metadata,
    status: String,
    truncated: bool,
    exit: Option<instrument::TargetExit>,
    columns: u64,
    line_size: u32,
    threads: &'a std::collections::BTreeMap<u32, decoder::summary::Totals>,
    total: &'a decoder::summary::Totals,
    metrics: &'a decoder::model::Metrics,
    warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by_function: Option<Vec<AccessRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by_line: Option<Vec<AccessRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by_allocation: Option<Vec<AllocationSiteRow>>,
}

fn report(args: ReportArgs) -> Result<()> {
    let model = decode(&args.file, &args.decode)?;
    let mut symbols = Symbolizer::new(&model.modules);
    let (mut by_function, mut by_line, mut by_allocation) = (None, None, None);
    match args.by {
        Some(ReportGrouping::Function) => by_function = Some(access_table(&model, &mut symbols, Grouping::Function)),
        Some(ReportGrouping::Line) => by_line = Some(access_table(&model, &mut symbols, Grouping::Line)),
        Some(ReportGrouping::Allocation) => by_allocation = Some(allocation_table(&model, &mut symbols)),
        None => {}
    }
    let exit = match &model.end {
        TraceEnd::Finished(t) => t.exit,
        TraceEnd::Cut { .. } => None,
    };
    let report = Report {
        trace: args.file.display().to_string(),
        metadata: &model.metadata,
        status: model.end.describe(),
        truncated: model.end.is_truncated(),
        exit,
        columns: model.columns,
        line_size: model.working_set.config.line_size,
        threads: &model.threads,
        total: &model.total,
        metrics: &model.metrics,
        warnings: symbols.warnings().to_vec(),
        by_function,
        by_line,
        by_allocation,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    for w in &report.warnings {
        eprintln!("linetrace: warning: {w}");
    }
    let m = report.metadata;
    writeln!(out, "trace:      {}", report.trace)?;
    writeln!(out, "program:    {}", m.argv.join(" "))?;
    writeln!(out, "function:   {}", m.function.as_deref().unwrap_or("?"))?;
    writeln!(out, "backend:    {}", m.backend)?;
    writeln!(out, "status:     {}", report.status)?;
    let exit = match report.exit {
        Some(instrument::TargetExit::Code(c)) => format!("exited with code {c}"),
        Some(instrument::TargetExit::Signal(s)) => format!("killed by signal {s}"),
        None => "unknown (recording did not see the end)".to_string(),
    };
    writeln!(out, "target:     {exit}")?;
    writeln!(out)?;
    let row = |out: &mut dyn Write, name: &str, t: &decoder::summary::Totals| {
        writeln!(
            out,
            "{name:>10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8} {:>8}",
            t.instructions, t.reads, t.writes, t.bytes_read, t.unique_lines, t.allocations, t.invocations
        )
    };
    writeln!(
        out,
        "{:>10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8} {:>8}",
        "thread", "instructions", "reads", "writes", "bytes read", "lines", "allocs", "invocs"
    )?;
    for (tid, t) in report.threads {
        row(&mut out, &tid.to_string(), t)?;
    }
    if report.threads.len() != 1 {
        row(&mut out, "total", report.total)?;
    }
    let mt = report.metrics;
    writeln!(out)?;
    writeln!(
        out,
        "line fetches:            {} ({}-byte lines, working set up to {} rows)",
        mt.line_fetches, report.line_size, mt.max_rows
    )?;
    writeln!(out, "bytes read per fetch:    {:.1}", mt.mean_bytes_read_per_fetch)?;
    writeln!(
        out,
        "distinct bytes / fetch:  {:.1} (utilisation {:.0}%)",
        mt.mean_distinct_bytes_per_fetch,
        100.0 * mt.utilisation
    )?;
    write!(out, "reuse distance (lines):  cold {}", mt.reuse.cold)?;
    for (k, n) in mt.reuse.buckets.iter().enumerate().filter(|(_, n)| **n > 0) {
        let lo = decoder::reuse::ReuseHistogram::bucket_start(k);
        let hi = decoder::reuse::ReuseHistogram::bucket_start(k + 1);
        if hi - lo <= 1 { write!(out, ", {lo}: {n}")? } else { write!(out, ", {lo}-{}: {n}", hi - 1)? }
    }
    writeln!(out)?;
    let limit = args.limit;
    if let Some(rows) = report.by_function.as_ref().or(report.by_line.as_ref()) {
        writeln!(out)?;
        let title = if report.by_function.is_some() { "function" } else { "line" };
        writeln!(
            out,
            "{:>12} {:>12} {:>12} {:>12}  {title}",
            "self reads", "total reads", "self writes", "total writes"
        )?;
        for r in rows.iter().take(limit) {
            writeln!(
                out,
                "{:>12} {:>12} {:>12} {:>12}  {}",
                r.self_reads, r.total_reads, r.self_writes, r.total_writes, r.key
            )?;
        }
    }
    if let Some(rows) = &report.by_allocation {
        writeln!(out)?;
        writeln!(
            out,
            "{:>8} {:>12} {:>12} {:>12} {:>6}  allocation site",
            "blocks", "bytes", "reads", "writes", "live"
        )?;
        for r in rows.iter().take(limit) {
            writeln!(
                out,
                "{:>8} {:>12} {:>12} {:>12} {:>6}  {}",
                r.blocks, r.bytes, r.reads, r.writes, r.live_at_end, r.site
            )?;
        }
    }
    Ok(())
}

fn render(args: RenderArgs) -> Result<()> {
    let columns = args.columns.as_deref().map(cli::parse_columns).transpose().map_err(anyhow::Error::msg)?;
    let model = decode(&args.file, &args.decode)?;
    if model.columns == 0 {
        anyhow::bail!("{} has no memory reads to draw", args.file.display());
    }
    let mut symbols = Symbolizer::new(&model.modules);
    let options = RenderOptions { width: args.width, height: args.height, columns, alpha: args.alpha };
    let mut bar = LazyProgress::new("drawing");
    let image = decoder::raster::render(&model, &mut symbols, &options, &mut |done, total| bar.update(done, total))?;
    bar.finish();
    for w in symbols.warnings() {
        eprintln!("linetrace: warning: {w}");
    }
    let file = std::fs::File::create(&args.output).with_context(|| format!("creating {}", args.output.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), image.width, image.height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().with_context(|| format!("writing {}", args.output.display()))?;
    writer.write_image_data(&image.rgba).with_context(|| format!("writing {}", args.output.display()))?;
    writer.finish().with_context(|| format!("writing {}", args.output.display()))?;
    if model.end.is_truncated() {
        eprintln!("linetrace: note: the trace is {}", model.end.describe());
    }
    eprintln!(
        "linetrace: wrote {} ({}x{}, {} columns)",
        args.output.display(),
        image.width,
        image.height,
        model.columns
    );
    Ok(())
}

fn dump(args: DumpArgs) -> Result<()> {
    use trace_rt::format::{Event, TraceReader};
    let mut reader = TraceReader::open(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut n = 0u64;
    while let Some(rec) = reader.next_record().with_context(|| format!("reading {}", args.file.display()))? {
        if args.limit.is_some_and(|l| n >= l) {
            break;
        }
        n += 1;
        match rec.event {
            Event::Access { site, addr } => {
                let s = reader.sites()[site as usize];
                writeln!(out, "{} access {:?} pc={:#x} addr={addr:#x} size={}", rec.thread, s.kind, s.pc, s.size)?;
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
            Event::Call { callsite, target, sp } => {
                writeln!(out, "{} call callsite={callsite:#x} target={target:#x} sp={sp:#x}", rec.thread)?
            }
            Event::TailCall { callsite, target, sp } => {
                writeln!(out, "{} tailcall callsite={callsite:#x} target={target:#x} sp={sp:#x}", rec.thread)?
            }
            Event::Return { sp } => writeln!(out, "{} return sp={sp:#x}", rec.thread)?,
            Event::InvocationStart { index, pc, sp } => {
                writeln!(out, "{} invocation-start index={index} pc={pc:#x} sp={sp:#x}", rec.thread)?
            }
            Event::Signal { signo, pc, addr } => {
                writeln!(out, "{} signal signo={signo} pc={pc:#x} addr={addr:#x}", rec.thread)?
            }
            other => writeln!(out, "{} {other:?}", rec.thread)?,
        }
    }
    if let Some(end) = reader.end() {
        writeln!(out, "# end: {}", end.describe())?;
    }
    Ok(())
}

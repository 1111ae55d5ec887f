//! `linetrace export`: a trace in formats that other tools open.
//!
//! - `folded`: `outer;inner;leaf WEIGHT` lines (inferno, flamegraph.pl),
//!   weighted by reads, writes, line fetches or simulated D1 misses; the
//!   stack of an access is the thread's call stack when it was made.
//! - `chrome`: Chrome trace-event JSON (Perfetto, Spall, chrome://tracing):
//!   one complete ("X") slice per call, timestamps in read columns (shown
//!   as microseconds), and counter tracks sampled along the trace:
//!   working-set size, line fetches and bytes read per fetch.
//! - `speedscope`: speedscope's evented format, one profile per thread,
//!   with read columns as the unit of time.
//! - `csv`: one row per access, for pandas/polars; for a trace of `record
//!   --allocations` (no accesses), one row per block instead: when it
//!   lived in allocation events and nanoseconds, where, how large, who
//!   allocated it.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use anyhow::{Context, Result};
use decoder::cursor::{ColumnCursor, Step};
use decoder::model::Model;
use decoder::symbols::{Location, Symbolizer};
use decoder::working_set::{FetchCounter, HashedLines};
use serde_json::json;

use crate::cli::{ExportArgs, ExportFormat, ExportWeight};
use crate::output::{PendingOutput, Replace};
use crate::progress::{LazyProgress, decode};

/// Counter samples along the trace in a chrome export.
const COUNTER_SAMPLES: u64 = 4096;

/// Writes the export.
pub fn export(args: ExportArgs) -> Result<()> {
    let replace = if args.force { Replace::Anything } else { Replace::NotTracesOrPrograms };
    let out = PendingOutput::new(&args.output, &[&args.file], replace)?;
    // A trace of `record --allocations` has blocks and no accesses: only
    // the CSV has a form for them. Said before decoding, which can take long.
    let blocks_only = crate::progress::header(&args.file)?.is_some_and(|m| m.records_allocations_only());
    if blocks_only && !matches!(args.format, ExportFormat::Csv) {
        anyhow::bail!(
            "{} is a trace of `record --allocations`: it has no memory accesses for --format {} (--format csv \
             exports its blocks, one a row; report, render and view show its heap)",
            args.file.display(),
            clap::ValueEnum::to_possible_value(&args.format).map_or_else(String::new, |v| v.get_name().to_string())
        );
    }
    let model = decode(&args.file, &args.decode)?;
    let symbols = Symbolizer::with_paths(&model.modules, args.decode.symbol_paths());
    let names = Names::new(&symbols);
    let file = out.create()?;
    let written = (|| -> Result<()> {
        let mut w = BufWriter::new(file);
        match args.format {
            ExportFormat::Csv if blocks_only => block_csv(&model, &names, &mut w)?,
            ExportFormat::Folded => folded(&model, &names, args.weight, &mut w)?,
            ExportFormat::Chrome => chrome(&model, &names, &mut w)?,
            ExportFormat::Speedscope => speedscope(&model, &names, &mut w)?,
            ExportFormat::Csv => csv(&model, &names, &mut w)?,
        }
        w.flush().map_err(anyhow::Error::from)
    })()
    .with_context(|| format!("writing {}", args.output.display()));
    match written {
        Ok(()) => out.commit()?,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    }
    // As `render` does: an export of a cut or damaged trace is partial.
    if let Some(status) = model.status_note() {
        eprintln!("linetrace: note: the trace is {status}");
    }
    eprintln!("linetrace: wrote {}", args.output.display());
    Ok(())
}

/// Symbolization cached by pc (an export asks about the same few pcs
/// millions of times).
struct Names<'a> {
    symbols: &'a Symbolizer,
    cache: std::cell::RefCell<HashMap<u64, Arc<Location>>>,
}

impl<'a> Names<'a> {
    fn new(symbols: &'a Symbolizer) -> Self {
        Names { symbols, cache: Default::default() }
    }

    fn locate(&self, pc: u64) -> Arc<Location> {
        self.cache.borrow_mut().entry(pc).or_insert_with(|| self.symbols.locate(pc)).clone()
    }

    /// A function's name as a frame label: never empty, no `;` (the folded
    /// format's separator) and no line breaks.
    fn function(&self, pc: u64) -> String {
        let name = self.locate(pc).function.replace([';', '\n', '\r'], ":");
        if name.is_empty() { format!("{pc:#x}") } else { name }
    }
}

/// Walks every access with the thread's stack (outermost first) and the
/// lines it inserted.
fn walk(
    model: &Model,
    what: &'static str,
    mut visit: impl FnMut(&Step, &[u64], &FetchCounter, &ColumnCursor<'_, HashedLines>) -> Result<()>,
) -> Result<()> {
    let mut cursor = ColumnCursor::<HashedLines>::with_calls(model, 0)?;
    let mut fetches = FetchCounter::default();
    let mut stack: Vec<u64> = Vec::new();
    let mut bar = LazyProgress::new(what);
    while let Some(step) = cursor.next_access(&mut fetches)? {
        let thread = match &step {
            Step::Read(r) => r.thread,
            Step::Write { thread, .. } => *thread,
        };
        stack.clear();
        if let Some(calls) = cursor.calls() {
            stack.extend(calls.open_functions(thread));
        }
        visit(&step, &stack, &fetches, &cursor)?;
        if cursor.column() % (1 << 16) == 0 {
            bar.update(cursor.column(), model.columns);
        }
    }
    bar.finish();
    Ok(())
}

fn folded(model: &Model, names: &Names, weight: ExportWeight, out: &mut dyn Write) -> Result<()> {
    let mut stacks: HashMap<Vec<u64>, u64> = HashMap::new();
    let mut last_inserted = 0;
    walk(model, "exporting", |step, stack, fetches, _| {
        let w = match (weight, step) {
            (ExportWeight::Reads, Step::Read(_)) => 1,
            (ExportWeight::Writes, Step::Read(r)) => u64::from(r.access.writes),
            (ExportWeight::Writes, Step::Write { .. }) => 1,
            (ExportWeight::Fetches, _) => fetches.inserted - last_inserted,
            (ExportWeight::Misses, Step::Read(r)) => u64::from(model.cache.columns.get(r.column).0),
            _ => 0,
        };
        last_inserted = fetches.inserted;
        if w > 0 {
            *stacks.entry(stack.to_vec()).or_default() += w;
        }
        Ok(())
    })?;
    let mut lines: Vec<(String, u64)> = stacks
        .into_iter()
        .map(|(stack, w)| (stack.iter().map(|&pc| names.function(pc)).collect::<Vec<_>>().join(";"), w))
        .collect();
    // Stacks that differ only in pcs of the same name merge.
    lines.sort();
    lines.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
    for (stack, w) in lines {
        let stack = if stack.is_empty() { "[outside any call]".to_string() } else { stack };
        writeln!(out, "{stack} {w}")?;
    }
    Ok(())
}

fn chrome(model: &Model, names: &Names, out: &mut dyn Write) -> Result<()> {
    let frames = model.frames_in(0, u64::MAX)?;
    let mut events = Vec::with_capacity(frames.len() + 3 * COUNTER_SAMPLES as usize + 2);
    events.push(json!({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": model.metadata.argv.join(" ")}}));
    for f in &frames {
        events.push(json!({
            "ph": "X",
            "name": names.function(f.function),
            "cat": "call",
            "pid": 1,
            "tid": f.thread,
            "ts": f.first_column,
            "dur": f.end_column - f.first_column,
            "args": {
                "function": format!("{:#x}", f.function),
                "reads": f.total_reads,
                "writes": f.total_writes,
                "self_reads": f.self_reads,
            },
        }));
    }
    let every = model.columns.div_ceil(COUNTER_SAMPLES).max(1);
    let (mut fetched, mut departed, mut bytes) = (0u64, 0u64, 0u64);
    walk(model, "exporting", |step, _, f, cursor| {
        let Step::Read(r) = step else { return Ok(()) };
        if r.column % every == every - 1 || r.column + 1 == model.columns {
            let ts = r.column + 1 - every.min(r.column + 1);
            let per_fetch = if f.departed > departed {
                (f.bytes_read - bytes) as f64 / (f.departed - departed) as f64
            } else {
                0.0
            };
            events.push(
                json!({"ph": "C", "name": "working set", "pid": 1, "ts": ts, "args": {"lines": cursor.set().len()}}),
            );
            events.push(json!({"ph": "C", "name": "line fetches", "pid": 1, "ts": ts, "args": {"fetches": f.inserted - fetched}}));
            events.push(
                json!({"ph": "C", "name": "bytes read per fetch", "pid": 1, "ts": ts, "args": {"bytes": per_fetch}}),
            );
            (fetched, departed, bytes) = (f.inserted, f.departed, f.bytes_read);
        }
        Ok(())
    })?;
    serde_json::to_writer(
        &mut *out,
        &json!({"traceEvents": events, "displayTimeUnit": "ns", "otherData": {
            "trace": model.trace_path.display().to_string(),
            "function": model.metadata.function,
            "time": "read columns (1 column = 1 us)",
        }}),
    )?;
    writeln!(out)?;
    Ok(())
}

fn speedscope(model: &Model, names: &Names, out: &mut dyn Write) -> Result<()> {
    let frames = model.frames_in(0, u64::MAX)?;
    let mut frame_index: HashMap<String, usize> = HashMap::new();
    let mut shared = Vec::new();
    let mut index_of = |pc: u64| {
        let name = names.function(pc);
        let location = names.locate(pc);
        *frame_index.entry(name.clone()).or_insert_with(|| {
            shared.push(json!({"name": name, "file": location.file, "line": location.line}));
            shared.len() - 1
        })
    };
    let mut threads: Vec<u32> = frames.iter().map(|f| f.thread).collect();
    threads.sort_unstable();
    threads.dedup();
    let mut profiles = Vec::new();
    for thread in threads {
        let mut events = Vec::new();
        // Open frames: (frame index, end column). Frames come in pre-order,
        // so a frame's parent is open when it opens: pop to its depth.
        let mut open: Vec<(usize, u64)> = Vec::new();
        let (mut start, mut end) = (u64::MAX, 0u64);
        for f in frames.iter().filter(|f| f.thread == thread) {
            while open.len() > f.depth as usize {
                let (i, at) = open.pop().expect("non-empty");
                events.push(json!({"type": "C", "frame": i, "at": at}));
            }
            let i = index_of(f.function);
            events.push(json!({"type": "O", "frame": i, "at": f.first_column}));
            open.push((i, f.end_column));
            start = start.min(f.first_column);
            end = end.max(f.end_column);
        }
        while let Some((i, at)) = open.pop() {
            events.push(json!({"type": "C", "frame": i, "at": at}));
        }
        profiles.push(json!({
            "type": "evented",
            "name": format!("thread {thread}"),
            "unit": "none",
            "startValue": start.min(end),
            "endValue": end,
            "events": events,
        }));
    }
    serde_json::to_writer(
        &mut *out,
        &json!({
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "name": format!("{} (read columns)", model.trace_path.display()),
            "exporter": format!("linetrace {}", env!("CARGO_PKG_VERSION")),
            "activeProfileIndex": 0,
            "shared": {"frames": shared},
            "profiles": profiles,
        }),
    )?;
    writeln!(out)?;
    Ok(())
}

/// A CSV field, quoted when it needs to be (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

fn csv(model: &Model, names: &Names, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "column,thread,pc,function,file_line,address,line,size,kind")?;
    let line_size = model.line_size();
    walk(model, "exporting", |step, _, _, cursor| {
        let (column, thread, a) = match step {
            Step::Read(r) => (r.column, r.thread, r.access),
            // A write belongs to the column of the read after it.
            Step::Write { thread, access } => (cursor.column(), *thread, *access),
        };
        let pc = model.sites.get(a.site as usize).map_or(0, |s| s.pc);
        let location = names.locate(pc);
        let kind = match (a.reads, a.writes) {
            (true, true) => "modify",
            (true, false) => "read",
            _ => "write",
        };
        writeln!(
            out,
            "{column},{thread},{pc:#x},{},{},{:#x},{:#x},{},{kind}",
            csv_field(&location.function),
            csv_field(&location.file_line()),
            a.addr,
            line_size.line_of(a.addr),
            a.size
        )?;
        Ok(())
    })
}

/// One row per block of a trace of `record --allocations`, in the order
/// they were made: its lifetime in allocation events (the allocations
/// view's x axis) and in nanoseconds where the recorder timed the calls
/// (empty when not freed, or not timed), its addresses and sizes, what made
/// it, and the function and line that called the allocator.
fn block_csv(model: &Model, names: &Names, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "alloc_event,free_event,alloc_ns,free_ns,address,size,usable,kind,allocator,thread,callsite,function,file_line"
    )?;
    let optional = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for b in &model.allocations {
        let location = names.locate(b.callsite);
        let allocator = b.allocator.and_then(|id| model.allocator_names.get(&id)).map_or("", String::as_str);
        writeln!(
            out,
            "{},{},{},{},{:#x},{},{},{},{},{},{:#x},{},{}",
            b.alloc_event,
            optional(b.free_event),
            optional(b.alloc_ns),
            optional(b.free_ns),
            b.address,
            b.size,
            b.usable,
            b.kind.name(),
            csv_field(allocator),
            b.thread,
            b.callsite,
            csv_field(&location.function),
            csv_field(&location.file_line()),
        )?;
    }
    Ok(())
}

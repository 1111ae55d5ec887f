//! `linetrace at`: what hovering one point of the picture shows, printed.

use std::io::Write;

use anyhow::{Result, bail};
use decoder::heap_raster::{Clock, TimeAxis};
use decoder::inspect::{Inspection, Inspector};
use decoder::model::Model;
use decoder::symbols::Symbolizer;

use crate::cli::AtArgs;
use crate::progress::decode;

/// Prints the inspection of one column (and row), or, for a trace of
/// `record --allocations`, of one event and address of the heap picture.
pub fn at(args: AtArgs) -> Result<()> {
    // The kind decides which point was asked for: said before decoding,
    // which can take long.
    let heap = crate::progress::header(&args.file)?.is_some_and(|m| m.records_allocations_only());
    let point = match (heap, args.column, args.event.zip(args.address)) {
        (false, Some(column), _) => Point::Column { column, row: args.row },
        (true, _, Some((event, address))) => Point::Heap { event, address },
        (false, None, _) => bail!(
            "--event and --address are for a trace of `record --allocations` (the heap over allocation events); \
             {} is a trace of a function's accesses: ask with --column N [--row R]",
            args.file.display()
        ),
        (true, _, None) => bail!(
            "{} is a trace of `record --allocations`: its picture is the heap over allocation events, with no \
             read columns; ask with --event N --address A",
            args.file.display()
        ),
    };
    let model = decode(&args.file, &args.decode)?;
    let symbols = Symbolizer::with_paths(&model.modules, args.decode.symbol_paths());
    let mut out = std::io::stdout().lock();
    match point {
        Point::Column { column, row } => column_at(&mut out, &model, &symbols, column, row, args.json)?,
        Point::Heap { event, address } => heap_at(&mut out, &model, &symbols, event, address, args.json)?,
    }
    for w in symbols.warnings() {
        eprintln!("linetrace: warning: {w}");
    }
    Ok(())
}

/// The point asked for.
enum Point {
    /// A column of the access picture, and a row of it.
    Column { column: u64, row: Option<usize> },
    /// An event and an address of the heap picture.
    Heap { event: u64, address: u64 },
}

/// What hovering the access picture at `column` (and `row`) shows.
fn column_at(
    out: &mut dyn Write,
    model: &Model,
    symbols: &Symbolizer,
    column: u64,
    row: Option<usize>,
    json: bool,
) -> Result<()> {
    let inspection = Inspector::new(model, symbols).inspect(column, row)?;
    let bands = decoder::inspect::row_bands(model, symbols, column)?;
    if json {
        #[derive(serde::Serialize)]
        struct At<'a> {
            #[serde(flatten)]
            inspection: &'a Inspection,
            bands: &'a [decoder::inspect::RowBand],
        }
        serde_json::to_writer_pretty(&mut *out, &At { inspection: &inspection, bands: &bands })?;
        writeln!(out)?;
    } else {
        print_text(out, &inspection, model.columns)?;
        writeln!(out, "rows:")?;
        for b in &bands {
            writeln!(out, "  {:>4}..{:<4} {}", b.first_row, b.first_row + b.rows, b.label)?;
        }
    }
    Ok(())
}

/// What hovering the allocations view at `event` and `address` shows: the
/// block holding the address just after the event (where the view's hover
/// of that event lands, the middle of its step), or that none does.
fn heap_at(
    out: &mut dyn Write,
    model: &Model,
    symbols: &Symbolizer,
    event: u64,
    address: u64,
    json: bool,
) -> Result<()> {
    let events = model.total.allocations;
    if event >= events {
        bail!("--event {event}: the trace has {events} allocation events (the first is 0)");
    }
    let axis = TimeAxis::new(&model.allocations, events, Clock::Events);
    let block = axis.block_at(&model.allocations, address, event as f64 + 0.5);
    let description = block.map(|b| decoder::heap::describe_block(b, model, symbols));
    if json {
        #[derive(serde::Serialize)]
        struct HeapAt<'a> {
            event: u64,
            events: u64,
            address: u64,
            /// The block holding the address, `null` when none does.
            block: Option<&'a decoder::allocations::AllocationRecord>,
            /// The viewer's tooltip lines.
            description: Option<Vec<String>>,
        }
        serde_json::to_writer_pretty(&mut *out, &HeapAt { event, events, address, block, description })?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "event {event} of {events}, address {address:#x}")?;
    match description {
        Some(lines) => lines.iter().try_for_each(|l| writeln!(out, "  {l}"))?,
        None => writeln!(out, "  free: no block holds it")?,
    }
    Ok(())
}

fn print_text(out: &mut dyn Write, i: &Inspection, columns: u64) -> std::io::Result<()> {
    writeln!(out, "column {} of {columns}, {} lines in the working set", i.column, i.rows)?;
    if !i.frames.is_empty() {
        writeln!(out, "stack:")?;
    }
    for (depth, f) in i.frames.iter().enumerate() {
        writeln!(
            out,
            "  {:indent$}{} ({})  columns {}..{}, reads {} (self {}), writes {} (self {})",
            "",
            f.function,
            f.location,
            f.first_column,
            f.end_column,
            f.total_reads,
            f.self_reads,
            f.total_writes,
            f.self_writes,
            indent = depth * 2
        )?;
    }
    if let Some(a) = &i.access {
        writeln!(out, "access: {} of {} bytes at {:#x}, thread {}", a.kind, a.size, a.address, a.thread)?;
        write!(out, "  pc {:#x}", a.pc)?;
        if let (Some(m), Some(addr)) = (&a.module, a.module_address) {
            let name = m.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            write!(out, " ({name}+{addr:#x})")?;
        }
        writeln!(out, " in {} at {}", a.function, a.file_line)?;
        for f in &a.inlined {
            let file = f.file.as_deref().map(decoder::symbols::short_path).unwrap_or("??");
            let line = f.line.map(|l| l.to_string()).unwrap_or_else(|| "??".into());
            writeln!(out, "  inlined: {} at {file}:{line}", f.function)?;
        }
        if !i.rows_touched.is_empty() {
            let rows: Vec<String> = i.rows_touched.iter().map(usize::to_string).collect();
            writeln!(out, "  touched rows {}", rows.join(", "))?;
        }
    }
    if let Some(l) = &i.line {
        writeln!(
            out,
            "cache line: row {}, line {:#x} (address {:#x}), {} bytes read, {} distinct, age {}{}",
            l.row,
            l.line,
            l.address,
            l.bytes_read,
            l.distinct_bytes,
            l.age,
            if l.touched_here { ", touched by this read" } else { "" }
        )?;
    }
    if let Some(b) = &i.allocation {
        let freed = b.free_column.map(|c| c.to_string()).unwrap_or_else(|| "end".into());
        writeln!(
            out,
            "allocation: {} of {} bytes at {:#x} by {}, live columns {}..{freed}, {} reads, {} writes",
            b.kind, b.size, b.address, b.allocated_by, b.alloc_column, b.reads, b.writes
        )?;
    }
    Ok(())
}

//! `linetrace at`: what hovering one point of the picture shows, printed.

use std::io::Write;

use anyhow::Result;
use decoder::inspect::{Inspection, Inspector};
use decoder::symbols::Symbolizer;

use crate::cli::AtArgs;
use crate::progress::decode;

/// Prints the inspection of one column (and row).
pub fn at(args: AtArgs) -> Result<()> {
    let model = decode(&args.file, &args.decode)?;
    crate::heap::refuse_allocations_only(&args.file, &model.metadata, "at")?;
    let symbols = Symbolizer::with_paths(&model.modules, args.decode.symbol_paths());
    let inspection = Inspector::new(&model, &symbols).inspect(args.column, args.row)?;
    let bands = decoder::inspect::row_bands(&model, &symbols, args.column)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        #[derive(serde::Serialize)]
        struct At<'a> {
            #[serde(flatten)]
            inspection: &'a Inspection,
            bands: &'a [decoder::inspect::RowBand],
        }
        serde_json::to_writer_pretty(&mut out, &At { inspection: &inspection, bands: &bands })?;
        writeln!(out)?;
    } else {
        print_text(&mut out, &inspection, model.columns)?;
        writeln!(out, "rows:")?;
        for b in &bands {
            writeln!(out, "  {:>4}..{:<4} {}", b.first_row, b.first_row + b.rows, b.label)?;
        }
    }
    for w in symbols.warnings() {
        eprintln!("linetrace: warning: {w}");
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

//! `linetrace report --allocations`: the heap analysis of a trace
//! (`decoder::heap`), as text or JSON.

use std::io::Write;

use anyhow::{Result, bail};
use decoder::heap::{HeapReport, SiteRow};
use decoder::model::Model;
use decoder::symbols::Symbolizer;
use serde::Serialize;

/// True for a trace of `record --allocations` shown without
/// `--allocations`: it has no reads, so `command` shows its heap as if
/// asked, and says so on stderr (a script sees why the output changed).
pub fn heap_implied(metadata: &trace_rt::format::Metadata, command: &str) -> bool {
    let implied = metadata.records_allocations_only();
    if implied {
        eprintln!(
            "linetrace: note: a trace of `record --allocations` has no reads: {command} shows its heap, as with --allocations"
        );
    }
    implied
}

/// Refuses the heap picture's options (`given`, as typed) where `what`
/// draws no heap. (Clap required --allocations beside them, even for a
/// trace of `record --allocations`, which implies it.)
pub fn refuse_heap_options(given: &[&str], what: &str) -> Result<()> {
    match given {
        [] => Ok(()),
        [one] => bail!("{one} is for the heap picture (--allocations), and {what}"),
        more => bail!("{} are for the heap picture (--allocations), and {what}", more.join(", ")),
    }
}

/// [`refuse_heap_options`] for `command` without --allocations, which
/// draws the reads of `trace` (whose header is `metadata`, `None` when it
/// has none) unless it is a trace of `record --allocations`.
pub fn refuse_heap_options_for_reads(
    given: &[&str],
    trace: &std::path::Path,
    metadata: Option<&trace_rt::format::Metadata>,
    command: &str,
) -> Result<()> {
    if given.is_empty() || metadata.is_none_or(|m| m.records_allocations_only()) {
        // A file without a header is left to the decoding, which says why.
        return Ok(());
    }
    let what = format!("{command} shows the reads of {} unless --allocations is given", trace.display());
    refuse_heap_options(given, &what)
}

/// Refuses to compare (`command`: `diff`, `view A B`) a trace of `record
/// --allocations` with one of a function's accesses: every access figure of
/// the first would face zeros, as if the function read nothing, and every
/// heap figure of the second zeros of a function that may allocate.
pub fn refuse_mixed_kinds(
    a: (&std::path::Path, &trace_rt::format::Metadata),
    b: (&std::path::Path, &trace_rt::format::Metadata),
    command: &str,
) -> Result<()> {
    let kind = |m: &trace_rt::format::Metadata| {
        if m.records_allocations_only() { "`record --allocations` (a heap, no reads)" } else { "a function's accesses" }
    };
    if a.1.records_allocations_only() != b.1.records_allocations_only() {
        anyhow::bail!(
            "{command} compares two traces of a kind: {} is a trace of {}, {} of {}",
            a.0.display(),
            kind(a.1),
            b.0.display(),
            kind(b.1)
        );
    }
    Ok(())
}

/// The `report --allocations --json` document.
#[derive(Serialize)]
struct HeapJson<'a> {
    trace: String,
    metadata: &'a trace_rt::format::Metadata,
    status: String,
    /// How the program ended (a heap "at end" of a crash is no leak).
    exit: Option<instrument::TargetExit>,
    heap: &'a HeapReport,
}

/// Prints the heap analysis of `model`.
pub fn report(trace: &std::path::Path, model: &Model, symbols: &Symbolizer, json: bool, limit: usize) -> Result<()> {
    let heap = decoder::heap::analyse(model, symbols);
    let status = model.status_note().unwrap_or_else(|| "complete".to_string());
    let exit = crate::report::target_exit(model);
    let mut out = std::io::stdout().lock();
    if json {
        let doc = HeapJson { trace: trace.display().to_string(), metadata: &model.metadata, status, exit, heap: &heap };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    let h = &heap;
    writeln!(out, "trace:      {}", trace.display())?;
    writeln!(out, "program:    {}", model.metadata.argv.join(" "))?;
    writeln!(out, "status:     {status}")?;
    writeln!(out, "target:     {}", crate::report::describe_exit(exit))?;
    writeln!(out, "allocator calls: {}", h.events)?;
    if h.events == 0 {
        // Every table would be a header over no rows, and the bursts' line
        // read "windows of column 0 with >= 0 allocations".
        writeln!(out, "\nthe trace records no allocator call: there is no heap to analyse")?;
        return Ok(());
    }
    writeln!(
        out,
        "heap blocks: {} allocated ({} bytes requested), {} freed; reallocs: {} in place, {} moved",
        h.blocks, h.bytes, h.frees, h.reallocs_in_place, h.reallocs_moved
    )?;
    writeln!(out, "mappings:   {} ({} bytes), the program's own mmap calls", h.mappings, h.mapped_bytes)?;
    if let Some(b) = &h.program_break {
        let size = b.peak - b.start;
        writeln!(
            out,
            "brk heap:   {:#x}, grew to {} bytes (event {}), {} at the end; {} grows (+{} bytes), {} trims (-{}); \
             at its largest {:.1}% held live blocks",
            b.start,
            size,
            b.peak_event,
            b.end.saturating_sub(b.start),
            b.grows,
            b.grown_bytes,
            b.trims,
            b.trimmed_bytes,
            if size == 0 { 0.0 } else { 100.0 * b.live_at_peak as f64 / size as f64 }
        )?;
    }
    writeln!(out, "peak:       {} bytes in {} blocks, at event {}", h.peak.bytes, h.peak.blocks, h.peak.event)?;
    writeln!(
        out,
        "at end:     {} bytes in {} blocks (leaked, if the program was done)",
        h.at_end.bytes, h.at_end.blocks
    )?;
    if h.usable_known > 0 {
        let requested: u64 = h.bytes.max(1);
        writeln!(
            out,
            "waste:      {} bytes usable but not requested, over {} blocks ({:.1}% of requested)",
            h.waste,
            h.usable_known,
            100.0 * h.waste as f64 / requested as f64
        )?;
    } else {
        writeln!(out, "waste:      unknown (usable sizes are recorded by `record --allocations`)")?;
    }
    writeln!(out)?;
    writeln!(out, "{:<28} {:>9} {:>12} {:>10}", "size class (glibc)", "blocks", "bytes", "waste")?;
    for c in &h.size_classes {
        writeln!(out, "{:<28} {:>9} {:>12} {:>10}", c.class, c.blocks, c.bytes, c.waste)?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:>9} {:>12} {:>8} {:>8} {:>6} {:>10} {:>11} {:>12}",
        "event", "live bytes", "blocks", "regions", "gaps", "gap bytes", "largest gap", "span bytes"
    )?;
    for s in &h.timeline {
        let mark = if s.live == h.peak { "  <- peak" } else { "" };
        writeln!(
            out,
            "{:>9} {:>12} {:>8} {:>8} {:>6} {:>10} {:>11} {:>12}{mark}",
            s.live.event, s.live.bytes, s.live.blocks, s.regions, s.gaps, s.gap_bytes, s.largest_gap, s.span_bytes
        )?;
    }
    writeln!(out)?;
    writeln!(out, "{:<37} {:>8} {:>10} {:>11}", "region", "blocks", "ascending", "descending")?;
    for r in h.regions.iter().take(limit) {
        let range = format!("{:#x}..{:#x}", r.start, r.end);
        writeln!(out, "{range:<37} {:>8} {:>10} {:>11}", r.blocks, r.ascending, r.descending)?;
    }
    let table = |out: &mut std::io::StdoutLock, title: &str, rows: &[SiteRow]| -> std::io::Result<()> {
        writeln!(out)?;
        writeln!(out, "{:>9} {:>12}  {title}", "blocks", "bytes")?;
        for r in rows.iter().take(limit) {
            writeln!(out, "{:>9} {:>12}  {} ({})", r.blocks, r.bytes, r.function, r.line)?;
        }
        Ok(())
    };
    table(&mut out, "allocating function, most blocks", &h.top_by_count)?;
    table(&mut out, "allocating function, most bytes", &h.top_by_bytes)?;
    table(&mut out, "live at the end, by allocating function", &h.leaks)?;
    bursts(&mut out, &h.bursts, limit)?;
    for c in &h.custom {
        writeln!(out)?;
        writeln!(
            out,
            "custom allocator {}: {} blocks ({} bytes), {} released; peak {} bytes in {} blocks at event {}; \
             at end {} bytes in {} blocks",
            c.allocator,
            c.blocks,
            c.bytes,
            c.freed,
            c.peak.bytes,
            c.peak.blocks,
            c.peak.event,
            c.at_end.bytes,
            c.at_end.blocks
        )?;
        let sizes: Vec<String> = c.sizes.iter().map(|(size, n)| format!("{size} B x{n}")).collect();
        writeln!(out, "  sizes:   {}", sizes.join(", "))?;
        let callers: Vec<String> = c.callers.iter().map(|f| format!("{} ({})", f.function, f.blocks)).collect();
        writeln!(out, "  callers: {}", callers.join(", "))?;
    }
    if !h.leak_stacks.is_empty() {
        writeln!(out)?;
        writeln!(out, "live at the end, by call stack (--alloc-stack)")?;
        for s in h.leak_stacks.iter().take(limit) {
            writeln!(out, "{:>9} {:>12}  {}", s.blocks, s.bytes, s.frames.first().map_or("?", String::as_str))?;
            for f in s.frames.iter().skip(1) {
                writeln!(out, "{:>24}  <- {f}", "")?;
            }
        }
    }
    Ok(())
}

/// The allocation bursts, one line each with the functions behind them.
fn bursts(out: &mut impl Write, b: &decoder::bursts::BurstReport, limit: usize) -> std::io::Result<()> {
    let at = |t: u64| match b.clock {
        decoder::bursts::Clock::Nanoseconds => format!("{:.3} ms", t as f64 / 1e6),
        decoder::bursts::Clock::Columns => format!("column {t}"),
    };
    writeln!(out)?;
    writeln!(
        out,
        "allocation bursts (windows of {} with >= {} allocations, {}x the mean):",
        at(b.window),
        b.threshold,
        decoder::bursts::FACTOR
    )?;
    if b.bursts.is_empty() {
        writeln!(out, "  none")?;
    }
    for burst in b.bursts.iter().take(limit) {
        let who: Vec<String> = burst.functions.iter().map(|f| format!("{} ({})", f.function, f.blocks)).collect();
        writeln!(
            out,
            "  {:>14} .. {:<14} {:>9} blocks {:>12} bytes {:>5.1}%  {}",
            at(burst.start),
            at(burst.end),
            burst.allocations,
            burst.bytes,
            100.0 * burst.share,
            who.join(", ")
        )?;
    }
    Ok(())
}

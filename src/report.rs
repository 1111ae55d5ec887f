//! `linetrace report`: totals, locality metrics and tables of a trace.

use std::io::Write;

use anyhow::Result;
use decoder::symbols::Symbolizer;
use decoder::tables::{AccessRow, AllocationSiteRow, Grouping, access_table, allocation_table};
use decoder::timeline::ThreadCensus;
use serde::Serialize;
use trace_rt::format::TraceEnd;

use crate::cli::{ReportArgs, ReportGrouping};
use crate::progress::decode;

/// The whole `report --json` document.
#[derive(Serialize)]
struct Report<'a> {
    trace: String,
    metadata: &'a trace_rt::format::Metadata,
    status: String,
    truncated: bool,
    /// Unreadable regions skipped.
    damage: Vec<DamageRow>,
    exit: Option<instrument::TargetExit>,
    /// The program the target exec'd into.
    exec: Option<&'a str>,
    /// Entries into the function on other threads that were not traced.
    skipped_invocations: u64,
    columns: u64,
    line_size: u32,
    /// The thread whose reads are the columns (absent: every thread's).
    timeline: Option<u32>,
    /// Reads, writes and invocations of every thread, when one was chosen
    /// or looked for.
    census: Option<&'a std::collections::BTreeMap<u32, ThreadCensus>>,
    threads: &'a std::collections::BTreeMap<u32, decoder::totals::Totals>,
    total: &'a decoder::totals::Totals,
    metrics: &'a decoder::model::Metrics,
    cache: CacheJson,
    warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by_function: Option<Vec<AccessRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by_line: Option<Vec<AccessRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by_allocation: Option<Vec<AllocationSiteRow>>,
}

/// The cache simulation, for JSON.
#[derive(Serialize)]
struct CacheJson {
    d1: decoder::cache::CacheGeometry,
    ll: decoder::cache::CacheGeometry,
    misses: decoder::cache::CacheMisses,
}

/// A damaged region, for JSON.
#[derive(Serialize)]
struct DamageRow {
    offset: u64,
    bytes: u64,
    what: String,
}

/// Which thread the columns are, and what every thread did.
fn write_timeline(
    out: &mut dyn Write,
    shown: u32,
    census: &std::collections::BTreeMap<u32, ThreadCensus>,
) -> std::io::Result<()> {
    let readers = census.values().filter(|c| c.reads > 0).count();
    writeln!(
        out,
        "timeline:   thread {shown}'s reads, of {readers} threads that read (--thread TID picks another, --thread all \
         shows every thread's in the order they were written)"
    )?;
    for (tid, c) in census.iter().filter(|(_, c)| c.reads + c.writes + c.invocations > 0) {
        let mark = if *tid == shown { "*" } else { " " };
        writeln!(
            out,
            "          {mark} thread {tid:>8}: {:>12} reads {:>12} writes {:>6} invocations",
            c.reads, c.writes, c.invocations
        )?;
    }
    Ok(())
}

/// Prints the report of a trace.
pub fn report(args: ReportArgs) -> Result<()> {
    let model = decode(&args.file, &args.decode)?;
    let symbols = Symbolizer::with_paths(&model.modules, args.decode.symbol_paths());
    // `--by` asks for a table of the trace as it is (`--by allocation`
    // is one of an allocation trace's).
    if args.allocations || (args.by.is_none() && crate::heap::heap_implied(&model.metadata, "report")) {
        return crate::heap::report(&args.file, &model, &symbols, args.json, args.limit);
    }
    let (mut by_function, mut by_line, mut by_allocation) = (None, None, None);
    match args.by {
        Some(ReportGrouping::Function) => by_function = Some(access_table(&model, &symbols, Grouping::Function)),
        Some(ReportGrouping::Line) => by_line = Some(access_table(&model, &symbols, Grouping::Line)),
        Some(ReportGrouping::Allocation) => by_allocation = Some(allocation_table(&model, &symbols)),
        None => {}
    }
    let exit = target_exit(&model);
    let report = Report {
        trace: args.file.display().to_string(),
        metadata: &model.metadata,
        status: model.status_note().unwrap_or_else(|| "complete".to_string()),
        truncated: model.end.is_truncated(),
        damage: model
            .damage
            .iter()
            .map(|d| DamageRow { offset: d.offset, bytes: d.bytes, what: d.what.clone() })
            .collect(),
        exit,
        exec: model.exec.as_deref(),
        // Every thread's, also when one thread's timeline is shown.
        skipped_invocations: model.skipped_invocations(),
        columns: model.columns,
        line_size: model.working_set.config.line_size,
        timeline: model.timeline,
        census: model.census.as_ref(),
        threads: &model.threads,
        total: &model.total,
        metrics: &model.metrics,
        cache: CacheJson { d1: model.cache.config.d1, ll: model.cache.config.ll, misses: model.cache.misses },
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
    writeln!(out, "target:     {}", describe_exit(report.exit))?;
    if let Some(program) = report.exec {
        writeln!(out, "exec:       {program} (tracing stopped there)")?;
    }
    let skipped: std::collections::BTreeMap<u32, u64> = match report.census {
        Some(census) => census.iter().map(|(&tid, c)| (tid, c.skipped_invocations)).collect(),
        None => report.threads.iter().map(|(&tid, t)| (tid, t.skipped_invocations)).collect(),
    };
    let skipped = skipped.into_iter().filter(|&(_, n)| n > 0).collect();
    if let Some(note) = crate::record::skipped_note(&skipped) {
        writeln!(out, "note:       {note}")?;
    }
    if let (Some(shown), Some(census)) = (report.timeline, report.census) {
        write_timeline(&mut out, shown, census)?;
    }
    writeln!(out)?;
    let row = |out: &mut dyn Write, name: &str, t: &decoder::totals::Totals| {
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
        write!(out, ", {}: {n}", decoder::reuse::ReuseHistogram::bucket_label(k))?;
    }
    writeln!(out)?;
    let c = &report.cache;
    writeln!(
        out,
        "simulated D1 ({}):  {} read misses, {} write misses",
        c.d1.describe(),
        c.misses.d1_read,
        c.misses.d1_write
    )?;
    writeln!(
        out,
        "simulated LL ({}):  {} read misses, {} write misses",
        c.ll.describe(),
        c.misses.ll_read,
        c.misses.ll_write
    )?;
    let limit = args.limit;
    let title = if report.by_function.is_some() { "function" } else { "line" };
    match report.by_function.as_deref().or(report.by_line.as_deref()) {
        None => {}
        Some([]) => no_rows(&mut out, &format!("by {title}: the trace records no memory access, so nothing to group"))?,
        Some(rows) => {
            writeln!(out)?;
            writeln!(
                out,
                "{:>12} {:>12} {:>12} {:>12} {:>10} {:>10}  {title}",
                "self reads", "total reads", "self writes", "total writes", "D1 misses", "LL misses"
            )?;
            for r in rows.iter().take(limit) {
                writeln!(
                    out,
                    "{:>12} {:>12} {:>12} {:>12} {:>10} {:>10}  {}",
                    r.self_reads,
                    r.total_reads,
                    r.self_writes,
                    r.total_writes,
                    r.self_misses.d1(),
                    r.self_misses.ll(),
                    r.label()
                )?;
            }
        }
    }
    match report.by_allocation.as_deref() {
        None => {}
        Some([]) => no_rows(&mut out, "by allocation: the trace records no allocation, so no block to group reads by")?,
        Some(rows) => {
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
    }
    Ok(())
}

/// Says why a table has no rows, in its place: a header over no rows read
/// as a table that failed to fill.
fn no_rows(out: &mut impl Write, why: &str) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "{why}")
}

/// How the traced program ended, as the trace's trailer says (none for a
/// trace cut short).
pub fn target_exit(model: &decoder::model::Model) -> Option<instrument::TargetExit> {
    match &model.end {
        TraceEnd::Finished(t) => t.exit,
        TraceEnd::Cut { .. } => None,
    }
}

/// [`target_exit`] for people.
pub fn describe_exit(exit: Option<instrument::TargetExit>) -> String {
    match exit {
        Some(instrument::TargetExit::Code(c)) => format!("exited with code {c}"),
        Some(instrument::TargetExit::Signal(s)) => format!("killed by signal {s}"),
        None => "unknown (recording did not see the end)".to_string(),
    }
}

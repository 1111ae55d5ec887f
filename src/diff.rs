//! `linetrace diff`: two traces side by side.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use decoder::diff::{DiffRow, TraceDiff};
use decoder::symbols::Symbolizer;
use decoder::tables::Grouping;

use crate::cli::{DiffArgs, DiffGrouping};
use crate::progress::decode;

/// Compares two traces; exit 1 when a `--fail-if` threshold is crossed.
pub fn diff(args: DiffArgs) -> Result<ExitCode> {
    let a = decode(&args.a, &args.decode)?;
    let b = decode(&args.b, &args.decode)?;
    crate::heap::refuse_mixed_kinds((&args.a, &a.metadata), (&args.b, &b.metadata), "diff")?;
    let paths = args.decode.symbol_paths();
    let (sa, sb) = (Symbolizer::with_paths(&a.modules, paths.clone()), Symbolizer::with_paths(&b.modules, paths));
    let grouping = match args.by {
        DiffGrouping::Function => Grouping::Function,
        DiffGrouping::Line => Grouping::Line,
    };
    let result = decoder::diff::diff(&a, &sa, &b, &sb, grouping);
    // A gate on a metric this comparison lacks would pass whatever changed.
    if let Some(t) = args.fail_if.iter().find(|t| !result.metrics.iter().any(|m| m.name == t.metric)) {
        anyhow::bail!(
            "--fail-if {}: this comparison has no {0} (heap metrics need allocations in a trace, access metrics reads)",
            t.metric
        );
    }
    let crossed: Vec<String> = args.fail_if.iter().filter_map(|t| t.crossed(&result)).collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        #[derive(serde::Serialize)]
        struct Json<'a> {
            #[serde(flatten)]
            diff: &'a TraceDiff,
            crossed: &'a [String],
        }
        serde_json::to_writer_pretty(&mut out, &Json { diff: &result, crossed: &crossed })?;
        writeln!(out)?;
    } else {
        for w in sa.warnings().into_iter().chain(sb.warnings()) {
            eprintln!("linetrace: warning: {w}");
        }
        print_text(&mut out, &result, args.limit, matches!(args.by, DiffGrouping::Line))?;
    }
    if crossed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for c in &crossed {
        eprintln!("linetrace: threshold crossed: {c}");
    }
    Ok(ExitCode::from(1))
}

/// `1.234x`, or `-` when A is 0.
fn ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{r:.3}x"))
}

/// A count that may be fractional (utilisation, bytes per fetch).
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v:.3}") }
}

fn print_text(out: &mut dyn Write, d: &TraceDiff, limit: usize, by_line: bool) -> std::io::Result<()> {
    for (name, t) in [("A", &d.a), ("B", &d.b)] {
        writeln!(
            out,
            "{name}: {}  function {}  program {}  build-id {}",
            t.trace,
            t.function.as_deref().unwrap_or("?"),
            t.argv.join(" "),
            t.build_id.as_deref().unwrap_or("none")
        )?;
    }
    for w in &d.warnings {
        writeln!(out, "warning: {w}")?;
    }
    writeln!(out)?;
    writeln!(out, "{:<26} {:>14} {:>14} {:>10}", "metric", "A", "B", "B/A")?;
    for m in &d.metrics {
        writeln!(out, "{:<26} {:>14} {:>14} {:>10}", m.name, number(m.a), number(m.b), ratio(m.ratio()))?;
    }
    writeln!(out)?;
    // Empty for traces of allocator calls only.
    if !d.reuse.is_empty() {
        writeln!(out, "{:<26} {:>14} {:>14}", "reuse distance (lines)", "A", "B")?;
        for (label, a, b) in &d.reuse {
            writeln!(out, "{label:<26} {a:>14} {b:>14}")?;
        }
        writeln!(out)?;
    }
    if d.rows.is_empty() {
        return Ok(());
    }
    let what = if by_line { "line" } else { "function" };
    writeln!(
        out,
        "{:>10} {:>10} {:>9} {:>8}  {:>10} {:>10}  {:>8} {:>8}  {:>7} {:>7}  {what}",
        "total A", "total B", "delta", "share", "self A", "self B", "fetch A", "fetch B", "D1m A", "D1m B"
    )?;
    for r in d.rows.iter().take(limit) {
        write_row(out, r)?;
    }
    if d.rows.len() > limit {
        writeln!(out, "... {} more (--limit)", d.rows.len() - limit)?;
    }
    Ok(())
}

fn write_row(out: &mut dyn Write, r: &DiffRow) -> std::io::Result<()> {
    let get = |row: &Option<decoder::tables::AccessRow>, f: fn(&decoder::tables::AccessRow) -> u64| {
        row.as_ref().map_or_else(|| "-".to_string(), |row| f(row).to_string())
    };
    let only = match (&r.a, &r.b) {
        (Some(_), None) => "  (only in A)",
        (None, Some(_)) => "  (only in B)",
        _ => "",
    };
    let label = r.b.as_ref().or(r.a.as_ref()).map_or_else(|| r.key.clone(), |row| row.label());
    writeln!(
        out,
        "{:>10} {:>10} {:>+9} {:>+7.1}%  {:>10} {:>10}  {:>8} {:>8}  {:>7} {:>7}  {label}{only}",
        get(&r.a, |x| x.total_reads),
        get(&r.b, |x| x.total_reads),
        r.delta_total_reads,
        100.0 * r.delta_share,
        get(&r.a, |x| x.self_reads),
        get(&r.b, |x| x.self_reads),
        get(&r.a, |x| x.self_line_fetches),
        get(&r.b, |x| x.self_line_fetches),
        get(&r.a, |x| x.self_misses.d1()),
        get(&r.b, |x| x.self_misses.d1()),
    )
}

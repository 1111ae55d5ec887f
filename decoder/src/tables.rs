//! Per-function, per-source-line and per-allocation-site tables.
//!
//! "Self" counts are the accesses of instructions in the function (line);
//! "total" adds the accesses of everything it called. Recursion is counted
//! once: a frame whose ancestor is the same function (call instruction)
//! adds nothing to the total. Compiler fragments (`f.cold`, `f.part.0`,
//! `f(int) [clone .isra.0]`) are code of their function: their accesses
//! count in its row, which lists the fragment kinds (`f [cold]`).

use std::collections::HashMap;

use serde::Serialize;

use crate::calltree::Inclusive;
use crate::model::{Model, SiteCounts};
use crate::symbols::Symbolizer;
use crate::symbols::names::{display_with_fragments, split_fragment};

/// One row of a per-function or per-line table.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AccessRow {
    /// Function name, or `file:line`.
    pub key: String,
    /// Reads by its own instructions.
    pub self_reads: u64,
    /// Writes by its own instructions.
    pub self_writes: u64,
    /// Reads including callees.
    pub total_reads: u64,
    /// Writes including callees.
    pub total_writes: u64,
    /// Bytes read by its own instructions.
    pub self_bytes_read: u64,
    /// Simulated cache misses of its own instructions.
    pub self_misses: crate::cache::CacheMisses,
    /// Lines its own reads inserted into the working set.
    pub self_line_fetches: u64,
    /// Kinds of compiler fragments whose accesses are in the row (`cold`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fragments: Vec<String>,
}

impl AccessRow {
    /// The key with its fragment kinds, for people: `thrower [cold]`.
    pub fn label(&self) -> String {
        let kinds: Vec<&str> = self.fragments.iter().map(String::as_str).collect();
        display_with_fragments(&self.key, &kinds)
    }
}

/// One row of the per-allocation-site table.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AllocationSiteRow {
    /// `function file:line` of the call that allocated.
    pub site: String,
    /// Blocks allocated there.
    pub blocks: u64,
    /// Bytes requested there.
    pub bytes: u64,
    /// Reads that fell into those blocks.
    pub reads: u64,
    /// Writes that fell into those blocks.
    pub writes: u64,
    /// Blocks never freed during the trace.
    pub live_at_end: u64,
}

/// Which table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grouping {
    /// By containing function.
    Function,
    /// By source line.
    Line,
}

/// Reads and writes grouped by function or source line, most reads first.
pub fn access_table(model: &Model, symbols: &Symbolizer, grouping: Grouping) -> Vec<AccessRow> {
    // Inclusive totals, summed by the call tree as frames closed (so they
    // do not depend on frames it dropped to bound memory).
    let inclusive = match grouping {
        Grouping::Function => &model.call_tree.function_totals,
        Grouping::Line => &model.call_tree.callsite_totals,
    };
    group_accesses(&model.sites, &model.site_counts, inclusive.iter().map(|(&k, v)| (k, *v)), symbols, grouping)
}

/// The grouping itself: per-site counts, plus inclusive counts keyed by
/// function entry (for [`Grouping::Function`]) or call instruction (for
/// [`Grouping::Line`]), into rows.
pub fn group_accesses(
    sites: &[trace_rt::format::Site],
    site_counts: &[SiteCounts],
    inclusive: impl Iterator<Item = (u64, Inclusive)>,
    symbols: &Symbolizer,
    grouping: Grouping,
) -> Vec<AccessRow> {
    // (row key, fragment kind of this pc's function)
    let key = |symbols: &Symbolizer, pc: u64| -> (String, Vec<&'static str>) {
        let l = symbols.locate(pc);
        match grouping {
            Grouping::Function => {
                let (base, kinds) = split_fragment(&l.function);
                (base.to_string(), kinds)
            }
            Grouping::Line => (l.file_line(), Vec::new()),
        }
    };
    let mut rows: HashMap<String, AccessRow> = HashMap::new();
    let note = |row: &mut AccessRow, kinds: Vec<&'static str>| {
        for k in kinds {
            if !row.fragments.iter().any(|f| f == k) {
                row.fragments.push(k.to_string());
            }
        }
    };
    for (site, counts) in sites.iter().zip(site_counts) {
        if counts.reads == 0 && counts.writes == 0 {
            continue;
        }
        let (k, kinds) = key(symbols, site.pc);
        let row = rows.entry(k.clone()).or_insert_with(|| AccessRow { key: k, ..AccessRow::default() });
        note(row, kinds);
        row.self_reads += counts.reads;
        row.self_writes += counts.writes;
        row.self_bytes_read += counts.bytes_read;
        row.self_misses.add(&counts.misses);
        row.self_line_fetches += counts.line_fetches;
    }
    let mut extra: HashMap<String, (u64, u64)> = HashMap::new();
    for (pc, totals) in inclusive {
        // A fragment is entered from its function (a jump, or a call whose
        // frame is inside the function's): its inclusive count is part of
        // the function's, so only whole functions add here.
        let (k, kinds) = key(symbols, pc);
        if !kinds.is_empty() {
            continue;
        }
        let e = extra.entry(k).or_default();
        e.0 += totals.reads;
        e.1 += totals.writes;
    }
    for (k, (r, w)) in extra {
        let row = rows.entry(k.clone()).or_insert_with(|| AccessRow { key: k, ..AccessRow::default() });
        match grouping {
            // A function's frames include its own accesses.
            Grouping::Function => {
                row.total_reads = r.max(row.self_reads);
                row.total_writes = w.max(row.self_writes);
            }
            // Calls made from a line come on top of the line's own accesses.
            Grouping::Line => {
                row.total_reads = row.self_reads + r;
                row.total_writes = row.self_writes + w;
            }
        }
    }
    let mut rows: Vec<AccessRow> = rows
        .into_values()
        .map(|mut r| {
            r.total_reads = r.total_reads.max(r.self_reads);
            r.total_writes = r.total_writes.max(r.self_writes);
            r
        })
        .collect();
    rows.sort_by(|a, b| {
        b.total_reads.cmp(&a.total_reads).then(b.self_reads.cmp(&a.self_reads)).then(a.key.cmp(&b.key))
    });
    rows
}

/// Blocks, bytes, reads and writes per allocation site, most reads first.
pub fn allocation_table(model: &Model, symbols: &Symbolizer) -> Vec<AllocationSiteRow> {
    let mut rows: HashMap<String, AllocationSiteRow> = HashMap::new();
    for a in &model.allocations {
        let l = symbols.locate(a.callsite);
        let site = format!("{} {} ({})", l.function, l.file_line(), a.kind.name());
        let row = rows.entry(site.clone()).or_insert_with(|| AllocationSiteRow { site, ..Default::default() });
        row.blocks += 1;
        row.bytes = row.bytes.saturating_add(a.size);
        row.reads += a.reads;
        row.writes += a.writes;
        row.live_at_end += u64::from(a.free_column.is_none());
    }
    let mut rows: Vec<AllocationSiteRow> = rows.into_values().collect();
    rows.sort_by(|a, b| b.reads.cmp(&a.reads).then(b.bytes.cmp(&a.bytes)).then(a.site.cmp(&b.site)));
    rows
}

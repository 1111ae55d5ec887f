//! Two traces compared: "did this rewrite make the function touch fewer
//! cache lines?"
//!
//! Metrics are set side by side with the ratio B/A. Functions are matched
//! by demangled name with compiler fragments (`.cold`, `.part.N`, ...)
//! folded into their function ([`crate::tables`] does the folding), source
//! lines by `file:line`; a key found in one trace only is listed as such.
//! Rows are sorted by the largest absolute change of total reads, then of
//! self reads. A "share" is a row's reads over its trace's reads, so that
//! traces of different lengths compare.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::heap::{HeapReport, analyse_records};
use crate::model::Model;
use crate::range::RangeStats;
use crate::symbols::Symbolizer;
use crate::tables::{AccessRow, Grouping, access_table};

/// One trace's identity, for the header.
#[derive(Clone, Debug, Serialize)]
pub struct TraceIdentity {
    /// The trace file.
    pub trace: String,
    /// Command line.
    pub argv: Vec<String>,
    /// Traced function.
    pub function: Option<String>,
    /// The executable's build-id.
    pub build_id: Option<String>,
}

impl TraceIdentity {
    fn of(model: &Model) -> Self {
        TraceIdentity {
            trace: model.trace_path.display().to_string(),
            argv: model.metadata.argv.clone(),
            function: model.metadata.function.clone(),
            build_id: model.metadata.build_id.clone(),
        }
    }
}

/// A whole-trace metric in both traces.
#[derive(Clone, Debug, Serialize)]
pub struct MetricPair {
    /// Name, as `--fail-if` spells it.
    pub name: &'static str,
    /// In A.
    pub a: f64,
    /// In B.
    pub b: f64,
}

impl MetricPair {
    /// B/A; `None` when A is 0.
    pub fn ratio(&self) -> Option<f64> {
        (self.a != 0.0).then(|| self.b / self.a)
    }
}

/// One function or line in both traces.
#[derive(Clone, Debug, Serialize)]
pub struct DiffRow {
    /// Function name or `file:line`.
    pub key: String,
    /// Its row in A (`None`: only in B).
    pub a: Option<AccessRow>,
    /// Its row in B (`None`: only in A).
    pub b: Option<AccessRow>,
    /// B's total reads minus A's.
    pub delta_total_reads: i64,
    /// B's self reads minus A's.
    pub delta_self_reads: i64,
    /// B's share of its trace's reads minus A's (total reads).
    pub delta_share: f64,
}

/// The comparison.
#[derive(Clone, Debug, Serialize)]
pub struct TraceDiff {
    /// Trace A.
    pub a: TraceIdentity,
    /// Trace B.
    pub b: TraceIdentity,
    /// Why the comparison may not be like for like.
    pub warnings: Vec<String>,
    /// Whole-trace metrics.
    pub metrics: Vec<MetricPair>,
    /// Reuse-distance histograms of reads: (bucket, A, B), the first row
    /// `cold` reads, then distances in lines (`0`, `2-3`, ...).
    pub reuse: Vec<(String, u64, u64)>,
    /// Rows, largest change first.
    pub rows: Vec<DiffRow>,
}

/// Compares `a` with `b`, by function or by source line.
pub fn diff(a: &Model, sa: &Symbolizer, b: &Model, sb: &Symbolizer, grouping: Grouping) -> TraceDiff {
    let (ia, ib) = (TraceIdentity::of(a), TraceIdentity::of(b));
    let mut warnings = Vec::new();
    if ia.function != ib.function {
        warnings.push(format!(
            "the traced functions differ: {} in A, {} in B",
            ia.function.as_deref().unwrap_or("?"),
            ib.function.as_deref().unwrap_or("?")
        ));
    }
    if ia.argv.get(1..) != ib.argv.get(1..) {
        warnings.push(format!(
            "the arguments differ: [{}] in A, [{}] in B",
            ia.argv.get(1..).unwrap_or_default().join(" "),
            ib.argv.get(1..).unwrap_or_default().join(" ")
        ));
    }
    // A cut or damaged trace counts only part of its run: every ratio
    // against it is off by the part that is missing.
    for (name, model) in [("A", a), ("B", b)] {
        if let Some(status) = model.status_note() {
            warnings.push(format!("{name} is {status}: its counts cover only what was recorded"));
        }
    }
    if a.cache.config != b.cache.config || a.working_set.config != b.working_set.config {
        warnings.push("the traces were decoded with different cache or working-set settings".into());
    }
    // Traces of allocator calls only have no access metrics to compare:
    // every one would be 0 against 0.
    let accesses = !(a.metadata.records_allocations_only() && b.metadata.records_allocations_only());
    let mut metrics = if accesses { metrics(a, b) } else { Vec::new() };
    if a.total.allocations > 0 || b.total.allocations > 0 {
        metrics.extend(heap_metrics(a, sa, b, sb));
    }
    TraceDiff {
        a: ia,
        b: ib,
        warnings,
        metrics,
        reuse: if accesses { reuse(a, b) } else { Vec::new() },
        rows: match_rows(access_table(a, sa, grouping), a.total.reads, access_table(b, sb, grouping), b.total.reads),
    }
}

/// Two column ranges compared (a frame and its partner, a selection and
/// where it maps): their metrics side by side and their functions and
/// lines matched, as [`diff`] does for whole traces.
#[derive(Clone, Debug, Serialize)]
pub struct RangeDiff {
    /// Range metrics.
    pub metrics: Vec<MetricPair>,
    /// By function, largest change first.
    pub by_function: Vec<DiffRow>,
    /// By source line.
    pub by_line: Vec<DiffRow>,
}

/// Compares the statistics of two ranges.
pub fn range_diff(a: &RangeStats, b: &RangeStats) -> RangeDiff {
    let pair = |name, get: fn(&RangeStats) -> f64| MetricPair { name, a: get(a), b: get(b) };
    RangeDiff {
        metrics: vec![
            pair("reads", |r| r.reads as f64),
            pair("writes", |r| r.writes as f64),
            pair("bytes_read", |r| r.bytes_read as f64),
            pair("line_fetches", |r| r.line_fetches as f64),
            pair("bytes_per_fetch", |r| r.mean_bytes_read_per_fetch),
            pair("utilisation", |r| r.utilisation),
            pair("d1_read_misses", |r| r.d1_read_misses as f64),
            pair("ll_read_misses", |r| r.ll_read_misses as f64),
        ],
        by_function: match_rows(a.by_function.clone(), a.reads, b.by_function.clone(), b.reads),
        by_line: match_rows(a.by_line.clone(), a.reads, b.by_line.clone(), b.reads),
    }
}

/// Reads one whole-trace metric off a model.
pub type MetricOf = fn(&Model) -> f64;

/// The metric names `--fail-if` accepts, with how each is read off a model.
pub const METRICS: &[(&str, MetricOf)] = &[
    ("instructions", |m| m.total.instructions as f64),
    ("reads", |m| m.total.reads as f64),
    ("writes", |m| m.total.writes as f64),
    ("bytes_read", |m| m.total.bytes_read as f64),
    ("lines", |m| m.total.unique_lines as f64),
    ("line_fetches", |m| m.metrics.line_fetches as f64),
    ("bytes_per_fetch", |m| m.metrics.mean_bytes_read_per_fetch),
    ("distinct_bytes_per_fetch", |m| m.metrics.mean_distinct_bytes_per_fetch),
    ("utilisation", |m| m.metrics.utilisation),
    ("d1_misses", |m| m.cache.misses.d1() as f64),
    ("ll_misses", |m| m.cache.misses.ll() as f64),
];

fn metrics(a: &Model, b: &Model) -> Vec<MetricPair> {
    METRICS.iter().map(|&(name, get)| MetricPair { name, a: get(a), b: get(b) }).collect()
}

/// Reads one heap metric off a trace's heap analysis.
pub type HeapMetricOf = fn(&HeapReport) -> f64;

/// The heap metrics `--fail-if` accepts (in a comparison when either
/// trace recorded allocations: `record --allocations`, or the allocations
/// inside a traced function), with how each is read off the analysis that
/// `report --allocations` prints.
pub const HEAP_METRICS: &[(&str, HeapMetricOf)] = &[
    ("allocator_calls", |h| h.events as f64),
    ("heap_blocks", |h| h.blocks as f64),
    ("heap_bytes", |h| h.bytes as f64),
    ("peak_live_bytes", |h| h.peak.bytes as f64),
    ("peak_live_blocks", |h| h.peak.blocks as f64),
    ("live_bytes_at_end", |h| h.at_end.bytes as f64),
    ("waste_bytes", |h| h.waste as f64),
    ("reallocs_moved", |h| h.reallocs_moved as f64),
    ("mapped_bytes", |h| h.mapped_bytes as f64),
];

/// Every name `--fail-if` accepts.
pub fn metric_names() -> impl Iterator<Item = &'static str> {
    METRICS.iter().map(|(n, _)| *n).chain(HEAP_METRICS.iter().map(|(n, _)| *n))
}

fn heap_metrics(a: &Model, sa: &Symbolizer, b: &Model, sb: &Symbolizer) -> Vec<MetricPair> {
    let (ha, hb) = (
        analyse_records(&a.allocations, a.total.allocations, sa),
        analyse_records(&b.allocations, b.total.allocations, sb),
    );
    HEAP_METRICS.iter().map(|&(name, get)| MetricPair { name, a: get(&ha), b: get(&hb) }).collect()
}

fn reuse(a: &Model, b: &Model) -> Vec<(String, u64, u64)> {
    let (ha, hb) = (&a.metrics.reuse, &b.metrics.reuse);
    let mut out = vec![("cold".to_string(), ha.cold, hb.cold)];
    let buckets = ha.buckets.len().max(hb.buckets.len());
    for k in 0..buckets {
        let (x, y) = (ha.buckets.get(k).copied().unwrap_or(0), hb.buckets.get(k).copied().unwrap_or(0));
        if x > 0 || y > 0 {
            out.push((crate::reuse::ReuseHistogram::bucket_label(k), x, y));
        }
    }
    out
}

/// Matches rows by key and sorts them by change; `a_reads` and `b_reads`
/// are the totals shares are taken of.
pub fn match_rows(a: Vec<AccessRow>, a_reads: u64, b: Vec<AccessRow>, b_reads: u64) -> Vec<DiffRow> {
    let mut both: BTreeMap<String, (Option<AccessRow>, Option<AccessRow>)> = BTreeMap::new();
    for r in a {
        let key = r.key.clone();
        both.entry(key).or_default().0 = Some(r);
    }
    for r in b {
        let key = r.key.clone();
        both.entry(key).or_default().1 = Some(r);
    }
    let share = |r: &Option<AccessRow>, total: u64| {
        r.as_ref().map_or(0.0, |r| if total == 0 { 0.0 } else { r.total_reads as f64 / total as f64 })
    };
    let reads = |r: &Option<AccessRow>| r.as_ref().map_or((0, 0), |r| (r.total_reads as i64, r.self_reads as i64));
    let mut rows: Vec<DiffRow> = both
        .into_iter()
        .map(|(key, (a, b))| {
            let ((ta, sa), (tb, sb)) = (reads(&a), reads(&b));
            DiffRow {
                key,
                delta_total_reads: tb - ta,
                delta_self_reads: sb - sa,
                delta_share: share(&b, b_reads) - share(&a, a_reads),
                a,
                b,
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        y.delta_total_reads
            .unsigned_abs()
            .cmp(&x.delta_total_reads.unsigned_abs())
            .then(y.delta_self_reads.unsigned_abs().cmp(&x.delta_self_reads.unsigned_abs()))
            .then(x.key.cmp(&y.key))
    });
    rows
}

/// A `--fail-if` condition: `METRIC>+N%` (B grew by more than N% of A) or
/// `METRIC<-N%` (B shrank by more than N%).
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// A name from [`METRICS`] or [`HEAP_METRICS`].
    pub metric: String,
    /// Growth (`true`, `>`) or shrinkage (`false`, `<`).
    pub grows: bool,
    /// The change allowed, in percent of A (non-negative).
    pub percent: f64,
}

impl Threshold {
    /// Parses `reads>+5%`, `d1_misses<-10%`, `line_fetches>0%`.
    pub fn parse(text: &str) -> Result<Threshold, String> {
        let spec = text.replace(' ', "");
        let (metric, rest, grows) = match (spec.split_once('>'), spec.split_once('<')) {
            (Some((m, r)), None) => (m, r, true),
            (None, Some((m, r))) => (m, r, false),
            _ => return Err(format!("--fail-if {text:?}: expected METRIC>+N% or METRIC<-N%, e.g. reads>+5%")),
        };
        if !metric_names().any(|n| n == metric) {
            let names: Vec<&str> = metric_names().collect();
            return Err(format!("--fail-if {text:?}: unknown metric {metric:?}; one of {}", names.join(", ")));
        }
        let number = rest
            .strip_suffix('%')
            .ok_or_else(|| format!("--fail-if {text:?}: give the change in percent, e.g. +5%"))?;
        let value: f64 = number
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| format!("--fail-if {text:?}: {number:?} is not a number"))?;
        if (grows && value < 0.0) || (!grows && value > 0.0) {
            return Err(format!("--fail-if {text:?}: '>' takes a growth (+N%), '<' a shrinkage (-N%)"));
        }
        Ok(Threshold { metric: metric.to_string(), grows, percent: value.abs() })
    }

    /// The crossing, for people, if `diff` crosses this threshold.
    pub fn crossed(&self, diff: &TraceDiff) -> Option<String> {
        let m = diff.metrics.iter().find(|m| m.name == self.metric)?;
        let change = if m.a == 0.0 {
            if m.b == 0.0 { 0.0 } else { f64::INFINITY.copysign(m.b) }
        } else {
            100.0 * (m.b - m.a) / m.a.abs()
        };
        let crossed = if self.grows { change > self.percent } else { change < -self.percent };
        crossed.then(|| {
            format!(
                "{}: {} -> {} ({:+.2}%), limit {}{}%",
                m.name,
                m.a,
                m.b,
                change,
                if self.grows { ">+" } else { "<-" },
                self.percent
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, total: u64, own: u64) -> AccessRow {
        AccessRow { key: key.into(), total_reads: total, self_reads: own, ..AccessRow::default() }
    }

    #[test]
    fn rows_match_by_key_and_sort_by_change() {
        let a = vec![row("f", 100, 50), row("g", 40, 40), row("only_a", 10, 10)];
        let b = vec![row("f", 100, 20), row("g", 90, 90), row("only_b", 5, 5)];
        let rows = match_rows(a, 150, b, 200);
        let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["g", "only_a", "only_b", "f"]);
        assert_eq!(rows[0].delta_total_reads, 50);
        assert!((rows[0].delta_share - (90.0 / 200.0 - 40.0 / 150.0)).abs() < 1e-12);
        assert!(rows[1].b.is_none() && rows[2].a.is_none());
        assert_eq!(rows[3].delta_self_reads, -30);
    }

    #[test]
    fn thresholds_parse_and_trip() {
        let t = Threshold::parse("reads>+5%").expect("parse");
        assert_eq!(t, Threshold { metric: "reads".into(), grows: true, percent: 5.0 });
        let d = |a: f64, b: f64| TraceDiff {
            a: TraceIdentity { trace: String::new(), argv: vec![], function: None, build_id: None },
            b: TraceIdentity { trace: String::new(), argv: vec![], function: None, build_id: None },
            warnings: vec![],
            metrics: vec![MetricPair { name: "reads", a, b }],
            reuse: vec![],
            rows: vec![],
        };
        assert!(t.crossed(&d(100.0, 105.0)).is_none(), "exactly +5% is allowed");
        assert!(t.crossed(&d(100.0, 106.0)).is_some());
        assert!(t.crossed(&d(100.0, 50.0)).is_none());
        let shrink = Threshold::parse("reads<-10%").expect("parse");
        assert!(shrink.crossed(&d(100.0, 89.0)).is_some());
        assert!(shrink.crossed(&d(100.0, 95.0)).is_none());
        assert!(Threshold::parse("reeds>+5%").expect_err("unknown").contains("unknown metric"));
        assert_eq!(Threshold::parse("peak_live_bytes>+2%").expect("a heap metric").metric, "peak_live_bytes");
        assert!(Threshold::parse("peak>+2%").expect_err("unknown").contains("peak_live_bytes"));
        assert!(Threshold::parse("reads>5").expect_err("no %").contains("percent"));
        assert!(Threshold::parse("reads>-5%").expect_err("sign").contains("growth"));
        assert!(Threshold::parse("reads=5%").expect_err("op").contains("METRIC>+N%"));
    }
}

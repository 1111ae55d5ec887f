//! Totals of a trace, per thread and overall: the first thing `report` shows.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::Path;

use serde::Serialize;
use trace_rt::format::{Event, Metadata, TargetExit, TraceEnd, TraceReader};

use crate::DecodeError;

/// Counts for one thread (or all threads together).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Instructions single-stepped.
    pub instructions: u64,
    /// Executions of reading sites (loads and read-modify-writes).
    pub reads: u64,
    /// Executions of writing sites (stores and read-modify-writes).
    pub writes: u64,
    /// Bytes loaded.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Distinct cache lines read or written.
    pub unique_lines: u64,
    /// Allocator calls and mmap/munmap system calls.
    pub allocations: u64,
    /// Invocations of the traced function started.
    pub invocations: u64,
    /// Signals delivered while tracing.
    pub signals: u64,
}

/// The totals of a whole trace.
#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    /// The recording's metadata.
    pub metadata: Metadata,
    /// Cache line size used for `unique_lines`.
    pub line_size: u32,
    /// Per thread id.
    pub threads: BTreeMap<u32, Totals>,
    /// All threads together (unique lines counted across threads).
    pub total: Totals,
    /// Whether the trace is incomplete.
    pub truncated: bool,
    /// How the trace ended, for people.
    pub end: String,
    /// How the traced program ended, when the recorder saw it end.
    pub exit: Option<TargetExit>,
}

/// Summarizes the trace file at `path`.
pub fn summarize_file(path: &Path, line_size: u32) -> Result<TraceSummary, DecodeError> {
    summarize(TraceReader::open(path)?, line_size)
}

/// Summarizes a trace read from `reader`.
pub fn summarize<R: Read>(
    mut reader: TraceReader<R>,
    line_size: u32,
) -> Result<TraceSummary, DecodeError> {
    if !line_size.is_power_of_two() {
        return Err(DecodeError::InvalidSetting(format!(
            "line size {line_size} is not a power of two"
        )));
    }
    let shift = line_size.trailing_zeros();
    let mut threads: BTreeMap<u32, (Totals, HashSet<u64>)> = BTreeMap::new();
    let mut all_lines = HashSet::new();
    while let Some(rec) = reader.next_record()? {
        let (t, lines) = threads.entry(rec.thread).or_default();
        let (site, addr, size) = match rec.event {
            Event::Access { site, addr } => {
                let s = reader.sites()[site as usize];
                (s, addr, u64::from(s.size))
            }
            Event::AccessSized { site, addr, size } => (reader.sites()[site as usize], addr, size),
            Event::Stepped { count } => {
                t.instructions += count;
                continue;
            }
            Event::Alloc(_) => {
                t.allocations += 1;
                continue;
            }
            Event::InvocationStart { .. } => {
                t.invocations += 1;
                continue;
            }
            Event::Signal { .. } => {
                t.signals += 1;
                continue;
            }
            _ => continue,
        };
        if site.kind.reads() {
            t.reads += 1;
            t.bytes_read += size;
        }
        if site.kind.writes() {
            t.writes += 1;
            t.bytes_written += size;
        }
        // An access that straddles lines touches each of them.
        let first = addr >> shift;
        let last = addr.saturating_add(size.max(1) - 1) >> shift;
        for line in first..=last {
            if lines.insert(line) {
                all_lines.insert(line);
            }
        }
    }
    let end = reader.end().cloned();
    let mut total = Totals::default();
    let threads = threads
        .into_iter()
        .map(|(tid, (mut t, lines))| {
            t.unique_lines = lines.len() as u64;
            total.instructions += t.instructions;
            total.reads += t.reads;
            total.writes += t.writes;
            total.bytes_read += t.bytes_read;
            total.bytes_written += t.bytes_written;
            total.allocations += t.allocations;
            total.invocations += t.invocations;
            total.signals += t.signals;
            (tid, t)
        })
        .collect();
    total.unique_lines = all_lines.len() as u64;
    Ok(TraceSummary {
        metadata: reader.metadata().clone(),
        line_size,
        threads,
        total,
        truncated: end.as_ref().is_none_or(|e| e.is_truncated()),
        exit: match &end {
            Some(TraceEnd::Finished(t)) => t.exit,
            _ => None,
        },
        end: end
            .map(|e| e.describe())
            .unwrap_or_else(|| "unknown".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_rt::format::{AccessKind, Site, TraceWriter, Trailer};

    #[test]
    fn counts_reads_writes_and_straddling_lines() {
        let mut w = TraceWriter::new(Vec::new(), &Metadata::new("test")).expect("header");
        let load = w.add_site(Site {
            pc: 1,
            len: 4,
            kind: AccessKind::Read,
            size: 8,
            count: 1,
        });
        let rmw = w.add_site(Site {
            pc: 2,
            len: 4,
            kind: AccessKind::Modify,
            size: 4,
            count: 1,
        });
        w.push(
            1,
            &Event::Access {
                site: load,
                addr: 60,
            },
        )
        .expect("push"); // lines 0 and 1
        w.push(
            1,
            &Event::Access {
                site: rmw,
                addr: 64,
            },
        )
        .expect("push"); // line 1
        w.push(
            2,
            &Event::Access {
                site: load,
                addr: 640,
            },
        )
        .expect("push"); // line 10
        w.push(2, &Event::Stepped { count: 5 }).expect("push");
        let bytes = w.finish(&Trailer::default()).expect("finish");
        let s = summarize(TraceReader::new(&bytes[..]).expect("reader"), 64).expect("summary");
        assert_eq!(s.threads[&1].reads, 2);
        assert_eq!(s.threads[&1].writes, 1);
        assert_eq!(s.threads[&1].bytes_read, 12);
        assert_eq!(s.threads[&1].unique_lines, 2);
        assert_eq!(s.total.unique_lines, 3);
        assert_eq!(s.total.instructions, 5);
        assert!(!s.truncated);
    }
}

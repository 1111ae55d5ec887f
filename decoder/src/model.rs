//! The decoded model: the second contract of linetrace, read by every view
//! (viewer, `report`, `render`, `at`, exports). Version [`MODEL_VERSION`].
//!
//! [`Model::decode`] reads a trace once, in bounded memory, and produces:
//! - **columns**: the x axis. Column `i` is the `i`-th memory-read event of
//!   the timeline's thread ([`Model::timeline`], [`crate::timeline`]; every
//!   thread's in file order when none is chosen) (loads and
//!   read-modify-writes; each element of a gather is its own read; a
//!   rep-string range is one read). Writes do not
//!   make columns. The lines a read touches are [`crate::lines::LineSize::lines`].
//! - **call tree** ([`CallTree`]): frames spanning `[first_column,
//!   end_column)`, in pre-order with non-decreasing `first_column`, so a
//!   frame is exactly as wide as the reads it made and the frames of a
//!   column range are found by binary search ([`CallTree::overlapping`]).
//! - **working set index** ([`WorkingSetIndex`]): snapshots of the working
//!   set at events-chunk boundaries (at most one per `snapshot_every`
//!   columns, at most [`max_snapshots`] in all: the interval doubles when
//!   they would be more). Any column is reached by restoring the snapshot
//!   before it and replaying the trace from that chunk:
//!   [`crate::cursor::ColumnCursor`], the one way every consumer walks
//!   columns. Nothing of size columns x rows is ever materialised.
//! - **bitmap summary** ([`BitmapPyramid`]): the bitmap summed over blocks
//!   of `2^k` columns at every k from the finest (`2^9` columns, coarser
//!   for long traces: [`crate::pyramid::FIRST_SHIFT`]) up
//!   ([`crate::spans`] says what is summed and what is approximate). A
//!   zoomed-out view is drawn from it in O(pixels x rows) time; zoomed-in
//!   views replay exactly.
//! - **allocations** ([`AllocationRecord`]): blocks with address range and
//!   lifetime in columns, and the reads/writes that fell into each, with an
//!   [`AllocationIndex`] for "which block holds address A at column c".
//! - **metrics** ([`Metrics`]) and per-site counts for per-function, per-line
//!   and per-allocation-site tables ([`crate::tables`]).
//! - **cache simulation** ([`CacheReport`]): D1 and LL misses of a
//!   set-associative LRU model with cachegrind's rules ([`crate::cache`]),
//!   per site, in all, and as two flags per column (2 bits a read: the one
//!   part of the model that grows with the trace length, 25 MB per 100M
//!   reads).
//!
//! Memory use grows with the program's footprint (distinct lines, sites,
//! calls, allocations), not with the number of accesses; the bitmap summary
//! is capped ([`crate::pyramid::MAX_LEVEL0_CELLS`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use trace_rt::format::{Damage, DataMapping, Event, Metadata, Module, Site, TraceEnd};

use crate::DecodeError;
use crate::allocations::AllocationIndex;
pub use crate::allocations::{AllocationRecord, ProgramBreakMove};
use crate::cache::{CacheConfig, CacheMisses, CacheReport};
use crate::calltree::{CallTree, Frame, OpenStack};
use crate::cursor::ColumnCursor;
use crate::lines::LineSize;
use crate::pyramid::BitmapPyramid;
use crate::reuse::ReuseHistogram;
use crate::timeline::{ThreadCensus, ThreadChoice};
use crate::totals::Totals;
use crate::working_set::{Departure, HashedLines, LineState, OrderedWorkingSet, SortedLines, WorkingSetConfig};

/// Version of this contract; bumped when a field changes meaning.
/// 2: the bitmap summary, the allocation index, damage and exec, cursors.
/// 3: the cache simulation (per-site misses, per-column miss flags).
/// 4: allocation event numbers, usable sizes, times and stacks on
/// allocation records (the heap analysis).
/// 5: moves of the program break; custom allocators' blocks
/// ([`AllocationRecord::allocator`], [`Model::allocator_names`]).
/// 6: one thread's timeline ([`Model::timeline`], [`Model::census`]).
/// 7: the summary's rows hold each row's own cells (lines that left
/// during a block fill rows in address order, split where they straddle
/// two), and its finest blocks start at `2^9` columns.
/// 8: where the call tree's dropped frames were
/// ([`crate::calltree::CallTree::pruned_runs`], [`Model::pruned_runs_for_view`]),
/// drawn as summary bars.
/// 9: the mappings no module covers ([`Model::data_mappings`]), which
/// name the memory allocated before the recording began.
pub const MODEL_VERSION: u32 = 9;

/// `mappings` (as recorded: each read of the target's map adds the extents
/// not written before) by start address, without the extents that a later
/// one of the same name holds: a heap that grew between invocations was
/// written at every size.
pub fn merge_extents(mut mappings: Vec<DataMapping>) -> Vec<DataMapping> {
    mappings.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut merged: Vec<DataMapping> = Vec::with_capacity(mappings.len());
    for m in mappings {
        // Sorted by start, so a holder is among those kept before.
        let held = merged.iter().any(|k| k.name == m.name && k.start <= m.start && k.end >= m.end);
        if !held {
            merged.push(m);
        }
    }
    merged
}

/// Most snapshots kept; beyond, every other one is dropped. A view of any
/// column replays at most `columns / MAX_SNAPSHOTS * 2` columns first (with
/// a large working set, fewer are kept: [`max_snapshots`]).
pub const MAX_SNAPSHOTS: usize = 1024;

/// Memory the snapshots' lines may take in all, for a set as large as its
/// settings allow. A snapshot holds every line of the set: with 65,536 rows
/// (the viewer's largest max age) each was 7 MiB, and [`MAX_SNAPSHOTS`] of
/// them 7.5 GB. The view bench's 100M-read trace (a snapshot per chunk,
/// 339), decoded alone with that max age: peak RSS 2.78 -> 1.39 GB with 120
/// snapshots kept; a replay of 1,920 columns at 12 places, which restores a
/// snapshot and replays from it, median 162 -> 226 ms, slowest 187 -> 387
/// ms. At max age 32,768: 1.53 -> 1.37 GB, 193 snapshots, the replays the
/// same (median 158 and 161 ms). (With 512 MiB: 0.88 GB, but replays up to
/// 1.3 s.)
pub const SNAPSHOT_BYTES: usize = 1 << 30;

/// Fewest snapshots kept, however large the set.
pub const MIN_SNAPSHOTS: usize = 16;

/// Most snapshots kept with working-set settings `config`: [`MAX_SNAPSHOTS`],
/// or as many as [`SNAPSHOT_BYTES`] holds when the set can hold more lines
/// (it holds at most `max_rows`, and at most `max_age`: each miss brings in
/// one line, and a line leaves `max_age` misses after it was last touched),
/// but never under [`MIN_SNAPSHOTS`]. The lines of 512-row sets (the
/// default) fit [`MAX_SNAPSHOTS`] in 56 MiB.
pub fn max_snapshots(config: &WorkingSetConfig) -> usize {
    let rows = config.max_rows.min(config.max_age).max(1) as usize;
    let per_snapshot = rows * std::mem::size_of::<LineState>();
    (SNAPSHOT_BYTES / per_snapshot).clamp(MIN_SNAPSHOTS, MAX_SNAPSHOTS)
}

/// How to decode.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOptions {
    /// Working-set parameters.
    pub working_set: WorkingSetConfig,
    /// Columns between working-set snapshots (at least).
    pub snapshot_every: u64,
    /// The simulated D1 and LL ([`crate::cache`]).
    pub cache: CacheConfig,
    /// Whose reads make the columns ([`crate::timeline`]).
    pub thread: ThreadChoice,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            working_set: WorkingSetConfig::default(),
            snapshot_every: 1 << 14,
            cache: CacheConfig::default(),
            thread: ThreadChoice::All,
        }
    }
}

impl DecodeOptions {
    /// Checks every setting; a message for people when one is out of range.
    pub fn validate(&self) -> Result<(), String> {
        self.working_set.validate()?;
        self.cache.validate()
    }
}

/// A read or write, as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Site index.
    pub site: u32,
    /// Lowest address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Loads (a column).
    pub reads: bool,
    /// Stores.
    pub writes: bool,
}

/// Largest single access accepted (a rep-string copy of 1 GiB). Anything
/// larger is corruption, and would cost minutes line by line.
pub const MAX_ACCESS_BYTES: u64 = 1 << 30;

/// The access an event stands for, if it is one; an error for an access
/// larger than [`MAX_ACCESS_BYTES`].
#[inline]
pub fn access_of(event: &Event, sites: &[Site]) -> Result<Option<Access>, DecodeError> {
    let (site, addr, size) = match *event {
        Event::Access { site, addr } => match sites.get(site as usize) {
            Some(s) => (site, addr, u64::from(s.size)),
            None => return Ok(None),
        },
        Event::AccessSized { site, addr, size } => (site, addr, size),
        _ => return Ok(None),
    };
    let Some(kind) = sites.get(site as usize).map(|s| s.kind) else { return Ok(None) };
    if size > MAX_ACCESS_BYTES {
        return Err(DecodeError::Corrupt(format!("an access of {size} bytes at {addr:#x} (site {site})")));
    }
    Ok(Some(Access { site, addr, size, reads: kind.reads(), writes: kind.writes() }))
}

/// Locality metrics of the whole trace (counts are in [`Totals`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Metrics {
    /// Lines inserted into the working set (fetches).
    pub line_fetches: u64,
    /// Mean bytes read from a line while it was in the set.
    pub mean_bytes_read_per_fetch: f64,
    /// Mean distinct bytes read from a line while it was in the set.
    pub mean_distinct_bytes_per_fetch: f64,
    /// `mean_distinct_bytes_per_fetch / line_size`.
    pub utilisation: f64,
    /// Reuse distances of reads, in distinct lines.
    pub reuse: ReuseHistogram,
    /// Tallest the working set got.
    pub max_rows: u32,
    /// Frees (and munmaps) of blocks allocated before tracing started.
    pub foreign_frees: u64,
}

/// Per-site counts, for the per-function and per-line tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SiteCounts {
    /// Executions that read.
    pub reads: u64,
    /// Executions that wrote.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Simulated cache misses of its executions.
    pub misses: CacheMisses,
    /// Lines its reads inserted into the working set.
    pub line_fetches: u64,
}

/// A working-set snapshot at the start of an events chunk.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Column of the first read after the snapshot.
    pub column: u64,
    /// Where to resume reading.
    pub chunk: trace_rt::format::ChunkPosition,
    /// Miss clock of the set.
    pub clock: u64,
    /// The set, in row order.
    pub lines: Vec<LineState>,
    /// Open call frames of every thread.
    pub stacks: Vec<OpenStack>,
}

/// The bitmap, as snapshots to replay from.
#[derive(Clone, Debug)]
pub struct WorkingSetIndex {
    /// Parameters it was computed with.
    pub config: WorkingSetConfig,
    /// Snapshots by increasing column.
    pub snapshots: Vec<Snapshot>,
    /// Columns in all.
    pub columns: u64,
}

/// The decoded trace.
pub struct Model {
    /// The trace file.
    pub trace_path: PathBuf,
    /// Recording metadata.
    pub metadata: Metadata,
    /// How the trace ended.
    pub end: TraceEnd,
    /// Regions of the file skipped as unreadable (their events are lost).
    pub damage: Vec<Damage>,
    /// The program the target exec'd into, ending the recording.
    pub exec: Option<String>,
    /// Call stacks of allocations (callers above the calling instruction,
    /// innermost first), by the id [`AllocationRecord::stack`] holds.
    pub alloc_stacks: BTreeMap<u32, Vec<u64>>,
    /// Names of the custom allocator functions, by the id
    /// [`AllocationRecord::allocator`] holds.
    pub allocator_names: BTreeMap<u32, String>,
    /// The static site table.
    pub sites: Vec<Site>,
    /// Mapped modules (for symbolization).
    pub modules: Vec<Module>,
    /// The mappings no module covers (the heap, stacks, anonymous memory,
    /// data files) as the recorder found them at invocation starts, by start
    /// address, each extent once ([`merge_extents`]); none in traces
    /// before format v7.
    pub data_mappings: Vec<DataMapping>,
    /// Counts per site (same indices as `sites`).
    pub site_counts: Vec<SiteCounts>,
    /// Number of read columns.
    pub columns: u64,
    /// The call tree.
    pub call_tree: CallTree,
    /// Heap blocks and mappings, by creation.
    pub allocations: Vec<AllocationRecord>,
    /// Moves of the program break, in trace order (`record --allocations`).
    pub program_breaks: Vec<ProgramBreakMove>,
    /// Interval index over `allocations`.
    pub allocation_index: AllocationIndex,
    /// Whole-trace metrics.
    pub metrics: Metrics,
    /// Snapshots of the working set.
    pub working_set: WorkingSetIndex,
    /// The bitmap summed at every power-of-two scale.
    pub pyramid: BitmapPyramid,
    /// The cache simulation: geometry, misses, per-column miss flags.
    pub cache: CacheReport,
    /// The thread whose reads are the columns; `None`: every thread's, in
    /// the order they were written ([`crate::timeline`]). Totals, frames,
    /// sites and the cache simulation are of these columns.
    pub timeline: Option<u32>,
    /// What every thread did (reads, writes, invocations), when a thread was
    /// chosen or looked for ([`crate::timeline::census`]).
    pub census: Option<BTreeMap<u32, ThreadCensus>>,
    /// Totals per thread.
    pub threads: BTreeMap<u32, Totals>,
    /// Totals of all threads (unique lines counted once across threads).
    pub total: Totals,
    /// Lowest and highest stack pointer seen at calls and returns, per
    /// thread: roughly where each traced thread's stack is.
    pub stacks: BTreeMap<u32, (u64, u64)>,
}

impl Model {
    /// Decodes the trace at `path` (`crate::decode`). `progress` is called
    /// now and then with the bytes of the file read so far.
    pub fn decode(path: &Path, options: &DecodeOptions, progress: &mut dyn FnMut(u64)) -> Result<Model, DecodeError> {
        crate::decode::decode(path, options, progress, None)
    }

    /// Like [`Model::decode`], showing the bitmap summary in `preview` as
    /// decoding goes (for a picture before the trace is decoded), and
    /// copies of the allocation records so far if it asks for them
    /// ([`crate::pyramid::Preview::want_heap`]).
    pub fn decode_with_preview(
        path: &Path,
        options: &DecodeOptions,
        progress: &mut dyn FnMut(u64),
        preview: std::sync::Arc<crate::pyramid::Preview>,
    ) -> Result<Model, DecodeError> {
        crate::decode::decode(path, options, progress, Some(preview))
    }

    /// How the trace ended, and what of it was unreadable, for people:
    /// `None` for a complete, undamaged trace.
    pub fn status_note(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.end.is_truncated() {
            parts.push(self.end.describe());
        }
        if !self.damage.is_empty() {
            parts.push(format!("damaged: {}", Damage::describe(&self.damage)));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Entries into the function that were not traced, on every thread
    /// (also when one thread's timeline is shown).
    pub fn skipped_invocations(&self) -> u64 {
        match &self.census {
            Some(census) => census.values().map(|c| c.skipped_invocations).sum(),
            None => self.total.skipped_invocations,
        }
    }

    /// "thread T of N that read", when the columns are one thread's of
    /// several.
    pub fn timeline_note(&self) -> Option<String> {
        let shown = self.timeline?;
        let readers = self.census.as_ref().map_or(0, |c| c.values().filter(|c| c.reads > 0).count());
        Some(format!("thread {shown} of {readers} that read"))
    }

    /// The line size of the working set.
    pub fn line_size(&self) -> LineSize {
        LineSize::new(self.working_set.config.line_size)
    }

    /// The thread whose stack holds `addr`, judging by the stack pointers
    /// seen (a page of slack each side: red zone, arguments, locals).
    pub fn stack_thread_at(&self, addr: u64) -> Option<u32> {
        const SLACK: u64 = 4096;
        self.stacks
            .iter()
            .find(|&(_, &(lo, hi))| addr >= lo.saturating_sub(SLACK) && addr <= hi.saturating_add(SLACK))
            .map(|(&t, _)| t)
    }

    /// The name of the data mapping holding `addr`, for people: `heap`,
    /// `stack`, `anonymous memory`, the name given to it (`[anon:NAME]`),
    /// or its file's name (`LC_CTYPE`). `None` outside them, or in a trace
    /// without them.
    pub fn data_mapping_at(&self, addr: u64) -> Option<String> {
        let mapping = self.data_mappings.iter().find(|m| (m.start..m.end).contains(&addr))?;
        let name = mapping.name.as_str();
        if name.is_empty() {
            return Some("anonymous memory".to_string());
        }
        if name.starts_with('/') {
            return Some(Path::new(name).file_name().map_or(name.into(), |f| f.to_string_lossy().into_owned()));
        }
        let inner = name.strip_prefix("[anon:").or_else(|| name.strip_prefix('[')).unwrap_or(name);
        Some(inner.strip_suffix(']').unwrap_or(inner).to_string())
    }

    /// The recorded block holding `addr` at `column`, if any.
    pub fn allocation_at(&self, addr: u64, column: u64) -> Option<&AllocationRecord> {
        self.allocation_index.holding(&self.allocations, addr, column)
    }

    /// The call frames overlapping columns `[from, to)`, with nothing
    /// dropped: the stored tree when it is complete, else rebuilt by replay
    /// from the snapshot before `from` (frames still open at `to` end there
    /// and are marked unfinished).
    pub fn frames_in(&self, from: u64, to: u64) -> Result<Vec<Frame>, DecodeError> {
        self.frames_for_view(from, to, 0.0, &mut || true)
    }

    /// The call frames overlapping columns `[from, to)` that a view needs:
    /// every frame at least `min_width` columns wide (a picture at `c`
    /// columns per pixel needs those of `c` or more; narrower ones merge
    /// into summary bars). The stored tree when it dropped only narrower
    /// frames — no replay, whatever the range — else a replay of the range,
    /// which `keep_going` may stop ([`DecodeError::Cancelled`]).
    pub fn frames_for_view(
        &self,
        from: u64,
        to: u64,
        min_width: f64,
        keep_going: &mut dyn FnMut() -> bool,
    ) -> Result<Vec<Frame>, DecodeError> {
        if self.stored_tree_serves(min_width) {
            return Ok(self.call_tree.overlapping(from, to).cloned().collect());
        }
        // Only the frames are wanted: the cheaper hashed set does.
        let mut cursor = ColumnCursor::<HashedLines>::with_calls(self, from)?;
        while cursor.column() < to {
            if cursor.column() % (1 << 16) == 0 && !keep_going() {
                return Err(DecodeError::Cancelled);
            }
            if cursor.step(&mut |_: Departure| {})?.is_none() {
                break;
            }
        }
        let end = cursor.column();
        let tree = cursor.into_calls().unwrap_or_default().finish(end);
        Ok(tree.overlapping(from, to).cloned().collect())
    }

    /// The runs of frames the stored tree dropped that overlap columns
    /// `[from, to)`, for a view that [`Model::frames_for_view`] serves from
    /// the stored tree at `min_width` (none otherwise: a replay rebuilds
    /// every frame).
    pub fn pruned_runs_for_view(&self, from: u64, to: u64, min_width: f64) -> Vec<crate::calltree::PrunedRun> {
        if !self.stored_tree_serves(min_width) {
            return Vec::new();
        }
        let runs = &self.call_tree.pruned_runs;
        runs.iter().filter(|r| r.first_column < to && r.end_column > from).cloned().collect()
    }

    /// Whether a view that needs every frame at least `min_width` columns
    /// wide can take the stored tree: it dropped only narrower ones.
    fn stored_tree_serves(&self, min_width: f64) -> bool {
        self.call_tree.pruned_below as f64 <= min_width.max(0.0)
    }

    /// Replays the working set over columns `[from, to)`, calling `visit`
    /// with each column, the set *after* that column's read, and the read.
    pub fn replay(
        &self,
        from: u64,
        to: u64,
        mut visit: impl FnMut(u64, &OrderedWorkingSet, &Access),
    ) -> Result<(), DecodeError> {
        let to = to.min(self.columns);
        if from >= to {
            return Ok(());
        }
        let mut cursor = ColumnCursor::<SortedLines>::new(self, from)?;
        while cursor.column() < to {
            let Some(read) = cursor.step(&mut |_: Departure| {})? else { break };
            visit(read.column, cursor.set(), &read.access);
        }
        Ok(())
    }
}

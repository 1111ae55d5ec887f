//! The decoded model: the second contract of linetrace, read by every view
//! (viewer, `report`, `render`, `at`, exports). Version [`MODEL_VERSION`].
//!
//! [`Model::decode`] reads a trace once, in bounded memory, and produces:
//! - **columns**: the x axis. Column `i` is the `i`-th memory-read event of
//!   the trace in file order (loads and read-modify-writes; each element of
//!   a gather is its own read; a rep-string range is one read). Writes do not
//!   make columns. The lines a read touches are [`crate::lines::LineSize::lines`].
//! - **call tree** ([`CallTree`]): frames spanning `[first_column,
//!   end_column)`, in pre-order with non-decreasing `first_column`, so a
//!   frame is exactly as wide as the reads it made and the frames of a
//!   column range are found by binary search ([`CallTree::overlapping`]).
//! - **working set index** ([`WorkingSetIndex`]): snapshots of the working
//!   set at events-chunk boundaries (at most one per `snapshot_every`
//!   columns, at most [`MAX_SNAPSHOTS`] in all: the interval doubles when
//!   they would be more). Any column is reached by restoring the snapshot
//!   before it and replaying the trace from that chunk:
//!   [`crate::cursor::ColumnCursor`], the one way every consumer walks
//!   columns. Nothing of size columns x rows is ever materialised.
//! - **bitmap summary** ([`BitmapPyramid`]): the bitmap summed over blocks
//!   of `2^k` columns at every k from the finest (`2^12` columns, coarser
//!   for very long traces) up ([`crate::spans`] says what is summed and what
//!   is approximate). A zoomed-out view is drawn from it in O(pixels x rows)
//!   time; zoomed-in views replay exactly.
//! - **allocations** ([`AllocationRecord`]): blocks with address range and
//!   lifetime in columns, and the reads/writes that fell into each, with an
//!   [`AllocationIndex`] for "which block holds address A at column c".
//! - **metrics** ([`Metrics`]) and per-site counts for per-function, per-line
//!   and per-allocation-site tables ([`crate::tables`]).
//!
//! Memory use grows with the program's footprint (distinct lines, sites,
//! calls, allocations), not with the number of accesses; the bitmap summary
//! is capped ([`crate::pyramid::MAX_LEVEL0_CELLS`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use trace_rt::format::{AllocKind, Damage, Event, Metadata, Module, Site, TraceEnd, TraceReader};

use crate::DecodeError;
use crate::allocations::AllocationIndex;
pub use crate::allocations::AllocationRecord;
use crate::calltree::{CallTree, CallTreeBuilder, Frame, OpenStack, apply_control};
use crate::cursor::ColumnCursor;
use crate::lines::LineSize;
use crate::pyramid::{BitmapPyramid, PyramidBuilder};
use crate::reuse::{ReuseDistance, ReuseHistogram};
use crate::spans::SpanAccumulator;
use crate::totals::Totals;
use crate::working_set::{
    Departure, FastWorkingSet, LineObserver, LineState, OrderedWorkingSet, SortedLines, WorkingSetConfig,
};

/// Version of this contract; bumped when a field changes meaning.
/// 2: the bitmap summary, the allocation index, damage and exec, cursors.
pub const MODEL_VERSION: u32 = 2;

/// Most snapshots kept; beyond, every other one is dropped.
pub const MAX_SNAPSHOTS: usize = 256;

/// How to decode.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOptions {
    /// Working-set parameters.
    pub working_set: WorkingSetConfig,
    /// Columns between working-set snapshots (at least).
    pub snapshot_every: u64,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { working_set: WorkingSetConfig::default(), snapshot_every: 1 << 14 }
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
    /// The static site table.
    pub sites: Vec<Site>,
    /// Mapped modules (for symbolization).
    pub modules: Vec<Module>,
    /// Counts per site (same indices as `sites`).
    pub site_counts: Vec<SiteCounts>,
    /// Number of read columns.
    pub columns: u64,
    /// The call tree.
    pub call_tree: CallTree,
    /// Heap blocks and mappings, by creation.
    pub allocations: Vec<AllocationRecord>,
    /// Interval index over `allocations`.
    pub allocation_index: AllocationIndex,
    /// Whole-trace metrics.
    pub metrics: Metrics,
    /// Snapshots of the working set.
    pub working_set: WorkingSetIndex,
    /// The bitmap summed at every power-of-two scale.
    pub pyramid: BitmapPyramid,
    /// Totals per thread.
    pub threads: BTreeMap<u32, Totals>,
    /// Totals of all threads (unique lines counted once across threads).
    pub total: Totals,
}

impl Model {
    /// Decodes the trace at `path`. `progress` is called now and then with
    /// the bytes of the file read so far.
    pub fn decode(path: &Path, options: &DecodeOptions, progress: &mut dyn FnMut(u64)) -> Result<Model, DecodeError> {
        options.working_set.validate().map_err(DecodeError::InvalidSetting)?;
        let reader = TraceReader::open(path)?;
        let mut b = Builder::new(*options);
        let (reader, end) = b.run(reader, progress)?;
        let columns = b.column;
        let pyramid = b.finish_pyramid();
        let mut metrics = b.metrics;
        // Lines still in the set at the end count as fetches too.
        let mut fetches = b.fetches;
        b.set.drain(|d| fetches.departed(d));
        metrics.line_fetches = fetches.count;
        if fetches.count > 0 {
            metrics.mean_bytes_read_per_fetch = fetches.bytes as f64 / fetches.count as f64;
            metrics.mean_distinct_bytes_per_fetch = fetches.distinct as f64 / fetches.count as f64;
            metrics.utilisation = metrics.mean_distinct_bytes_per_fetch / f64::from(options.working_set.line_size);
        }
        let mut threads = BTreeMap::new();
        let mut total = Totals::default();
        for (slot, ThreadState { tid, mut totals }) in std::mem::take(&mut b.threads).into_iter().enumerate() {
            totals.unique_lines = b.reuse.distinct_lines_of(slot);
            total.add(&totals);
            threads.insert(tid, totals);
        }
        total.unique_lines = b.reuse.distinct_lines();
        metrics.reuse = b.reuse.histogram().clone();
        let allocation_index = AllocationIndex::new(&b.allocations);
        Ok(Model {
            trace_path: path.to_path_buf(),
            metadata: reader.metadata().clone(),
            end,
            damage: reader.damage().to_vec(),
            exec: b.exec.and_then(|id| reader.strings().get(id as usize).cloned()),
            sites: reader.sites().to_vec(),
            modules: reader.modules().to_vec(),
            site_counts: b.site_counts,
            columns,
            call_tree: b.calls.finish(columns),
            allocations: b.allocations,
            allocation_index,
            metrics,
            working_set: WorkingSetIndex { config: options.working_set, snapshots: b.snapshots, columns },
            pyramid,
            threads,
            total,
        })
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

    /// The line size of the working set.
    pub fn line_size(&self) -> LineSize {
        LineSize::new(self.working_set.config.line_size)
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
        if self.call_tree.pruned_below == 0 {
            return Ok(self.call_tree.overlapping(from, to).cloned().collect());
        }
        let mut cursor = ColumnCursor::<SortedLines>::with_calls(self, from)?;
        while cursor.column() < to {
            if cursor.step(&mut |_: Departure| {})?.is_none() {
                break;
            }
        }
        let end = cursor.column();
        let tree = cursor.into_calls().unwrap_or_default().finish(end);
        Ok(tree.overlapping(from, to).cloned().collect())
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

/// Per-thread counts of the decoding pass.
struct ThreadState {
    tid: u32,
    totals: Totals,
}

/// Fetch statistics: lines that left the set.
#[derive(Clone, Copy, Default)]
struct FetchStats {
    count: u64,
    bytes: u64,
    distinct: u64,
}

impl FetchStats {
    fn departed(&mut self, d: Departure) {
        self.count += 1;
        self.bytes += u64::from(d.state.bytes_read);
        self.distinct += u64::from(d.state.distinct_bytes());
    }
}

/// What the decoding pass listens to when a read changes the set: fetch
/// statistics and the bitmap summary.
struct DecodeObserver<'a> {
    fetches: &'a mut FetchStats,
    spans: &'a mut SpanAccumulator,
}

impl LineObserver for DecodeObserver<'_> {
    #[inline]
    fn before_touch(&mut self, state: &LineState) {
        self.spans.before_touch(state);
    }
    #[inline]
    fn inserted(&mut self, state: &LineState) {
        self.spans.inserted(state);
    }
    #[inline]
    fn departed(&mut self, d: Departure) {
        self.fetches.departed(d);
        self.spans.departed(d);
    }
}

/// Blocks live now, by start address: (end, index in the records).
#[derive(Default)]
struct LiveBlocks(BTreeMap<u64, (u64, usize)>);

impl LiveBlocks {
    /// Whether a live block overlaps `[lo, hi)`. Live heap blocks do not
    /// overlap each other, so the few starting last before `hi` decide
    /// (a few, not one: a program's own mappings can contain blocks).
    fn overlaps(&self, lo: u64, hi: u64) -> bool {
        self.0.range(..hi).rev().take(4).any(|(_, &(end, _))| end > lo)
    }
}

/// State of the single decoding pass.
struct Builder {
    column: u64,
    set: FastWorkingSet,
    fetches: FetchStats,
    reuse: ReuseDistance,
    threads: Vec<ThreadState>,
    /// Index in `threads` of the last event's thread.
    current: usize,
    line_size: LineSize,
    calls: CallTreeBuilder,
    site_counts: Vec<SiteCounts>,
    metrics: Metrics,
    allocations: Vec<AllocationRecord>,
    live: LiveBlocks,
    last_block: Option<usize>,
    snapshots: Vec<Snapshot>,
    snapshot_every: u64,
    chunk_serial: u64,
    spans: SpanAccumulator,
    pyramid: PyramidBuilder,
    /// First column of the next summary block.
    next_block: u64,
    /// String id of the program exec'd into.
    exec: Option<u32>,
}

impl Builder {
    fn new(options: DecodeOptions) -> Self {
        let set = FastWorkingSet::new(options.working_set);
        let spans = SpanAccumulator::new(&set, 0, |_, _| false);
        let pyramid = PyramidBuilder::default();
        Builder {
            column: 0,
            fetches: FetchStats::default(),
            reuse: ReuseDistance::new(),
            threads: Vec::new(),
            current: 0,
            line_size: LineSize::new(options.working_set.line_size),
            calls: CallTreeBuilder::new(),
            site_counts: Vec::new(),
            metrics: Metrics::default(),
            allocations: Vec::new(),
            live: LiveBlocks::default(),
            last_block: None,
            snapshots: Vec::new(),
            snapshot_every: options.snapshot_every.max(1),
            chunk_serial: 0,
            next_block: pyramid.block_width(),
            spans,
            pyramid,
            set,
            exec: None,
        }
    }

    fn run<R: std::io::Read>(
        &mut self,
        mut reader: TraceReader<R>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(TraceReader<R>, TraceEnd), DecodeError> {
        let mut since_progress = 0u32;
        while let Some(rec) = reader.next_record()? {
            if reader.chunk_serial() != self.chunk_serial {
                self.chunk_serial = reader.chunk_serial();
                self.maybe_snapshot(reader.chunk_position());
                progress(reader.bytes_read());
            }
            since_progress += 1;
            if since_progress == 1 << 20 {
                since_progress = 0;
                progress(reader.bytes_read());
            }
            let thread = rec.thread;
            let t = self.thread_slot(thread);
            if let Some(a) = access_of(&rec.event, reader.sites())? {
                self.access(thread, t, a);
                continue;
            }
            if apply_control(&mut self.calls, thread, &rec.event, self.column) {
                if let Event::InvocationStart { .. } = rec.event {
                    self.threads[t].totals.invocations += 1;
                }
                continue;
            }
            let totals = &mut self.threads[t].totals;
            match rec.event {
                Event::Alloc(a) => {
                    totals.allocations += 1;
                    self.allocation(thread, &a);
                }
                Event::Stepped { count } => totals.instructions += count,
                Event::Signal { .. } => totals.signals += 1,
                Event::InvocationSkipped { .. } => totals.skipped_invocations += 1,
                Event::Exec { path } => self.exec = Some(path),
                _ => {}
            }
        }
        progress(reader.bytes_read());
        let end = reader.end().cloned().unwrap_or(TraceEnd::Cut { valid_bytes: reader.bytes_read(), mid_chunk: false });
        Ok((reader, end))
    }

    /// The summary, with the last (partial) block closed.
    fn finish_pyramid(&mut self) -> BitmapPyramid {
        let mut pyramid = std::mem::take(&mut self.pyramid);
        if self.column > self.next_block - pyramid.block_width() {
            pyramid.push(&self.spans.close_span(&self.set));
        }
        pyramid.finish(self.column)
    }

    fn maybe_snapshot(&mut self, chunk: trace_rt::format::ChunkPosition) {
        let due = self.snapshots.last().is_none_or(|s| self.column - s.column >= self.snapshot_every);
        if !due {
            return;
        }
        if self.snapshots.len() >= MAX_SNAPSHOTS {
            // Keep every other snapshot; the first (column 0) always stays.
            let mut i = 0;
            self.snapshots.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.snapshot_every *= 2;
        }
        self.snapshots.push(Snapshot {
            column: self.column,
            chunk,
            clock: self.set.clock(),
            lines: self.set.snapshot(),
            stacks: self.calls.open_stacks(),
        });
    }

    #[inline]
    fn thread_slot(&mut self, tid: u32) -> usize {
        if self.threads.get(self.current).is_some_and(|t| t.tid == tid) {
            return self.current;
        }
        self.current = match self.threads.iter().position(|t| t.tid == tid) {
            Some(i) => i,
            None => {
                self.threads.push(ThreadState { tid, totals: Totals::default() });
                self.threads.len() - 1
            }
        };
        self.current
    }

    #[inline]
    fn access(&mut self, thread: u32, t: usize, a: Access) {
        let site = a.site as usize;
        if site >= self.site_counts.len() {
            self.site_counts.resize(site + 1, SiteCounts::default());
        }
        let block = self.block_of(a.addr);
        let counts = &mut self.site_counts[site];
        let state = &mut self.threads[t];
        if a.writes {
            counts.writes += 1;
            state.totals.writes += 1;
            state.totals.bytes_written += a.size;
            self.calls.write(thread);
            if let Some(b) = block {
                self.allocations[b].writes += 1;
            }
        }
        let (first, last) = self.line_size.lines(a.addr, a.size);
        if a.reads {
            counts.reads += 1;
            counts.bytes_read += a.size;
            state.totals.reads += 1;
            state.totals.bytes_read += a.size;
            self.calls.read(thread);
            if let Some(b) = block {
                self.allocations[b].reads += 1;
            }
            if self.column == self.next_block {
                let span = self.spans.close_span(&self.set);
                self.pyramid.push(&span);
                self.next_block += self.pyramid.block_width();
            }
            self.spans.begin_column(self.column);
            let mut observer = DecodeObserver { fetches: &mut self.fetches, spans: &mut self.spans };
            self.set.read(a.addr, a.size, &mut observer);
            let live = &self.live;
            self.spans.end_column(self.set.clock(), self.set.len(), |lo, hi| live.overlaps(lo, hi));
            self.metrics.max_rows = self.metrics.max_rows.max(self.set.len() as u32);
            for line in first..=last {
                self.reuse.access(line, t);
            }
            self.column += 1;
        }
        if a.writes {
            for line in first..=last {
                self.reuse.write(line, t);
            }
        }
    }

    /// The live block containing `addr`, if any (the last hit is cached:
    /// loops hit the same block again and again).
    #[inline]
    fn block_of(&mut self, addr: u64) -> Option<usize> {
        if self.live.0.is_empty() {
            return None;
        }
        if let Some(b) = self.last_block {
            let r = &self.allocations[b];
            if r.free_column.is_none() && r.contains(addr) {
                return Some(b);
            }
        }
        let (_, &(_, b)) = self.live.0.range(..=addr).next_back()?;
        let r = &self.allocations[b];
        r.contains(addr).then(|| {
            self.last_block = Some(b);
            b
        })
    }

    fn allocation(&mut self, thread: u32, a: &trace_rt::format::Allocation) {
        let release = |this: &mut Self, ptr: u64| {
            if ptr == 0 {
                return;
            }
            match this.live.0.remove(&ptr) {
                Some((_, i)) => this.allocations[i].free_column = Some(this.column),
                None => this.metrics.foreign_frees += 1,
            }
            this.last_block = None;
        };
        match a.kind {
            AllocKind::Free | AllocKind::Munmap => {
                release(self, a.ptr_in);
                return;
            }
            AllocKind::Realloc => release(self, a.ptr_in),
            _ => {}
        }
        if a.ptr_out == 0 {
            return;
        }
        let index = self.allocations.len();
        let record = AllocationRecord {
            kind: a.kind,
            address: a.ptr_out,
            size: a.size,
            align: a.align,
            callsite: a.callsite,
            alloc_column: self.column,
            free_column: None,
            thread,
            reads: 0,
            writes: 0,
        };
        let end = record.end();
        self.allocations.push(record);
        if let Some((_, old)) = self.live.0.insert(a.ptr_out, (end, index)) {
            // Reused without a recorded free (freed natively elsewhere).
            self.allocations[old].free_column = Some(self.column);
        }
    }
}

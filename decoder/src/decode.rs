//! The decoding pass: one streaming read of a trace into a [`Model`], on
//! three threads.
//!
//! - The *event* stage (the calling thread) reads and decompresses chunks,
//!   decodes events, and keeps what needs the events themselves: the call
//!   tree, per-site and per-thread counts, allocations.
//! - The *working-set* stage (its own thread) keeps the working set: fetch
//!   statistics, the bitmap summary ([`crate::spans`], [`crate::pyramid`])
//!   and the lines of every snapshot.
//! - The *cache* stage (its own thread) runs the cache simulation over
//!   every read and write, and measures reuse distances.
//!
//! The event stage sends the accesses in order, in batches, with
//! allocation, snapshot and thread-change markers between them; each batch
//! is shared by the two other stages, which take what they need from it.
//! On a miss-heavy trace the three take about a fifth, two fifths and two
//! fifths of the pass's CPU time, so on two cores the pass is bound by the
//! cores, not by one stage (with the cache simulation, and later the reuse
//! distances, on the event thread, that thread was the bound). The lookups
//! that miss the CPU's caches (a table of every line the trace touched, the
//! last-level cache's sets) are prefetched a few accesses ahead.
//!
//! What that bound is, on the view bench's 100M-read miss-heavy trace
//! (`cargo bench --bench view -- --write-only`), decoded by the decode
//! child of `cargo bench --bench decode`: 14.5 s of CPU in 7.3 s, 1.97 CPUs
//! (`perf stat`). Per thread (`perf record`, 3 runs): the event stage
//! 18-21%, the working set 38-40% (5.8-6.0 s), the cache stage 41-43%
//! (6.2-6.4 s). So a pass of 6 s on two cores needs about a sixth less CPU
//! in all, and each of the two big stages under 6 s on its own; carrying
//! the working set forward cannot be split between threads (each column's
//! set follows from the one before), though closing the summary's spans,
//! about a third of that thread, could move. The reuse distances are half
//! the cache stage: without them (a scratch build, 3 alternating rounds)
//! the pass took 6.1-6.5 s with 10.8-11.4 s of user CPU, against 7.3-8.5 s
//! and 13.9-15.7 s. It then waits on the working set's thread: in 2 runs
//! under `perf record`, that thread took 6.1-6.3 s of CPU, the cache
//! stage's 2.8-3.0 s.
//!
//! The host's speed drifts by more than any change tried since. `dc041a7`
//! (2026-11-28), whose decode of that trace then took a median 6.18 s, took
//! 7.97-8.04 s on 2026-12-05, in 3 rounds alternating with `26d3afc`
//! (7.34-7.88 s). Nor do the stages slow each other down much: on one core
//! (`taskset -c 0`, one run) the pass took 13.84 s of user CPU, against
//! 14.86 s on two.
//!
//! A real program's trace costs as much: `matmul_naive` of
//! examples/c/matmul.c on 464x464 doubles (99.9M reads, most of them
//! missing the working set: it walks `b` by columns) took 6.7-7.3 s in 3
//! runs of `report`, against 1.3-1.5 s for cachegrind to simulate the same
//! multiply (`cargo bench --bench decode` prints the ratio: 4.85). There
//! the working set's thread is the busiest (49% of the samples, `perf
//! record`: the cache stage 39%, the event stage 12%), closing the
//! summary's spans about half of it; a sweep-friendly program's trace
//! (`matmul_blocked` on 368x368: 56M reads and 25M writes, 1.6M line
//! fetches) still took 4.3-4.7 s, its span closing 30% of the samples.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use trace_rt::format::{AllocKind, Allocation, ChunkPosition, Event, Site, TraceEnd, TraceReader};

use crate::DecodeError;
use crate::allocations::{AllocationIndex, AllocationRecord, ProgramBreakMove, block_contains};
use crate::cache::{CacheConfig, CacheMisses, CacheReport, CacheSimulator, MissFlags, Outcome};
use crate::calltree::{CallTreeBuilder, OpenStack, apply_control};
use crate::lines::LineSize;
use crate::model::{Access, DecodeOptions, Metrics, Model, SiteCounts, Snapshot, WorkingSetIndex, access_of};
use crate::pyramid::{BitmapPyramid, HeapSoFar, Preview, PyramidBuilder};
use crate::reuse::ReuseQueue;
use crate::spans::SpanAccumulator;
use crate::timeline::on_timeline;
use crate::totals::Totals;
use crate::working_set::{FastWorkingSet, FetchCounter, LineObserver, LineState, WorkingSetConfig};

/// Operations per batch sent to the working-set stage.
const BATCH: usize = 1 << 13;
/// Batches in flight (17 MB): the three stages share two cores, and each
/// waits less for another that the scheduler set aside with this much slack
/// between them (8 batches: 9.1 s for the 100M-read benchmark trace's
/// `report`, 64: 8.3 s, 256: 8.0 s).
///
/// Fewer, larger batches with the same 16 MB in flight (2^15 operations
/// by 32, 2^17 by 8) cut the context switches of the 100M-read benchmark
/// trace's decode from 19,500 to 6,400 and 2,800 (fewer wake-ups of a
/// stage waiting on a channel), but not its time: 6 alternating rounds,
/// median 7.16 s as it is, 7.33 s and 7.06 s. Nor did `SCHED_BATCH` for
/// the stages (no preemption on wake-up): 5 rounds, within this host's
/// noise.
const BATCHES_IN_FLIGHT: usize = 128;
/// Columns decoded before the trace's length is estimated from the part
/// of the file they took ([`SetOp::ExpectColumns`]): enough for a steady
/// rate, few enough that a long trace closes few spans of the finest block
/// width before its blocks widen (2,048 at 512 columns each).
const EXPECT_AFTER_COLUMNS: u64 = 1 << 20;

/// Decodes the trace at `path` (see [`Model::decode`]); `preview`, if
/// given, shows the summary as it is built.
pub(crate) fn decode(
    path: &Path,
    options: &DecodeOptions,
    progress: &mut dyn FnMut(u64),
    preview: Option<Arc<Preview>>,
) -> Result<Model, DecodeError> {
    options.validate().map_err(DecodeError::InvalidSetting)?;
    let (timeline, census) = crate::timeline::resolve(options.thread, path)?;
    let reader = TraceReader::open(path)?;
    let total_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let config = options.working_set;
    let stage_preview = preview.clone();
    let (set_sender, set_receiver) = sync_channel::<Batch>(BATCHES_IN_FLIGHT);
    let (cache_sender, cache_receiver) = sync_channel::<Batch>(BATCHES_IN_FLIGHT);
    let set_stage =
        spawn_stage("linetrace-working-set", move || working_set_stage(config, set_receiver, stage_preview))?;
    let cache_config = options.cache;
    let line_size = LineSize::new(config.line_size);
    let cache_stage = spawn_stage("linetrace-cache", move || cache_stage(cache_config, line_size, cache_receiver))?;
    let mut events = EventStage::new(
        *options,
        timeline,
        StageSender { senders: [set_sender, cache_sender], batch: Vec::with_capacity(BATCH) },
        total_bytes,
        preview.clone(),
    );
    let mut report = |done: u64| {
        if let Some(p) = &preview {
            p.set_bytes(done, total_bytes);
        }
        progress(done)
    };
    let outcome = events.run(reader, &mut report);
    // Closing the channels ends the other stages.
    let sent = std::mem::replace(&mut events.stages, StageSender::closed()).finish();
    let set = set_stage.join().map_err(|_| DecodeError::Corrupt("the working-set thread failed".into()))?;
    let mut cache =
        cache_stage.join().map_err(|_| DecodeError::Corrupt("the cache-simulation thread failed".into()))?;
    let (reader, end) = outcome?;
    sent.map_err(|_| DecodeError::Corrupt("a decoding thread stopped early".into()))?;
    let columns = events.column;
    let mut metrics = events.metrics;
    metrics.line_fetches = set.fetches.departed;
    (metrics.mean_bytes_read_per_fetch, metrics.mean_distinct_bytes_per_fetch) = set.fetches.means();
    metrics.utilisation = set.fetches.utilisation(config.line_size);
    metrics.max_rows = set.max_rows;
    let mut threads = BTreeMap::new();
    let mut total = Totals::default();
    let reuse = std::mem::take(&mut cache.reuse).finish();
    for (slot, ThreadState { tid, mut totals }) in std::mem::take(&mut events.threads).into_iter().enumerate() {
        totals.unique_lines = reuse.distinct_lines_of(slot);
        total.add(&totals);
        threads.insert(tid, totals);
    }
    total.unique_lines = reuse.distinct_lines();
    metrics.reuse = reuse.histogram().clone();
    // Snapshots: where (event stage) joined with what (working-set stage).
    let snapshots: Vec<Snapshot> = events
        .snapshots
        .iter()
        .zip(set.snapshot_sets)
        .map(|(at, (clock, lines))| Snapshot {
            column: at.column,
            chunk: at.chunk,
            clock,
            lines,
            stacks: at.stacks.clone(),
        })
        .collect();
    events.block_accesses.fold_into(&mut events.allocations);
    let allocation_index = AllocationIndex::new(&events.allocations);
    let mut site_counts = std::mem::take(&mut events.site_counts);
    for (site, misses) in cache.per_site.iter().enumerate() {
        if let Some(counts) = site_counts.get_mut(site) {
            counts.misses = *misses;
        }
    }
    for (site, &fetches) in set.site_fetches.iter().enumerate() {
        if let Some(counts) = site_counts.get_mut(site) {
            counts.line_fetches = fetches;
        }
    }
    let cache = CacheReport { config: cache.simulator.config(), misses: cache.misses, columns: cache.columns };
    Ok(Model {
        trace_path: path.to_path_buf(),
        metadata: reader.metadata().clone(),
        end,
        damage: reader.damage().to_vec(),
        exec: events.exec.and_then(|id| reader.strings().get(id as usize).cloned()),
        alloc_stacks: alloc_stacks(&events.allocations, reader.strings()),
        allocator_names: events
            .allocations
            .iter()
            .filter_map(|r| r.allocator)
            .collect::<std::collections::BTreeSet<u32>>()
            .into_iter()
            .map(|id| (id, reader.strings().get(id as usize).cloned().unwrap_or_else(|| format!("allocator {id}"))))
            .collect(),
        sites: reader.sites().to_vec(),
        modules: reader.modules().to_vec(),
        data_mappings: crate::model::merge_extents(reader.mappings().to_vec()),
        site_counts,
        columns,
        call_tree: std::mem::take(&mut events.calls).finish(columns),
        allocations: events.allocations,
        program_breaks: events.program_breaks,
        allocation_index,
        metrics,
        working_set: WorkingSetIndex { config, snapshots, columns },
        pyramid: set.pyramid,
        cache,
        timeline,
        census,
        threads,
        total,
        stacks: std::mem::take(&mut events.stacks),
    })
}

/// What the event stage tells the other stages, in column order. An
/// operation holds one address and at most 48 bits besides: what does not
/// fit comes in an operation before or after it.
#[derive(Clone, Copy)]
enum SetOp {
    /// The next column's read (loads and read-modify-writes), by `site`,
    /// of `size` bytes ([`OpSize`]).
    Read { addr: u64, site: u32, size: u16, flags: ReadFlags },
    /// A store: for the cache simulation (writes make no column).
    Write { addr: u64, site: u32, size: u16 },
    /// The size of the next `Read` or `Write`, whose own `size` is
    /// [`OpSize::LONG`] (a string instruction's range).
    LongSize { size: u64 },
    /// The accesses from here on are by the thread in slot `slot` (for the
    /// reuse distances' distinct lines per thread). Sent when it changes,
    /// not with every access: an access stays 16 bytes.
    Thread { slot: u32 },
    /// A block became live from `start` (for the allocation tint); its end
    /// is in the `AllocEnd` right after.
    Alloc { start: u64 },
    /// The end of the block in the `Alloc` before.
    AllocEnd { end: u64 },
    /// The live block at `start` ended.
    Free { start: u64 },
    /// Record the set's state here (a snapshot the event stage keeps).
    Snapshot,
    /// Drop every other recorded snapshot, keeping the first.
    ThinSnapshots,
    /// The trace is expected to have about `columns` columns (from the
    /// part of the file read so far): the summary picks its block width,
    /// and the tables of both stages that grow with the columns reserve
    /// their room.
    ExpectColumns { columns: u64 },
}

/// What a [`SetOp::Read`] says besides its access, in one byte (an
/// operation stays 16 bytes).
#[derive(Clone, Copy)]
struct ReadFlags(u8);

impl ReadFlags {
    const WRITES: u8 = 1;
    const IN_BLOCK: u8 = 2;

    #[inline]
    fn new(writes: bool, in_block: bool) -> ReadFlags {
        ReadFlags(if writes { Self::WRITES } else { 0 } | if in_block { Self::IN_BLOCK } else { 0 })
    }

    /// A read-modify-write: its lines are written after they are read.
    #[inline]
    fn writes(self) -> bool {
        self.0 & Self::WRITES != 0
    }

    /// The address is inside a live recorded block. The event stage finds
    /// an access's block anyway (its reads and writes are counted), so the
    /// working-set stage takes the tint of the line the address is in from
    /// here rather than from a search of its own (the other lines of a read
    /// crossing a line's end are still searched). On a trace of random
    /// reads over many small blocks, each search was a walk of a tree in
    /// memory: 17.7% of the decode's samples for examples/c/heap_reads.c's
    /// trace (200,000 blocks, 4M random picks; `perf record`). With this,
    /// and the blocks' sizes in the event stage's live map (`EventStage::live`),
    /// that trace's decode (a scratch binary calling `Model::decode`), 8
    /// alternating rounds, faster in all 8: median 3.17 -> 2.28 s, user
    /// CPU 5.39 -> 4.00 s. The 100M-read view-bench trace, which records
    /// no blocks, 22 rounds: median 7.05 s before, 7.08 s after.
    #[inline]
    fn in_block(self) -> bool {
        self.0 & Self::IN_BLOCK != 0
    }
}

// Every access goes through the batches, which are larger than the CPU's
// caches: keep an operation at 16 bytes (at 24, `report` of the 100M-read
// benchmark trace took 2-3% longer).
const _: () = assert!(std::mem::size_of::<SetOp>() == 16);

/// Access sizes as operations carry them, and what a stage needs to read
/// them back: the last [`SetOp::LongSize`].
#[derive(Default)]
struct OpSize {
    long: u64,
}

impl OpSize {
    /// An access's `size` field that says "see the `LongSize` before".
    const LONG: u16 = u16::MAX;

    /// The `size` field of an access of `size` bytes, and the `LongSize`
    /// to send before it if it needs one.
    fn encode(size: u64) -> (u16, Option<SetOp>) {
        match u16::try_from(size) {
            Ok(short) if short != Self::LONG => (short, None),
            _ => (Self::LONG, Some(SetOp::LongSize { size })),
        }
    }

    /// The size an access's `size` field stands for.
    #[inline]
    fn decode(&self, size: u16) -> u64 {
        if size == Self::LONG { self.long } else { u64::from(size) }
    }
}

/// Operations shared by the stages that read them.
type Batch = Arc<Vec<SetOp>>;

fn spawn_stage<T: Send + 'static>(
    name: &str,
    stage: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, DecodeError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(stage)
        .map_err(|e| DecodeError::Corrupt(format!("cannot start the decoding thread {name}: {e}")))
}

/// The sending end of the working-set and cache stages, batching
/// operations; each full batch goes to both.
struct StageSender {
    senders: [SyncSender<Batch>; 2],
    batch: Vec<SetOp>,
}

impl StageSender {
    /// A sender that sends nowhere (after [`StageSender::finish`]).
    fn closed() -> StageSender {
        StageSender { senders: [sync_channel(0).0, sync_channel(0).0], batch: Vec::new() }
    }

    // Always inlined: called, the operation was written by the caller in
    // pieces and read back whole, which the CPU could not forward from
    // those stores (three quarters of the call's time).
    #[inline(always)]
    fn send(&mut self, op: SetOp) {
        self.batch.push(op);
        if self.batch.len() >= BATCH {
            self.send_batch();
        }
    }

    /// The `size` field of an access of `size` bytes, having sent the
    /// [`SetOp::LongSize`] it needs, if any.
    #[inline]
    fn send_size(&mut self, size: u64) -> u16 {
        let (short, long) = OpSize::encode(size);
        if let Some(op) = long {
            self.send(op);
        }
        short
    }

    /// Sends the full batch to both stages.
    #[cold]
    fn send_batch(&mut self) {
        let full = Arc::new(std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH)));
        // A closed channel means a stage died; `finish` reports it.
        for sender in &self.senders {
            let _ = sender.send(full.clone());
        }
    }

    /// Sends what is left; an error if a stage is gone. Dropping the
    /// senders then ends the stages.
    fn finish(mut self) -> Result<(), ()> {
        let rest = Arc::new(std::mem::take(&mut self.batch));
        if rest.is_empty() {
            return Ok(());
        }
        self.senders.iter().try_for_each(|s| s.send(rest.clone()).map_err(|_| ()))
    }
}

/// What the working-set stage hands back.
struct SetResults {
    fetches: FetchCounter,
    max_rows: u32,
    pyramid: BitmapPyramid,
    /// (clock, lines) of each snapshot the event stage kept, in order.
    snapshot_sets: Vec<(u64, Vec<LineState>)>,
    /// Lines each site's reads inserted into the working set.
    site_fetches: Vec<u64>,
}

/// The cache simulation and the reuse distances: they see every access in
/// order.
struct CacheStage {
    simulator: CacheSimulator,
    misses: CacheMisses,
    per_site: Vec<CacheMisses>,
    columns: MissFlags,
    reuse: ReuseQueue,
    line_size: LineSize,
    /// Slot of the thread making the accesses.
    thread: usize,
}

impl CacheStage {
    fn new(config: CacheConfig, line_size: LineSize) -> CacheStage {
        CacheStage {
            simulator: CacheSimulator::new(config),
            misses: CacheMisses::default(),
            per_site: Vec::new(),
            columns: MissFlags::default(),
            reuse: ReuseQueue::default(),
            line_size,
            thread: 0,
        }
    }

    /// The reuse distances' part of an access: a read-modify-write reads
    /// its lines, then writes them.
    #[inline]
    fn measure_reuse(&mut self, addr: u64, size: u64, reads: bool, writes: bool) {
        let (first, last) = self.line_size.lines(addr, size);
        if reads {
            for line in first..=last {
                self.reuse.read(line, self.thread);
            }
        }
        if writes {
            for line in first..=last {
                self.reuse.write(line, self.thread);
            }
        }
    }

    /// One access; a read-modify-write references the cache once, as a
    /// read (its write always hits): cachegrind's rule.
    // Always: see `cache_stage`.
    #[inline(always)]
    fn access(&mut self, addr: u64, size: u64, site: u32, write: bool) -> Outcome {
        let outcome = self.simulator.access(addr, size);
        if outcome.d1_misses > 0 {
            self.misses.count(outcome, write);
            let site = site as usize;
            if site >= self.per_site.len() {
                self.per_site.resize(site + 1, CacheMisses::default());
            }
            self.per_site[site].count(outcome, write);
        }
        outcome
    }
}

/// Operations between a last-level set's prefetch and its use. (4 and 16
/// did no better: the cache stage alone, as measured for `cache_stage`'s
/// note, 3 alternating rounds: 0.993-1.162 s and 0.980-1.198 s, against
/// 0.964-1.089 s.)
const CACHE_LOOKAHEAD: usize = 8;
/// Operations ahead of the one applied whose part of the batch starts
/// loading, in the cache and working-set stages (1 KiB). A batch is written
/// on another core, and the first read of each of its cache lines waited
/// for it: `perf annotate` put 18% of the cache stage's own samples on that
/// read, 6% with the hint. `report` of the 100M-read benchmark trace, 6
/// alternating rounds: 6.08 s -> 6.04 s (faster in 5), CPU 11.72 -> 11.63 s.
const BATCH_LOOKAHEAD: usize = 64;

/// Starts loading the part of `batch` [`BATCH_LOOKAHEAD`] operations past
/// operation `i`. At every operation, though four share a host cache line:
/// only at every fourth, `report` of the benchmark trace took 5.43 s
/// against 5.29 s (6 alternating rounds, slower in all).
#[inline]
fn prefetch_batch_ahead(batch: &[SetOp], i: usize) {
    crate::prefetch::prefetch(batch.as_ptr().wrapping_add(i + BATCH_LOOKAHEAD));
}

/// The cache stage: the simulation and the reuse distances over the reads
/// and writes in order.
///
/// The last level's sets are prefetched for every access, though only the
/// first level's misses reach them. Simulating the first level over a
/// whole batch first, then prefetching only for its misses, did not make
/// the stage faster: alone, on 20M reads of the benchmark's pattern with a
/// 32 MiB last level (a scratch harness, best of 3 runs, 3 alternating
/// rounds), 0.93-0.97 s either way.
///
/// The last level is not what makes the stage slow: a scratch build that
/// simulated only the first level (no last-level lookups or prefetches)
/// decoded the view bench's 100M-read miss-heavy trace in 6.75-7.24 s, against
/// 7.00-7.94 s, with 12.8-13.8 s of user CPU against 13.4-15.0 s (3
/// alternating rounds). Folding the last level's lookups into the reuse
/// distances' line table, whose entry a read loads anyway, could gain no
/// more than that.
///
/// Everything an access calls is inlined into this loop, by
/// `#[inline(always)]`: with plain `#[inline]`, LLVM kept the reuse
/// queue's `push`, the tracker's `access` and the cache level's
/// `touch_line` as calls (19% and 8% of the pass's samples, `perf
/// record`), and a call's spills and reloads of the loop's state cost more
/// than its body's work. The cache stage's samples fell by 18% (6,626 ->
/// 5,435). The 100M-read view-bench trace's decode (a scratch binary
/// calling `Model::decode`), 9 alternating rounds, faster in all 9: median
/// 7.61 -> 7.25 s, user CPU 14.46 -> 13.69 s; `matmul_naive` and
/// `matmul_blocked` of examples/c/matmul.c on 256x256 and a 10M-read
/// trace, decoded in one run, 4 rounds: user CPU lower in all 4. The line
/// table's `entry` (the reuse distances' lookup of every access) stayed a
/// call after that, its growth inlined into it: with the growth out of
/// line and `entry` inlined, the same trace's decode, 8 alternating
/// rounds, faster in 7: median 7.05 -> 6.97 s, user CPU 13.42 -> 13.14 s.
/// A profile-guided build (`-Cprofile-use`, trained on those three traces)
/// made the same inlining choices. Against the plain build alone it looked
/// faster (3 rounds, median 7.97 -> 7.05 s), but in the 9 rounds beside
/// this one it was not (median 7.92 s): nothing it would add is worth a
/// profile kept in step with the code.
///
/// Nor is the loop faster split in two over each batch, the simulation
/// first and the reuse distances after (each loop with fewer values to keep
/// in registers: this one keeps some of its state on the stack): the same
/// trace, 4 alternating rounds, median 7.37 s against 7.12 s, user CPU
/// 14.0 s against 13.3 s.
fn cache_stage(config: CacheConfig, line_size: LineSize, receiver: Receiver<Batch>) -> CacheStage {
    let mut cache = CacheStage::new(config, line_size);
    let mut sizes = OpSize::default();
    for batch in receiver {
        for (i, op) in batch.iter().enumerate() {
            prefetch_batch_ahead(&batch, i);
            if let Some(SetOp::Read { addr, .. } | SetOp::Write { addr, .. }) = batch.get(i + CACHE_LOOKAHEAD) {
                cache.simulator.prefetch(*addr);
            }
            match *op {
                SetOp::Read { addr, size, site, flags } => {
                    let size = sizes.decode(size);
                    let outcome = cache.access(addr, size, site, false);
                    cache.columns.push(outcome);
                    cache.measure_reuse(addr, size, true, flags.writes());
                }
                SetOp::Write { addr, size, site } => {
                    let size = sizes.decode(size);
                    cache.access(addr, size, site, true);
                    cache.measure_reuse(addr, size, false, true);
                }
                SetOp::LongSize { size } => sizes.long = size,
                SetOp::Thread { slot } => cache.thread = slot as usize,
                SetOp::ExpectColumns { columns } => cache.columns.expect(columns),
                SetOp::Alloc { .. }
                | SetOp::AllocEnd { .. }
                | SetOp::Free { .. }
                | SetOp::Snapshot
                | SetOp::ThinSnapshots => {}
            }
        }
    }
    cache
}

/// What the working-set stage listens to when a read changes the set:
/// fetch statistics and the bitmap summary.
struct SetObserver<'a> {
    fetches: &'a mut FetchCounter,
    spans: &'a mut SpanAccumulator,
    live: &'a LiveBlocks,
    /// The read's address, if it is inside a live block
    /// ([`ReadFlags::in_block`]): its line is tinted without a search.
    in_block: Option<u64>,
}

impl LineObserver for SetObserver<'_> {
    #[inline]
    fn before_touch(&mut self, state: &mut LineState) {
        self.spans.before_touch(state);
    }
    #[inline]
    fn inserted(&mut self, state: &mut LineState) {
        self.fetches.inserted(state);
        let in_block = self.in_block;
        self.spans.inserted(state, |lo, hi| in_block.is_some_and(|a| lo <= a && a < hi) || self.live.overlaps(lo, hi));
    }
    #[inline]
    fn departed(&mut self, state: &LineState) {
        self.fetches.departed(state);
        self.spans.departed(state);
    }
}

/// Live blocks by start address -> end, for the allocation tint. Live heap
/// blocks do not overlap each other, so the few starting last before an
/// address decide (a few, not one: a program's own mappings can contain
/// blocks).
#[derive(Default)]
struct LiveBlocks(BTreeMap<u64, u64>);

impl LiveBlocks {
    /// Whether a live block overlaps `[lo, hi)`. Asked on every miss.
    ///
    /// Inlined, with the test for no blocks (most traces record no
    /// allocations) first: a call here kept the working-set stage's loop
    /// saving and restoring its registers around it on every miss. The
    /// 100M-read view-bench trace's decode (a scratch binary calling
    /// `Model::decode`), 6 alternating rounds, faster in all 6: median
    /// 7.19 -> 6.86 s, user CPU 13.5 -> 13.0 s.
    #[inline]
    fn overlaps(&self, lo: u64, hi: u64) -> bool {
        !self.0.is_empty() && self.overlaps_any(lo, hi)
    }

    /// [`LiveBlocks::overlaps`] with blocks live.
    fn overlaps_any(&self, lo: u64, hi: u64) -> bool {
        self.0.range(..hi).rev().take(4).any(|(_, &end)| end > lo)
    }
}

/// Reads and writes of each allocation record, by index, counted apart
/// from the records and folded into them when the pass ends
/// ([`BlockAccesses::fold_into`]). A record is 160 bytes, and a program
/// with many live blocks reads them in no order: counting in the records,
/// every such read missed the CPU's caches (81% of the event stage's own
/// samples on `examples/c/heap_reads.c`'s trace); 16 bytes a block stay
/// nearer.
///
/// With [`RecentBlocks`], that trace's decode (a scratch binary calling
/// `Model::decode`), 6 alternating rounds, faster in all 6: median 1.99 ->
/// 1.79 s, user CPU 3.52 -> 3.12 s (the recent blocks alone, 5 rounds:
/// 2.48 -> 2.27 s, the counts apart on top: 1.96 s). The same output: a
/// digest of the summary, the records and the metrics, on 14 traces.
#[derive(Default)]
struct BlockAccesses(Vec<AccessCounts>);

/// [`BlockAccesses`] of one block.
#[derive(Clone, Copy, Default)]
struct AccessCounts {
    reads: u64,
    writes: u64,
}

impl BlockAccesses {
    #[inline]
    fn counts(&mut self, block: usize) -> &mut AccessCounts {
        if block >= self.0.len() {
            self.grow(block);
        }
        &mut self.0[block]
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, block: usize) {
        self.0.resize(block + 1, AccessCounts::default());
    }

    /// A read of block `block` (its index in the records).
    #[inline]
    fn read(&mut self, block: usize) {
        self.counts(block).reads += 1;
    }

    /// A write of block `block`.
    #[inline]
    fn write(&mut self, block: usize) {
        self.counts(block).writes += 1;
    }

    /// Sets the records' counts to the ones counted here.
    fn fold_into(&self, records: &mut [AllocationRecord]) {
        for (record, counts) in records.iter_mut().zip(&self.0) {
            record.reads = counts.reads;
            record.writes = counts.writes;
        }
    }
}

/// A live block as the event stage finds it: where, and its record.
#[derive(Clone, Copy)]
struct LiveBlock {
    start: u64,
    size: u64,
    index: usize,
}

/// The two live blocks accesses last fell in, the most recent first:
/// asked before the tree of live blocks, whose walk missed the CPU's
/// caches at every level on a program with many blocks.
///
/// Two, not one: a program reading blocks through a table of pointers
/// (itself a block), or two blocks in step, alternates between them, and
/// with one kept every access walked the tree. Forgotten at every
/// allocation event, so a freed block is never found here.
///
/// The answer is always the tree's (the block starting last at or before
/// the address, if it holds it) while live blocks do not overlap. A block
/// inside another (a heap block in a mapping the program made) would make
/// it depend on which was found last, so from the first such block on
/// every access asks the tree ([`RecentBlocks::turn_off`]).
#[derive(Default)]
struct RecentBlocks {
    recent: [Option<LiveBlock>; 2],
    off: bool,
}

impl RecentBlocks {
    /// The record of the recent block holding `addr`, made the most
    /// recent.
    #[inline]
    fn find(&mut self, addr: u64) -> Option<usize> {
        let recent = &mut self.recent;
        let holds = |b: &Option<LiveBlock>| b.is_some_and(|b| block_contains(b.start, b.size, addr));
        if holds(&recent[0]) {
            return recent[0].map(|b| b.index);
        }
        if holds(&recent[1]) {
            recent.swap(0, 1);
            return recent[0].map(|b| b.index);
        }
        None
    }

    /// `block` held the last access: it becomes the most recent.
    #[inline]
    fn hit(&mut self, block: LiveBlock) {
        if !self.off {
            self.recent = [Some(block), self.recent[0]];
        }
    }

    /// Forgets every block.
    fn forget(&mut self) {
        self.recent = [None, None];
    }

    /// Whether blocks are kept.
    fn on(&self) -> bool {
        !self.off
    }

    /// Forgets every block, and keeps none from now on.
    fn turn_off(&mut self) {
        self.forget();
        self.off = true;
    }
}

/// Whether the block of `size` bytes at `start` would overlap a block of
/// `live` (by start -> (record, size)) other than one at `start` itself,
/// which it replaces. One walk of the tree (every allocation event asks):
/// the last block starting before the new one's end overlaps it if it
/// starts inside it or holds its start. (Two walks, one for the block
/// before and one for the block after, made the decode of
/// examples/c/heap_mix.c's 1M allocator calls 10% slower, 0.40 -> 0.44 s;
/// one, 5% slower, 0.39 -> 0.41 s: 5 alternating rounds each.)
fn overlaps_another(live: &BTreeMap<u64, (usize, u64)>, start: u64, size: u64) -> bool {
    let end = start.saturating_add(size.max(1));
    live.range(..end)
        .rev()
        .find(|(s, _)| **s != start)
        .is_some_and(|(&s, &(_, n))| s > start || block_contains(s, n, start))
}

/// The working-set stage: applies the reads in order.
///
/// Its line index is not prefetched: loading the index slot of the read
/// eight operations ahead left the stage alone (the scratch harness of the
/// cache stage's doc, with the default working set), best of 3 runs, at
/// 0.914-1.054 s against 0.925-0.977 s in 3 alternating rounds.
fn working_set_stage(config: WorkingSetConfig, receiver: Receiver<Batch>, preview: Option<Arc<Preview>>) -> SetResults {
    let mut set = FastWorkingSet::new(config);
    let mut spans = SpanAccumulator::new(&mut set, 0, |_, _| false);
    let mut pyramid = preview.map(PyramidBuilder::with_preview).unwrap_or_default();
    let mut next_block = pyramid.block_width();
    let mut live = LiveBlocks::default();
    let mut fetches = FetchCounter::default();
    let mut max_rows = 0u32;
    let mut snapshot_sets = Vec::new();
    let mut site_fetches: Vec<u64> = Vec::new();
    let mut column = 0u64;
    let mut sizes = OpSize::default();
    let mut alloc_start = 0u64;
    for batch in receiver {
        for (i, op) in batch.iter().enumerate() {
            prefetch_batch_ahead(&batch, i);
            match *op {
                SetOp::Read { addr, size, site, flags } => {
                    let size = sizes.decode(size);
                    if column == next_block {
                        pyramid.push(&spans.close_span(&mut set));
                        next_block += pyramid.block_width();
                    }
                    spans.begin_column(column);
                    let before = fetches.inserted;
                    let in_block = flags.in_block().then_some(addr);
                    let mut observer = SetObserver { fetches: &mut fetches, spans: &mut spans, live: &live, in_block };
                    set.read(addr, size, &mut observer);
                    if fetches.inserted > before {
                        let site = site as usize;
                        if site >= site_fetches.len() {
                            site_fetches.resize(site + 1, 0);
                        }
                        site_fetches[site] += fetches.inserted - before;
                    }
                    spans.end_column(&set);
                    max_rows = max_rows.max(set.len() as u32);
                    column += 1;
                }
                SetOp::LongSize { size } => sizes.long = size,
                // Writes and threads are the cache stage's.
                SetOp::Write { .. } | SetOp::Thread { .. } => {}
                SetOp::Alloc { start } => alloc_start = start,
                SetOp::AllocEnd { end } => {
                    live.0.insert(alloc_start, end);
                }
                SetOp::Free { start } => {
                    live.0.remove(&start);
                }
                SetOp::Snapshot => snapshot_sets.push((set.clock(), set.snapshot())),
                SetOp::ExpectColumns { columns } => pyramid.expect(columns, max_rows),
                SetOp::ThinSnapshots => {
                    let mut i = 0;
                    snapshot_sets.retain(|_| {
                        i += 1;
                        i % 2 == 1
                    });
                }
            }
        }
    }
    if column > next_block - pyramid.block_width() {
        pyramid.push(&spans.close_span(&mut set));
    }
    let pyramid = pyramid.finish(column);
    // Lines still in the set at the end count as fetches too.
    set.drain(|d| fetches.departed(&d.state));
    SetResults { fetches, max_rows, pyramid, snapshot_sets, site_fetches }
}

/// The stacks allocation records refer to, parsed from the string table
/// (hexadecimal addresses separated by commas); unparsable parts are
/// dropped.
///
/// Each stack once: a million records share a few hundred stacks, and
/// parsing every record's was a third of decoding such a trace.
fn alloc_stacks(records: &[AllocationRecord], strings: &[String]) -> BTreeMap<u32, Vec<u64>> {
    let mut stacks = BTreeMap::new();
    let mut last = None;
    for id in records.iter().filter_map(|r| r.stack) {
        // Neighbours mostly share a stack: skip the map lookup then.
        if last == Some(id) {
            continue;
        }
        last = Some(id);
        if let (std::collections::btree_map::Entry::Vacant(slot), Some(text)) =
            (stacks.entry(id), strings.get(id as usize))
        {
            slot.insert(text.split(',').filter_map(|a| u64::from_str_radix(a.trim(), 16).ok()).collect());
        }
    }
    stacks
}

/// Per-thread counts of the decoding pass.
struct ThreadState {
    tid: u32,
    totals: Totals,
}

/// Where a snapshot was taken: its state is the working-set stage's.
struct SnapshotPlace {
    column: u64,
    chunk: ChunkPosition,
    stacks: Vec<OpenStack>,
}

/// The event stage.
struct EventStage {
    /// The thread whose events make the columns (`None`: every thread's).
    timeline: Option<u32>,
    column: u64,
    /// The working-set and cache stages.
    stages: StageSender,
    /// The thread slot the cache stage was last told of.
    told_thread: Option<usize>,
    threads: Vec<ThreadState>,
    /// Index in `threads` of the last event's thread.
    current: usize,
    calls: CallTreeBuilder,
    site_counts: Vec<SiteCounts>,
    metrics: Metrics,
    allocations: Vec<AllocationRecord>,
    /// Reads and writes of each record in `allocations`, counted apart
    /// ([`BlockAccesses`]).
    block_accesses: BlockAccesses,
    /// Allocation events so far (the heap analysis's clock).
    alloc_events: u64,
    /// The record the last allocation event created (its details follow).
    last_created: Option<usize>,
    /// The record the last allocation event freed.
    last_freed: Option<usize>,
    /// The records a custom allocator's reset (the last event) freed.
    last_reset: Vec<usize>,
    /// Moves of the program break, in trace order.
    program_breaks: Vec<ProgramBreakMove>,
    /// Live blocks of custom allocators by start address (apart from
    /// malloc's: a pool's first block starts where its arena does), with
    /// the arena each came from (0: none named).
    custom_live: BTreeMap<u64, (usize, u64)>,
    /// Live blocks by start address -> (index in `allocations`, size).
    /// With its size, the block an access falls in is known without a load
    /// of its record, which missed the CPU's caches on every access of a
    /// program with many live blocks.
    live: BTreeMap<u64, (usize, u64)>,
    recent_blocks: RecentBlocks,
    snapshots: Vec<SnapshotPlace>,
    snapshot_every: u64,
    /// Snapshots kept at most ([`crate::model::max_snapshots`]).
    max_snapshots: usize,
    chunk_serial: u64,
    /// String id of the program exec'd into.
    exec: Option<u32>,
    /// Size of the trace file (0: unknown), for the expected length.
    file_bytes: u64,
    /// Whether the expected length was sent.
    expected: bool,
    /// Lowest and highest stack pointer seen, per thread.
    stacks: BTreeMap<u32, (u64, u64)>,
    /// Copies of the records for a viewer's picture while decoding.
    heap_preview: Option<HeapPreviewSchedule>,
}

/// When the event stage copies its allocation records into the preview,
/// if the viewer wants them ([`Preview::want_heap`]): the first copy
/// [`FIRST_HEAP_PREVIEW`] into decoding, each next one when the time since
/// the start has grown fourfold, so the copies cost a fraction of the
/// decoding; none of more than [`MAX_HEAP_PREVIEW_RECORDS`] records.
struct HeapPreviewSchedule {
    preview: Arc<Preview>,
    started: std::time::Instant,
    next: std::time::Duration,
    serial: u32,
}

/// The first copy of the records so far: a picture of them can be on
/// screen well within a second of opening a trace.
const FIRST_HEAP_PREVIEW: std::time::Duration = std::time::Duration::from_millis(200);
/// Most records copied for a preview (a record is ~180 bytes).
const MAX_HEAP_PREVIEW_RECORDS: usize = 1 << 20;

impl HeapPreviewSchedule {
    fn new(preview: Arc<Preview>) -> Self {
        HeapPreviewSchedule { preview, started: std::time::Instant::now(), next: FIRST_HEAP_PREVIEW, serial: 0 }
    }

    /// Copies `records` (of `events` allocation events) into the preview
    /// if it is time.
    fn maybe_show(&mut self, records: &[AllocationRecord], accesses: &BlockAccesses, events: u64) {
        if records.is_empty() || records.len() > MAX_HEAP_PREVIEW_RECORDS || !self.preview.wants_heap() {
            return;
        }
        let now = self.started.elapsed();
        if now < self.next {
            return;
        }
        self.next = now * 4;
        self.serial += 1;
        let mut records = records.to_vec();
        accesses.fold_into(&mut records);
        self.preview.show_heap(HeapSoFar { records: records.into(), events, serial: self.serial });
    }
}

impl EventStage {
    fn new(
        options: DecodeOptions,
        timeline: Option<u32>,
        stages: StageSender,
        file_bytes: u64,
        preview: Option<Arc<Preview>>,
    ) -> Self {
        EventStage {
            timeline,
            column: 0,
            stages,
            told_thread: None,
            threads: Vec::new(),
            current: 0,
            calls: CallTreeBuilder::new(),
            site_counts: Vec::new(),
            metrics: Metrics::default(),
            allocations: Vec::new(),
            block_accesses: BlockAccesses::default(),
            alloc_events: 0,
            last_created: None,
            last_freed: None,
            last_reset: Vec::new(),
            program_breaks: Vec::new(),
            custom_live: BTreeMap::new(),
            live: BTreeMap::new(),
            recent_blocks: RecentBlocks::default(),
            snapshots: Vec::new(),
            snapshot_every: options.snapshot_every.max(1),
            max_snapshots: crate::model::max_snapshots(&options.working_set),
            chunk_serial: 0,
            exec: None,
            file_bytes,
            expected: false,
            stacks: BTreeMap::new(),
            heap_preview: preview.map(HeapPreviewSchedule::new),
        }
    }

    fn run<R: std::io::Read>(
        &mut self,
        mut reader: TraceReader<R>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(TraceReader<R>, TraceEnd), DecodeError> {
        let mut since_progress = 0u32;
        loop {
            since_progress += 1;
            if since_progress == 1 << 20 {
                since_progress = 0;
                progress(reader.bytes_read());
            }
            // Accesses of the chunk being read come the fast way (see
            // `TraceReader::next_access`); a new chunk's first record, and
            // every other event, from `next_record`.
            if let Some((thread, site, addr)) = reader.next_access() {
                self.access_event(thread, &Event::Access { site, addr }, reader.sites())?;
                continue;
            }
            let Some(rec) = reader.next_record()? else { break };
            if reader.chunk_serial() != self.chunk_serial {
                self.chunk_serial = reader.chunk_serial();
                self.maybe_snapshot(reader.chunk_position());
                self.maybe_expect(reader.chunk_position().offset);
                if let Some(schedule) = &mut self.heap_preview {
                    schedule.maybe_show(&self.allocations, &self.block_accesses, self.alloc_events);
                }
                progress(reader.bytes_read());
            }
            let thread = rec.thread;
            if !on_timeline(self.timeline, thread, &rec.event) {
                continue;
            }
            if self.access_event(thread, &rec.event, reader.sites())? {
                continue;
            }
            let t = self.thread_slot(thread);
            if apply_control(&mut self.calls, thread, &rec.event, self.column) {
                match rec.event {
                    Event::InvocationStart { sp, .. } => {
                        self.threads[t].totals.invocations += 1;
                        self.note_sp(thread, sp);
                    }
                    Event::Call { sp, .. } | Event::TailCall { sp, .. } | Event::Return { sp } => {
                        self.note_sp(thread, sp)
                    }
                    _ => {}
                }
                continue;
            }
            let totals = &mut self.threads[t].totals;
            match rec.event {
                Event::Alloc(a) => {
                    totals.allocations += 1;
                    self.allocation(thread, &a);
                }
                Event::AllocDetail { usable, time_ns } => {
                    if let Some(r) = self.last_created.and_then(|i| self.allocations.get_mut(i)) {
                        r.usable = usable;
                        r.alloc_ns = Some(time_ns);
                    }
                    if let Some(r) = self.last_freed.and_then(|i| self.allocations.get_mut(i)) {
                        r.free_ns = Some(time_ns);
                    }
                    for &i in &self.last_reset {
                        if let Some(r) = self.allocations.get_mut(i) {
                            r.free_ns = Some(time_ns);
                        }
                    }
                }
                Event::AllocStack { stack } => {
                    if let Some(r) = self.last_created.and_then(|i| self.allocations.get_mut(i)) {
                        r.stack = Some(stack);
                    }
                }
                Event::CustomAllocation(c) => {
                    totals.allocations += 1;
                    self.custom_allocation(thread, &c);
                }
                Event::ProgramBreak { from, to } => {
                    // During the allocation event just before it.
                    let event = self.alloc_events.saturating_sub(1);
                    self.program_breaks.push(ProgramBreakMove { event, from, to });
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

    /// Takes `event` of `thread` (on the timeline) if it is an access:
    /// true when it was.
    #[inline(always)]
    fn access_event(&mut self, thread: u32, event: &Event, sites: &[Site]) -> Result<bool, DecodeError> {
        let Some(a) = access_of(event, sites)? else { return Ok(false) };
        if on_timeline(self.timeline, thread, event) {
            let t = self.thread_slot(thread);
            self.access(thread, t, a);
        }
        Ok(true)
    }

    #[inline]
    fn note_sp(&mut self, thread: u32, sp: u64) {
        let range = self.stacks.entry(thread).or_insert((sp, sp));
        range.0 = range.0.min(sp);
        range.1 = range.1.max(sp);
    }

    /// Once [`EXPECT_AFTER_COLUMNS`] columns are in: tells the summary how
    /// many columns the whole file should hold, at the rate so far. At a
    /// chunk's start, so the same file always gives the same estimate;
    /// `bytes` is where that chunk starts, so the columns and the bytes
    /// are of the same chunks.
    ///
    /// (The bytes read so far, the chunk's own with them, made the
    /// estimate short by a chunk's columns: 16.0M for the view bench's
    /// pattern in 20M reads, 80.0M in 100M; now 20.0M and 100.0M. A short
    /// estimate near a limit of level 0 ([`crate::pyramid::MAX_LEVEL0_CELLS`])
    /// keeps its narrower blocks until level 0 fills, closing up to twice
    /// as many spans on the working-set thread.)
    fn maybe_expect(&mut self, bytes: u64) {
        if self.expected || self.column < EXPECT_AFTER_COLUMNS || self.file_bytes == 0 || bytes == 0 {
            return;
        }
        self.expected = true;
        let columns = (self.column as f64 * self.file_bytes as f64 / bytes as f64) as u64;
        self.stages.send(SetOp::ExpectColumns { columns });
    }

    fn maybe_snapshot(&mut self, chunk: ChunkPosition) {
        let due = self.snapshots.last().is_none_or(|s| self.column - s.column >= self.snapshot_every);
        if !due {
            return;
        }
        if self.snapshots.len() >= self.max_snapshots {
            // Keep every other snapshot; the first (column 0) always stays.
            let mut i = 0;
            self.snapshots.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stages.send(SetOp::ThinSnapshots);
            self.snapshot_every *= 2;
        }
        self.snapshots.push(SnapshotPlace { column: self.column, chunk, stacks: self.calls.open_stacks() });
        self.stages.send(SetOp::Snapshot);
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

    // Always inlined, as is `block_of`'s test: the event stage alone over
    // the 100M-read benchmark trace (a scratch harness, best of 3 runs, 3
    // alternating rounds) took 1.79-1.89 s, against 1.97-2.07 s with both
    // called.
    #[inline(always)]
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
                self.block_accesses.write(b);
            }
        }
        if self.told_thread != Some(t) {
            // Thread slots are indices of the trace's threads: far below 2^32.
            self.stages.send(SetOp::Thread { slot: t as u32 });
            self.told_thread = Some(t);
        }
        if a.reads {
            counts.reads += 1;
            counts.bytes_read += a.size;
            state.totals.reads += 1;
            state.totals.bytes_read += a.size;
            self.calls.read(thread);
            if let Some(b) = block {
                self.block_accesses.read(b);
            }
            let size = self.stages.send_size(a.size);
            let flags = ReadFlags::new(a.writes, block.is_some());
            self.stages.send(SetOp::Read { addr: a.addr, site: a.site, size, flags });
            self.column += 1;
        } else if a.writes {
            let size = self.stages.send_size(a.size);
            self.stages.send(SetOp::Write { addr: a.addr, site: a.site, size });
        }
    }

    /// The live block containing `addr`, if any. Inlined for the test
    /// alone: most traces record no allocations.
    #[inline(always)]
    fn block_of(&mut self, addr: u64) -> Option<usize> {
        if self.live.is_empty() {
            return None;
        }
        self.live_block_of(addr)
    }

    /// [`EventStage::block_of`] with live blocks: the recent ones first
    /// ([`RecentBlocks`]), then the tree.
    fn live_block_of(&mut self, addr: u64) -> Option<usize> {
        if let Some(b) = self.recent_blocks.find(addr) {
            return Some(b);
        }
        let (&start, &(b, size)) = self.live.range(..=addr).next_back()?;
        block_contains(start, size, addr).then(|| {
            self.recent_blocks.hit(LiveBlock { start, size, index: b });
            b
        })
    }

    /// The record of a block `a` returned at allocation event `event`.
    fn new_record(&self, thread: u32, a: &Allocation, event: u64, allocator: Option<u32>) -> AllocationRecord {
        AllocationRecord {
            kind: a.kind,
            address: a.ptr_out,
            size: a.size,
            align: a.align,
            callsite: a.callsite,
            alloc_column: self.column,
            free_column: None,
            alloc_event: event,
            free_event: None,
            usable: 0,
            alloc_ns: None,
            free_ns: None,
            stack: None,
            thread,
            reads: 0,
            writes: 0,
            allocator,
        }
    }

    /// A custom allocator function's call: the same clock as malloc's
    /// calls, its own blocks (not sent to the working set, which attributes
    /// reads to malloc's blocks).
    fn custom_allocation(&mut self, thread: u32, c: &trace_rt::format::CustomAllocation) {
        use trace_rt::format::CustomOp;
        let event = self.alloc_events;
        self.alloc_events += 1;
        self.last_created = None;
        self.last_freed = None;
        self.last_reset.clear();
        let column = self.column;
        let end = |this: &mut Self, i: usize| {
            this.allocations[i].free_column = Some(column);
            this.allocations[i].free_event = Some(event);
        };
        match c.op {
            CustomOp::Free => match self.custom_live.remove(&c.ptr_in) {
                Some((i, _)) => {
                    end(self, i);
                    self.last_freed = Some(i);
                }
                None => self.metrics.foreign_frees += 1,
            },
            CustomOp::Reset => {
                // One arena's blocks, or (no arena named) all of them.
                let arena = c.ptr_in;
                let live = std::mem::take(&mut self.custom_live);
                for (address, (i, from)) in live {
                    if arena == 0 || from == arena {
                        end(self, i);
                        self.last_reset.push(i);
                    } else {
                        self.custom_live.insert(address, (i, from));
                    }
                }
            }
            CustomOp::Alloc if c.ptr_out != 0 => {
                let index = self.allocations.len();
                let block = Allocation {
                    kind: AllocKind::Malloc,
                    size: c.size,
                    align: 0,
                    ptr_in: 0,
                    ptr_out: c.ptr_out,
                    callsite: c.callsite,
                };
                self.allocations.push(self.new_record(thread, &block, event, Some(c.allocator)));
                self.last_created = Some(index);
                if let Some((old, _)) = self.custom_live.insert(c.ptr_out, (index, c.ptr_in)) {
                    // Handed out again without a recorded free or reset.
                    end(self, old);
                }
            }
            CustomOp::Alloc => {}
        }
    }

    fn allocation(&mut self, thread: u32, a: &Allocation) {
        let event = self.alloc_events;
        self.alloc_events += 1;
        self.last_created = None;
        self.last_freed = None;
        self.last_reset.clear();
        // A block freed, or replaced by a block at its address, must not
        // be found again.
        self.recent_blocks.forget();
        let release = |this: &mut Self, ptr: u64| {
            if ptr == 0 {
                return;
            }
            match this.live.remove(&ptr) {
                Some((i, _)) => {
                    this.allocations[i].free_column = Some(this.column);
                    this.allocations[i].free_event = Some(event);
                    this.last_freed = Some(i);
                    this.stages.send(SetOp::Free { start: ptr });
                }
                None => this.metrics.foreign_frees += 1,
            }
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
        let record = self.new_record(thread, a, event, None);
        self.stages.send(SetOp::Alloc { start: record.address });
        self.stages.send(SetOp::AllocEnd { end: record.end() });
        self.last_created = Some(index);
        self.allocations.push(record);
        if self.recent_blocks.on() && overlaps_another(&self.live, a.ptr_out, a.size) {
            self.recent_blocks.turn_off();
        }
        if let Some((old, _)) = self.live.insert(a.ptr_out, (index, a.size)) {
            // Reused without a recorded free (freed natively elsewhere).
            self.allocations[old].free_column = Some(self.column);
            self.allocations[old].free_event = Some(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_rt::format::AllocKind;

    fn records(n: u64) -> Vec<AllocationRecord> {
        (0..n).map(|i| AllocationRecord::test_block(AllocKind::Malloc, 0x1000 + 64 * i, 32, i, None)).collect()
    }

    /// A schedule that started `ago` in the past.
    fn schedule(preview: &Arc<Preview>, ago: std::time::Duration) -> HeapPreviewSchedule {
        let mut schedule = HeapPreviewSchedule::new(preview.clone());
        schedule.started -= ago;
        schedule
    }

    #[test]
    fn heap_copies_come_when_wanted_and_due_then_at_four_times_the_time() {
        let preview = Arc::new(Preview::default());
        let mut s = schedule(&preview, std::time::Duration::from_millis(300));
        let none = BlockAccesses::default();
        s.maybe_show(&records(5), &none, 5);
        assert!(preview.heap().is_none(), "not wanted: no copy");
        preview.want_heap();
        // The copy carries the accesses counted so far.
        let mut accesses = BlockAccesses::default();
        accesses.read(2);
        accesses.read(2);
        accesses.write(4);
        s.maybe_show(&records(6), &accesses, 6);
        let first = preview.heap().expect("wanted and due");
        assert_eq!((first.serial, first.events, first.records.len()), (1, 6, 6));
        let mut counted = records(6);
        (counted[2].reads, counted[4].writes) = (2, 1);
        assert_eq!(&first.records[..], &counted[..]);
        // The next one is due at four times the time since the start.
        s.maybe_show(&records(7), &none, 7);
        assert_eq!(preview.heap().map(|h| h.serial), Some(1), "not due yet");
        s.started -= s.next;
        s.maybe_show(&records(8), &none, 8);
        let second = preview.heap().expect("a copy");
        assert_eq!((second.serial, second.events), (2, 8));
    }

    #[test]
    fn no_heap_copy_before_it_is_due_nor_of_too_many_records() {
        let preview = Arc::new(Preview::default());
        preview.want_heap();
        let mut early = schedule(&preview, std::time::Duration::ZERO);
        let none = BlockAccesses::default();
        early.maybe_show(&records(3), &none, 3);
        assert!(preview.heap().is_none(), "before FIRST_HEAP_PREVIEW");
        let mut late = schedule(&preview, FIRST_HEAP_PREVIEW * 2);
        late.maybe_show(&[], &none, 0);
        assert!(preview.heap().is_none(), "nothing to show");
        let many = vec![records(1)[0].clone(); MAX_HEAP_PREVIEW_RECORDS + 1];
        late.maybe_show(&many, &none, 1);
        assert!(preview.heap().is_none(), "too many to copy");
    }

    /// The trace's length, as the event stage tells the summary once
    /// [`EXPECT_AFTER_COLUMNS`] columns are in, is the trace's within a
    /// percent: the columns and the bytes it is estimated from are of the
    /// same chunks. (Counted against the bytes read, the chunk just begun
    /// among them, it came out 16% short on this trace.)
    #[test]
    fn the_expected_columns_are_the_traces_within_a_percent() {
        use trace_rt::format::{AccessKind, Event, Implied, Metadata, Site, TraceWriter, Trailer};
        let reads = EXPECT_AFTER_COLUMNS + EXPECT_AFTER_COLUMNS / 2;
        let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
        let file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        let mut writer = TraceWriter::new(file, &Metadata::new("test")).expect("header");
        // Chunks of a few hundred thousand reads: the one begun is a large
        // part of the bytes read.
        writer.set_chunk_target(1 << 21);
        let site = writer.add_site(Site {
            pc: 0x1000,
            len: 4,
            kind: AccessKind::Read,
            size: 8,
            count: 1,
            implied: Implied::NONE,
        });
        writer.push(1, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x8000 }).expect("push");
        let mut seed = 7u64;
        for _ in 0..reads {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            writer.push(1, &Event::Access { site, addr: 0x10_0000 + (seed >> 44) * 8 }).expect("push");
        }
        writer.finish(&Trailer::default()).expect("finish");
        let file_bytes = std::fs::metadata(&path).expect("written").len();
        // Room for every batch: nothing drains the channels while it runs.
        let (set_sender, set_receiver) = sync_channel::<Batch>(1 << 10);
        let (cache_sender, _cache_receiver) = sync_channel::<Batch>(1 << 10);
        let stages = StageSender { senders: [set_sender, cache_sender], batch: Vec::with_capacity(BATCH) };
        let mut events = EventStage::new(DecodeOptions::default(), None, stages, file_bytes, None);
        let reader = TraceReader::open(&path).expect("open");
        assert!(events.run(reader, &mut |_| {}).is_ok(), "decoded");
        assert_eq!(events.column, reads);
        assert!(std::mem::replace(&mut events.stages, StageSender::closed()).finish().is_ok(), "sent");
        drop(events);
        let expected: Vec<u64> = set_receiver
            .iter()
            .flat_map(|batch| batch.to_vec())
            .filter_map(|op| match op {
                SetOp::ExpectColumns { columns } => Some(columns),
                _ => None,
            })
            .collect();
        assert_eq!(expected.len(), 1, "told once");
        let error = (expected[0] as f64 - reads as f64).abs() / reads as f64;
        assert!(error < 0.01, "expected {} columns of {reads}: {:.1}% off", expected[0], error * 100.0);
    }
}

//! The heap of a recording: how full, how wasted and how fragmented it
//! was, when, and which functions made it so (`report --allocations`).
//!
//! Time is the allocation-event number ([`AllocationRecord::alloc_event`]):
//! every allocator call is one tick, whatever the thread. Rules:
//! - **Heap blocks** are those of the malloc family and operator new;
//!   mappings (the program's own mmap) are counted apart.
//! - **Live bytes** are requested bytes of live blocks, as valgrind's DHAT
//!   counts them; the **peak** is the first event at which they are
//!   highest. A realloc that moved a block holds both blocks for an
//!   instant (new before old is freed, as the allocator does), one that
//!   grew in place only changes the size.
//! - **Waste** is usable minus requested bytes, where the recorder knew the
//!   usable size (`record --allocations`).
//! - **Size classes** are glibc's defaults on x86-64, by request: fast
//!   (chunks up to 128 bytes: requests up to 120), small (chunks below
//!   1 KiB: requests up to 1000), large, and huge (128 KiB and more, the
//!   default mmap threshold; glibc raises it once such blocks are freed).
//!   The tcache holds chunks up to 1032 bytes of the first two.
//! - **Regions** are runs of live blocks no more than [`REGION_GAP`] apart
//!   (the brk heap, each arena, each mmapped block); **free gaps** are
//!   holes of more than [`MIN_GAP`] bytes between neighbouring live blocks
//!   of a region (smaller ones are chunk headers and alignment).
//! - **Allocation order** of a region: of consecutive allocations that
//!   landed in it, how many went to a higher address, how many lower.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use trace_rt::format::AllocKind;

use crate::allocations::AllocationRecord;
use crate::model::Model;
use crate::symbols::Symbolizer;

/// Blocks further apart than this are in different regions.
pub const REGION_GAP: u64 = 1 << 20;
/// Holes up to this size between blocks are headers and alignment.
pub const MIN_GAP: u64 = 32;
/// Points of the timeline (besides the peak).
pub const TIMELINE_POINTS: u64 = 48;

/// Live bytes and blocks at one event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Live {
    /// The event (after it).
    pub event: u64,
    /// Requested bytes of live blocks.
    pub bytes: u64,
    /// Live blocks.
    pub blocks: u64,
}

/// The heap at one point of the timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HeapSample {
    /// Live blocks and bytes.
    pub live: Live,
    /// Regions holding them.
    pub regions: u64,
    /// Free gaps between them.
    pub gaps: u64,
    /// Bytes in the gaps.
    pub gap_bytes: u64,
    /// The largest gap.
    pub largest_gap: u64,
    /// Bytes the regions span, first block to last.
    pub span_bytes: u64,
}

/// A size class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SizeClassRow {
    /// Its name.
    pub class: &'static str,
    /// Blocks allocated in it.
    pub blocks: u64,
    /// Bytes requested.
    pub bytes: u64,
    /// Usable minus requested bytes, of blocks whose usable size is known.
    pub waste: u64,
}

/// What a function allocated (by the call instruction's function).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SiteRow {
    /// The allocating function, and the line of its first allocating call.
    pub function: String,
    /// Where.
    pub line: String,
    /// Blocks.
    pub blocks: u64,
    /// Requested bytes.
    pub bytes: u64,
}

/// A region and the order allocations filled it in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RegionRow {
    /// First address of any block in it.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Blocks allocated in it.
    pub blocks: u64,
    /// Allocations at a higher address than the region's previous one.
    pub ascending: u64,
    /// At a lower address.
    pub descending: u64,
}

/// The heap analysis.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HeapReport {
    /// Allocation events (calls).
    pub events: u64,
    /// Heap blocks allocated.
    pub blocks: u64,
    /// Bytes requested for them.
    pub bytes: u64,
    /// Heap blocks freed.
    pub frees: u64,
    /// Reallocs that kept their block's address.
    pub reallocs_in_place: u64,
    /// Reallocs that moved it.
    pub reallocs_moved: u64,
    /// The program's own mappings.
    pub mappings: u64,
    /// Their bytes.
    pub mapped_bytes: u64,
    /// Most live bytes (the first event they were reached).
    pub peak: Live,
    /// Live at the end: leaks, if the program was done.
    pub at_end: Live,
    /// Usable minus requested bytes, of all blocks whose usable size is known.
    pub waste: u64,
    /// Blocks whose usable size is known.
    pub usable_known: u64,
    /// By size class.
    pub size_classes: Vec<SizeClassRow>,
    /// Sampled over the run (and at the peak).
    pub timeline: Vec<HeapSample>,
    /// Regions of the whole run, with their allocation order.
    pub regions: Vec<RegionRow>,
    /// Allocating functions, most blocks first.
    pub top_by_count: Vec<SiteRow>,
    /// Most bytes first.
    pub top_by_bytes: Vec<SiteRow>,
    /// Blocks live at the end, by allocating function, most bytes first.
    pub leaks: Vec<SiteRow>,
    /// Blocks live at the end, by call stack (recorded with
    /// `--alloc-stack`), most bytes first.
    pub leak_stacks: Vec<StackRow>,
    /// The brk heap over the run (None: the break never moved while
    /// recording, or the recorder does not see it).
    pub program_break: Option<ProgramBreakReport>,
    /// Periods of allocation much faster than the run's mean, and who
    /// allocated in them.
    pub bursts: crate::bursts::BurstReport,
    /// The custom allocator functions' blocks (`--alloc-fn`), one row per
    /// function that handed blocks out.
    pub custom: Vec<CustomAllocatorRow>,
}

/// The blocks one custom allocator function handed out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CustomAllocatorRow {
    /// The function.
    pub allocator: String,
    /// Blocks handed out.
    pub blocks: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// Blocks released (by a free or a reset).
    pub freed: u64,
    /// Most live bytes (the first event they were reached).
    pub peak: Live,
    /// Live at the end.
    pub at_end: Live,
    /// The most requested sizes: (bytes, blocks), most blocks first (at
    /// most 8): the allocator's own size classes as the program uses them.
    pub sizes: Vec<(u64, u64)>,
    /// Who called it, most blocks first (at most 5).
    pub callers: Vec<SiteRow>,
}

/// The custom allocators' rows.
pub fn custom_allocators(model: &Model, symbols: &Symbolizer) -> Vec<CustomAllocatorRow> {
    let mut by: BTreeMap<u32, Vec<&AllocationRecord>> = BTreeMap::new();
    for r in &model.allocations {
        if let Some(id) = r.allocator {
            by.entry(id).or_default().push(r);
        }
    }
    by.into_iter()
        .map(|(id, blocks)| {
            let mut changes: Vec<(u64, i64)> = Vec::new();
            for b in &blocks {
                changes.push((b.alloc_event, b.size as i64));
                if let Some(f) = b.free_event {
                    changes.push((f, -(b.size as i64)));
                }
            }
            // Frees of an event before its allocations: a block handed out
            // again at once is not counted twice.
            changes.sort_by_key(|&(event, delta)| (event, delta > 0));
            let (mut live, mut count, mut peak) = (0i64, 0i64, Live::default());
            for (event, delta) in changes {
                live += delta;
                count += delta.signum();
                if live as u64 > peak.bytes {
                    peak = Live { event, bytes: live as u64, blocks: count as u64 };
                }
            }
            let mut sizes: HashMap<u64, u64> = HashMap::new();
            for b in &blocks {
                *sizes.entry(b.size).or_default() += 1;
            }
            let mut sizes: Vec<(u64, u64)> = sizes.into_iter().collect();
            sizes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            sizes.truncate(8);
            let mut callers = sites(&blocks, symbols);
            callers.sort_by(|a, b| b.blocks.cmp(&a.blocks).then(a.function.cmp(&b.function)));
            callers.truncate(5);
            let left: Vec<&&AllocationRecord> = blocks.iter().filter(|b| b.free_event.is_none()).collect();
            CustomAllocatorRow {
                allocator: model.allocator_names.get(&id).cloned().unwrap_or_else(|| format!("allocator {id}")),
                blocks: blocks.len() as u64,
                bytes: blocks.iter().map(|b| b.size).sum(),
                freed: (blocks.len() - left.len()) as u64,
                peak,
                at_end: Live {
                    event: model.total.allocations,
                    bytes: left.iter().map(|b| b.size).sum(),
                    blocks: left.len() as u64,
                },
                sizes,
                callers,
            }
        })
        .collect()
}

/// malloc's main heap as the program break shows it: how far it grew,
/// how often it grew and shrank, and how full it was at its largest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProgramBreakReport {
    /// The break before the first recorded move.
    pub start: u64,
    /// After the last.
    pub end: u64,
    /// The highest it reached.
    pub peak: u64,
    /// The allocation event during which it first got there.
    pub peak_event: u64,
    /// Moves up (the heap grew).
    pub grows: u64,
    /// Moves down (malloc trimmed the heap's top).
    pub trims: u64,
    /// Bytes added by all moves up.
    pub grown_bytes: u64,
    /// Bytes given back by all moves down.
    pub trimmed_bytes: u64,
    /// Bytes of heap blocks live in `[start, peak)` right after the break
    /// reached its peak: how full the brk heap was at its largest.
    pub live_at_peak: u64,
}

/// The brk heap's report, from the break's moves and the blocks.
pub fn program_break(
    moves: &[crate::model::ProgramBreakMove],
    records: &[AllocationRecord],
) -> Option<ProgramBreakReport> {
    let first = moves.first()?;
    let mut r = ProgramBreakReport { start: first.from, end: first.from, peak: first.from, ..Default::default() };
    for m in moves {
        if m.to > m.from {
            r.grows += 1;
            r.grown_bytes += m.to - m.from;
        } else {
            r.trims += 1;
            r.trimmed_bytes += m.from - m.to;
        }
        if m.to > r.peak {
            r.peak = m.to;
            r.peak_event = m.event;
        }
        r.end = m.to;
    }
    r.live_at_peak = records
        .iter()
        .filter(|b| is_heap_block(b) && b.alloc_event <= r.peak_event && b.free_event.is_none_or(|f| f > r.peak_event))
        .filter(|b| b.address >= r.start && b.address < r.peak)
        .map(|b| b.size.min(r.peak - b.address))
        .sum();
    Some(r)
}

/// Blocks allocated through one call stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StackRow {
    /// The calling instruction, then its callers: `function (file:line)`.
    pub frames: Vec<String>,
    /// Blocks.
    pub blocks: u64,
    /// Requested bytes.
    pub bytes: u64,
}

/// Whether a record is one of malloc's heap blocks (not a mapping, not a
/// custom allocator's block).
pub fn is_heap_block(r: &AllocationRecord) -> bool {
    !matches!(r.kind, AllocKind::Mmap | AllocKind::Munmap) && r.allocator.is_none()
}

/// Whether a record is one of the program's own mappings (mmap).
pub fn is_mapping(r: &AllocationRecord) -> bool {
    matches!(r.kind, AllocKind::Mmap | AllocKind::Munmap) && r.allocator.is_none()
}

/// glibc's size classes of requests (x86-64 defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum SizeClass {
    /// Chunks up to 128 bytes (fastbins).
    Fast,
    /// Chunks below 1 KiB (smallbins).
    Small,
    /// Up to the mmap threshold (largebins).
    Large,
    /// 128 KiB and more: mmapped, until glibc's dynamic threshold rises
    /// past them after such blocks are freed.
    Huge,
}

impl SizeClass {
    /// Every class, smallest first.
    pub const ALL: [SizeClass; 4] = [SizeClass::Fast, SizeClass::Small, SizeClass::Large, SizeClass::Huge];

    /// The class of a request of `size` bytes.
    pub fn of(size: u64) -> SizeClass {
        let chunk = (size.saturating_add(8 + 15) & !15).max(32);
        if size >= 128 << 10 {
            SizeClass::Huge
        } else if chunk <= 128 {
            SizeClass::Fast
        } else if chunk < 1024 {
            SizeClass::Small
        } else {
            SizeClass::Large
        }
    }

    /// For people.
    pub fn name(self) -> &'static str {
        match self {
            SizeClass::Fast => "fast (<= 120 B)",
            SizeClass::Small => "small (121 B .. 1000 B)",
            SizeClass::Large => "large (1001 B .. 128 KiB)",
            SizeClass::Huge => "huge (>= 128 KiB)",
        }
    }
}

/// glibc's size class of a request, by name.
pub fn size_class(size: u64) -> &'static str {
    SizeClass::of(size).name()
}

/// What hovering a block of the heap picture says of it, a line each:
/// what allocated it and how large, its addresses, its allocating function
/// and line, its thread and lifetime in events, its size class. One
/// definition for the viewer's tooltip and `linetrace at`.
pub fn describe_block(b: &AllocationRecord, model: &Model, symbols: &Symbolizer) -> Vec<String> {
    let at = symbols.locate(b.callsite);
    let freed = b.free_event.map_or("never freed".to_string(), |f| format!("freed at event {f}"));
    let usable = if b.usable > 0 { format!(" ({} usable)", b.usable) } else { String::new() };
    let by = match b.allocator {
        Some(id) => model.allocator_names.get(&id).map_or("a custom allocator", String::as_str),
        None => b.kind.name(),
    };
    vec![
        format!("{by} of {} bytes{usable}", b.size),
        format!("at {:#x}..{:#x}", b.address, b.end()),
        format!("from {} ({})", at.function, at.file_line()),
        format!("thread {}, allocated at event {}, {freed}", b.thread, b.alloc_event),
        size_class(b.size).to_string(),
    ]
}

/// Address spans merged into regions: spans no more than [`REGION_GAP`]
/// apart are one region. In address order.
pub fn address_regions(spans: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = spans.into_iter().collect();
    spans.sort_unstable();
    let mut regions: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in spans {
        match regions.last_mut() {
            Some(r) if lo <= r.1.saturating_add(REGION_GAP) => r.1 = r.1.max(hi),
            _ => regions.push((lo, hi)),
        }
    }
    regions
}

/// The bytes a block occupies for fragmentation: its usable size when
/// known, else its request.
pub fn extent(r: &AllocationRecord) -> (u64, u64) {
    (r.address, r.address.saturating_add(r.usable.max(r.size).max(1)))
}

/// Analyses the allocations of `model`.
pub fn analyse(model: &Model, symbols: &Symbolizer) -> HeapReport {
    let mut report = analyse_records(&model.allocations, model.total.allocations, symbols);
    report.leak_stacks = leak_stacks(model, symbols);
    report.program_break = program_break(&model.program_breaks, &model.allocations);
    report.custom = custom_allocators(model, symbols);
    report
}

/// The analysis of a part `[from, to)` of a heap picture's time axis (a
/// range selected in the viewer): the blocks *allocated* in it, each
/// counted as freed only if it was freed inside it too, so "at end" is
/// what the part left live and the peak is the most its own blocks held
/// at once. Blocks from before the part are not in it: the question is
/// what this stretch of the run did.
pub fn analyse_window(
    records: &[AllocationRecord],
    events: u64,
    symbols: &Symbolizer,
    axis: &crate::heap_raster::TimeAxis,
    (from, to): (f64, f64),
) -> HeapReport {
    let inside: Vec<AllocationRecord> = records
        .iter()
        .filter(|r| (from..to).contains(&axis.start(r)))
        .map(|r| {
            let mut r = r.clone();
            if axis.end(&r) >= to {
                (r.free_event, r.free_ns, r.free_column) = (None, None, None);
            }
            r
        })
        .collect();
    analyse_records(&inside, events, symbols)
}

/// Most stacks listed among the leaks.
const LEAK_STACKS: usize = 20;

/// Leaked blocks by call stack, most bytes first.
fn leak_stacks(model: &Model, symbols: &Symbolizer) -> Vec<StackRow> {
    let mut by: HashMap<(u64, u32), (u64, u64)> = HashMap::new();
    for r in model.allocations.iter().filter(|r| is_heap_block(r) && r.free_event.is_none()) {
        let Some(stack) = r.stack else { continue };
        let e = by.entry((r.callsite, stack)).or_default();
        e.0 += 1;
        e.1 += r.size;
    }
    let mut rows: Vec<((u64, u32), (u64, u64))> = by.into_iter().collect();
    rows.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(b.1.0.cmp(&a.1.0)).then(a.0.cmp(&b.0)));
    rows.into_iter()
        .take(LEAK_STACKS)
        .map(|((callsite, stack), (blocks, bytes))| {
            let callers = model.alloc_stacks.get(&stack).map(Vec::as_slice).unwrap_or_default();
            let frames = std::iter::once(&callsite)
                .chain(callers)
                .map(|&pc| {
                    let at = symbols.locate(pc);
                    format!("{} ({})", at.function, at.file_line())
                })
                .collect();
            StackRow { frames, blocks, bytes }
        })
        .collect()
}

/// Analyses allocation records of a run of `events` allocation events.
pub fn analyse_records(records: &[AllocationRecord], events: u64, symbols: &Symbolizer) -> HeapReport {
    let heap: Vec<&AllocationRecord> = records.iter().filter(|r| is_heap_block(r)).collect();
    let mut report = HeapReport {
        events,
        blocks: heap.len() as u64,
        bytes: heap.iter().map(|r| r.size).sum(),
        frees: heap.iter().filter(|r| r.free_event.is_some()).count() as u64,
        mappings: records.iter().filter(|r| is_mapping(r)).count() as u64,
        mapped_bytes: records.iter().filter(|r| is_mapping(r)).map(|r| r.size).sum(),
        ..HeapReport::default()
    };
    for r in &heap {
        if r.usable > 0 {
            report.usable_known += 1;
            report.waste += r.usable.saturating_sub(r.size);
        }
    }

    // A realloc's old block is the one freed by the same event.
    let freed_by: HashMap<u64, &AllocationRecord> = heap.iter().filter_map(|r| Some((r.free_event?, *r))).collect();
    let in_place: Vec<bool> = heap
        .iter()
        .map(|r| {
            r.kind == AllocKind::Realloc && freed_by.get(&r.alloc_event).is_some_and(|old| old.address == r.address)
        })
        .collect();
    for (r, &same) in heap.iter().zip(&in_place) {
        if r.kind == AllocKind::Realloc && freed_by.contains_key(&r.alloc_event) {
            if same {
                report.reallocs_in_place += 1;
            } else {
                report.reallocs_moved += 1;
            }
        }
    }

    // Changes in event order: at one event, a moved realloc's new block
    // comes before the old one's free, an in-place one's after.
    #[derive(Clone, Copy)]
    struct Change<'r> {
        event: u64,
        order: u8,
        record: &'r AllocationRecord,
        alloc: bool,
    }
    let mut changes: Vec<Change> = Vec::with_capacity(heap.len() * 2);
    for (r, &same) in heap.iter().zip(&in_place) {
        changes.push(Change { event: r.alloc_event, order: if same { 2 } else { 0 }, record: r, alloc: true });
        if let Some(e) = r.free_event {
            changes.push(Change { event: e, order: 1, record: r, alloc: false });
        }
    }
    changes.sort_by_key(|c| (c.event, c.order));

    let events = report.events.max(1);
    let step = events.div_ceil(TIMELINE_POINTS).max(1);
    let mut live = Live::default();
    let mut blocks: BTreeMap<u64, (u64, u64)> = BTreeMap::new(); // address -> (end, count)
    // The change after which the peak was reached (its blocks are rebuilt
    // at the end: cloning the live set at every new peak is quadratic in a
    // growing heap).
    let mut peak_change: Option<usize> = None;
    let mut next_sample = 0u64;
    let mut i = 0;
    while i < changes.len() {
        let event = changes[i].event;
        while next_sample < event {
            report.timeline.push(sample(&blocks, Live { event: next_sample, ..live }));
            next_sample += step;
        }
        while i < changes.len() && changes[i].event == event {
            let c = changes[i];
            apply(&mut blocks, c.record, c.alloc);
            if c.alloc {
                live.bytes += c.record.size;
                live.blocks += 1;
                if live.bytes > report.peak.bytes {
                    report.peak = Live { event, ..live };
                    peak_change = Some(i);
                }
            } else {
                live.bytes -= c.record.size.min(live.bytes);
                live.blocks = live.blocks.saturating_sub(1);
            }
            i += 1;
        }
    }
    while next_sample < events {
        report.timeline.push(sample(&blocks, Live { event: next_sample, ..live }));
        next_sample += step;
    }
    report.at_end = Live { event: events, ..live };
    if let Some(last) = peak_change {
        // The peak's own point, in place of a sample of the same event.
        let mut at_peak = BTreeMap::new();
        for c in &changes[..=last] {
            apply(&mut at_peak, c.record, c.alloc);
        }
        let s = sample(&at_peak, report.peak);
        report.timeline.retain(|x| x.live.event != report.peak.event);
        let at = report.timeline.partition_point(|x| x.live.event < report.peak.event);
        report.timeline.insert(at, s);
    }

    report.size_classes = size_classes(&heap);
    report.regions = regions(&heap);
    let by = |rows: &[&AllocationRecord]| sites(rows, symbols);
    let mut rows = by(&heap);
    rows.sort_by(|a, b| b.blocks.cmp(&a.blocks).then(b.bytes.cmp(&a.bytes)).then(a.function.cmp(&b.function)));
    report.top_by_count = rows.iter().take(20).cloned().collect();
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.blocks.cmp(&a.blocks)).then(a.function.cmp(&b.function)));
    report.top_by_bytes = rows.into_iter().take(20).collect();
    let leaked: Vec<&AllocationRecord> = heap.iter().copied().filter(|r| r.free_event.is_none()).collect();
    let mut leaks = by(&leaked);
    leaks.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.function.cmp(&b.function)));
    report.leaks = leaks;
    report.bursts = crate::bursts::bursts(records, symbols);
    report
}

/// Adds a block to (or removes it from) a live set: address -> (end,
/// blocks starting there).
fn apply(blocks: &mut BTreeMap<u64, (u64, u64)>, record: &AllocationRecord, alloc: bool) {
    let (lo, hi) = extent(record);
    if alloc {
        let e = blocks.entry(lo).or_insert((hi, 0));
        e.0 = e.0.max(hi);
        e.1 += 1;
    } else if let Some(e) = blocks.get_mut(&lo) {
        e.1 -= 1;
        if e.1 == 0 {
            blocks.remove(&lo);
        }
    }
}

/// The heap at one point: regions and gaps of the live blocks.
fn sample(blocks: &BTreeMap<u64, (u64, u64)>, live: Live) -> HeapSample {
    let mut s = HeapSample { live, ..HeapSample::default() };
    let mut region: Option<(u64, u64)> = None; // (start, end so far)
    for (&lo, &(hi, _)) in blocks {
        match region {
            Some((start, end)) if lo <= end.saturating_add(REGION_GAP) => {
                if lo > end.saturating_add(MIN_GAP) {
                    s.gaps += 1;
                    s.gap_bytes += lo - end;
                    s.largest_gap = s.largest_gap.max(lo - end);
                }
                region = Some((start, end.max(hi)));
            }
            _ => {
                if let Some((start, end)) = region {
                    s.span_bytes += end - start;
                }
                s.regions += 1;
                region = Some((lo, hi));
            }
        }
    }
    if let Some((start, end)) = region {
        s.span_bytes += end - start;
    }
    s
}

fn size_classes(heap: &[&AllocationRecord]) -> Vec<SizeClassRow> {
    let mut rows: Vec<SizeClassRow> = Vec::new();
    for r in heap {
        let class = size_class(r.size);
        let row = match rows.iter().position(|x| x.class == class) {
            Some(i) => &mut rows[i],
            None => {
                rows.push(SizeClassRow { class, ..SizeClassRow::default() });
                rows.last_mut().expect("just pushed")
            }
        };
        row.blocks += 1;
        row.bytes += r.size;
        if r.usable > 0 {
            row.waste += r.usable.saturating_sub(r.size);
        }
    }
    rows.sort_by_key(|r| SizeClass::ALL.iter().position(|c| c.name() == r.class));
    rows
}

/// Regions of every block of the run, and the order they were filled in.
fn regions(heap: &[&AllocationRecord]) -> Vec<RegionRow> {
    let mut rows: Vec<RegionRow> = address_regions(heap.iter().map(|r| extent(r)))
        .into_iter()
        .map(|(start, end)| RegionRow { start, end, ..RegionRow::default() })
        .collect();
    let mut last: Vec<Option<u64>> = vec![None; rows.len()];
    let mut by_event: Vec<&&AllocationRecord> = heap.iter().collect();
    by_event.sort_by_key(|r| r.alloc_event);
    for r in by_event {
        let i = rows.partition_point(|x| x.end <= r.address).min(rows.len().saturating_sub(1));
        let Some(row) = rows.get_mut(i) else { continue };
        row.blocks += 1;
        match last[i] {
            Some(prev) if r.address > prev => row.ascending += 1,
            Some(prev) if r.address < prev => row.descending += 1,
            _ => {}
        }
        last[i] = Some(r.address);
    }
    rows
}

/// Blocks and bytes by allocating function.
pub(crate) fn sites(records: &[&AllocationRecord], symbols: &Symbolizer) -> Vec<SiteRow> {
    let mut rows: HashMap<String, SiteRow> = HashMap::new();
    for r in records {
        let at = symbols.locate(r.callsite);
        let row = rows.entry(at.function.clone()).or_insert_with(|| SiteRow {
            function: at.function.clone(),
            line: at.file_line(),
            ..SiteRow::default()
        });
        row.blocks += 1;
        row.bytes += r.size;
    }
    rows.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: AllocKind, address: u64, size: u64, alloc: u64, free: Option<u64>) -> AllocationRecord {
        AllocationRecord::test_block(kind, address, size, alloc, free)
    }

    /// The break grows twice and is trimmed once; at its peak (event 2,
    /// 0x1000..0x3000) the blocks of events 0 and 2 are live (0x100 +
    /// 0x800 bytes), event 1's was freed at 2, event 3's comes later, and
    /// the mapping is not a heap block.
    #[test]
    fn the_brk_heap_is_measured_at_its_peak() {
        use crate::model::ProgramBreakMove;
        let moves = [
            ProgramBreakMove { event: 0, from: 0x1000, to: 0x2000 },
            ProgramBreakMove { event: 2, from: 0x2000, to: 0x3000 },
            ProgramBreakMove { event: 4, from: 0x3000, to: 0x2800 },
        ];
        let records = [
            block(AllocKind::Malloc, 0x1000, 0x100, 0, None),
            block(AllocKind::Malloc, 0x1100, 0x200, 1, Some(2)),
            block(AllocKind::Malloc, 0x2000, 0x800, 2, Some(4)),
            block(AllocKind::Malloc, 0x2800, 0x100, 3, None),
            block(AllocKind::Mmap, 0x1800, 0x400, 1, None),
        ];
        let r = program_break(&moves, &records).expect("moves");
        assert_eq!((r.start, r.end, r.peak, r.peak_event), (0x1000, 0x2800, 0x3000, 2));
        assert_eq!((r.grows, r.grown_bytes, r.trims, r.trimmed_bytes), (2, 0x2000, 1, 0x800));
        assert_eq!(r.live_at_peak, 0x900);
        assert_eq!(program_break(&[], &records), None);
    }

    fn changes(records: Vec<AllocationRecord>, events: u64) -> HeapReport {
        analyse_records(&records, events, &Symbolizer::new(&[]))
    }

    /// Live bytes after every event, by brute force: the reference the
    /// sweep is checked against.
    fn reference_peak(records: &[AllocationRecord], events: u64) -> Live {
        let mut best = Live::default();
        for e in 0..events {
            for phase in 0..3u8 {
                let live: Vec<&AllocationRecord> = records
                    .iter()
                    .filter(|r| is_heap_block(r))
                    .filter(|r| {
                        let born = r.alloc_event < e
                            || r.alloc_event == e && {
                                let in_place =
                                    records.iter().any(|o| o.free_event == Some(e) && o.address == r.address);
                                phase >= if in_place { 2 } else { 0 }
                            };
                        let dead = r.free_event.is_some_and(|f| f < e || f == e && phase >= 1);
                        born && !dead
                    })
                    .collect();
                let bytes = live.iter().map(|r| r.size).sum();
                if bytes > best.bytes {
                    best = Live { event: e, bytes, blocks: live.len() as u64 };
                }
            }
        }
        best
    }

    /// Events 10..20 selected: the blocks allocated at 12 and 15 are in it
    /// (not those of 5 and 20), 12's free at 14 counts, 15's free at 30 is
    /// past the end, so 15's block is what the part left live.
    #[test]
    fn a_window_counts_the_blocks_allocated_in_it() {
        let records = vec![
            block(AllocKind::Malloc, 0x1000, 100, 5, Some(13)),
            block(AllocKind::Malloc, 0x2000, 200, 12, Some(14)),
            block(AllocKind::Malloc, 0x3000, 300, 15, Some(30)),
            block(AllocKind::Malloc, 0x4000, 400, 20, None),
        ];
        let axis = crate::heap_raster::TimeAxis::new(&records, 40, crate::heap_raster::Clock::Events);
        let w = analyse_window(&records, 40, &Symbolizer::new(&[]), &axis, (10.0, 20.0));
        assert_eq!((w.blocks, w.bytes, w.frees), (2, 500, 1));
        assert_eq!((w.at_end.blocks, w.at_end.bytes), (1, 300));
        assert_eq!((w.peak.bytes, w.peak.event), (300, 15), "200 freed at 14 before 300 came");
        let whole = analyse_window(&records, 40, &Symbolizer::new(&[]), &axis, (0.0, 40.0));
        assert_eq!((whole.blocks, whole.frees, whole.at_end.bytes), (4, 3, 400));
    }

    #[test]
    fn the_peak_counts_a_moved_realloc_twice_for_an_instant() {
        use AllocKind::*;
        // 0 malloc A(100); 1 malloc B(50); 2 realloc A -> C(300) moved; 3 free B;
        // 4 realloc C -> C(400) in place; 5 free C; 6 mmap (not heap).
        let records = vec![
            block(Malloc, 0x1000, 100, 0, Some(2)),
            block(Malloc, 0x2000, 50, 1, Some(3)),
            block(Realloc, 0x3000, 300, 2, Some(4)),
            block(Realloc, 0x3000, 400, 4, Some(5)),
            block(Mmap, 0x7000_0000, 8192, 6, None),
        ];
        let r = changes(records.clone(), 7);
        assert_eq!(r.peak, Live { event: 2, bytes: 450, blocks: 3 }, "A, B and A's moved copy");
        assert_eq!(r.peak, reference_peak(&records, 7));
        assert_eq!((r.reallocs_moved, r.reallocs_in_place), (1, 1));
        assert_eq!((r.blocks, r.bytes, r.frees, r.mappings), (4, 850, 4, 1));
        assert_eq!(r.at_end, Live { event: 7, bytes: 0, blocks: 0 });
        // Moved realloc of the biggest block: old + new for an instant.
        let records = vec![block(Malloc, 0x1000, 100, 0, Some(1)), block(Realloc, 0x9000, 120, 1, None)];
        let r = changes(records.clone(), 2);
        assert_eq!(r.peak, Live { event: 1, bytes: 220, blocks: 2 });
        assert_eq!(r.peak, reference_peak(&records, 2));
    }

    #[test]
    fn gaps_regions_and_order() {
        use AllocKind::*;
        // Three blocks of 64 at 0x1000, 0x1040, 0x1100 (a 0x80 hole), one far away.
        let records = vec![
            block(Malloc, 0x1100, 64, 0, None),
            block(Malloc, 0x1040, 64, 1, None),
            block(Malloc, 0x1000, 64, 2, None),
            block(Malloc, 0x9000_0000, 64, 3, None),
        ];
        let r = changes(records, 4);
        let events: Vec<u64> = r.timeline.iter().map(|s| s.live.event).collect();
        assert!(events.windows(2).all(|w| w[0] < w[1]), "one point per event, in order: {events:?}");
        assert_eq!(r.timeline.iter().filter(|s| s.live == r.peak).count(), 1, "the peak is one point");
        let last = r.timeline.last().expect("samples");
        assert_eq!(last.live.blocks, 4);
        assert_eq!((last.regions, last.gaps, last.gap_bytes, last.largest_gap), (2, 1, 0x80, 0x80));
        assert_eq!(r.regions.len(), 2);
        assert_eq!((r.regions[0].ascending, r.regions[0].descending), (0, 2), "filled high to low");
        assert_eq!(r.leaks.iter().map(|l| l.blocks).sum::<u64>(), 4);
    }

    #[test]
    fn size_classes_follow_glibc() {
        assert_eq!(size_class(1), "fast (<= 120 B)");
        assert_eq!(size_class(120), "fast (<= 120 B)");
        assert_eq!(size_class(121), "small (121 B .. 1000 B)");
        assert_eq!(size_class(1000), "small (121 B .. 1000 B)", "a 1008-byte chunk");
        assert_eq!(size_class(1001), "large (1001 B .. 128 KiB)", "a 1024-byte chunk");
        assert_eq!(size_class(128 << 10), "huge (>= 128 KiB)");
    }
}

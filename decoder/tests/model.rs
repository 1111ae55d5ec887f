//! Decoder tests on synthetic traces written with the trace-rt writer.

use decoder::model::{DecodeOptions, Model};
use decoder::raster::{BitmapView, ColourBy, Palette, cell_colour, rasterize_bitmap, rasterize_exact};
use decoder::working_set::WorkingSetConfig;
use trace_rt::format::{AccessKind, AllocKind, Allocation, Event, Implied, Metadata, Site, TraceWriter, Trailer};

/// Writes a trace of `reads` (address, size) as 64-byte-site reads of one
/// invocation, with small chunks; returns its path.
fn write_trace(reads: &[(u64, u32)], finish: bool, chunk: usize) -> tempfile::TempPath {
    let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let file = std::fs::File::create(&path).expect("create");
    let mut w = TraceWriter::new(file, &Metadata::new("test")).expect("header");
    w.set_chunk_target(chunk);
    let mut sites = std::collections::HashMap::new();
    w.push(1, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x8000 }).expect("push");
    for &(addr, size) in reads {
        let site = *sites.entry(size).or_insert_with(|| {
            w.add_site(Site {
                pc: 0x1000 + u64::from(size),
                len: 4,
                kind: AccessKind::Read,
                size,
                count: 1,
                implied: Implied::NONE,
            })
        });
        w.push(1, &Event::Access { site, addr }).expect("push");
    }
    if finish {
        w.finish(&Trailer::default()).expect("finish");
    } else {
        // The recorder died: whatever was flushed stays, no end chunk.
        w.flush().expect("flush");
        drop(w);
    }
    path
}

/// `n` reads of `stride` bytes at random multiples of `stride` below
/// `places * stride`, from a seeded generator.
fn random_reads(seed: u64, n: usize, places: u64, stride: u32) -> Vec<(u64, u32)> {
    let mut seed = seed;
    (0..n)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (((seed >> 33) % places) * u64::from(stride), stride)
        })
        .collect()
}

fn options(max_age: u32, max_rows: u32, snapshot_every: u64) -> DecodeOptions {
    DecodeOptions {
        working_set: WorkingSetConfig { line_size: 64, max_age, max_rows },
        snapshot_every,
        ..Default::default()
    }
}

fn to8(c: [f64; 3]) -> [u8; 4] {
    let q = |v: f64| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    [q(c[0]), q(c[1]), q(c[2]), 255]
}

#[test]
fn pixels_of_a_three_column_trace() {
    // Line 0, line 1, line 0 again, 64 bytes each.
    let path = write_trace(&[(0, 64), (64, 64), (0, 64)], true, 1 << 20);
    let model = Model::decode(&path, &options(4, 4, 1), &mut |_| {}).expect("decode");
    assert_eq!(model.columns, 3);
    let p = Palette::default();
    let view = BitmapView {
        columns: (0.0, 3.0),
        rows: (0.0, 2.0),
        width: 3,
        height: 2,
        alpha: 1.0,
        colour_by: ColourBy::BytesRead,
    };
    let img = rasterize_bitmap(&model, &view, &p).expect("raster");
    let green = p.used;
    let bg = p.background;
    // Hand-computed: column 1 ages line 0 to 3/4 when line 1 is inserted.
    let aged = [bg[0] * 0.25 + green[0] * 0.75, bg[1] * 0.25 + green[1] * 0.75, bg[2] * 0.25 + green[2] * 0.75];
    assert_eq!(img.pixel(0, 0), to8(green));
    assert_eq!(img.pixel(0, 1), to8(bg));
    assert_eq!(img.pixel(1, 0), to8(aged));
    assert_eq!(img.pixel(1, 1), to8(green));
    assert_eq!(img.pixel(2, 0), to8(green));
    assert_eq!(img.pixel(2, 1), to8(green));

    // All six cells in one pixel, alpha 1: each cell covers 1/6; five are
    // present, one is background: C = (g + aged + g + g + g + bg) / 6.
    let view = BitmapView {
        columns: (0.0, 3.0),
        rows: (0.0, 2.0),
        width: 1,
        height: 1,
        alpha: 1.0,
        colour_by: ColourBy::BytesRead,
    };
    let img = rasterize_bitmap(&model, &view, &p).expect("raster");
    let mean = |k: usize| (4.0 * green[k] + aged[k] + bg[k]) / 6.0;
    assert_eq!(img.pixel(0, 0), to8([mean(0), mean(1), mean(2)]));

    // alpha 2: weights f^2 = 1/36 each, B = (1/6)^2:
    // C = (sum of 5 colours / 36 + bg / 36) / (6 / 36), the same mean here
    // because every cell covers the same fraction.
    let view = BitmapView { alpha: 2.0, ..view };
    let img2 = rasterize_bitmap(&model, &view, &p).expect("raster");
    assert_eq!(img2.pixel(0, 0), img.pixel(0, 0));
}

#[test]
fn colours_go_from_purple_to_green_and_fade_with_age() {
    let p = Palette::default();
    let close = |a: [f64; 3], b: [f64; 3]| a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-9);
    assert!(close(cell_colour(&p, 0, 64, 512, 512), p.unused));
    assert!(close(cell_colour(&p, 64, 64, 512, 512), p.used));
    assert!(close(cell_colour(&p, 640, 64, 512, 512), p.used), "more than a line's worth stays green");
    let half = cell_colour(&p, 32, 64, 512, 512);
    assert!(close(half, [0, 1, 2].map(|k| (p.unused[k] + p.used[k]) / 2.0)));
    assert!(close(cell_colour(&p, 64, 64, 0, 512), p.background), "age 0 is gone");
    let faded = cell_colour(&p, 64, 64, 128, 512);
    assert!(close(faded, [0, 1, 2].map(|k| p.background[k] * 0.75 + p.used[k] * 0.25)));
}

#[test]
fn a_single_access_stays_visible_with_alpha_below_one() {
    let path = write_trace(&[(4096, 8)], true, 1 << 20);
    let model = Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let p = Palette::default();
    // One column among 100,000, one row among 100, all in one pixel.
    let view = |alpha| BitmapView {
        columns: (0.0, 100_000.0),
        rows: (0.0, 100.0),
        width: 1,
        height: 1,
        alpha,
        colour_by: ColourBy::BytesRead,
    };
    let bg = to8(p.background);
    let dull = rasterize_bitmap(&model, &view(1.0), &p).expect("raster").pixel(0, 0);
    let lifted = rasterize_bitmap(&model, &view(0.1), &p).expect("raster").pixel(0, 0);
    assert!(dull.iter().zip(&bg).all(|(a, b)| a.abs_diff(*b) <= 1), "alpha 1 averages it away: {dull:?}");
    let diff: u32 = lifted.iter().zip(&bg).map(|(a, b)| u32::from(a.abs_diff(*b))).sum();
    assert!(diff >= 30, "alpha 0.1 keeps it visible: {lifted:?} vs {bg:?}");
}

#[test]
fn replay_from_any_snapshot_matches_a_straight_run() {
    let reads = random_reads(1, 5000, 300, 16);
    let path = write_trace(&reads, true, 256);
    let coarse = Model::decode(&path, &options(32, 32, u64::MAX), &mut |_| {}).expect("decode");
    let fine = Model::decode(&path, &options(32, 32, 10), &mut |_| {}).expect("decode");
    assert_eq!(coarse.working_set.snapshots.len(), 1);
    assert!(fine.working_set.snapshots.len() > 20, "{}", fine.working_set.snapshots.len());
    for (from, to) in [(0, 50), (1234, 1300), (4990, 5000), (2500, 2501)] {
        let mut a = Vec::new();
        let mut b = Vec::new();
        coarse.replay(from, to, |c, s, _| a.push((c, s.lines().to_vec()))).expect("replay");
        fine.replay(from, to, |c, s, _| b.push((c, s.lines().to_vec()))).expect("replay");
        assert_eq!(a.len() as u64, to - from);
        let first_difference = a.iter().zip(&b).position(|(x, y)| x != y);
        assert_eq!(first_difference, None, "columns {from}..{to}");
    }
}

/// A working set that may hold many lines keeps fewer snapshots, so their
/// memory stays bounded ([`decoder::model::max_snapshots`]): 65,536 rows
/// (the viewer's largest max age) keep 146 where 512 rows keep 1,024, and
/// the columns between them still replay to the straight run's sets.
#[test]
fn a_large_working_set_keeps_fewer_snapshots() {
    use decoder::model::{MAX_SNAPSHOTS, SNAPSHOT_BYTES, max_snapshots};
    let large = options(65_536, 65_536, 4);
    let kept = max_snapshots(&large.working_set);
    assert!(kept < MAX_SNAPSHOTS / 4, "{kept}");
    let per_snapshot = 65_536 * std::mem::size_of::<decoder::working_set::LineState>();
    assert!(kept * per_snapshot <= SNAPSHOT_BYTES, "{kept} snapshots of {per_snapshot} bytes");
    assert_eq!(max_snapshots(&options(512, 512, 4).working_set), MAX_SNAPSHOTS, "the default keeps all");
    assert_eq!(max_snapshots(&options(65_536, 512, 4).working_set), MAX_SNAPSHOTS, "rows cap the set");

    let reads: Vec<(u64, u32)> = random_reads(7, 20_000, 3000, 64).into_iter().map(|(a, _)| (a, 8)).collect();
    let path = write_trace(&reads, true, 256);
    let model = Model::decode(&path, &large, &mut |_| {}).expect("decode");
    let snapshots = model.working_set.snapshots.len();
    assert!(snapshots <= kept && snapshots > kept / 4, "{snapshots} snapshots, at most {kept}");
    let straight = Model::decode(&path, &options(65_536, 65_536, u64::MAX), &mut |_| {}).expect("decode");
    for (from, to) in [(0, 40), (7_777, 7_800), (19_990, 20_000)] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        straight.replay(from, to, |c, s, _| a.push((c, s.lines().to_vec()))).expect("replay");
        model.replay(from, to, |c, s, _| b.push((c, s.lines().to_vec()))).expect("replay");
        assert_eq!(a.len() as u64, to - from);
        assert!(a == b, "columns {from}..{to}");
    }
}

#[test]
fn a_truncated_trace_decodes_and_says_so() {
    let reads: Vec<(u64, u32)> = (0..1000).map(|i| (i * 8, 8)).collect();
    let path = write_trace(&reads, false, 512);
    let len = std::fs::metadata(&path).expect("meta").len();
    // Cut the file in the middle of a chunk, as a crash would.
    let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open");
    file.set_len(len - 7).expect("truncate");
    let model = Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    assert!(model.end.is_truncated());
    assert!(model.columns > 0 && model.columns < 1000, "{}", model.columns);
    assert_eq!(model.call_tree.frames.len(), 1);
    assert!(model.call_tree.frames[0].unfinished);
    assert_eq!(model.call_tree.frames[0].end_column, model.columns);
}

/// Distinct lines are counted per thread (a line two threads touch counts
/// for both, once in the total), writes included.
#[test]
fn distinct_lines_per_thread() {
    let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let mut w = TraceWriter::new(std::fs::File::create(&path).expect("create"), &Metadata::new("t")).expect("header");
    w.set_chunk_target(64);
    let read = w.add_site(Site { pc: 0x10, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    let write =
        w.add_site(Site { pc: 0x20, len: 4, kind: AccessKind::Write, size: 8, count: 1, implied: Implied::NONE });
    w.push(1, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x8000 }).expect("push");
    // Thread 1: lines 0 and 1, several times; thread 2: lines 1, 2, 3 and
    // a write of line 4; the threads' chunks interleave.
    for round in 0..20u64 {
        w.push(1, &Event::Access { site: read, addr: (round % 2) * 64 }).expect("push");
        w.push(2, &Event::Access { site: read, addr: 64 + (round % 3) * 64 }).expect("push");
    }
    w.push(2, &Event::Access { site: write, addr: 4 * 64 }).expect("push");
    w.finish(&Trailer::default()).expect("finish");
    let model = Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let lines: Vec<(u32, u64)> = model.threads.iter().map(|(&tid, t)| (tid, t.unique_lines)).collect();
    assert_eq!(lines, [(1, 2), (2, 4)]);
    assert_eq!(model.total.unique_lines, 5);
    assert_eq!(model.total.reads, 40);
}

#[test]
fn metrics_of_a_strided_sweep() {
    // 4 reads of 16 bytes per line over 8 lines, then the same again.
    let mut reads: Vec<(u64, u32)> = (0..32).map(|i| (i * 16, 16)).collect();
    reads.extend((0..32).map(|i| (i * 16, 16)));
    let path = write_trace(&reads, true, 1 << 20);
    let model = Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let m = &model.metrics;
    assert_eq!(model.total.reads, 64);
    assert_eq!(model.total.unique_lines, 8);
    assert_eq!(m.line_fetches, 8);
    assert_eq!(m.mean_bytes_read_per_fetch, 128.0);
    assert_eq!(m.mean_distinct_bytes_per_fetch, 64.0);
    assert_eq!(m.utilisation, 1.0);
    // Reuse: 8 cold; within a line distance 0 (3 per line per pass, and 4
    // in the second pass); second-pass first touches have distance 7.
    assert_eq!(m.reuse.cold, 8);
    assert_eq!(m.reuse.buckets[0], 8 * 3 + 8 * 3);
    assert_eq!(m.reuse.buckets[3], 8, "distance 7 is in [4, 8)");
}

/// An allocation event (callsite 0x20).
fn alloc(kind: AllocKind, size: u64, ptr_in: u64, ptr_out: u64) -> Step {
    Step::Event(Event::Alloc(Allocation { kind, size, align: 0, ptr_in, ptr_out, callsite: 0x20 }))
}

/// One step of [`decode_allocations_and_reads`]'s trace.
enum Step {
    /// An event as it is (allocations).
    Event(Event),
    /// A read of 8 bytes at this address.
    Read(u64),
}

/// Decodes a trace of thread 1's `steps`.
fn decode_allocations_and_reads(steps: &[Step]) -> Model {
    let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let file = std::fs::File::create(&path).expect("create");
    let mut w = TraceWriter::new(file, &Metadata::new("test")).expect("header");
    let site = w.add_site(Site { pc: 0x10, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    for step in steps {
        let event = match *step {
            Step::Event(e) => e,
            Step::Read(addr) => Event::Access { site, addr },
        };
        w.push(1, &event).expect("push");
    }
    w.finish(&Trailer::default()).expect("finish");
    Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).expect("decode")
}

/// The tint of each row of the summary's first block, top row first.
fn first_block_tints(model: &Model) -> Vec<u8> {
    model.pyramid.levels[0].block(0).iter().map(|cell| cell.tint).collect()
}

#[test]
fn reads_fall_into_allocations() {
    let model = decode_allocations_and_reads(&[
        alloc(AllocKind::Malloc, 100, 0, 0x5000),
        Step::Read(0x5000),
        Step::Read(0x5060),
        Step::Read(0x5064), // past the block
        alloc(AllocKind::Realloc, 200, 0x5000, 0x6000),
        Step::Read(0x5000), // freed
        Step::Read(0x6010),
        alloc(AllocKind::Free, 0, 0x6000, 0),
        alloc(AllocKind::Free, 0, 0x9999, 0),
        Step::Read(0x9000), // in no block
    ]);
    let blocks: Vec<(u64, u64, u64, Option<u64>, u64)> =
        model.allocations.iter().map(|a| (a.address, a.size, a.alloc_column, a.free_column, a.reads)).collect();
    assert_eq!(blocks, vec![(0x5000, 100, 0, Some(3), 2), (0x6000, 200, 3, Some(5), 1)]);
    assert_eq!(model.metrics.foreign_frees, 1);
    // The summary tints the rows of lines that overlapped a live block when
    // they entered the set (the allocation overlay): lines 0x5000, 0x5040
    // (the block's last 36 bytes) and 0x6000, not line 0x9000.
    assert_eq!(first_block_tints(&model), vec![255, 255, 255, 0]);
}

/// Reads that alternate between blocks (a table of pointers and the blocks
/// it points to) count in the block each falls in, and a block freed while
/// the pass still remembers it as a recent one is not found again: its
/// address now belongs to the block allocated there, and the bytes past
/// that block's end to none.
#[test]
fn reads_alternating_between_blocks_count_in_each_and_never_in_a_freed_one() {
    let model = decode_allocations_and_reads(&[
        alloc(AllocKind::Malloc, 0x100, 0, 0x1000), // the table
        alloc(AllocKind::Malloc, 0x40, 0, 0x2000),
        alloc(AllocKind::Malloc, 0x40, 0, 0x3000),
        Step::Read(0x1000),
        Step::Read(0x2008),
        Step::Read(0x1008),
        Step::Read(0x3010),
        Step::Read(0x1010),
        Step::Read(0x2000),
        Step::Read(0x1018),
        alloc(AllocKind::Free, 0, 0x2000, 0),
        alloc(AllocKind::Malloc, 0x10, 0, 0x2000),
        Step::Read(0x2000),
        Step::Read(0x2020), // inside the freed block, past the new one
        Step::Read(0x1020),
        Step::Read(0x3000),
    ]);
    let reads: Vec<(u64, u64, u64)> = model.allocations.iter().map(|a| (a.address, a.size, a.reads)).collect();
    assert_eq!(reads, vec![(0x1000, 0x100, 5), (0x2000, 0x40, 2), (0x3000, 0x40, 2), (0x2000, 0x10, 1)]);
}

/// A block inside another (a heap block in a mapping of the program's own)
/// takes the reads that fall in it, whatever was read before: here the
/// mapping's bytes before the block first, which a pass remembering the
/// blocks it found last would also find holding the block's bytes. With
/// the block made first, then the mapping, and the other way round.
#[test]
fn a_block_inside_another_takes_its_reads_whatever_was_read_before() {
    let model = decode_allocations_and_reads(&[
        alloc(AllocKind::Mmap, 0x10000, 0, 0x10000),
        alloc(AllocKind::Malloc, 0x40, 0, 0x11000),
        Step::Read(0x10010),
        Step::Read(0x11008),
        Step::Read(0x10020),
        Step::Read(0x11010),
    ]);
    assert_eq!(reads_by_block(&model), vec![(0x10000, 2), (0x11000, 2)]);
    // The same with the mapping made around the block.
    let model = decode_allocations_and_reads(&[
        alloc(AllocKind::Malloc, 0x40, 0, 0x31000),
        alloc(AllocKind::Mmap, 0x10000, 0, 0x30000),
        Step::Read(0x30010),
        Step::Read(0x31008),
    ]);
    assert_eq!(reads_by_block(&model), vec![(0x31000, 1), (0x30000, 1)]);
}

/// (address, reads) of each allocation record, in order.
fn reads_by_block(model: &Model) -> Vec<(u64, u64)> {
    model.allocations.iter().map(|a| (a.address, a.reads)).collect()
}

/// A read inside a block that crosses into the next line tints that line
/// only if a live block overlaps it: that the read's address is inside a
/// block (which the decoding pass already knows for the line it is in)
/// says nothing of the line after. Block [0x7000, 0x7040) ends where the
/// read at 0x703c crosses into line 0x7040; block [0x80c0, 0x8100) is
/// followed by block [0x8100, 0x8110), which line 0x8100 overlaps.
#[test]
fn a_read_crossing_out_of_its_block_tints_the_next_line_only_if_a_block_overlaps_it() {
    let model = decode_allocations_and_reads(&[
        alloc(AllocKind::Malloc, 0x40, 0, 0x7000),
        alloc(AllocKind::Malloc, 0x40, 0, 0x80c0),
        alloc(AllocKind::Malloc, 0x10, 0, 0x8100),
        Step::Read(0x703c),
        Step::Read(0x80fc),
    ]);
    // Rows in address order: lines 0x7000, 0x7040, 0x80c0, 0x8100.
    assert_eq!(first_block_tints(&model), vec![255, 0, 255, 255]);
}

/// The plain per-cell algorithm: every column, every row in view. The fast
/// rasteriser must give the same pixels.
fn reference_bitmap(model: &Model, view: &BitmapView, p: &Palette) -> Vec<u8> {
    let (w, h) = (view.width as usize, view.height as usize);
    let (a, b) = view.columns;
    let (r0, r1) = view.rows;
    let (cw, rh) = ((b - a) / w as f64, (r1 - r0) / h as f64);
    let config = model.working_set.config;
    let mut acc = vec![decoder::raster::Coverage::default(); w * h];
    let overlap = |lo: f64, hi: f64, p: f64| (hi.min(p + 1.0) - lo.max(p)).max(0.0);
    model
        .replay(a.floor() as u64, b.ceil() as u64, |column, set, _| {
            let (x0, x1) = ((column as f64 - a) / cw, (column as f64 + 1.0 - a) / cw);
            for (row, line) in set.lines().iter().enumerate() {
                if (row as f64) < r0.floor() || (row as f64) >= r1.ceil() {
                    continue;
                }
                let mut colour = cell_colour(p, line.bytes_read, 64, set.age(line), config.max_age);
                let in_block = model.allocations.iter().any(|r| {
                    line.line >= r.address / 64
                        && line.line <= (r.address + r.size - 1) / 64
                        && column >= r.alloc_column
                        && column < r.free_column.unwrap_or(u64::MAX)
                });
                if in_block {
                    colour = [0, 1, 2]
                        .map(|k| colour[k] * (1.0 - p.allocation_strength) + p.allocation[k] * p.allocation_strength);
                }
                let (y0, y1) = ((row as f64 - r0) / rh, (row as f64 + 1.0 - r0) / rh);
                for px in (x0.floor().max(0.0) as usize)..(x1.ceil().max(0.0) as usize).min(w) {
                    for py in (y0.floor().max(0.0) as usize)..(y1.ceil().max(0.0) as usize).min(h) {
                        let f = overlap(x0, x1, px as f64) * overlap(y0, y1, py as f64);
                        acc[py * w + px].add(f, colour, view.alpha);
                    }
                }
            }
        })
        .expect("replay");
    acc.iter().flat_map(|c| to8(c.resolve(p.background, view.alpha))).collect()
}

#[test]
fn fast_rasteriser_equals_the_per_cell_reference() {
    let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let file = std::fs::File::create(&path).expect("create");
    let mut w = TraceWriter::new(file, &Metadata::new("test")).expect("header");
    w.set_chunk_target(300);
    let small =
        w.add_site(Site { pc: 0x10, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    let wide =
        w.add_site(Site { pc: 0x20, len: 4, kind: AccessKind::Read, size: 40, count: 1, implied: Implied::NONE });
    let alloc = |kind, size, ptr_in, ptr_out| {
        Event::Alloc(Allocation { kind, size, align: 0, ptr_in, ptr_out, callsite: 0x30 })
    };
    let mut seed = 3u64;
    for i in 0..3000u64 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if i == 500 {
            w.push(1, &alloc(AllocKind::Malloc, 2000, 0, 0x10000)).expect("push");
        }
        if i == 2200 {
            w.push(1, &alloc(AllocKind::Free, 0, 0x10000, 0)).expect("push");
        }
        // Mostly a sweep with repeats (hits), some scattered reads (misses),
        // some reads straddling lines.
        let (site, addr) = match seed >> 61 {
            0 => (small, 0x10000 + ((seed >> 20) % 4000)),
            1 => (wide, 0x10000 + ((seed >> 20) % 4000)),
            _ => (small, 0x10000 + (i / 3) * 8 % 6000),
        };
        w.push(1, &Event::Access { site, addr }).expect("push");
    }
    w.finish(&Trailer::default()).expect("finish");
    let model = Model::decode(&path, &options(40, 40, 100), &mut |_| {}).expect("decode");
    let p = Palette::default();
    let views = [
        BitmapView {
            columns: (0.0, 3000.0),
            rows: (0.0, 40.0),
            width: 97,
            height: 23,
            alpha: 1.0,
            colour_by: ColourBy::BytesRead,
        },
        BitmapView {
            columns: (0.0, 3000.0),
            rows: (0.0, 40.0),
            width: 64,
            height: 40,
            alpha: 0.3,
            colour_by: ColourBy::BytesRead,
        },
        BitmapView {
            columns: (1234.5, 1301.25),
            rows: (3.5, 30.0),
            width: 200,
            height: 50,
            alpha: 1.0,
            colour_by: ColourBy::BytesRead,
        },
        BitmapView {
            columns: (100.0, 2900.0),
            rows: (0.0, 40.0),
            width: 13,
            height: 7,
            alpha: 2.0,
            colour_by: ColourBy::BytesRead,
        },
    ];
    // And views at random: pixel edges anywhere in a column, from a
    // twentieth of a column a pixel to the most drawn exactly (each pixel
    // column is finished as the replay passes it), narrow and wide (drawn
    // in two halves), some past the last column.
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let random = (0..24).map(|_| {
        let width = 1 + (next() * 400.0) as u32;
        let per_pixel = 0.05 + next() * (decoder::raster::EXACT_COLUMNS_PER_PIXEL - 0.05);
        let wide = per_pixel * f64::from(width);
        // Some reach past the trace's end (3000 columns).
        let start = next() * (3000.0 - wide / 2.0).max(0.0);
        let top = next() * 20.0;
        BitmapView {
            columns: (start, start + wide),
            rows: (top, top + 1.0 + next() * 30.0),
            width,
            height: 1 + (next() * 60.0) as u32,
            alpha: [0.4, 1.0, 1.7][(next() * 3.0) as usize],
            colour_by: ColourBy::BytesRead,
        }
    });
    let views: Vec<BitmapView> = views.into_iter().chain(random.collect::<Vec<_>>()).collect();
    for view in views {
        let fast = rasterize_exact(&model, &view, &p, &mut |_, _| true).expect("raster");
        let want = reference_bitmap(&model, &view, &p);
        let worst = fast.rgba.iter().zip(&want).map(|(x, y)| x.abs_diff(*y)).max().unwrap_or(0);
        assert!(worst <= 1, "{view:?}: pixels differ by up to {worst}");
        assert!(fast.rgba.chunks(4).any(|px| px[..3] != to8(p.background)[..3]), "{view:?} drew something");
    }
}

/// Colouring by cache misses: a cell takes the miss colour of the read
/// that last touched its line (LL miss, D1 miss, hit), at full strength
/// when just touched. A direct-mapped D1 of two lines makes the D1 miss.
#[test]
fn cells_show_whether_their_last_read_missed() {
    use decoder::cache::{CacheConfig, CacheGeometry};
    use decoder::raster::{MISS_COLOURS, category_colour};
    // Lines 0, 2 (same D1 set: evicts 0), 0 again (D1 miss, LL hit),
    // 0 again (hit).
    let path = write_trace(&[(0, 8), (128, 8), (0, 8), (0, 8)], true, 1 << 20);
    let mut opts = options(8, 8, 1);
    opts.cache = CacheConfig {
        d1: CacheGeometry { size: 128, ways: 1, line_size: 64 },
        ll: CacheGeometry { size: 4096, ways: 4, line_size: 64 },
    };
    let model = Model::decode(&path, &opts, &mut |_| {}).expect("decode");
    assert_eq!(model.cache.misses.d1_read, 3);
    assert_eq!(model.cache.misses.ll_read, 2);
    let flags: Vec<(bool, bool)> = (0..4).map(|c| model.cache.columns.get(c)).collect();
    assert_eq!(flags, [(true, true), (true, true), (true, false), (false, false)]);
    let p = Palette::default();
    let view = BitmapView {
        columns: (0.0, 4.0),
        rows: (0.0, 2.0),
        width: 4,
        height: 2,
        alpha: 1.0,
        colour_by: ColourBy::CacheMisses,
    };
    let img = rasterize_bitmap(&model, &view, &p).expect("raster");
    let fresh = |c: [f64; 3]| to8(category_colour(&p, Some(c), 1.0));
    assert_eq!(img.pixel(0, 0), fresh(MISS_COLOURS[0]), "line 0 first read: LL miss");
    assert_eq!(img.pixel(1, 1), fresh(MISS_COLOURS[0]), "line 2: LL miss");
    assert_eq!(img.pixel(2, 0), fresh(MISS_COLOURS[1]), "line 0 again: D1 miss");
    assert_eq!(img.pixel(3, 0), fresh(MISS_COLOURS[2]), "line 0 once more: hit");
}

/// Two threads' reads written interleaved (small chunks, as threads traced
/// at once write them), thread 1 in one region and thread 2 in another,
/// with a block thread 2 allocated that thread 1 reads.
fn write_two_threads(path: &std::path::Path, only_thread_1: bool) -> usize {
    let file = std::fs::File::create(path).expect("create");
    let mut w = TraceWriter::new(file, &Metadata::new("test")).expect("header");
    w.set_chunk_target(256);
    let site = w.add_site(Site { pc: 0x10, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    if !only_thread_1 {
        let malloc =
            Allocation { kind: AllocKind::Malloc, size: 4096, align: 0, ptr_in: 0, ptr_out: 0x10000, callsite: 0x20 };
        w.push(2, &Event::Alloc(malloc)).expect("push");
        // In the file before thread 1's first chunk.
        w.flush().expect("flush");
    }
    let mut seed = 7u64;
    let mut reads_1 = 0;
    for i in 0..6000u64 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let offset = ((seed >> 33) % 512) * 8;
        if i % 3 != 2 {
            reads_1 += 1;
            w.push(1, &Event::Access { site, addr: 0x10000 + offset }).expect("push");
        } else if !only_thread_1 {
            w.push(2, &Event::Access { site, addr: 0x90000 + offset * 4 }).expect("push");
        }
    }
    w.finish(&Trailer::default()).expect("finish");
    reads_1
}

#[test]
fn one_threads_timeline_is_that_thread_alone_and_replays_the_same() {
    use decoder::timeline::ThreadChoice;
    let both = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let alone = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let reads_1 = write_two_threads(&both, false);
    assert_eq!(write_two_threads(&alone, true), reads_1);
    let with = |thread| DecodeOptions { thread, ..options(32, 32, 10) };
    let all = Model::decode(&both, &with(ThreadChoice::All), &mut |_| {}).expect("decode");
    assert_eq!((all.columns, all.timeline), (6000, None));
    let busiest = Model::decode(&both, &with(ThreadChoice::Busiest), &mut |_| {}).expect("decode");
    let reference = Model::decode(&alone, &with(ThreadChoice::All), &mut |_| {}).expect("decode");
    assert_eq!((busiest.columns, busiest.timeline), (reads_1 as u64, Some(1)));
    let census = busiest.census.as_ref().expect("a census");
    assert_eq!((census[&1].reads, census[&2].reads), (reads_1 as u64, 6000 - reads_1 as u64));
    assert!(busiest.working_set.snapshots.len() > 20, "replays start mid-trace");
    // The same columns and working sets as a trace of thread 1 alone, from
    // any snapshot: the cursor skips thread 2 as the decoding pass did.
    for (from, to) in [(0, 50), (1234, 1300), (3990, 4000), (2500, 2501)] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        busiest.replay(from, to, |c, s, _| a.push((c, s.lines().to_vec()))).expect("replay");
        reference.replay(from, to, |c, s, _| b.push((c, s.lines().to_vec()))).expect("replay");
        assert_eq!(a.len() as u64, to - from);
        assert_eq!(a.iter().zip(&b).position(|(x, y)| x != y), None, "columns {from}..{to}");
    }
    assert_eq!(busiest.metrics.line_fetches, reference.metrics.line_fetches);
    // Thread 2's block holds thread 1's reads.
    assert_eq!(busiest.allocations.len(), 1);
    assert_eq!(busiest.allocations[0].reads, reads_1 as u64);
    let only_2 = Model::decode(&both, &with(ThreadChoice::Only(2)), &mut |_| {}).expect("decode");
    assert_eq!((only_2.columns, only_2.allocations[0].reads), (6000 - reads_1 as u64, 0));
    let missing = Model::decode(&both, &with(ThreadChoice::Only(3)), &mut |_| {}).err().expect("an error");
    assert_eq!(missing.to_string(), "thread 3 is not in this trace (threads with events: 1, 2)");
}

/// The anti-aliasing weight is `powf` exactly, its shortcuts included.
#[test]
fn importance_is_powf() {
    for alpha in [0.05, 0.5, 0.6, 1.0, 1.5, 2.0] {
        for f in [0.0, 1e-300, 1e-9, 0.001, 0.25, 0.5, 0.999_999, 1.0] {
            let got = decoder::raster::importance(f, alpha);
            assert_eq!(got.to_bits(), f64::powf(f, alpha).to_bits(), "{f}^{alpha}");
        }
    }
}

/// Accesses of 64 KiB and more (a string instruction's range) reach the
/// working set and the cache simulation whole: the decoding pass hands
/// sizes on in 16 bits, and a larger one in an operation of its own. Reads
/// just below, at and above that limit, and a write above it, each at its
/// own line-aligned place: every line they cover is a first touch.
#[test]
fn accesses_of_64_kib_and_more_reach_every_stage_whole() {
    let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let file = std::fs::File::create(&path).expect("create");
    let mut w = TraceWriter::new(file, &Metadata::new("test")).expect("header");
    let site = |w: &mut TraceWriter<std::fs::File>, pc, kind| {
        w.add_site(Site { pc, len: 4, kind, size: 8, count: 1, implied: Implied::NONE })
    };
    let (read, write) = (site(&mut w, 0x1000, AccessKind::Read), site(&mut w, 0x1004, AccessKind::Write));
    w.push(1, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x8000 }).expect("push");
    let reads = [65_534u64, 65_535, 65_536, 100_000];
    for (i, &size) in reads.iter().enumerate() {
        w.push(1, &Event::AccessSized { site: read, addr: 0x10_0000 * (i as u64 + 1), size }).expect("push");
    }
    w.push(1, &Event::AccessSized { site: write, addr: 0x80_0000, size: 70_000 }).expect("push");
    w.finish(&Trailer::default()).expect("finish");
    let model = Model::decode(&path, &options(8192, 8192, 1 << 20), &mut |_| {}).expect("decode");
    let lines = |size: u64| size.div_ceil(64);
    let read_lines: u64 = reads.iter().map(|&s| lines(s)).sum();
    assert_eq!(read_lines, 1024 * 3 + 1563);
    assert_eq!(model.metrics.line_fetches, read_lines, "the working set took in every line read");
    assert_eq!(model.cache.misses.d1_read, read_lines, "each line of a long read is a miss");
    assert_eq!(model.cache.misses.d1_write, lines(70_000), "and of the long write");
    assert_eq!(model.metrics.reuse.cold, read_lines, "the reuse distances saw each line read");
    assert_eq!(model.total.unique_lines, read_lines + lines(70_000), "and each line written");
}

/// The stats panel's whole-trace figures come from what decoding counted
/// (`RangeStats::whole_trace`), a selected range's from a replay
/// (`range_stats`): a range of the whole trace must show the same figures,
/// or selecting everything would change them. Reads, writes and
/// read-modify-writes of one and two lines, in a working set small enough
/// that lines leave, over many snapshots.
#[test]
fn a_range_of_the_whole_trace_shows_the_whole_traces_figures() {
    use decoder::range::{RangeStats, range_stats};
    use decoder::symbols::Symbolizer;
    let path = tempfile::NamedTempFile::new().expect("temp file").into_temp_path();
    let mut w = TraceWriter::new(std::fs::File::create(&path).expect("create"), &Metadata::new("t")).expect("header");
    w.set_chunk_target(512);
    let site = |w: &mut TraceWriter<std::fs::File>, pc, kind, size| {
        w.add_site(Site { pc, len: 4, kind, size, count: 1, implied: Implied::NONE })
    };
    let read = site(&mut w, 0x10, AccessKind::Read, 8);
    let wide = site(&mut w, 0x14, AccessKind::Read, 16);
    let write = site(&mut w, 0x18, AccessKind::Write, 8);
    let update = site(&mut w, 0x1c, AccessKind::Modify, 4);
    w.push(1, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x8000 }).expect("push");
    let mut seed = 5u64;
    for i in 0..40_000u64 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let addr = 0x10000 + (seed >> 33) % (256 << 10);
        let site = [read, wide, write, update][i as usize % 4];
        // Wide reads at 8 bytes from a line's end straddle two lines.
        let addr = if site == wide { addr | 56 } else { addr & !7 };
        w.push(1, &Event::Access { site, addr }).expect("push");
    }
    w.finish(&Trailer::default()).expect("finish");
    let model = Model::decode(&path, &options(300, 200, 2_000), &mut |_| {}).expect("decode");
    assert!(model.working_set.snapshots.len() > 5, "{} snapshots", model.working_set.snapshots.len());
    let whole = RangeStats::whole_trace(&model);
    let replayed =
        range_stats(&model, &Symbolizer::new(&model.modules), 0, model.columns, &mut |_, _| true).expect("replay");
    assert_eq!(whole.reads, 30_000);
    assert!(whole.line_fetches > 10_000 && whole.d1_read_misses > 0 && whole.reuse.cold > 0, "{whole:?}");
    let figures = |s: &RangeStats| {
        (
            (s.from, s.to, s.reads, s.writes, s.bytes_read, s.line_fetches),
            (s.mean_bytes_read_per_fetch, s.mean_distinct_bytes_per_fetch, s.utilisation),
            (s.reuse.clone(), s.d1_read_misses, s.ll_read_misses),
        )
    };
    assert_eq!(figures(&replayed), figures(&whole));
}

/// Rows of no variable, block, stack or module make one band per run of
/// lines near each other, named by the first line's address (one band a
/// row left unlabelled stripes in the gutter); lines far apart (other
/// mappings) start a band of their own.
#[test]
fn unnamed_rows_band_together_while_near_each_other() {
    let near = [0x10_0000, 0x10_0040, 0x10_0100, 0x18_0000];
    let far = [0x9000_0000, 0x9000_0040];
    let reads: Vec<(u64, u32)> = near.iter().chain(&far).map(|&a| (a, 8)).collect();
    let path = write_trace(&reads, true, 1 << 12);
    let model = Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let symbols = decoder::symbols::Symbolizer::new(&model.modules);
    let bands = decoder::inspect::row_bands(&model, &symbols, model.columns - 1).expect("bands");
    let got: Vec<(String, usize, usize)> = bands.into_iter().map(|b| (b.label, b.first_row, b.rows)).collect();
    assert_eq!(got, vec![("0x100000…".to_string(), 0, 4), ("0x90000000…".to_string(), 4, 2)]);
}

/// Rows of no variable, block, stack or module, in a data mapping the
/// recorder found, take its name for people: `[heap]` is the heap,
/// `[anon:NAME]` its name, a nameless one anonymous memory, a file its
/// file's name; rows outside every mapping keep their address.
#[test]
fn rows_in_data_mappings_take_their_names() {
    let lines = [0x10_0000, 0x20_0000, 0x30_0000, 0x40_0000, 0x48_0000, 0x50_0000];
    let reads: Vec<(u64, u32)> = lines.iter().map(|&a| (a, 8)).collect();
    let path = write_trace(&reads, true, 1 << 12);
    let mut model = Model::decode(&path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let mapping =
        |start: u64, name: &str| trace_rt::format::DataMapping { start, end: start + 0x1000, name: name.to_string() };
    model.data_mappings = vec![
        mapping(0x10_0000, "[heap]"),
        mapping(0x20_0000, "[anon:arena 1]"),
        mapping(0x30_0000, ""),
        mapping(0x40_0000, "[stack]"),
        mapping(0x48_0000, "/usr/lib/locale/C.utf8/LC_CTYPE"),
    ];
    let symbols = decoder::symbols::Symbolizer::new(&model.modules);
    let bands = decoder::inspect::row_bands(&model, &symbols, model.columns - 1).expect("bands");
    let got: Vec<(String, usize)> = bands.into_iter().map(|b| (b.label, b.first_row)).collect();
    let want = [("heap", 0), ("arena 1", 1), ("anonymous memory", 2), ("stack", 3), ("LC_CTYPE", 4), ("0x500000…", 5)];
    assert_eq!(got, want.map(|(l, r)| (l.to_string(), r)));
}

/// A heap written at every size it had keeps its largest extent; other
/// mappings, and one of another name over the same addresses, stay.
#[test]
fn mapping_extents_written_again_merge() {
    let m = |start: u64, end: u64, name: &str| trace_rt::format::DataMapping { start, end, name: name.into() };
    let merged = decoder::model::merge_extents(vec![
        m(0x1000, 0x2000, "[heap]"),
        m(0x9000, 0xa000, ""),
        m(0x1000, 0x5000, "[heap]"),
        m(0x1000, 0x3000, "[heap]"),
        m(0x2000, 0x3000, "[anon:arena]"),
    ]);
    assert_eq!(merged, vec![m(0x1000, 0x5000, "[heap]"), m(0x2000, 0x3000, "[anon:arena]"), m(0x9000, 0xa000, "")]);
}

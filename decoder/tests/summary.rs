//! The model's cursor, spans and summary against straight per-column
//! references, on random traces.

use decoder::cursor::ColumnCursor;
use decoder::model::{DecodeOptions, Model};
use decoder::pyramid::SummaryCell;
use decoder::range_summary::{RangeRequest, RangeSummary, wanted_for};
use decoder::raster::{
    BitmapView, ColourBy, Palette, rasterize_bitmap_refined, rasterize_blocks, rasterize_exact, rasterize_from_spans,
    rasterize_from_summary,
};
use decoder::spans::SpanAccumulator;
use decoder::working_set::{Departure, HashedLines, SortedLines, WorkingSetConfig};
use proptest::prelude::*;
use trace_rt::format::{AccessKind, Event, Implied, Metadata, Site, TraceWriter, Trailer};

/// A trace of reads: a sweep mixed with scattered reads over `spread`
/// lines, some straddling lines, frames every so often; then `hot` reads
/// that only hit the last 8 lines read (no line enters or leaves).
fn trace(seed: u64, reads: u64, spread: u64, chunk: usize) -> tempfile::TempPath {
    trace_with_hot_tail(seed, reads, spread, chunk, 0)
}

fn trace_with_hot_tail(seed: u64, reads: u64, spread: u64, chunk: usize, hot: u64) -> tempfile::TempPath {
    let path = tempfile::NamedTempFile::new().expect("temp").into_temp_path();
    let mut w = TraceWriter::new(std::fs::File::create(&path).expect("create"), &Metadata::new("t")).expect("header");
    w.set_chunk_target(chunk);
    let small =
        w.add_site(Site { pc: 0x10, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    let wide =
        w.add_site(Site { pc: 0x20, len: 4, kind: AccessKind::Read, size: 40, count: 1, implied: Implied::NONE });
    w.push(1, &Event::InvocationStart { index: 0, pc: 0x100, sp: 0x8000 }).expect("push");
    let mut s = seed | 1;
    let mut depth = 0u64;
    for i in 0..reads {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        if s.is_multiple_of(97) && depth < 5 {
            depth += 1;
            let sp = 0x8000 - 8 * depth;
            w.push(1, &Event::Call { callsite: 0x100 + depth, target: 0x200 + (s >> 40) % 4 * 0x10, sp })
                .expect("push");
        } else if s.is_multiple_of(89) && depth > 0 {
            w.push(1, &Event::Return { sp: 0x8000 - 8 * depth + 8 }).expect("push");
            depth -= 1;
        }
        let (site, addr) = match (s >> 59) % 4 {
            0 => (wide, 0x10000 + (s >> 20) % (spread * 64)),
            1 => (small, 0x10000 + (s >> 20) % (spread * 64)),
            _ => (small, 0x40000 + (i * 8) % (spread * 32)),
        };
        w.push(1, &Event::Access { site, addr }).expect("push");
    }
    for i in 0..hot {
        w.push(1, &Event::Access { site: small, addr: 0x90000 + (i % 8) * 64 }).expect("push");
    }
    for i in 0..hot {
        w.push(1, &Event::Access { site: small, addr: 0x90000 + (i % 8) * 64 + 8 * (i % 7) }).expect("push");
    }
    w.finish(&Trailer::default()).expect("finish");
    path
}

fn options(max_age: u32, snapshot_every: u64) -> DecodeOptions {
    DecodeOptions {
        working_set: WorkingSetConfig { line_size: 64, max_age, max_rows: max_age },
        snapshot_every,
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A cursor started at any column walks on exactly like a replay from
    /// column 0.
    #[test]
    fn a_cursor_from_any_column_equals_a_straight_run(seed in any::<u64>(), starts in prop::collection::vec(0u64..3000, 1..5)) {
        let path = trace(seed, 3000, 200, 400);
        let model = Model::decode(&path, &options(30, 50), &mut |_| {}).expect("decode");
        let mut straight = Vec::new();
        let mut c = ColumnCursor::<SortedLines>::new(&model, 0).expect("cursor");
        while let Some(read) = c.step(&mut |_: Departure| {}).expect("step") {
            straight.push((read, c.set().lines().to_vec(), c.set().clock()));
        }
        prop_assert_eq!(straight.len() as u64, model.columns);
        for start in starts {
            let mut c = ColumnCursor::<SortedLines>::new(&model, start).expect("cursor");
            for want in straight.iter().skip(start as usize).take(200) {
                let read = c.step(&mut |_: Departure| {}).expect("step").expect("a column");
                prop_assert_eq!(&(read, c.set().lines().to_vec(), c.set().clock()), want);
            }
        }
    }

    /// Spans: the occupancy of every row is exact; with no line entering or
    /// leaving, so is every row's colour.
    #[test]
    fn spans_sum_the_cells_of_each_row(seed in any::<u64>(), cuts in prop::collection::vec(1u64..2999, 1..6)) {
        let mut exact_spans = 0;
        // 3000 mixed reads, then 1000 hits on 8 hot lines (first 8 of them
        // misses), split anywhere.
        let path = trace_with_hot_tail(seed, 2000, 60, 1 << 20, 500);
        let model = Model::decode(&path, &options(24, 1 << 20), &mut |_| {}).expect("decode");
        let config = model.working_set.config;
        let mut edges: Vec<u64> = cuts;
        edges.extend([2100, 2600, 2900]);
        edges.push(model.columns);
        edges.sort_unstable();
        edges.dedup();
        // Reference: every cell, from a sorted replay.
        let mut cells: Vec<Vec<(usize, decoder::spans::CellMeans, u64)>> = Vec::new();
        let mut inserted = Vec::new();
        let mut c = ColumnCursor::<SortedLines>::new(&model, 0).expect("cursor");
        while let Some(_read) = c.step(&mut |_: Departure| {}).expect("step") {
            let set = c.set();
            cells.push(set.lines().iter().enumerate().map(|(r, l)| (r, decoder::spans::CellMeans::of_line(l, set.age(l), &config, false), l.line)).collect());
            inserted.push(set.clock());
        }
        let mut h = ColumnCursor::<HashedLines>::new(&model, 0).expect("cursor");
        let mut acc = SpanAccumulator::new(h.set_mut(), 0, |_, _| false);
        let mut start = 0u64;
        for &end in &edges {
            while h.column() < end {
                acc.begin_column(h.column());
                h.step(&mut acc.observer(|_, _| false)).expect("step");
                acc.end_column(h.set());
            }
            let span = acc.close_span(h.set_mut());
            prop_assert_eq!((span.start, span.end), (start, end));
            let width = (end - start) as f64;
            let range = start as usize..end as usize;
            for (r, row) in span.rows.iter().enumerate() {
                let occupied = cells[range.clone()].iter().filter(|col| col.len() > r).count() as f64;
                prop_assert!((row.occupancy - occupied / width).abs() < 1e-9, "row {} occupancy", r);
            }
            let height = cells[range.clone()].iter().map(Vec::len).max().unwrap_or(0);
            prop_assert_eq!(span.rows.len(), height);
            // The clock before the span vs at its end: no insertion means
            // exact rows.
            let clock_before = if start == 0 { 0 } else { inserted[start as usize - 1] };
            if inserted[end as usize - 1] == clock_before {
                exact_spans += 1;
                for (r, row) in span.rows.iter().enumerate() {
                    let mean = cells[range.clone()].iter().map(|col| col[r].1.fresh_bytes).sum::<f64>() / width;
                    prop_assert!((row.means.fresh_bytes - mean).abs() < 1e-9, "row {} colour", r);
                }
            }
            start = end;
        }
        prop_assert!(exact_spans >= 2, "the hot tail makes spans without insertions");
    }
}

/// Level 0 of the summary built while decoding equals the spans a replay
/// computes over the same blocks: one code path, two uses.
#[test]
fn the_summary_built_while_decoding_equals_spans_by_replay() {
    let path = trace(7, 20_000, 300, 3000);
    let model = Model::decode(&path, &options(64, 500), &mut |_| {}).expect("decode");
    let level = &model.pyramid.levels[0];
    let width = 1u64 << level.shift;
    assert_eq!(level.blocks() as u64, model.columns.div_ceil(width));
    let mut h = ColumnCursor::<HashedLines>::new(&model, 0).expect("cursor");
    let mut acc = SpanAccumulator::new(h.set_mut(), 0, |_, _| false);
    for block in 0..level.blocks() {
        let end = ((block as u64 + 1) * width).min(model.columns);
        while h.column() < end {
            acc.begin_column(h.column());
            h.step(&mut acc.observer(|_, _| false)).expect("step");
            acc.end_column(h.set());
        }
        let span = acc.close_span(h.set_mut());
        let cells: Vec<SummaryCell> = span.rows.iter().map(SummaryCell::from_row).collect();
        assert_eq!(level.block(block), &cells[..], "block {block}");
    }
}

/// The whole trace, 64 rows high, `width` pixels wide.
fn whole_trace(model: &Model, width: u32) -> BitmapView {
    BitmapView {
        columns: (0.0, model.columns as f64),
        rows: (0.0, 64.0),
        width,
        height: 64,
        alpha: 1.0,
        colour_by: ColourBy::BytesRead,
    }
}

/// `view` drawn exactly, from spans, and from the summary.
fn three_ways(model: &Model, view: &BitmapView) -> [decoder::raster::Image; 3] {
    let p = Palette::default();
    [
        rasterize_exact(model, view, &p, &mut |_, _| true).expect("exact"),
        rasterize_from_spans(model, view, &p, &mut |_, _| true).expect("spans"),
        rasterize_from_summary(model, view, &p).expect("summary"),
    ]
}

/// Zoomed out, the summary and the spans draw what the exact rasteriser
/// draws, up to where rows are placed: every pixel column carries the
/// same amount of colour, and the same rows are lit.
#[test]
fn zoomed_out_pictures_agree_with_the_exact_one() {
    let path = trace(11, 60_000, 80, 1 << 20);
    let model = Model::decode(&path, &options(64, 1000), &mut |_| {}).expect("decode");
    let view = whole_trace(&model, 12);
    let [exact, spans, summary] = three_ways(&model, &view);
    for (name, img) in [("spans", &spans), ("summary", &summary)] {
        for x in 0..view.width {
            let (a, b) = (column_mean(&exact, x), column_mean(img, x));
            let worst = (0..3).map(|k| (a[k] - b[k]).abs()).fold(0.0, f64::max);
            assert!(worst <= 3.0, "{name}: pixel column {x} differs by {worst:.1}: {a:?} vs {b:?}");
        }
        let lit = |img: &decoder::raster::Image| {
            (0..img.height).filter(|&y| img.pixel(0, y)[..3] != exact.pixel(0, img.height - 1)[..3]).count()
        };
        assert!(lit(img).abs_diff(lit(&exact)) <= 2, "{name}: rows lit {} vs {}", lit(img), lit(&exact));
    }
}

/// A view drawn from spans in two halves at once (wide enough to split,
/// whatever its columns) is the picture drawn on one thread: every pixel
/// is its own span, and each half replays to its first from a snapshot.
#[test]
fn spans_in_two_halves_are_the_picture_drawn_on_one_thread() {
    let path = trace(11, 60_000, 80, 1 << 20);
    let model = Model::decode(&path, &options(64, 1000), &mut |_| {}).expect("decode");
    // 7.5 columns a pixel (spans), 4,500 columns: under the columns that
    // split a narrow picture.
    let view = BitmapView { columns: (20_000.0, 24_500.0), width: 600, ..whole_trace(&model, 600) };
    let p = Palette::default();
    let two = rasterize_from_spans(&model, &view, &p, &mut |_, _| true).expect("spans");
    let one = decoder::drawing_threads::on_one_thread(|| rasterize_from_spans(&model, &view, &p, &mut |_, _| true))
        .expect("spans");
    let background = decoder::raster::to_rgba8(p.background);
    let drawn = (0..view.width).filter(|&x| one.pixel(x, 0) != background || one.pixel(x, 40) != background).count();
    assert!(drawn > 300, "the view has cells: {drawn} columns");
    for x in 0..view.width {
        for y in 0..view.height {
            assert_eq!(two.pixel(x, y), one.pixel(x, y), "pixel ({x}, {y})");
        }
    }
}

/// Where no line enters or leaves the set (a hot tail), spans are exact,
/// so zoomed-out pictures equal the exact one pixel by pixel there. Each
/// pixel column is its own: nothing of the columns drawn before it (here a
/// busier stretch) may show in it.
#[test]
fn zoomed_out_pixels_without_insertions_equal_the_exact_ones() {
    let path = trace_with_hot_tail(5, 30_000, 80, 1 << 20, 20_000);
    let model = Model::decode(&path, &options(64, 1000), &mut |_| {}).expect("decode");
    assert_eq!(model.columns, 70_000);
    let view = whole_trace(&model, 14);
    let [exact, spans, summary] = three_ways(&model, &view);
    // Pixel columns 7.. (from column 35,000) lie in the hot tail.
    for (name, img) in [("spans", &spans), ("summary", &summary)] {
        for x in 7..view.width {
            for y in 0..view.height {
                let (a, b) = (exact.pixel(x, y), img.pixel(x, y));
                let worst = (0..3).map(|k| a[k].abs_diff(b[k])).max().unwrap_or(0);
                assert!(worst <= 3, "{name}: pixel ({x}, {y}) is {b:?}, exactly {a:?}");
            }
        }
    }
}

/// Frames found by binary search are those a scan finds.
#[test]
fn frames_by_binary_search_equal_a_scan() {
    let path = trace(5, 5000, 100, 1 << 20);
    let model = Model::decode(&path, &options(32, 1000), &mut |_| {}).expect("decode");
    let frames = &model.call_tree.frames;
    assert!(frames.len() > 20, "{} frames", frames.len());
    for (from, to) in [(0, 1), (0, model.columns), (17, 18), (1000, 1400), (4999, 5000), (2500, 2500)] {
        let scan: Vec<&decoder::calltree::Frame> = frames
            .iter()
            .filter(|f| {
                f.first_column < to && f.end_column > from
                    || f.first_column == f.end_column && f.first_column >= from && f.first_column < to
            })
            .collect();
        let found: Vec<&decoder::calltree::Frame> = model.call_tree.overlapping(from, to).collect();
        assert_eq!(found, scan, "{from}..{to}");
    }
}

/// Mean of each channel down pixel column `x`.
fn column_mean(img: &decoder::raster::Image, x: u32) -> [f64; 3] {
    let mut m = [0.0; 3];
    for y in 0..img.height {
        let px = img.pixel(x, y);
        for k in 0..3 {
            m[k] += f64::from(px[k]) / f64::from(img.height);
        }
    }
    m
}

/// A sweep over more lines than the set holds, with random reads mixed
/// in: every span sees the whole set turn over, the sweep's lines leave
/// from one end of the address range and enter at the other. Zoomed out,
/// the spans and the summary still give every pixel column the colour
/// the exact picture gives it (they once put the lines that left in the
/// rows their addresses held at a span's end, crowded, and whole columns
/// came out 16-19 levels of 255 off with the default settings).
#[test]
fn zoomed_out_columns_keep_their_colour_when_the_set_turns_over() {
    let path = trace(11, 120_000, 2000, 1 << 20);
    let model = Model::decode(&path, &options(128, 1000), &mut |_| {}).expect("decode");
    assert_eq!(model.metrics.max_rows, 128);
    for width in [12u32, 58, 234] {
        let view = BitmapView { rows: (0.0, 128.0), height: 128, ..whole_trace(&model, width) };
        let [exact, spans, summary] = three_ways(&model, &view);
        for (name, img, tolerance) in [("spans", &spans, 0.5), ("summary", &summary, 2.0)] {
            let mut total = 0.0;
            for x in 0..width {
                let (a, b) = (column_mean(&exact, x), column_mean(img, x));
                let worst = (0..3).map(|k| (a[k] - b[k]).abs()).fold(0.0, f64::max);
                assert!(worst <= 2.0 * tolerance, "{name} at {width} px: column {x} off by {worst:.2}");
                total += worst;
            }
            let mean = total / f64::from(width);
            assert!(mean <= tolerance, "{name} at {width} px: columns off by {mean:.2} on average");
        }
    }
}

/// A range summary at level 0's width, from any block edge, holds level
/// 0's blocks: the same span walk, on the same edges (made in two halves
/// at once, and on one thread).
#[test]
fn a_range_summary_at_level_0s_width_holds_level_0s_blocks() {
    let path = trace(7, 20_000, 300, 3000);
    let model = Model::decode(&path, &options(64, 500), &mut |_| {}).expect("decode");
    let level = &model.pyramid.levels[0];
    let width = 1u64 << level.shift;
    for (first, to) in [(3usize, model.columns), (0, 20 * width), (11, 29 * width)] {
        let request = RangeRequest { from: first as u64 * width, to, shift: level.shift };
        let two = RangeSummary::build(&model, request, &mut |_, _| true).expect("range summary");
        let one = decoder::drawing_threads::on_one_thread(|| RangeSummary::build(&model, request, &mut |_, _| true))
            .expect("range summary");
        for summary in [&two, &one] {
            let blocks = summary.blocks();
            assert_eq!(blocks.len() as u64, (to - request.from).div_ceil(width));
            for (i, block) in blocks.iter().enumerate() {
                assert_eq!(*block, level.block(first + i), "block {} of {request:?}", first + i);
            }
        }
    }
}

/// Which views a viewer at rest summarizes: those whose next zoom step in
/// is drawn from spans, in blocks at most a quarter of a pixel wide over
/// the columns in view, once.
#[test]
fn range_summaries_are_wanted_where_the_next_step_would_replay() {
    let path = trace(11, 60_000, 80, 1 << 20);
    let model = Model::decode(&path, &options(64, 1000), &mut |_| {}).expect("decode");
    let finest = model.pyramid.finest_block() as f64;
    assert_eq!(finest, 512.0);
    // 600 columns a pixel: the next step, 300, is drawn from spans.
    let view = (1_000.0, 61_000.0f64.min(model.columns as f64));
    let width = ((view.1 - view.0) / 600.0) as u32;
    let want = wanted_for(&model, view, width, None).expect("a summary is wanted");
    assert_eq!(want.shift, 7, "the widest power of two at most 150 columns");
    assert_eq!(want.from, 1_000 - 1_000 % 128);
    assert_eq!(want.to, view.1 as u64);
    let summary = RangeSummary::build(&model, want, &mut |_, _| true).expect("range summary");
    assert!(wanted_for(&model, view, width, Some(&summary)).is_none(), "made once");
    let inside = (10_000.0, 40_000.0);
    assert!(wanted_for(&model, inside, 100, Some(&summary)).is_none(), "300 a pixel: it serves the step to 150");
    assert!(wanted_for(&model, inside, 200, Some(&summary)).is_some(), "150 a pixel: 75 needs finer blocks");
    let finer = wanted_for(&model, inside, 600, Some(&summary)).expect("50 a pixel: 25 needs finer blocks");
    assert_eq!(finer.shift, 3);
    assert!(wanted_for(&model, (10_000.0, 25_000.0), 100, None).is_none(), "15,000 columns: too few to matter");
    // Next steps from the decoded summary, or exact: nothing to make.
    assert!(wanted_for(&model, view, width / 2, None).is_none(), "1,200 a pixel: 600 is summarized");
    assert!(wanted_for(&model, (0.0, 7_000.0), 1_000, None).is_none(), "7 a pixel: 3.5 is exact");
    // Requests no view makes are refused, not drawn wrong.
    for bad in [
        RangeRequest { from: 100, to: 9_000, shift: 7 },
        RangeRequest { from: 0, to: 9_000, shift: 64 },
        RangeRequest { from: 70_000, to: 90_000, shift: 3 },
    ] {
        let refused = RangeSummary::build(&model, bad, &mut |_, _| true);
        assert!(matches!(refused, Err(decoder::DecodeError::InvalidSetting(_))), "{bad:?}");
    }
}

/// A view drawn where a range summary fits is drawn from its blocks, and
/// agrees with the exact picture as the decoded summary's pictures do.
#[test]
fn views_inside_a_range_summary_are_drawn_from_it() {
    let path = trace(11, 120_000, 2000, 1 << 20);
    let model = Model::decode(&path, &options(128, 1000), &mut |_| {}).expect("decode");
    let request = RangeRequest { from: 16_384, to: 112_000, shift: 6 };
    let summary = RangeSummary::build(&model, request, &mut |_, _| true).expect("range summary");
    let p = Palette::default();
    let names = |pc: u64| format!("{pc:#x}");
    for width in [58u32, 234] {
        // 384 and 95 columns a pixel: drawn from spans without the summary.
        let view =
            BitmapView { columns: (20_000.0, 42_272.0), rows: (0.0, 128.0), height: 128, ..whole_trace(&model, width) };
        assert!(summary.fits(&view));
        let refined =
            rasterize_bitmap_refined(&model, Some(&summary), &view, &p, &names, &mut |_, _| true).expect("refined");
        let blocks = rasterize_blocks(&summary.blocks(), 64, (request.from, request.to), &view, &p).expect("blocks");
        assert_eq!(refined, blocks, "drawn from the summary's blocks at {width} px");
        let exact = rasterize_exact(&model, &view, &p, &mut |_, _| true).expect("exact");
        let mut total = 0.0;
        for x in 0..width {
            let (a, b) = (column_mean(&exact, x), column_mean(&refined, x));
            let worst = (0..3).map(|k| (a[k] - b[k]).abs()).fold(0.0, f64::max);
            assert!(worst <= 4.0, "at {width} px: column {x} off by {worst:.2}");
            total += worst;
        }
        let mean = total / f64::from(width);
        assert!(mean <= 2.0, "at {width} px: columns off by {mean:.2} on average");
    }
    // Outside its columns, or at blocks wider than a pixel: from spans.
    for view in [
        BitmapView { columns: (10_000.0, 30_000.0), rows: (0.0, 128.0), height: 128, ..whole_trace(&model, 100) },
        BitmapView { columns: (20_000.0, 25_000.0), rows: (0.0, 128.0), height: 128, ..whole_trace(&model, 100) },
    ] {
        assert!(!summary.fits(&view));
        let refined =
            rasterize_bitmap_refined(&model, Some(&summary), &view, &p, &names, &mut |_, _| true).expect("refined");
        let spans = rasterize_from_spans(&model, &view, &p, &mut |_, _| true).expect("spans");
        assert_eq!(refined, spans);
    }
}

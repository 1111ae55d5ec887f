//! The viewer, drawn offscreen (`view --screenshot`, on Xvfb and lavapipe)
//! and checked on real pixels and on the UI state it reports.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use decoder::inspect::Inspector;
use decoder::model::{DecodeOptions, Model};
use decoder::raster::{ColourBy, Palette};
use decoder::spans::CellMeans;
use decoder::symbols::{SymbolPaths, Symbolizer};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// A screenshot and the UI state of one offscreen run.
struct Shot {
    width: u32,
    rgb: Vec<u8>,
    state: serde_json::Value,
}

impl Shot {
    fn pixel(&self, x: f64, y: f64) -> [u8; 3] {
        let i = (y as usize * self.width as usize + x as usize) * 3;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    /// [left, top, right, bottom] of a UI area.
    fn area(&self, name: &str) -> [f64; 4] {
        let a = &self.state[name];
        [0, 1, 2, 3].map(|i| a[i].as_f64().expect("a number"))
    }
}

fn shoot(trace: &Path, extra: &[&str]) -> Shot {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer");
    std::fs::create_dir_all(&dir).expect("dir");
    let stem = format!("{}-{}", trace.file_stem().and_then(|s| s.to_str()).unwrap_or("t"), std::process::id());
    let tail: String = extra.join("").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let png_path = dir.join(format!("{stem}-{tail}.png"));
    let state_path = png_path.with_extension("json");
    let out = linetrace()
        .arg("view")
        .arg(trace)
        .arg("--modules")
        .arg(fixture(""))
        .args(["--size", "1400x800", "--screenshot"])
        .arg(&png_path)
        .arg("--state")
        .arg(&state_path)
        .args(extra)
        // The viewer starts its own Xvfb when there is no display.
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("linetrace view runs");
    assert!(out.status.success(), "view failed: {}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png_path).expect("png")));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png data");
    assert_eq!(info.color_type, png::ColorType::Rgb, "{}", png_path.display());
    let state = serde_json::from_slice(&std::fs::read(&state_path).expect("state")).expect("state JSON");
    Shot { width: info.width, rgb: buf, state }
}

/// heap_mix (3000 rounds) recorded with `--allocations` to a trace named
/// after `name`, and its decoded model.
fn heap_mix_allocations(name: &str) -> (PathBuf, Model) {
    let bin = c_example("heap_mix", &[]);
    let trace = trace_path(name);
    let out = record_with(&["--allocations"], &bin, &["3000"], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let model = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    (trace, model)
}

/// The tooltip lines a screenshot's UI state shows.
fn tooltip_of(shot: &Shot) -> Vec<String> {
    let lines = shot.state["tooltip"].as_array().expect("tooltip");
    lines.iter().filter_map(|l| l.as_str().map(String::from)).collect()
}

fn close(a: [u8; 3], b: [u8; 3], tolerance: u8) -> bool {
    a.iter().zip(&b).all(|(x, y)| x.abs_diff(*y) <= tolerance)
}

fn rgb8(c: [f64; 3]) -> [u8; 3] {
    c.map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
}

/// The classic example: the frame of `work` spans the bitmap, the first
/// line read is at row 0 in its colour, and hovering the forward sweep
/// shows a tooltip naming array_sweep.c:7 — in the UI state and on screen.
#[test]
fn the_classic_example_is_drawn_where_expected() {
    let trace = fixture("array_sweep_work.lntrace");
    let shot = shoot(&trace, &["--hover", "100,25"]);
    let [left, top, right, bottom] = shot.area("bitmap");
    let bars = shot.state["bars"].as_array().expect("bars");
    let work = bars.iter().find(|b| b[0] == "work" && b[3] == 0).expect("a bar for work at depth 0");
    let (x0, x1) = (work[1].as_f64().expect("x0"), work[2].as_f64().expect("x1"));
    assert!((x0 - left).abs() <= 1.0 && (x1 - right).abs() <= 1.0, "work spans {x0}..{x1}, bitmap {left}..{right}");

    // Column 0 read 16 bytes of line 0, inserted at row 0, age max.
    let (columns, rows) = (376.0, 64.0);
    let (cw, rh) = ((right - left) / columns, (bottom - top) / rows);
    let want = rgb8(decoder::raster::cell_colour(&Palette::default(), 16, 64, 512, 512));
    let got = shot.pixel(left + 0.5 * cw, top + 0.5 * rh);
    assert!(close(got, want, 4), "first cell {got:?}, expected {want:?}");
    // Row 1 is still empty at column 0, and filled 4 columns later.
    let bg = rgb8(Palette::default().background);
    assert!(close(shot.pixel(left + 0.5 * cw, top + 1.5 * rh), bg, 4));
    assert!(!close(shot.pixel(left + 4.5 * cw, top + 1.5 * rh), bg, 4));

    let tooltip: Vec<&str> =
        shot.state["tooltip"].as_array().expect("tooltip").iter().filter_map(|l| l.as_str()).collect();
    assert!(tooltip.first().is_some_and(|l| l.contains("array_sweep.c:7")), "{tooltip:?}");
    assert!(tooltip.iter().any(|l| l.contains("row 25")), "{tooltip:?}");
    // On screen: the tooltip's dark box over what is otherwise the green
    // forward sweep (column ~120, row ~28).
    let (hx, hy) = (left + 100.5 * cw, top + 25.5 * rh);
    let under = shot.pixel(hx + 60.0, hy + 30.0);
    assert!(under.iter().all(|&v| v < 60), "tooltip box at the hover: {under:?}");
    assert_eq!(shot.state["bands"][0][0], "array", "the gutter names the array");
}

/// An allocation's lines are tinted where the block is live: the pixel of
/// a line inside a recorded block has the tinted colour of its cell.
#[test]
fn an_allocation_band_is_where_the_block_is() {
    let bin = c_example("alloc_churn", &[]);
    let trace = trace_path("churn-view");
    // The program exits with its argument, 7.
    assert_eq!(record(&bin, "churn", &["7"], &trace).status.code(), Some(7));
    let model = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let symbols = Symbolizer::with_paths(&model.modules, SymbolPaths::default());
    let rows = f64::from(model.metrics.max_rows);
    // A cell whose line lies in a recorded block, and one outside any.
    let mut inside = None;
    let mut inspector = Inspector::new(&model, &symbols);
    'find: for column in (model.columns / 4..model.columns).step_by(3) {
        for row in 0..model.metrics.max_rows as usize {
            let Ok(i) = inspector.inspect(column, Some(row)) else { continue };
            if let (Some(line), Some(_)) = (&i.line, &i.allocation) {
                inside = Some((column, row, line.clone()));
                break 'find;
            }
        }
    }
    let (column, row, line) = inside.expect("some line inside a block");
    // The view ends at that column, so the gutter names the rows there.
    let view_end = column + 1;
    let shot = shoot(&trace, &["--columns", &format!("0..{view_end}")]);
    let [left, top, right, bottom] = shot.area("bitmap");
    let (cw, rh) = ((right - left) / view_end as f64, (bottom - top) / rows);
    let got = shot.pixel(left + (column as f64 + 0.5) * cw, top + (row as f64 + 0.5) * rh);
    let config = model.working_set.config;
    let state = decoder::working_set::LineState {
        line: line.line,
        last_touch: 0,
        seq: 0,
        last_column: 0,
        bytes_read: line.bytes_read,
        touched: if line.distinct_bytes >= 128 { u128::MAX } else { (1u128 << line.distinct_bytes) - 1 },
        spans: Default::default(),
    };
    let palette = Palette::default();
    let tinted = rgb8(palette.colour(ColourBy::BytesRead, &CellMeans::of_line(&state, line.age, &config, true)));
    let plain = rgb8(palette.colour(ColourBy::BytesRead, &CellMeans::of_line(&state, line.age, &config, false)));
    assert!(close(got, tinted, 5), "cell ({column}, {row}): {got:?}, tinted {tinted:?}, untinted {plain:?}");
    assert!(!close(got, plain, 5), "the tint shows");
    let bands = shot.state["bands"].as_array().expect("bands");
    assert!(bands.iter().any(|b| b[0].as_str().is_some_and(|l| l.starts_with("block from churn"))), "{bands:?}");
}

/// The frames of `name` in a fixture trace, decoded, in pre-order.
fn frames_named(trace: &str, name: &str) -> (Model, Vec<decoder::calltree::Frame>) {
    let model = Model::decode(&fixture(trace), &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let symbols = Symbolizer::with_paths(
        &model.modules,
        SymbolPaths { module_dirs: vec![fixture("")], ..SymbolPaths::default() },
    );
    let frames =
        model.call_tree.frames.iter().filter(|f| symbols.locate(f.function).function == name).cloned().collect();
    (model, frames)
}

/// Compare mode on two builds of examples/c/lookup.c: the indexed build
/// reads more in `build` and far less in `query`. Both panes are drawn;
/// frames are red where B reads more and blue where it reads less, on
/// screen and in the reported deltas; `hash`, only in B, has no partner;
/// hovering a query says A's reads, B's and the change.
#[test]
fn compare_mode_colours_frames_by_the_change() {
    let (a, b) = ("lookup_scan_work.lntrace", "lookup_hash_work.lntrace");
    let (_, build_a) = frames_named(a, "build");
    let (_, build_b) = frames_named(b, "build");
    let (_, query_a) = frames_named(a, "query");
    let (_, query_b) = frames_named(b, "query");
    let (ra, rb) = (build_a[0].total_reads as f64, build_b[0].total_reads as f64);
    assert!(rb > ra, "the fixture: the index costs reads in build ({ra} vs {rb})");
    let build_delta = (rb - ra) / ra.max(rb);
    // Hover the middle of A's 6th query.
    let q = &query_a[5];
    let hover = (q.first_column + q.end_column) / 2;
    let b_path = fixture(b);
    let shot = shoot(&fixture(a), &[b_path.to_str().expect("path"), "--hover", &hover.to_string()]);
    let panes = shot.state["panes"].as_array().expect("panes");
    assert_eq!(panes.len(), 2, "two panes");
    let bar = |pane: usize, name: &str| -> Vec<(f64, f64, f64, Option<f64>)> {
        panes[pane]["bars"]
            .as_array()
            .expect("bars")
            .iter()
            .filter(|x| x[0] == name)
            .map(|x| {
                (x[1].as_f64().expect("x0"), x[2].as_f64().expect("x1"), x[3].as_f64().expect("depth"), x[4].as_f64())
            })
            .collect()
    };
    let flame_top = |pane: usize| panes[pane]["flame"][1].as_f64().expect("top");
    let pixel_of = |pane: usize, (x0, x1, depth, _): (f64, f64, f64, Option<f64>)| {
        // Left of a label (bars wider than 28 px have one), else the middle.
        let x = if x1 - x0 > 28.0 { x0 + 2.0 } else { (x0 + x1) / 2.0 };
        shot.pixel(x, flame_top(pane) + depth * 17.0 + 3.0)
    };
    for pane in [0, 1] {
        let build = bar(pane, "build")[0];
        let d = build.3.expect("build has a partner");
        assert!((d - build_delta).abs() < 1e-9, "pane {pane}: build's delta {d}, expected {build_delta}");
        let got = pixel_of(pane, build);
        assert!(close(got, rgb8(decoder::raster::delta_colour(d)), 6), "pane {pane}: build is red: {got:?}");
        assert!(got[0] > 150 && got[2] < 120, "red: {got:?}");
        // Queries in pre-order, left to right: the k-th bar is the k-th call.
        let queries = bar(pane, "query");
        assert_eq!(queries.len(), query_a.len(), "pane {pane}: every query drawn");
        let mut blue = 0;
        for (k, query) in queries.into_iter().enumerate() {
            let (x, y) = (query_a[k].total_reads as f64, query_b[k].total_reads as f64);
            let want = (y - x) / x.max(y);
            let d = query.3.expect("queries are matched");
            assert!((d - want).abs() < 1e-9, "pane {pane}, query {k}: delta {d}, expected {want}");
            if query.1 - query.0 > 4.0 {
                let got = pixel_of(pane, query);
                assert!(close(got, rgb8(decoder::raster::delta_colour(d)), 6), "query {k}: {got:?} for {d}");
                if d < -0.5 {
                    assert!(got[2] > 150 && got[0] < 120, "blue: {got:?}");
                    blue += 1;
                }
            }
        }
        assert!(blue >= 10, "pane {pane}: most queries read far less in B ({blue} blue)");
    }
    assert!(bar(0, "hash").is_empty());
    assert!(bar(1, "hash").iter().all(|h| h.3.is_none()), "hash is only in B");
    let tooltip: Vec<&str> =
        shot.state["tooltip"].as_array().expect("tooltip").iter().filter_map(|l| l.as_str()).collect();
    let (qa, qb) = (q.total_reads, query_b[5].total_reads);
    assert_eq!(tooltip.first().copied(), Some("A: query"), "{tooltip:?}");
    let numbers = tooltip.iter().find(|l| l.starts_with("reads")).expect("a reads line");
    assert!(
        numbers.contains(&format!("A {qa:>10}")) && numbers.contains(&format!("B {qb:>10}")),
        "{numbers} for {qa} and {qb}"
    );
    assert!(numbers.contains(&format!("Δ {:+}", qb as i64 - qa as i64)), "{numbers}");
    assert!(shot.state["stats_shown"] == true, "the diff tables are shown");
}

/// Fitting a frame of A fits its partner in B: the two views are linked
/// by frames, not by column numbers.
#[test]
fn compare_mode_links_views_through_matching_frames() {
    let (a, b) = ("lookup_scan_work.lntrace", "lookup_hash_work.lntrace");
    let (_, query_a) = frames_named(a, "query");
    let (_, query_b) = frames_named(b, "query");
    let (qa, qb) = (&query_a[25], &query_b[25]);
    let b_path = fixture(b);
    let columns = format!("{}..{}", qa.first_column, qa.end_column);
    let shot = shoot(&fixture(a), &[b_path.to_str().expect("path"), "--columns", &columns]);
    let panes = shot.state["panes"].as_array().expect("panes");
    let view = |pane: usize| {
        let c = &panes[pane]["columns"];
        (c[0].as_f64().expect("from"), c[1].as_f64().expect("to"))
    };
    let (a0, a1) = view(0);
    let (b0, b1) = view(1);
    let (g0, g1) = (qb.first_column as f64, qb.end_column as f64);
    assert!(a0 <= qa.first_column as f64 && a1 >= qa.end_column as f64, "A shows its query: {a0}..{a1}");
    assert!(b0 <= g0 && b1 >= g1, "B shows the partner {g0}..{g1}: {b0}..{b1}");
    assert!(b1 - b0 < 1.5 * (g1 - g0) + 2.0, "and little else: {b0}..{b1} for {g0}..{g1}");
    // Column numbers differ: the link is by frames.
    assert!(a0 > 1.5 * b1, "A's query lies far later in its trace: {a0} vs {b0}..{b1}");
}

/// The measuring script (`--bench-json`) drives the compare mode as it
/// does the single view: it reaches the decoded traces, pans, and each
/// zoom step shows A at half the columns of the step before, with B's
/// picture sharp too (a step waits for both). Were the script's commands
/// not applied to A, or the panes not reported as the window, steps would
/// wait out their 20 s timeout at an unchanged scale, or the run would
/// never settle.
#[test]
fn the_measuring_script_drives_the_compare_mode() {
    let (a, b) = (fixture("lookup_scan_work.lntrace"), fixture("lookup_hash_work.lntrace"));
    let json = trace_path("compare-bench").with_extension("json");
    let mut cmd = linetrace();
    cmd.arg("view")
        .arg(&a)
        .arg(&b)
        .args(["--size", "800x600", "--bench-json"])
        .arg(&json)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY");
    let run = run_bounded(cmd, std::time::Duration::from_secs(180));
    assert!(!run.timed_out && run.code == Some(0), "view A B --bench-json: {:?}\n{}", run.code, run.stderr);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("report")).expect("JSON");
    let columns_a = Model::decode(&a, &DecodeOptions::default(), &mut |_| {}).expect("decode").columns;
    assert_eq!(report["columns"].as_u64(), Some(columns_a), "A's whole trace is in view at first");
    assert!(report["decoded_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{report}");
    let pans = report["pan_frame_ms"].as_array().expect("pan frames");
    assert!(pans.len() > 200, "every pan frame is timed: {}", pans.len());
    let zooms: Vec<(f64, f64, f64)> = report["zoom_ms"]
        .as_array()
        .expect("zoom steps")
        .iter()
        .map(|z| {
            let field = |i: usize, what: &str| z[i].as_f64().unwrap_or_else(|| panic!("{what} in {z}"));
            (field(0, "columns a pixel"), field(1, "ms"), field(3, "columns on screen"))
        })
        .collect();
    assert!(zooms.len() >= 4, "zoomed in step by step: {zooms:?}");
    for pair in zooms.windows(2) {
        let ratio = pair[0].0 / pair[1].0;
        assert!((ratio - 2.0).abs() < 0.05, "each step halves the columns a pixel: {zooms:?}");
        // The bench sets each step against its peer over the columns on
        // screen: they halve with the columns a pixel.
        let ratio = pair[0].2 / pair[1].2;
        assert!((ratio - 2.0).abs() < 0.05, "each step halves the columns on screen: {zooms:?}");
    }
    assert!(zooms.iter().all(|&(_, ms, _)| ms < 10_000.0), "no step waited for its timeout: {zooms:?}");
    assert!(
        zooms[0].2 > 0.0 && zooms[0].2 < columns_a as f64,
        "the first step shows part of A's {columns_a} columns: {zooms:?}"
    );
    let _ = std::fs::remove_file(&json);
}

/// Allocations mode zoomed into the first MiB of the brk heap
/// (`--addresses`): the picture's top and bottom rows are those addresses
/// (to a pixel's worth), the hovered block lies inside them, and the
/// context strip frames the view's part of the address axis in white.
#[test]
fn allocations_mode_zooms_into_an_address_range() {
    let (trace, model) = heap_mix_allocations("heap-mix-zoom");
    let lo =
        model.allocations.iter().filter(|r| decoder::heap::is_heap_block(r)).map(|r| r.address).min().expect("blocks");
    let hi = lo + (1 << 20);
    let range = format!("{lo:#x}..{hi:#x}");
    let shot = shoot(&trace, &["--allocations", "--addresses", &range, "--hover", "1000,300"]);
    let state = &shot.state;
    let shown = state["addresses"].as_array().expect("addresses in view");
    let (top, bottom) = (shown[0].as_u64().expect("top"), shown[1].as_u64().expect("bottom"));
    let pixel = (hi - lo) / 700;
    assert!(top.abs_diff(lo) <= 2 * pixel && bottom.abs_diff(hi) <= 2 * pixel, "{top:#x}..{bottom:#x} for {range}");
    let tooltip: Vec<&str> = state["tooltip"].as_array().expect("tooltip").iter().filter_map(|l| l.as_str()).collect();
    // The hovered row shows a block overlapping the range, or a free
    // address inside it.
    let hex = |h: &str| u64::from_str_radix(h.trim_start_matches("0x"), 16).expect("hex");
    let (start, end) = match tooltip.get(1) {
        Some(l) if l.starts_with("at ") => {
            let (a, b) = l[3..].split_once("..").expect("a range");
            (hex(a), hex(b.split_whitespace().next().unwrap_or(b)))
        }
        Some(l) if l.ends_with(": free") => {
            let a = hex(l.trim_end_matches(": free"));
            (a, a + 1)
        }
        _ => panic!("a block or a free address: {tooltip:?}"),
    };
    assert!(start < hi && end > lo, "{tooltip:?} outside {range}");
    // The frame's top edge in the context strip: white.
    let rows = state["rows"].as_array().expect("rows");
    let (r0, r1) = (rows[0].as_f64().expect("r0"), rows[1].as_f64().expect("r1"));
    assert!(r1 - r0 < 20_000.0, "zoomed in: {r0}..{r1} of 100000");
    let c: Vec<f32> =
        state["context"].as_array().expect("context").iter().filter_map(|v| v.as_f64()).map(|v| v as f32).collect();
    let y = (c[1] + (r0 / 100_000.0) as f32 * (c[3] - c[1])).round() as u32;
    let x = ((c[0] + c[2]) / 2.0) as u32;
    let at = (y as usize * shot.width as usize + x as usize) * 3;
    let px = [shot.rgb[at], shot.rgb[at + 1], shot.rgb[at + 2]];
    assert!(close(px, [255, 255, 255], 40), "frame edge at ({x},{y}): {px:?}");
    // Addresses no block lies in: every address shown, and the status
    // line says why.
    let shot = shoot(&trace, &["--allocations", "--addresses", "0x10..0x20"]);
    let status = shot.state["status"].as_str().unwrap_or_default().to_string();
    assert!(status.contains("no heap block lies in 0x10..0x20"), "{status}");
}

/// Allocations mode with a custom allocator (examples/c/pool.c, its first
/// 28 KiB of arena in view): the pool's blocks are drawn over the arena,
/// and hovering one names the pool's function, not the arena's malloc.
#[test]
fn allocations_mode_shows_a_pools_blocks_inside_its_arena() {
    let bin = c_example("pool", &["-O0"]);
    let trace = trace_path("pool-view");
    let flags: Vec<&str> = ["--allocations"].into_iter().chain(POOL_ALLOC_FNS).collect();
    let out = record_with(&flags, &bin, &[], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let model = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let arena = model.allocations.iter().find(|r| r.size == 1 << 20).expect("the arena");
    let range = format!("{:#x}..{:#x}", arena.address, arena.address + 0x7000);
    // Event 600: round 120 (five events a round), the pool's first 11 KiB
    // in use; row 200 of the view (about 8.6 KiB in) is inside that.
    let shot = shoot(&trace, &["--allocations", "--addresses", &range, "--hover", "600,200"]);
    let tooltip: Vec<&str> =
        shot.state["tooltip"].as_array().expect("tooltip").iter().filter_map(|l| l.as_str()).collect();
    assert!(tooltip.first().is_some_and(|l| l.starts_with("pool_alloc of ")), "{tooltip:?}");
    assert!(tooltip.get(2).is_some_and(|l| l.contains("make_")), "{tooltip:?}");
}

/// Allocations mode: the tooltip under a point names a block that the
/// decoded model holds live at that event (or says the address is free,
/// and no live block holds it), and the side panel shows the analysis.
#[test]
fn allocations_mode_names_the_block_under_the_pointer() {
    let (trace, model) = heap_mix_allocations("heap-mix-view");
    let peak = decoder::heap::analyse(&model, &Symbolizer::with_paths(&model.modules, SymbolPaths::default())).peak;
    let mut checked = 0;
    for row in [60, 200, 420] {
        let shot = shoot(&trace, &["--allocations", "--hover", &format!("{},{row}", peak.event)]);
        assert_eq!(shot.state["stats_shown"], true, "the analysis is shown");
        let tooltip = tooltip_of(&shot);
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
        let event = |line: &str, after: &str| -> u64 {
            line.split(after)
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .expect("event")
        };
        match tooltip.get(1) {
            Some(line) if line.starts_with("at ") => {
                let (a, b) = line[3..].split_once("..").expect("a range");
                let (start, end) = (hex(a), hex(b));
                let block = model
                    .allocations
                    .iter()
                    .find(|r| r.address == start && r.end() == end)
                    .unwrap_or_else(|| panic!("no block {start:#x}..{end:#x} in the trace"));
                assert!(
                    block.alloc_event <= peak.event && block.free_event.is_none_or(|f| peak.event < f),
                    "live at the hovered event"
                );
                assert_eq!(event(&tooltip[3], "allocated at event "), block.alloc_event);
                assert!(tooltip[2].contains("churn"), "{tooltip:?}");
                checked += 1;
            }
            Some(line) if line.ends_with(": free") => {
                let address = hex(line.trim_end_matches(": free"));
                let axis = decoder::heap_raster::TimeAxis::new(
                    &model.allocations,
                    model.total.allocations,
                    decoder::heap_raster::Clock::Events,
                );
                assert!(axis.block_at(&model.allocations, address, peak.event as f64).is_none(), "{line}");
            }
            _ => panic!("unexpected tooltip {tooltip:?}"),
        }
    }
    assert!(checked > 0, "at the peak, some hovered point is in a block");
}

/// Allocations mode split into size classes on one time axis (`--bins
/// time`): a block hovered in a bin is of that bin's class (the hover
/// looks among that class only), and the cushion cursor brightens its
/// column in every bin.
#[test]
fn allocations_mode_bins_hover_their_own_class_under_a_cursor() {
    let (trace, model) = heap_mix_allocations("heap-mix-bins");
    let classes: Vec<decoder::heap::SizeClass> = decoder::heap::SizeClass::ALL
        .into_iter()
        .filter(|&c| {
            model
                .allocations
                .iter()
                .any(|r| decoder::heap::is_heap_block(r) && decoder::heap::SizeClass::of(r.size) == c)
        })
        .collect();
    assert!(classes.len() >= 3, "heap_mix allocates in several classes: {classes:?}");
    let cursor = model.total.allocations / 2;
    let cursor_arg = cursor.to_string();
    let probe = shoot(&trace, &["--allocations", "--bins", "time"]);
    let b = probe.state["bitmap"].as_array().expect("bitmap").iter().filter_map(|v| v.as_f64()).collect::<Vec<_>>();
    let n = classes.len() as f64;
    let cell = ((b[3] - b[1]) - 3.0 * (n - 1.0)) / n;
    let mut named = 0;
    for (i, class) in classes.iter().enumerate() {
        // The middle of bin i's blocks (stacked bins, 3 px apart, each with
        // its 24-px occupancy bar at the bottom), in pixel rows of the view.
        let row = (i as f64 * (cell + 3.0) + (cell - 24.0) / 2.0) as u64;
        let hover = format!("{},{row}", cursor + 7);
        let shot = shoot(&trace, &["--allocations", "--bins", "time", "--cursor", &cursor_arg, "--hover", &hover]);
        assert_eq!(shot.state["cursors"], serde_json::json!([cursor as f64]));
        let tooltip = tooltip_of(&shot);
        if tooltip.get(1).is_some_and(|l| l.starts_with("at ")) {
            let last = tooltip.last().expect("a class line");
            assert!(last.starts_with(class.name()), "bin {class:?} hovered a block of another class: {tooltip:?}");
            named += 1;
        } else {
            assert!(tooltip.get(1).is_some_and(|l| l.ends_with(": free")), "{tooltip:?}");
        }
        // The cursor's centre column is bright in this bin: half way to a
        // pale yellow over whatever the picture without cursors has there.
        let x = (b[0] + (cursor as f64 / model.total.allocations as f64) * (b[2] - b[0])) as usize;
        let y = (b[1] + i as f64 * (cell + 3.0) + cell / 3.0) as usize;
        let px = |shot: &Shot| {
            let at = (y * shot.width as usize + x) * 3;
            [shot.rgb[at], shot.rgb[at + 1], shot.rgb[at + 2]]
        };
        let (lit, plain) = (px(&shot), px(&probe));
        let luma = |p: [u8; 3]| p.iter().map(|&c| u32::from(c)).sum::<u32>();
        assert!(
            lit.iter().all(|&c| c >= 100) && luma(lit) >= luma(plain) + 60,
            "cursor at ({x},{y}) in bin {class:?}: {lit:?}, without it {plain:?}"
        );
    }
    assert!(named > 0, "some bin's middle row at the cursor is inside a block");
}

/// Allocations mode with events selected (`--select`, as a Shift+drag
/// does): the side panel's totals are those of the blocks allocated in the
/// selection (`decoder::heap::analyse_window`), not of the whole run.
#[test]
fn allocations_mode_selection_rescopes_the_side_panel() {
    let (trace, model) = heap_mix_allocations("heap-mix-select");
    let events = model.total.allocations;
    let (a, b) = (events / 4, events / 2);
    let shot = shoot(&trace, &["--allocations", "--select", &format!("{a}..{b}")]);
    assert_eq!(shot.state["selection"], serde_json::json!([a as f64, b as f64]));
    let symbols = Symbolizer::with_paths(&model.modules, SymbolPaths::default());
    let axis = decoder::heap_raster::TimeAxis::new(&model.allocations, events, decoder::heap_raster::Clock::Events);
    let w = decoder::heap::analyse_window(&model.allocations, events, &symbols, &axis, (a as f64, b as f64));
    let whole = decoder::heap::analyse(&model, &symbols);
    assert!(w.blocks < whole.blocks && w.blocks > 0, "{} of {}", w.blocks, whole.blocks);
    let stats: Vec<&str> = shot.state["stats"].as_array().expect("stats").iter().filter_map(|l| l.as_str()).collect();
    assert_eq!(stats.first().copied(), Some(format!("blocks: {} ({} bytes)", w.blocks, w.bytes).as_str()), "{stats:?}");
    assert!(stats.contains(&format!("freed: {}", w.frees).as_str()), "{stats:?}");
    let at_end = format!("at end: {} bytes in {} blocks", w.at_end.bytes, w.at_end.blocks);
    assert!(stats.contains(&at_end.as_str()), "{stats:?}");
    // A selection wholly past the events is dropped, said in the status
    // line, and the panel analyses the whole run (it analysed no block).
    let (a, b) = (events + 10, events + 20);
    let past = shoot(&trace, &["--allocations", "--select", &format!("{a}..{b}")]);
    assert_eq!(past.state["selection"], serde_json::Value::Null);
    let status = past.state["status"].as_str().expect("status");
    assert!(
        status.contains(&format!("the selection {a}..{b} is past the trace's {events} allocation events")),
        "{status}"
    );
    let first = past.state["stats"][0].as_str().expect("a figure").to_string();
    assert_eq!(first, format!("blocks: {} ({} bytes)", whole.blocks, whole.bytes));
}

/// Allocations mode, Ctrl+click on a block (`--open-source`): the source
/// view shows heap_mix.c, readable, at a line some block was allocated
/// from, with the blocks allocated there in its gutter.
#[test]
fn allocations_mode_opens_the_source_of_a_block() {
    let (trace, model) = heap_mix_allocations("heap-mix-source");
    let symbols = Symbolizer::with_paths(&model.modules, SymbolPaths::default());
    let peak = decoder::heap::analyse(&model, &symbols).peak;
    let lines: std::collections::BTreeSet<(String, u32)> = model
        .allocations
        .iter()
        .filter_map(|r| {
            let at = symbols.locate(r.callsite);
            Some((at.file.clone()?, at.line?))
        })
        .collect();
    // A row inside the densest part of the heap at its peak.
    let shot = shoot(&trace, &["--allocations", "--hover", &format!("{},200", peak.event), "--open-source"]);
    let source = shot.state["source"].as_array().expect("a source view");
    let (file, line) = (source[0].as_str().expect("file"), source[1].as_u64().expect("line") as u32);
    assert!(file.ends_with("examples/c/heap_mix.c"), "{file}");
    assert_eq!(source[2], true, "readable");
    assert!(lines.contains(&(file.to_string(), line)), "{file}:{line} allocates nothing; allocating lines: {lines:?}");
}

/// The allocations view a block links to from the access view (key L,
/// `viewer::linked`): opened with those arguments, it shows the block's
/// addresses and has cushion cursors at its allocation and its free.
#[test]
fn a_linked_allocations_view_frames_the_block() {
    let (trace, model) = heap_mix_allocations("heap-mix-linked");
    let b = model
        .allocations
        .iter()
        .filter(|r| decoder::heap::is_heap_block(r) && r.free_event.is_some())
        .nth(500)
        .expect("a freed block");
    let block = viewer::linked::LinkedBlock {
        address: b.address,
        size: b.size,
        events: (b.alloc_event, b.free_event),
        columns: (b.alloc_column, b.free_column),
    };
    let paths = SymbolPaths { module_dirs: vec![fixture("")], ..SymbolPaths::default() };
    let args = viewer::linked::allocations_view_args(&trace, &paths, &block);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer");
    std::fs::create_dir_all(&dir).expect("dir");
    let (png, json) = (dir.join("linked.png"), dir.join("linked.json"));
    let out = linetrace()
        .args(&args)
        .args(["--size", "1400x800", "--screenshot"])
        .arg(&png)
        .arg("--state")
        .arg(&json)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("linetrace view runs");
    assert!(out.status.success(), "{:?}: {}", args, String::from_utf8_lossy(&out.stderr));
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("state")).expect("JSON");
    let free = b.free_event.expect("freed") as f64;
    assert_eq!(state["cursors"], serde_json::json!([b.alloc_event as f64, free]));
    let shown = state["addresses"].as_array().expect("addresses in view");
    let (lo, hi) = (shown[0].as_u64().expect("lo"), shown[1].as_u64().expect("hi"));
    assert!(lo <= b.address && b.end() <= hi, "{lo:#x}..{hi:#x} misses {:#x}..{:#x}", b.address, b.end());
    assert!(hi - lo < 64 * b.size.max(64), "zoomed onto it: {lo:#x}..{hi:#x} for {} bytes", b.size);
}

/// Four threads traced at once: the viewer shows the thread asked for
/// (`--thread`), says so, and its columns are that thread's reads.
/// The figures the statistics panel listed (`name: value`).
fn stats_shown(shot: &Shot) -> Vec<String> {
    assert_eq!(shot.state["stats_shown"], true, "the statistics are shown");
    let lines = shot.state["stats"].as_array().expect("stats");
    lines.iter().map(|l| l.as_str().expect("a line").to_string()).collect()
}

/// `--stats` opens the statistics panel with the whole trace's figures,
/// the ones `report --json` prints; `--select` of every column shows the
/// same figures, from a replay of the range; a part shows its own.
#[test]
fn the_stats_panel_shows_the_whole_traces_figures_and_a_ranges() {
    let trace = fixture("lookup_hash_work.lntrace");
    let out = linetrace()
        .args(["report", "--json"])
        .arg(&trace)
        .arg("--modules")
        .arg(fixture(""))
        .output()
        .expect("report runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let number = |v: &serde_json::Value| v.as_u64().expect("a count");
    let (reads, columns) = (number(&report["total"]["reads"]), number(&report["columns"]));
    let whole = stats_shown(&shoot(&trace, &["--stats"]));
    for want in [
        format!("reads: {reads}"),
        format!("writes: {}", number(&report["total"]["writes"])),
        format!("line fetches: {}", number(&report["metrics"]["line_fetches"])),
        format!("D1 read misses: {}", number(&report["cache"]["misses"]["d1_read"])),
        format!("utilisation: {:.0}%", 100.0 * report["metrics"]["utilisation"].as_f64().expect("a share")),
        format!("reuse cold: {}", number(&report["metrics"]["reuse"]["cold"])),
        format!("reuse 2-3: {}", number(&report["metrics"]["reuse"]["buckets"][2])),
    ] {
        assert!(whole.contains(&want), "{want:?} not in {whole:?}");
    }
    let everything = stats_shown(&shoot(&trace, &["--select", &format!("0..{columns}")]));
    assert_eq!(everything, whole, "a range of every column");
    let part = stats_shown(&shoot(&trace, &["--select", "100..400"]));
    assert!(part.contains(&"reads: 300".to_string()), "{part:?}");
    assert_ne!(part, whole);
    // No line leaves the set in this range (the set holds all 86 lines):
    // the lines in it at the range's end are the range's fetches.
    assert!(part.iter().any(|l| l.starts_with("utilisation: ") && l != "utilisation: 0%"), "{part:?}");
    // A selection past the trace's end is cut there; one wholly past it is
    // dropped, with a word in the status line, and the panel shows the
    // whole trace.
    let beyond = stats_shown(&shoot(&trace, &["--select", &format!("0..{}", columns * 10)]));
    assert_eq!(beyond, whole, "cut at the trace's end");
    let past = shoot(&trace, &["--select", &format!("{}..{}", columns + 5, columns + 10)]);
    assert_eq!(stats_shown(&past), whole);
    let status = past.state["status"].as_str().expect("status");
    assert!(status.contains(&format!("past the trace's {columns} columns")), "{status}");
}

/// `--columns` reaching past the trace's end shows up to its end; wholly
/// past it, the whole trace, and the status line says why (the view was
/// fitted as asked and clamped: the trace's last columns, silently). The
/// compare mode says so of A.
#[test]
fn columns_past_the_trace_are_cut_or_said() {
    let trace = fixture("lookup_hash_work.lntrace");
    let columns = report(&trace)["columns"].as_u64().expect("columns");
    let cut = shoot(&trace, &["--columns", &format!("900..{}", columns * 10)]);
    assert_eq!(cut.state["columns"], serde_json::json!([900.0, columns as f64]));
    // 100 columns: fitted and clamped, they were the trace's last 100.
    let (from, to) = (columns * 5, columns * 5 + 100);
    let past = shoot(&trace, &["--columns", &format!("{from}..{to}")]);
    assert_eq!(past.state["columns"], serde_json::json!([0.0, columns as f64]), "the whole trace");
    let status = past.state["status"].as_str().expect("status");
    let why = format!("the column range {from}..{to} is past the trace's {columns} columns");
    assert!(status.contains(&why), "{status}");
    let a = fixture("lookup_scan_work.lntrace");
    let a_columns = report(&a)["columns"].as_u64().expect("columns");
    let range = format!("{}..{}", a_columns + 100, a_columns + 200);
    let compared = shoot(&a, &[trace.to_str().expect("path"), "--columns", &range]);
    let status = compared.state["status"].as_str().expect("status");
    assert!(
        status.contains(&format!("A: the column range {range} is past the trace's {a_columns} columns")),
        "{status}"
    );
}

#[test]
fn the_viewer_shows_the_thread_asked_for() {
    let bin = c_example("thread_calls", &[]);
    let trace = trace_path("thread-calls-view");
    assert!(record_with(&["--backend", "rewrite", "-f", "work"], &bin, &[], &trace).status.success());
    let census = report(&trace)["census"].clone();
    let readers: Vec<(&String, u64)> = census
        .as_object()
        .expect("a census")
        .iter()
        .filter_map(|(t, c)| c["reads"].as_u64().filter(|&r| r > 0).map(|r| (t, r)))
        .collect();
    assert_eq!(readers.len(), 4, "{census}");
    // Not the default (equal reads: the lowest id).
    let (thread, reads) = readers.iter().max_by_key(|(t, _)| t.parse::<u32>().unwrap_or(0)).expect("a thread");
    let shot = shoot(&trace, &["--thread", thread]);
    let status = shot.state["status"].as_str().unwrap_or_default().to_string();
    assert!(status.contains(&format!("thread {thread} of 4 that read")), "{status}");
    assert!(status.contains(&format!("{reads} reads")), "{status}");
}

/// A trace with nothing to draw (no reads; in the allocations view, no heap
/// blocks) says why, and that message is the final picture: a screenshot is
/// taken at once. It used to wait for a picture until it gave up, 20,000
/// frames (many minutes) later.
#[test]
fn a_trace_with_nothing_to_draw_says_so_at_once() {
    use trace_rt::format::{Metadata, TraceWriter, Trailer};
    let trace = trace_path("nothing-to-draw");
    let w = TraceWriter::new(std::fs::File::create(&trace).expect("create"), &Metadata::new("test")).expect("header");
    w.finish(&Trailer::default()).expect("finish");
    for mode in [&[][..], &["--allocations"][..]] {
        let png_path = trace.with_extension(format!("{}.png", mode.len()));
        let (_, state) = small_shot_with_state(&trace, &png_path, mode);
        assert_eq!(state["complete"], true, "{mode:?}: {state}");
        // The message: light text across the middle of the view, left of
        // the allocations view's side panel.
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png_path).expect("png")));
        let mut reader = decoder.read_info().expect("png header");
        let mut rgb = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut rgb).expect("png data");
        let (w, h) = (info.width as usize, info.height as usize);
        let light = (h / 2 - 30..h / 2 + 30)
            .flat_map(|y| (0..w * 6 / 10).map(move |x| (y * w + x) * 3))
            .filter(|&i| rgb[i..i + 3].iter().all(|&c| c > 170))
            .count();
        assert!(light > 40, "{mode:?}: no message in the middle ({light} light pixels)");
    }
}

/// A `DISPLAY` no X server answers (an ssh session without X forwarding, a
/// server that has gone) is an error that says so, not a panic inside
/// winit with a backtrace; a screenshot then draws offscreen as it does
/// without a display.
#[test]
fn an_unreachable_display_is_an_error_not_a_panic() {
    let trace = fixture("array_sweep_work.lntrace");
    let unused =
        (60_000..61_000).find(|n| !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()).expect("a free display number");
    let out = linetrace().arg("view").arg(&trace).env("DISPLAY", format!(":{unused}")).output().expect("view runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains(&format!("cannot open the X display \":{unused}\"")), "{stderr}");
    let png = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("unreachable-display-{}.png", std::process::id()));
    let out = small_screenshot(&trace, &png).env("DISPLAY", format!(":{unused}")).output().expect("view runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(png.is_file());
}

/// No Vulkan driver (a server without mesa-vulkan-drivers) is an error that
/// names the package, not Bevy's panic ("Unable to find a GPU!").
#[test]
fn a_missing_vulkan_driver_is_an_error_not_a_panic() {
    let trace = fixture("array_sweep_work.lntrace");
    let png = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("no-vulkan-{}.png", std::process::id()));
    let out = small_screenshot(&trace, &png)
        .env("VK_DRIVER_FILES", "/nonexistent/linetrace-test-icd.json")
        .env_remove("VK_ICD_FILENAMES")
        .env_remove("DISPLAY")
        .output()
        .expect("view runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("no Vulkan driver") && stderr.contains("mesa-vulkan-drivers"), "{stderr}");
}

/// A small screenshot of `trace` (with `extra` arguments) on the viewer's
/// own Xvfb, within 120 s: the run, and the UI state it wrote. Exit 0 is
/// asserted; the PNG is `png`.
fn small_shot_with_state(trace: &Path, png: &Path, extra: &[&str]) -> (Bounded, serde_json::Value) {
    let state_path = png.with_extension("json");
    let mut cmd = small_screenshot(trace, png);
    cmd.arg("--state").arg(&state_path).args(extra).env_remove("DISPLAY").env_remove("WAYLAND_DISPLAY");
    let run = run_bounded(cmd, std::time::Duration::from_secs(120));
    assert!(!run.timed_out, "{extra:?}: the screenshot waited for a picture");
    assert_eq!(run.code, Some(0), "{extra:?}: {}", run.stderr);
    let state = serde_json::from_slice(&std::fs::read(&state_path).expect("state")).expect("state JSON");
    (run, state)
}

/// `linetrace view TRACE --size 600x400 --screenshot PNG`, to add to.
fn small_screenshot(trace: &Path, png: &Path) -> std::process::Command {
    let mut cmd = linetrace();
    cmd.arg("view").arg(trace).args(["--size", "600x400", "--screenshot"]).arg(png);
    cmd
}

/// Without `XDG_RUNTIME_DIR`, the viewer makes one of its own: one
/// directory per user, private, reused by every run (a directory per run
/// used to pile up in /tmp, hundreds after a test run).
#[test]
fn runs_without_a_runtime_dir_share_one_private_dir() {
    use std::os::unix::fs::PermissionsExt;
    use trace_rt::format::{Metadata, TraceWriter, Trailer};
    let trace = trace_path("runtime-dir");
    let w = TraceWriter::new(std::fs::File::create(&trace).expect("create"), &Metadata::new("test")).expect("header");
    w.finish(&Trailer::default()).expect("finish");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("runtime-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("tmp");
    for run in 0..2 {
        let png_path = trace.with_extension(format!("{run}.png"));
        let mut cmd = small_screenshot(&trace, &png_path);
        cmd.env("TMPDIR", &tmp).env_remove("XDG_RUNTIME_DIR").env_remove("DISPLAY").env_remove("WAYLAND_DISPLAY");
        let run = run_bounded(cmd, std::time::Duration::from_secs(120));
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    }
    let left: Vec<_> = std::fs::read_dir(&tmp).expect("read tmp").map(|e| e.expect("entry").path()).collect();
    assert_eq!(left.len(), 1, "two runs left {left:?}");
    let name = left[0].file_name().and_then(|n| n.to_str()).unwrap_or_default();
    assert!(name.starts_with("linetrace-runtime-"), "{name}");
    let mode = std::fs::metadata(&left[0]).expect("runtime dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{name} has mode {mode:o}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A copy of `trace` without its last 4 bytes, inside its end chunk (a
/// file copied in part): every event is there, the status says "cut".
fn cut_short(trace: &Path, name: &str) -> PathBuf {
    let bytes = std::fs::read(trace).expect("trace");
    let cut = trace_path(name);
    std::fs::write(&cut, &bytes[..bytes.len() - 4]).expect("cut copy");
    cut
}

/// The compare and allocation views say when a trace is cut, as the main
/// view does: its picture holds only part of the run.
#[test]
fn a_cut_trace_says_so_in_every_view() {
    let whole = fixture("array_sweep_work.lntrace");
    let cut = cut_short(&whole, "cut-compare");
    let shot = shoot(&whole, &[cut.to_str().expect("path")]);
    let status = shot.state["status"].as_str().unwrap_or_default().to_string();
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 2, "{status}");
    assert!(!lines[0].contains("truncated"), "A is whole: {status}");
    assert!(lines[1].starts_with("B:") && lines[1].contains("truncated"), "{status}");

    let (heap, _) = heap_mix_allocations("cut-heap-whole");
    let cut = cut_short(&heap, "cut-heap");
    let shot = shoot(&cut, &["--allocations"]);
    let status = shot.state["status"].as_str().unwrap_or_default().to_string();
    assert!(status.contains("truncated") && !status.contains(" 0 allocation events"), "{status}");
}

/// `view` of a trace of `record --allocations` opens the allocation view
/// unasked: the main view would only say "no memory reads".
#[test]
fn an_allocation_trace_opens_the_allocation_view() {
    let (trace, model) = heap_mix_allocations("heap-view-unasked");
    let (run, state) = small_shot_with_state(&trace, &trace.with_extension("png"), &[]);
    assert!(run.stderr.contains("a trace of `record --allocations` has no reads"), "{}", run.stderr);
    let status = state["status"].as_str().unwrap_or_default();
    let events = format!("{} allocation events", model.total.allocations);
    assert!(status.contains(&events), "{status}");
    // Its time axis is events: read columns asked for are an error that
    // says what to use (they were ignored), whether or not the view was
    // asked for; so is --stats, whose panel it always shows (ignored when
    // the view was implied; clap refuses it with --allocations).
    let columns_refused = "--columns 0..10: the allocations view has no read columns";
    for (asked, option, refused) in [
        (&[][..], &["--columns", "0..10"][..], columns_refused),
        (&["--allocations"][..], &["--columns", "0..10"][..], columns_refused),
        (&[][..], &["--stats"][..], "--stats: this trace opens the allocations view"),
        (&["--allocations"][..], &["--stats"][..], "the argument '--allocations' cannot be used with '--stats'"),
    ] {
        let out = linetrace()
            .arg("view")
            .arg(&trace)
            .args(asked)
            .args(option)
            .arg("--screenshot")
            .arg(trace.with_extension("refused.png"))
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .output()
            .expect("linetrace runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{asked:?} {option:?}: {stderr}");
        assert!(stderr.contains(refused), "{asked:?} {option:?}: {stderr}");
        assert!(!trace.with_extension("refused.png").exists(), "{asked:?} {option:?}: drew a picture");
    }
}

/// `record --view` with no display fails before the recording (which may
/// be long), not after it: the program does not run, no trace is left,
/// and the message says how to record and draw offscreen.
#[test]
fn record_view_without_a_display_fails_before_recording() {
    let trace = trace_path("record-view-no-display");
    let out = linetrace()
        .args(["record", "--view", "-f", "work", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(fixture("array_sweep"))
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("linetrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("record --view: no display") && stderr.contains("--screenshot OUT.png"), "{stderr}");
    assert!(!stderr.contains("traced"), "the recording ran: {stderr}");
    assert!(out.stdout.is_empty(), "the program ran: {}", String::from_utf8_lossy(&out.stdout));
    assert!(!trace.exists() && !trace.with_extension("lntrace.partial").exists());
}

/// README's first command: `demo` builds the example (or, with no gcc on
/// PATH, takes the prebuilt one), records `work`, prints the per-line
/// table and, with no display, draws the viewer offscreen.
#[test]
fn the_demo_draws_its_picture_with_and_without_gcc() {
    let xvfb = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("Xvfb")).find(|p| p.is_file()))
        .expect("Xvfb on PATH");
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("demo-{}", std::process::id()));
    // A PATH with Xvfb and nothing else: no gcc.
    let no_gcc = scratch.join("bin");
    std::fs::create_dir_all(&no_gcc).expect("bin dir");
    let _ = std::os::unix::fs::symlink(&xvfb, no_gcc.join("Xvfb"));
    for (name, path) in [("gcc", std::env::var_os("PATH").unwrap_or_default()), ("prebuilt", no_gcc.into_os_string())] {
        let dir = scratch.join(name);
        let out = linetrace()
            .args(["demo", "--screenshot", "--dir"])
            .arg(&dir)
            .env("PATH", &path)
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .output()
            .expect("demo runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(stdout.lines().any(|l| l.ends_with("array_sweep.c:7")), "{name}: no row of line 7 in {stdout}");
        assert_eq!(stderr.contains("no gcc here"), name == "prebuilt", "{name}: {stderr}");
        let png = dir.join("array_sweep_work.png");
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).expect("the demo's PNG")));
        let mut reader = decoder.read_info().expect("png header");
        let mut rgb = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut rgb).expect("png data");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        // The sweep's lines are green (bytes read): a good part of the picture.
        let green = rgb.chunks_exact(3).filter(|p| p[1] > 150 && p[0] < 100 && p[2] < 150).count();
        assert!(green > rgb.len() / 3 / 10, "{name}: {green} green pixels");
    }
}

/// The window says why code shows as ?? (the program was deleted after
/// the recording), as the command line does, instead of "??" alone.
#[test]
fn the_status_line_says_why_code_shows_as_question_marks() {
    let program = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gone-{}", std::process::id()));
    std::fs::copy(fixture("array_sweep"), &program).expect("copy");
    let trace = trace_path("program-gone");
    let out = record(&program, "work", &[], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(&program).expect("delete the program");
    let (_, state) = small_shot_with_state(&trace, &trace.with_extension("png"), &[]);
    let status = state["status"].as_str().unwrap_or_default();
    let why = format!("cannot read {}", program.display());
    assert!(status.contains(&why) && status.contains("its code shows as ??"), "{status}");
}

/// A screenshot's `--hover` at a point with nothing under it fails the run
/// and says why, as `at` does, in each of the three views: before, the
/// single view saved the error as its tooltip and exited 0, and the
/// compare and allocations views waited for a tooltip for ten minutes
/// before they gave up with "the picture was not ready".
#[test]
fn a_hover_with_nothing_under_it_fails_the_screenshot() {
    let sweep = fixture("array_sweep_work.lntrace");
    let columns = Model::decode(&sweep, &DecodeOptions::default(), &mut |_| {}).expect("decode").columns;
    let (heap_trace, heap) = heap_mix_allocations("heap-mix-hover-nothing");
    let events = heap.total.allocations;
    let (sweep, heap_trace) = (sweep.to_str().expect("path"), heap_trace.to_str().expect("path"));
    let past = columns.to_string();
    let past_events = (events + 10).to_string();
    let cases: [(Vec<&str>, String); 6] = [
        (
            vec![sweep, "--hover", &past],
            format!("--hover {columns}: invalid setting: column {columns} is past the trace's {columns} columns"),
        ),
        (
            vec![sweep, "--hover", "100,100000"],
            "--hover 100,100000: invalid setting: row 100000 is empty at column 100".into(),
        ),
        (
            vec![sweep, sweep, "--hover", &past],
            format!("--hover {columns}: column {columns} is past A's {columns} columns"),
        ),
        (vec![sweep, "--allocations", "--hover", "3"], "--hover 3: this trace has no heap blocks to hover".into()),
        (
            vec![heap_trace, "--hover", &past_events],
            format!("--hover {past_events}: {past_events} is past the trace's {events} allocation events"),
        ),
        (vec![heap_trace, "--hover", "10,5000"], "--hover 10,5000: pixel row 5000 is below the picture's".into()),
    ];
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer");
    std::fs::create_dir_all(&dir).expect("dir");
    for (i, (args, message)) in cases.iter().enumerate() {
        let png = dir.join(format!("hover-nothing-{}-{i}.png", std::process::id()));
        let mut cmd = linetrace();
        cmd.arg("view").args(args).args(["--size", "1000x600", "--screenshot"]).arg(&png).env_remove("DISPLAY");
        let run = run_bounded(cmd, std::time::Duration::from_secs(120));
        assert!(!run.timed_out, "{args:?}: still waiting after 120 s");
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(message.as_str()), "{args:?}: wanted {message:?} in {}", run.stderr);
        assert!(!png.exists(), "{args:?}: no picture of a point that is not there");
    }
}

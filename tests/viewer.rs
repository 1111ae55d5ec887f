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
    let png_path = dir.join(format!("{stem}-{}.png", extra.join("").replace([',', '.'], "_")));
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

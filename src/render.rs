//! `linetrace render`: draw a trace to an image file.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use decoder::raster::{Image, Picture, RenderOptions};
use decoder::symbols::Symbolizer;
use embedded_graphics::mono_font::{MonoTextStyle, ascii::FONT_6X10};
use embedded_graphics::pixelcolor::Rgb888;
use embedded_graphics::prelude::*;
use embedded_graphics::text::{Baseline, Text};

use crate::cli::{self, RenderArgs};
use crate::output::{PendingOutput, Replace};
use crate::progress::{LazyProgress, decode};

/// Image formats `render` writes, by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Png,
    Jpeg,
}

impl Format {
    fn of(path: &Path) -> Result<Format> {
        let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        match ext.as_str() {
            "png" => Ok(Format::Png),
            "jpg" | "jpeg" => Ok(Format::Jpeg),
            "" => bail!("{}: give the output an extension, .png or .jpg", path.display()),
            other => bail!("{}: cannot write .{other} images; use .png or .jpg", path.display()),
        }
    }
}

/// Draws the flamegraph and the bitmap of a trace to an image file.
pub fn render(mut args: RenderArgs) -> Result<()> {
    if let Some((width, height)) = args.size {
        (args.width, args.height) = (width, height);
    }
    let columns =
        args.columns.as_deref().map(cli::parse_columns).transpose().map_err(|e| anyhow::anyhow!("--columns {e}"))?;
    if !args.allocations {
        let metadata = crate::progress::header(&args.file)?;
        crate::heap::refuse_heap_options_for_reads(
            &args.heap_options_given(),
            &args.file,
            metadata.as_ref(),
            "render",
        )?;
    }
    let format = Format::of(&args.output)?;
    let replace = if args.force { Replace::Anything } else { Replace::NotTracesOrPrograms };
    let out = PendingOutput::new(&args.output, &[&args.file], replace)?;
    let model = decode(&args.file, &args.decode)?;
    let symbols = Symbolizer::with_paths(&model.modules, args.decode.symbol_paths());
    if args.allocations || crate::heap::heap_implied(&model.metadata, "render") {
        return render_allocations(&args, &model, &symbols, out, format);
    }
    if model.columns == 0 {
        bail!(
            "{} has no memory reads to draw (a trace of `record --allocations`? draw it with --allocations)",
            args.file.display()
        );
    }
    let options = RenderOptions {
        width: args.width,
        height: args.height,
        columns,
        alpha: args.alpha,
        colour_by: args.colour_by.into(),
    };
    let mut bar = LazyProgress::new("drawing");
    let name = |pc: u64| symbols.locate(pc).function.clone();
    let mut picture = decoder::raster::render(&model, &options, &name, &mut |done, total| {
        bar.update(done, total);
        true
    })?;
    bar.finish();
    draw_labels(&mut picture, &symbols);
    let image = picture.image;
    for w in symbols.warnings() {
        eprintln!("linetrace: warning: {w}");
    }
    let file = out.create()?;
    let written = write_image(&image, format, std::io::BufWriter::new(file));
    if let Err(e) = written {
        out.abandon();
        return Err(e.context(format!("writing {}", args.output.display())));
    }
    out.commit()?;
    if let Some(status) = model.status_note() {
        eprintln!("linetrace: note: the trace is {status}");
    }
    // The columns drawn (it said the trace's, with --columns too).
    let drawn = match columns {
        Some((a, b)) => format!("columns {a}..{b} of {}", model.columns),
        None => format!("{} columns", model.columns),
    };
    eprintln!("linetrace: wrote {} ({}x{}, {drawn})", args.output.display(), image.width, image.height);
    Ok(())
}

/// `render --allocations`: the time x address picture of the heap.
fn render_allocations(
    args: &RenderArgs,
    model: &decoder::model::Model,
    symbols: &Symbolizer,
    out: PendingOutput,
    format: Format,
) -> Result<()> {
    if !model.allocations.iter().any(decoder::heap::is_heap_block) {
        out.abandon();
        bail!("{} has no heap blocks to draw", args.file.display());
    }
    let view = decoder::heap_raster::HeapView {
        width: args.width,
        height: args.height,
        alpha: args.alpha,
        colour_by: args.heap_colour.unwrap_or(cli::HeapColourArg::Function).into(),
        cushion: args.cushion.unwrap_or(cli::CushionArg::Parabolic).into(),
        clock: if args.wall_clock { decoder::heap_raster::Clock::Wall } else { decoder::heap_raster::Clock::Events },
        range: None,
        rows: match args.addresses {
            None => None,
            Some((lo, hi)) => match decoder::heap_raster::address_rows(&model.allocations, args.height, lo, hi) {
                Some(rows) => Some(rows),
                None => {
                    out.abandon();
                    bail!("no heap block of {} lies in {lo:#x}..{hi:#x}", args.file.display());
                }
            },
        },
        class: None,
    };
    let name = |pc: u64| symbols.locate(pc).function.clone();
    let style = MonoTextStyle::new(&FONT_6X10, Rgb888::WHITE);
    if let Some(layout) = args.correlate.bins {
        let drawn = decoder::heap_bins::render_bins(
            &Default::default(),
            &model.allocations,
            model.total.allocations,
            &view,
            layout.into(),
            &name,
        );
        let mut bins = match drawn {
            Ok(bins) => bins,
            Err(e) => {
                out.abandon();
                bail!("cannot draw the size-class views of {}: {e}", args.file.display());
            }
        };
        if let Some(cell) = bins.cells.first() {
            warn_cursors_outside(&args.correlate.cursors, &cell.picture.axis);
        }
        decoder::heap_bins::draw_bin_cursors(&mut bins, &args.correlate.cursors, args.correlate.cursor_strength);
        let labels: Vec<(Point, String)> = bins
            .cells
            .iter()
            .map(|c| {
                (
                    Point::new(c.left as i32 + 3, c.top as i32 + 1),
                    c.class().map_or("all sizes", |k| k.name()).to_string(),
                )
            })
            .collect();
        let mut canvas = Canvas(&mut bins.image);
        for (at, text) in labels {
            let _ = Text::with_baseline(&text, at, style, Baseline::Top).draw(&mut canvas);
        }
        write_heap_image(&bins.image, args, out, format)?;
        let axis = bins.cells.first().map(|c| axis_label(&c.picture.axis)).unwrap_or_default();
        eprintln!(
            "linetrace: wrote {} ({}x{}, {} size-class bins, {axis})",
            args.output.display(),
            bins.image.width,
            bins.image.height,
            bins.cells.len()
        );
        return Ok(());
    }
    let mut picture = decoder::heap_raster::render_heap(&model.allocations, model.total.allocations, &view, &name);
    warn_cursors_outside(&args.correlate.cursors, &picture.axis);
    let (w, h) = (picture.image.width, picture.image.height);
    let whole = decoder::heap_bins::PixelRect { left: 0, top: 0, right: w, bottom: h };
    let (cursors, strength) = (&args.correlate.cursors, args.correlate.cursor_strength);
    decoder::heap_bins::draw_window_cursors(&mut picture.image, whole, &picture.window, cursors, strength);
    // Each region's first address in view, where there is room for it (a
    // band cut by the top of the picture: the address at its top row).
    let rows = f64::from(picture.occupancy_top);
    let labels: Vec<(i32, u64)> = picture
        .bands
        .iter()
        .filter(|b| b.bottom.min(rows) - b.top.max(0.0) >= 12.0)
        .map(|b| {
            let first = if b.top < 0.0 { picture.address_at(0.0).unwrap_or(b.start) } else { b.start };
            (b.top.max(0.0) as i32 + 1, first)
        })
        .collect();
    let shown = picture.visible_addresses();
    let mut canvas = Canvas(&mut picture.image);
    for (y, address) in labels {
        let _ = Text::with_baseline(&format!("{address:#x}"), Point::new(3, y), style, Baseline::Top).draw(&mut canvas);
    }
    let axis = axis_label(&picture.axis);
    if args.wall_clock && picture.axis.clock != decoder::heap_raster::Clock::Wall {
        eprintln!("linetrace: note: the calls were not timed (a ptrace trace): x counts allocation events");
    }
    let label = format!("live bytes over {axis} (peak = full)");
    let _ = Text::with_baseline(&label, Point::new(3, picture.occupancy_top as i32 + 5), style, Baseline::Top)
        .draw(&mut canvas);
    write_heap_image(&picture.image, args, out, format)?;
    eprintln!(
        "linetrace: wrote {} ({}x{}, {} heap regions, {axis}{})",
        args.output.display(),
        picture.image.width,
        picture.image.height,
        picture.bands.len(),
        match (args.addresses, shown) {
            (Some(_), Some((lo, hi))) => format!(", addresses {lo:#x}..{hi:#x}"),
            _ => String::new(),
        }
    );
    Ok(())
}

/// Writes a heap picture to the output.
fn write_heap_image(image: &Image, args: &RenderArgs, out: PendingOutput, format: Format) -> Result<()> {
    let file = out.create()?;
    if let Err(e) = write_image(image, format, std::io::BufWriter::new(file)) {
        out.abandon();
        return Err(e.context(format!("writing {}", args.output.display())));
    }
    out.commit()
}

/// Says which `--cursor` positions fall outside the run (they draw
/// nothing, which would otherwise look like a missing cursor).
fn warn_cursors_outside(cursors: &[f64], axis: &decoder::heap_raster::TimeAxis) {
    for &t in cursors.iter().filter(|&&t| !(0.0..=axis.extent).contains(&t)) {
        eprintln!("linetrace: note: --cursor {t} is outside the run (0..{}), nothing drawn for it", axis.extent);
    }
}

/// What the x axis of a heap picture spans, for people.
pub fn axis_label(axis: &decoder::heap_raster::TimeAxis) -> String {
    match axis.clock {
        decoder::heap_raster::Clock::Events => format!("{:.0} allocation events", axis.extent),
        decoder::heap_raster::Clock::Wall => format!("{:.3} s", axis.extent / 1e9),
    }
}

/// Writes function names into the flamegraph bars wide enough for them.
fn draw_labels(picture: &mut Picture, symbols: &Symbolizer) {
    if picture.bar_height < 11.0 {
        return;
    }
    let style = MonoTextStyle::new(&FONT_6X10, Rgb888::BLACK);
    let mut canvas = Canvas(&mut picture.image);
    // Of a frame, or of a run of calls of one function.
    for bar in decoder::raster::bar_labels(&picture.bars) {
        let room = ((bar.x1.min(f64::from(canvas.0.width)) - bar.x0.max(0.0)) as i64 - 4) / 6;
        if room < 3 {
            continue;
        }
        let Some(label) = bar.text_within(&symbols.locate(bar.function).function, room as usize, "..") else {
            continue;
        };
        let y0 = (f64::from(bar.depth) * picture.bar_height).round() as i32;
        let at = Point::new(bar.x0.max(0.0) as i32 + 2, y0 + ((picture.bar_height as i32 - 10) / 2).max(0));
        let _ = Text::with_baseline(&label, at, style, Baseline::Top).draw(&mut canvas);
    }
}

/// embedded-graphics drawing onto an [`Image`].
struct Canvas<'a>(&'a mut Image);

impl OriginDimensions for Canvas<'_> {
    fn size(&self) -> Size {
        Size::new(self.0.width, self.0.height)
    }
}

impl DrawTarget for Canvas<'_> {
    type Color = Rgb888;
    type Error = std::convert::Infallible;

    fn draw_iter<I: IntoIterator<Item = Pixel<Rgb888>>>(&mut self, pixels: I) -> Result<(), Self::Error> {
        for Pixel(p, c) in pixels {
            if p.x >= 0 && p.y >= 0 {
                let colour = [f64::from(c.r()) / 255.0, f64::from(c.g()) / 255.0, f64::from(c.b()) / 255.0];
                self.0.set(p.x as u32, p.y as u32, colour);
            }
        }
        Ok(())
    }
}

/// Encodes `image` in `format`.
fn write_image(image: &Image, format: Format, mut out: impl Write) -> Result<()> {
    match format {
        Format::Png => {
            let mut encoder = png::Encoder::new(&mut out, image.width, image.height);
            encoder.set_color(png::ColorType::Rgba);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header()?;
            writer.write_image_data(&image.rgba)?;
            writer.finish()?;
        }
        Format::Jpeg => {
            let (w, h) = (u16::try_from(image.width), u16::try_from(image.height));
            let (Ok(w), Ok(h)) = (w, h) else { bail!("JPEG images are at most 65535 pixels wide and high") };
            let mut bytes = Vec::new();
            jpeg_encoder::Encoder::new(&mut bytes, 90)
                .encode(&image.rgba, w, h, jpeg_encoder::ColorType::Rgba)
                .context("encoding JPEG")?;
            out.write_all(&bytes)?;
        }
    }
    out.flush()?;
    Ok(())
}

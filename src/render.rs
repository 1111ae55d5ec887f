//! `linetrace render`: draw a trace to an image file.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use decoder::raster::{Image, RenderOptions};
use decoder::symbols::Symbolizer;

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
pub fn render(args: RenderArgs) -> Result<()> {
    let columns = args.columns.as_deref().map(cli::parse_columns).transpose().map_err(anyhow::Error::msg)?;
    let format = Format::of(&args.output)?;
    let replace = if args.force { Replace::Anything } else { Replace::NotTracesOrPrograms };
    let out = PendingOutput::new(&args.output, &[&args.file], replace)?;
    let model = decode(&args.file, &args.decode)?;
    if model.columns == 0 {
        bail!("{} has no memory reads to draw", args.file.display());
    }
    let symbols = Symbolizer::with_paths(&model.modules, args.decode.symbol_paths());
    let options = RenderOptions { width: args.width, height: args.height, columns, alpha: args.alpha };
    let mut bar = LazyProgress::new("drawing");
    let image = decoder::raster::render(&model, &symbols, &options, &mut |done, total| bar.update(done, total))?;
    bar.finish();
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
    eprintln!(
        "linetrace: wrote {} ({}x{}, {} columns)",
        args.output.display(),
        image.width,
        image.height,
        model.columns
    );
    Ok(())
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

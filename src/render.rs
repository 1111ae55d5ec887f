//! `linetrace render`: draw a trace to PNG.

use anyhow::{Context, Result};
use decoder::raster::RenderOptions;
use decoder::symbols::Symbolizer;

use crate::cli::{self, RenderArgs};
use crate::progress::{LazyProgress, decode};

/// Draws the flamegraph and the bitmap of a trace to a PNG file.
pub fn render(args: RenderArgs) -> Result<()> {
    let columns = args.columns.as_deref().map(cli::parse_columns).transpose().map_err(anyhow::Error::msg)?;
    let model = decode(&args.file, &args.decode)?;
    if model.columns == 0 {
        anyhow::bail!("{} has no memory reads to draw", args.file.display());
    }
    let mut symbols = Symbolizer::new(&model.modules);
    let options = RenderOptions { width: args.width, height: args.height, columns, alpha: args.alpha };
    let mut bar = LazyProgress::new("drawing");
    let image = decoder::raster::render(&model, &mut symbols, &options, &mut |done, total| bar.update(done, total))?;
    bar.finish();
    for w in symbols.warnings() {
        eprintln!("linetrace: warning: {w}");
    }
    let file = std::fs::File::create(&args.output).with_context(|| format!("creating {}", args.output.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), image.width, image.height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().with_context(|| format!("writing {}", args.output.display()))?;
    writer.write_image_data(&image.rgba).with_context(|| format!("writing {}", args.output.display()))?;
    writer.finish().with_context(|| format!("writing {}", args.output.display()))?;
    if model.end.is_truncated() {
        eprintln!("linetrace: note: the trace is {}", model.end.describe());
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

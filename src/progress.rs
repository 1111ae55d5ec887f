//! Progress bars on stderr for long work, and decoding with one.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use decoder::model::Model;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar on stderr that only appears once work has taken more
/// than a second (short runs stay quiet).
pub struct LazyProgress {
    label: &'static str,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl LazyProgress {
    /// A bar labelled `label`, not shown yet.
    pub fn new(label: &'static str) -> Self {
        LazyProgress { label, started: Instant::now(), bar: None }
    }

    /// Reports `done` of `total`.
    pub fn update(&mut self, done: u64, total: u64) {
        if self.bar.is_none() && self.started.elapsed() > Duration::from_secs(1) {
            let bar = ProgressBar::new(total);
            let template = format!("{} {{bar:40}} {{percent}}% ({{eta}} left)", self.label);
            bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()));
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    /// Removes the bar, if it was shown.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The length of the trace file `file`; an error that says what is wrong
/// when it is missing or not a file (a directory would otherwise read as
/// an empty trace).
pub fn trace_file_len(file: &Path) -> Result<u64> {
    let meta = std::fs::metadata(file).with_context(|| format!("reading {}", file.display()))?;
    if meta.is_dir() {
        anyhow::bail!("{} is a directory, not a trace file", file.display());
    }
    Ok(meta.len())
}

/// [`trace_file_len`] of a trace read more than once — decoded, then read
/// again for the chunks a picture replays, the index of its threads, its
/// header — which a pipe cannot give: an error that says so, where
/// the second read of a pipe said "bad magic" (`report <(zstdcat t.lntrace.zst)`).
pub fn rereadable_trace_len(file: &Path) -> Result<u64> {
    use std::os::unix::fs::FileTypeExt;
    let len = trace_file_len(file)?;
    let kind = std::fs::metadata(file).with_context(|| format!("reading {}", file.display()))?.file_type();
    let what = if kind.is_fifo() {
        "a pipe"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        return Ok(len);
    };
    anyhow::bail!(
        "{} is {what}, not a file: a trace is read more than once (decoded, then read again as it is drawn), \
         so save it to a file first (only `dump` reads a stream)",
        file.display()
    )
}

/// The metadata in the header of `trace`, for commands that look at it
/// before decoding; `None` for a file that has none, left to the decoding,
/// which says what is wrong with it. A pipe, a device or a socket is an
/// error first ([`rereadable_trace_len`]): the header's read would use up
/// what the decoding needs, and opening a pipe waits for a writer.
pub fn header(trace: &Path) -> Result<Option<trace_rt::format::Metadata>> {
    rereadable_trace_len(trace)?;
    let Ok(file) = std::fs::File::open(trace) else { return Ok(None) };
    Ok(trace_rt::format::TraceReader::new(std::io::BufReader::new(file)).ok().map(|reader| reader.metadata().clone()))
}

/// Decodes a trace, with a progress bar when that takes over a second.
pub fn decode(file: &Path, args: &crate::cli::DecodeArgs) -> Result<Model> {
    let total = rereadable_trace_len(file)?;
    let mut bar = LazyProgress::new("decoding");
    let model = Model::decode(file, &args.options(), &mut |done| bar.update(done, total))
        .with_context(|| format!("decoding {}", file.display()));
    bar.finish();
    model
}

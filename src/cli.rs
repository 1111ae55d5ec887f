//! Command-line interface: clap types only. Each subcommand's arguments are
//! turned into the plain options structs of the library crates that do the
//! work, so no library crate sees clap.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// linetrace shows how a program touches memory, at cache-line granularity.
#[derive(Debug, Parser)]
#[command(
    name = "linetrace",
    version,
    about,
    long_about = None,
    after_help = "Example:\n  linetrace record -f work -o work.lntrace -- ./program arg\n  linetrace render work.lntrace -o work.png\n  linetrace report work.lntrace --by line"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a program and record every memory access of one function.
    ///
    /// The program starts under ptrace. When a thread enters the function,
    /// linetrace single-steps that thread through the whole call, callees
    /// included, until it returns to its caller, recording each memory read
    /// and write (address, size, instruction), calls and returns, and the
    /// allocator calls it makes (malloc, calloc, realloc, free,
    /// posix_memalign, aligned_alloc, memalign: run natively and recorded with
    /// arguments and result; mmap/munmap system calls too). Every invocation
    /// is traced unless --max-invocations limits it.
    ///
    /// Threads: only the thread that entered the function is stepped; other
    /// threads run freely, and an invocation another thread starts meanwhile
    /// is not traced.
    ///
    /// The program's stdin, stdout and stderr pass through, and linetrace
    /// exits with its exit code (128 + signal if it was killed). It runs with
    /// LD_BIND_NOW=1 so the dynamic linker's lazy binding is not traced.
    /// Single-stepping is slow (tens of thousands of instructions per
    /// second): trace small functions. Ctrl-C kills the program and keeps a
    /// readable trace marked truncated.
    #[command(verbatim_doc_comment)]
    Record(RecordArgs),
    /// Print totals and locality metrics of a trace, and a table by
    /// function, source line or allocation site.
    ///
    /// Metrics: line fetches are insertions into the working set; bytes read
    /// per fetch and distinct bytes per fetch say how much of each fetched
    /// line was used (utilisation = distinct / line size); the reuse
    /// histogram counts reads by LRU stack distance in distinct lines.
    Report(ReportArgs),
    /// Draw a trace to PNG: the flamegraph on top, the cache-line bitmap
    /// beneath on the same x axis (one column per memory read).
    ///
    /// Bitmap: one row per cache line in the working set, sorted by address;
    /// purple = nothing read from the line yet, green = a line's worth of
    /// bytes read; colours fade as the line ages; faint blue bands are
    /// recorded allocations.
    Render(RenderArgs),
    /// Print every event of a trace, one per line (for debugging and scripts).
    Dump(DumpArgs),
}

/// Arguments of `record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Function to trace: exact (demangled) name, or a unique substring.
    #[arg(short, long, default_value = "main")]
    pub function: String,
    /// Trace file to write.
    #[arg(short, long, default_value = "trace.lntrace")]
    pub output: PathBuf,
    /// Trace at most N invocations of the function.
    #[arg(long, value_name = "N")]
    pub max_invocations: Option<u32>,
    /// Do not print progress to stderr.
    #[arg(short, long)]
    pub quiet: bool,
    /// The program to run, then its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM [ARGS]...")]
    pub command: Vec<OsString>,
}

/// How to decode a trace: shared by `report` and `render`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// Cache line size in bytes (a power of two from 8 to 128).
    #[arg(long, default_value_t = 64)]
    pub line_size: u32,
    /// Misses a line survives untouched before it leaves the working set
    /// (512 lines of 64 bytes = a 32 KiB L1).
    #[arg(long, default_value_t = 512)]
    pub max_age: u32,
    /// Hard cap on working-set rows; the least recently used line leaves
    /// first (default: --max-age).
    #[arg(long)]
    pub max_rows: Option<u32>,
}

/// What `report` groups its table by.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ReportGrouping {
    /// Containing function (symbol).
    Function,
    /// Source file and line.
    Line,
    /// Allocation call site.
    Allocation,
}

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Trace file to read.
    pub file: PathBuf,
    /// Add a table grouped by this.
    #[arg(long, value_enum)]
    pub by: Option<ReportGrouping>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Rows of the table to print (text only).
    #[arg(long, default_value_t = 30)]
    pub limit: usize,
    /// Decoding settings.
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Arguments of `render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Trace file to read.
    pub file: PathBuf,
    /// PNG file to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Image width in pixels.
    #[arg(long, default_value_t = 1600)]
    pub width: u32,
    /// Image height in pixels.
    #[arg(long, default_value_t = 800)]
    pub height: u32,
    /// Column range A..B to draw (default: the whole trace).
    #[arg(long, value_name = "A..B")]
    pub columns: Option<String>,
    /// Anti-aliasing exponent: 1 is a box filter, below 1 keeps isolated
    /// accesses visible when zoomed out, above 1 filters them.
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f64,
    /// Decoding settings.
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Arguments of `dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Trace file to read.
    pub file: PathBuf,
    /// Stop after N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

impl DecodeArgs {
    /// The decoder's options.
    pub fn options(&self) -> decoder::model::DecodeOptions {
        decoder::model::DecodeOptions {
            working_set: decoder::working_set::WorkingSetConfig {
                line_size: self.line_size,
                max_age: self.max_age,
                max_rows: self.max_rows.unwrap_or(self.max_age),
            },
            ..Default::default()
        }
    }
}

/// Parses `A..B` into a column range.
pub fn parse_columns(text: &str) -> Result<(u64, u64), String> {
    let (a, b) = text.split_once("..").ok_or_else(|| format!("--columns {text:?}: expected A..B"))?;
    let parse = |s: &str| s.trim().parse::<u64>().map_err(|_| format!("--columns {text:?}: {s:?} is not a number"));
    let (a, b) = (parse(a)?, parse(b)?);
    if a >= b {
        return Err(format!("--columns {text:?}: the range is empty"));
    }
    Ok((a, b))
}

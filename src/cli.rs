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
    /// linetrace follows that thread through the whole call, callees
    /// included, until it returns to its caller, recording each memory read
    /// and write (address, size, instruction), calls and returns, and the
    /// allocator calls it makes (malloc, calloc, realloc, free,
    /// posix_memalign, aligned_alloc, memalign: run natively and recorded with
    /// arguments and result; mmap/munmap system calls too). Every invocation
    /// is traced unless --max-invocations limits it.
    ///
    /// Functions in shared libraries: `-f strlen` finds libc's strlen once
    /// the libraries are loaded; `-f libc.so.6:strlen` names the module. An
    /// IFUNC (strlen, memcpy: glibc picks an implementation for the CPU at
    /// load time) is traced in the implementation the program really calls.
    ///
    /// Threads: with the rewrite backend every thread that enters the
    /// function is traced, each on its own stream, at the same time as the
    /// others. The ptrace backend single-steps one thread at a time: entries
    /// by other threads meanwhile are not traced; they are counted and
    /// reported. Threads created inside the traced call run natively (they
    /// are traced when they enter the function themselves).
    ///
    /// The program's stdin, stdout and stderr pass through, and linetrace
    /// exits with its exit code (128 + signal if it was killed). It runs with
    /// LD_BIND_NOW=1 so the dynamic linker's lazy binding is not traced.
    /// Signals the program raises itself (SIGTRAP included) are delivered.
    /// An exec ends tracing: the new program runs untraced.
    ///
    /// Backends (--backend): `rewrite` (default) runs the call as
    /// instrumented copies of its code, translated block by block into a
    /// code cache inside the program: tens of millions of accesses per
    /// second. `ptrace` single-steps every instruction: tens of thousands
    /// per second, the reference (both give the same events).
    ///
    /// The trace is written to OUTPUT.partial and renamed to OUTPUT when
    /// the recording ends. Ctrl-C (or SIGTERM, SIGHUP) kills the program
    /// and keeps a readable trace marked truncated (exit code 128 + the
    /// signal: 130 for Ctrl-C). If linetrace itself is killed outright,
    /// OUTPUT.partial stays, readable up to the last second. A full disk
    /// stops the recording with an error and keeps OUTPUT.partial too.
    #[command(verbatim_doc_comment)]
    Record(RecordArgs),
    /// Print totals and locality metrics of a trace, and a table by
    /// function, source line or allocation site.
    ///
    /// Metrics: line fetches are insertions into the working set; bytes read
    /// per fetch and distinct bytes per fetch say how much of each fetched
    /// line was used (utilisation = distinct / line size); the reuse
    /// histogram counts reads by LRU stack distance in distinct lines.
    ///
    /// Counting rules: a read-modify-write instruction (`addl $1,(%rdi)`)
    /// counts as one read and one write (cachegrind counts it as a read
    /// only); a rep-string instruction (`rep movsb`) is one access over its
    /// whole range (cachegrind counts one per iteration); each element of a
    /// gather is a read. Compiler fragments (`f.cold`, `f.part.0`) count in
    /// their function's row, shown as `f [cold]`.
    Report(ReportArgs),
    /// Draw a trace to PNG: the flamegraph on top, the cache-line bitmap
    /// beneath on the same x axis (one column per memory read).
    ///
    /// Bitmap: one row per cache line in the working set, sorted by address;
    /// purple = nothing read from the line yet, green = a line's worth of
    /// bytes read; colours fade as the line ages; faint blue bands are
    /// recorded allocations. The format follows the output's extension:
    /// .png or .jpg/.jpeg.
    Render(RenderArgs),
    /// Open the viewer: the flamegraph over the cache-line bitmap, with
    /// tooltips, source view, search, highlights and statistics.
    ///
    /// With two traces (`view A B`) it compares them: A above B, linked
    /// navigation, a differential flamegraph and `diff`'s tables.
    ///
    /// With --screenshot it draws offscreen instead, saves a PNG and exits
    /// (starting Xvfb itself when there is no display). Keys: press ? in the
    /// window.
    View(ViewArgs),
    /// Build the bundled example, record it and open the viewer (with no
    /// display: write a screenshot and say where).
    Demo(DemoArgs),
    /// Print what is at one point of the picture: the frame stack at a
    /// column, the read that made it (pc, function, inlined frames,
    /// file:line, address, size), the cache line at a row (bytes read,
    /// distinct bytes, age) and the allocation holding it — what hovering
    /// that point in the viewer shows.
    ///
    /// For a trace of `record --allocations`, whose picture is the heap over
    /// allocation events: `--event N --address A` prints the block holding
    /// address A just after event N, as hovering the allocations view does.
    At(AtArgs),
    /// Print every event of a trace, one per line, for grep and scripts.
    ///
    /// Text: `THREAD EVENT key=value...`, hex addresses, e.g.
    ///   4242 access kind=read pc=0x401136 addr=0x404040 size=16 site=0
    ///   4242 call callsite=0x401150 target=0x401100 sp=0x7ffc...
    /// Events and their fields: access (kind pc addr size site; range=1 and
    /// elem, the element size, for a rep-string range), call and tailcall (callsite target sp), return
    /// (sp), alloc (fn size align in out callsite), invocation-start (index
    /// pc sp), invocation-end (index), invocation-skipped (pc), alloc-detail
    /// (usable time_ns: the allocator's usable size and the time of the alloc
    /// before it, from `record --allocations`), alloc-stack (stack: its
    /// callers, a string-table id), thread-start
    /// (parent), thread-exit (status), signal (signo pc addr), stepped
    /// (count), truncated (reason), exec (path, quoted). Lines starting with
    /// `#` are comments (how the file ends, damaged regions).
    ///
    /// --json prints one JSON object per line instead: {"thread":..,
    /// "event":"access", ...}, addresses as "0x..." strings (they do not fit
    /// a JSON number exactly), counts as numbers; the last line is
    /// {"event":"end", "status":..., "damage":[...]}.
    #[command(verbatim_doc_comment)]
    Dump(DumpArgs),
    /// Compare two traces (two builds, two layouts of the same function):
    /// metrics side by side with the ratio B/A, then functions (or source
    /// lines) matched by name, largest change of reads first.
    ///
    /// Functions are matched by demangled name, compiler fragments (.cold,
    /// .part.N, .isra, .constprop) folded into their function; a function
    /// in one trace only is listed as such. "share" is a row's total reads
    /// over its trace's reads. D1/LL misses come from the cache simulation
    /// (--d1, --ll), the same for both traces.
    ///
    /// Exit status: 0, or 1 when a --fail-if threshold is crossed (a CI
    /// regression gate), 2 on errors.
    Diff(DiffArgs),
    /// Write a trace in a format other tools open: chrome (trace-event
    /// JSON for Perfetto, Spall, chrome://tracing: a slice per call,
    /// timestamps in read columns, counter tracks for the working-set size,
    /// line fetches and bytes read per fetch), folded (stacks with weights
    /// for inferno / flamegraph.pl), speedscope, or csv (one row per
    /// access: column, thread, pc, function, file_line, address, line, size,
    /// kind; a write's column is that of the read after it, and a write
    /// after the last read has the number of columns).
    Export(ExportArgs),
}

/// Arguments of `export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Trace file to read.
    pub file: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// File to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Replace the output file even if it is a trace or a program.
    #[arg(long)]
    pub force: bool,
    /// What a folded stack's weight counts.
    #[arg(long, value_enum, default_value_t = ExportWeight::Reads)]
    pub weight: ExportWeight,
    /// Decoding settings.
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Export formats.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Chrome trace-event JSON.
    Chrome,
    /// Folded stacks (`a;b;c 42`).
    Folded,
    /// speedscope's JSON file format.
    Speedscope,
    /// Comma-separated values, one access per row (one block per row for a
    /// trace of `record --allocations`).
    Csv,
}

/// Weights of folded stacks.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportWeight {
    /// Memory reads.
    Reads,
    /// Memory writes.
    Writes,
    /// Lines inserted into the working set.
    Fetches,
    /// Reads that missed the simulated D1 (--d1).
    Misses,
}

/// Arguments of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline trace.
    pub a: PathBuf,
    /// The trace compared with it.
    pub b: PathBuf,
    /// Rows by function or by source line (file:line).
    #[arg(long, value_enum, default_value_t = DiffGrouping::Function)]
    pub by: DiffGrouping,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Rows to print (text).
    #[arg(long, default_value_t = 30)]
    pub limit: usize,
    /// Exit 1 when B changed by more than this: METRIC>+N% (grew) or
    /// METRIC<-N% (shrank), e.g. 'reads>+5%', 'd1_misses>+1%',
    /// 'utilisation<-10%', 'peak_live_bytes>+2%'. Metrics: instructions,
    /// reads, writes, bytes_read, lines, line_fetches, bytes_per_fetch,
    /// distinct_bytes_per_fetch, utilisation, d1_misses, ll_misses; and,
    /// when a trace recorded allocations (`record --allocations`, or those
    /// inside a traced function), allocator_calls, heap_blocks, heap_bytes,
    /// peak_live_bytes, peak_live_blocks, live_bytes_at_end, waste_bytes,
    /// reallocs_moved, mapped_bytes (as `report --allocations` counts
    /// them). Repeatable.
    #[arg(long = "fail-if", value_name = "CONDITION", value_parser = parse_threshold)]
    pub fail_if: Vec<decoder::diff::Threshold>,
    /// Decoding settings (both traces).
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// What `diff` groups rows by.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DiffGrouping {
    /// Containing function.
    Function,
    /// Source file and line.
    Line,
}

/// Parses a `--fail-if` condition.
fn parse_threshold(text: &str) -> Result<decoder::diff::Threshold, String> {
    decoder::diff::Threshold::parse(text)
}

/// `record --backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// Single-step with ptrace.
    Ptrace,
    /// Translated, instrumented code.
    Rewrite,
}

impl From<BackendArg> for instrument::Backend {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Ptrace => instrument::Backend::Ptrace,
            BackendArg::Rewrite => instrument::Backend::Rewrite,
        }
    }
}

/// Arguments of `record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Function to trace: exact (demangled) name, or a unique substring;
    /// `MODULE:NAME` looks in one library (`libc.so.6:strlen`).
    #[arg(short, long, default_value = "main")]
    pub function: String,
    /// Trace file to write (default: trace.lntrace, or trace.N.lntrace if
    /// that exists). An existing file is only replaced if it is a trace.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Replace the output file even if it is not a trace.
    #[arg(long)]
    pub force: bool,
    /// Trace at most N invocations of the function.
    #[arg(long, value_name = "N")]
    pub max_invocations: Option<u32>,
    /// How to record the function's accesses: `rewrite` runs the function
    /// as instrumented copies of its code from a code cache in the program
    /// (hundreds of times faster than ptrace; refuses programs that use the
    /// gs segment; a gather with a ZMM index vector is counted, not recorded
    /// per element; a signal that arrives inside the code added around an
    /// instruction is delivered at the next original instruction, and its
    /// handler sees original addresses in its ucontext); `ptrace` single-steps every instruction (about 70k
    /// instructions/s), the reference.
    #[arg(long, value_enum, default_value_t = BackendArg::Rewrite, conflicts_with = "allocations")]
    pub backend: BackendArg,
    /// Record the whole program's allocations instead of one function's
    /// accesses: every malloc/calloc/realloc/free/posix_memalign/
    /// aligned_alloc/memalign/valloc/pvalloc, C++ operator new/delete and
    /// mmap/munmap/mremap call of every thread, with arguments, result and
    /// calling instruction. The program runs natively with an agent
    /// preloaded (dynamically linked programs only); `report`, `render` and
    /// `view` show such a trace's heap (as with their --allocations).
    #[arg(long, conflicts_with_all = ["function", "max_invocations", "view"])]
    pub allocations: bool,
    /// With --allocations: the callers to record above each call's calling
    /// instruction (0 to 32), unwound from .eh_frame, so that leaks and
    /// heavy allocators show their call paths. The agent works out each
    /// return address's frame rule once and caches it (tens of
    /// nanoseconds a frame); frames it cannot follow (a CFA computed by an
    /// expression, e.g. a main that realigns its stack) are unwound by
    /// glibc's backtrace(), about a microsecond per call.
    #[arg(long, value_name = "N", default_value_t = 8, requires = "allocations", value_parser = clap::value_parser!(u8).range(0..=32))]
    pub alloc_stack: u8,
    /// With --allocations: a custom allocator function of the program to
    /// record too (repeat for each). NAME:size=ARGn[,count=ARGm][,arena=ARGk]
    /// returns a block of ARGn (times ARGm) bytes from the arena (pool)
    /// ARGk names; NAME:free[=ARGn] releases the block ARGn (default ARG1)
    /// points to; NAME:reset[=ARGk] releases the blocks of arena ARGk, or
    /// without it every block the custom allocators handed out. ARG1..ARG6
    /// are the integer arguments in registers. Their blocks are reported
    /// apart from malloc's (a pool's arena is itself a malloc block) and
    /// drawn over it. The agent patches the function's first bytes (about
    /// half a microsecond a call: every register and the vector state are
    /// kept); a function whose first instructions cannot be moved is
    /// refused with the reason.
    #[arg(long = "alloc-fn", value_name = "SPEC", requires = "allocations")]
    pub alloc_fn: Vec<instrument::alloc_hooks::AllocFnSpec>,
    /// Open the viewer on the trace when the recording ends.
    #[arg(long)]
    pub view: bool,
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
    /// Also look for the trace's modules (executable, libraries) in DIR, by
    /// file name and build-id: for a trace recorded on another machine, or
    /// a binary that moved or was rebuilt since.
    #[arg(long = "modules", value_name = "DIR")]
    pub module_dirs: Vec<PathBuf>,
    /// Also look for separate debug files under DIR/.build-id/ (besides
    /// /usr/lib/debug).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// Simulated first-level data cache, SIZE,WAYS,LINE as cachegrind's
    /// --D1 (LRU, write-allocate; the number of sets must be a power of
    /// two).
    #[arg(long = "d1", value_name = "SIZE,WAYS,LINE", default_value = "32K,8,64", value_parser = parse_cache)]
    pub d1: decoder::cache::CacheGeometry,
    /// Simulated last-level cache, as cachegrind's --LL (default: this
    /// machine's last level from sysfs, else 8M,16,64).
    #[arg(long = "ll", value_name = "SIZE,WAYS,LINE", value_parser = parse_cache)]
    pub ll: Option<decoder::cache::CacheGeometry>,
    /// Whose reads make the columns: a thread id, `busiest` (the thread
    /// with the most reads) or `all` (every thread's, in the order they were
    /// written). Threads traced at the same time each have their own order
    /// and their own core's cache, so by default one thread is shown; the
    /// others' allocations still name the rows. `report` lists every
    /// thread's reads.
    #[arg(long, value_name = "TID|busiest|all", default_value = "busiest")]
    pub thread: decoder::timeline::ThreadChoice,
}

/// Parses a cache geometry argument.
fn parse_cache(text: &str) -> Result<decoder::cache::CacheGeometry, String> {
    decoder::cache::CacheGeometry::parse(text)
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
    /// The heap analysis instead: blocks, peak, leaks, waste, size classes,
    /// fragmentation over time, allocation order per region, and the
    /// functions that allocated (traces of `record --allocations`, or the
    /// allocations inside a traced function). Implied for a trace of
    /// `record --allocations` unless --by is given.
    #[arg(long, conflicts_with = "by")]
    pub allocations: bool,
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
    /// Image to write: .png, or .jpg/.jpeg.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Replace the output file even if it is a trace or a program.
    #[arg(long)]
    pub force: bool,
    /// Image width in pixels.
    #[arg(long, default_value_t = 1600)]
    pub width: u32,
    /// Image height in pixels.
    #[arg(long, default_value_t = 800)]
    pub height: u32,
    /// Image size WxH, as `view --size` takes it: the same as --width W
    /// --height H.
    #[arg(long, value_name = "WxH", value_parser = parse_dimensions, conflicts_with_all = ["width", "height"])]
    pub size: Option<(u32, u32)>,
    /// Column range A..B to draw (default: the whole trace).
    #[arg(long, value_name = "A..B")]
    pub columns: Option<String>,
    /// Anti-aliasing exponent: 1 is a box filter, below 1 keeps isolated
    /// accesses visible when zoomed out, above 1 filters them.
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f64,
    /// What the bitmap's colours show.
    #[arg(long, value_enum, default_value_t = ColourByArg::Bytes)]
    pub colour_by: ColourByArg,
    /// Draw the heap instead: every block a rectangle, allocation events
    /// on x, addresses on y (regions stacked, unmapped space collapsed to a
    /// dashed marker), with a bar of live bytes beneath (blue low, red at
    /// the peak). --alpha below 1 keeps tiny blocks visible. Implied for a
    /// trace of `record --allocations`.
    #[arg(long, conflicts_with_all = ["columns", "colour_by"])]
    pub allocations: bool,
    /// With --allocations: what a block's colour shows [default:
    /// function].
    #[arg(long, value_enum)]
    pub heap_colour: Option<HeapColourArg>,
    /// With --allocations: how blocks are shaded across their height, so
    /// neighbours of one colour stay apart [default: parabolic].
    #[arg(long, value_enum)]
    pub cushion: Option<CushionArg>,
    /// With --allocations: wall-clock time on x instead of allocation
    /// events (quiet periods show; needs a trace of `record --allocations`).
    #[arg(long)]
    pub wall_clock: bool,
    /// With --allocations: draw only the addresses LO..HI (hexadecimal),
    /// stretched over the picture's height (e.g. a pool's arena).
    #[arg(long, value_name = "LO..HI", value_parser = parse_addresses)]
    pub addresses: Option<(u64, u64)>,
    /// With --allocations: size-class views and cushion cursors.
    #[command(flatten)]
    pub correlate: CorrelateArgs,
    /// Decoding settings.
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// What a heap block's colour shows.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum HeapColourArg {
    /// A hue per allocating function.
    Function,
    /// A hue per thread.
    Thread,
    /// glibc's size class: fast, small, large, huge (>= 128 KiB).
    SizeClass,
    /// Lifetime: blue short, red long, grey never freed.
    Lifetime,
}

impl From<HeapColourArg> for decoder::heap_raster::HeapColourBy {
    fn from(a: HeapColourArg) -> Self {
        match a {
            HeapColourArg::Function => Self::Function,
            HeapColourArg::Thread => Self::Thread,
            HeapColourArg::SizeClass => Self::SizeClass,
            HeapColourArg::Lifetime => Self::Lifetime,
        }
    }
}

/// Correlated views of the heap (`render --allocations`, `view
/// --allocations`).
#[derive(Debug, Args)]
pub struct CorrelateArgs {
    /// With --allocations: one view per size class (glibc's bins: fast,
    /// small, large, huge), stacked so they share the time axis (`time`:
    /// do bursts happen in all bins at once?) or side by side with each
    /// bin's addresses over the full height (`address`: how full is each?).
    #[arg(long, value_enum, conflicts_with = "addresses")]
    pub bins: Option<BinLayoutArg>,
    /// With --allocations: a cushion cursor (a soft bright band) at this
    /// point of the time axis, in allocation events (nanoseconds since the
    /// first call on a wall-clock axis), across every bin. Repeatable. In
    /// the viewer a click drops one, a right click removes the nearest.
    #[arg(long = "cursor", value_name = "T")]
    pub cursors: Vec<f64>,
    /// With --allocations: the opacity of the cursors at their centre.
    #[arg(long, value_name = "0..1", default_value_t = 0.6, value_parser = parse_unit_interval)]
    pub cursor_strength: f64,
}

impl CorrelateArgs {
    /// Each option of the group, and whether it was typed.
    fn typed(&self) -> [(&'static str, bool); 2] {
        [("--bins", self.bins.is_some()), ("--cursor", !self.cursors.is_empty())]
    }
}

/// The names of the options typed, of (name, typed) pairs.
fn typed(options: impl IntoIterator<Item = (&'static str, bool)>) -> Vec<&'static str> {
    options.into_iter().filter(|&(_, typed)| typed).map(|(name, _)| name).collect()
}

impl RenderArgs {
    /// The heap picture's options typed: they mean nothing to the picture
    /// of the reads.
    pub fn heap_options_given(&self) -> Vec<&'static str> {
        let own = [
            ("--heap-colour", self.heap_colour.is_some()),
            ("--cushion", self.cushion.is_some()),
            ("--wall-clock", self.wall_clock),
            ("--addresses", self.addresses.is_some()),
        ];
        typed(own.into_iter().chain(self.correlate.typed()))
    }
}

impl ViewArgs {
    /// The allocations view's options typed: they mean nothing to the
    /// other views.
    pub fn heap_options_given(&self) -> Vec<&'static str> {
        let own = [("--addresses", self.addresses.is_some()), ("--open-source", self.open_source)];
        typed(own.into_iter().chain(self.correlate.typed()))
    }
}

/// How the size-class views are laid out.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BinLayoutArg {
    /// Stacked, one time axis.
    Time,
    /// Side by side, each bin's addresses over the full height.
    Address,
}

impl From<BinLayoutArg> for decoder::heap_bins::BinLayout {
    fn from(a: BinLayoutArg) -> Self {
        match a {
            BinLayoutArg::Time => Self::Time,
            BinLayoutArg::Address => Self::Address,
        }
    }
}

/// A number from 0 to 1.
pub fn parse_unit_interval(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a number from 0 to 1")),
    }
}

/// How heap blocks are shaded.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CushionArg {
    /// Brightest in the middle.
    Parabolic,
    /// Flat with shaded edges.
    Plateau,
    /// Flat.
    None,
}

impl From<CushionArg> for decoder::heap_raster::Cushion {
    fn from(a: CushionArg) -> Self {
        match a {
            CushionArg::Parabolic => Self::Parabolic,
            CushionArg::Plateau => Self::Plateau,
            CushionArg::None => Self::None,
        }
    }
}

/// What the bitmap's colours show.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ColourByArg {
    /// Bytes read from the line: purple (none) to green (a line's worth).
    Bytes,
    /// Distinct bytes of the line read.
    Distinct,
    /// Age only: bright when just touched.
    Age,
    /// The function whose read last touched the line (its frame's colour).
    Function,
    /// The allocation site of the block holding the line.
    Allocation,
    /// The simulated caches: red the read that last touched the line missed
    /// LL, orange it missed D1, blue it hit (see --d1, --ll).
    Misses,
}

impl From<ColourByArg> for decoder::raster::ColourBy {
    fn from(c: ColourByArg) -> Self {
        match c {
            ColourByArg::Bytes => decoder::raster::ColourBy::BytesRead,
            ColourByArg::Distinct => decoder::raster::ColourBy::DistinctBytes,
            ColourByArg::Age => decoder::raster::ColourBy::Age,
            ColourByArg::Function => decoder::raster::ColourBy::Function,
            ColourByArg::Allocation => decoder::raster::ColourBy::Allocation,
            ColourByArg::Misses => decoder::raster::ColourBy::CacheMisses,
        }
    }
}

/// Arguments of `view`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Trace file to show (with a second trace: A, the baseline).
    pub file: PathBuf,
    /// A second trace: compare mode. A above, B beneath, views linked
    /// through matching frames, frames coloured by the change from A to B
    /// (blue fewer reads in B, red more).
    #[arg(value_name = "B")]
    pub compare: Option<PathBuf>,
    /// Show the heap instead: every block a rectangle, allocation events on
    /// x, addresses on y (regions stacked), the heap analysis beside; hover
    /// names a block's size, function and lifetime (traces of
    /// `record --allocations`, or allocations inside a traced function).
    /// With --screenshot, --hover EVENT,ROW hovers pixel row ROW. Implied
    /// for a trace of `record --allocations`.
    #[arg(long, conflicts_with = "compare")]
    pub allocations: bool,
    /// Draw offscreen, save this PNG and exit.
    #[arg(long, value_name = "PNG")]
    pub screenshot: Option<PathBuf>,
    /// With --screenshot: also write what the UI showed (layout, tooltip,
    /// frames, row labels) as JSON.
    #[arg(long, value_name = "JSON", requires = "screenshot")]
    pub state: Option<PathBuf>,
    /// With --screenshot: hover this point, COLUMN or COLUMN,ROW (compare
    /// mode: the deepest frame of A at COLUMN). A point with nothing under
    /// it (past the trace's end, a row the working set does not reach
    /// there) fails the run, as `at` does.
    #[arg(long, value_name = "COLUMN[,ROW]", requires = "screenshot", value_parser = parse_hover)]
    pub hover: Option<(u64, Option<usize>)>,
    /// With --allocations --hover: open the source of the hovered block's
    /// allocating line, as a Ctrl+click does.
    #[arg(long, requires = "hover")]
    pub open_source: bool,
    /// Window size.
    #[arg(long, value_name = "WxH", default_value = "1600x900", value_parser = parse_size)]
    pub size: (u32, u32),
    /// Columns A..B to show first (compare mode: of the first trace). A
    /// range reaching past the trace's end is cut there; one wholly past it
    /// shows the whole trace, and the status line says so. Not for the
    /// allocations view, whose time axis is events (--select).
    #[arg(long, value_name = "A..B", value_parser = parse_columns)]
    pub columns: Option<(u64, u64)>,
    /// With --allocations: the addresses LO..HI (hexadecimal) to show
    /// first, stretched over the picture's height (Ctrl+wheel zooms the
    /// addresses, Shift+wheel or a vertical drag scrolls them, the context
    /// strip at the right shows where the view is and moves it on click).
    #[arg(long, value_name = "LO..HI", value_parser = parse_addresses)]
    pub addresses: Option<(u64, u64)>,
    /// With --allocations: size-class views and cushion cursors to open
    /// with (the toolbar changes them).
    #[command(flatten)]
    pub correlate: CorrelateArgs,
    /// Open with A..B selected, as a drag on the ruler does: columns, with
    /// the statistics panel showing their figures and tables; with
    /// --allocations, events (Shift+drag selects in the window), with the
    /// side panel analysing the blocks allocated in them. A range reaching
    /// past the trace's end is cut there; one wholly past it is dropped,
    /// and the status line says so.
    #[arg(long, value_name = "A..B", conflicts_with = "compare", value_parser = parse_columns)]
    pub select: Option<(u64, u64)>,
    /// Open with the statistics panel shown (the `Stats` button): the
    /// trace's reads, writes, line fetches, utilisation, cache misses and
    /// reuse distances, and its functions and lines by reads. The compare
    /// mode shows its own, and the allocations view its side panel,
    /// always: it is refused with them (a trace of `record --allocations`
    /// included).
    #[arg(long, conflicts_with_all = ["compare", "allocations"])]
    pub stats: bool,
    /// Measure: script a session (decode, pan, zoom steps), write timings
    /// as JSON here and exit (`cargo bench --bench view` uses it; with
    /// --allocations, of the allocations view; with two traces, of the
    /// compare mode: the script steers A, B follows).
    #[arg(long, value_name = "JSON", conflicts_with = "screenshot")]
    pub bench_json: Option<PathBuf>,
    /// Replace the files of --screenshot, --state and --bench-json even if
    /// they are traces or programs.
    #[arg(long)]
    pub force: bool,
    /// Decoding settings.
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to put the example's binary, trace and screenshot.
    #[arg(long, default_value = "target/demo")]
    pub dir: PathBuf,
    /// Write the screenshot even with a display.
    #[arg(long)]
    pub screenshot: bool,
}

/// Parses `WxH`, any size (`render` checks its own limits).
pub fn parse_dimensions(text: &str) -> Result<(u32, u32), String> {
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(|| format!("{text:?}: expected WxH, e.g. 1600x900"))?;
    let parse = |s: &str| s.trim().parse::<u32>().map_err(|_| format!("{text:?}: {s:?} is not a number"));
    Ok((parse(w)?, parse(h)?))
}

/// Parses `WxH` within the sizes of a window.
pub fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let (w, h) = parse_dimensions(text)?;
    if !(200..=16384).contains(&w) || !(150..=16384).contains(&h) {
        return Err(format!("{text:?}: sizes go from 200x150 to 16384x16384"));
    }
    Ok((w, h))
}

/// Parses `COLUMN` or `COLUMN,ROW`.
pub fn parse_hover(text: &str) -> Result<(u64, Option<usize>), String> {
    let (c, r) = match text.split_once(',') {
        Some((c, r)) => (c, Some(r)),
        None => (text, None),
    };
    let column = c.trim().parse::<u64>().map_err(|_| format!("{text:?}: {c:?} is not a column number"))?;
    let row =
        r.map(|r| r.trim().parse::<usize>().map_err(|_| format!("{text:?}: {r:?} is not a row number"))).transpose()?;
    Ok((column, row))
}

/// Arguments of `at`.
#[derive(Debug, Args)]
pub struct AtArgs {
    /// Trace file to read.
    pub file: PathBuf,
    /// The column (0-based read number).
    #[arg(long, required_unless_present = "event")]
    pub column: Option<u64>,
    /// A row of the bitmap at that column (0: the lowest address).
    #[arg(long, requires = "column")]
    pub row: Option<usize>,
    /// The allocation event (0-based) of a trace of `record --allocations`:
    /// the heap just after it.
    #[arg(long, requires = "address", conflicts_with = "column")]
    pub event: Option<u64>,
    /// The address at that event, hex (`0x55d0c1000010`) or decimal.
    #[arg(long, value_parser = parse_address, requires = "event")]
    pub address: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
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
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
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
            cache: decoder::cache::CacheConfig {
                d1: self.d1,
                ll: self
                    .ll
                    .or_else(decoder::cache::CacheGeometry::host_last_level)
                    .unwrap_or(decoder::cache::CacheGeometry::LL),
            },
            thread: self.thread,
            ..Default::default()
        }
    }

    /// Where the decoder looks for modules and debug files.
    pub fn symbol_paths(&self) -> decoder::symbols::SymbolPaths {
        let mut paths = decoder::symbols::SymbolPaths::default();
        paths.debug_roots.extend(self.debug_dirs.iter().cloned());
        paths.module_dirs.extend(self.module_dirs.iter().cloned());
        paths
    }
}

/// Parses `LO..HI` (hexadecimal) into an address range.
pub fn parse_addresses(text: &str) -> Result<(u64, u64), String> {
    let (a, b) = text.split_once("..").ok_or_else(|| format!("--addresses {text:?}: expected LO..HI"))?;
    let parse = |s: &str| {
        u64::from_str_radix(s.trim().trim_start_matches("0x"), 16)
            .map_err(|_| format!("--addresses {text:?}: {s:?} is not a hexadecimal address"))
    };
    let (a, b) = (parse(a)?, parse(b)?);
    if a >= b {
        return Err(format!("--addresses {text:?}: the range is empty"));
    }
    Ok((a, b))
}

/// Parses an address: hex with `0x`, or decimal.
pub fn parse_address(text: &str) -> Result<u64, String> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse::<u64>(),
    }
    .map_err(|_| format!("{text:?} is not an address (hex with 0x, or decimal)"))
}

/// Parses `A..B` into a column range.
pub fn parse_columns(text: &str) -> Result<(u64, u64), String> {
    // No option named: clap names the one parsed (`--columns`, `--select`).
    let (a, b) = text.split_once("..").ok_or_else(|| format!("{text:?}: expected A..B"))?;
    let parse = |s: &str| s.trim().parse::<u64>().map_err(|_| format!("{text:?}: {s:?} is not a number"));
    let (a, b) = (parse(a)?, parse(b)?);
    if a >= b {
        return Err(format!("{text:?}: the range is empty"));
    }
    Ok((a, b))
}

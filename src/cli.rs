//! Command-line interface: clap types only. Each subcommand's arguments are
//! turned into the plain options struct of the library crate that does the
//! work, so no library crate sees clap.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// linetrace shows how a program touches memory, at cache-line granularity.
#[derive(Debug, Parser)]
#[command(name = "linetrace", version, about, long_about = None)]
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
    /// Print the totals of a trace: instructions, reads, writes, bytes,
    /// unique cache lines, allocations, invocations, per thread.
    Report(ReportArgs),
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
    #[arg(
        required = true,
        trailing_var_arg = true,
        value_name = "PROGRAM [ARGS]..."
    )]
    pub command: Vec<OsString>,
}

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Trace file to read.
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Cache line size in bytes (a power of two).
    #[arg(long, default_value_t = 64)]
    pub line_size: u32,
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

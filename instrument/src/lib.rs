//! The tracers of linetrace.
//!
//! Both backends launch a program, stop at the function to trace, follow the
//! thread that entered it through the whole dynamic extent of the call
//! (callees included), and write a trace in the [`trace_rt::format`] format,
//! with the same events for the same execution (`tests/rewrite.rs` checks
//! this event for event):
//! - [`Backend::Rewrite`] (the CLI's default) runs the function as
//!   instrumented copies of its code in a code cache inside the target;
//!   linetrace translates each block on first use and reads the records the
//!   copies append to a shared buffer. Hundreds of times faster than
//!   stepping. See the `rewrite` module for its design.
//! - [`Backend::Ptrace`] single-steps every instruction (~70k/s): the
//!   reference, and the fallback when the program uses the `gs` segment.
//!
//! Design constraints:
//! - Per step the ptrace loop makes exactly three system calls (step, wait,
//!   get registers); decoding happens once per distinct pc and is cached.
//! - Allocator calls (`malloc`, `calloc`, `realloc`, `free`,
//!   `posix_memalign`, `aligned_alloc`, `memalign`) are run natively and
//!   recorded with their arguments and result; the allocator's own loads
//!   stay out of the trace.
//! - Only the thread that entered the function is stepped; other threads
//!   run freely. An invocation that starts on another thread while one is
//!   being stepped is not traced, but counted (`InvocationSkipped` events):
//!   the entry breakpoint stays armed while a thread is stepped.
//! - A SIGTRAP the program raises itself (`int3`, `raise`) is told from
//!   ours by its `si_code` and delivered.
//! - `exec` ends tracing: the new program runs untraced.
//! - Whatever happens to the target (crash, kill) or to the recorder (SIGINT,
//!   SIGTERM), the trace file stays readable: events are flushed at least once
//!   a second and the reader stops cleanly at the last complete chunk.
//!
//! ```no_run
//! let summary = instrument::record(instrument::RecordOptions {
//!     program: "./array_sweep".into(),
//!     args: vec![],
//!     function: Some("work".into()),
//!     output: "work.lntrace".into(),
//!     max_invocations: None,
//!     progress: None,
//!     backend: instrument::Backend::Rewrite,
//! })?;
//! println!("{} reads and writes", summary.accesses);
//! # Ok::<(), instrument::InstrumentError>(())
//! ```

pub mod alloc_hooks;
pub mod allocations;
mod decode;
pub mod entry;
mod error;
mod event_rules;
pub mod inject;
pub mod interrupt;
mod maps;
pub mod rewrite;
pub mod sys;
mod tracer;
mod vector;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use allocations::{AllocationOptions, AllocationSummary, record_allocations};
pub use error::InstrumentError;
pub use trace_rt::format::{TargetExit, TruncationReason};

/// What to record.
pub struct RecordOptions {
    /// The program, as a path or a name looked up in `PATH`.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Function to trace (default `main`): exact name, demangled name, or a
    /// unique substring, optionally `MODULE:` first to look in a library.
    pub function: Option<String>,
    /// Trace file to write; created only once the target has started and
    /// the function is found.
    pub output: PathBuf,
    /// Trace at most this many invocations (default: all).
    pub max_invocations: Option<u32>,
    /// Called about once a second while stepping.
    pub progress: Option<ProgressCallback>,
    /// How accesses are recorded.
    pub backend: Backend,
}

/// How the traced function's accesses are recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// Single-step every instruction with ptrace: slow (~70k instructions/s),
    /// exact for everything the kernel lets a debugger see.
    Ptrace,
    /// Run the function as translated, instrumented code from a code cache
    /// in the target (ptrace only to translate new blocks and to empty the
    /// record buffer).
    #[default]
    Rewrite,
}

impl Backend {
    /// The name written in the trace's metadata.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ptrace => "ptrace-singlestep",
            Backend::Rewrite => "rewrite",
        }
    }
}

/// Receives [`Progress`] about once a second.
pub type ProgressCallback = Box<dyn FnMut(&Progress)>;

/// Progress of a running recording.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Instructions single-stepped so far.
    pub instructions: u64,
    /// Memory accesses recorded so far.
    pub accesses: u64,
    /// Invocations of the function seen so far.
    pub invocations: u32,
    /// Time since the target started.
    pub elapsed: Duration,
}

/// The outcome of a recording.
#[derive(Clone, Debug)]
pub struct RecordSummary {
    /// How the target ended.
    pub exit: TargetExit,
    /// Set if the recording was cut short.
    pub truncated: Option<TruncationReason>,
    /// The function traced (demangled).
    pub function: String,
    /// Instructions single-stepped.
    pub instructions: u64,
    /// Memory accesses recorded.
    pub accesses: u64,
    /// Invocations traced.
    pub invocations: u32,
    /// Invocations not traced because another thread was being traced, by
    /// thread.
    pub skipped_invocations: BTreeMap<u32, u64>,
    /// The program the process exec'd into (tracing stopped there).
    pub exec: Option<String>,
    /// Blocks the rewrite backend translated.
    pub blocks_translated: u64,
    /// Gather and scatter instructions (ZMM index vectors) the rewrite
    /// backend records without their elements (an approximation).
    pub approximated: u64,
    /// Size of the trace file.
    pub trace_bytes: u64,
    /// Wall-clock time of the whole run.
    pub elapsed: Duration,
}

/// Records a trace of `options.program` with `options.backend`.
pub fn record(options: RecordOptions) -> Result<RecordSummary, InstrumentError> {
    tracer::record(options)
}

//! From a linetrace trace file to the model every view reads.
//!
//! The decoder must not depend on the viewer (or any graphics crate): reports,
//! exports and tests use it on machines without a display.
//!
//! Today it provides [`summary`]: the per-thread totals behind
//! `linetrace report`.
//!
//! ```no_run
//! let summary = decoder::summary::summarize_file(std::path::Path::new("work.lntrace"), 64)?;
//! println!("{} reads, {} unique lines", summary.total.reads, summary.total.unique_lines);
//! # Ok::<(), decoder::DecodeError>(())
//! ```

mod error;
pub mod summary;

pub use error::DecodeError;

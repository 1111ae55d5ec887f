//! From a linetrace trace file to the model every view reads.
//!
//! Design constraints:
//! - No graphics dependencies (no Bevy): reports, exports and tests use the
//!   decoder on machines without a display, and `cargo test -p decoder`
//!   stays fast.
//! - One streaming pass over the trace, in memory that grows with the
//!   program's footprint, not with the trace length ([`model`]).
//! - The decoded model ([`model::Model`]) is the contract with the views;
//!   its module documentation defines columns, frames and the bitmap.
//!
//! ```no_run
//! use decoder::model::{DecodeOptions, Model};
//! let model = Model::decode(std::path::Path::new("work.lntrace"), &DecodeOptions::default(), &mut |_| {})?;
//! println!("{} reads, {} line fetches", model.total.reads, model.metrics.line_fetches);
//! let symbols = decoder::symbols::Symbolizer::new(&model.modules);
//! for row in decoder::tables::access_table(&model, &symbols, decoder::tables::Grouping::Function) {
//!     println!("{} {}", row.key, row.total_reads);
//! }
//! # Ok::<(), decoder::DecodeError>(())
//! ```

pub mod allocations;
pub mod bursts;
pub mod cache;
pub mod calltree;
pub mod compare;
pub mod cursor;
mod decode;
pub mod diff;
pub mod drawing_threads;
mod error;
mod hashing;
pub mod heap;
pub mod heap_bins;
pub mod heap_raster;
pub mod heap_scene;
mod huge_pages;
pub mod inspect;
mod line_positions;
pub mod line_table;
pub mod lines;
pub mod model;
mod prefetch;
pub mod pyramid;
pub mod range;
pub mod range_summary;
pub mod raster;
mod reserve;
pub mod reuse;
pub mod spans;
pub mod symbols;
pub mod tables;
pub mod timeline;
pub mod totals;
pub mod working_set;

/// A xorshift64 generator for property tests: the same numbers from the
/// same (non-zero) seed on every run.
#[cfg(test)]
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

pub use error::DecodeError;

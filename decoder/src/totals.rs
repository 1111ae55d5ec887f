//! Per-thread totals: the first thing `report` shows.

use serde::Serialize;

/// Counts for one thread (or all threads together).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Instructions single-stepped.
    pub instructions: u64,
    /// Executions of reading sites (loads and read-modify-writes).
    pub reads: u64,
    /// Executions of writing sites (stores and read-modify-writes).
    pub writes: u64,
    /// Bytes loaded.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Distinct cache lines read or written.
    pub unique_lines: u64,
    /// Allocator calls and mmap/munmap system calls.
    pub allocations: u64,
    /// Invocations of the traced function started.
    pub invocations: u64,
    /// Signals delivered while tracing.
    pub signals: u64,
    /// Entries into the traced function on this thread that were not
    /// traced because another thread was being traced.
    pub skipped_invocations: u64,
}

impl Totals {
    /// Adds every count but `unique_lines` (which does not add up).
    pub fn add(&mut self, other: &Totals) {
        self.instructions += other.instructions;
        self.reads += other.reads;
        self.writes += other.writes;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.allocations += other.allocations;
        self.invocations += other.invocations;
        self.signals += other.signals;
        self.skipped_invocations += other.skipped_invocations;
    }
}

//! The allocation agent: a shared library (`agent/alloc_agent.c`, built by
//! `build.rs`) that `linetrace record --allocations` preloads into the
//! program, and the log it writes.
//!
//! The agent records every allocator call of every thread into a shared
//! file mapping: a 4 KiB header, a claim table, a free ring, then 64 KiB
//! chunks of fixed-size records that threads claim with an atomic add.
//! Records are numbered by one global counter, so [`AgentLogStream`]
//! restores the order of all threads (while the program runs: linetrace
//! converts the log on its own core); a record counts once its marker (its
//! last word) is written, so records cut by a crash are skipped.
//!
//! Chunks read to their end go back to the agent through the free ring and
//! are filled again: the program then writes into pages it has mapped
//! already (a fresh page costs the kernel a mapping; before chunks were
//! recycled that was a third of the agent's cost). Because a chunk is
//! reused, the claim table says which chunk each claim got, in claim
//! order, and a record's marker is `MARKER ^ claim number`: what a chunk
//! held before does not pass for new records. [`AgentRecord`] is the
//! record's layout; the C `struct record` and `struct header` must stay
//! equal to the constants here.

/// The agent, as a shared library; empty when the build had no C compiler.
pub const ALLOC_AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/liblinetrace_alloc.so"));

/// Environment variable naming the log file the agent writes.
pub const LOG_ENV: &str = "LINETRACE_ALLOC_OUT";
/// Environment variable with the callers to record above each call's
/// calling instruction (0 to 32).
pub const STACK_ENV: &str = "LINETRACE_ALLOC_STACK";
/// Most callers the agent records.
pub const MAX_STACK: usize = 32;
/// Environment variable describing the custom allocator functions the
/// agent patches (`instrument::alloc_hooks::agent_env` writes it).
pub const HOOKS_ENV: &str = "LINETRACE_ALLOC_HOOKS";
/// Environment variable naming the file the agent copies
/// `/proc/self/maps` to, at start and at exit.
pub const MAPS_ENV: &str = "LINETRACE_ALLOC_MAPS";

/// Environment variable that makes the agent read each call's time with
/// `rdtsc` (value `tsc`; linetrace sets it where the kernel's clock is the
/// TSC, [`crate::tsc::kernel_clock_is_tsc`]) instead of clock_gettime.
pub const CLOCK_ENV: &str = "LINETRACE_ALLOC_CLOCK";

/// Environment variable that makes the agent unwind every stack twice,
/// with its own unwinder and with glibc's backtrace(), and count where they
/// differ ([`AgentLogStream::unwinding`]): the check of the fast unwinder.
pub const UNWIND_CHECK_ENV: &str = "LINETRACE_ALLOC_UNWIND_CHECK";

/// How the stacks of a recording were unwound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unwinding {
    /// Stacks the agent's own unwinder followed to their end or depth:
    /// counted only with [`UNWIND_CHECK_ENV`] (a shared counter bumped per
    /// call would slow every call down), 0 otherwise.
    pub fast: u64,
    /// Stacks unwound by backtrace() instead.
    pub slow: u64,
    /// With [`UNWIND_CHECK_ENV`]: fast stacks that differ from backtrace()'s.
    pub mismatched: u64,
}

/// Marks the header; a record's marker is this `^` its chunk's claim
/// number.
const MARKER: u64 = 0x4c54_414c_4c4f_4321;
/// Where the header's words are (C `struct header`).
mod header {
    pub const MAGIC: u64 = 0;
    pub const NEXT_CHUNK: u64 = 8;
    pub const DROPPED: u64 = 16;
    pub const RECORD_BYTES: u64 = 24;
    pub const UNWOUND_FAST: u64 = 32;
    pub const UNWOUND_SLOW: u64 = 40;
    pub const UNWIND_MISMATCH: u64 = 48;
    pub const HOOKS_INSTALLED: u64 = 56;
    pub const HOOKS_TOO_DEEP: u64 = 64;
    pub const TIME_IS_TSC: u64 = 72;
    pub const SEQ: u64 = 128;
    pub const CLAIMS: u64 = 192;
    pub const FREE_TAKEN: u64 = 256;
    pub const FREE_GIVEN: u64 = 320;
}
/// The claim table: the chunk of claim `k` at entry `k % CLAIM_SLOTS`, set
/// by the agent, zeroed here once read.
const CLAIM_TABLE_AT: u64 = 4096;
/// Entries of the claim table.
const CLAIM_SLOTS: u64 = 65536;
/// The free ring: chunks read to their end, for the agent to fill again.
const FREE_RING_AT: u64 = CLAIM_TABLE_AT + 8 * CLAIM_SLOTS;
/// Entries of the free ring.
const FREE_SLOTS: u64 = 4096;
/// Chunks waiting in the free ring at most (16 MiB): past that, read
/// chunks' memory is given back instead (a burst of calls, then quiet).
const RECYCLE_LIMIT: u64 = 256;
/// Where the first chunk starts.
const FIRST_CHUNK: u64 = 1 << 20;
/// Bytes of a chunk a thread claims.
const CHUNK_BYTES: usize = 64 << 10;
/// Bytes of one record without its stack (the header says how many
/// follow).
pub const RECORD_BYTES: usize = 80;
/// Where a record's marker is, from its start.
const MARKER_OFFSET: u64 = 72;

/// What a record stands for. Values up to 8 are
/// [`crate::format::AllocKind`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentKind {
    /// A kind the trace format has ([`crate::format::AllocKind`]).
    Format(crate::format::AllocKind),
    /// C++ operator new (any variant).
    New,
    /// C++ operator delete (any variant).
    Delete,
    /// mremap: `ptr_in` old address, `align` old length, `size` new length.
    Mremap,
    /// The program break moved during the call recorded just before on
    /// the same thread: `ptr_in` the break before, `ptr_out` after.
    Brk,
    /// A custom allocator function returned a block (`ptr_out`, `size`);
    /// `align` holds the function's place in [`HOOKS_ENV`].
    CustomAlloc,
    /// A custom allocator function released `ptr_in`.
    CustomFree,
    /// A custom allocator function released everything.
    CustomReset,
}

impl AgentKind {
    fn from_u32(v: u32) -> Option<AgentKind> {
        match v {
            16 => Some(AgentKind::New),
            17 => Some(AgentKind::Delete),
            18 => Some(AgentKind::Mremap),
            19 => Some(AgentKind::Brk),
            20 => Some(AgentKind::CustomAlloc),
            21 => Some(AgentKind::CustomFree),
            22 => Some(AgentKind::CustomReset),
            v => crate::format::AllocKind::from_u8(u8::try_from(v).ok()?).map(AgentKind::Format),
        }
    }
}

/// One allocator call, as the agent wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentRecord {
    /// Global order of the call (all threads).
    pub seq: u64,
    /// CLOCK_MONOTONIC, nanoseconds.
    pub time_ns: u64,
    /// Pointer passed in (realloc, free, delete, munmap, mremap).
    pub ptr_in: u64,
    /// Pointer returned (0: none, or failure).
    pub ptr_out: u64,
    /// Requested size.
    pub size: u64,
    /// Requested alignment (mremap: the old length).
    pub align: u64,
    /// The call instruction in the caller.
    pub callsite: u64,
    /// `malloc_usable_size` of the result (0 for mappings).
    pub usable: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// What it was.
    pub kind: AgentKind,
    /// Calls above the calling instruction, innermost first (empty unless
    /// asked for, [`STACK_ENV`]).
    pub stack: Vec<u64>,
}

impl Default for AgentKind {
    fn default() -> Self {
        AgentKind::Format(crate::format::AllocKind::Malloc)
    }
}

/// Why a log cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentLogError {
    /// The log file could not be sized or mapped.
    #[error("cannot map the allocation log")]
    Io(#[source] std::io::Error),
    /// The agent never started in the program (not preloaded: a static
    /// program, or one that clears LD_PRELOAD).
    #[error("the allocation agent did not start in the program (statically linked, or LD_PRELOAD cleared?)")]
    NotStarted,
    /// The header names a record size no agent writes.
    #[error("the allocation log's header is damaged (record size {0})")]
    Damaged(u64),
    /// The claim table names a place no chunk starts at.
    #[error("the allocation log's claim table is damaged (a chunk at {0:#x})")]
    BadClaim(u64),
}

/// Bytes of log allocated ahead of the program's writing.
const ALLOCATE_AHEAD: u64 = 4 << 20;

/// Chunks read to their end whose memory is given back at once (4 MiB).
const RELEASE_BATCH: usize = 64;

/// `fallocate(2)` with `mode` on bytes `start..end` of `file`; true when
/// it did.
fn fallocate(file: &std::fs::File, mode: libc::c_int, start: u64, end: u64) -> bool {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(start), libc::off_t::try_from(end.saturating_sub(start))) else {
        return false;
    };
    // SAFETY: a plain system call on an open file descriptor; no memory is
    // passed.
    unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) == 0 }
}

/// Bytes of the log file: the agent's whole capacity, sparse (only
/// written pages take room).
pub const LOG_CAPACITY: u64 = 64 << 30;

/// Records parked until every record numbered before them has been read,
/// at most: past this, a number that never came (a thread killed in the
/// middle of its record) is given up on.
const MAX_PARKED: usize = 1 << 22;

/// Reads the agent's log while the program writes it, and hands over the
/// records of all threads in call order.
///
/// The log is mapped and shared with the program: a record is read once
/// its marker (its last word) is there, which the agent writes after the
/// rest (x86-64 keeps stores in order, and the agent keeps the compiler
/// from reordering them). Each thread fills the chunks it claims in order,
/// so per chunk a cursor marks how far it is read; records of different
/// threads arrive out of their global order and are parked until the
/// numbers before them have come.
///
/// The file is as large as the agent may ever write, but holds little:
/// chunks read to their end go back to the agent to be filled again, or,
/// past `RECYCLE_LIMIT` (256 chunks), their memory is given back; fresh memory is
/// allocated a little ahead of the chunks the program claims (the kernel's
/// page zeroing then runs here, not in the program's calls). Only the
/// claim table and the free ring are written here, never a chunk.
pub struct AgentLogStream {
    map: memmap2::MmapRaw,
    /// The log file, to give the memory of chunks read to the end back
    /// (the log lives in /dev/shm: a long run would otherwise keep every
    /// record it wrote in memory); `None` once that failed.
    file: Option<std::fs::File>,
    /// The log's memory is allocated up to here (by [`Self::allocate_ahead`]).
    allocated: u64,
    /// Chunks read to their end, not handed back or given back yet.
    read_chunks: Vec<u64>,
    /// Chunks handed back to the agent through the free ring.
    recycled: u64,
    /// Bytes of a record with its stack; 0 until the agent has started.
    record_bytes: usize,
    /// The next claim to look up in the claim table.
    next_claim: u64,
    /// Chunks still being filled, in claim order: where each ends, where
    /// its next record starts, and the marker of its records.
    open: Vec<OpenChunk>,
    /// Complete records not handed over yet: (number, offset), least first.
    parked: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
    /// The number of the next record to hand over.
    next_seq: u64,
    /// Records handed over.
    delivered: u64,
    /// Records that came before one numbered lower and waited for it.
    waited: u64,
    /// The record handed to the caller, reused.
    current: AgentRecord,
    /// Turns the agent's counter readings into nanoseconds, when its
    /// records hold those ([`CLOCK_ENV`]); read before the program starts.
    tsc: crate::tsc::TscClock,
    /// Whether the records' times are counter readings.
    time_is_tsc: bool,
}

/// A chunk a thread has claimed and not filled to its end yet.
#[derive(Clone, Copy, Debug)]
struct OpenChunk {
    /// Where the chunk ends.
    end: u64,
    /// Where its next record starts.
    at: u64,
    /// The marker of its complete records (`MARKER ^` the claim number).
    marker: u64,
}

impl AgentLogStream {
    /// Sizes `file` (empty, the one the agent will be told to use) to the
    /// log's capacity and maps it. Call before the program starts.
    pub fn create(file: &std::fs::File) -> Result<AgentLogStream, AgentLogError> {
        file.set_len(LOG_CAPACITY).map_err(AgentLogError::Io)?;
        let map = memmap2::MmapOptions::new().len(LOG_CAPACITY as usize).map_raw(file).map_err(AgentLogError::Io)?;
        let mut stream = AgentLogStream {
            map,
            file: file.try_clone().ok(),
            read_chunks: Vec::new(),
            recycled: 0,
            allocated: 0,
            record_bytes: 0,
            next_claim: 0,
            open: Vec::new(),
            parked: Default::default(),
            next_seq: 0,
            delivered: 0,
            waited: 0,
            current: AgentRecord::default(),
            tsc: crate::tsc::TscClock::new(),
            time_is_tsc: false,
        };
        // The program's first records land in memory allocated already.
        stream.allocate_ahead(FIRST_CHUNK);
        Ok(stream)
    }

    /// The 8-byte word at `offset`, atomically (the program writes it).
    fn word(&self, offset: u64) -> u64 {
        self.atomic(offset).load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The 8-byte word at `offset` as an atomic shared with the agent.
    fn atomic(&self, offset: u64) -> &std::sync::atomic::AtomicU64 {
        debug_assert!(
            offset.is_multiple_of(8) && offset + 8 <= LOG_CAPACITY,
            "log offset {offset:#x} out of the mapping"
        );
        // SAFETY: the offset is inside the mapping and 8-aligned (every
        // caller stays inside the header, the tables, or a chunk whose
        // place was checked when its claim was read; the mapping is
        // page-aligned); the file is sized to the whole mapping, so no
        // access is past its end. The agent writes these words while they
        // are read: an atomic access is how to read memory another process
        // writes.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset as usize).cast::<u64>()) }
    }

    /// Whether the agent has started (its header is there).
    pub fn started(&self) -> bool {
        self.record_bytes != 0
    }

    /// Reads what the program has written since the last call and hands
    /// over, in call order, every record whose predecessors have all been
    /// read; with `finished` (the program has ended) hands over all.
    /// Returns how many records were handed over.
    pub fn poll(&mut self, finished: bool, deliver: &mut dyn FnMut(&AgentRecord)) -> Result<u64, AgentLogError> {
        use std::sync::atomic::Ordering::{Acquire, Release};
        if self.record_bytes == 0 {
            if self.atomic(header::MAGIC).load(Acquire) != MARKER {
                return if finished { Err(AgentLogError::NotStarted) } else { Ok(0) };
            }
            self.record_bytes = match self.word(header::RECORD_BYTES) {
                0 => RECORD_BYTES,
                n if (RECORD_BYTES as u64..=(RECORD_BYTES + 8 * MAX_STACK) as u64).contains(&n) && n % 8 == 0 => {
                    n as usize
                }
                n => return Err(AgentLogError::Damaged(n)),
            };
            self.time_is_tsc = self.word(header::TIME_IS_TSC) == 1;
        }
        if self.time_is_tsc {
            // Every record read below carries an earlier count.
            self.tsc.update();
        }
        self.allocate_ahead(self.word(header::NEXT_CHUNK).min(LOG_CAPACITY));
        // The chunks claimed since, in claim order. A claim whose entry is
        // not written yet (its thread is between the two) waits for the
        // next poll; at the end it never will be.
        let claims = self.atomic(header::CLAIMS).load(Acquire);
        while self.next_claim < claims {
            let entry = self.atomic(CLAIM_TABLE_AT + 8 * (self.next_claim % CLAIM_SLOTS));
            let at = entry.load(Acquire);
            if at == 0 && !finished {
                break;
            }
            if at != 0 {
                if at < FIRST_CHUNK
                    || !(at - FIRST_CHUNK).is_multiple_of(CHUNK_BYTES as u64)
                    || at > LOG_CAPACITY - CHUNK_BYTES as u64
                {
                    return Err(AgentLogError::BadClaim(at));
                }
                entry.store(0, Release);
                self.open.push(OpenChunk { end: at + CHUNK_BYTES as u64, at, marker: MARKER ^ self.next_claim });
            }
            self.next_claim += 1;
        }
        let bytes = self.record_bytes as u64;
        let mut delivered = 0;
        let mut i = 0;
        while i < self.open.len() {
            let OpenChunk { end, mut at, marker } = self.open[i];
            while at + bytes <= end && self.atomic(at + MARKER_OFFSET).load(Acquire) == marker {
                let seq = self.word(at);
                if seq == self.next_seq && self.parked.is_empty() {
                    // In order (always, with one thread): no parking.
                    delivered += self.hand_over(seq, at, deliver);
                } else {
                    self.waited += 1;
                    self.parked.push(std::cmp::Reverse((seq, at)));
                }
                at += bytes;
            }
            // Records never straddle chunks: a chunk ends with a few unused
            // bytes.
            if at + bytes <= end {
                self.open[i].at = at;
                i += 1;
            } else {
                // In claim order, not swapped: a thread's chunks are read
                // in the order it filled them, or its records would park.
                self.open.remove(i);
                self.read_chunks.push(end - CHUNK_BYTES as u64);
            }
        }
        while let Some(&std::cmp::Reverse((seq, at))) = self.parked.peek() {
            // Past MAX_PARKED the numbers in between are given up on
            // (counted in `missing`).
            if seq > self.next_seq && !finished && self.parked.len() < MAX_PARKED {
                break;
            }
            self.parked.pop();
            delivered += self.hand_over(seq, at, deliver);
        }
        if !finished {
            self.recycle_read_chunks();
        }
        self.release_read_chunks();
        self.delivered += delivered;
        Ok(delivered)
    }

    /// Hands chunks read to their end back to the agent, to be filled
    /// again, once no parked record (read from its chunk when handed over)
    /// can be in them, as long as the free ring holds fewer than
    /// [`RECYCLE_LIMIT`].
    fn recycle_read_chunks(&mut self) {
        use std::sync::atomic::Ordering::{Acquire, Release};
        if !self.parked.is_empty() {
            return;
        }
        let given = self.recycled;
        let taken = self.atomic(header::FREE_TAKEN).load(Acquire);
        let room = RECYCLE_LIMIT.saturating_sub(given.saturating_sub(taken)) as usize;
        let handed = room.min(self.read_chunks.len());
        for (i, &chunk) in self.read_chunks[..handed].iter().enumerate() {
            // Entry (given + i) % FREE_SLOTS was taken already: fewer than
            // RECYCLE_LIMIT (< FREE_SLOTS) entries are outstanding.
            self.atomic(FREE_RING_AT + 8 * ((given + i as u64) % FREE_SLOTS)).store(chunk, Release);
        }
        self.read_chunks.drain(..handed);
        self.recycled += handed as u64;
        self.atomic(header::FREE_GIVEN).store(self.recycled, Release);
    }

    /// Allocates the log's memory ahead of the chunks the program has
    /// claimed: the kernel zeroes new pages, and this way it does so on
    /// linetrace's core, not in the program's allocator calls (which then
    /// only map pages that exist).
    fn allocate_ahead(&mut self, claimed: u64) {
        let want = (claimed + ALLOCATE_AHEAD).min(LOG_CAPACITY);
        if want < self.allocated + ALLOCATE_AHEAD / 2 {
            return;
        }
        let Some(file) = &self.file else { return };
        let from = self.allocated.max(claimed);
        // Without it (no memory to spare, another file system) the program
        // allocates the pages itself.
        let done = fallocate(file, libc::FALLOC_FL_KEEP_SIZE, from, want);
        self.allocated = if done { want } else { LOG_CAPACITY };
    }

    /// Gives back the memory of the chunks read to their end (their threads
    /// have moved on to other chunks, so nothing writes there again), once
    /// no parked record, which is read from its chunk when handed over,
    /// can be in them.
    fn release_read_chunks(&mut self) {
        // In batches of adjacent chunks: each hole punched takes the file's
        // lock, which the program's page faults in the log also take.
        if !self.parked.is_empty() || self.read_chunks.len() < RELEASE_BATCH {
            return;
        }
        self.read_chunks.sort_unstable();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for start in self.read_chunks.drain(..) {
            match ranges.last_mut() {
                Some((_, end)) if *end == start => *end += CHUNK_BYTES as u64,
                _ => ranges.push((start, start + CHUNK_BYTES as u64)),
            }
        }
        for (start, end) in ranges {
            let Some(file) = &self.file else { break };
            if !fallocate(file, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, start, end) {
                // A file system without holes: the memory stays until the end.
                self.file = None;
            }
        }
    }

    /// Hands the record `seq` at `at` over; returns 1 if it was readable.
    fn hand_over(&mut self, seq: u64, at: u64, deliver: &mut dyn FnMut(&AgentRecord)) -> u64 {
        self.next_seq = self.next_seq.max(seq + 1);
        if self.read_record(at) {
            deliver(&self.current);
            1
        } else {
            0
        }
    }

    /// Reads the complete record at `at` into `self.current`.
    fn read_record(&mut self, at: u64) -> bool {
        let tid_kind = self.word(at + 64);
        let Some(kind) = AgentKind::from_u32((tid_kind >> 32) as u32) else { return false };
        let word = |i: u64| self.word(at + 8 * i);
        let (seq, time, ptr_in, ptr_out, size, align, callsite, usable) =
            (word(0), word(1), word(2), word(3), word(4), word(5), word(6), word(7));
        let time_ns = if self.time_is_tsc { self.tsc.ns(time) } else { time };
        let mut stack = std::mem::take(&mut self.current.stack);
        stack.clear();
        let mut slot = at + RECORD_BYTES as u64;
        while slot < at + self.record_bytes as u64 {
            match self.word(slot) {
                0 => break,
                a => stack.push(a),
            }
            slot += 8;
        }
        self.current = AgentRecord {
            seq,
            time_ns,
            ptr_in,
            ptr_out,
            size,
            align,
            callsite,
            usable,
            tid: tid_kind as u32,
            kind,
            stack,
        };
        true
    }

    /// Chunks read to their end and handed back to the agent to fill again.
    pub fn recycled(&self) -> u64 {
        self.recycled
    }

    /// Records handed over so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Records that came before one numbered lower (another thread's, not
    /// complete yet) and waited for it: none with one thread.
    pub fn waited(&self) -> u64 {
        self.waited
    }

    /// Calls the agent could not record (its log filled its file system).
    pub fn dropped(&self) -> u64 {
        if self.record_bytes == 0 { 0 } else { self.word(header::DROPPED) }
    }

    /// How the agent unwound the stacks it recorded: by its own unwinder,
    /// by backtrace() (frames its unwinder does not follow), and, when
    /// [`UNWIND_CHECK_ENV`] is set, how many of its own unwinder's stacks
    /// differ from backtrace()'s (which are the ones recorded then).
    pub fn unwinding(&self) -> Unwinding {
        if self.record_bytes == 0 {
            return Unwinding::default();
        }
        Unwinding {
            fast: self.word(header::UNWOUND_FAST),
            slow: self.word(header::UNWOUND_SLOW),
            mismatched: self.word(header::UNWIND_MISMATCH),
        }
    }

    /// Which custom allocator functions the agent patched: bit n for the
    /// n-th of [`HOOKS_ENV`] (one missing: its code was not what linetrace
    /// read, or there was no room for a trampoline near it).
    pub fn hooks_installed(&self) -> u64 {
        if self.record_bytes == 0 { 0 } else { self.word(header::HOOKS_INSTALLED) }
    }

    /// Calls of custom allocator functions the agent ran unrecorded: nested
    /// in each other deeper than it keeps track of (16).
    pub fn hooks_too_deep(&self) -> u64 {
        if self.record_bytes == 0 { 0 } else { self.word(header::HOOKS_TOO_DEEP) }
    }

    /// Calls numbered but never complete (cut by the program's end in the
    /// middle of their record, or given up on).
    pub fn missing(&self) -> u64 {
        if self.record_bytes == 0 { 0 } else { self.word(header::SEQ).saturating_sub(self.delivered) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, kind: u32, complete: bool) -> Vec<u8> {
        let words =
            [seq, 7, 0, 0x1000, 24, 0, 0x401000, 24, u64::from(kind) << 32 | 42, if complete { MARKER } else { 0 }];
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Writes `records` as claim `claim`'s, into the `place`-th chunk of
    /// `file` (marked as that claim's), and the header as the agent would:
    /// `claimed` claims, `numbered` calls.
    fn write_at(file: &std::fs::File, claim: u64, place: u64, records: &[Vec<u8>], claimed: u64, numbered: u64) {
        use std::os::unix::fs::FileExt;
        let at = FIRST_CHUNK + place * CHUNK_BYTES as u64;
        let mut bytes = records.concat();
        for record in bytes.chunks_mut(RECORD_BYTES) {
            let marker = &mut record[MARKER_OFFSET as usize..RECORD_BYTES];
            if marker == MARKER.to_le_bytes() {
                marker.copy_from_slice(&(MARKER ^ claim).to_le_bytes());
            }
        }
        file.write_all_at(&bytes, at).expect("write records");
        file.write_all_at(&at.to_le_bytes(), CLAIM_TABLE_AT + 8 * (claim % CLAIM_SLOTS)).expect("write claim");
        let put = |offset: u64, value: u64| file.write_all_at(&value.to_le_bytes(), offset).expect("write header");
        put(header::NEXT_CHUNK, (FIRST_CHUNK + claimed * CHUNK_BYTES as u64).max(at + CHUNK_BYTES as u64));
        put(header::RECORD_BYTES, RECORD_BYTES as u64);
        put(header::SEQ, numbered);
        put(header::CLAIMS, claimed);
        put(header::MAGIC, MARKER);
    }

    /// Writes `records` as claim `chunk`'s into the chunk of the same
    /// number (no chunk reused).
    fn write(file: &std::fs::File, chunk: u64, records: &[Vec<u8>], claimed: u64, numbered: u64) {
        write_at(file, chunk, chunk, records, claimed, numbered);
    }

    fn poll(stream: &mut AgentLogStream, finished: bool) -> Vec<u64> {
        let mut seqs = Vec::new();
        stream.poll(finished, &mut |r| seqs.push(r.seq)).expect("poll");
        seqs
    }

    #[test]
    fn records_are_handed_over_in_call_order_as_they_complete() {
        let file = tempfile::tempfile().expect("temp file");
        let mut stream = AgentLogStream::create(&file).expect("map");
        assert!(poll(&mut stream, false).is_empty(), "the agent has not started");
        assert!(!stream.started());
        // Two threads' chunks; record 1 is on the second thread, not
        // written yet: 0 goes, 2 waits.
        write(&file, 0, &[record(0, 0, true), record(2, 3, true)], 2, 3);
        assert_eq!(poll(&mut stream, false), vec![0]);
        write(&file, 1, &[record(1, 16, true), record(3, 0, false)], 2, 4);
        assert_eq!(poll(&mut stream, false), vec![1, 2], "1 came, and 2 was waiting for it");
        // Record 3 was cut in half by the program's end.
        assert_eq!(poll(&mut stream, true), Vec::<u64>::new());
        assert_eq!(stream.delivered(), 3);
        assert_eq!(stream.missing(), 1, "the record cut in half");
        // Kinds and thread ids as written.
        let mut kinds = Vec::new();
        let file = tempfile::tempfile().expect("temp file");
        let mut stream = AgentLogStream::create(&file).expect("map");
        write(&file, 0, &[record(0, 16, true), record(1, 3, true)], 1, 2);
        stream.poll(true, &mut |r| kinds.push((r.kind, r.tid))).expect("poll");
        assert_eq!(kinds, vec![(AgentKind::New, 42), (AgentKind::Format(crate::format::AllocKind::Free), 42)]);
    }

    #[test]
    fn one_threads_chunks_are_read_in_the_order_it_filled_them() {
        let file = tempfile::tempfile().expect("temp file");
        let mut stream = AgentLogStream::create(&file).expect("map");
        let per_chunk = (CHUNK_BYTES / RECORD_BYTES) as u64;
        let chunk = |c: u64, complete: bool| -> Vec<Vec<u8>> {
            (0..per_chunk).map(|i| record(c * per_chunk + i, 0, complete || i == 0)).collect()
        };
        // The first poll finds chunk 0 begun; by the next one the thread
        // has filled it and three more.
        write(&file, 0, &chunk(0, false), 1, 1);
        assert_eq!(poll(&mut stream, false), vec![0]);
        write(&file, 0, &chunk(0, true), 4, 4 * per_chunk);
        for c in 1..4 {
            write(&file, c, &chunk(c, true), 4, 4 * per_chunk);
        }
        let seqs = poll(&mut stream, false);
        assert_eq!(seqs, (1..4 * per_chunk).collect::<Vec<_>>());
        assert_eq!(stream.waited(), 0, "no record of a lone thread waits for another");
    }

    #[test]
    fn the_logs_memory_is_allocated_ahead_and_given_back_behind() {
        // Where the log lives when recording (tmpfs).
        let Ok(file) = tempfile::tempfile_in("/dev/shm") else { return };
        use std::os::unix::fs::MetadataExt;
        let blocks = |file: &std::fs::File| file.metadata().expect("metadata").blocks() * 512;
        let mut stream = AgentLogStream::create(&file).expect("map");
        assert!(blocks(&file) >= ALLOCATE_AHEAD, "memory for the first records is allocated before the program runs");
        // From here on only what is given back changes the file's size.
        stream.allocated = LOG_CAPACITY;
        let per_chunk = (CHUNK_BYTES / RECORD_BYTES) as u64;
        // Full chunks to fill the free ring and one batch more, and the
        // chunk its thread is still writing.
        let full = RECYCLE_LIMIT + RELEASE_BATCH as u64;
        for c in 0..full {
            let records: Vec<Vec<u8>> = (0..per_chunk).map(|i| record(c * per_chunk + i, 0, true)).collect();
            write(&file, c, &records, full, full * per_chunk);
        }
        write(&file, full, &[record(full * per_chunk, 0, true)], full + 1, full * per_chunk + 1);
        let before = blocks(&file);
        assert!(before >= full * CHUNK_BYTES as u64, "the records take memory: {before}");
        assert_eq!(poll(&mut stream, false).len() as u64, full * per_chunk + 1);
        let after = blocks(&file);
        let released = RELEASE_BATCH as u64 * CHUNK_BYTES as u64;
        // (The free ring's page is written for the first time meanwhile.)
        assert!(
            after <= before - released + 4096,
            "the chunks past the free ring given back: {before} -> {after} bytes"
        );
        assert!(
            after > RECYCLE_LIMIT * CHUNK_BYTES as u64,
            "the chunks in the free ring and the one being written keep their memory: {after} bytes"
        );
        assert_eq!(stream.word(header::FREE_GIVEN), RECYCLE_LIMIT, "the free ring is full");
    }

    /// Chunks read to their end go to the free ring; a claim that fills
    /// one again is read from there, and what the chunk held before does
    /// not pass for new records.
    #[test]
    fn read_chunks_are_filled_again_and_their_old_records_ignored() {
        let file = tempfile::tempfile().expect("temp file");
        let mut stream = AgentLogStream::create(&file).expect("map");
        let per_chunk = (CHUNK_BYTES / RECORD_BYTES) as u64;
        let full = |c: u64| -> Vec<Vec<u8>> { (0..per_chunk).map(|i| record(c * per_chunk + i, 0, true)).collect() };
        write(&file, 0, &full(0), 2, 2 * per_chunk);
        write(&file, 1, &full(1), 2, 2 * per_chunk);
        assert_eq!(poll(&mut stream, false).len() as u64, 2 * per_chunk);
        assert_eq!(stream.word(header::FREE_GIVEN), 2, "both chunks handed back");
        assert_eq!(stream.word(CLAIM_TABLE_AT), 0, "claim entries taken are cleared for the agent");
        let given: Vec<u64> = (0..2).map(|i| stream.word(FREE_RING_AT + 8 * i)).collect();
        assert_eq!(given, [FIRST_CHUNK, FIRST_CHUNK + CHUNK_BYTES as u64]);
        // The agent takes the first back for claim 2 and writes three
        // records over the old ones: only those three are new.
        use std::os::unix::fs::FileExt;
        file.write_all_at(&1u64.to_le_bytes(), header::FREE_TAKEN).expect("take");
        let n = 2 * per_chunk;
        write_at(&file, 2, 0, &[record(n, 0, true), record(n + 1, 0, true), record(n + 2, 0, true)], 3, n + 3);
        assert_eq!(poll(&mut stream, false), vec![n, n + 1, n + 2]);
        assert_eq!(poll(&mut stream, true), Vec::<u64>::new(), "nothing more at the end");
        assert_eq!(stream.missing(), 0);
        // A claim naming no chunk's start is damage, not a read out of place.
        write_at(&file, 3, 5, &[], 4, n + 3);
        file.write_all_at(&(FIRST_CHUNK + 8).to_le_bytes(), CLAIM_TABLE_AT + 8 * 3).expect("corrupt");
        assert!(matches!(stream.poll(false, &mut |_| {}), Err(AgentLogError::BadClaim(_))));
    }

    #[test]
    fn a_program_without_the_agent_is_told_apart() {
        let file = tempfile::tempfile().expect("temp file");
        let mut stream = AgentLogStream::create(&file).expect("map");
        assert!(matches!(stream.poll(true, &mut |_| {}), Err(AgentLogError::NotStarted)));
        use std::os::unix::fs::FileExt;
        file.write_all_at(&12u64.to_le_bytes(), header::RECORD_BYTES).expect("write header");
        file.write_all_at(&MARKER.to_le_bytes(), header::MAGIC).expect("write header");
        assert!(matches!(stream.poll(false, &mut |_| {}), Err(AgentLogError::Damaged(12))));
    }

    #[test]
    fn the_agent_was_built_with_its_symbols() {
        if ALLOC_AGENT.is_empty() {
            // No C compiler at build time: the agent is unavailable, and
            // `record --allocations` says so (tested in the CLI).
            return;
        }
        assert_eq!(&ALLOC_AGENT[..4], b"\x7fELF");
        let text = String::from_utf8_lossy(ALLOC_AGENT);
        for symbol in [
            "malloc",
            "posix_memalign",
            "_Znwm",
            "_ZdlPv",
            "_ZnwmSt11align_val_t",
            "_ZdaPvSt11align_val_tRKSt9nothrow_t",
            "mremap",
        ] {
            assert!(text.contains(symbol), "{symbol} is exported");
        }
    }
}

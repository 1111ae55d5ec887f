//! The allocation agent: a shared library (`agent/alloc_agent.c`, built by
//! `build.rs`) that `linetrace record --allocations` preloads into the
//! program, and the log it writes.
//!
//! The agent records every allocator call of every thread into a shared
//! file mapping: a 4 KiB header, then 64 KiB chunks of fixed-size records
//! that threads claim with an atomic add. Records are numbered by one
//! global counter, so [`AgentLog::read`] restores the order of all threads
//! by sorting; a record counts once its marker (its last word) is written,
//! so records cut by a crash are skipped. [`AgentRecord`] is the layout;
//! the C `struct record` must stay equal to it.

use std::io::Read;

/// The agent, as a shared library; empty when the build had no C compiler.
pub const ALLOC_AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/liblinetrace_alloc.so"));

/// Environment variable naming the log file the agent writes.
pub const LOG_ENV: &str = "LINETRACE_ALLOC_OUT";
/// Environment variable with the callers to record above each call's
/// calling instruction (0 to 32).
pub const STACK_ENV: &str = "LINETRACE_ALLOC_STACK";
/// Most callers the agent records.
pub const MAX_STACK: usize = 32;
/// Environment variable naming the file the agent copies
/// `/proc/self/maps` to, at start and at exit.
pub const MAPS_ENV: &str = "LINETRACE_ALLOC_MAPS";

/// Marks the header and every complete record.
const MARKER: u64 = 0x4c54_414c_4c4f_4321;
/// Bytes before the first chunk.
const HEADER_BYTES: u64 = 4096;
/// Bytes of a chunk a thread claims.
const CHUNK_BYTES: usize = 64 << 10;
/// Bytes of one record without its stack (the header says how many
/// follow).
pub const RECORD_BYTES: usize = 80;

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
}

impl AgentKind {
    fn from_u32(v: u32) -> Option<AgentKind> {
        match v {
            16 => Some(AgentKind::New),
            17 => Some(AgentKind::Delete),
            18 => Some(AgentKind::Mremap),
            v => crate::format::AllocKind::from_u8(u8::try_from(v).ok()?).map(AgentKind::Format),
        }
    }
}

/// One allocator call, as the agent wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
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

impl AgentRecord {
    /// Parses a record of `bytes` bytes (its stack is the rest after the
    /// fixed part).
    fn parse(b: &[u8], bytes: usize) -> Option<AgentRecord> {
        let b = b.get(..bytes.max(RECORD_BYTES))?;
        let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        if word(9) != MARKER {
            return None;
        }
        let stack = (RECORD_BYTES / 8..b.len() / 8).map(word).take_while(|&a| a != 0).collect();
        let tid_kind = word(8);
        Some(AgentRecord {
            seq: word(0),
            time_ns: word(1),
            ptr_in: word(2),
            ptr_out: word(3),
            size: word(4),
            align: word(5),
            callsite: word(6),
            usable: word(7),
            tid: tid_kind as u32,
            kind: AgentKind::from_u32((tid_kind >> 32) as u32)?,
            stack,
        })
    }
}

/// Everything an agent log holds, in call order. Records are parsed as
/// they are visited ([`AgentLog::records`]): a log of millions of calls is
/// held once, as read.
#[derive(Clone, Debug, Default)]
pub struct AgentLog {
    /// The log's bytes after its header.
    body: Vec<u8>,
    /// Offsets of complete records in `body`, in call order.
    order: Vec<u32>,
    /// Bytes of a record, its stack included.
    record_bytes: usize,
    /// Calls the agent could not record (its log was full).
    pub dropped: u64,
    /// Calls numbered but missing (cut by a crash mid-record).
    pub missing: u64,
}

/// Why a log cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentLogError {
    /// Reading failed.
    #[error("cannot read the allocation log")]
    Io(#[source] std::io::Error),
    /// The agent never started in the program (not preloaded: a static
    /// program, or one that clears LD_PRELOAD).
    #[error("the allocation agent did not start in the program (statically linked, or LD_PRELOAD cleared?)")]
    NotStarted,
    /// The log is larger than this reader indexes (4 GiB).
    #[error("the allocation log is larger than 4 GiB")]
    TooLarge,
}

impl AgentLog {
    /// Reads a log: the header, then the chunks it says were claimed.
    pub fn read(file: &mut std::fs::File) -> Result<AgentLog, AgentLogError> {
        let mut header = [0u8; 40];
        if file.read_exact(&mut header).is_err() {
            return Err(AgentLogError::NotStarted);
        }
        let word = |i: usize| u64::from_le_bytes(header[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        if word(0) != MARKER {
            return Err(AgentLogError::NotStarted);
        }
        let (claimed, numbered, dropped) = (word(1), word(2), word(3));
        let record_bytes = match word(4) as usize {
            0 => RECORD_BYTES,
            n if (RECORD_BYTES..=RECORD_BYTES + 8 * MAX_STACK).contains(&n) && n % 8 == 0 => n,
            _ => return Err(AgentLogError::NotStarted),
        };
        if claimed > u64::from(u32::MAX) {
            return Err(AgentLogError::TooLarge);
        }
        let mut body = Vec::new();
        std::io::Seek::seek(file, std::io::SeekFrom::Start(HEADER_BYTES)).map_err(AgentLogError::Io)?;
        file.take(claimed.saturating_sub(HEADER_BYTES)).read_to_end(&mut body).map_err(AgentLogError::Io)?;
        // Records never straddle chunks: each chunk ends with a few unused
        // bytes.
        let mut keyed: Vec<(u64, u32)> = Vec::new();
        for (c, chunk) in body.chunks(CHUNK_BYTES).enumerate() {
            for (i, bytes) in chunk.chunks_exact(record_bytes).enumerate() {
                if let Some(r) = AgentRecord::parse(bytes, record_bytes) {
                    keyed.push((r.seq, (c * CHUNK_BYTES + i * record_bytes) as u32));
                }
            }
        }
        keyed.sort_unstable_by_key(|k| k.0);
        let order: Vec<u32> = keyed.into_iter().map(|k| k.1).collect();
        let missing = numbered.saturating_sub(order.len() as u64 + dropped);
        Ok(AgentLog { body, order, record_bytes, dropped, missing })
    }

    /// Complete records.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The records, in call order.
    pub fn records(&self) -> impl Iterator<Item = AgentRecord> + '_ {
        self.order.iter().filter_map(|&at| AgentRecord::parse(self.body.get(at as usize..)?, self.record_bytes))
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

    #[test]
    fn records_are_read_in_call_order_and_cut_ones_skipped() {
        let mut bytes = vec![0u8; HEADER_BYTES as usize];
        let chunk = |recs: &[Vec<u8>]| {
            let mut c: Vec<u8> = recs.concat();
            c.resize(1 << 16, 0);
            c
        };
        bytes.extend(chunk(&[record(0, 0, true), record(2, 3, true)]));
        bytes.extend(chunk(&[record(1, 16, true), record(3, 0, false)]));
        let words = [MARKER, bytes.len() as u64, 4, 0];
        for (i, w) in words.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let mut file = tempfile::tempfile().expect("temp file");
        std::io::Write::write_all(&mut file, &bytes).expect("write");
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0)).expect("seek");
        let log = AgentLog::read(&mut file).expect("read");
        let records: Vec<AgentRecord> = log.records().collect();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(records[1].kind, AgentKind::New);
        assert_eq!(records[2].kind, AgentKind::Format(crate::format::AllocKind::Free));
        assert_eq!(records[0].tid, 42);
        assert_eq!(log.missing, 1, "the record cut in half");
        let mut empty = tempfile::tempfile().expect("temp file");
        assert!(matches!(AgentLog::read(&mut empty), Err(AgentLogError::NotStarted)));
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
        for symbol in ["malloc", "posix_memalign", "_Znwm", "_ZdlPv", "mremap"] {
            assert!(text.contains(symbol), "{symbol} is exported");
        }
    }
}

//! The linetrace trace file format, version 7 (versions 1 to 6 still read).
//!
//! This module is a public contract between the recorders (`instrument`, and
//! later the in-process runtime) and the `decoder`. Changing the byte layout
//! means bumping [`VERSION`] and keeping a fixture of every old version in
//! `trace-rt/tests/data/` that the reader still has to read.
//!
//! # Layout
//!
//! ```text
//! file    := header chunk*
//! header  := "LNTRACE\0" version:u16le flags:u16le reserved:u32le        (16 bytes)
//! chunk   := "LTCK" kind:u8 reserved:[u8;3] thread:u32le
//!            payload_len:u32le raw_len:u32le crc:u32le payload  (24 + payload_len)
//! crc     := crc32(header bytes 4..20 ++ payload)  -- kind, thread and sizes are covered too
//! payload := zstd(raw)   -- each chunk is compressed on its own
//! ```
//!
//! Chunk kinds ([`ChunkKind`]):
//! - `Metadata` (always the first chunk): JSON [`Metadata`] — argv, executable,
//!   build-id, backend, line size, clock.
//! - `Modules`: JSON list of [`Module`]s (path, build-id, mapped ranges and
//!   file offsets), so PIE, ASLR and shared libraries can be symbolized later.
//!   Several such chunks may appear (libraries loaded late); later ones add.
//! - `Mappings` (v7): JSON list of [`DataMapping`]s, the mappings no module
//!   symbolizes (the heap, stacks, anonymous memory, files that are not ELF
//!   such as locale data), as found when invocations start, so that memory
//!   the program allocated before the recording still has a name. Later
//!   chunks add (the heap grows: each extent found is written once).
//! - `Sites`: part of the static site table, a list of [`Site`]s (pc,
//!   instruction length, access kind, access size, element count).
//!   v2: `first_id:varint count:varint site*` — the chunk says which ids it
//!   defines, so recorders can hand out ids without a global order and a lost
//!   chunk leaves a visible hole instead of renumbering every later site.
//!   v1: `count:varint site*`, ids assigned in order of definition.
//!   A site is `pc_delta:zigzag len:u8 kind:u8 size:varint count:varint`
//!   (the pc a difference to the previous site's in the chunk); since v6,
//!   bit 7 of `kind` set means `n:u8 (site:varint offset:zigzag){n}`
//!   follows, 1 <= n <= [`IMPLIED_MOST`]: the accesses an `Access` of this
//!   site implies ([`Site::implied`]). A reader hands them out right after
//!   that access, each at its address plus `offset`; so a recorder that
//!   knows an access repeats the address registers of the one before it
//!   (`x[i] += y`: a load and a store of one address) writes one event for
//!   both. Implied sites are defined before the site implying them.
//!   A site is always defined in a chunk *before* the first events chunk that
//!   uses it.
//! - `Strings` (v2): JSON `{"first": id, "strings": [...]}`: strings that
//!   events refer to by id (the path of an `exec`).
//! - `Events`: the dynamic events of one thread (`thread` in the chunk header).
//!   v2: `seq:varint time:varint event*` — `seq` numbers the thread's chunks
//!   from 0 (a gap means chunks were lost), `time` is when the chunk's first
//!   event was recorded, in nanoseconds since the recording started (0 when
//!   the recorder keeps no clock), so threads can be interleaved by time.
//!   v1: `event*`.
//! - `End`: JSON [`Trailer`] — how the target ended, and whether the recording
//!   was cut short. Its absence means the recorder died before finishing.
//!
//! # Event encoding
//!
//! A raw events payload is a sequence of records `tag:u8 field*`, each field a
//! LEB128 varint (signed fields zig-zag). Access addresses are stored as the
//! delta to the previous address *of the same site within the same chunk*
//! (the first use of a site in a chunk is a delta from 0), so a loop that
//! strides through an array produces a few identical bytes per access, which
//! zstd then folds to well under one byte. Since v3, calls and tail calls
//! (`callsite target sp`) and returns (`sp`) are likewise differences
//! (zig-zag) to the previous flow event's call site, target and stack pointer
//! in the chunk (0 at its start); v1 and v2 store them as plain varints. A
//! comparator called in a loop then costs 4-5 bytes a call, not ~19. Since
//! v4, allocation events are differences too: `Alloc` is `flags_kind:u8
//! size align [ptr_in] [ptr_out] callsite`, the kind in bits 0-5 of
//! `flags_kind`, bit 6 set when `ptr_in` is not 0 and stored, bit 7 the same
//! for `ptr_out`; each stored pointer is the difference to the pointer stored
//! before it in the chunk (in or out), the call site the difference to the
//! previous `Alloc`'s; the time of an `AllocDetail` is the difference to the
//! previous detail's. An allocator call with its detail and stack in a
//! malloc/free loop then takes 18 bytes, not 33. Since v5, an `Access`
//! whose site is the last one written in long form (`1 site delta`) with
//! the same site modulo 128 in the chunk is written `0x80 | (site % 128)`
//! and the delta: one byte for what took two or three, so the loops that
//! make most of a trace cost a third less before compression (and less to
//! compress and decode). Because the delta state restarts in every chunk,
//! every chunk decodes on its own.
//!
//! v2 reserves the tag `Extension` (`tag kind:varint len:varint byte*`) for
//! events added later: a reader skips extension kinds it does not know, so
//! new kinds of events need no new version. Kind 1 is
//! [`Event::AllocDetail`] (`usable:varint time_ns:varint`; since v4 the time
//! is a zig-zag difference, see above), kind 2
//! [`Event::AllocStack`] (`stack:varint`), kind 3 [`Event::ProgramBreak`]
//! (`from:varint to:varint`), kind 4 [`Event::CustomAllocation`]
//! (`allocator:varint op:u8 size:varint ptr_in:varint ptr_out:varint
//! callsite:varint`).
//!
//! # Robustness
//!
//! A file cut anywhere (crash, `kill -9`) reads up to its last complete chunk
//! and [`TraceReader::end`] says it was truncated. A chunk that fails its
//! checks in the middle of the file (bad magic, checksum, payload, or a length
//! that runs past the next chunk) is skipped: the reader resynchronises at the
//! next chunk that checks out and lists what it skipped in
//! [`TraceReader::damage`]; only a file whose header or metadata is unreadable
//! is an error ([`FormatError`]). Sizes in chunk headers are capped
//! ([`MAX_CHUNK_BYTES`]) so a corrupt header cannot make the reader allocate
//! more than a few tens of megabytes.

mod chunk_output;
mod error;
mod event;
mod packed;
mod reader;
mod worker;
mod writer;

pub mod varint;

pub use error::FormatError;
pub use event::{ChunkDecoder, ChunkEncoder};
pub use packed::{PACKED_ADDRESS_BITS, PackedKind, PackedRun, pack_access, unpack_access};
pub use reader::{ChunkPosition, Damage, Record, TraceEnd, TraceReader, event_threads};
pub use writer::TraceWriter;

use serde::{Deserialize, Serialize};

/// First eight bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"LNTRACE\0";
/// Format version written by this crate.
pub const VERSION: u16 = 7;
/// Oldest format version the reader still reads.
pub const OLDEST_VERSION: u16 = 1;
/// Size of the file header in bytes.
pub const HEADER_LEN: usize = 16;
/// Magic that starts every chunk.
pub const CHUNK_MAGIC: [u8; 4] = *b"LTCK";
/// Size of a chunk header in bytes.
pub const CHUNK_HEADER_LEN: usize = 24;
/// Upper bound on both the compressed and the raw size of one chunk. Writers
/// aim at 1 MiB chunks; the cap keeps a reader of a corrupt or hostile file
/// within a few tens of megabytes.
pub const MAX_CHUNK_BYTES: u32 = 16 << 20;
/// Cache line size used when nothing else is configured.
pub const DEFAULT_LINE_SIZE: u32 = 64;

/// CRC-32 over the chunk header fields after the magic and before the CRC,
/// then the payload: a flipped thread id or kind is caught like a flipped
/// payload byte.
fn chunk_checksum(header: &[u8; CHUNK_HEADER_LEN], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&header[4..20]);
    h.update(payload);
    h.finalize()
}

/// Index of a [`Site`] in the file's site table.
pub type SiteId = u32;
/// Kernel thread id of the thread an event belongs to.
pub type ThreadId = u32;
/// Index of a string in the file's string table (v2).
pub type StringId = u32;

/// What a chunk carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkKind {
    /// JSON [`Metadata`].
    Metadata = 1,
    /// JSON list of [`Module`]s.
    Modules = 2,
    /// Encoded list of [`Site`]s.
    Sites = 3,
    /// Encoded [`Event`]s of one thread.
    Events = 4,
    /// JSON [`Trailer`].
    End = 5,
    /// JSON string table (v2).
    Strings = 6,
    /// JSON list of [`DataMapping`]s (v7).
    Mappings = 7,
}

impl ChunkKind {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => ChunkKind::Metadata,
            2 => ChunkKind::Modules,
            3 => ChunkKind::Sites,
            4 => ChunkKind::Events,
            5 => ChunkKind::End,
            6 => ChunkKind::Strings,
            7 => ChunkKind::Mappings,
            _ => return None,
        })
    }
}

/// Facts about the recording, written once at the start of the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Command line of the traced program, `argv[0]` first.
    pub argv: Vec<String>,
    /// Absolute path of the traced executable.
    pub executable: String,
    /// GNU build-id of the executable, lowercase hex, if it has one.
    pub build_id: Option<String>,
    /// Which tracer produced the file, e.g. `ptrace-singlestep`.
    pub backend: String,
    /// Cache line size in bytes the recorder assumed (decoders may override).
    pub line_size: u32,
    /// What orders events and what chunk times mean.
    pub clock: Clock,
    /// Name of the traced function as the user gave it, resolved symbol.
    pub function: Option<String>,
    /// Process id of the traced program.
    pub pid: u32,
    /// Wall-clock start of the recording, milliseconds since the Unix epoch.
    pub start_unix_ms: u64,
}

/// [`Metadata::backend`] of `record --allocations` traces: allocator calls
/// of the whole program, and no memory access by design.
pub const ALLOCATIONS_BACKEND: &str = "preload-allocations";

impl Metadata {
    /// True for a trace of allocator calls only ([`ALLOCATIONS_BACKEND`]):
    /// its pictures and tables are the heap's, since it has no reads.
    pub fn records_allocations_only(&self) -> bool {
        self.backend == ALLOCATIONS_BACKEND
    }

    /// Metadata with defaults for everything but the backend name.
    pub fn new(backend: &str) -> Self {
        Metadata {
            argv: Vec::new(),
            executable: String::new(),
            build_id: None,
            backend: backend.to_string(),
            line_size: DEFAULT_LINE_SIZE,
            clock: Clock::Instructions,
            function: None,
            pid: 0,
            start_unix_ms: 0,
        }
    }
}

/// What orders the events of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// Events of a thread are in program order; chunk times are not used
    /// (the ptrace recorder steps one thread at a time).
    Instructions,
    /// Chunk times are `CLOCK_MONOTONIC` nanoseconds since the recording
    /// started: threads recorded at once can be interleaved by them.
    Monotonic,
}

/// One file mapped into the traced process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    /// Path of the mapped file (as in `/proc/PID/maps`).
    pub path: String,
    /// GNU build-id of the file, lowercase hex.
    pub build_id: Option<String>,
    /// Every mapping of this file.
    pub ranges: Vec<MappedRange>,
}

/// One mapping of a module: `[start, end)` in the process maps the file from
/// `file_offset` on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappedRange {
    /// First mapped address.
    pub start: u64,
    /// One past the last mapped address.
    pub end: u64,
    /// File offset mapped at `start`.
    pub file_offset: u64,
    /// Permissions as in `/proc/PID/maps`, e.g. `r-xp`.
    pub perms: String,
}

/// A mapping of the traced process that no [`Module`] covers, as
/// `/proc/PID/maps` shows it: memory of no file (the heap of `brk`, the
/// main thread's stack, anonymous memory: `mmap`ed blocks of malloc, other
/// threads' stacks, arenas) and files that are no module (locale data,
/// caches). Blocks allocated before the recording began are in these, and
/// they are the only name such memory has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataMapping {
    /// First mapped address.
    pub start: u64,
    /// One past the last mapped address.
    pub end: u64,
    /// The name `/proc/PID/maps` gives it: the file's path, or `[heap]`,
    /// `[stack]`, `[anon:NAME]`, `[vvar]`; empty for plain anonymous
    /// memory.
    pub name: String,
}

/// How an instruction touches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum AccessKind {
    /// Loads only.
    Read = 0,
    /// Stores only.
    Write = 1,
    /// Loads and stores the same bytes (read-modify-write).
    Modify = 2,
}

impl AccessKind {
    /// True for kinds that load (reads and read-modify-writes).
    pub fn reads(self) -> bool {
        matches!(self, AccessKind::Read | AccessKind::Modify)
    }

    /// True for kinds that store.
    pub fn writes(self) -> bool {
        matches!(self, AccessKind::Write | AccessKind::Modify)
    }

    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => AccessKind::Read,
            1 => AccessKind::Write,
            2 => AccessKind::Modify,
            _ => return None,
        })
    }
}

/// Most accesses one site's [`Implied`] holds.
pub const IMPLIED_MOST: usize = 4;

/// One access an access of another site implies: site `site` at the other
/// access's address plus `offset`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImpliedAccess {
    /// Its site.
    pub site: SiteId,
    /// Its address minus the implying access's.
    pub offset: i32,
}

/// The accesses an access of a site implies, in order (since v6).
///
/// The rewrite recorder records one access of a run of memory operands in a
/// block that use the same base and index registers, unchanged in between,
/// and defines a site for it whose `implied` lists the others (their sites
/// and displacements): `x[i] += y` loads and stores the same address, a
/// record each before. Readers hand the implied accesses out right after
/// the implying one, as plain [`Event::Access`]es.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Implied {
    len: u8,
    items: [ImpliedAccess; IMPLIED_MOST],
}

impl Implied {
    /// None.
    pub const NONE: Implied = Implied { len: 0, items: [ImpliedAccess { site: 0, offset: 0 }; IMPLIED_MOST] };

    /// Appends `access`; false (and nothing changed) when full.
    pub fn push(&mut self, access: ImpliedAccess) -> bool {
        match self.items.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = access;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Keeps the first `n`.
    pub fn truncate(&mut self, n: usize) {
        if n < usize::from(self.len) {
            self.items[n..].fill(ImpliedAccess::default());
            self.len = n as u8;
        }
    }

    /// The accesses, in order.
    pub fn as_slice(&self) -> &[ImpliedAccess] {
        &self.items[..usize::from(self.len)]
    }

    /// How many.
    #[inline(always)]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A static memory-access site: one memory operand of one instruction.
///
/// An instruction with several memory operands (`push [rax]`, `movs`) has one
/// site per operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    /// Address of the instruction in the traced process.
    pub pc: u64,
    /// Length of the instruction in bytes.
    pub len: u8,
    /// Whether it reads, writes or both.
    pub kind: AccessKind,
    /// Bytes accessed per element.
    pub size: u32,
    /// Elements per execution (gathers and scatters have several, each with
    /// its own address and its own access event; everything else has 1).
    pub count: u16,
    /// Since v6: the accesses an [`Event::Access`] of this site stands for
    /// right after it (an encoding detail: readers hand them out as events
    /// of their own, and recorders that write every access leave it empty).
    pub implied: Implied,
}

impl Site {
    /// Placeholder for ids no chunk has defined (yet): a hole left by a lost
    /// `Sites` chunk. Real sites have at least one element.
    pub const UNDEFINED: Site =
        Site { pc: 0, len: 0, kind: AccessKind::Read, size: 0, count: 0, implied: Implied::NONE };

    /// False for [`Site::UNDEFINED`] placeholders.
    #[inline]
    pub fn is_defined(&self) -> bool {
        self.count != 0
    }
}

/// The allocator entry point (or system call) an [`Allocation`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum AllocKind {
    /// `malloc(size)`.
    Malloc = 0,
    /// `calloc(n, size)`; `size` is the product.
    Calloc = 1,
    /// `realloc(ptr_in, size)`.
    Realloc = 2,
    /// `free(ptr_in)`.
    Free = 3,
    /// `posix_memalign(&ptr_out, align, size)`.
    PosixMemalign = 4,
    /// `aligned_alloc(align, size)`.
    AlignedAlloc = 5,
    /// `memalign(align, size)`.
    Memalign = 6,
    /// The `mmap` system call; `ptr_in` is the address hint.
    Mmap = 7,
    /// The `munmap` system call.
    Munmap = 8,
}

impl AllocKind {
    /// Every kind, in tag order.
    pub const ALL: [AllocKind; 9] = [
        AllocKind::Malloc,
        AllocKind::Calloc,
        AllocKind::Realloc,
        AllocKind::Free,
        AllocKind::PosixMemalign,
        AllocKind::AlignedAlloc,
        AllocKind::Memalign,
        AllocKind::Mmap,
        AllocKind::Munmap,
    ];

    /// The C name of the entry point.
    pub fn name(self) -> &'static str {
        match self {
            AllocKind::Malloc => "malloc",
            AllocKind::Calloc => "calloc",
            AllocKind::Realloc => "realloc",
            AllocKind::Free => "free",
            AllocKind::PosixMemalign => "posix_memalign",
            AllocKind::AlignedAlloc => "aligned_alloc",
            AllocKind::Memalign => "memalign",
            AllocKind::Mmap => "mmap",
            AllocKind::Munmap => "munmap",
        }
    }

    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.get(usize::from(v)).copied()
    }
}

/// One allocator call, run natively, with its arguments and result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Allocation {
    /// Which entry point.
    pub kind: AllocKind,
    /// Requested size in bytes (0 for `free`).
    pub size: u64,
    /// Requested alignment (0 when the call takes none).
    pub align: u64,
    /// Pointer passed in (`realloc`, `free`, `munmap`, `mmap` hint), else 0.
    pub ptr_in: u64,
    /// Pointer returned (0 on failure and for `free`).
    pub ptr_out: u64,
    /// Address of the call instruction that reached the allocator.
    pub callsite: u64,
}

/// What a custom allocator function did ([`Event::CustomAllocation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum CustomOp {
    /// Returned a new block (`ptr_out`, `size` bytes).
    Alloc = 0,
    /// Released the block at `ptr_in`.
    Free = 1,
    /// Released the blocks from the arena `ptr_in` names (0: every block
    /// the custom allocators handed out).
    Reset = 2,
}

impl CustomOp {
    /// The op of a tag, if it is one.
    pub fn from_u8(v: u8) -> Option<CustomOp> {
        [CustomOp::Alloc, CustomOp::Free, CustomOp::Reset].into_iter().find(|o| *o as u8 == v)
    }
}

/// A call of a custom allocator function (`record --allocations
/// --alloc-fn`), run natively, with what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CustomAllocation {
    /// The function's name, in the string table.
    pub allocator: StringId,
    /// What it did.
    pub op: CustomOp,
    /// Requested bytes (alloc).
    pub size: u64,
    /// The block released (free); the arena the block comes from (alloc)
    /// or that is reset (reset), 0 when none is named.
    pub ptr_in: u64,
    /// The block returned (alloc; 0 on failure).
    pub ptr_out: u64,
    /// The call instruction that reached it.
    pub callsite: u64,
}

/// Why a recording stopped before the target finished on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum TruncationReason {
    /// linetrace got SIGINT or SIGTERM and killed the target.
    Interrupted = 0,
    /// The target was killed from outside while being traced.
    TargetKilled = 1,
    /// The recorder hit an internal limit or error and stopped recording.
    RecorderStopped = 2,
}

impl TruncationReason {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => TruncationReason::Interrupted,
            1 => TruncationReason::TargetKilled,
            2 => TruncationReason::RecorderStopped,
            _ => return None,
        })
    }
}

/// A dynamic event of one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// One execution of one element of a site: `site.size` bytes at `addr`.
    /// Gathers and scatters emit one event per element.
    Access {
        /// The site executed.
        site: SiteId,
        /// Effective address.
        addr: u64,
    },
    /// An execution of a site whose size is only known at run time
    /// (`rep movs`/`stos`/...: one access over the whole range; `addr` is the
    /// lowest address whatever the direction flag).
    AccessSized {
        /// The site executed.
        site: SiteId,
        /// Lowest address of the range.
        addr: u64,
        /// Bytes in the range.
        size: u64,
    },
    /// A `call` executed.
    Call {
        /// Address of the call instruction.
        callsite: u64,
        /// Where it went.
        target: u64,
        /// Stack pointer after the call (points at the return address).
        sp: u64,
    },
    /// A `jmp` to the first instruction of a function.
    TailCall {
        /// Address of the jump.
        callsite: u64,
        /// Where it went.
        target: u64,
        /// Stack pointer after the jump.
        sp: u64,
    },
    /// A `ret` executed (or an allocator call returned natively).
    Return {
        /// Stack pointer after the return.
        sp: u64,
    },
    /// An allocator call or memory-mapping system call.
    Alloc(Allocation),
    /// The traced function was entered: invocation `index` starts.
    InvocationStart {
        /// 0-based invocation number across the whole recording.
        index: u32,
        /// Entry address of the function.
        pc: u64,
        /// Stack pointer at entry (points at the return address).
        sp: u64,
    },
    /// Invocation `index` returned to its caller.
    InvocationEnd {
        /// The invocation that ended.
        index: u32,
    },
    /// The thread appeared.
    ThreadStart {
        /// Thread that created it (0 if unknown or the initial thread).
        parent: ThreadId,
    },
    /// The thread exited.
    ThreadExit {
        /// Exit status, or the negated signal number that killed it.
        status: i32,
    },
    /// A signal was delivered to the thread while it was traced.
    Signal {
        /// Signal number.
        signo: i32,
        /// Instruction the thread was at.
        pc: u64,
        /// Faulting address (`si_addr`) for faults, else 0.
        addr: u64,
    },
    /// `count` more instructions were single-stepped on this thread.
    Stepped {
        /// Instructions since the previous `Stepped` event of the thread.
        count: u64,
    },
    /// Recording of this thread stopped early.
    Truncated {
        /// Why.
        reason: TruncationReason,
    },
    /// The thread called `execve` and it succeeded: the process runs a new
    /// program from here on, which is not traced (v2).
    Exec {
        /// The new program's path, in the string table.
        path: StringId,
    },
    /// The thread entered the traced function but was not traced, because
    /// another thread was being traced at that moment (v2).
    InvocationSkipped {
        /// Entry address of the function.
        pc: u64,
    },
    /// What the allocator made of the [`Event::Alloc`] just before it on
    /// the same thread (extension kind 1: older readers skip it).
    AllocDetail {
        /// `malloc_usable_size` of the result (0: unknown, or a mapping).
        usable: u64,
        /// When the call returned, CLOCK_MONOTONIC nanoseconds.
        time_ns: u64,
    },
    /// The callers above the calling instruction of the [`Event::Alloc`]
    /// before it on the same thread (extension kind 2): a string of the
    /// string table, hexadecimal addresses of call instructions separated
    /// by commas, innermost first (one string per distinct stack).
    AllocStack {
        /// The stack, in the string table.
        stack: StringId,
    },
    /// The program break (the end of the brk heap) moved, during the
    /// [`Event::Alloc`] before it on the same thread (extension kind 3):
    /// malloc grew or trimmed its main heap.
    ProgramBreak {
        /// The break before.
        from: u64,
        /// The break after.
        to: u64,
    },
    /// A custom allocator function's call (extension kind 4; its
    /// [`Event::AllocDetail`] and [`Event::AllocStack`] follow as an
    /// [`Event::Alloc`]'s do). Its blocks are its own: they may lie inside
    /// a malloc block (a pool's arena), and are not malloc's.
    CustomAllocation(CustomAllocation),
}

/// How the traced program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetExit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// The last chunk of a finished recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Trailer {
    /// How the target ended, if it did.
    pub exit: Option<TargetExit>,
    /// Set when recording stopped before the target finished on its own.
    pub truncated: Option<TruncationReason>,
}

//! The binary-rewriting recorder's parts that do not need a live process:
//! the layout shared with the translated code, block translation, and the
//! conversion of the records it writes into trace events.
//!
//! Design (the "B"): linetrace translates, the code cache lives in
//! the target, ptrace is the control channel. The cache and the thread's
//! record buffer are shared memory (a memfd mapped in both processes), so
//! linetrace writes translations and reads records without system calls, and
//! keeps every record even when the target dies. Chosen over an in-process
//! agent because the ptrace backend already controls the process (entry
//! breakpoint, threads, forks, exec, allocator recognition are shared, and
//! so are the event rules), nothing has to be injected or found at run time,
//! static programs work alike, and the target sees no extra thread.
//!
//! - The translated thread reaches its *thread block* (spill slots, record
//!   cursor, dispatch table, record buffer) through `gs`, set by ptrace for
//!   the invocation; a program that uses `gs` is refused.
//! - Instrumentation touches neither flags nor the program's stack: two
//!   scratch registers the instruction does not use are spilled to the
//!   thread block, the operand's address is taken with `lea` (fs-relative
//!   ones add `rdfsbase`), an 8-byte record (48-bit value, 16-bit tag) is
//!   stored, the cursor bumped with `lea`.
//! - Accesses a block's previous record implies are not recorded: an
//!   operand with the same base, index and scale as the last recorded
//!   access of the block (registers not written since, nothing recorded
//!   since) is at a fixed offset from it, so that access's record gets the
//!   tag of a site that says so (`trace_rt::format::Site::implied`: up to
//!   four) and the reader hands the others out after it. `x[i] += y`, or
//!   `p->next` after `p->value`, writes one record, not two (a third less
//!   to record and encode in a blocked matrix multiply). The window from
//!   the record to the last access it implies has no signal boundary, and
//!   a fault inside it cuts what the record implies to the accesses before
//!   the faulting instruction (`RecordTable::cut_before`). Approximation: a
//!   thread stopped for good inside a window (SIGKILL), or one that faults
//!   there just after a tick took its records, has the rest of the
//!   window's implied accesses (at most four) in the trace.
//! - Direct branches exit through stubs that trap to linetrace once and are
//!   then patched into jumps; returns and indirect branches look the original
//!   target up in the dispatch table (flag-free: `lea` + `jrcxz`) and trap
//!   only on a miss. Calls push the original return address.
//! - Allocators run natively: their entry records the arguments and sends
//!   the return through a routine that records the result.
//! - The record buffer has two halves, each followed by a guard page. A
//!   full half faults there; linetrace takes its records, points the store
//!   at the other half and lets the thread go, then converts the records
//!   while the thread runs: the program, the conversion (which encodes
//!   the events as it goes) and zstd (on a thread of its own) run at once
//!   on two cores. Conversion hands runs of plain accesses, calls and
//!   returns to the trace writer as they are (a record is laid out as the
//!   format's packed event, `trace_rt::format::unpack_access`), with the
//!   table `RecordTable::packed_kinds` saying what each tag stands for: the
//!   writer encodes them in one tight loop, reading each record once, and
//!   stops at the first record of another kind, which the converter turns
//!   into its event. A ticker stops the thread once a second to
//!   take its records the same way (progress, and at most a second lost to
//!   a `kill -9` of the recorder).
//! - Signals are delivered with a single step at an instruction boundary,
//!   so handlers run translated and see original pcs in their `ucontext`
//!   (see `tracer::rewrite::signals`); a fault drops the records of the
//!   instruction that did not run. Threads and forked children created
//!   inside the call continue natively.
//!
//! Known approximation: a ZMM index vector of a gather is not read (counted
//! in [`crate::RecordSummary::approximated`]).

pub mod codegen;
pub mod layout;
pub mod records;
pub mod region;

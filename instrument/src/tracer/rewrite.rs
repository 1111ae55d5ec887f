//! The rewrite backend's run loop: the traced thread runs translated code
//! from the code cache; linetrace only sees it when it needs a block
//! translated, its record buffer is full, a signal arrives, or the traced
//! invocation returns. Everything around the invocation (entry breakpoint,
//! other threads, forks, exec, allocator recognition, sites) is the ptrace
//! backend's, shared.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use iced_x86::{Decoder, DecoderOptions, FlowControl};
use trace_rt::format::{Event, PackedKind, PackedRun, TraceWriter, TruncationReason};

use super::{CodeWindow, FLUSH_EVERY, InvocationEnd, Tracer, raised_by_int3};
use crate::decode::DecodedInstruction;
use crate::error::ptrace_err;
use crate::event_rules;
use crate::rewrite::codegen::{self, CodegenError, Context, Routines, STUB_BYTES, Tags};
use crate::rewrite::layout::{self, RecordKind, slot};
use crate::rewrite::records::{Converter, DefiningTags, EventSink, RecordTable};
use crate::rewrite::region::SharedRegion;
use crate::sys::{self, Regs, Stop, Tid};
use crate::{InstrumentError, interrupt};
use signals::{Deferred, PresentedFrame};

mod signals;

/// Bytes of one code cache.
const CACHE_BYTES: u64 = 64 << 20;
/// Most instructions in one translated block (longer straight-line code is
/// cut into several blocks).
const MAX_BLOCK_INSTRUCTIONS: usize = 64;

/// One code cache: translations of code within 2 GiB of it.
struct CodeCache {
    region: SharedRegion,
    used: u64,
    routines: Routines,
}

/// A thread's record buffer (in its region: thread block, dispatch table,
/// two buffer halves) and the state of the record stream converted from it.
///
/// The thread may be stopped anywhere, also between loading its cursor and
/// storing it back (a tick, a signal from outside): linetrace never writes
/// the cursor or the instruction counter while the thread runs its
/// invocation. It reads records up to the cursor and remembers where it
/// stopped reading and what it took of the counter; the thread moves to the
/// other half only at a guard-page fault, where it is at a known store.
struct ThreadStream {
    region: SharedRegion,
    converter: Converter,
    /// The half the thread fills (0 or 1).
    half: u64,
    /// Address of the first record not taken yet (in `half`).
    read_from: u64,
    /// The instruction counter's value when last read.
    count_taken: u64,
}

/// The instruction at original address `pc` faulted (it did not run).
#[derive(Clone, Copy)]
pub(super) struct Fault {
    pub(super) pc: u64,
    /// At a boundary inside an implying access's window.
    pub(super) in_window: bool,
}

/// Records taken from a thread's buffer (the thread was stopped) and not
/// converted yet: converted while the thread runs on in the other half or
/// past them, so that the program and linetrace use both cores.
struct TakenRecords {
    tid: Tid,
    /// Offsets of the records in the thread's region.
    records: std::ops::Range<usize>,
    /// Instructions counted with them.
    count: u64,
}

/// An invocation running as translated code on one thread.
struct TracedInvocation {
    index: u32,
    /// The stack pointer at entry: a return above it left the function.
    entry_sp: u64,
    /// The return address at entry. It never enters the thread's dispatch
    /// table: code of the caller may run inside the invocation too (the
    /// function calls its caller, which calls it again), and a return found
    /// there would carry the outermost return on, translated, past the end
    /// of the invocation. Every return to it traps, and the stack pointer
    /// tells the inner ones from the last.
    returns_to: u64,
    ticker: Ticker,
    /// A signal is being delivered with a single step.
    delivering: bool,
    /// A signal held back until the thread reaches a boundary.
    deferred: Option<Deferred>,
}

/// What the rewrite backend keeps across invocations.
#[derive(Default)]
pub(super) struct Rewriter {
    /// Every thread that ran translated code and is alive.
    streams: HashMap<Tid, ThreadStream>,
    /// Regions of threads that exited, for the next new thread: a region is
    /// mapped in the whole process, and its dispatch table stays valid.
    spare_regions: Vec<SharedRegion>,
    /// Threads running translated code now.
    active: HashMap<Tid, TracedInvocation>,
    caches: Vec<CodeCache>,
    /// Original address -> its translation.
    translated: HashMap<u64, u64>,
    /// Exit stub -> the original address it goes to.
    exits: HashMap<u64, u64>,
    /// Original address not translated yet -> the exit stubs that go to it,
    /// linked as soon as it is translated.
    awaiting: HashMap<u64, Vec<u64>>,
    /// Where each instruction of a block starts to run (its copy, or the
    /// code of a final transfer) -> (the block's start, how many of the
    /// block's instructions, counted all at once on entering it, have not
    /// run when a thread stands there).
    not_run: BTreeMap<u64, (u64, u64)>,
    /// Exit stub -> the translation it was linked to: a thread can still
    /// trap on a stub another one had linked.
    linked: HashMap<u64, u64>,
    /// Start of each copied original instruction in a cache -> (its
    /// address, the address of the instruction after it); each block's
    /// start -> (its first instruction, the same).
    pcs: BTreeMap<u64, (u64, u64)>,
    /// Cache addresses where an original instruction's code begins (see
    /// [`signals`]).
    safe_points: HashSet<u64>,
    /// Per thread, the signal frames whose pc linetrace made the original
    /// one, innermost last.
    presented: HashMap<Tid, Vec<PresentedFrame>>,
    /// Boundaries inside the window of an implying access (see
    /// `codegen::Encoded::inside_windows`): a fault there cuts what the last
    /// record implies.
    inside_windows: HashSet<u64>,
    /// Signal trampolines that handlers return into (never in a dispatch
    /// table, so that the return traps).
    trampolines: HashSet<u64>,
    table: RecordTable,
    /// Records taken at a stop, converted after the thread was let go, in
    /// the order taken.
    to_convert: Vec<TakenRecords>,
    /// Gather and scatter instructions translated without recording their
    /// elements (ZMM index vectors).
    pub(super) approximations: u64,
    /// Blocks translated.
    pub(super) blocks: u64,
}

/// Stops the traced thread about once a second with a SIGSTOP (which the
/// loop suppresses), so that records are written out and progress reported
/// while the function runs uninterrupted in the code cache: a recorder
/// killed with -9 loses at most a second, as with ptrace.
struct Ticker {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    seen: std::cell::Cell<u64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(pid: Tid, tid: Tid) -> Ticker {
        let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (stop2, sent2) = (Arc::clone(&stop), Arc::clone(&sent));
        let thread = std::thread::Builder::new()
            .name("linetrace-tick".into())
            .spawn(move || {
                loop {
                    let due = Instant::now() + FLUSH_EVERY;
                    while !stop2.load(Ordering::SeqCst) && Instant::now() < due {
                        std::thread::park_timeout(due.saturating_duration_since(Instant::now()));
                    }
                    if stop2.load(Ordering::SeqCst) {
                        return;
                    }
                    sent2.fetch_add(1, Ordering::SeqCst);
                    // SAFETY: tgkill(2) of a thread of our own traced child.
                    unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGSTOP) };
                }
            })
            .ok();
        Ticker { stop, sent, seen: std::cell::Cell::new(0), thread }
    }

    /// Whether a SIGSTOP stop is one of ours (counting it as seen).
    fn take(&self) -> bool {
        let ours = self.seen.get() < self.sent.load(Ordering::SeqCst);
        if ours {
            self.seen.set(self.seen.get() + 1);
        }
        ours
    }

    /// Stops ticking; returns (ticks sent, ticks seen).
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        (self.sent.load(Ordering::SeqCst), self.seen.get())
    }
}

/// Offset in a thread region of the dispatch table entry for `target`.
fn table_entry(target: u64) -> u64 {
    layout::TABLE as u64 + 16 * (target & (layout::TABLE_ENTRIES - 1))
}

/// The thread region is made before any translated code runs; its absence
/// is a bug here.
fn no_buffer() -> InstrumentError {
    InstrumentError::Ptrace { what: "finding the record buffer", cause: std::io::Error::other("not created") }
}

/// Whether the CPU and kernel let user code read the fs base (`rdfsbase`).
fn has_fsgsbase() -> bool {
    const HWCAP2_FSGSBASE: u64 = 1 << 1;
    // SAFETY: getauxval reads the process's auxiliary vector.
    unsafe { libc::getauxval(libc::AT_HWCAP2) & HWCAP2_FSGSBASE != 0 }
}

impl Tracer {
    /// Whether `tid` is running the traced function as translated code.
    pub(super) fn is_translated(&self, tid: Tid) -> bool {
        self.rewriter.active.contains_key(&tid)
    }

    /// Starts an invocation of the traced function on `tid` (stopped at its
    /// entry with `regs`) as translated code, and lets it run. Other threads
    /// may be running translated code already: each has its own record
    /// buffer and stream, and every stop is handled by [`Self::translated_stop`]
    /// as it comes.
    pub(super) fn start_translated(&mut self, tid: Tid, mut regs: Regs) -> Result<(), InstrumentError> {
        self.at_invocation_start()?;
        if regs.gs_base != 0 {
            return Err(CodegenError::UsesGs(regs.rip).into());
        }
        let index = self.invocations;
        self.invocations += 1;
        let entry_sp = regs.rsp;
        self.writer.push(tid as u32, &Event::InvocationStart { index, pc: regs.rip, sp: entry_sp })?;
        let gs_base = self.thread_stream(tid)?;
        let returns_to = sys::peek(tid, entry_sp).map_err(ptrace_err("reading the return address"))?;
        // An earlier invocation may have learnt it inside.
        self.remove_from_table(tid, returns_to);
        regs.rip = self.translate(tid, regs.rip)?;
        regs.gs_base = gs_base;
        sys::set_regs(tid, &regs).map_err(ptrace_err("entering the code cache"))?;
        let ticker = Ticker::start(self.pid, tid);
        let invocation = TracedInvocation { index, entry_sp, returns_to, ticker, delivering: false, deferred: None };
        self.rewriter.active.insert(tid, invocation);
        sys::resume(tid, 0).map_err(ptrace_err("running translated code"))
    }

    /// Handles a stop of `tid`, which runs translated code, and lets it go
    /// on; how its invocation ended, if it did. A thread that vanished (the
    /// error ESRCH) reports its end at its exit stop.
    pub(super) fn translated_stop(&mut self, tid: Tid, stop: Stop) -> Result<Option<InvocationEnd>, InstrumentError> {
        match self.translated_stop_inner(tid, stop) {
            Err(InstrumentError::Ptrace { cause, .. }) if cause.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            other => other,
        }
    }

    fn translated_stop_inner(&mut self, tid: Tid, stop: Stop) -> Result<Option<InvocationEnd>, InstrumentError> {
        let thread = tid as u32;
        let delivering = self.rewriter.active.get_mut(&tid).is_some_and(|t| std::mem::take(&mut t.delivering));
        if delivering && stop == (Stop::Signal { signo: libc::SIGTRAP, event: 0 }) && super::is_step_trap(tid) {
            // A signal was delivered with a single step, which stopped at
            // the handler's first instruction: the handler runs translated,
            // as the ptrace recorder steps through it.
            let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
            self.present_frame(tid, &regs)?;
            if !self.in_cache(regs.rip) {
                regs.rip = self.translate(tid, regs.rip)?;
                sys::set_regs(tid, &regs).map_err(ptrace_err("entering a signal handler"))?;
            }
            return self.go_on(tid, 0);
        }
        if stop == (Stop::Signal { signo: libc::SIGTRAP, event: 0 })
            && super::is_step_trap(tid)
            && let Some(end) = self.deferred_step(tid)?
        {
            return Ok(end);
        }
        match stop {
            Stop::Exited(_) | Stop::Killed(_) => {
                self.end_translated(tid)?;
                if interrupt::requested() {
                    self.writer.push(thread, &Event::Truncated { reason: TruncationReason::Interrupted })?;
                }
                Ok(Some(match self.on_process_exit(tid, stop) {
                    Some(exit) => InvocationEnd::ProcessGone(exit),
                    None => InvocationEnd::ThreadGone,
                }))
            }
            Stop::Signal { event: libc::PTRACE_EVENT_EXEC, .. } => {
                // The execve, last of its block: its step never completes
                // in the old program, and the ptrace recorder does not
                // count it.
                self.uncount(tid, 1);
                self.end_translated(tid)?;
                Ok(Some(InvocationEnd::Exec))
            }
            Stop::Signal { event: libc::PTRACE_EVENT_CLONE, .. } => {
                self.note_clone(tid);
                self.go_on(tid, 0)
            }
            Stop::Signal { event: e @ (libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK), .. } => {
                self.note_fork(tid, e == libc::PTRACE_EVENT_VFORK, None);
                self.go_on(tid, 0)
            }
            Stop::Signal { signo: libc::SIGTRAP, event: 0 } if raised_by_int3(tid) => self.translated_trap(tid),
            Stop::Signal { signo: libc::SIGSTOP, event: 0 } if self.take_tick(tid) => {
                // Our tick: what was recorded is written out (converted
                // once the thread runs on; see `convert_taken`).
                self.defer_records(tid);
                self.go_on(tid, 0)
            }
            Stop::Signal { signo, event: 0 } => {
                let addr = super::fault_address(tid, signo);
                let regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
                if signo == libc::SIGSEGV && self.is_guard(tid, addr) {
                    self.buffer_full(tid, regs)?;
                    return self.go_on(tid, 0);
                }
                self.translated_signal(tid, signo, &regs, addr)
            }
            Stop::Signal { .. } => self.go_on(tid, 0),
        }
    }

    /// Lets translated thread `tid` run on, delivering `signal` (0: none)
    /// with a single step so that its handler is entered translated.
    fn go_on(&mut self, tid: Tid, signal: i32) -> Result<Option<InvocationEnd>, InstrumentError> {
        if signal == 0 && self.rewriter.active.get(&tid).is_some_and(|t| t.deferred.is_some()) {
            sys::single_step(tid, 0).map_err(ptrace_err("stepping to a boundary"))?;
        } else if signal == 0 {
            sys::resume(tid, 0).map_err(ptrace_err("running translated code"))?;
        } else {
            if let Some(t) = self.rewriter.active.get_mut(&tid) {
                t.delivering = true;
            }
            sys::single_step(tid, signal).map_err(ptrace_err("delivering a signal"))?;
        }
        Ok(None)
    }

    /// Whether a SIGSTOP of `tid` is one of our ticks (this invocation's, or
    /// a late one of an earlier invocation's), counting it as seen.
    fn take_tick(&mut self, tid: Tid) -> bool {
        if let Some(n) = self.pending_ticks.get_mut(&tid).filter(|n| **n > 0) {
            *n -= 1;
            return true;
        }
        self.rewriter.active.get(&tid).is_some_and(|t| t.ticker.take())
    }

    /// Translated thread `tid` ran into an `int3` of the code cache (an
    /// unlinked exit, the dispatcher's miss) or of the program.
    fn translated_trap(&mut self, tid: Tid) -> Result<Option<InvocationEnd>, InstrumentError> {
        let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
        let hit = regs.rip.wrapping_sub(1);
        if let Some(&target) = self.rewriter.exits.get(&hit) {
            let translated = self.translate(tid, target)?;
            self.link(hit, translated);
            regs.rip = translated;
        } else if let Some(&translated) = self.rewriter.linked.get(&hit) {
            // Another thread linked this exit while this one was trapping on
            // it (or ran the stale bytes).
            regs.rip = translated;
        } else if self.rewriter.caches.iter().any(|c| c.routines.miss == hit) {
            let stream = self.rewriter.streams.get(&tid).ok_or_else(no_buffer)?;
            let target = stream.region.word(slot::TARGET as u64);
            regs.rcx = stream.region.word(slot::SPILL_RCX as u64);
            regs.rax = stream.region.word(slot::SPILL_RAX as u64);
            let (entry_sp, returns_to) = self.rewriter.active.get(&tid).map_or((0, 0), |t| (t.entry_sp, t.returns_to));
            if regs.rsp > entry_sp {
                // Returned (or jumped) out of the traced call.
                regs.rip = target;
                regs.gs_base = 0;
                sys::set_regs(tid, &regs).map_err(ptrace_err("leaving the code cache"))?;
                let index = self.end_translated(tid)?;
                self.writer.push(tid as u32, &Event::InvocationEnd { index })?;
                return Ok(Some(InvocationEnd::Returned));
            }
            let translated = self.translate(tid, target)?;
            if self.rewriter.trampolines.contains(&target) {
                self.leaving_handler(tid, regs.rsp)?;
            } else if target != returns_to {
                self.add_to_table(tid, target, translated);
            }
            regs.rip = translated;
        } else if let Some(bp) = self.entry_bp.filter(|bp| bp.addr == hit) {
            // Native code the traced call runs (an allocator's hook) entered
            // the function: that call is not traced.
            let signal = self.skip_invocation(tid, bp)?;
            return self.go_on(tid, signal);
        } else {
            // The program's own int3.
            self.deliver(tid, libc::SIGTRAP, sys::sig_info(tid).ok(), regs.rip, regs.rip, 0)?;
            return self.go_on(tid, event_rules::signal_to_pass_on(tid, libc::SIGTRAP));
        }
        sys::set_regs(tid, &regs).map_err(ptrace_err("entering the code cache"))?;
        self.go_on(tid, 0)
    }

    /// Ends `tid`'s translated invocation: its records converted, its ticker
    /// stopped. Returns the invocation's index.
    fn end_translated(&mut self, tid: Tid) -> Result<u32, InstrumentError> {
        self.cancel_deferred(tid);
        self.rewriter.presented.remove(&tid);
        let Some(invocation) = self.rewriter.active.remove(&tid) else { return Ok(0) };
        let (sent, seen) = invocation.ticker.finish();
        if sent > seen {
            // Ticks still on their way arrive once the thread runs natively.
            *self.pending_ticks.entry(tid).or_default() += sent - seen;
        }
        self.drain(tid, None)?;
        Ok(invocation.index)
    }

    /// Ends every translated invocation (the process is gone, or exec'd):
    /// what each thread recorded is converted, as its buffer outlives it.
    pub(super) fn end_all_translated(&mut self) -> Result<(), InstrumentError> {
        let threads: Vec<Tid> = self.rewriter.active.keys().copied().collect();
        for tid in threads {
            self.end_translated(tid)?;
        }
        Ok(())
    }

    /// The original instruction a thread stopped at cache address `at` is
    /// about to run: the one whose copy starts at `at`, else (inside the
    /// records before or after a copy) the next one.
    pub(super) fn original_pc(&self, at: u64) -> Option<u64> {
        if !self.in_cache(at) {
            return None;
        }
        let (&start, &(pc, next)) = self.rewriter.pcs.range(..=at).next_back()?;
        Some(if start == at { pc } else { next })
    }

    /// The original instruction whose copy ran last before cache address
    /// `at`.
    fn previous_pc(&self, at: u64) -> Option<u64> {
        let (_, &(pc, _)) = self.rewriter.pcs.range(..at).next_back()?;
        Some(pc)
    }

    /// Whether `at` is in one of the code caches.
    pub(super) fn in_cache(&self, at: u64) -> bool {
        self.rewriter.caches.iter().any(|c| (c.region.remote..c.region.remote + c.region.len() as u64).contains(&at))
    }

    /// A thread (a new one, or a forked child) that starts inside the code
    /// cache continues natively at the original instruction: a thread is
    /// traced from its own entry into the function, as with ptrace.
    pub(super) fn leave_cache(&self, tid: Tid) {
        if self.rewriter.caches.is_empty() {
            return;
        }
        let Ok(mut regs) = sys::get_regs(tid) else { return };
        if let Some(pc) = self.original_pc(regs.rip) {
            regs.rip = pc;
            regs.gs_base = 0;
            let _ = sys::set_regs(tid, &regs);
        }
    }

    /// Whether `addr` is the guard page after the half of `tid`'s record
    /// buffer it fills.
    fn is_guard(&self, tid: Tid, addr: u64) -> bool {
        let guard = |s: &ThreadStream| {
            let at = s.region.remote + layout::guard(s.half);
            at..at + 4096
        };
        self.rewriter.streams.get(&tid).is_some_and(|s| guard(s).contains(&addr))
    }

    /// The half is full (a record store hit its guard page): its records
    /// are taken, to be converted while the thread fills the other half,
    /// which was converted before this stop (see `convert_taken`).
    fn buffer_full(&mut self, tid: Tid, mut regs: Regs) -> Result<(), InstrumentError> {
        self.defer_records(tid);
        let stream = self.rewriter.streams.get_mut(&tid).ok_or_else(no_buffer)?;
        stream.half = 1 - stream.half;
        let start = stream.region.remote + layout::half(stream.half);
        // The store restarts at the other half's start (below), then stores
        // its cursor past it; until then the cursor says the half is empty
        // (the thread is between its cursor's load and store: it will
        // overwrite this).
        stream.read_from = start;
        stream.region.set_word(slot::CURSOR as u64, start);
        // The faulting instruction is the record store `mov [tmp], value`:
        // point tmp at the emptied buffer.
        let code = self.cache_bytes(regs.rip, 15);
        let store = Decoder::with_ip(64, &code, regs.rip, DecoderOptions::NONE).decode();
        let reg = store.memory_base();
        match reg {
            iced_x86::Register::R11 => regs.r11 = start,
            iced_x86::Register::R10 => regs.r10 = start,
            iced_x86::Register::R9 => regs.r9 = start,
            iced_x86::Register::R8 => regs.r8 = start,
            iced_x86::Register::RAX => regs.rax = start,
            iced_x86::Register::RDX => regs.rdx = start,
            iced_x86::Register::RCX => regs.rcx = start,
            iced_x86::Register::RSI => regs.rsi = start,
            iced_x86::Register::RDI => regs.rdi = start,
            iced_x86::Register::RBX => regs.rbx = start,
            iced_x86::Register::RBP => regs.rbp = start,
            iced_x86::Register::R12 => regs.r12 = start,
            iced_x86::Register::R13 => regs.r13 = start,
            iced_x86::Register::R14 => regs.r14 = start,
            _ => {
                return Err(InstrumentError::Ptrace {
                    what: "emptying the record buffer (a fault in the buffer outside a record store)",
                    cause: std::io::Error::other(format!("at {:#x}", regs.rip)),
                });
            }
        }
        sys::set_regs(tid, &regs).map_err(ptrace_err("emptying the record buffer"))
    }

    /// Up to `len` bytes of the code cache at `at`.
    fn cache_bytes(&self, at: u64, len: usize) -> Vec<u8> {
        for c in &self.rewriter.caches {
            if let Some(off) = at.checked_sub(c.region.remote).filter(|&o| o < c.region.len() as u64) {
                let o = off as usize;
                return c.region.bytes()[o..(o + len).min(c.region.len())].to_vec();
            }
        }
        Vec::new()
    }

    /// Converts the records `tid` wrote so far into events, after those
    /// taken before. With `faulted`, records of that instruction at the end
    /// (it did not run) are dropped.
    fn drain(&mut self, tid: Tid, faulted: Option<Fault>) -> Result<(), InstrumentError> {
        self.convert_taken()?;
        match self.take_records(tid) {
            Some(taken) => self.convert(taken, faulted),
            None => Ok(()),
        }
    }

    /// Takes `tid`'s records now, to be converted by [`Self::convert_taken`]
    /// once the thread runs on.
    fn defer_records(&mut self, tid: Tid) {
        if let Some(taken) = self.take_records(tid) {
            self.rewriter.to_convert.push(taken);
        }
    }

    /// The records `tid` wrote since the last take, with the instructions
    /// it counted meanwhile. The thread is stopped: its cursor and counter
    /// agree with each other.
    fn take_records(&mut self, tid: Tid) -> Option<TakenRecords> {
        let stream = self.rewriter.streams.get_mut(&tid)?;
        let start = stream.region.remote + layout::half(stream.half);
        let cursor = stream.region.word(slot::CURSOR as u64).clamp(start, start + layout::HALF_BYTES);
        let from = stream.read_from.clamp(start, cursor);
        let (lo, hi) = ((from - stream.region.remote) as usize, (cursor - stream.region.remote) as usize);
        stream.read_from = cursor;
        let counter = stream.region.word(slot::COUNT as u64);
        let count = counter.wrapping_sub(std::mem::replace(&mut stream.count_taken, counter));
        Some(TakenRecords { tid, records: lo..hi - (hi - lo) % 8, count })
    }

    /// Converts every record taken and not converted yet, in the order
    /// taken (the threads run meanwhile, in the other half of their buffer
    /// or past the records taken); writes the trace out about once per
    /// `FLUSH_EVERY`. Called before waiting for the next stop, so that no
    /// stop finds records taken before it unconverted.
    pub(super) fn convert_taken(&mut self) -> Result<(), InstrumentError> {
        if self.rewriter.to_convert.is_empty() {
            return Ok(());
        }
        let taken = std::mem::take(&mut self.rewriter.to_convert);
        let mut last_thread = None;
        for t in taken {
            last_thread = Some(t.tid as u32);
            self.convert(t, None)?;
        }
        if let Some(thread) = last_thread.filter(|_| self.last_flush.elapsed() >= FLUSH_EVERY / 2) {
            // Progress is reported once for all the threads that tick at
            // about this time.
            self.flush_and_report(thread)?;
        }
        Ok(())
    }

    /// Converts taken records into events. With `faulted`, records of that
    /// instruction at the end (it did not run) are dropped.
    fn convert(&mut self, taken: TakenRecords, faulted: Option<Fault>) -> Result<(), InstrumentError> {
        let TakenRecords { tid, records, count } = taken;
        let thread = tid as u32;
        let Tracer { rewriter, writer, function_starts, code, accesses, .. } = self;
        let Some(ThreadStream { region, converter, .. }) = rewriter.streams.get_mut(&tid) else {
            return Ok(());
        };
        let raw = &region.bytes()[records];
        // SAFETY: every bit pattern is a u64; the halves start page-aligned
        // in a page-aligned mapping, so the whole slice is the aligned middle.
        let (head, all, _) = unsafe { raw.align_to::<u64>() };
        debug_assert!(head.is_empty());
        let mut records = all;
        let mut cut_last = None;
        if let Some(fault) = faulted
            && let Some(pc) = code.get(&fault.pc)
        {
            let sites: Vec<u32> = pc.operands.iter().map(|o| o.site).collect();
            while let Some((&last, rest)) = records.split_last() {
                match rewriter.table.kind(layout::split(last).0) {
                    Some(RecordKind::Access(s) | RecordKind::RepStart { site: s, .. }) if sites.contains(&s) => {
                        records = rest;
                    }
                    _ => break,
                }
            }
            // Inside an implying access's window (no record since it), the
            // last record implies accesses of instructions that did not run.
            if fault.in_window
                && let Some((&last, rest)) = records.split_last()
                && let (tag, value) = layout::split(last)
                && let Some(RecordKind::Access(site)) = rewriter.table.kind(tag)
            {
                let mut define = |s: trace_rt::format::Site| writer.add_site(s);
                if let Some(cut) = rewriter.table.cut_before(site, fault.pc, &mut define) {
                    let tag = rewriter.table.tag(RecordKind::Access(cut))?;
                    cut_last = Some(trace_rt::format::pack_access(tag, value));
                    records = rest;
                }
            }
        }
        // Converted and encoded in one pass over the records: the writer
        // takes the runs of plain accesses, calls and returns as they are.
        let kinds = rewriter.table.packed_kinds();
        let converted_before = converter.accesses;
        let mut sink = WriterSink { writer, thread, kinds: &kinds };
        converter.convert(records, &rewriter.table, function_starts, &mut sink)?;
        if let Some(last) = cut_last {
            converter.convert(&[last], &rewriter.table, function_starts, &mut sink)?;
        }
        *accesses += converter.accesses - converted_before;
        let count = count + std::mem::take(&mut converter.extra_instructions);
        if count > 0 {
            self.instructions += count;
            self.writer.push(thread, &Event::Stepped { count })?;
        }
        Ok(())
    }

    /// The region (thread block, dispatch table, buffer) of thread `tid`,
    /// made or taken from an exited thread the first time, with its buffer
    /// empty; returns the thread block's address (the thread's `gs` base).
    fn thread_stream(&mut self, tid: Tid) -> Result<u64, InstrumentError> {
        if !self.rewriter.streams.contains_key(&tid) {
            let region = match self.rewriter.spare_regions.pop() {
                Some(region) => region,
                None => {
                    let prot = libc::PROT_READ | libc::PROT_WRITE;
                    let region = SharedRegion::create(self.pid, tid, layout::THREAD_REGION_BYTES, prot, None)?;
                    for h in 0..2 {
                        region.protect_none(self.pid, tid, layout::guard(h), 4096)?;
                    }
                    // The dispatch table starts empty: zeros (see
                    // `layout::table_key`).
                    region
                }
            };
            let converter = Converter::default();
            let stream = ThreadStream { region, converter, half: 0, read_from: 0, count_taken: 0 };
            self.rewriter.streams.insert(tid, stream);
        }
        // The thread is stopped at the entry, outside translated code: the
        // one moment its slots can be set. Its records taken before are
        // converted first: both halves are free.
        self.convert_taken()?;
        let stream = self.rewriter.streams.get_mut(&tid).ok_or_else(no_buffer)?;
        stream.half = 0;
        let start = stream.region.remote + layout::half(0);
        stream.region.set_word(slot::CURSOR as u64, start);
        stream.region.set_word(slot::COUNT as u64, 0);
        (stream.read_from, stream.count_taken) = (start, 0);
        Ok(stream.region.remote)
    }

    /// Thread `tid` exited: its region goes to the next new thread.
    pub(super) fn forget_thread(&mut self, tid: Tid) {
        debug_assert!(!self.rewriter.to_convert.iter().any(|t| t.tid == tid), "records of {tid} left unconverted");
        if let Some(stream) = self.rewriter.streams.remove(&tid) {
            self.rewriter.spare_regions.push(stream.region);
        }
    }

    /// How many instructions of the block a thread standing at cache
    /// address `at` is in were counted but have not run (0 outside the
    /// blocks).
    pub(super) fn not_run_at(&self, at: u64) -> u64 {
        match self.rewriter.not_run.range(at..).next() {
            Some((_, &(block, n))) if block <= at => n,
            _ => 0,
        }
    }

    /// Takes back `n` instructions counted for `tid` that never ran (or
    /// that the ptrace recorder does not count), before its records are
    /// drained.
    pub(super) fn uncount(&mut self, tid: Tid, n: u64) {
        if let Some(stream) = self.rewriter.streams.get_mut(&tid) {
            let counter = stream.region.word(slot::COUNT as u64);
            stream.region.set_word(slot::COUNT as u64, counter.wrapping_sub(n));
        }
    }

    /// Empties `tid`'s dispatch table entry for `target`, if it holds it.
    fn remove_from_table(&mut self, tid: Tid, target: u64) {
        if let Some(stream) = self.rewriter.streams.get_mut(&tid) {
            let entry = table_entry(target);
            if stream.region.word(entry) == layout::table_key(target) {
                stream.region.set_word(entry, 0);
                stream.region.set_word(entry + 8, 0);
            }
        }
    }

    /// Points `tid`'s dispatch table entry for `target` at `translated`.
    fn add_to_table(&mut self, tid: Tid, target: u64, translated: u64) {
        if let Some(stream) = self.rewriter.streams.get_mut(&tid) {
            let entry = table_entry(target);
            stream.region.set_word(entry, layout::table_key(target));
            stream.region.set_word(entry + 8, translated);
        }
    }

    /// Replaces exit stub `stub` with a jump to `to`.
    /// Nothing if `stub` is linked already: translating its target links
    /// the stubs waiting for it ([`Self::link_known`]), the trapping one too.
    fn link(&mut self, stub: u64, to: u64) {
        if self.rewriter.exits.remove(&stub).is_none() {
            return;
        }
        for c in &mut self.rewriter.caches {
            let Some(off) = stub.checked_sub(c.region.remote).filter(|&o| o + (STUB_BYTES as u64) <= c.used) else {
                continue;
            };
            let o = off as usize;
            let mut code = [0xccu8; STUB_BYTES];
            match i32::try_from(to as i64 - (stub as i64 + 5)) {
                Ok(rel) => {
                    code[0] = 0xe9;
                    code[1..5].copy_from_slice(&rel.to_le_bytes());
                }
                Err(_) => {
                    code[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
                    code[6..14].copy_from_slice(&to.to_le_bytes());
                }
            }
            // Other threads may be running this code: the stub's first byte
            // (an int3 until now) is written last, so a thread sees the trap
            // or the whole jump, never half of it.
            let bytes = c.region.bytes_mut();
            bytes[o + 1..o + STUB_BYTES].copy_from_slice(&code[1..]);
            std::sync::atomic::fence(Ordering::SeqCst);
            // SAFETY: `o` is inside the mapping (checked against `used`).
            unsafe { std::ptr::write_volatile(bytes.as_mut_ptr().add(o), code[0]) };
            self.rewriter.linked.insert(stub, to);
            return;
        }
    }

    /// The instructions of the block at `pc`: up to its first control
    /// transfer or system call, an allocator's entry, or
    /// `MAX_BLOCK_INSTRUCTIONS`.
    fn decode_block(&mut self, tid: Tid, pc: u64) -> Result<Vec<DecodedInstruction>, InstrumentError> {
        let mut insns = Vec::new();
        let mut at = pc;
        while insns.len() < MAX_BLOCK_INSTRUCTIONS {
            let Some(insn) = self.instruction(tid, at)?.cloned() else { break };
            at += u64::from(insn.len);
            // A block ends at a system call too: it may not return
            // (rt_sigreturn, exit, execve), and the instructions after it,
            // counted with the block, would never run.
            let ends = insn.flow != FlowControl::Next || insn.syscall;
            insns.push(insn);
            if ends || self.allocator_entries.contains_key(&at) {
                break;
            }
        }
        Ok(insns)
    }

    /// The translation of the code at `pc`, made now if needed.
    fn translate(&mut self, tid: Tid, pc: u64) -> Result<u64, InstrumentError> {
        if let Some(&t) = self.rewriter.translated.get(&pc) {
            return Ok(t);
        }
        let allocator = self.allocator_entries.get(&pc).copied();
        let mut insns: Vec<DecodedInstruction> = Vec::new();
        if allocator.is_none() {
            // The window lives for this block only: breakpoints may change
            // before the next translation.
            self.code_window = Some(CodeWindow::new());
            let decoded = self.decode_block(tid, pc);
            self.code_window = None;
            insns = decoded?;
            if insns.is_empty() {
                return Err(InstrumentError::Ptrace {
                    what: "translating code linetrace cannot decode",
                    cause: std::io::Error::other(format!("at {pc:#x}")),
                });
            }
        }
        let cache = self.cache_near(tid, pc)?;
        let fsgsbase = has_fsgsbase();
        let Tracer { rewriter, function_starts, factory, writer, .. } = self;
        let c = &mut rewriter.caches[cache];
        let at = c.region.remote + c.used;
        let ctx = Context { function_starts, routines: c.routines, fsgsbase };
        let encoded = match allocator {
            Some(kind) => codegen::allocator_entry(kind, pc, at, &ctx, &mut rewriter.table)?,
            None => {
                let mut define = |s: trace_rt::format::Site| writer.add_site(s);
                let mut tags = DefiningTags { table: &mut rewriter.table, define: &mut define };
                codegen::translate_block(&insns, at, &ctx, &mut tags, factory)?
            }
        };
        let len = encoded.code.len() as u64;
        if c.used + len > c.region.len() as u64 {
            return Err(InstrumentError::Ptrace {
                what: "translating (the code cache is full)",
                cause: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            });
        }
        let o = c.used as usize;
        c.region.bytes_mut()[o..o + encoded.code.len()].copy_from_slice(&encoded.code);
        c.used = (c.used + len + 15) & !15;
        let exits: Vec<(u64, u64)> = encoded.exits.iter().map(|&(off, target)| (at + u64::from(off), target)).collect();
        rewriter.exits.extend(exits.iter().copied());
        rewriter.pcs.insert(at, (pc, pc));
        let inside: HashSet<u32> = encoded.inside_windows.iter().copied().collect();
        let (unsafe_points, safe): (Vec<u32>, Vec<u32>) =
            encoded.boundaries.iter().partition(|off| inside.contains(off));
        rewriter.safe_points.extend(safe.iter().map(|&off| at + u64::from(off)));
        rewriter.inside_windows.extend(unsafe_points.iter().map(|&off| at + u64::from(off)));
        // Copies come in the block's order (only a final transfer is not
        // copied): copy i is instruction i.
        for (&(off, original), insn) in encoded.pcs.iter().zip(&insns) {
            rewriter.pcs.insert(at + u64::from(off), (original, insn.instr.next_ip()));
        }
        if !insns.is_empty() {
            let copies = encoded.pcs.iter().map(|&(off, _)| off);
            // Only a final transfer has no copy: it starts at its boundary.
            let last = encoded.boundaries.get(encoded.pcs.len()).filter(|_| encoded.pcs.len() < insns.len());
            let starts = copies.chain(last.copied());
            let n = insns.len() as u64;
            rewriter.not_run.extend(starts.zip(0..).map(|(off, i)| (at + u64::from(off), (at, n - i))));
        }
        rewriter.approximations += u64::from(encoded.approximations);
        rewriter.blocks += 1;
        rewriter.translated.insert(pc, at);
        self.link_known(pc, at, &exits);
        Ok(at)
    }

    /// Links what can be linked once `pc` is translated at `at` (with exit
    /// stubs `exits`): its exits to code translated before (a loop's back
    /// edge, a join), and earlier exits to `pc`. Each would otherwise trap
    /// once to be linked, and a trap stops the thread for ~70 µs; the
    /// result is the same jump.
    fn link_known(&mut self, pc: u64, at: u64, exits: &[(u64, u64)]) {
        for &(stub, target) in exits {
            match self.rewriter.translated.get(&target) {
                Some(&to) => self.link(stub, to),
                None => self.rewriter.awaiting.entry(target).or_default().push(stub),
            }
        }
        for stub in self.rewriter.awaiting.remove(&pc).unwrap_or_default() {
            self.link(stub, at);
        }
    }

    /// Index of a code cache within reach of `pc` with room left, made if
    /// there is none.
    fn cache_near(&mut self, tid: Tid, pc: u64) -> Result<usize, InstrumentError> {
        const REACH: u64 = (1 << 31) - CACHE_BYTES - (1 << 20);
        let room = |c: &CodeCache| c.used + (64 << 10) < c.region.len() as u64;
        if let Some(i) = self.rewriter.caches.iter().position(|c| c.region.remote.abs_diff(pc) < REACH && room(c)) {
            return Ok(i);
        }
        let prot = libc::PROT_READ | libc::PROT_EXEC;
        let mut region = SharedRegion::create(self.pid, tid, CACHE_BYTES, prot, Some(pc))?;
        let (encoded, routines) = codegen::routines(region.remote, &mut self.rewriter.table, has_fsgsbase())?;
        region.bytes_mut()[..encoded.code.len()].copy_from_slice(&encoded.code);
        let used = (encoded.code.len() as u64 + 15) & !15;
        self.rewriter.caches.push(CodeCache { region, used, routines });
        Ok(self.rewriter.caches.len() - 1)
    }
}

/// The trace writer as the converter's sink, for one thread's records.
struct WriterSink<'a, W: std::io::Write> {
    writer: &'a mut TraceWriter<W>,
    thread: u32,
    kinds: &'a [PackedKind],
}

impl<W: std::io::Write> EventSink for WriterSink<'_, W> {
    type Error = InstrumentError;

    #[inline]
    fn leading_events(&mut self, records: &[u64]) -> Result<PackedRun, InstrumentError> {
        Ok(self.writer.push_packed(self.thread, records, self.kinds)?)
    }

    fn event(&mut self, event: &Event) -> Result<(), InstrumentError> {
        Ok(self.writer.push(self.thread, event)?)
    }
}

//! Signals that arrive while a thread runs translated code.
//!
//! The kernel may stop a thread at any instruction of the code cache, also
//! inside the code linetrace adds around an original instruction: scratch
//! registers spilled to the thread block, the record cursor loaded into
//! one of them. A handler that ran from there (translated, using the same
//! thread block) would overwrite the spilled registers and the records the
//! interrupted code is about to write, and would find a code-cache address
//! as the interrupted pc in its `ucontext`. So:
//!
//! - an asynchronous signal that stops a thread inside such code is held
//!   back (suppressed, with every other blockable signal blocked, its
//!   information kept) while the thread single-steps to the next
//!   *boundary*, where an original instruction's code begins and nothing
//!   is in flight; there it is delivered, as if it had arrived a few
//!   original instructions later, which an asynchronous signal may;
//! - a fault (SIGSEGV of a copied instruction) is raised by the copy,
//!   itself a point where nothing is in flight, and is delivered at once;
//! - at the handler's first instruction the saved pc in its signal frame
//!   is replaced with the original instruction's address, and the
//!   frame remembered; when the handler returns into the signal
//!   trampoline (`__restore_rt`, never put in a dispatch table, so that
//!   returning there traps), the code-cache address goes back into the
//!   frame, and `rt_sigreturn` resumes the translated code where it was. A
//!   handler that changed the saved pc resumes at the translation of its
//!   choice.

use trace_rt::format::Event;

use super::{InvocationEnd, Tracer};
use crate::InstrumentError;
use crate::error::ptrace_err;
use crate::event_rules;
use crate::sys::{self, Regs, Tid};

/// Offset of the saved `rip` in a `ucontext_t`: after `uc_flags`,
/// `uc_link` and `uc_stack` (40 bytes), the 17th general register of
/// `uc_mcontext` (`REG_RIP`).
const UCONTEXT_RIP: u64 = 40 + 16 * 8;

/// A signal held back until its thread reaches a boundary.
pub(super) struct Deferred {
    info: libc::siginfo_t,
    /// The thread's signal mask before linetrace blocked signals.
    mask: u64,
    /// Where the signal stopped the thread.
    stopped_at: u64,
    /// The faulting address, for signals that have one.
    addr: u64,
}

/// A signal frame whose saved pc linetrace replaced with the original
/// instruction's address.
pub(super) struct PresentedFrame {
    /// Address of the frame's `ucontext_t`.
    ucontext: u64,
    /// The original address written into the frame.
    original: u64,
    /// The code-cache address the kernel saved there.
    cache: u64,
}

impl Tracer {
    /// Translated thread `tid` stopped for signal `signo` (not one of
    /// linetrace's own): the signal is recorded and delivered now, or held
    /// back until the next boundary.
    pub(super) fn translated_signal(
        &mut self,
        tid: Tid,
        signo: i32,
        regs: &Regs,
        addr: u64,
    ) -> Result<Option<InvocationEnd>, InstrumentError> {
        let info = sys::sig_info(tid).ok();
        let pass_on = event_rules::signal_to_pass_on(tid, signo);
        let deferring = self.rewriter.active.get(&tid).is_some_and(|t| t.deferred.is_some());
        if is_synchronous(signo, info.as_ref()) {
            // The fault comes first; a signal held back waits in the kernel.
            self.cancel_deferred(tid);
        } else if let Some(info) = info.filter(|_| {
            pass_on != 0 && !deferring && self.in_cache(regs.rip) && !self.rewriter.safe_points.contains(&regs.rip)
        }) {
            let mask = sys::signal_mask(tid).map_err(ptrace_err("reading the signal mask"))?;
            sys::set_signal_mask(tid, !sigtrap_bit()).map_err(ptrace_err("blocking signals"))?;
            if let Some(t) = self.rewriter.active.get_mut(&tid) {
                t.deferred = Some(Deferred { info, mask, stopped_at: regs.rip, addr });
            }
            return self.go_on(tid, 0);
        }
        self.deliver(tid, signo, info, regs.rip, regs.rip, addr)?;
        self.go_on(tid, pass_on)
    }

    /// A single step of thread `tid`, which holds a signal back, ended:
    /// the signal is delivered if the thread is at a boundary (or left the
    /// code cache), else the thread steps on. `None` if `tid` holds no
    /// signal back.
    pub(super) fn deferred_step(&mut self, tid: Tid) -> Result<Option<Option<InvocationEnd>>, InstrumentError> {
        if self.rewriter.active.get(&tid).is_none_or(|t| t.deferred.is_none()) {
            return Ok(None);
        }
        let regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
        if self.in_cache(regs.rip) && !self.rewriter.safe_points.contains(&regs.rip) {
            return self.go_on(tid, 0).map(Some);
        }
        let Some(d) = self.rewriter.active.get_mut(&tid).and_then(|t| t.deferred.take()) else { return Ok(None) };
        sys::set_signal_mask(tid, d.mask).map_err(ptrace_err("restoring the signal mask"))?;
        sys::set_sig_info(tid, &d.info).map_err(ptrace_err("setting the signal's information"))?;
        let signo = d.info.si_signo;
        self.deliver(tid, signo, Some(d.info), d.stopped_at, regs.rip, d.addr)?;
        self.go_on(tid, signo).map(Some)
    }

    /// Gives up holding a signal back for `tid` (its invocation ended, or a
    /// fault came first): the thread's mask is restored and the signal
    /// queued again, to arrive when the kernel next can deliver it.
    pub(super) fn cancel_deferred(&mut self, tid: Tid) {
        if let Some(d) = self.rewriter.active.get_mut(&tid).and_then(|t| t.deferred.take()) {
            // The thread may be gone: then nothing is left to restore.
            let _ = sys::set_signal_mask(tid, d.mask);
            sys::queue_signal(self.pid, tid, &d.info);
        }
    }

    /// Records signal `signo` (information `info`), which stopped the
    /// thread at cache address `stopped_at` and is delivered at `now_at`,
    /// after every record before it; a fault drops the records of the
    /// instruction that faulted (written before it ran), as the ptrace
    /// recorder never saw it run.
    pub(super) fn deliver(
        &mut self,
        tid: Tid,
        signo: i32,
        info: Option<libc::siginfo_t>,
        stopped_at: u64,
        now_at: u64,
        addr: u64,
    ) -> Result<(), InstrumentError> {
        let synchronous = is_synchronous(signo, info.as_ref());
        // A signal the thread raised by the instruction it just ran (int3,
        // or kill/raise of its own process) belongs to that instruction, as
        // the ptrace recorder sees it arrive in that instruction's step.
        // SAFETY: si_pid is meaningful for user-sent signals (si_code <= 0).
        let self_sent = info.is_some_and(|i| i.si_code <= 0 && unsafe { i.si_pid() } == self.pid);
        let raised =
            self_sent || (signo == libc::SIGTRAP && info.is_some_and(|i| i.si_code == super::super::SI_KERNEL));
        let original = if raised && !synchronous { self.previous_pc(stopped_at) } else { self.original_pc(now_at) };
        if event_rules::signal_kills(tid, signo) {
            // The rest of the block, counted as the thread entered it, will
            // not run: the ptrace recorder would not count it. Nor does it
            // count the system call by which the thread sent itself the
            // signal: the signal ends the step of that call.
            self.uncount(tid, self.not_run_at(now_at) + u64::from(self_sent));
        }
        let in_window = self.rewriter.inside_windows.contains(&now_at);
        let fault = synchronous.then_some(original).flatten().map(|pc| super::Fault { pc, in_window });
        self.drain(tid, fault)?;
        // A fault of an instruction (SIGFPE, SIGILL) has its address for
        // `addr`: the copy's in the code cache, the original's in the trace.
        let addr = self.original_pc(addr).unwrap_or(addr);
        self.writer.push(tid as u32, &Event::Signal { signo, pc: original.unwrap_or(now_at), addr })?;
        Ok(())
    }

    /// Thread `tid` stopped at a signal handler's first instruction, its
    /// frame at the stack pointer: the pc saved there becomes the original
    /// instruction's, and the frame's trampoline traps on the way back.
    pub(super) fn present_frame(&mut self, tid: Tid, regs: &Regs) -> Result<(), InstrumentError> {
        // The kernel's frame: the trampoline's address, then the
        // ucontext, whose address it also passes as the third argument.
        let ucontext = regs.rsp + 8;
        if regs.rdx != ucontext {
            return Ok(());
        }
        let trampoline = sys::peek(tid, regs.rsp).map_err(ptrace_err("reading a signal frame"))?;
        self.rewriter.trampolines.insert(trampoline);
        let saved = sys::peek(tid, ucontext + UCONTEXT_RIP).map_err(ptrace_err("reading a signal frame"))?;
        let Some(original) = self.original_pc(saved) else { return Ok(()) };
        sys::poke(tid, ucontext + UCONTEXT_RIP, original).map_err(ptrace_err("writing a signal frame"))?;
        let frames = self.rewriter.presented.entry(tid).or_default();
        frames.push(PresentedFrame { ucontext, original, cache: saved });
        Ok(())
    }

    /// Thread `tid` returns from a signal handler into the trampoline, its
    /// stack pointer at the frame's ucontext: the frame's pc goes back into
    /// the code cache.
    pub(super) fn leaving_handler(&mut self, tid: Tid, rsp: u64) -> Result<(), InstrumentError> {
        let Some(frames) = self.rewriter.presented.get_mut(&tid) else { return Ok(()) };
        // Frames below this one belong to handlers left without returning
        // (siglongjmp).
        while frames.last().is_some_and(|f| f.ucontext < rsp) {
            frames.pop();
        }
        if frames.last().is_none_or(|f| f.ucontext != rsp) {
            return Ok(());
        }
        let Some(frame) = frames.pop() else { return Ok(()) };
        let at = frame.ucontext + UCONTEXT_RIP;
        let now = sys::peek(tid, at).map_err(ptrace_err("reading a signal frame"))?;
        let resume = if now == frame.original {
            frame.cache
        } else if self.in_cache(now) {
            now
        } else {
            // The handler chose where the program goes on.
            self.translate(tid, now)?
        };
        sys::poke(tid, at, resume).map_err(ptrace_err("writing a signal frame"))
    }
}

/// Whether `signo` is a fault the instruction at the stop raised (the
/// kernel's `si_code > 0`): the instruction did not run.
fn is_synchronous(signo: i32, info: Option<&libc::siginfo_t>) -> bool {
    super::super::is_fault(signo) && info.is_some_and(|i| i.si_code > 0)
}

/// SIGTRAP's bit in a signal mask: never blocked for a step, as the kernel
/// would force it through and reset its handler.
fn sigtrap_bit() -> u64 {
    1 << (libc::SIGTRAP - 1)
}

//! The rules that turn what an instruction did into trace events, shared by
//! both recorders (ptrace single-step and the binary rewriter) so that they
//! cannot drift: how allocator arguments read, which system calls are
//! allocations, the range a rep-string instruction covered, which jumps
//! are tail calls, and which signals reach the program.

use std::collections::HashSet;

use iced_x86::FlowControl;
use trace_rt::format::{AllocKind, Allocation};

/// `mmap(2)` system call number.
pub const SYS_MMAP: u64 = 9;
/// `munmap(2)` system call number.
pub const SYS_MUNMAP: u64 = 11;
/// `exit(2)` system call number (ends the calling thread).
pub const SYS_EXIT: u64 = 60;
/// `exit_group(2)` system call number (ends the process).
pub const SYS_EXIT_GROUP: u64 = 231;

/// The allocation an allocator call made, from its first three integer
/// arguments, its result and (for `posix_memalign`) the pointer it stored,
/// read through `stored_pointer(address)` only when the call succeeded.
pub fn allocator_call(
    kind: AllocKind,
    args: [u64; 3],
    ret: u64,
    callsite: u64,
    stored_pointer: impl FnOnce(u64) -> Option<u64>,
) -> Allocation {
    let [a0, a1, a2] = args;
    let mut alloc = Allocation { kind, size: 0, align: 0, ptr_in: 0, ptr_out: ret, callsite };
    match kind {
        AllocKind::Malloc => alloc.size = a0,
        AllocKind::Calloc => alloc.size = a0.saturating_mul(a1),
        AllocKind::Realloc => (alloc.ptr_in, alloc.size) = (a0, a1),
        AllocKind::Free => (alloc.ptr_in, alloc.ptr_out) = (a0, 0),
        AllocKind::PosixMemalign => {
            (alloc.align, alloc.size) = (a1, a2);
            alloc.ptr_out = if ret as u32 == 0 { stored_pointer(a0).unwrap_or(0) } else { 0 };
        }
        AllocKind::AlignedAlloc | AllocKind::Memalign => (alloc.align, alloc.size) = (a0, a1),
        AllocKind::Mmap | AllocKind::Munmap => {}
    }
    alloc
}

/// The allocation a system call `nr(addr, len, ...)` returning `ret` made
/// at `pc`: `mmap` and `munmap` are recorded, other calls are not.
pub fn syscall_allocation(nr: u64, addr: u64, len: u64, ret: u64, pc: u64) -> Option<Allocation> {
    let failed = (ret as i64) < 0 && (ret as i64) > -4096;
    match nr {
        SYS_MMAP => Some(Allocation {
            kind: AllocKind::Mmap,
            size: len,
            align: 4096,
            ptr_in: addr,
            ptr_out: if failed { 0 } else { ret },
            callsite: pc,
        }),
        SYS_MUNMAP => {
            Some(Allocation { kind: AllocKind::Munmap, size: len, align: 0, ptr_in: addr, ptr_out: 0, callsite: pc })
        }
        _ => None,
    }
}

/// The range one operand of a rep-string instruction covered, as (lowest
/// address, bytes): it started at `start` with `count` in rcx, ended with
/// `rcx_after`, moving `size` bytes per iteration, downwards if the direction
/// flag was set. `None` if it made no iteration.
pub fn rep_range(start: u64, count: u64, rcx_after: u64, size: u32, direction_down: bool) -> Option<(u64, u64)> {
    let iterations = count.wrapping_sub(rcx_after);
    if iterations == 0 || iterations > count {
        return None;
    }
    let bytes = iterations.saturating_mul(size.into());
    let low = if direction_down { start.wrapping_sub(bytes - u64::from(size)) } else { start };
    Some((low, bytes))
}

/// The direction flag's bit in rflags.
pub const DIRECTION_FLAG: u64 = 1 << 10;

/// Whether a jump of kind `flow` (direct target `branch_target`, if any)
/// that went to `target` enters a function: then it is a tail call. A
/// conditional branch counts only when it was taken.
pub fn is_tail_call(
    flow: FlowControl,
    branch_target: Option<u64>,
    target: u64,
    function_starts: &HashSet<u64>,
) -> bool {
    matches!(flow, FlowControl::UnconditionalBranch | FlowControl::IndirectBranch | FlowControl::ConditionalBranch)
        && function_starts.contains(&target)
        && (flow != FlowControl::ConditionalBranch || branch_target == Some(target))
}

/// The signal to pass on when resuming a thread stopped for `signo`: 0 if
/// the program ignores it (`SIG_IGN`, or the default action of SIGCHLD,
/// SIGURG, SIGWINCH or SIGCONT), else `signo`.
///
/// A traced program is stopped even for signals it ignores, and a single
/// step that delivers an ignored signal runs the next instruction instead
/// of entering a handler: the recorders must see that it ran. A fault the
/// kernel forces (SIGSEGV, an int3's SIGTRAP) has had its action reset to
/// the default by then, so it is never taken for ignored.
pub fn signal_to_pass_on(tid: i32, signo: i32) -> i32 {
    match std::fs::read_to_string(format!("/proc/{tid}/status")) {
        Ok(status) if ignores(&status, signo) => 0,
        // Unreadable (the thread is gone): pass it on, as the kernel would.
        _ => signo,
    }
}

/// Signals whose default action is to do nothing.
const IGNORED_BY_DEFAULT: [i32; 4] = [libc::SIGCHLD, libc::SIGURG, libc::SIGWINCH, libc::SIGCONT];
/// Signals whose default action is to stop the process.
const STOPPING: [i32; 4] = [libc::SIGSTOP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

/// Whether delivering `signo` to thread `tid` ends its process: the program
/// neither catches nor ignores it, and its default action terminates. Then
/// nothing after the instruction it arrived at runs.
pub fn signal_kills(tid: i32, signo: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/status")).is_ok_and(|status| kills(&status, signo))
}

/// The bit of `signo` in a `/proc/PID/status` signal mask, if it has one.
fn signal_bit(signo: i32) -> Option<u64> {
    u32::try_from(signo - 1).ok().filter(|b| *b < 64).map(|b| 1u64 << b)
}

/// The signal mask `field` (`SigIgn:`, `SigCgt:`) of a `/proc/PID/status`.
fn status_mask(status: &str, field: &str) -> u64 {
    status.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0)
}

/// Whether a process whose `/proc/PID/status` reads `status` ignores
/// `signo`.
fn ignores(status: &str, signo: i32) -> bool {
    let Some(bit) = signal_bit(signo) else {
        return false;
    };
    status_mask(status, "SigIgn:") & bit != 0
        || (IGNORED_BY_DEFAULT.contains(&signo) && status_mask(status, "SigCgt:") & bit == 0)
}

/// Whether `signo` ends a process whose `/proc/PID/status` reads `status`.
fn kills(status: &str, signo: i32) -> bool {
    let Some(bit) = signal_bit(signo) else {
        return false;
    };
    let caught_or_ignored = (status_mask(status, "SigCgt:") | status_mask(status, "SigIgn:")) & bit != 0;
    !caught_or_ignored && !IGNORED_BY_DEFAULT.contains(&signo) && !STOPPING.contains(&signo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_signals_are_those_neither_caught_nor_ignored_that_terminate() {
        // SIGALRM (14) ignored, SIGCHLD (17) caught, SIGTRAP (5) caught.
        let status = "Name:\tx\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000002000\nSigCgt:\t0000000000010010\n";
        assert!(kills(status, libc::SIGSEGV));
        assert!(kills(status, libc::SIGINT));
        assert!(!kills(status, libc::SIGTRAP), "caught");
        assert!(!kills(status, libc::SIGALRM), "ignored");
        assert!(!kills(status, libc::SIGWINCH), "ignored by default");
        assert!(!kills(status, libc::SIGTSTP), "stops");
    }

    #[test]
    fn ignored_signals_come_from_the_status_masks() {
        // SIGALRM (14) ignored, SIGCHLD (17) caught, SIGINT (2) default.
        let status = "Name:\tx\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000002000\nSigCgt:\t0000000000010000\n";
        assert!(ignores(status, libc::SIGALRM));
        assert!(!ignores(status, libc::SIGINT));
        assert!(!ignores(status, libc::SIGCHLD), "caught");
        assert!(ignores(status, libc::SIGWINCH), "ignored by default");
        let caught = "SigIgn:\t0000000000000000\nSigCgt:\t0000000008000000\n";
        assert!(!ignores(caught, libc::SIGWINCH), "SIGWINCH (28) caught");
        assert!(!ignores(status, 0));
        assert!(!ignores(status, 65));
    }

    #[test]
    fn rep_ranges_cover_the_iterations_made() {
        assert_eq!(rep_range(0x1000, 10, 0, 8, false), Some((0x1000, 80)));
        assert_eq!(rep_range(0x1000, 10, 4, 1, false), Some((0x1000, 6)));
        // Downwards: the last element is at start - (n-1)*size.
        assert_eq!(rep_range(0x1000, 4, 0, 4, true), Some((0x1000 - 12, 16)));
        assert_eq!(rep_range(0x1000, 0, 0, 1, false), None);
    }

    #[test]
    fn allocator_arguments_read_per_kind() {
        let a = allocator_call(AllocKind::Calloc, [3, 5, 0], 0x10, 0x99, |_| None);
        assert_eq!((a.size, a.ptr_out, a.callsite), (15, 0x10, 0x99));
        let a = allocator_call(AllocKind::PosixMemalign, [0x700, 64, 100], 0, 1, |p| Some(p + 1));
        assert_eq!((a.align, a.size, a.ptr_out), (64, 100, 0x701));
        let a = allocator_call(AllocKind::PosixMemalign, [0x700, 64, 100], 12, 1, |p| Some(p + 1));
        assert_eq!(a.ptr_out, 0, "failed call stores nothing");
        assert!(syscall_allocation(SYS_MMAP, 0, 4096, (-12i64) as u64, 1).is_some_and(|a| a.ptr_out == 0));
        assert!(syscall_allocation(1, 0, 0, 0, 0).is_none());
    }
}

//! Running a little of our own in the target: a system call made on the
//! program's behalf (to map a page), and *displaced stepping* — executing a
//! copy of the instruction under a breakpoint from a scratch page, so the
//! breakpoint never has to be lifted (uprobes and GDB do the same). A lifted
//! breakpoint is a window in which other threads run past unseen.

use iced_x86::{BlockEncoder, BlockEncoderOptions, Decoder, DecoderOptions, FlowControl, InstructionBlock};

use crate::InstrumentError;
use crate::error::ptrace_err;
use crate::maps;
use crate::sys::{self, Regs, Stop, Tid};

const SYS_MMAP: u64 = 9;
const PAGE: u64 = 4096;
/// Farthest a relocated rip-relative operand or branch can reach.
const REACH: u64 = 1 << 31;

/// Makes system call `nr` with `args` in stopped thread `tid` of process
/// `pid`: the thread steps once through a `syscall` instruction that is
/// already in executable memory (the vDSO has one), with its registers
/// restored afterwards. No code is written: other threads keep running
/// through the program's code meanwhile. Returns the raw result (`-errno`
/// on failure).
///
/// A signal may be pending when the thread is resumed for the step (a
/// program's interval timer fires thousands of times a second): the kernel
/// would stop the thread for it before the `syscall` ran, and resuming from
/// that stop would drop it. So every blockable signal but SIGTRAP (the
/// step's own, which the kernel forces through any mask) is blocked for the
/// step, staying pending with its information until the program's mask is
/// back; a signal that cannot be blocked, or a SIGTRAP from elsewhere, is
/// set aside and sent again after.
pub fn syscall(pid: Tid, tid: Tid, nr: u64, args: [u64; 6]) -> Result<u64, InstrumentError> {
    let Some(at) = find_syscall_instruction(pid) else {
        return Err(InstrumentError::Ptrace {
            what: "finding a syscall instruction in the target",
            cause: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    };
    let saved = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
    let mask = sys::signal_mask(tid).map_err(ptrace_err("reading the signal mask"))?;
    let mut regs = saved;
    regs.rip = at;
    regs.rax = nr;
    (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
    // Not in a system call: nothing for the kernel to restart.
    regs.orig_rax = u64::MAX;
    let mut set_aside = Vec::new();
    let result = sys::set_signal_mask(tid, !(1u64 << (libc::SIGTRAP - 1)))
        .and_then(|()| sys::set_regs(tid, &regs))
        .and_then(|()| step_over_syscall(tid, at, &mut set_aside));
    let restored = sys::set_regs(tid, &saved).and_then(|()| sys::set_signal_mask(tid, mask));
    for signo in set_aside {
        sys::kill_thread(pid, tid, signo);
    }
    let after = result.map_err(ptrace_err("making a system call in the target"))?;
    restored.map_err(ptrace_err("restoring after a system call"))?;
    Ok(after.rax)
}

/// Steps thread `tid`, which is at the `syscall` instruction `at`, until
/// the instruction has run; signals that stopped it before are suppressed
/// and pushed to `set_aside`. Returns the registers after the call.
fn step_over_syscall(tid: Tid, at: u64, set_aside: &mut Vec<i32>) -> std::io::Result<Regs> {
    loop {
        sys::single_step(tid, 0)?;
        match sys::wait(tid)? {
            (_, Stop::Signal { signo, event }) => {
                let regs = sys::get_regs(tid)?;
                if regs.rip != at {
                    return Ok(regs);
                }
                if event == 0 {
                    set_aside.push(signo);
                }
            }
            (_, Stop::Exited(_) | Stop::Killed(_)) => {
                return Err(std::io::Error::other("the program ended during the call"));
            }
        }
    }
}

/// The address of `0f 05` bytes in executable memory of `pid`: in the vDSO
/// first, else in any executable file mapping.
///
/// Every call into the target needs one, and reading the memory map costs
/// about half of such a call. The vDSO is one image for every process of
/// this kernel: where the bytes are in it is found once, and its address in
/// `pid` comes from the auxiliary vector, which an `exec` renews (the bytes
/// are checked there each time).
fn find_syscall_instruction(pid: Tid) -> Option<u64> {
    static IN_VDSO: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let vdso = vdso_address(pid);
    if let (Some(vdso), Some(&offset)) = (vdso, IN_VDSO.get()) {
        let mut bytes = [0u8; 2];
        let at = vdso + offset;
        if sys::read_memory(pid, at, &mut bytes).is_ok_and(|n| n == 2) && bytes == [0x0f, 0x05] {
            return Some(at);
        }
    }
    let at = scan_for_syscall_instruction(pid)?;
    if let Some(offset) = vdso.and_then(|v| at.checked_sub(v)).filter(|&o| o < VDSO_MAX_BYTES) {
        let _ = IN_VDSO.set(offset);
    }
    Some(at)
}

/// Generous bound on the vDSO's size (two pages on x86-64 today).
const VDSO_MAX_BYTES: u64 = 1 << 16;

/// Where the vDSO of `pid` is mapped (`AT_SYSINFO_EHDR`), if it has one.
fn vdso_address(pid: Tid) -> Option<u64> {
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    auxv.chunks_exact(16).find_map(|pair| {
        let key = u64::from_le_bytes(pair[..8].try_into().ok()?);
        let value = u64::from_le_bytes(pair[8..].try_into().ok()?);
        (key == libc::AT_SYSINFO_EHDR).then_some(value)
    })
}

/// [`find_syscall_instruction`] the slow way: through the memory map.
fn scan_for_syscall_instruction(pid: Tid) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut executable: Vec<(u64, u64, bool)> = maps::maps_lines(&text)
        .filter(|l| l.perms.contains('x'))
        .map(|l| (l.start, l.end, l.path == "[vdso]"))
        .collect();
    executable.sort_by_key(|&(_, _, vdso)| !vdso);
    for (start, end, _) in executable {
        let mut at = start;
        while at < end {
            let mut buf = vec![0u8; (end - at).min(1 << 16) as usize];
            let n = sys::read_memory(pid, at, &mut buf).ok()?;
            if let Some(i) = buf[..n].windows(2).position(|w| w == [0x0f, 0x05]) {
                return Some(at + i as u64);
            }
            if n < 2 {
                break;
            }
            at += n as u64 - 1;
        }
    }
    None
}

/// Maps one executable page in process `pid` (through stopped thread
/// `tid`) within reach of `near`, so that rip-relative code copied there
/// still reaches its data. `None` if no such page can be had.
pub fn map_page_near(pid: Tid, tid: Tid, near: u64) -> Result<Option<u64>, InstrumentError> {
    for page in free_spots_near(pid, near, PAGE)? {
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
        let prot = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let got = syscall(pid, tid, SYS_MMAP, [page, PAGE, prot, flags, u64::MAX, 0])?;
        if got == page {
            return Ok(Some(page));
        }
    }
    Ok(None)
}

/// Up to eight page-aligned addresses where `len` bytes are unmapped in
/// `pid` and every byte is within a rip-relative reach of `near`, best
/// first. Best is far from the program's own growth: about 1.5 GiB below
/// `near` (the mmap area grows down from the libraries, and fills the space
/// just below them first) or, failing that, 1 GiB above (the brk heap grows
/// up from just above the executable).
pub fn free_spots_near(pid: Tid, near: u64, len: u64) -> Result<Vec<u64>, InstrumentError> {
    let mapped = maps::mapped_ranges(pid).map_err(ptrace_err("reading the target's memory map"))?;
    let wanted = [near.saturating_sub(3 << 29), near.saturating_add(1 << 30)];
    let mut candidates: Vec<(u64, u64)> = Vec::new();
    let mut prev_end = 0x10000u64;
    for &(start, end) in mapped.iter().chain(std::iter::once(&(0x7fff_ffff_f000, 0x7fff_ffff_f000))) {
        if start >= prev_end.saturating_add(len) {
            // The free gap [prev_end, start): its spots nearest to each wish.
            for w in wanted {
                let spot = w.clamp(prev_end, start - len) & !(PAGE - 1);
                if spot >= prev_end {
                    candidates.push((w.abs_diff(spot), spot));
                }
            }
        }
        prev_end = prev_end.max(end);
    }
    candidates.retain(|&(_, p)| p.abs_diff(near).max(p.saturating_add(len).abs_diff(near)) < REACH - 2 * PAGE);
    candidates.sort_unstable();
    let mut spots: Vec<u64> = candidates.into_iter().map(|(_, p)| p).collect();
    spots.dedup();
    spots.truncate(8);
    Ok(spots)
}

/// One instruction prepared for displaced stepping.
#[derive(Clone, Copy, Debug)]
pub struct Displaced {
    /// Where the instruction really is.
    pub original: u64,
    /// Where its copy is.
    pub scratch: u64,
    orig_len: u64,
    copy_len: u64,
    is_call: bool,
}

impl Displaced {
    /// Copies the instruction whose bytes (original, without breakpoint)
    /// start `code` at `original` to `scratch`, re-encoded for its new
    /// address. `None` if it cannot move (undecodable, or out of reach).
    pub fn prepare(tid: Tid, original: u64, code: &[u8], scratch: u64) -> Result<Option<Displaced>, InstrumentError> {
        let instr = Decoder::with_ip(64, code, original, DecoderOptions::NONE).decode();
        if instr.is_invalid() {
            return Ok(None);
        }
        let Ok(encoded) = BlockEncoder::encode(64, InstructionBlock::new(&[instr], scratch), BlockEncoderOptions::NONE)
        else {
            return Ok(None);
        };
        let copy = encoded.code_buffer;
        for (i, chunk) in copy.chunks(8).enumerate() {
            let at = scratch + 8 * i as u64;
            let old = sys::peek(tid, at).map_err(ptrace_err("reading the scratch page"))?;
            let mut bytes = old.to_le_bytes();
            bytes[..chunk.len()].copy_from_slice(chunk);
            sys::poke(tid, at, u64::from_le_bytes(bytes)).map_err(ptrace_err("writing the scratch page"))?;
        }
        let is_call = matches!(instr.flow_control(), FlowControl::Call | FlowControl::IndirectCall);
        Ok(Some(Displaced { original, scratch, orig_len: instr.len() as u64, copy_len: copy.len() as u64, is_call }))
    }

    /// Points `regs` (of a thread at `original`) at the copy.
    pub fn enter(&self, regs: &mut Regs) {
        regs.rip = self.scratch;
    }

    /// After a step of the copy: puts the thread back in the original code
    /// as if it had run the instruction there. Returns false if the
    /// instruction did not run (a signal stopped the thread first, or it
    /// faulted); the thread is then back at `original`.
    pub fn finish(&self, tid: Tid, regs: &mut Regs) -> Result<bool, InstrumentError> {
        let ran = regs.rip != self.scratch;
        if !ran {
            regs.rip = self.original;
        } else if regs.rip == self.scratch + self.copy_len {
            regs.rip = self.original + self.orig_len;
        }
        if ran && self.is_call {
            // The call pushed the copy's return address.
            sys::poke(tid, regs.rsp, self.original + self.orig_len).map_err(ptrace_err("fixing a return address"))?;
        }
        sys::set_regs(tid, regs).map_err(ptrace_err("leaving the scratch page"))?;
        Ok(ran)
    }

    /// Runs the instruction for stopped thread `tid`, which is at
    /// `original`: one step of the copy. Returns the signal that stopped it
    /// instead, if any (0: none), to be delivered by the caller.
    pub fn step(&self, tid: Tid) -> Result<i32, InstrumentError> {
        let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
        self.enter(&mut regs);
        sys::set_regs(tid, &regs).map_err(ptrace_err("entering the scratch page"))?;
        sys::single_step(tid, 0).map_err(ptrace_err("stepping a displaced instruction"))?;
        let signo = match sys::wait(tid).map_err(ptrace_err("waiting for a displaced step"))? {
            (_, Stop::Signal { signo: libc::SIGTRAP, .. }) => 0,
            (_, Stop::Signal { signo, .. }) => signo,
            // The thread is gone: nothing to put back.
            (_, Stop::Exited(_) | Stop::Killed(_)) => return Ok(0),
        };
        let mut after = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
        self.finish(tid, &mut after)?;
        Ok(signo)
    }
}

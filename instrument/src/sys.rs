//! Thin, checked wrappers over the ptrace and wait system calls.
//!
//! Everything here is a direct system call: the single-step loop makes three
//! of them per instruction (step, wait, get registers) and nothing else, which
//! is what keeps it close to the raw stepping rate.

use std::io;

pub use libc::user_regs_struct as Regs;

/// A thread id (the kernel's tid; the leader's tid is the process id).
pub type Tid = libc::pid_t;

/// What `waitpid` reported for one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The thread (or, for the leader, the whole process) exited with a code.
    Exited(i32),
    /// It was killed by a signal.
    Killed(i32),
    /// It stopped with a signal; `event` is the `PTRACE_EVENT_*` number or 0.
    Signal {
        /// The stop signal (SIGTRAP for steps, breakpoints and events).
        signo: i32,
        /// The `PTRACE_EVENT_*` number, 0 for plain signal stops.
        event: i32,
    },
}

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// Asks to be traced by the parent (called in the child before `exec`).
pub fn traceme() -> io::Result<()> {
    // SAFETY: PTRACE_TRACEME takes no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) }).map(drop)
}

/// Sets `PTRACE_O_*` options on a stopped tracee.
pub fn set_options(tid: Tid, options: libc::c_int) -> io::Result<()> {
    // SAFETY: the data argument is an integer, not a pointer.
    check(unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, tid, 0, options as libc::c_long) }).map(drop)
}

/// Executes one instruction, delivering `signo` (0 for none) first.
#[inline]
pub fn single_step(tid: Tid, signo: i32) -> io::Result<()> {
    // SAFETY: the data argument is a signal number.
    check(unsafe { libc::ptrace(libc::PTRACE_SINGLESTEP, tid, 0, signo as libc::c_long) }).map(drop)
}

/// Resumes a stopped tracee, delivering `signo` (0 for none).
pub fn resume(tid: Tid, signo: i32) -> io::Result<()> {
    // SAFETY: the data argument is a signal number.
    check(unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, signo as libc::c_long) }).map(drop)
}

/// Stops tracing a tracee and lets it run.
pub fn detach(tid: Tid) -> io::Result<()> {
    // SAFETY: no pointers are passed.
    check(unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0) }).map(drop)
}

/// The process (thread group) a thread belongs to, from /proc.
pub fn thread_group(tid: Tid) -> Option<Tid> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Tgid:")?.trim().parse().ok())
}

/// Reads the general-purpose registers (including `fs_base`/`gs_base`).
#[inline]
pub fn get_regs(tid: Tid) -> io::Result<Regs> {
    let mut regs = std::mem::MaybeUninit::<Regs>::uninit();
    // SAFETY: the kernel fills the whole struct on success.
    check(unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, regs.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call above.
    Ok(unsafe { regs.assume_init() })
}

/// Writes the general-purpose registers.
pub fn set_regs(tid: Tid, regs: &Regs) -> io::Result<()> {
    // SAFETY: the kernel only reads the struct.
    check(unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0, regs as *const Regs) }).map(drop)
}

/// Reads one machine word of the tracee's memory.
pub fn peek(tid: Tid, addr: u64) -> io::Result<u64> {
    // PEEKDATA returns the word itself, so -1 is only an error with errno.
    // SAFETY: errno is thread-local; the call takes no pointers of ours.
    unsafe {
        *libc::__errno_location() = 0;
        let word = libc::ptrace(libc::PTRACE_PEEKDATA, tid, addr, 0);
        if word == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(word as u64)
    }
}

/// Writes one machine word of the tracee's memory (also into read-only text).
pub fn poke(tid: Tid, addr: u64, word: u64) -> io::Result<()> {
    // SAFETY: the data argument is the word itself.
    check(unsafe { libc::ptrace(libc::PTRACE_POKEDATA, tid, addr, word) }).map(drop)
}

/// Reads tracee memory in one system call; returns the bytes read, which can
/// be fewer than asked at the end of a mapping.
pub fn read_memory(pid: Tid, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` covers exactly `buf`; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// The signal information of a signal-delivery stop.
pub fn sig_info(tid: Tid) -> io::Result<libc::siginfo_t> {
    let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::uninit();
    // SAFETY: the kernel fills the struct on success.
    check(unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, tid, 0, info.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call above.
    Ok(unsafe { info.assume_init() })
}

/// The signal mask of stopped thread `tid` (the kernel's 64-bit set: bit
/// `n - 1` is signal `n`).
pub fn signal_mask(tid: Tid) -> io::Result<u64> {
    let mut mask: u64 = 0;
    // SAFETY: the kernel writes `addr` (= 8) bytes to `data`.
    check(unsafe { libc::ptrace(libc::PTRACE_GETSIGMASK, tid, 8usize, &mut mask as *mut u64) })?;
    Ok(mask)
}

/// Sets the signal mask of stopped thread `tid` (see [`signal_mask`]).
pub fn set_signal_mask(tid: Tid, mask: u64) -> io::Result<()> {
    // SAFETY: the kernel reads `addr` (= 8) bytes from `data`.
    check(unsafe { libc::ptrace(libc::PTRACE_SETSIGMASK, tid, 8usize, &mask as *const u64) }).map(drop)
}

/// Replaces the signal information of a signal-delivery stop (what a
/// signal injected on resuming carries).
pub fn set_sig_info(tid: Tid, info: &libc::siginfo_t) -> io::Result<()> {
    // SAFETY: the kernel reads one siginfo_t.
    check(unsafe { libc::ptrace(libc::PTRACE_SETSIGINFO, tid, 0, info as *const libc::siginfo_t) }).map(drop)
}

/// Queues signal `info` for thread `tid` of process `pid` again, with its
/// information where the kernel lets another process send it (a timer's, a
/// `sigqueue`'s), else as a plain `tgkill`.
pub fn queue_signal(pid: Tid, tid: Tid, info: &libc::siginfo_t) {
    // SAFETY: plain system call with a pointer to a whole siginfo_t.
    let queued =
        unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, info.si_signo, info as *const libc::siginfo_t) };
    if queued != 0 {
        kill_thread(pid, tid, info.si_signo);
    }
}

/// The message of the last `PTRACE_EVENT_*` stop (e.g. the new thread's tid).
pub fn event_msg(tid: Tid) -> io::Result<u64> {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: the kernel writes one c_ulong.
    check(unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, tid, 0, &mut msg as *mut libc::c_ulong) })?;
    Ok(msg)
}

/// Waits for a state change of `tid`, or of any tracee when `tid` is -1.
#[inline]
pub fn wait(tid: Tid) -> io::Result<(Tid, Stop)> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        if r >= 0 {
            return Ok((r, decode_status(status)));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// A state change of any tracee that is already there, without waiting.
pub fn poll_any() -> Option<(Tid, Stop)> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) };
        if r > 0 {
            return Some((r, decode_status(status)));
        }
        if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

fn decode_status(status: i32) -> Stop {
    if libc::WIFEXITED(status) {
        Stop::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Stop::Killed(libc::WTERMSIG(status))
    } else {
        Stop::Signal { signo: libc::WSTOPSIG(status), event: (status >> 16) & 0xff }
    }
}

/// Sends a signal to one thread of a process.
pub fn kill_thread(pid: Tid, tid: Tid, signo: i32) {
    // SAFETY: plain system call; failure (thread gone) is fine to ignore.
    unsafe {
        libc::syscall(libc::SYS_tgkill, pid, tid, signo);
    }
}

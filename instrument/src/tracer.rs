//! The ptrace single-step backend: launches the target, stops it at the
//! traced function, single-steps that thread through the function's dynamic
//! extent and writes every memory access, call, return and allocation.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use decoder::symbols::elf::scan_functions;
use decoder::symbols::{ElfSymbols, SymbolError, SymbolPaths};
use iced_x86::{FlowControl, InstructionInfoFactory};
use trace_rt::format::{AllocKind, Event, Implied, Metadata, Site, TargetExit, TraceWriter, Trailer, TruncationReason};

use crate::decode::{self, DecodedInstruction, MAX_INSTRUCTION_LEN};
use crate::entry::{self, FunctionSpec, LoadedModule, Plan, Resolved};
use crate::error::ptrace_err;
use crate::event_rules::{self, SYS_EXIT, SYS_EXIT_GROUP, SYS_MMAP, SYS_MUNMAP};
use crate::inject::{self, Displaced};
use crate::maps;
use crate::sys::{self, Regs, Stop, Tid};
use crate::{Backend, InstrumentError, Progress, RecordOptions, RecordSummary, interrupt};

mod rewrite;

const INT3: u8 = 0xcc;
/// `si_code` of the SIGTRAP a single step raises (`TRAP_TRACE`), of the
/// one after stepping over a system call (`TRAP_BRKPT`), and of the stop
/// the kernel makes after a step that entered a signal handler (the
/// ptrace notification: `si_code` is SIGTRAP itself). A program cannot
/// raise any of these (user-sent signals have `si_code` <= 0, int3 has
/// `SI_KERNEL`).
const TRAP_BRKPT: i32 = 1;
const TRAP_TRACE: i32 = 2;
const TRAP_NOTIFY: i32 = libc::SIGTRAP;
/// `si_code` of the SIGTRAP an `int3` raises: our breakpoints, or the
/// target's own.
const SI_KERNEL: i32 = 0x80;
/// How often buffered events are written out, so that a `kill -9` of the
/// recorder loses at most this much.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// After an invocation, events are flushed unless a flush happened this
/// recently.
const INVOCATION_FLUSH_GAP: Duration = Duration::from_millis(50);
/// Steps between clock checks (the clock is cheap, but not free).
const CLOCK_CHECK_STEPS: u64 = 4096;

/// A software breakpoint: the byte it replaced.
#[derive(Clone, Copy)]
struct Breakpoint {
    addr: u64,
    original: u8,
}

impl Breakpoint {
    fn insert(tid: Tid, addr: u64) -> Result<Self, InstrumentError> {
        let word = sys::peek(tid, addr).map_err(ptrace_err("reading code for a breakpoint"))?;
        sys::poke(tid, addr, (word & !0xff) | u64::from(INT3)).map_err(ptrace_err("inserting a breakpoint"))?;
        Ok(Breakpoint { addr, original: word as u8 })
    }

    fn remove(self, tid: Tid) -> Result<(), InstrumentError> {
        let word = sys::peek(tid, self.addr).map_err(ptrace_err("reading code for a breakpoint"))?;
        sys::poke(tid, self.addr, (word & !0xff) | u64::from(self.original))
            .map_err(ptrace_err("removing a breakpoint"))
    }
}

/// How one traced invocation ended.
enum InvocationEnd {
    /// It returned to its caller.
    Returned,
    /// The traced thread exited inside it.
    ThreadGone,
    /// The whole process ended inside it.
    ProcessGone(TargetExit),
    /// The user interrupted the recording.
    Interrupted,
    /// The process called `execve`: what runs now is another program.
    Exec,
}

/// A rep-string instruction being stepped: one iteration per step, recorded
/// as one access over the whole range once it completes.
struct RepInProgress {
    pc: u64,
    start_addrs: Vec<u64>,
    count: u64,
    direction_down: bool,
}

struct Tracer {
    pid: Tid,
    /// Encodes on this thread, as the records are converted (in one pass
    /// over them, see `rewrite::records`); compresses on a thread of its
    /// own, beside the program.
    writer: TraceWriter<BufWriter<File>>,
    entry: u64,
    entry_bp: Option<Breakpoint>,
    rearm_pending: bool,
    max_invocations: Option<u32>,
    invocations: u32,
    /// Entries into the function by threads that found another one being
    /// traced, per thread.
    skipped: BTreeMap<u32, u64>,
    /// The program the process exec'd into, if it did.
    exec: Option<String>,
    /// A thread that called exec while another was being waited for.
    exec_by: Option<Tid>,
    /// The entry instruction, copied for displaced stepping (set up at the
    /// first entry; `None` until then, or if it cannot be copied).
    displaced: Option<Displaced>,
    displaced_tried: bool,
    allocator_entries: HashMap<u64, AllocKind>,
    function_starts: HashSet<u64>,
    code: HashMap<u64, DecodedInstruction>,
    /// Code read ahead while the rewrite backend translates (`None`
    /// otherwise: breakpoints may change between stops).
    code_window: Option<CodeWindow>,
    factory: InstructionInfoFactory,
    modules_loaded: bool,
    /// Paths of the modules written (symbolized from their files).
    module_paths: HashSet<String>,
    /// The target's data mappings written so far.
    mappings_written: HashSet<(u64, u64, String)>,
    /// Tells when to read them again ([`Tracer::at_invocation_start`]).
    map_watch: Option<maps::MapWatch>,
    known_threads: HashSet<Tid>,
    awaiting_initial_stop: HashSet<Tid>,
    released_children: HashSet<Tid>,
    instructions: u64,
    unflushed_steps: u64,
    accesses: u64,
    last_callsite: u64,
    started: Instant,
    last_flush: Instant,
    progress: Option<crate::ProgressCallback>,
    scratch: Vec<(u32, u64)>,
    backend: Backend,
    rewriter: rewrite::Rewriter,
    /// SIGSTOPs the rewrite backend's ticker sent that are still to arrive,
    /// by thread: suppressed, not delivered.
    pending_ticks: HashMap<Tid, u64>,
    /// Stops taken from the kernel, still to be handled ([`Self::next_stop`]).
    queued_stops: std::collections::VecDeque<(Tid, Stop)>,
}

pub(crate) fn record(options: RecordOptions) -> Result<RecordSummary, InstrumentError> {
    let exe = resolve_program(&options.program)?;
    let symbols = ElfSymbols::load(&exe, &SymbolPaths::default())?;
    let spec = FunctionSpec::parse(options.function.as_deref().unwrap_or("main"));
    let plan = entry::plan(&spec, &symbols, &exe)?;

    let pid = spawn(&exe, &options)?;
    // From here on the target exists: any error kills it rather than leave
    // it stopped under a tracer that is gone.
    let mut target = Target(pid);
    interrupt::set_target(pid);
    if interrupt::requested() {
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let modules = maps::read_maps(pid).map_err(ptrace_err("reading the target's memory map"))?;
    let exe_module = maps::find_module(&modules, &exe).ok_or_else(|| InstrumentError::NotMapped(exe.clone()))?;
    let bias = symbols.load_bias(exe_module);
    let started = Instant::now();
    let resolved = match plan {
        Plan::InExecutable { address, name } => Resolved { address: address.wrapping_add(bias), name },
        Plan::Deferred { stop_at } => match run_to(pid, stop_at.wrapping_add(bias))? {
            Some(tid) => {
                let loaded = load_modules(pid)?;
                match entry::resolve_loaded(&spec, &loaded, &mut |addr| sys::peek(tid, addr).ok()) {
                    Ok(r) => r,
                    // Not found anywhere, and the executable's own functions
                    // were unknowable: say that first.
                    Err(InstrumentError::Symbols(SymbolError::FunctionNotFound { .. })) if !symbols.has_symtab => {
                        return Err(SymbolError::Stripped(exe).into());
                    }
                    Err(e) => return Err(e),
                }
            }
            None => return Err(InstrumentError::EndedBeforeStart { function: spec.name.clone() }),
        },
    };

    // Nothing is written unless the target started and the function is known.
    let file = File::create(&options.output)
        .map_err(|cause| InstrumentError::Create { path: options.output.clone(), cause })?;
    let mut metadata = Metadata::new(options.backend.name());
    metadata.argv = std::iter::once(options.program.to_string_lossy().into_owned())
        .chain(options.args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect();
    metadata.executable = exe.to_string_lossy().into_owned();
    metadata.build_id = symbols.placement.build_id.clone();
    metadata.function = Some(resolved.name.clone());
    metadata.pid = pid as u32;
    metadata.start_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), &metadata)?;
    if options.backend == Backend::Rewrite {
        // zstd is a quarter of a rewrite recording's CPU time, and both
        // cores are busy: its fast level, for files 0-10% larger (shuffled
        // pointers: up to 45%), as the budget of ~600 MB/s assumed.
        writer.set_compression_level(1);
    }
    let writer = writer.compress_on_own_thread()?;

    let mut tracer = Tracer {
        pid,
        writer,
        entry: resolved.address,
        entry_bp: None,
        rearm_pending: false,
        max_invocations: options.max_invocations,
        invocations: 0,
        skipped: BTreeMap::new(),
        exec: None,
        exec_by: None,
        displaced: None,
        displaced_tried: false,
        allocator_entries: HashMap::new(),
        function_starts: HashSet::new(),
        code: HashMap::new(),
        code_window: None,
        factory: InstructionInfoFactory::new(),
        modules_loaded: false,
        module_paths: HashSet::new(),
        mappings_written: HashSet::new(),
        map_watch: None,
        known_threads: HashSet::from([pid]),
        awaiting_initial_stop: HashSet::new(),
        released_children: HashSet::new(),
        instructions: 0,
        unflushed_steps: 0,
        accesses: 0,
        last_callsite: 0,
        started,
        last_flush: Instant::now(),
        progress: options.progress,
        scratch: Vec::new(),
        backend: options.backend,
        rewriter: rewrite::Rewriter::default(),
        pending_ticks: HashMap::new(),
        queued_stops: Default::default(),
    };
    if tracer.max_invocations != Some(0) {
        tracer.entry_bp = Some(Breakpoint::insert(pid, tracer.entry)?);
    }
    sys::resume(pid, 0).map_err(ptrace_err("starting the target"))?;
    let (exit, truncated) = tracer.run()?;
    target.release();
    // The interrupt may have ended the target in any state; say so.
    let truncated = truncated.or(interrupt::requested().then_some(TruncationReason::Interrupted));
    interrupt::set_target(0);
    tracer.flush_steps()?;
    let trace_bytes = {
        let trailer = Trailer { exit, truncated };
        let w = tracer.writer.finish(&trailer)?;
        let file = w
            .into_inner()
            .map_err(|e| InstrumentError::Create { path: options.output.clone(), cause: e.into_error() })?;
        file.metadata().map(|m| m.len()).unwrap_or(0)
    };
    Ok(RecordSummary {
        exit: exit.unwrap_or(TargetExit::Signal(libc::SIGKILL)),
        truncated,
        function: resolved.name,
        instructions: tracer.instructions,
        accesses: tracer.accesses,
        invocations: tracer.invocations,
        skipped_invocations: tracer.skipped,
        exec: tracer.exec,
        blocks_translated: tracer.rewriter.blocks,
        approximated: tracer.rewriter.approximations,
        trace_bytes,
        elapsed: tracer.started.elapsed(),
    })
}

/// The target process while the recording is set up: killed and reaped if
/// recording fails before it is handed to the main loop.
struct Target(Tid);

impl Target {
    fn release(&mut self) {
        self.0 = 0;
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: plain kill(2) of our own child.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
            while let Ok((_, Stop::Signal { .. })) = sys::wait(self.0) {}
        }
    }
}

/// Runs a just-started target until one of its threads reaches `address`
/// (breakpoint removed, registers rewound, the thread left stopped).
/// Returns that thread, or `None` if the process ended first. New threads
/// and forked children are let go on; signals are delivered.
fn run_to(pid: Tid, address: u64) -> Result<Option<Tid>, InstrumentError> {
    let bp = Breakpoint::insert(pid, address)?;
    sys::resume(pid, 0).map_err(ptrace_err("starting the target"))?;
    loop {
        let (tid, stop) = sys::wait(-1).map_err(ptrace_err("waiting for the target"))?;
        match stop {
            Stop::Exited(_) | Stop::Killed(_) if tid == pid => return Ok(None),
            Stop::Exited(_) | Stop::Killed(_) => {}
            Stop::Signal { signo: libc::SIGTRAP, event: 0 } => {
                let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
                if regs.rip.wrapping_sub(1) == address {
                    bp.remove(tid)?;
                    regs.rip = address;
                    sys::set_regs(tid, &regs).map_err(ptrace_err("rewinding to the entry"))?;
                    return Ok(Some(tid));
                }
                let _ = sys::resume(tid, libc::SIGTRAP);
            }
            Stop::Signal { signo, event: 0 } if signo != libc::SIGSTOP => {
                let _ = sys::resume(tid, signo);
            }
            Stop::Signal { event, .. } => {
                if (event == libc::PTRACE_EVENT_FORK || event == libc::PTRACE_EVENT_VFORK)
                    && let Ok(child) = sys::event_msg(tid)
                {
                    let child = child as Tid;
                    let _ = sys::wait(child);
                    if event == libc::PTRACE_EVENT_FORK {
                        let _ = bp.remove(child);
                    }
                    let _ = sys::detach(child);
                }
                let _ = sys::resume(tid, 0);
            }
        }
    }
}

/// Reads the module map of `pid` with every module's symbols.
fn load_modules(pid: Tid) -> Result<Vec<LoadedModule>, InstrumentError> {
    let modules = maps::read_maps(pid).map_err(ptrace_err("reading the target's memory map"))?;
    let paths = SymbolPaths::default();
    Ok(modules
        .into_iter()
        .filter_map(|mut module| {
            // A module that cannot be read (deleted, special) has no
            // functions to trace or name.
            let symbols = ElfSymbols::load(Path::new(&module.path), &paths).ok()?;
            module.build_id = symbols.placement.build_id.clone();
            let bias = symbols.load_bias(&module);
            Some(LoadedModule { module, symbols, bias })
        })
        .collect())
}

/// Finds the executable the way `execvp` would.
pub(crate) fn resolve_program(program: &Path) -> Result<PathBuf, InstrumentError> {
    let not_found = || InstrumentError::Spawn {
        program: program.display().to_string(),
        cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file (or not in PATH)"),
    };
    if program.as_os_str().is_empty() {
        return Err(not_found());
    }
    if program.components().count() > 1 || program.is_absolute() {
        return if program.is_file() {
            Ok(program.canonicalize().unwrap_or_else(|_| program.to_path_buf()))
        } else if program.is_dir() {
            Err(InstrumentError::Spawn {
                program: program.display().to_string(),
                cause: std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
            })
        } else {
            Err(not_found())
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file()).ok_or_else(not_found)
}

fn spawn(exe: &Path, options: &RecordOptions) -> Result<Tid, InstrumentError> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0(&options.program).args(&options.args);
    // Resolve every PLT slot at load time: otherwise the first call through
    // each slot single-steps the dynamic linker's resolver, which is slow and
    // shows up as reads that are not the program's.
    cmd.env("LD_BIND_NOW", "1");
    // SAFETY: the closure only makes the PTRACE_TRACEME system call, which is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(sys::traceme);
    }
    let child =
        cmd.spawn().map_err(|e| InstrumentError::Spawn { program: options.program.display().to_string(), cause: e })?;
    let pid = child.id() as Tid;
    // The child stops with SIGTRAP right after exec.
    match sys::wait(pid).map_err(ptrace_err("waiting for the target to start"))? {
        (_, Stop::Signal { signo: libc::SIGTRAP, .. }) => {}
        (_, other) => {
            return Err(InstrumentError::Ptrace {
                what: "starting the target",
                cause: std::io::Error::other(format!("unexpected first stop {other:?}")),
            });
        }
    }
    // Forks are traced only to be released at once, without our breakpoints
    // (a child that inherited an int3 would die of SIGTRAP).
    let opts = libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_EXITKILL
        | libc::PTRACE_O_TRACEEXEC;
    sys::set_options(pid, opts).map_err(ptrace_err("setting ptrace options"))?;
    Ok(pid)
}

impl Tracer {
    /// The main loop while no thread is being stepped: every thread runs
    /// natively until one hits the entry breakpoint.
    fn run(&mut self) -> Result<(Option<TargetExit>, Option<TruncationReason>), InstrumentError> {
        let mut truncated = None;
        loop {
            if interrupt::requested() && truncated.is_none() {
                truncated = Some(TruncationReason::Interrupted);
                // SAFETY: plain kill(2) of our own child.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
            }
            // Records taken at the last stops are converted while every
            // thread runs, before the next stop can need them written.
            self.convert_taken()?;
            let (tid, stop) = match self.next_stop() {
                Ok(s) => s,
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                    self.end_all_translated()?;
                    return Ok((None, truncated));
                }
                Err(e) => return Err(ptrace_err("waiting for the target")(e)),
            };
            if self.is_translated(tid) {
                if let Some(end) = self.translated_stop(tid, stop)?
                    && let Some(exit) = self.invocation_ended(tid, end)?
                {
                    return Ok((Some(exit), truncated));
                }
                continue;
            }
            if let Some(exit) = self.on_process_exit(tid, stop) {
                self.end_all_translated()?;
                return Ok((Some(exit), truncated));
            }
            if let Stop::Signal { event: libc::PTRACE_EVENT_EXEC, .. } = stop {
                self.end_all_translated()?;
                return Ok((Some(self.exec_untraced(tid)?), truncated));
            }
            if let Some(regs) = self.entry_hit(tid, stop)? {
                if self.max_invocations.is_some_and(|m| self.invocations >= m) {
                    // Enough traced: the breakpoint goes for good.
                    if let Some(bp) = self.entry_bp.take() {
                        bp.remove(tid)?;
                    }
                    let _ = sys::resume(tid, 0);
                    continue;
                }
                if !self.displaced_tried {
                    self.prepare_displaced(tid)?;
                }
                if self.backend == Backend::Rewrite {
                    // The thread runs translated code from here on, beside
                    // any others that do; its stops come to this loop.
                    self.start_rewrite(tid, regs)?;
                    continue;
                }
                let end = self.trace_invocation(tid, regs)?;
                if let Some(exit) = self.invocation_ended(tid, end)? {
                    return Ok((Some(exit), truncated));
                }
                continue;
            }
            if self.rearm_pending && matches!(stop, Stop::Signal { .. }) {
                self.update_entry(tid)?;
            }
            self.on_background_stop(tid, stop, None)?;
        }
    }

    /// The next stop of any thread. While threads run translated code, every
    /// stop already there is taken at once and handled in turn: the kernel
    /// reports the newest tracee's stops first, and a thread whose buffer is
    /// full must not wait behind newer threads that keep filling theirs.
    fn next_stop(&mut self) -> std::io::Result<(Tid, Stop)> {
        if let Some(stop) = self.queued_stops.pop_front() {
            return Ok(stop);
        }
        let first = sys::wait(-1)?;
        if self.backend == Backend::Rewrite {
            while let Some(stop) = sys::poll_any() {
                self.queued_stops.push_back(stop);
            }
        }
        Ok(first)
    }

    /// After an invocation on `tid` ended `end`: the target's exit if the
    /// recording is over.
    fn invocation_ended(&mut self, tid: Tid, end: InvocationEnd) -> Result<Option<TargetExit>, InstrumentError> {
        // Many short invocations must not each cost a chunk, but a recorder
        // killed between invocations should lose little: flush unless that
        // happened moments ago.
        if self.last_flush.elapsed() >= INVOCATION_FLUSH_GAP {
            self.writer.flush()?;
            self.last_flush = Instant::now();
        }
        match end {
            InvocationEnd::Returned => {
                self.update_entry(tid)?;
                let _ = sys::resume(tid, 0);
            }
            // Memory can only be patched through a stopped thread: update
            // the breakpoint at the next stop.
            InvocationEnd::ThreadGone => self.rearm_pending = true,
            InvocationEnd::ProcessGone(exit) => {
                self.end_all_translated()?;
                return Ok(Some(exit));
            }
            InvocationEnd::Interrupted => {}
            InvocationEnd::Exec => {
                self.end_all_translated()?;
                return Ok(Some(self.exec_untraced(self.pid)?));
            }
        }
        Ok(None)
    }

    /// Starts a translated invocation on `tid`; a thread that vanished
    /// meanwhile is noted as the ptrace backend notes it.
    fn start_rewrite(&mut self, tid: Tid, regs: Regs) -> Result<(), InstrumentError> {
        match self.start_translated(tid, regs) {
            Err(InstrumentError::Ptrace { cause, .. }) if cause.raw_os_error() == Some(libc::ESRCH) => {
                let reason =
                    if interrupt::requested() { TruncationReason::Interrupted } else { TruncationReason::TargetKilled };
                Ok(self.writer.push(tid as u32, &Event::Truncated { reason })?)
            }
            other => other,
        }
    }

    /// If `stop` is `tid` running into the entry breakpoint: the registers,
    /// rewound to the entry.
    fn entry_hit(&mut self, tid: Tid, stop: Stop) -> Result<Option<Regs>, InstrumentError> {
        let (Stop::Signal { signo: libc::SIGTRAP, event: 0 }, Some(bp)) = (stop, self.entry_bp) else {
            return Ok(None);
        };
        let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
        if regs.rip.wrapping_sub(1) != bp.addr || !raised_by_int3(tid) {
            return Ok(None);
        }
        regs.rip = bp.addr;
        sys::set_regs(tid, &regs).map_err(ptrace_err("rewinding to the entry"))?;
        Ok(Some(regs))
    }

    /// Makes the entry breakpoint match what is still to be traced (through
    /// stopped thread `tid`): armed unless --max-invocations was reached.
    fn update_entry(&mut self, tid: Tid) -> Result<(), InstrumentError> {
        self.rearm_pending = false;
        let wanted = self.max_invocations.is_none_or(|m| self.invocations < m);
        match (self.entry_bp, wanted) {
            (None, true) => self.entry_bp = Some(Breakpoint::insert(tid, self.entry)?),
            (Some(bp), false) => {
                bp.remove(tid)?;
                self.entry_bp = None;
            }
            _ => {}
        }
        Ok(())
    }

    /// The process exec'd a new program: record it on thread `tid`, stop
    /// tracing and wait for the new program to end.
    fn exec_untraced(&mut self, tid: Tid) -> Result<TargetExit, InstrumentError> {
        let path = std::fs::read_link(format!("/proc/{}/exe", self.pid))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".to_string());
        let id = self.writer.add_string(&path);
        self.writer.push(tid as u32, &Event::Exec { path: id })?;
        self.writer.flush()?;
        self.exec = Some(path);
        // The new image has none of our breakpoints; it runs untraced. It
        // is still our child, so its exit status can be waited for.
        self.entry_bp = None;
        let _ = sys::detach(self.pid);
        loop {
            match sys::wait(self.pid) {
                Ok((_, Stop::Exited(c))) => return Ok(TargetExit::Code(c)),
                Ok((_, Stop::Killed(s))) => return Ok(TargetExit::Signal(s)),
                Ok((t, Stop::Signal { signo, .. })) => {
                    // Stops reported before the detach took effect.
                    let _ = sys::detach(t);
                    let _ = signo;
                }
                Err(e) => return Err(ptrace_err("waiting for the exec'd program")(e)),
            }
        }
    }

    /// Another thread (`tid`, stopped by the entry breakpoint) entered the
    /// function while one is traced: count it, and let it run the
    /// instruction under the breakpoint. Returns a signal to deliver as it
    /// resumes (0: none).
    fn skip_invocation(&mut self, tid: Tid, bp: Breakpoint) -> Result<i32, InstrumentError> {
        *self.skipped.entry(tid as u32).or_default() += 1;
        self.writer.push(tid as u32, &Event::InvocationSkipped { pc: bp.addr })?;
        match self.displaced {
            Some(d) => {
                let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
                regs.rip = bp.addr;
                sys::set_regs(tid, &regs).map_err(ptrace_err("rewinding a thread"))?;
                d.step(tid)
            }
            None => self.step_over(tid, bp).map(|()| 0),
        }
    }

    /// Copies the entry instruction to a scratch page near it (through
    /// stopped thread `tid`), so no thread ever needs the breakpoint lifted.
    /// Without it (no page could be mapped, or the instruction cannot move)
    /// the breakpoint is lifted for a step, a window in which other threads
    /// can pass uncounted.
    fn prepare_displaced(&mut self, tid: Tid) -> Result<(), InstrumentError> {
        self.displaced_tried = true;
        let Some(bp) = self.entry_bp else { return Ok(()) };
        let mut code = [0u8; MAX_INSTRUCTION_LEN];
        let n = sys::read_memory(self.pid, bp.addr, &mut code)
            .or_else(|_| read_memory_by_words(tid, bp.addr, &mut code))
            .map_err(ptrace_err("reading the target's code"))?;
        code[0] = bp.original;
        if let Some(page) = inject::map_page_near(self.pid, tid, bp.addr)? {
            self.displaced = Displaced::prepare(tid, bp.addr, &code[..n], page)?;
        }
        Ok(())
    }

    /// Runs the original instruction at breakpoint `bp` in stopped thread
    /// `tid` (whose pc is rewound to it), then puts the breakpoint back.
    fn step_over(&mut self, tid: Tid, bp: Breakpoint) -> Result<(), InstrumentError> {
        let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
        regs.rip = bp.addr;
        sys::set_regs(tid, &regs).map_err(ptrace_err("rewinding a thread"))?;
        bp.remove(tid)?;
        sys::single_step(tid, 0).map_err(ptrace_err("stepping over a breakpoint"))?;
        let _ = sys::wait(tid);
        Breakpoint::insert(tid, bp.addr)?;
        Ok(())
    }

    /// Records the end of a thread; returns how the process ended when the
    /// leader (the process) is gone.
    fn on_process_exit(&mut self, tid: Tid, stop: Stop) -> Option<TargetExit> {
        let exit = match stop {
            Stop::Exited(code) => TargetExit::Code(code),
            Stop::Killed(sig) => TargetExit::Signal(sig),
            Stop::Signal { .. } => return None,
        };
        let status = match exit {
            TargetExit::Code(c) => c,
            TargetExit::Signal(s) => -s,
        };
        let _ = self.writer.push(tid as u32, &Event::ThreadExit { status });
        self.known_threads.remove(&tid);
        self.forget_thread(tid);
        (tid == self.pid).then_some(exit)
    }

    /// Handles a stop of a thread that is not being stepped: new threads,
    /// signals to pass on, stale breakpoint hits.
    fn on_background_stop(&mut self, tid: Tid, stop: Stop, temp_bp: Option<Breakpoint>) -> Result<(), InstrumentError> {
        let Stop::Signal { signo, event } = stop else {
            return Ok(());
        };
        let resume = |signo| {
            // A thread can vanish between its stop and our resume (the
            // process is exiting): not an error worth stopping for.
            let _ = sys::resume(tid, signo);
        };
        if event == libc::PTRACE_EVENT_CLONE {
            self.note_clone(tid);
            resume(0);
            return Ok(());
        }
        if event == libc::PTRACE_EVENT_FORK || event == libc::PTRACE_EVENT_VFORK {
            self.note_fork(tid, event == libc::PTRACE_EVENT_VFORK, temp_bp);
            resume(0);
            return Ok(());
        }
        if event == libc::PTRACE_EVENT_EXEC {
            // Another thread's exec ended every other thread, the traced one
            // included: the main loop takes over (see `wait_for`).
            self.exec_by = Some(tid);
            return Ok(());
        }
        if event != 0 {
            resume(0);
            return Ok(());
        }
        if signo == libc::SIGSTOP
            && !self.known_threads.contains(&tid)
            && sys::thread_group(tid).is_some_and(|group| group != self.pid)
        {
            // A forked child stopping before its parent's fork event.
            self.release_child(tid, false, temp_bp);
            return Ok(());
        }
        if let Some(n) = self.pending_ticks.get_mut(&tid).filter(|n| signo == libc::SIGSTOP && **n > 0) {
            // A late tick of the rewrite backend's ticker.
            *n -= 1;
            resume(0);
            return Ok(());
        }
        if signo == libc::SIGSTOP && (self.awaiting_initial_stop.remove(&tid) || self.known_threads.insert(tid)) {
            // The initial stop of a new thread, not a signal to deliver. One
            // the traced thread made from translated code runs natively.
            self.leave_cache(tid);
            resume(0);
            return Ok(());
        }
        if signo == libc::SIGTRAP && raised_by_int3(tid) {
            let mut regs = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
            let hit = regs.rip.wrapping_sub(1);
            if let Some(bp) = temp_bp.filter(|bp| bp.addr == hit) {
                // Another thread ran into the breakpoint set for the stepped
                // thread's allocator return: step it over the original byte.
                self.step_over(tid, bp)?;
                resume(0);
                return Ok(());
            }
            if let Some(bp) = self.entry_bp.filter(|bp| bp.addr == hit) {
                // Another thread entered the function while one is traced.
                let signo = self.skip_invocation(tid, bp)?;
                resume(signo);
                return Ok(());
            }
            if hit == self.entry && self.entry_bp.is_none() {
                // A hit that raced with the removal of the entry breakpoint:
                // the byte is back, so run the instruction for real.
                regs.rip = hit;
                sys::set_regs(tid, &regs).map_err(ptrace_err("rewinding a thread"))?;
                resume(0);
                return Ok(());
            }
        }
        resume(signo);
        Ok(())
    }

    /// Records the thread that `parent` just created. Its first stop (a
    /// SIGSTOP) may come before or after this event.
    fn note_clone(&mut self, parent: Tid) {
        if let Ok(child) = sys::event_msg(parent) {
            let child = child as Tid;
            let _ = self.writer.push(child as u32, &Event::ThreadStart { parent: parent as u32 });
            if self.known_threads.insert(child) {
                self.awaiting_initial_stop.insert(child);
            }
        }
    }

    /// A fork or vfork of `parent`: release the child.
    fn note_fork(&mut self, parent: Tid, vfork: bool, temp_bp: Option<Breakpoint>) {
        let Ok(child) = sys::event_msg(parent) else { return };
        let child = child as Tid;
        if self.released_children.remove(&child) {
            return; // Its first stop came first and it is already free.
        }
        // Its first stop is next for it (taken already, or to wait for).
        if let Some(at) = self.queued_stops.iter().position(|&(t, _)| t == child) {
            self.queued_stops.remove(at);
            self.release_child(child, vfork, temp_bp);
        } else if sys::wait(child).is_ok() {
            self.release_child(child, vfork, temp_bp);
        }
    }

    /// Removes our breakpoints from a forked child's memory and detaches it.
    /// A vfork child shares its parent's memory, which must keep them.
    fn release_child(&mut self, child: Tid, vfork: bool, temp_bp: Option<Breakpoint>) {
        self.leave_cache(child);
        if !vfork {
            for bp in [self.entry_bp, temp_bp].into_iter().flatten() {
                let _ = bp.remove(child);
            }
        }
        let _ = sys::detach(child);
        self.released_children.insert(child);
    }

    /// Waits until the stepped thread `tid` stops, handling other threads'
    /// stops in between.
    #[inline]
    fn wait_for(&mut self, tid: Tid, temp_bp: Option<Breakpoint>) -> Result<Stop, InstrumentError> {
        loop {
            let (t, stop) = sys::wait(-1).map_err(ptrace_err("waiting for the traced thread"))?;
            if t == tid {
                return Ok(stop);
            }
            if let Some(exit) = self.on_process_exit(t, stop) {
                // The leader is reported last, once every thread is gone.
                return Ok(match exit {
                    TargetExit::Code(c) => Stop::Exited(c),
                    TargetExit::Signal(s) => Stop::Killed(s),
                });
            }
            self.on_background_stop(t, stop, temp_bp)?;
            if self.exec_by.is_some() {
                // The waited-for thread is gone with the old program.
                return Ok(Stop::Signal { signo: libc::SIGTRAP, event: libc::PTRACE_EVENT_EXEC });
            }
        }
    }

    /// Loads the module map and the allocator and function entries of every
    /// module. Done at the first entry hit, when the libraries are mapped.
    fn load_modules(&mut self) -> Result<(), InstrumentError> {
        self.modules_loaded = true;
        let mut modules = maps::read_maps(self.pid).map_err(ptrace_err("reading the target's memory map"))?;
        let paths = SymbolPaths::default();
        let mut entries = Vec::new();
        modules.retain_mut(|module| {
            entries.clear();
            let scanned = scan_functions(Path::new(&module.path), &paths, |address, raw| {
                entries.push((address, allocator_kind(raw)));
            });
            // A module that cannot be read (deleted, special) has no
            // functions to trace or name.
            let Ok(placement) = scanned else { return false };
            let bias = placement.load_bias(module);
            module.build_id = placement.build_id;
            self.function_starts.reserve(entries.len());
            for &(address, kind) in &entries {
                let addr = address.wrapping_add(bias);
                self.function_starts.insert(addr);
                if let Some(kind) = kind {
                    // Aliases of one function (glibc's aligned_alloc is
                    // memalign) cannot be told apart by address: the
                    // earlier kind in AllocKind's order names them.
                    let e = self.allocator_entries.entry(addr).or_insert(kind);
                    if (kind as u8) < (*e as u8) {
                        *e = kind;
                    }
                }
            }
            true
        });
        self.writer.add_modules(&modules);
        self.module_paths.extend(modules.into_iter().map(|m| m.path));
        // Without the watch, the data mappings are read at the first
        // invocation only. Its first look takes the size before the read,
        // so that a change after the read is seen.
        self.map_watch = maps::MapWatch::open(self.pid).ok();
        if let Some(watch) = self.map_watch.as_mut() {
            watch.changed();
        }
        self.record_mappings()
    }

    /// What an invocation's start does before its first event: the module
    /// map at the first one; at later ones, the data mappings again when
    /// the target's mapped size changed since (the heap grew, a block was
    /// mapped). Reading the map at every start made a recording of a
    /// function called 31,250 times 40% slower.
    pub(super) fn at_invocation_start(&mut self) -> Result<(), InstrumentError> {
        if !self.modules_loaded {
            return self.load_modules();
        }
        if self.map_watch.as_mut().is_some_and(|w| w.changed()) {
            self.record_mappings()?;
        }
        Ok(())
    }

    /// Writes the target's mappings of no module (the heap, stacks,
    /// anonymous memory, data files) that differ from every one written
    /// before: what the traced function reads of blocks allocated before it
    /// began (the recorder saw no allocation of them) has no other name.
    /// The heap grows between invocations, so each new extent is written
    /// once.
    fn record_mappings(&mut self) -> Result<(), InstrumentError> {
        let modules = &self.module_paths;
        let mappings = maps::read_data_mappings(self.pid, |path| modules.contains(path))
            .map_err(ptrace_err("reading the target's memory map"))?;
        let new: Vec<_> =
            mappings.into_iter().filter(|m| self.mappings_written.insert((m.start, m.end, m.name.clone()))).collect();
        self.writer.add_mappings(&new);
        Ok(())
    }

    /// The decoded instruction at `pc`, decoding and defining its sites the
    /// first time.
    fn instruction(&mut self, tid: Tid, pc: u64) -> Result<Option<&DecodedInstruction>, InstrumentError> {
        if !self.code.contains_key(&pc) {
            let mut bytes = [0u8; MAX_INSTRUCTION_LEN];
            let n = match self.code_window.as_mut() {
                Some(window) => window.read(self.pid, tid, pc, &mut bytes),
                None => read_code(self.pid, tid, pc, &mut bytes),
            }
            .map_err(ptrace_err("reading the target's code"))?;
            // The armed entry breakpoint is ours, not the program's code.
            if let Some(bp) = self.entry_bp
                && let Some(b) = bp.addr.checked_sub(pc).and_then(|i| bytes[..n].get_mut(i as usize))
            {
                *b = bp.original;
            }
            let Some(mut insn) = decode::decode(&bytes[..n], pc, &mut self.factory) else {
                return Ok(None);
            };
            for op in insn.operands.iter_mut() {
                op.site = self.writer.add_site(Site {
                    pc,
                    len: insn.len,
                    kind: op.kind,
                    size: op.size,
                    count: op.elements,
                    implied: Implied::NONE,
                });
            }
            self.code.insert(pc, insn);
        }
        Ok(self.code.get(&pc))
    }

    /// Single-steps `tid` from the function entry (`regs`) until it returns
    /// to its caller. A thread that vanishes mid-step (killed from outside,
    /// or by our interrupt handler) ends the invocation, not the recording.
    fn trace_invocation(&mut self, tid: Tid, regs: Regs) -> Result<InvocationEnd, InstrumentError> {
        match self.step_invocation(tid, regs) {
            Err(InstrumentError::Ptrace { cause, .. }) if cause.raw_os_error() == Some(libc::ESRCH) => {
                let reason =
                    if interrupt::requested() { TruncationReason::Interrupted } else { TruncationReason::TargetKilled };
                let _ = self.writer.push(tid as u32, &Event::Truncated { reason });
                loop {
                    match sys::wait(tid) {
                        Ok((_, stop @ (Stop::Exited(_) | Stop::Killed(_)))) => {
                            return Ok(match self.on_process_exit(tid, stop) {
                                Some(exit) => InvocationEnd::ProcessGone(exit),
                                None => InvocationEnd::ThreadGone,
                            });
                        }
                        Ok(_) => continue,
                        Err(_) => return Ok(InvocationEnd::ThreadGone),
                    }
                }
            }
            other => other,
        }
    }

    fn step_invocation(&mut self, tid: Tid, mut regs: Regs) -> Result<InvocationEnd, InstrumentError> {
        self.at_invocation_start()?;
        let index = self.invocations;
        self.invocations += 1;
        let entry_sp = regs.rsp;
        let thread = tid as u32;
        self.writer.push(thread, &Event::InvocationStart { index, pc: regs.rip, sp: entry_sp })?;
        let mut rep: Option<RepInProgress> = None;
        let mut signal_to_deliver = 0;
        let mut steps_since_clock = 0u64;
        loop {
            if interrupt::requested() {
                self.writer.push(thread, &Event::Truncated { reason: TruncationReason::Interrupted })?;
                return Ok(InvocationEnd::Interrupted);
            }
            if signal_to_deliver == 0
                && let Some(&kind) = self.allocator_entries.get(&regs.rip)
            {
                match self.run_allocator(tid, kind, &regs)? {
                    Ok(after) => regs = after,
                    Err(end) => return Ok(end),
                }
                if regs.rsp > entry_sp {
                    // A tail call from the traced function into the allocator.
                    self.writer.push(thread, &Event::InvocationEnd { index })?;
                    return Ok(InvocationEnd::Returned);
                }
                continue;
            }
            // Work out this instruction's accesses from the registers before it runs.
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            let mut syscall = None;
            let mut exits = false;
            let (flow, branch_target) = match self.instruction(tid, regs.rip)? {
                Some(insn) => {
                    if insn.rep_string {
                        if rep.as_ref().is_none_or(|r| r.pc != regs.rip) {
                            rep = Some(RepInProgress {
                                pc: regs.rip,
                                start_addrs: insn
                                    .operands
                                    .iter()
                                    .map(|op| decode::effective_address(&op.expr, &regs).unwrap_or(0))
                                    .collect(),
                                count: regs.rcx,
                                direction_down: regs.eflags & event_rules::DIRECTION_FLAG != 0,
                            });
                        }
                    } else {
                        for op in &insn.operands {
                            if op.elements == 1 {
                                if let Some(addr) = decode::effective_address(&op.expr, &regs) {
                                    scratch.push((op.site, addr));
                                }
                            } else {
                                push_vsib_elements(tid, op, &regs, &mut scratch);
                            }
                        }
                    }
                    if insn.syscall && (regs.rax == SYS_MMAP || regs.rax == SYS_MUNMAP) {
                        syscall = Some((regs.rax, regs.rdi, regs.rsi));
                    }
                    exits = insn.syscall && (regs.rax == SYS_EXIT || regs.rax == SYS_EXIT_GROUP);
                    (insn.flow, insn.branch_target)
                }
                None => (FlowControl::Next, None),
            };
            let delivered = signal_to_deliver;
            // At the armed entry breakpoint (the invocation's first step, or
            // recursion) the thread runs the displaced copy of the entry
            // instruction; failing that, the breakpoint is lifted for a step.
            let at_entry = self.entry_bp.filter(|bp| bp.addr == regs.rip && delivered == 0);
            let displaced = at_entry.and(self.displaced);
            let lifted = if displaced.is_none() { at_entry } else { None };
            if let Some(d) = displaced {
                let mut r = regs;
                d.enter(&mut r);
                sys::set_regs(tid, &r).map_err(ptrace_err("entering the scratch page"))?;
            }
            if let Some(bp) = lifted {
                bp.remove(tid)?;
            }
            sys::single_step(tid, delivered).map_err(ptrace_err("single-stepping"))?;
            signal_to_deliver = 0;
            let stop = self.wait_for(tid, None)?;
            if let (Some(bp), Stop::Signal { event: 0, .. }) = (lifted, stop) {
                Breakpoint::insert(tid, bp.addr)?;
            } else if lifted.is_some() {
                // No thread to patch through: re-armed at the next stop.
                self.entry_bp = None;
                self.rearm_pending = true;
            }
            if let (Some(d), Stop::Signal { .. }) = (displaced, stop) {
                let mut r = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
                d.finish(tid, &mut r)?;
            }
            match stop {
                Stop::Signal { signo: libc::SIGTRAP, event: 0 } if is_step_trap(tid) => {}
                Stop::Exited(_) | Stop::Killed(_) => {
                    self.scratch = scratch;
                    // An exit system call ran, and ended the thread: the
                    // step never came back to say so (as cachegrind, and
                    // the rewrite backend, count it).
                    if exits && delivered == 0 {
                        self.instructions += 1;
                        self.unflushed_steps += 1;
                    }
                    // Counted before the thread's end, as the rewrite
                    // backend orders them.
                    self.flush_steps_for(thread)?;
                    if let Some(exit) = self.on_process_exit(tid, stop) {
                        return Ok(InvocationEnd::ProcessGone(exit));
                    }
                    return Ok(InvocationEnd::ThreadGone);
                }
                Stop::Signal { event: libc::PTRACE_EVENT_EXEC, .. } => {
                    self.scratch = scratch;
                    return Ok(InvocationEnd::Exec);
                }
                // A SIGTRAP of the program's own (int3, raise, kill) is a
                // signal like any other: recorded and delivered.
                Stop::Signal { signo, event: 0 } => {
                    let addr = fault_address(tid, signo);
                    // The instructions before it, counted first, as the
                    // rewrite backend orders them.
                    self.flush_steps_for(thread)?;
                    self.writer.push(thread, &Event::Signal { signo, pc: regs.rip, addr })?;
                    signal_to_deliver = event_rules::signal_to_pass_on(tid, signo);
                }
                // The traced thread itself created a thread (its clone
                // system call stops here before returning).
                Stop::Signal { event: libc::PTRACE_EVENT_CLONE, .. } => self.note_clone(tid),
                Stop::Signal { event: e @ (libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK), .. } => {
                    self.note_fork(tid, e == libc::PTRACE_EVENT_VFORK, None)
                }
                Stop::Signal { .. } => {}
            }
            let after = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
            // An instruction ran iff the pc moved (a faulting one did not);
            // a step that delivered a signal only entered the handler.
            if delivered == 0 && after.rip != regs.rip {
                self.instructions += 1;
                self.unflushed_steps += 1;
                self.accesses += scratch.len() as u64;
                for &(site, addr) in &scratch {
                    self.writer.push(thread, &Event::Access { site, addr })?;
                }
                self.emit_flow(thread, regs.rip, flow, branch_target, &after)?;
                if let Some((nr, a, len)) = syscall {
                    self.emit_syscall(thread, regs.rip, nr, a, len, after.rax)?;
                }
            } else if delivered == 0 && rep.is_some() && signal_to_deliver == 0 {
                // One more iteration of a rep-string instruction.
                self.instructions += 1;
                self.unflushed_steps += 1;
            }
            if let Some(r) = rep.take_if(|r| after.rip != r.pc) {
                self.emit_rep(thread, &r, after.rcx)?;
            }
            self.scratch = scratch;
            if after.rsp > entry_sp {
                self.writer.push(thread, &Event::InvocationEnd { index })?;
                self.flush_steps_for(thread)?;
                return Ok(InvocationEnd::Returned);
            }
            regs = after;
            steps_since_clock += 1;
            if steps_since_clock >= CLOCK_CHECK_STEPS {
                steps_since_clock = 0;
                self.periodic(thread)?;
            }
        }
    }

    fn emit_flow(
        &mut self,
        thread: u32,
        pc: u64,
        flow: FlowControl,
        branch_target: Option<u64>,
        after: &Regs,
    ) -> Result<(), InstrumentError> {
        let event = match flow {
            FlowControl::Call | FlowControl::IndirectCall => {
                self.last_callsite = pc;
                Event::Call { callsite: pc, target: after.rip, sp: after.rsp }
            }
            FlowControl::Return => Event::Return { sp: after.rsp },
            _ if event_rules::is_tail_call(flow, branch_target, after.rip, &self.function_starts) => {
                Event::TailCall { callsite: pc, target: after.rip, sp: after.rsp }
            }
            _ => return Ok(()),
        };
        self.writer.push(thread, &event)?;
        Ok(())
    }

    fn emit_syscall(
        &mut self,
        thread: u32,
        pc: u64,
        nr: u64,
        addr: u64,
        len: u64,
        ret: u64,
    ) -> Result<(), InstrumentError> {
        let Some(alloc) = event_rules::syscall_allocation(nr, addr, len, ret, pc) else {
            return Ok(());
        };
        self.writer.push(thread, &Event::Alloc(alloc))?;
        Ok(())
    }

    fn emit_rep(&mut self, thread: u32, rep: &RepInProgress, rcx_after: u64) -> Result<(), InstrumentError> {
        let Some(insn) = self.code.get(&rep.pc) else {
            return Ok(());
        };
        let ops: Vec<(u32, u32)> = insn.operands.iter().map(|o| (o.site, o.size)).collect();
        for ((site, size), &start) in ops.into_iter().zip(&rep.start_addrs) {
            let Some((low, bytes)) = event_rules::rep_range(start, rep.count, rcx_after, size, rep.direction_down)
            else {
                return Ok(());
            };
            self.accesses += 1;
            self.writer.push(thread, &Event::AccessSized { site, addr: low, size: bytes })?;
        }
        Ok(())
    }

    /// Runs an allocator call natively: breakpoint on the return address,
    /// continue, record arguments and result. Returns the registers after
    /// the return, or how the invocation ended if the target died meanwhile.
    fn run_allocator(
        &mut self,
        tid: Tid,
        kind: AllocKind,
        regs: &Regs,
    ) -> Result<Result<Regs, InvocationEnd>, InstrumentError> {
        let return_addr = sys::peek(tid, regs.rsp).map_err(ptrace_err("reading the return address"))?;
        let bp = Breakpoint::insert(tid, return_addr)?;
        sys::resume(tid, 0).map_err(ptrace_err("running the allocator"))?;
        let after = loop {
            let stop = self.wait_for(tid, Some(bp))?;
            match stop {
                Stop::Exited(_) | Stop::Killed(_) => {
                    return Ok(Err(match self.on_process_exit(tid, stop) {
                        Some(exit) => InvocationEnd::ProcessGone(exit),
                        None => InvocationEnd::ThreadGone,
                    }));
                }
                Stop::Signal { signo: libc::SIGTRAP, event: 0 } => {
                    let mut r = sys::get_regs(tid).map_err(ptrace_err("reading registers"))?;
                    if r.rip.wrapping_sub(1) == return_addr {
                        bp.remove(tid)?;
                        r.rip = return_addr;
                        sys::set_regs(tid, &r).map_err(ptrace_err("rewinding after the allocator"))?;
                        if r.rsp == regs.rsp.wrapping_add(8) {
                            break r;
                        }
                        // The same return address reached by a deeper frame
                        // (the allocator re-entering its caller): step it over.
                        sys::single_step(tid, 0).map_err(ptrace_err("stepping over a breakpoint"))?;
                        let _ = self.wait_for(tid, None)?;
                        Breakpoint::insert(tid, return_addr)?;
                        sys::resume(tid, 0).map_err(ptrace_err("running the allocator"))?;
                    } else if let Some(entry) =
                        self.entry_bp.filter(|e| e.addr == r.rip.wrapping_sub(1) && raised_by_int3(tid))
                    {
                        // The allocator called the traced function (a hook):
                        // that call runs untraced.
                        let signo = self.skip_invocation(tid, entry)?;
                        sys::resume(tid, signo).map_err(ptrace_err("running the allocator"))?;
                    } else {
                        sys::resume(tid, libc::SIGTRAP).map_err(ptrace_err("running the allocator"))?;
                    }
                }
                Stop::Signal { event: libc::PTRACE_EVENT_EXEC, .. } => return Ok(Err(InvocationEnd::Exec)),
                Stop::Signal { event: libc::PTRACE_EVENT_CLONE, .. } => {
                    self.note_clone(tid);
                    sys::resume(tid, 0).map_err(ptrace_err("running the allocator"))?;
                }
                Stop::Signal { signo, event } => {
                    let deliver = if event == 0 { signo } else { 0 };
                    sys::resume(tid, deliver).map_err(ptrace_err("running the allocator"))?;
                }
            }
        };
        let callsite = if self.last_callsite != 0 { self.last_callsite } else { return_addr };
        let alloc = event_rules::allocator_call(kind, [regs.rdi, regs.rsi, regs.rdx], after.rax, callsite, |p| {
            sys::peek(tid, p).ok()
        });
        let thread = tid as u32;
        self.writer.push(thread, &Event::Alloc(alloc))?;
        self.writer.push(thread, &Event::Return { sp: after.rsp })?;
        Ok(Ok(after))
    }

    /// Once a second: write buffered events and report progress.
    fn periodic(&mut self, thread: u32) -> Result<(), InstrumentError> {
        if self.last_flush.elapsed() < FLUSH_EVERY {
            return Ok(());
        }
        self.flush_and_report(thread)
    }

    /// Writes buffered events and reports progress.
    fn flush_and_report(&mut self, thread: u32) -> Result<(), InstrumentError> {
        self.flush_steps_for(thread)?;
        self.writer.flush()?;
        self.last_flush = Instant::now();
        if let Some(progress) = self.progress.as_mut() {
            progress(&Progress {
                instructions: self.instructions,
                accesses: self.accesses,
                invocations: self.invocations,
                elapsed: self.started.elapsed(),
            });
        }
        Ok(())
    }

    fn flush_steps_for(&mut self, thread: u32) -> Result<(), InstrumentError> {
        if self.unflushed_steps > 0 {
            self.writer.push(thread, &Event::Stepped { count: self.unflushed_steps })?;
            self.unflushed_steps = 0;
        }
        Ok(())
    }

    fn flush_steps(&mut self) -> Result<(), InstrumentError> {
        self.flush_steps_for(self.pid as u32)
    }
}

/// Whether the SIGTRAP `tid` stopped with is the trap of a single step
/// (ours), not one the program raised.
fn is_step_trap(tid: Tid) -> bool {
    match sys::sig_info(tid) {
        Ok(info) => matches!(info.si_code, TRAP_TRACE | TRAP_BRKPT | TRAP_NOTIFY),
        // No information: the overwhelmingly likely case.
        Err(_) => true,
    }
}

/// Whether `signo` is one an instruction raises by faulting.
fn is_fault(signo: i32) -> bool {
    matches!(signo, libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL)
}

/// The faulting address of the fault `tid` stopped with (`si_addr`), 0 for
/// other signals.
fn fault_address(tid: Tid, signo: i32) -> u64 {
    if !is_fault(signo) {
        return 0;
    }
    // SAFETY: si_addr is valid for these signals.
    sys::sig_info(tid).map(|i| unsafe { i.si_addr() } as u64).unwrap_or(0)
}

/// Whether the SIGTRAP `tid` stopped with came from an `int3` (a breakpoint
/// of ours, or the program's own int3; callers check the address).
fn raised_by_int3(tid: Tid) -> bool {
    sys::sig_info(tid).is_ok_and(|info| info.si_code == SI_KERNEL)
}

/// The allocator entry point a symbol name stands for. glibc's internal
/// aliases (`__libc_malloc`) share the address, so the public names suffice.
fn allocator_kind(name: &str) -> Option<AllocKind> {
    Some(match name {
        "malloc" => AllocKind::Malloc,
        "calloc" => AllocKind::Calloc,
        "realloc" => AllocKind::Realloc,
        "free" => AllocKind::Free,
        "posix_memalign" => AllocKind::PosixMemalign,
        "aligned_alloc" => AllocKind::AlignedAlloc,
        "memalign" => AllocKind::Memalign,
        _ => return None,
    })
}

/// Reads the target's code at `addr`: in one system call, or word by word
/// where `process_vm_readv` is not permitted.
fn read_code(pid: Tid, tid: Tid, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    sys::read_memory(pid, addr, buf).or_else(|_| read_memory_by_words(tid, addr, buf))
}

/// The target's code read ahead: a block's instructions decoded from one
/// read instead of one system call each (a translation decodes ~7).
pub(crate) struct CodeWindow {
    start: u64,
    len: usize,
    bytes: [u8; CodeWindow::BYTES],
}

impl CodeWindow {
    const BYTES: usize = 256;

    /// An empty window.
    pub(crate) fn new() -> Self {
        CodeWindow { start: 0, len: 0, bytes: [0; Self::BYTES] }
    }

    /// Copies the code at `addr` into `buf` as [`read_code`] would (fewer
    /// bytes at the end of a mapping), reading ahead when the window does
    /// not hold it.
    fn read(&mut self, pid: Tid, tid: Tid, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let held = addr.checked_sub(self.start).map(|o| o as usize).filter(|&o| o < self.len);
        // A window shorter than asked ended at the end of a mapping: what
        // it holds is all there is.
        let offset = match held {
            Some(o) if o + buf.len() <= self.len || self.len < Self::BYTES => o,
            _ => {
                self.len = read_code(pid, tid, addr, &mut self.bytes)?;
                self.start = addr;
                0
            }
        };
        let n = buf.len().min(self.len - offset);
        buf[..n].copy_from_slice(&self.bytes[offset..offset + n]);
        if n == 0 { Err(std::io::Error::from_raw_os_error(libc::EFAULT)) } else { Ok(n) }
    }
}

/// Fallback code reader for when `process_vm_readv` is not permitted.
fn read_memory_by_words(tid: Tid, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let Ok(word) = sys::peek(tid, addr + n as u64) else {
            break;
        };
        let take = (buf.len() - n).min(8);
        buf[n..n + take].copy_from_slice(&word.to_le_bytes()[..take]);
        n += take;
    }
    if n == 0 { Err(std::io::Error::from_raw_os_error(libc::EFAULT)) } else { Ok(n) }
}

/// Addresses of every element of a gather/scatter. The index vector lives in
/// an XMM/YMM register: read it from the extended state.
fn push_vsib_elements(tid: Tid, op: &decode::MemoryOperand, regs: &Regs, out: &mut Vec<(u32, u64)>) {
    let Some(vectors) = crate::vector::read_vector_registers(tid) else {
        return;
    };
    for i in 0..usize::from(op.elements) {
        let addr = op.expr.virtual_address(i, |reg, elem, elem_size| {
            if reg.is_segment_register() {
                decode::segment_base(regs, reg)
            } else if reg.is_vector_register() {
                vectors.element(reg, elem, elem_size)
            } else {
                decode::gpr_value(regs, reg)
            }
        });
        if let Some(addr) = addr {
            out.push((op.site, addr));
        }
    }
}

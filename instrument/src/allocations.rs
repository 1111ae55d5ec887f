//! Whole-program allocation recording (`record --allocations`): the
//! program runs natively with the allocation agent preloaded
//! ([`trace_rt::agent`]); every allocator call of every thread lands in the
//! agent's log, which linetrace turns into a trace of `Alloc` events on
//! its own core while the program runs, up to the program's end, however
//! it ended.
//!
//! Why an agent and not ptrace: a ptrace stop costs microseconds, twice
//! per call (entry and return), and an allocation-heavy program makes
//! millions of calls; the agent's cost is a few stores per call.
//!
//! What the trace holds: the malloc family, C++ operator new/delete
//! (recorded as malloc and free, at the caller of new), and the program's
//! own mmap/munmap/mremap calls (mremap as munmap + mmap). The allocator's
//! internal mappings (its arenas, large blocks) are not calls the program
//! makes and are not recorded. Static programs cannot preload a library:
//! they are refused with a message.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use trace_rt::agent::{
    ALLOC_AGENT, AgentKind, AgentLogStream, AgentRecord, CLOCK_ENV, HOOKS_ENV, LOG_ENV, MAPS_ENV, MAX_STACK, STACK_ENV,
};
use trace_rt::format::{
    AllocKind, Allocation, CustomAllocation, CustomOp, Event, Metadata, TargetExit, TraceWriter, Trailer,
    TruncationReason,
};

use crate::InstrumentError;

/// What to record.
pub struct AllocationOptions {
    /// The program, as a path or a name looked up in `PATH`.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Trace file to write.
    pub output: PathBuf,
    /// Callers to record above each call's calling instruction (0 to 32).
    pub stack: usize,
    /// Custom allocator functions of the program to record too.
    pub alloc_fns: Vec<crate::alloc_hooks::AllocFnSpec>,
    /// Called about once a second while the program runs, with the calls
    /// recorded so far and the time since it started.
    pub progress: Option<Box<dyn FnMut(u64, Duration)>>,
}

/// The outcome of an allocation recording.
#[derive(Clone, Debug)]
pub struct AllocationSummary {
    /// How the program ended.
    pub exit: TargetExit,
    /// Set if the recording was cut short (interrupted).
    pub truncated: Option<TruncationReason>,
    /// Allocator calls recorded.
    pub events: u64,
    /// Moves of the program break recorded.
    pub breaks: u64,
    /// Threads that made them.
    pub threads: usize,
    /// Calls the agent could not record (its log was full).
    pub dropped: u64,
    /// Calls cut by a crash in the middle of their record.
    pub missing: u64,
    /// Size of the trace file.
    pub trace_bytes: u64,
    /// Wall-clock time of the program's run.
    pub run_time: Duration,
    /// How the recorded stacks were unwound.
    pub unwinding: trace_rt::agent::Unwinding,
    /// `--alloc-fn` functions the agent could not patch (their names).
    pub unhooked: Vec<String>,
    /// Calls of `--alloc-fn` functions not recorded (nested too deep).
    pub too_deep: u64,
}

/// A temporary file removed when dropped (the agent's log is sparse and
/// claims 64 GiB of address space: it must not outlive the recording).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Where the agent's log goes: memory (tmpfs) when it has room, as page
/// faults on a disk file's shared mapping cost several times more; the
/// temporary directory otherwise (containers often give /dev/shm 64 MiB).
/// The log takes little room while linetrace keeps up (what is read is
/// given back, [`AgentLogStream`]), but a program faster than the
/// conversion piles records up: hence the margin. Either way, a log that
/// fills its file system stops recording (the calls are counted dropped)
/// rather than crash the program.
fn scratch_dir() -> PathBuf {
    const ROOM: u64 = 1 << 30;
    let shm = Path::new("/dev/shm");
    if free_bytes(shm).is_some_and(|free| free >= ROOM) {
        let probe = shm.join(format!("linetrace-{}-probe", std::process::id()));
        let writable = File::create(&probe).is_ok();
        let _ = std::fs::remove_file(&probe);
        if writable {
            return shm.to_path_buf();
        }
    }
    std::env::temp_dir()
}

/// Bytes free for us on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data; all zeroes is a valid value.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a statvfs the call fills in.
    let ok = unsafe { libc::statvfs(path.as_ptr(), &mut stats) } == 0;
    ok.then(|| stats.f_bavail.saturating_mul(stats.f_frsize))
}

fn scratch(kind: &str) -> Result<Scratch, InstrumentError> {
    let path = scratch_dir().join(format!("linetrace-{}-{kind}", std::process::id()));
    File::create(&path).map_err(|cause| InstrumentError::Create { path: path.clone(), cause })?;
    Ok(Scratch(path))
}

/// Runs `options.program` with the allocation agent and writes its trace.
pub fn record_allocations(mut options: AllocationOptions) -> Result<AllocationSummary, InstrumentError> {
    if ALLOC_AGENT.is_empty() {
        return Err(InstrumentError::AgentUnavailable);
    }
    let exe = crate::tracer::resolve_program(&options.program)?;
    if is_static(&exe) {
        return Err(InstrumentError::StaticProgram(exe));
    }
    let hooks = crate::alloc_hooks::plan_hooks(&options.alloc_fns, &exe)?;
    let agent = scratch("alloc-agent.so")?;
    std::fs::write(&agent.0, ALLOC_AGENT).map_err(|cause| InstrumentError::Create { path: agent.0.clone(), cause })?;
    let log = scratch("alloc-log")?;
    let log_file = File::options()
        .read(true)
        .write(true)
        .open(&log.0)
        .map_err(|cause| InstrumentError::Create { path: log.0.clone(), cause })?;
    let mut stream = AgentLogStream::create(&log_file)?;
    drop(log_file);
    let maps = scratch("alloc-maps")?;
    let file = File::create(&options.output)
        .map_err(|cause| InstrumentError::Create { path: options.output.clone(), cause })?;

    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(other) if !other.is_empty() => {
            let mut v = agent.0.clone().into_os_string();
            v.push(":");
            v.push(other);
            v
        }
        _ => agent.0.clone().into_os_string(),
    };
    let mut child = {
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new(&exe);
        command
            .arg0(&options.program)
            .args(&options.args)
            .env("LD_PRELOAD", preload)
            .env(LOG_ENV, &log.0)
            .env(MAPS_ENV, &maps.0)
            .env(STACK_ENV, options.stack.min(MAX_STACK).to_string())
            .env(HOOKS_ENV, crate::alloc_hooks::agent_env(&hooks));
        // The cheaper clock, where the kernel vouches for it.
        if trace_rt::tsc::kernel_clock_is_tsc() {
            command.env(CLOCK_ENV, "tsc");
        } else {
            command.env_remove(CLOCK_ENV);
        }
        command
            .spawn()
            .map_err(|cause| InstrumentError::Spawn { program: options.program.display().to_string(), cause })?
    };
    crate::interrupt::set_target(child.id() as i32);
    let converted = convert_while_running(&mut child, &mut stream, file, &mut options, &exe, &hooks);
    crate::interrupt::set_target(0);
    let (status, run_time, mut writer, threads, breaks) = match converted {
        Ok(c) => c,
        Err(e) => {
            // The program must not outlive a recording that failed.
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let exit = {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(c), _) => TargetExit::Code(c),
            (None, Some(s)) => TargetExit::Signal(s),
            (None, None) => TargetExit::Signal(libc::SIGKILL),
        }
    };
    let truncated = crate::interrupt::requested().then_some(TruncationReason::Interrupted);
    // The modules the program had mapped at its end (or, after a crash, at
    // its start).
    writer.add_modules(&with_build_ids(crate::maps::parse_maps(&std::fs::read_to_string(&maps.0).unwrap_or_default())));
    let out = writer.finish(&Trailer { exit: Some(exit), truncated })?;
    let mut file = out
        .into_inner()
        .map_err(|e| InstrumentError::Create { path: options.output.clone(), cause: e.into_error() })?;
    file.flush().map_err(|cause| InstrumentError::Create { path: options.output.clone(), cause })?;
    Ok(AllocationSummary {
        exit,
        truncated,
        events: stream.delivered() - breaks,
        breaks,
        threads,
        dropped: stream.dropped(),
        missing: stream.missing(),
        unwinding: stream.unwinding(),
        too_deep: stream.hooks_too_deep(),
        unhooked: hooks
            .iter()
            .enumerate()
            .filter(|(i, _)| stream.hooks_installed() & (1 << i) == 0)
            .map(|(_, h)| h.found.clone())
            .collect(),
        trace_bytes: file.metadata().map(|m| m.len()).unwrap_or(0),
        run_time,
    })
}

/// The trace being written from the agent's log.
type Writer = TraceWriter<BufWriter<File>>;

/// Turns the agent's records into trace events while the program runs
/// (on linetrace's own core: the conversion costs about as much as the
/// program's calls), until the program has ended and its last records are
/// read. Returns the program's status, its run time, the writer (to be
/// finished), the number of threads that made calls and the program
/// break's moves.
fn convert_while_running(
    child: &mut std::process::Child,
    stream: &mut AgentLogStream,
    file: File,
    options: &mut AllocationOptions,
    exe: &Path,
    hooks: &[crate::alloc_hooks::Hook],
) -> Result<(std::process::ExitStatus, Duration, Writer, usize, u64), InstrumentError> {
    let started = Instant::now();
    let mut metadata = Metadata::new(trace_rt::format::ALLOCATIONS_BACKEND);
    metadata.argv = std::iter::once(options.program.to_string_lossy().into_owned())
        .chain(options.args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect();
    metadata.executable = exe.to_string_lossy().into_owned();
    metadata.build_id = decoder::symbols::elf::build_id_of(exe).ok().flatten();
    metadata.pid = child.id();
    metadata.start_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), &metadata)?;
    // Compression is most of the conversion's time: the fast level.
    writer.set_compression_level(1);
    let mut converter = RecordConverter {
        hooks: hooks.iter().map(|h| (writer.add_string(&h.found), h.spec.role)).collect(),
        ..RecordConverter::default()
    };
    let mut failure = None;
    let mut deliver = |r: &AgentRecord| {
        if failure.is_none()
            && let Err(e) = converter.convert(r, &mut writer)
        {
            failure = Some(e);
        }
    };
    let mut next_report = Duration::from_secs(1);
    let (status, run_time) = loop {
        let read = stream.poll(false, &mut deliver)?;
        if started.elapsed() >= next_report {
            next_report += Duration::from_secs(1);
            if let Some(progress) = options.progress.as_mut() {
                progress(stream.delivered(), started.elapsed());
            }
        }
        let status =
            child.try_wait().map_err(|cause| InstrumentError::Spawn { program: exe.display().to_string(), cause })?;
        if let Some(status) = status {
            break (status, started.elapsed());
        }
        if read == 0 {
            // Nothing new: the program is between calls. A millisecond is
            // a few thousand calls, which the next poll takes at once.
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    stream.poll(true, &mut deliver)?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok((status, run_time, writer, converter.threads.len(), converter.breaks))
}

/// Turns agent records into trace events.
#[derive(Default)]
struct RecordConverter {
    /// Threads seen (few: a list).
    threads: Vec<u32>,
    /// One string per distinct stack (call paths repeat), by its frames;
    /// a cheap hash: one lookup per call, and SipHash over eight words
    /// showed in profiles.
    stacks: std::collections::HashMap<Vec<u64>, u32, foldhash::fast::RandomState>,
    /// Moves of the program break.
    breaks: u64,
    /// The custom allocator functions, by their index in the agent's
    /// records: name (string id) and role.
    hooks: Vec<(u32, crate::alloc_hooks::AllocFnRole)>,
}

impl RecordConverter {
    /// The string of the record's stack (one per distinct stack), if it
    /// has one.
    fn stack_id(&mut self, r: &AgentRecord, writer: &mut Writer) -> Option<u32> {
        if r.stack.is_empty() {
            return None;
        }
        Some(match self.stacks.get(&r.stack) {
            Some(&id) => id,
            None => {
                let text: Vec<String> = r.stack.iter().map(|a| format!("{a:x}")).collect();
                let id = writer.add_string(&text.join(","));
                self.stacks.insert(r.stack.clone(), id);
                id
            }
        })
    }

    fn convert(&mut self, r: &AgentRecord, writer: &mut Writer) -> Result<(), trace_rt::format::FormatError> {
        if !self.threads.contains(&r.tid) {
            self.threads.push(r.tid);
        }
        if r.kind == AgentKind::Brk {
            self.breaks += 1;
            return writer.push(r.tid, &Event::ProgramBreak { from: r.ptr_in, to: r.ptr_out });
        }
        let op = match r.kind {
            AgentKind::CustomAlloc => Some(CustomOp::Alloc),
            AgentKind::CustomFree => Some(CustomOp::Free),
            AgentKind::CustomReset => Some(CustomOp::Reset),
            _ => None,
        };
        if let Some(op) = op {
            // `align` is the hook's index; one the agent made up is dropped.
            let Some(&(allocator, _)) = self.hooks.get(r.align as usize) else { return Ok(()) };
            let call = CustomAllocation {
                allocator,
                op,
                size: r.size,
                ptr_in: r.ptr_in,
                ptr_out: r.ptr_out,
                callsite: r.callsite,
            };
            let detail = Event::AllocDetail { usable: 0, time_ns: r.time_ns };
            let stack = self.stack_id(r, writer);
            return match stack {
                Some(stack) if op == CustomOp::Alloc && r.ptr_out != 0 => {
                    writer.push_all(r.tid, &[Event::CustomAllocation(call), detail, Event::AllocStack { stack }])
                }
                _ => writer.push_all(r.tid, &[Event::CustomAllocation(call), detail]),
            };
        }
        for event in events_of(r) {
            let has_result = event.ptr_out != 0;
            let detail = Event::AllocDetail { usable: r.usable, time_ns: r.time_ns };
            match self.stack_id(r, writer) {
                Some(stack) if has_result => {
                    writer.push_all(r.tid, &[Event::Alloc(event), detail, Event::AllocStack { stack }])?
                }
                _ => writer.push_all(r.tid, &[Event::Alloc(event), detail])?,
            }
        }
        Ok(())
    }
}

/// The trace events of one agent record: one, or two for mremap (no
/// allocation per record: this runs for every call recorded).
fn events_of(r: &AgentRecord) -> impl Iterator<Item = Allocation> {
    let alloc =
        |kind, size, align, ptr_in, ptr_out| Allocation { kind, size, align, ptr_in, ptr_out, callsite: r.callsite };
    let pair = match r.kind {
        AgentKind::Format(kind) => [Some(alloc(kind, r.size, r.align, r.ptr_in, r.ptr_out)), None],
        // C++17's aligned new carries its alignment, as aligned_alloc does.
        AgentKind::New if r.align != 0 => [Some(alloc(AllocKind::AlignedAlloc, r.size, r.align, 0, r.ptr_out)), None],
        AgentKind::New => [Some(alloc(AllocKind::Malloc, r.size, 0, 0, r.ptr_out)), None],
        AgentKind::Delete => [Some(alloc(AllocKind::Free, 0, 0, r.ptr_in, 0)), None],
        AgentKind::Brk | AgentKind::CustomAlloc | AgentKind::CustomFree | AgentKind::CustomReset => [None, None],
        // `align` holds the old length.
        AgentKind::Mremap => [
            Some(alloc(AllocKind::Munmap, r.align, 0, r.ptr_in, 0)),
            Some(alloc(AllocKind::Mmap, r.size, 0, 0, r.ptr_out)),
        ],
    };
    pair.into_iter().flatten()
}

/// Modules with their build-ids (read from the files now: the program
/// has just run, so they are the files it mapped).
fn with_build_ids(mut modules: Vec<trace_rt::format::Module>) -> Vec<trace_rt::format::Module> {
    for m in &mut modules {
        m.build_id = decoder::symbols::elf::build_id_of(Path::new(&m.path)).ok().flatten();
    }
    modules
}

/// Whether `exe` has no program interpreter (nothing can be preloaded).
fn is_static(exe: &Path) -> bool {
    use object::{Object, ObjectSection};
    let Ok(data) = std::fs::read(exe) else { return false };
    let Ok(file) = object::File::parse(&*data) else { return false };
    file.section_by_name(".interp").is_none_or(|s| s.size() == 0)
}

//! Whole-program allocation recording (`record --allocations`): the
//! program runs natively with the allocation agent preloaded
//! ([`trace_rt::agent`]); every allocator call of every thread lands in the
//! agent's log, which is turned into a trace of `Alloc` events when the
//! program has ended, however it ended.
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

use trace_rt::agent::{ALLOC_AGENT, AgentKind, AgentLog, AgentRecord, LOG_ENV, MAPS_ENV, MAX_STACK, STACK_ENV};
use trace_rt::format::{AllocKind, Allocation, Event, Metadata, TargetExit, TraceWriter, Trailer, TruncationReason};

use crate::InstrumentError;

/// What to record.
pub struct AllocationOptions {
    /// The program, as a path or a name looked up in `PATH`.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Trace file to write.
    pub output: PathBuf,
    /// Callers to record above each call's calling instruction (0 to 32;
    /// unwinding from .eh_frame costs about a microsecond per call).
    pub stack: usize,
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
/// temporary directory otherwise (containers often give /dev/shm 64 MiB,
/// a few hundred thousand calls). Either way, a log that fills its file
/// system stops recording (the calls are counted dropped) rather than
/// crash the program.
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
pub fn record_allocations(options: AllocationOptions) -> Result<AllocationSummary, InstrumentError> {
    if ALLOC_AGENT.is_empty() {
        return Err(InstrumentError::AgentUnavailable);
    }
    let exe = crate::tracer::resolve_program(&options.program)?;
    if is_static(&exe) {
        return Err(InstrumentError::StaticProgram(exe));
    }
    let agent = scratch("alloc-agent.so")?;
    std::fs::write(&agent.0, ALLOC_AGENT).map_err(|cause| InstrumentError::Create { path: agent.0.clone(), cause })?;
    let log = scratch("alloc-log")?;
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
    let started = Instant::now();
    let mut child = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(&exe)
            .arg0(&options.program)
            .args(&options.args)
            .env("LD_PRELOAD", preload)
            .env(LOG_ENV, &log.0)
            .env(MAPS_ENV, &maps.0)
            .env(STACK_ENV, options.stack.min(MAX_STACK).to_string())
            .spawn()
            .map_err(|cause| InstrumentError::Spawn { program: options.program.display().to_string(), cause })?
    };
    crate::interrupt::set_target(child.id() as i32);
    let status =
        child.wait().map_err(|cause| InstrumentError::Spawn { program: options.program.display().to_string(), cause });
    crate::interrupt::set_target(0);
    let run_time = started.elapsed();
    let status = status?;
    let exit = {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(c), _) => TargetExit::Code(c),
            (None, Some(s)) => TargetExit::Signal(s),
            (None, None) => TargetExit::Signal(libc::SIGKILL),
        }
    };
    let truncated = crate::interrupt::requested().then_some(TruncationReason::Interrupted);

    let mut log_file = File::open(&log.0).map_err(|cause| InstrumentError::Create { path: log.0.clone(), cause })?;
    let agent_log = AgentLog::read(&mut log_file)?;
    drop(log_file);
    let modules = crate::maps::parse_maps(&std::fs::read_to_string(&maps.0).unwrap_or_default());

    let mut metadata = Metadata::new("preload-allocations");
    metadata.argv = std::iter::once(options.program.to_string_lossy().into_owned())
        .chain(options.args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect();
    metadata.executable = exe.to_string_lossy().into_owned();
    metadata.build_id = decoder::symbols::elf::build_id_of(&exe).ok().flatten();
    metadata.pid = child.id();
    metadata.start_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), &metadata)?;
    // Compression is most of the conversion's time: the fast level.
    writer.set_compression_level(1);
    writer.add_modules(&with_build_ids(modules));
    let mut threads = std::collections::HashSet::new();
    // One string per distinct stack: call paths repeat.
    let mut stacks: std::collections::HashMap<Vec<u64>, u32> = std::collections::HashMap::new();
    for r in agent_log.records() {
        threads.insert(r.tid);
        for event in events_of(&r) {
            writer.push(r.tid, &Event::Alloc(event))?;
            writer.push(r.tid, &Event::AllocDetail { usable: r.usable, time_ns: r.time_ns })?;
            if event.ptr_out != 0 && !r.stack.is_empty() {
                let stack = match stacks.get(&r.stack) {
                    Some(&id) => id,
                    None => {
                        let text: Vec<String> = r.stack.iter().map(|a| format!("{a:x}")).collect();
                        let id = writer.add_string(&text.join(","));
                        stacks.insert(r.stack.clone(), id);
                        id
                    }
                };
                writer.push(r.tid, &Event::AllocStack { stack })?;
            }
        }
    }
    let out = writer.finish(&Trailer { exit: Some(exit), truncated })?;
    let mut file = out
        .into_inner()
        .map_err(|e| InstrumentError::Create { path: options.output.clone(), cause: e.into_error() })?;
    file.flush().map_err(|cause| InstrumentError::Create { path: options.output.clone(), cause })?;
    Ok(AllocationSummary {
        exit,
        truncated,
        events: agent_log.len() as u64,
        threads: threads.len(),
        dropped: agent_log.dropped,
        missing: agent_log.missing,
        trace_bytes: file.metadata().map(|m| m.len()).unwrap_or(0),
        run_time,
    })
}

/// The trace events of one agent record: one, or two for mremap (no
/// allocation per record: this runs for every call recorded).
fn events_of(r: &AgentRecord) -> impl Iterator<Item = Allocation> {
    let alloc =
        |kind, size, align, ptr_in, ptr_out| Allocation { kind, size, align, ptr_in, ptr_out, callsite: r.callsite };
    let pair = match r.kind {
        AgentKind::Format(kind) => [Some(alloc(kind, r.size, r.align, r.ptr_in, r.ptr_out)), None],
        AgentKind::New => [Some(alloc(AllocKind::Malloc, r.size, 0, 0, r.ptr_out)), None],
        AgentKind::Delete => [Some(alloc(AllocKind::Free, 0, 0, r.ptr_in, 0)), None],
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

//! The rewrite backend (`record --backend rewrite`) against the ptrace
//! backend, event for event; against the native run of the program; and
//! against cachegrind on a run long enough to fill its record buffer.
//!
//! Both recorders run under `setarch -R` (no address randomization), so the
//! two traces of one program carry the same addresses.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;

/// A program of the trials.
enum Example {
    /// `examples/c/NAME.c`, with extra gcc flags.
    C(&'static str, &'static [&'static str]),
    /// `examples/cpp/NAME.cpp`.
    Cpp(&'static str),
    /// A cargo example.
    Rust(&'static str),
}

impl Example {
    fn build(&self) -> PathBuf {
        match *self {
            Example::C(name, flags) => c_example(name, flags),
            Example::Cpp(name) => cpp_example(name),
            Example::Rust(name) => rust_example(name),
        }
    }
}

/// Runs `command` without address-space randomization.
fn no_aslr(program: &Path) -> Command {
    let mut cmd = Command::new("setarch");
    cmd.args(["x86_64", "-R"]).arg(program);
    cmd
}

fn record_with_backend(backend: &str, program: &Path, function: &str, args: &[&str], trace: &Path) -> Output {
    no_aslr(Path::new(env!("CARGO_BIN_EXE_linetrace")))
        .args(["record", "--quiet", "--backend", backend, "-f", function, "-o"])
        .arg(trace)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .expect("setarch runs linetrace (util-linux installed?)")
}

/// The trace's events, without what legitimately differs between two
/// recordings: thread ids, site numbering (sites are numbered in the order
/// each recorder first decodes them), and where instruction counts are
/// flushed.
fn events(trace: &Path) -> Vec<String> {
    dump(trace)
        .into_iter()
        .filter(|l| !l.contains(" stepped "))
        .map(|l| {
            let l = l.split_once(' ').map_or(l.as_str(), |(_, rest)| rest).to_string();
            l.split(' ').filter(|f| !f.starts_with("site=") && !f.starts_with("parent=")).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

/// Disassembly of the instruction at `pc` of `binary` (loaded at the base
/// `setarch -R` gives position-independent executables), for a message.
fn disassembly(binary: &Path, line: &str) -> String {
    let Some(pc) = hex_field(line, "pc").or_else(|| hex_field(line, "callsite")) else {
        return String::new();
    };
    const PIE_BASE: u64 = 0x5555_5555_4000;
    let link = if (PIE_BASE..PIE_BASE + (1 << 30)).contains(&pc) { pc - PIE_BASE } else { pc };
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-M", "intel"])
        .arg(format!("--start-address={link:#x}"))
        .arg(format!("--stop-address={:#x}", link + 16))
        .arg(binary)
        .output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let insns: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_hexdigit()) && l.contains(":\t"))
        .collect();
    match insns.first() {
        Some(i) => format!("\n  instruction: {}", i.trim()),
        None => format!("\n  instruction at {pc:#x} is outside {} (a library)", binary.display()),
    }
}

/// Panics with the first difference of two event lists, in context.
fn assert_same_events(what: &str, binary: &Path, ptrace: &[String], rewrite: &[String]) {
    let first = ptrace.iter().zip(rewrite).position(|(a, b)| a != b);
    let Some(i) = first.or((ptrace.len() != rewrite.len()).then(|| ptrace.len().min(rewrite.len()))) else {
        return;
    };
    let context = |v: &[String]| v[i.saturating_sub(3)..(i + 3).min(v.len())].join("\n    ");
    let (a, b) = (ptrace.get(i).map_or("(end)", String::as_str), rewrite.get(i).map_or("(end)", String::as_str));
    panic!(
        "{what}: event {i} of {} (ptrace) / {} (rewrite) differs\n  ptrace:  {a}{}\n  rewrite: {b}{}\n  ptrace context:\n    {}\n  rewrite context:\n    {}",
        ptrace.len(),
        rewrite.len(),
        disassembly(binary, a),
        disassembly(binary, b),
        context(ptrace),
        context(rewrite)
    );
}

/// Lines of stderr that are the program's, not linetrace's.
/// How many events of `kind` (`signal`, `access`) a trace has; millions
/// of events are counted as `dump` prints them.
fn count_events(trace: &Path, kind: &str) -> usize {
    let mut dumping = linetrace().arg("dump").arg(trace).stdout(Stdio::piped()).spawn().expect("dump runs");
    let events = BufReader::new(dumping.stdout.take().expect("piped"));
    let n = events.lines().map_while(Result::ok).filter(|e| e.split_whitespace().nth(1) == Some(kind)).count();
    assert!(dumping.wait().expect("dump ends").success());
    n
}

fn program_stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).lines().filter(|l| !l.starts_with("linetrace:")).collect::<Vec<_>>().join("\n")
}

/// Every example, traced both ways, gives the same events; and the program
/// behaves as natively (stdout, stderr, exit status). Covers calls and
/// returns through libc (printf, malloc), tail calls, rep-string ranges,
/// AVX2 gathers (per element), fs-relative operands (the stack protector),
/// a SIGSEGV inside the function (records up to the fault), the program's
/// own SIGTRAP with and without a handler (the handler is traced), exec,
/// exit() inside the function (atexit handlers and stdio's flush traced),
/// a C++ exception caught inside and one escaping the function, a Rust
/// panic caught inside it, backtrace() inside it, and a static program.
#[test]
fn rewrite_traces_equal_ptrace_traces_and_programs_run_as_natively() {
    let trials: &[(Example, &str, &[&str])] = &[
        (Example::C("array_sweep", &[]), "work", &[]),
        (Example::C("array_sweep", &["-static"]), "work", &[]),
        (Example::C("recursion", &[]), "main", &[]),
        (Example::C("tree_walk", &[]), "visit", &[]),
        (Example::C("string_ops", &[]), "main", &[]),
        (Example::C("list_vs_array", &[]), "main", &[]),
        (Example::C("matmul", &[]), "main", &[]),
        (Example::C("lookup", &[]), "main", &[]),
        (Example::C("strlen", &[]), "main", &[]),
        (Example::C("cold", &[]), "main", &[]),
        (Example::C("alloc_wrapper", &[]), "main", &[]),
        (Example::C("crash", &[]), "walk", &[]),
        // Faults between a load and a store the rewrite records once.
        (Example::C("crash", &[]), "bump", &["store"]),
        (Example::C("crash", &[]), "bump", &["divide"]),
        (Example::C("sigtrap", &[]), "poke", &["int3", "handle"]),
        (Example::C("sigtrap", &[]), "poke", &["raise"]),
        (Example::C("exec", &[]), "main", &[]),
        (Example::C("exits", &[]), "leave", &["exit"]),
        (Example::C("backtrace", &[]), "work", &[]),
        (Example::Cpp("exceptions"), "work", &[]),
        (Example::Rust("panic_caught"), "panic_caught::work", &[]),
    ];
    for (example, function, args) in trials {
        let bin = example.build();
        let name = format!("{} {function} {}", bin.file_name().and_then(|n| n.to_str()).unwrap_or("?"), args.join(" "));
        let native = no_aslr(&bin).args(*args).output().expect("runs natively");
        let pt_trace = trace_path("identity-ptrace");
        let rw_trace = trace_path("identity-rewrite");
        let pt = record_with_backend("ptrace", &bin, function, args, &pt_trace);
        let rw = record_with_backend("rewrite", &bin, function, args, &rw_trace);
        let native_status = shell_status(&native);
        assert_eq!(shell_status(&rw), native_status, "{name}: exit status, rewrite vs native: {}", stderr_of(&rw));
        assert_eq!(shell_status(&pt), native_status, "{name}: exit status, ptrace vs native");
        assert_eq!(String::from_utf8_lossy(&rw.stdout), String::from_utf8_lossy(&native.stdout), "{name}: stdout");
        assert_eq!(program_stderr(&rw), program_stderr(&native), "{name}: the program's stderr");
        let (a, b) = (events(&pt_trace), events(&rw_trace));
        assert!(a.iter().any(|e| e.starts_with("access")), "{name}: the ptrace trace has accesses");
        assert_same_events(&name, &bin, &a, &b);
    }
}

/// The exit status as a shell reports it (128 + signal for a death by
/// signal), which is what linetrace exits with.
fn shell_status(out: &Output) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    out.status.code().or(out.status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Signals inside the function, fatal (a fault, a raised SIGTRAP) or
/// handled, and an exec: both backends count the same instructions. The
/// rewrite backend counts a block's instructions as a thread enters it, so
/// it takes back those after the point where a thread died, and a block
/// ends at a system call (`rt_sigreturn` and `execve` do not come back to
/// the instructions after them). Before, `crash` at `walk` counted 77
/// against 75, `sigtrap` at `poke` 124 against 118, with a handler 96
/// against 88, `exec` at `launch` 318 against 315. An exit system call
/// inside the function (`exits` at `leave`) ends the thread in the middle
/// of the ptrace backend's step; it counts as an instruction that ran, as
/// cachegrind counts it (the ptrace backend counted one fewer before).
/// (The identity trials leave instruction counts out: where they are
/// flushed differs.)
#[test]
fn signals_and_exec_count_the_instructions_that_ran() {
    // (example, function, arguments, whether the program dies by a signal)
    let trials: &[(&str, &str, &[&str], bool)] = &[
        ("crash", "walk", &[], true),
        ("crash", "main", &[], true),
        ("sigtrap", "poke", &["raise"], true),
        ("sigtrap", "poke", &["int3"], true),
        ("sigtrap", "main", &["raise"], true),
        ("sigtrap", "poke", &["int3", "handle"], false),
        ("sigtrap", "poke", &["raise", "handle"], false),
        ("exec", "launch", &[], false),
        ("exits", "leave", &["exit"], false),
        ("exits", "leave", &["_exit"], false),
    ];
    for &(example, function, args, dies) in trials {
        let bin = c_example(example, &[]);
        let count = |backend: &str| {
            let trace = trace_path(&format!("counts-{backend}"));
            let out = record_with_backend(backend, &bin, function, args, &trace);
            assert_eq!(
                shell_status(&out) > 128,
                dies,
                "{example} {function} {args:?} ({backend}): {}",
                stderr_of(&out)
            );
            let r = report(&trace);
            assert!(r["total"]["reads"].as_u64() > Some(0), "{example} {function}: reads recorded");
            r["total"]["instructions"].as_u64().expect("instructions")
        };
        assert_eq!(count("rewrite"), count("ptrace"), "{example} {function} {args:?}: instructions, rewrite vs ptrace");
    }
}

/// A run of 7M reads fills the 4M-record buffer (the target faults on its
/// guard page, linetrace empties it, the store is restarted): reads, writes
/// and instructions still equal cachegrind's for the function.
#[test]
fn long_runs_empty_the_record_buffer_and_equal_cachegrind() {
    let bin = c_example("matmul", &["-DN=192", "-DNO_INIT"]);
    let oracle = cachegrind(&bin, &[], "matmul_naive");
    assert!(oracle.dr > 5_000_000, "{oracle:?}");
    let trace = trace_path("rewrite-matmul192");
    let out = record_with(&["--backend", "rewrite", "-f", "matmul_naive"], &bin, &[], &trace);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let r = report(&trace);
    assert_eq!(r["total"]["reads"], oracle.dr, "reads vs cachegrind Dr");
    assert_eq!(r["total"]["writes"], oracle.dw, "writes vs cachegrind Dw");
    assert_eq!(r["total"]["instructions"], oracle.ir, "instructions vs cachegrind Ir");
    assert_eq!(r["truncated"], false);
}

/// A program interrupted thousands of times while it runs the function (a
/// 250 us interval timer; SIGALRM ignored, yet every one stops a traced
/// thread, at any instruction): every read is recorded exactly once and
/// every instruction counted once, with both backends. What failed before:
/// the rewrite backend read records twice or lost them (it reset the
/// record cursor of a thread stopped between the instrumentation's load
/// and store of it); its first system call in the target took a pending
/// SIGALRM's stop for its own and the recording failed; the ptrace backend
/// delivered the ignored signal on a step over the entry breakpoint, which
/// ran the `int3` and killed the program with SIGTRAP.
#[test]
fn signals_stopping_the_program_anywhere_lose_and_repeat_no_record() {
    // The ptrace backend steps: a shorter run.
    for (backend, flags) in [("rewrite", &[][..]), ("ptrace", &["-DSTEPS=5000"][..])] {
        let bin = c_example("interrupted", flags);
        let native = Command::new(&bin).output().expect("runs natively");
        let oracle = cachegrind(&bin, &[], "work");
        let trace = trace_path(&format!("{backend}-interrupted"));
        let out = record_with(&["--backend", backend, "-f", "work"], &bin, &[], &trace);
        assert!(out.status.success(), "{backend}: {}", stderr_of(&out));
        assert_eq!(out.stdout, native.stdout, "{backend}: stdout");
        let r = report(&trace);
        assert_eq!(r["total"]["reads"], oracle.dr, "{backend}: reads vs cachegrind Dr");
        assert_eq!(r["total"]["writes"], oracle.dw, "{backend}: writes vs cachegrind Dw");
        assert_eq!(r["total"]["instructions"], oracle.ir, "{backend}: instructions vs cachegrind Ir");
        let signals = count_events(&trace, "signal");
        assert!(signals >= 100, "{backend}: the timer interrupted the function only {signals} times");
    }
}

/// A handler (SA_SIGINFO, reading and writing memory, running translated)
/// interrupts the traced function hundreds of times: the pc in its
/// ucontext is always in the program's code (the original instruction's
/// address, never the code cache's), the function computes what it does
/// natively, the function's own reads equal cachegrind's, and every handler
/// run is recorded whole. Before: 16-19 thousand pcs outside the program's
/// code, and now and then a recording that failed on a record the handler
/// had overwritten (it ran while the interrupted code held its cursor).
#[test]
fn handlers_see_original_pcs_and_leave_the_interrupted_code_intact() {
    let bin = c_example("signal_pc", &[]);
    let native = Command::new(&bin).output().expect("runs natively");
    assert!(String::from_utf8_lossy(&native.stdout).contains("outside the program's code: 0"));
    let oracle = cachegrind_functions(&bin, &[]);
    let trace = trace_path("rewrite-signal-pc");
    let out = record_with(&["--backend", "rewrite", "-f", "work"], &bin, &[], &trace);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&native.stdout));
    let handled: u64 = program_stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("signals in work "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the program says how many signals it handled");
    assert!(handled >= 50, "only {handled} signals");
    // Every signal that interrupted `work` is in the trace, and none else.
    assert_eq!(count_events(&trace, "signal") as u64, handled, "a signal event per interruption of work");
    let r = report_with(&trace, &["--by", "function"]);
    let row = |name: &str| {
        r["by_function"].as_array().and_then(|rows| rows.iter().find(|f| f["key"] == name)).cloned().expect(name)
    };
    let (work, handler) = (row("work"), row("on_alarm"));
    assert_eq!(work["self_reads"], oracle["work"].dr, "work's reads vs cachegrind");
    assert_eq!(work["self_writes"], oracle["work"].dw, "work's writes vs cachegrind");
    let (reads, writes) =
        (handler["self_reads"].as_u64().expect("reads"), handler["self_writes"].as_u64().expect("writes"));
    assert_eq!((reads % handled, writes % handled), (0, 0), "{reads} reads, {writes} writes in {handled} runs");
    // The same reads per run as natively (cachegrind's run count is not
    // known, its reads are a multiple). Writes differ: cachegrind counts a
    // read-modify-write as a read only.
    let per_run = reads / handled;
    assert_eq!(oracle["on_alarm"].dr % per_run, 0, "{per_run} reads a run; cachegrind {:?}", oracle["on_alarm"]);
}

/// Threads calling the function while others run it are traced too, each
/// on its own stream: every call of thread_calls is traced, none skipped
/// (the ptrace backend steps one thread at a time and counts the others'
/// calls), and the program's output is intact (threads created inside the
/// traced call of `threads` run natively).
#[test]
fn calls_on_other_threads_are_traced_with_rewrite() {
    for (example, function) in [("thread_calls", "work"), ("threads", "main")] {
        let bin = c_example(example, &[]);
        let native = Command::new(&bin).output().expect("runs natively");
        let trace = trace_path("rewrite-threads");
        let out = record_with(&["--backend", "rewrite", "-f", function], &bin, &[], &trace);
        assert!(out.status.success(), "{example}: {}", stderr_of(&out));
        assert_eq!(out.stdout, native.stdout, "{example}: stdout");
        let r = report_with(&trace, &["--thread", "all"]);
        let traced = r["total"]["invocations"].as_u64().expect("invocations");
        let skipped = r["skipped_invocations"].as_u64().expect("skipped");
        let expected = if example == "thread_calls" { 12 } else { 1 };
        assert_eq!((traced, skipped), (expected, 0), "{example}: (traced, skipped)");
    }
}

/// Four threads run the traced function at the same time (a barrier, then
/// two calls of millions of reads each, every record buffer filling while
/// the others run): four streams, each with exactly its share of
/// cachegrind's counts for the function, and nothing skipped.
#[test]
fn four_threads_running_the_function_at_once_give_four_exact_streams() {
    let bin = c_example("parallel_work", &[]);
    let native = Command::new(&bin).output().expect("runs natively");
    let oracle = cachegrind(&bin, &[], "work");
    assert!(oracle.dr > 8 * (4 << 20), "each call fills a 4M-record buffer: {oracle:?}");
    let trace = trace_path("rewrite-parallel");
    let out = record_with(&["--backend", "rewrite", "-f", "work"], &bin, &[], &trace);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(out.stdout, native.stdout, "stdout");
    let all = report_with(&trace, &["--thread", "all"]);
    assert_eq!((all["total"]["invocations"].as_u64(), all["skipped_invocations"].as_u64()), (Some(8), Some(0)));
    assert_eq!(all["total"]["reads"], oracle.dr, "reads vs cachegrind Dr");
    assert_eq!(all["total"]["writes"], oracle.dw, "writes vs cachegrind Dw");
    assert_eq!(all["total"]["instructions"], oracle.ir, "instructions vs cachegrind Ir");
    let threads = all["threads"].as_object().expect("threads");
    let callers: Vec<(&String, &serde_json::Value)> =
        threads.iter().filter(|(_, t)| t["invocations"].as_u64() > Some(0)).collect();
    assert_eq!(callers.len(), 4, "{}", all["threads"]);
    for (_, t) in &callers {
        assert_eq!(t["invocations"], 2, "{t}");
        assert_eq!(t["reads"], oracle.dr / 4, "a quarter of the reads: {t}");
        assert_eq!(t["writes"], oracle.dw / 4, "{t}");
        assert_eq!(t["instructions"], oracle.ir / 4, "{t}");
    }
    // By default the columns are one thread's (all four read the same
    // amount: the lowest id), and every thread is listed.
    let one = report(&trace);
    let lowest = callers.iter().map(|(tid, _)| tid.parse::<u64>().expect("tid")).min();
    assert_eq!(one["timeline"].as_u64(), lowest, "{}", one["census"]);
    assert_eq!(one["columns"], oracle.dr / 4);
    assert_eq!(one["total"]["reads"], oracle.dr / 4);
    assert_eq!(one["skipped_invocations"], 0);
    let census = one["census"].as_object().expect("census");
    assert_eq!(census.values().filter(|c| c["reads"] == oracle.dr / 4 && c["invocations"] == 2).count(), 4);
    // Each thread picked by id: its quarter.
    let other = callers.last().expect("4 threads").0;
    let picked = report_with(&trace, &["--thread", other]);
    assert_eq!(picked["timeline"].to_string(), *other);
    assert_eq!(picked["total"]["reads"], oracle.dr / 4);
}

/// The functions of `binary` that hold a `bt`/`bts`/`btr`/`btc` whose bit
/// offset is in a register and whose base is a register (`objdump -d`).
/// Valgrind's VEX runs those through memory below the stack pointer, so
/// cachegrind counts reads (2 per `bts`) the CPU does not make: with
/// `gcc -O1`, 1,000 `bts %rsi,%rax` give 2,000 reads and 1,000 writes in
/// cachegrind, none in linetrace. zstd built with optimisation (`--release`)
/// has them.
fn functions_with_register_bit_tests(binary: &Path) -> std::collections::BTreeSet<String> {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(binary).output().expect("objdump runs");
    let mut found = std::collections::BTreeSet::new();
    let mut function = String::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")).map(|(_, n)| n) {
            function = name.to_string();
            continue;
        }
        let mut words = line.split('\t').nth(1).unwrap_or("").split_whitespace();
        let (op, operands) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let bit_test = ["bt", "bts", "btr", "btc"].iter().any(|b| op.strip_prefix(b).is_some_and(|s| s.len() <= 1));
        let registers = operands.split(',').all(|o| o.starts_with('%')) && operands.contains(',');
        if bit_test && registers {
            found.insert(function.clone());
        }
    }
    found
}

/// The functions of `binary` (`nm -n -C`), by link-time address.
fn functions_by_address(binary: &Path) -> Vec<(u64, String)> {
    let out = Command::new("nm").args(["-n", "-C", "--defined-only"]).arg(binary).output().expect("nm runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            let addr = u64::from_str_radix(addr, 16).ok()?;
            matches!(kind, "t" | "T").then(|| (addr, name.to_string()))
        })
        .collect()
}

/// Third-party C code: zstd's compressor (the C sources the zstd-sys crate
/// builds), traced through `zstd_compress::work` — millions of
/// instructions (tens of millions in a debug build, 3M with `--release`,
/// where zstd-sys compiles zstd with optimisation). Every `ZSTD_`/`HUF_`/`FSE_` function cachegrind saw (the
/// program calls them only inside `work`) has exactly cachegrind's reads in
/// linetrace's per-function table, and no other such function appears.
#[test]
fn zstd_compression_reads_equal_cachegrind_per_function() {
    let bin = rust_example("zstd_compress");
    let third_party = |name: &str| ["ZSTD_", "HUF_", "FSE_"].iter().any(|p| name.starts_with(p));
    // Compiler fragments (`f.cold`, `f.part.0`) count in their function.
    let base = |name: &str| name.split(['.', ' ']).next().unwrap_or(name).to_string();
    let mut oracle: std::collections::BTreeMap<String, u64> = Default::default();
    for (name, counts) in cachegrind_functions(&bin, &[]) {
        if third_party(&name) {
            *oracle.entry(base(&name)).or_default() += counts.dr;
        }
    }
    assert!(oracle.len() >= 20, "cachegrind saw only {} zstd functions", oracle.len());
    let trace = trace_path("rewrite-zstd");
    let out = record_with(&["-f", "zstd_compress::work"], &bin, &[], &trace);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let r = report(&trace);
    assert!(r["total"]["instructions"].as_u64() > Some(2_000_000), "{}", r["total"]);
    let by = linetrace().args(["report", "--json", "--by", "function"]).arg(&trace).output().expect("report");
    let by: serde_json::Value = serde_json::from_slice(&by.stdout).expect("JSON");
    let mut ours: std::collections::BTreeMap<String, u64> = Default::default();
    for row in by["by_function"].as_array().expect("rows") {
        let key = row["key"].as_str().unwrap_or_default();
        if third_party(key) {
            *ours.entry(base(key)).or_default() += row["self_reads"].as_u64().unwrap_or(0);
        }
    }
    // A rep-string instruction is one access over its range here, one per
    // iteration in cachegrind: count the extra iterations in its function.
    let functions = functions_by_address(&bin);
    let events = dump(&trace);
    let start = events.iter().find(|l| l.contains(" invocation-start ")).expect("an invocation");
    let work = functions.iter().find(|(_, name)| name == "zstd_compress::work").expect("work in nm").0;
    let bias = hex_field(start, "pc").expect("pc") - work;
    for l in events.iter().filter(|l| l.contains(" range=1")) {
        let kind = text_field(l, "kind").expect("kind");
        let pc = hex_field(l, "pc").expect("pc").wrapping_sub(bias);
        let at = functions.partition_point(|&(a, _)| a <= pc);
        let Some((_, name)) = at.checked_sub(1).map(|i| &functions[i]) else { continue };
        if (kind == "read" || kind == "modify") && third_party(name) {
            let iterations = dec_field(l, "size").expect("size") / dec_field(l, "elem").expect("elem");
            *ours.entry(base(name)).or_default() += iterations.saturating_sub(1);
        }
    }
    // Where cachegrind counts phantom reads (see the function), linetrace
    // may count fewer, never more; everywhere else, exactly as many.
    let phantom_reads: std::collections::BTreeSet<String> =
        functions_with_register_bit_tests(&bin).iter().map(|f| base(f)).filter(|f| oracle.contains_key(f)).collect();
    assert!(phantom_reads.len() * 10 <= oracle.len(), "too few functions compared exactly: {phantom_reads:?}");
    let mismatched: Vec<String> = oracle
        .iter()
        .filter(|(f, dr)| match ours.get(*f) {
            Some(n) if phantom_reads.contains(*f) => n > dr,
            n => n != Some(dr),
        })
        .map(|(f, dr)| format!("{f}: cachegrind {dr}, linetrace {:?}", ours.get(f)))
        .chain(ours.keys().filter(|f| !oracle.contains_key(*f)).map(|f| format!("{f}: only in linetrace")))
        .collect();
    assert!(
        mismatched.is_empty(),
        "{} of {} functions differ:\n{}",
        mismatched.len(),
        oracle.len(),
        mismatched.join("\n")
    );
}

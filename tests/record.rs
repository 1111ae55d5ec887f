//! End-to-end tests of `linetrace record`, checked against valgrind.

mod common;

use std::time::Duration;

use common::*;

/// Example (a): every read linetrace records in `work` is one cachegrind
/// counts, and so is every instruction.
#[test]
fn array_sweep_reads_equal_cachegrind() {
    let bin = c_example("array_sweep", &[]);
    let oracle = cachegrind(&bin, &[], "work");
    assert!(oracle.dr > 0, "cachegrind saw no reads in work: {oracle:?}");
    let trace = trace_path("array_sweep");
    let out = record(&bin, "work", &[], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&trace);
    assert_eq!(r["total"]["reads"], oracle.dr, "reads vs cachegrind Dr");
    assert_eq!(r["total"]["writes"], oracle.dw, "writes vs cachegrind Dw");
    assert_eq!(r["total"]["instructions"], oracle.ir, "instructions vs cachegrind Ir");
    assert_eq!(r["total"]["invocations"], 1);
    assert_eq!(r["truncated"], false);
}

/// Every leaf function of the examples (no callees, so cachegrind's self
/// counts are the whole extent): reads, writes and instructions equal.
///
/// One difference is by design: linetrace records a rep-string instruction
/// as one access over its whole range, cachegrind counts one access per
/// iteration and one extra instruction for the final `rcx == 0` check. The
/// recorded ranges are converted to cachegrind's way of counting here.
#[test]
fn leaf_functions_equal_cachegrind() {
    let trials = [
        ("list_vs_array", "sum_array"),
        ("list_vs_array", "sum_list"),
        ("matmul", "matmul_naive"),
        ("matmul", "matmul_blocked"),
        ("string_ops", "copy_forward"),
        ("string_ops", "fill_backward"),
        ("crash", "walk"),
        // Recursive: its only callee is itself, so self is everything.
        ("recursion", "fib"),
    ];
    for (example, function) in trials {
        let bin = c_example(example, &[]);
        let args: &[&str] = if example == "crash" { &["1"] } else { &[] };
        let oracle = cachegrind(&bin, args, function);
        let trace = trace_path(function);
        let out = record(&bin, function, args, &trace);
        assert!(out.status.success(), "{function}: {}", String::from_utf8_lossy(&out.stderr));
        let r = report(&trace);
        let (mut reads, mut writes, mut instructions) = (
            r["total"]["reads"].as_u64().expect("reads"),
            r["total"]["writes"].as_u64().expect("writes"),
            r["total"]["instructions"].as_u64().expect("instructions"),
        );
        let mut last_rep_pc = None;
        for l in dump(&trace).iter().filter(|l| l.contains(" range=1")) {
            let per_iteration = dec_field(l, "size").expect("size") / dec_field(l, "elem").expect("elem");
            let extra = per_iteration.saturating_sub(1);
            let kind = text_field(l, "kind").expect("kind");
            if kind == "read" || kind == "modify" {
                reads += extra;
            }
            if kind == "write" || kind == "modify" {
                writes += extra;
            }
            let pc = hex_field(l, "pc");
            if last_rep_pc != pc {
                instructions += 1;
            }
            last_rep_pc = pc;
        }
        assert_eq!((reads, writes, instructions), (oracle.dr, oracle.dw, oracle.ir), "{example} {function}");
    }
}

/// Example (a): the lines touched are exactly the lines of `array`, plus
/// the one stack line the final `ret` reads.
#[test]
fn array_sweep_touches_exactly_the_array_lines() {
    let bin = c_example("array_sweep", &[]);
    let trace = trace_path("array_lines");
    assert!(record(&bin, "work", &[], &trace).status.success());
    let events = dump(&trace);
    let (start, bias) = first_invocation(&events, &bin, "work");
    let array = bias + symbol_address(&bin, "array");
    let entry_sp = hex_field(start, "sp").expect("sp");
    let mut lines = std::collections::BTreeSet::new();
    let mut stack_reads = 0;
    for l in events.iter().filter(|l| l.contains(" access ")) {
        let addr = hex_field(l, "addr").expect("addr");
        let size = dec_field(l, "size").expect("size");
        if addr == entry_sp {
            stack_reads += 1;
            continue;
        }
        assert!(addr >= array && addr + size <= array + 4000, "access outside array: {l}");
        lines.extend(addr / 64..=(addr + size - 1) / 64);
    }
    let expected: std::collections::BTreeSet<u64> = (array / 64..=(array + 3999) / 64).collect();
    assert_eq!(lines, expected);
    assert_eq!(stack_reads, 1, "the ret reads the return address once");
}

/// Example (d): the allocation events are the program's known sequence,
/// with sizes, alignments and pointer pairing.
#[test]
fn alloc_churn_records_the_allocation_sequence() {
    let bin = c_example("alloc_churn", &[]);
    let trace = trace_path("alloc_churn");
    assert!(record(&bin, "churn", &[], &trace).status.success());
    let allocs: Vec<(String, u64, u64, u64, u64)> = dump(&trace)
        .iter()
        .filter(|l| l.contains(" alloc "))
        .map(|l| {
            let kind = text_field(l, "fn").expect("fn").to_string();
            (
                kind,
                dec_field(l, "size").expect("size"),
                dec_field(l, "align").expect("align"),
                hex_field(l, "in").expect("in"),
                hex_field(l, "out").expect("out"),
            )
        })
        .collect();
    let kinds: Vec<(&str, u64, u64)> = allocs.iter().map(|a| (a.0.as_str(), a.1, a.2)).collect();
    assert_eq!(
        kinds,
        vec![
            ("malloc", 24, 0),
            ("malloc", 100, 0),
            ("calloc", 160, 0),
            ("realloc", 200, 0),
            ("free", 0, 0),
            ("malloc", 4000, 0),
            ("posix_memalign", 256, 64),
            ("aligned_alloc", 512, 128),
            ("free", 0, 0),
            ("free", 0, 0),
            ("free", 0, 0),
            ("free", 0, 0),
            ("free", 0, 0),
            ("mmap", 8192, 4096),
            ("munmap", 8192, 0),
        ]
    );
    let out = |i: usize| allocs[i].4;
    assert!((0..8).filter(|&i| allocs[i].0 != "free").all(|i| out(i) != 0), "allocations succeed");
    assert_eq!(allocs[3].3, out(1), "realloc takes the malloc(100) pointer");
    assert_eq!(allocs[4].3, out(0), "first free releases malloc(24)");
    let freed: Vec<u64> = allocs[8..13].iter().map(|a| a.3).collect();
    assert_eq!(allocs[14].3, out(13), "munmap releases the mmap result");
    assert_eq!(freed, vec![out(3), out(2), out(5), out(6), out(7)], "frees pair with their allocations");
    assert_eq!(out(6) % 64, 0, "posix_memalign result aligned");
    assert_eq!(out(7) % 128, 0, "aligned_alloc result aligned");
}

/// The traced program's stdout and exit code are the native run's.
#[test]
fn traced_output_and_exit_code_equal_native() {
    let cases: Vec<(std::path::PathBuf, &str, Vec<&str>)> = vec![
        (c_example("array_sweep", &[]), "work", vec![]),
        (c_example("list_vs_array", &[]), "run", vec![]),
        (c_example("matmul", &[]), "matmul_blocked", vec![]),
        (c_example("alloc_churn", &[]), "churn", vec!["7"]),
        (c_example("threads", &[]), "worker", vec![]),
        (c_example("string_ops", &[]), "copy_forward", vec![]),
        (c_example("crash", &[]), "walk", vec!["1"]),
        // The forked child calls `work` too: it must be released unharmed.
        (c_example("fork", &[]), "work", vec![]),
        (rust_example("array_sweep"), "work", vec![]),
        (rust_example("list_vs_array"), "sum_list", vec![]),
    ];
    for (bin, function, args) in cases {
        let native = std::process::Command::new(&bin).args(&args).output().expect("native run");
        let trace = trace_path("native");
        let traced = record(&bin, function, &args, &trace);
        assert_eq!(
            String::from_utf8_lossy(&traced.stdout),
            String::from_utf8_lossy(&native.stdout),
            "{} stdout",
            bin.display()
        );
        assert_eq!(traced.status.code(), native.status.code(), "{} exit code", bin.display());
        let r = report(&trace);
        assert!(r["total"]["invocations"].as_u64() >= Some(1), "{} traced nothing", bin.display());
        assert!(r["total"]["reads"].as_u64() > Some(0), "{} recorded no reads", bin.display());
    }
}

/// Example (e): threads entering `worker` are traced, callee included (with
/// the default backend every one of them); the program finishes normally.
#[test]
fn threads_trace_one_thread_through_its_callee() {
    let bin = c_example("threads", &[]);
    let trace = trace_path("threads");
    assert!(record(&bin, "worker", &[], &trace).status.success());
    let r = report(&trace);
    let traced: Vec<&serde_json::Value> =
        r["threads"].as_object().expect("threads").values().filter(|t| t["reads"].as_u64() > Some(0)).collect();
    assert!(!traced.is_empty());
    // worker_sum loads 64 ints; with SSE that is 16 loads per invocation.
    let per_invocation =
        r["total"]["bytes_read"].as_u64().expect("bytes") / r["total"]["invocations"].as_u64().expect("n");
    assert!(per_invocation >= 256, "each traced invocation reads its 256-byte slice: {per_invocation}");
    assert!(dump(&trace).iter().any(|l| l.contains(" thread-start ")), "thread creation recorded");

    // Tracing main, which creates the threads while it is being stepped.
    let trace = trace_path("threads-main");
    let out = record(&bin, "main", &[], &trace);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "total=32640\n");
    let starts = dump(&trace).iter().filter(|l| l.contains(" thread-start ")).count();
    assert_eq!(starts, 4, "each pthread_create seen from the stepped thread");
}

/// A SIGSEGV inside the function: the reads before it are kept, the signal
/// is recorded, and linetrace exits like the program did.
#[test]
fn crash_inside_function_keeps_the_trace() {
    let bin = c_example("crash", &[]);
    let trace = trace_path("crash");
    let out = record(&bin, "walk", &[], &trace);
    assert_eq!(out.status.code(), Some(128 + 11), "exit code of a SIGSEGV death");
    let events = dump(&trace);
    let reads = events.iter().filter(|l| l.contains(" access kind=read ")).count();
    assert_eq!(reads, 16, "64 ints in 16-byte loads before the crash");
    let signal = events.iter().find(|l| l.contains(" signal ")).expect("signal recorded");
    assert_eq!(dec_field(signal, "signo"), Some(11));
    assert_eq!(hex_field(signal, "addr"), Some(0), "the fault address is NULL");
    assert_eq!(report(&trace)["exit"]["Signal"], 11);
}

/// Starts `linetrace record` of a run long enough to be interrupted (main of
/// matmul with the naive multiply repeated a million times) and returns once
/// it has written something.
fn start_long_recording(name: &str) -> (std::process::Child, std::path::PathBuf, std::path::PathBuf) {
    // A copy per test, so that tests running at once can tell their
    // targets apart.
    let bin = trace_path(name).with_extension("bin");
    std::fs::copy(c_example("matmul", &[]), &bin).expect("copy the example");
    let trace = trace_path(name);
    let mut child = linetrace()
        .args(["record", "--quiet", "-f", "main", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        // ~3 ms per multiply with the rewrite backend: an hour, never
        // finished before the test interrupts it.
        .arg("1000000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    // Returns once a chunk was flushed, however slow the machine: a fixed
    // sleep raced the recorder's start on a loaded CI machine. Soon after,
    // so the file stays small enough to decode quickly in a debug build.
    let partial = std::path::PathBuf::from(format!("{}.partial", trace.display()));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while partial.metadata().map_or(0, |m| m.len()) < 4096 {
        assert!(std::time::Instant::now() < deadline, "nothing flushed to {} in 120 s", partial.display());
        assert!(child.try_wait().expect("try_wait").is_none(), "the recording ended before it was interrupted");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, trace, bin)
}

/// Whether some process runs `binary` (an orphaned target would).
fn running(binary: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| std::fs::read_link(e.path().join("exe")).is_ok_and(|exe| exe == binary))
}

/// `kill -9` of linetrace mid-run: the file reads as truncated and still
/// counts what was flushed, and the target does not outlive the recorder.
#[test]
fn kill_9_leaves_a_readable_truncated_trace() {
    let (mut child, trace, bin) = start_long_recording("kill9");
    let partial = std::path::PathBuf::from(format!("{}.partial", trace.display()));
    child.kill().expect("kill -9");
    let _ = child.wait();
    // The recorder never finished: the file keeps its temporary name.
    assert!(!trace.exists(), "a killed recording must not look finished");
    let r = report(&partial);
    assert_eq!(r["truncated"], true);
    assert!(r["status"].as_str().expect("status").contains("truncated"));
    assert!(r["total"]["reads"].as_u64() > Some(1000), "flushed reads are counted: {}", r["total"]);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!running(&bin), "PTRACE_O_EXITKILL ends the target with the recorder");
}

/// SIGTERM to linetrace: the target is killed and the trace is finished and
/// marked truncated.
#[test]
fn sigterm_kills_the_target_and_marks_the_trace() {
    let (child, trace, bin) = start_long_recording("sigterm");
    // SAFETY: kill(2) of our own child.
    unsafe { libc_kill(child.id() as i32, 15) };
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(128 + 15), "exit status of death by SIGTERM, not the killed target's");
    assert!(!running(&bin), "the target was killed");
    let r = report(&trace);
    assert_eq!(r["truncated"], true);
    assert!(r["status"].as_str().expect("status").contains("Interrupted"), "{}", r["status"]);
    assert!(r["total"]["reads"].as_u64() > Some(0));
}

/// Ctrl-C (SIGINT): exit code 130, a finished trace marked interrupted.
#[test]
fn sigint_exits_130() {
    let (child, trace, _bin) = start_long_recording("sigint");
    // SAFETY: kill(2) of our own child.
    unsafe { libc_kill(child.id() as i32, 2) };
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130));
    assert!(report(&trace)["status"].as_str().expect("status").contains("Interrupted"));
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Bad input gets one clear line on stderr and a non-zero exit, never a panic.
#[test]
fn bad_input_gives_clear_errors() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let text_file = dir.join("not-elf.sh");
    std::fs::write(&text_file, "#!/bin/sh\necho hi\n").expect("write");
    let stripped = c_example("array_sweep", &["-s"]);
    let sweep = c_example("array_sweep", &[]);
    let trace = trace_path("bad");
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec!["/nonexistent/program".into()], "cannot run /nonexistent/program"),
        (vec![text_file.clone().into()], "is not an ELF file"),
        (vec!["-f".into(), "wrok".into(), "--".into(), sweep.clone().into()], "no function named 'wrok'"),
        (vec!["-f".into(), "work".into(), "--".into(), stripped.clone().into()], "stripped"),
    ];
    for (args, expected) in cases {
        let mut cmd = linetrace();
        cmd.args(["record", "-o"]).arg(&trace);
        if args.len() == 1 {
            cmd.arg("--");
        }
        let out = cmd.args(&args).output().expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(stderr.contains(expected), "{args:?}: stderr {stderr:?} lacks {expected:?}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr:?}");
        assert!(!stderr.contains("panicked"));
    }
    // The closest names are offered for a typo.
    let out =
        linetrace().args(["record", "-f", "wrok", "-o"]).arg(&trace).arg("--").arg(&sweep).output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("closest: work"));
    // A corrupt trace file is an error too.
    let bad_trace = dir.join("corrupt.lntrace");
    std::fs::write(&bad_trace, b"LNTRACE\0\x01\0\0\0\0\0\0\0garbage garbage garbage").expect("write");
    let out = linetrace().arg("report").arg(&bad_trace).output().expect("runs");
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    let out = linetrace().arg("report").arg(&text_file).output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a linetrace trace file"));
}

/// One event per access of a traced function, as (kind, address offset from
/// `symbol`, size), stack accesses left out.
fn accesses_relative_to(bin: &std::path::Path, function: &str, symbol: &str) -> Vec<(String, i64, u64)> {
    let trace = trace_path(function);
    let out = record(bin, function, &[], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events = dump(&trace);
    let (start, bias) = first_invocation(&events, bin, function);
    let base = bias + symbol_address(bin, symbol);
    let sp = hex_field(start, "sp").expect("sp");
    events
        .iter()
        .filter(|l| l.contains(" access "))
        .filter_map(|l| {
            let addr = hex_field(l, "addr")?;
            // Stack accesses (the final ret) are near the entry sp.
            if addr.abs_diff(sp) < 4096 {
                return None;
            }
            let kind = text_field(l, "kind")?.to_string();
            Some((kind, addr.wrapping_sub(base) as i64, dec_field(l, "size")?))
        })
        .collect()
}

/// `rep movsb` is one read and one write over the whole 200 bytes.
#[test]
fn rep_movsb_is_one_access_over_the_range() {
    let bin = c_example("string_ops", &[]);
    let got = accesses_relative_to(&bin, "copy_forward", "dst");
    let src_off = (symbol_address(&bin, "src") - symbol_address(&bin, "dst")) as i64;
    assert_eq!(got, vec![("write".to_string(), 0, 200), ("read".to_string(), src_off, 200)]);
}

/// `std; rep stosq` from &qwords[20] writes qwords[5..=20]: the recorded
/// range starts at its lowest address.
#[test]
fn rep_stosq_backwards_respects_the_direction_flag() {
    let bin = c_example("string_ops", &[]);
    let got = accesses_relative_to(&bin, "fill_backward", "qwords");
    assert_eq!(got, vec![("write".to_string(), 5 * 8, 16 * 8)]);
}

/// An AVX2 gather is one 4-byte read per element, at the indexed addresses.
#[test]
fn gather_reads_every_element() {
    let bin = c_example("string_ops", &[]);
    let got = accesses_relative_to(&bin, "gather", "table");
    let table_reads: Vec<(String, i64, u64)> = got.into_iter().filter(|a| (0..256).contains(&a.1)).collect();
    let expected: Vec<(String, i64, u64)> = (0..8).map(|i| ("read".to_string(), i * 3 * 4, 4)).collect();
    assert_eq!(table_reads, expected);
}

/// Every invocation is traced unless --max-invocations limits it; a
/// function that is never called gives an empty trace and a warning.
#[test]
fn invocations_are_counted_and_limited() {
    let bin = c_example("threads", &[]);
    let trace = trace_path("limit");
    let out = linetrace()
        .args(["record", "--quiet", "--max-invocations", "1", "-f", "worker_sum", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert_eq!(report(&trace)["total"]["invocations"], 1);

    let sweep = c_example("array_sweep", &[]);
    let out = linetrace()
        .args(["record", "-f", "main", "--max-invocations", "0", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&sweep)
        .output()
        .expect("runs");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no invocation traced, as asked"), "{stderr}");
    assert!(!stderr.contains("never called"), "0 was asked for: {stderr}");
    assert_eq!(report(&trace)["total"]["reads"], 0);
}

/// Recursion is one invocation with nested frames; a tail call (`jmp` to a
/// function's entry) is recorded as such; stdin reaches the program.
#[test]
fn recursion_tail_calls_and_stdin() {
    use std::io::Write as _;
    let bin = c_example("recursion", &[]);
    let trace = trace_path("fib");
    let mut child = linetrace()
        .args(["record", "--quiet", "-f", "fib", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(b"12\n").expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fib(12)=144 dispatch=26\n");
    assert_eq!(report(&trace)["total"]["invocations"], 1, "recursive calls stay inside one invocation");
    let model = decoder::model::Model::decode(&trace, &Default::default(), &mut |_| {}).expect("decode");
    let fib_entry = model.call_tree.frames[0].function;
    let nested = model.call_tree.frames.iter().filter(|f| f.function == fib_entry).map(|f| f.depth).max();
    assert!(nested >= Some(3), "fib frames nest: {nested:?}");

    let trace = trace_path("dispatch");
    assert!(record(&bin, "dispatch", &[], &trace).status.success());
    let events = dump(&trace);
    let (_, bias) = first_invocation(&events, &bin, "dispatch");
    let leaf = bias + symbol_address(&bin, "leaf");
    let tail = events.iter().find(|l| l.contains(" tailcall ")).expect("a tail call event");
    assert_eq!(hex_field(tail, "target"), Some(leaf));
    let model = decoder::model::Model::decode(&trace, &Default::default(), &mut |_| {}).expect("decode");
    let depths: Vec<(u64, u32)> = model.call_tree.frames.iter().map(|f| (f.function - bias, f.depth)).collect();
    assert_eq!(depths, vec![(symbol_address(&bin, "dispatch"), 0), (symbol_address(&bin, "leaf"), 1)]);
}

//! Helpers shared by the end-to-end tests: building the example programs,
//! running linetrace, and running valgrind as the oracle.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// The linetrace binary under test.
pub fn linetrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linetrace"))
}

fn scratch_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e");
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A fresh path for a trace file, different on every call: tests run at
/// once in one process, and two of them tracing the same function must not
/// write (and rename) the same file.
pub fn trace_path(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    scratch_dir().join(format!("{name}-{}-{n}.lntrace", std::process::id()))
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Builds `examples/c/NAME.c` with `gcc -O2 -g` (plus `extra` flags) once
/// per test binary and returns the executable.
pub fn c_example(name: &str, extra: &[&str]) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let suffix = extra.join("").replace(['-', '='], "");
    let out = scratch_dir().join(format!("{name}{suffix}-{}", std::process::id()));
    if out.exists() {
        return out;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c").join(format!("{name}.c"));
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-pthread"])
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "gcc failed on {}", src.display());
    out
}

/// Builds `examples/cpp/NAME.cpp` with `g++ -O2 -g` once per test binary.
pub fn cpp_example(name: &str) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch_dir().join(format!("{name}-cpp-{}", std::process::id()));
    if out.exists() {
        return out;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cpp").join(format!("{name}.cpp"));
    let status = Command::new("g++").args(["-O2", "-g"]).arg(&src).arg("-o").arg(&out).status().expect("g++ runs");
    assert!(status.success(), "g++ failed on {}", src.display());
    out
}

/// A cargo example built in the same profile as the tests.
pub fn rust_example(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_linetrace"));
    let path = bin.parent().expect("bin dir").join("examples").join(name);
    assert!(path.exists(), "{} not built (cargo test builds examples)", path.display());
    path
}

/// Runs `linetrace record -f FUNCTION -o TRACE -- PROGRAM ARGS`.
pub fn record(program: &Path, function: &str, args: &[&str], trace: &Path) -> Output {
    record_with(&["-f", function], program, args, trace)
}

/// Runs `linetrace record --quiet FLAGS -o TRACE -- PROGRAM ARGS`.
pub fn record_with(flags: &[&str], program: &Path, args: &[&str], trace: &Path) -> Output {
    linetrace()
        .args(["record", "--quiet"])
        .args(flags)
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .expect("linetrace runs")
}

/// `linetrace report --json` of a trace.
pub fn report(trace: &Path) -> serde_json::Value {
    report_with(trace, &[])
}

/// `linetrace report --json FLAGS TRACE`, parsed.
pub fn report_with(trace: &Path, flags: &[&str]) -> serde_json::Value {
    let out = linetrace().arg("report").arg("--json").args(flags).arg(trace).output().expect("report runs");
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("report prints JSON")
}

/// `linetrace dump` of a trace, one string per event.
pub fn dump(trace: &Path) -> Vec<String> {
    let out = linetrace().arg("dump").arg(trace).output().expect("dump runs");
    assert!(out.status.success(), "dump failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// Counts of one function from cachegrind (self, summed over every file
/// the function has lines in).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CachegrindCounts {
    /// Instructions executed.
    pub ir: u64,
    /// Data reads.
    pub dr: u64,
    /// Data writes.
    pub dw: u64,
    /// D1 misses of reads.
    pub d1mr: u64,
    /// D1 misses of writes.
    pub d1mw: u64,
    /// LL misses of reads.
    pub dlmr: u64,
    /// LL misses of writes.
    pub dlmw: u64,
}

impl CachegrindCounts {
    fn add(&mut self, other: &CachegrindCounts) {
        self.ir += other.ir;
        self.dr += other.dr;
        self.dw += other.dw;
        self.d1mr += other.d1mr;
        self.d1mw += other.d1mw;
        self.dlmr += other.dlmr;
        self.dlmw += other.dlmw;
    }
}

/// Runs the program under `valgrind --tool=cachegrind --cache-sim=yes` and
/// returns the self counts of `function`.
pub fn cachegrind(program: &Path, args: &[&str], function: &str) -> CachegrindCounts {
    cachegrind_with(program, args, &[], function)
}

/// Like [`cachegrind`], with more valgrind options (`--D1=...`).
pub fn cachegrind_with(program: &Path, args: &[&str], options: &[&str], function: &str) -> CachegrindCounts {
    let mut counts = CachegrindCounts::default();
    for c in cachegrind_lines_with(program, args, options, function).values() {
        counts.add(c);
    }
    counts
}

/// Like [`cachegrind`], per source line: (file name without directories,
/// line) -> counts.
pub fn cachegrind_lines(
    program: &Path,
    args: &[&str],
    function: &str,
) -> std::collections::BTreeMap<(String, u32), CachegrindCounts> {
    cachegrind_lines_with(program, args, &[], function)
}

/// Like [`cachegrind_lines`], with more valgrind options.
pub fn cachegrind_lines_with(
    program: &Path,
    args: &[&str],
    options: &[&str],
    function: &str,
) -> std::collections::BTreeMap<(String, u32), CachegrindCounts> {
    let mut lines = std::collections::BTreeMap::new();
    for (f, file, line, counts) in parse_cachegrind(&run_cachegrind(program, args, options)) {
        if f == function {
            lines.entry((file, line)).or_insert_with(CachegrindCounts::default).add(&counts);
        }
    }
    lines
}

/// Cachegrind's self counts of every function of a run, by name.
pub fn cachegrind_functions(program: &Path, args: &[&str]) -> std::collections::BTreeMap<String, CachegrindCounts> {
    let mut functions = std::collections::BTreeMap::new();
    for (f, _, _, counts) in parse_cachegrind(&run_cachegrind(program, args, &[])) {
        functions.entry(f).or_insert_with(CachegrindCounts::default).add(&counts);
    }
    functions
}

/// The (function, file name without directories, line, counts) rows of a
/// cachegrind output file.
fn parse_cachegrind(text: &str) -> Vec<(String, String, u32, CachegrindCounts)> {
    let events: Vec<&str> =
        text.lines().find_map(|l| l.strip_prefix("events:")).expect("events line").split_whitespace().collect();
    let col = |name: &str| events.iter().position(|e| *e == name).expect("event column");
    let (ir, dr, dw) = (col("Ir"), col("Dr"), col("Dw"));
    let (d1mr, d1mw, dlmr, dlmw) = (col("D1mr"), col("D1mw"), col("DLmr"), col("DLmw"));
    let mut rows = Vec::new();
    let mut function = String::new();
    let mut file = String::new();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("fn=") {
            function = f.to_string();
        } else if let Some(f) = line.strip_prefix("fl=").or(line.strip_prefix("fi=")).or(line.strip_prefix("fe=")) {
            // fi/fe switch the file of the following lines (inlined code)
            // and keep the function.
            file = f.rsplit('/').next().unwrap_or(f).to_string();
        } else if line.starts_with(|c: char| c.is_ascii_digit()) {
            let nums: Vec<u64> = line.split_whitespace().map(|n| n.parse().unwrap_or(0)).collect();
            let get = |i: usize| nums.get(i + 1).copied().unwrap_or(0);
            let counts = CachegrindCounts {
                ir: get(ir),
                dr: get(dr),
                dw: get(dw),
                d1mr: get(d1mr),
                d1mw: get(d1mw),
                dlmr: get(dlmr),
                dlmw: get(dlmw),
            };
            rows.push((function.clone(), file.clone(), nums[0] as u32, counts));
        }
    }
    rows
}

/// Runs cachegrind with the cache simulation; returns its output file.
fn run_cachegrind(program: &Path, args: &[&str], options: &[&str]) -> String {
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out_file = scratch_dir().join(format!("cachegrind-{}-{run}.out", std::process::id()));
    let status = Command::new("valgrind")
        .args(["--tool=cachegrind", "--cache-sim=yes", "-q"])
        .args(options)
        .arg(format!("--cachegrind-out-file={}", out_file.display()))
        .arg(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("valgrind is installed (apt-get install valgrind)");
    assert!(status.success(), "cachegrind run failed");
    let text = std::fs::read_to_string(&out_file).expect("cachegrind output");
    let _ = std::fs::remove_file(&out_file);
    text
}

/// Cachegrind's counts of the whole run (its `summary:` line).
pub fn cachegrind_summary(program: &Path, args: &[&str], options: &[&str]) -> CachegrindCounts {
    let text = run_cachegrind(program, args, options);
    let events: Vec<&str> =
        text.lines().find_map(|l| l.strip_prefix("events:")).expect("events line").split_whitespace().collect();
    let values: Vec<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .expect("summary line")
        .split_whitespace()
        .map(|n| n.parse().expect("number"))
        .collect();
    let get = |name: &str| events.iter().position(|e| *e == name).map(|i| values[i]).expect("event");
    CachegrindCounts {
        ir: get("Ir"),
        dr: get("Dr"),
        dw: get("Dw"),
        d1mr: get("D1mr"),
        d1mw: get("D1mw"),
        dlmr: get("DLmr"),
        dlmw: get("DLmw"),
    }
}

/// Address of a symbol in an ELF file (link-time), from `nm`.
pub fn symbol_address(binary: &Path, name: &str) -> u64 {
    let out = Command::new("nm").arg(binary).output().expect("nm runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, _kind, sym) = (f.next()?, f.next()?, f.next()?);
            (sym == name).then(|| u64::from_str_radix(addr, 16).ok()).flatten()
        })
        .unwrap_or_else(|| panic!("symbol {name} not in {}", binary.display()))
}

/// Parses `key=0x...` from a dump line.
pub fn hex_field(line: &str, key: &str) -> Option<u64> {
    let v = line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))?;
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

/// The text of `key=value` in a dump line.
pub fn text_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Parses `key=N` (decimal) from a dump line.
pub fn dec_field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// The first `invocation-start` line of a dump, and the load bias of the
/// (PIE) executable, from where `function` was entered.
pub fn first_invocation<'a>(events: &'a [String], binary: &Path, function: &str) -> (&'a str, u64) {
    let start = events.iter().find(|l| l.contains(" invocation-start ")).expect("an invocation start");
    let bias = hex_field(start, "pc").expect("pc") - symbol_address(binary, function);
    (start, bias)
}

/// What [`run_bounded`] saw.
pub struct Bounded {
    /// Exit code (None: killed, e.g. for running too long).
    pub code: Option<i32>,
    /// Whether it had to be killed for running past the limit.
    pub timed_out: bool,
    /// Peak resident memory in KiB.
    pub max_rss_kib: u64,
    /// Standard error.
    pub stderr: String,
    /// Standard output.
    pub stdout: String,
}

/// Runs `cmd` for at most `limit`, killing it past that, and measures its
/// peak memory (`wait4`'s rusage).
pub fn run_bounded(mut cmd: Command, limit: std::time::Duration) -> Bounded {
    use std::io::Read;
    // Reaped below with wait4, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
    let started = std::time::Instant::now();
    let mut timed_out = false;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: our own child; valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        if started.elapsed() > limit && !timed_out {
            timed_out = true;
            let _ = child.kill();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Bounded {
        code,
        timed_out,
        max_rss_kib: usage.ru_maxrss as u64,
        stderr: err_reader.join().unwrap_or_default(),
        stdout: out_reader.join().unwrap_or_default(),
    }
}

mod pool_flags;
// Not every test crate declares pool.c's allocator.
#[allow(unused_imports)]
pub use pool_flags::POOL_ALLOC_FNS;

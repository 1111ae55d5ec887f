//! `record --allocations` and `report --allocations` on real programs,
//! against valgrind's DHAT as the oracle nobody here wrote.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// DHAT's summary: (total bytes, total blocks, t-gmax bytes, t-gmax
/// blocks, t-end bytes, t-end blocks). libc's and libstdc++'s exit-time
/// cleanup (valgrind frees their pools) is off, as it is outside valgrind.
fn dhat(program: &Path, args: &[&str]) -> [u64; 6] {
    let out = Command::new("valgrind")
        .args(["--tool=dhat", "--run-libc-freeres=no", "--run-cxx-freeres=no", "--dhat-out-file=/dev/null"])
        .arg(program)
        .args(args)
        .output()
        .expect("valgrind runs");
    let text = String::from_utf8_lossy(&out.stderr);
    let numbers = |label: &str| -> (u64, u64) {
        let line = text.lines().find(|l| l.contains(label)).unwrap_or_else(|| panic!("no {label:?} in {text}"));
        let n: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| w.replace(',', "").parse().ok())
            .collect::<Vec<u64>>()
            .into_iter()
            .rev()
            .take(2)
            .collect();
        (n[1], n[0])
    };
    let (tb, tn) = numbers("Total:");
    let (gb, gn) = numbers("At t-gmax:");
    let (eb, en) = numbers("At t-end:");
    [tb, tn, gb, gn, eb, en]
}

fn record_allocations(program: &Path, args: &[&str], trace: &Path) -> std::process::Output {
    record_with(&["--allocations"], program, args, trace)
}

fn heap_report(trace: &Path) -> serde_json::Value {
    let out = linetrace().args(["report", "--allocations", "--json"]).arg(trace).output().expect("report runs");
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")["heap"].clone()
}

fn ours(h: &serde_json::Value) -> [u64; 6] {
    let n = |v: &serde_json::Value| v.as_u64().expect("a number");
    [
        n(&h["bytes"]),
        n(&h["blocks"]),
        n(&h["peak"]["bytes"]),
        n(&h["peak"]["blocks"]),
        n(&h["at_end"]["bytes"]),
        n(&h["at_end"]["blocks"]),
    ]
}

/// Records `program args` and reports its heap, checking that totals, peak
/// and what is left at the end equal DHAT's; returns the report and the
/// trace.
fn heap_equal_to_dhat(program: &Path, args: &[&str], name: &str) -> (serde_json::Value, std::path::PathBuf) {
    let trace = trace_path(name);
    let out = record_allocations(program, args, &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let h = heap_report(&trace);
    assert_eq!(ours(&h), dhat(program, args), "[bytes, blocks, peak bytes, peak blocks, end bytes, end blocks]");
    (h, trace)
}

/// One thread, every glibc size class, reallocs in place and moved, leaks:
/// totals, peak and leaks equal DHAT's exactly.
#[test]
fn whole_program_heap_equals_dhat() {
    let (h, _) = heap_equal_to_dhat(&c_example("heap_mix", &[]), &["5000"], "heap-mix");
    assert!(h["reallocs_in_place"].as_u64() > Some(0) && h["reallocs_moved"].as_u64() > Some(0));
    let classes: Vec<&str> =
        h["size_classes"].as_array().expect("classes").iter().filter_map(|c| c["class"].as_str()).collect();
    assert_eq!(classes.len(), 4, "every class is exercised: {classes:?}");
    let leaks = h["leaks"].as_array().expect("leaks");
    assert!(leaks.iter().any(|l| l["function"] == "churn"), "the leaks are churn's: {leaks:?}");
    assert!(h["waste"].as_u64() > Some(0), "usable sizes were recorded");
}

/// Four threads: every thread's calls are recorded. Block counts equal
/// DHAT's; bytes may differ by thread start-up allocations, which glibc
/// sizes differently under valgrind.
#[test]
fn every_thread_is_recorded() {
    let bin = c_example("heap_mix", &[]);
    let trace = trace_path("heap-mix-threads");
    let out = record_allocations(&bin, &["3000", "4"], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let [bytes, blocks, ..] = ours(&heap_report(&trace));
    let [d_bytes, d_blocks, ..] = dhat(&bin, &["3000", "4"]);
    assert_eq!(blocks, d_blocks);
    assert!(bytes.abs_diff(d_bytes) <= 1024, "bytes {bytes} vs DHAT's {d_bytes}");
    let threads: std::collections::HashSet<String> = dump(&trace)
        .iter()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|t| !t.starts_with('#'))
        .collect();
    assert!(threads.len() >= 4, "the worker threads: {threads:?}");
}

/// The agent's log read as linetrace reads it, under four threads whose
/// chunks go round the free ring: every call number from 0 to the last is
/// handed over exactly once, in order, none missing, and times (read from
/// the TSC, where the kernel's clock is the TSC) never go back.
#[test]
fn recycled_chunks_lose_and_repeat_no_call() {
    // Chunks go round only while the program runs and this reader keeps
    // up, which other tests on both cores decide: 30,000 rounds (30 ms)
    // once saw 1 chunk go round, 200,000 once saw 5. So a run too short
    // to send more than 10 round is run again, twice as long (each run's
    // calls checked all the same).
    let mut rounds = 200_000;
    for attempt in 1..=4 {
        let recycled = read_agent_log_of_heap_mix(rounds);
        if recycled > 10 {
            return;
        }
        eprintln!("attempt {attempt}: {recycled} chunks went round in {rounds} rounds; again, longer");
        rounds *= 2;
    }
    panic!("chunks never went round more than 10 times, up to {} rounds", rounds / 2);
}

/// Runs heap_mix for `rounds` rounds on four threads under the agent,
/// reads its log as it is written and checks every call (see
/// [`recycled_chunks_lose_and_repeat_no_call`]); the chunks that went
/// round.
fn read_agent_log_of_heap_mix(rounds: u32) -> u64 {
    use trace_rt::agent::{ALLOC_AGENT, AgentLogStream, CLOCK_ENV, LOG_ENV, STACK_ENV};
    let bin = c_example("heap_mix", &[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = dir.path().join("agent.so");
    std::fs::write(&agent, ALLOC_AGENT).expect("write the agent");
    let log_dir = if Path::new("/dev/shm").is_dir() { Path::new("/dev/shm") } else { dir.path() };
    let log = tempfile::NamedTempFile::new_in(log_dir).expect("log file");
    let mut stream = AgentLogStream::create(log.as_file()).expect("map the log");
    let tsc = trace_rt::tsc::kernel_clock_is_tsc();
    let mut child = Command::new(&bin)
        .args([rounds.to_string().as_str(), "4"])
        .env("LD_PRELOAD", &agent)
        .env(LOG_ENV, log.path())
        .env(STACK_ENV, "8")
        .env(CLOCK_ENV, if tsc { "tsc" } else { "" })
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("heap_mix runs");
    let (mut seqs, mut times) = (Vec::new(), Vec::new());
    let mut take = |r: &trace_rt::agent::AgentRecord| {
        seqs.push(r.seq);
        times.push(r.time_ns);
    };
    while child.try_wait().expect("wait").is_none() {
        stream.poll(false, &mut take).expect("poll");
    }
    stream.poll(true, &mut take).expect("last poll");
    eprintln!("{} calls, {} chunks went round", seqs.len(), stream.recycled());
    assert!(seqs.len() > 50_000, "{} calls", seqs.len());
    assert!(seqs.iter().enumerate().all(|(i, &s)| s == i as u64), "call numbers 0.. in order, each once");
    assert_eq!(stream.missing(), 0);
    // (clock_gettime's times of different threads may cross their numbers.)
    assert!(!tsc || times.windows(2).all(|w| w[0] <= w[1]), "times never go back");
    stream.recycled()
}

/// A crash loses nothing: the records are the file's pages, not a buffer
/// of the program's.
#[test]
fn a_crash_keeps_every_call_made_before_it() {
    let bin = c_example("heap_mix", &[]);
    let (normal, crashed) = (trace_path("heap-mix-normal"), trace_path("heap-mix-crash"));
    assert!(record_allocations(&bin, &["4000"], &normal).status.success());
    let out = record_allocations(&bin, &["4000", "1", "crash"], &crashed);
    assert_eq!(out.status.code(), Some(128 + 11), "exits as the program died: {out:?}");
    assert_eq!(ours(&heap_report(&crashed)), ours(&heap_report(&normal)));
    // The heap report says how the program ended: what a crash leaves is
    // no leak (it said nothing of it).
    let text = |trace: &Path| {
        let out = linetrace().args(["report", "--allocations"]).arg(trace).output().expect("report runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(text(&crashed).contains("target:     killed by signal 11"), "{}", text(&crashed));
    assert!(text(&normal).contains("target:     exited with code 0"), "{}", text(&normal));
    let json = |trace: &Path| {
        let out = linetrace().args(["report", "--allocations", "--json"]).arg(trace).output().expect("report runs");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")["exit"].clone()
    };
    assert_eq!(json(&crashed), serde_json::json!({ "Signal": 11 }));
}

/// The agent's own unwinder gives, on every call, the stacks glibc's
/// backtrace() gives (LINETRACE_ALLOC_UNWIND_CHECK runs both): a recursion
/// 40 deep, alloca frames (CFA in rbp), a function pointer, a main that
/// realigns its stack (CFA by expression), at -O2 and -O0; C++ with
/// exceptions; Rust; four threads sharing the rule table. And it needs
/// backtrace() for none of them.
#[test]
fn the_agents_unwinder_agrees_with_backtrace() {
    let programs = [
        (c_example("deep_stack", &[]), vec!["40"]),
        (c_example("deep_stack", &["-O0"]), vec!["40"]),
        (cpp_example("exceptions"), vec![]),
        (rust_example("list_vs_array"), vec![]),
        (c_example("heap_mix", &[]), vec!["3000", "4"]),
    ];
    for (bin, args) in programs {
        let trace = trace_path(&format!("unwind-{}", bin.file_name().and_then(|n| n.to_str()).unwrap_or("x")));
        let out = linetrace()
            .env("LINETRACE_ALLOC_UNWIND_CHECK", "1")
            .args(["record", "--quiet", "--allocations", "--alloc-stack", "32", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&bin)
            .args(&args)
            .output()
            .expect("linetrace runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {err}", bin.display());
        // "stacks: F by the agent's unwinder (M of them differ from
        // backtrace()'s), S by backtrace()"
        let line = err.lines().find(|l| l.contains("stacks:")).unwrap_or_else(|| panic!("no count in {err}"));
        let n: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
        let [fast, mismatched, slow] = n[..] else { panic!("three counts in {line}") };
        assert!(fast >= 5, "{}: {line}", bin.display());
        assert_eq!(mismatched, 0, "{}: {line}", bin.display());
        assert_eq!(slow, 0, "{}: {line}", bin.display());
    }
}

/// Every move of the program break is recorded as the kernel made it: the
/// program's brk system calls, as strace shows them (`brk(0x...) = 0x...`),
/// are our moves, one for one, from the break before the first.
#[test]
fn program_break_moves_equal_strace() {
    let bin = c_example("heap_mix", &[]);
    let trace = trace_path("heap-mix-brk");
    let log = trace.with_extension("strace");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=brk,execve", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_linetrace"))
        .args(["record", "--quiet", "--allocations", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .arg("20000")
        .output()
        .expect("strace runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&log).expect("strace's log");
    // The program's process: the one that exec'd it.
    let exec = format!("execve(\"{}\"", bin.display());
    let pid = text.lines().find(|l| l.contains(&exec)).and_then(|l| l.split_whitespace().next()).expect("the exec");
    let result = |l: &str| l.rsplit("= ").next().and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    let calls: Vec<&str> =
        text.lines().filter(|l| l.split_whitespace().next() == Some(pid) && l.contains(" brk(")).collect();
    let first = calls.iter().find(|l| l.contains("brk(NULL)")).and_then(|l| result(l)).expect("brk(NULL)");
    let theirs: Vec<u64> = calls.iter().filter(|l| !l.contains("brk(NULL)")).filter_map(|l| result(l)).collect();
    let ours: Vec<(u64, u64)> = dump(&trace)
        .iter()
        .filter(|l| l.contains("program-break"))
        .map(|l| (hex_field(l, "from").expect("from"), hex_field(l, "to").expect("to")))
        .collect();
    assert!(theirs.len() >= 10, "heap_mix grows and trims its heap: {theirs:x?}");
    assert_eq!(ours.first().map(|m| m.0), Some(first), "the break before the first move");
    assert_eq!(ours.iter().map(|m| m.1).collect::<Vec<_>>(), theirs);
    let report = heap_report(&trace);
    let b = &report["program_break"];
    assert_eq!(b["grows"].as_u64().zip(b["trims"].as_u64()).map(|(g, t)| g + t), Some(theirs.len() as u64));
    assert_eq!(b["peak"].as_u64(), theirs.iter().copied().max());
}

/// Bursts are found and named: alloc_bursts trickles one block every 0.2
/// ms and allocates 20000 blocks in `fill_table` at 150 ms, 8000 in
/// `parse_lines` at 400 ms; the report has exactly those two bursts, in
/// that order, each with (nearly: a thread descheduled for long at a
/// burst's edge may leave a few out) all of its function's blocks.
#[test]
fn bursts_name_the_functions_behind_them() {
    let bin = c_example("alloc_bursts", &[]);
    let trace = trace_path("alloc-bursts");
    let out = record_allocations(&bin, &[], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = heap_report(&trace);
    let bursts = report["bursts"]["bursts"].as_array().expect("bursts").clone();
    assert_eq!(report["bursts"]["clock"], "nanoseconds");
    let top: Vec<(&str, u64)> = bursts
        .iter()
        .map(|b| {
            (b["functions"][0]["function"].as_str().unwrap_or("?"), b["functions"][0]["blocks"].as_u64().unwrap_or(0))
        })
        .collect();
    assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), ["fill_table", "parse_lines"], "{bursts:?}");
    assert!((19_000..=20_000).contains(&top[0].1) && (7_600..=8_000).contains(&top[1].1), "{top:?}");
    let start = |i: usize| bursts[i]["start"].as_u64().expect("start");
    // 150 and 400 ms after the first allocation, give or take a few
    // windows on a busy machine.
    assert!((100_000_000..250_000_000).contains(&start(0)), "{}", start(0));
    assert!((350_000_000..500_000_000).contains(&start(1)), "{}", start(1));
}

/// A custom allocator (`--alloc-fn`): examples/c/pool.c's two pools, at
/// -O0 and -O2 (where the alloc starts with `cmp; ja`, moved as a widened
/// branch, and its callers keep values in registers GCC knows the pool
/// leaves alone): blocks, sizes, releases (free, and resets of one arena
/// that leave the other's blocks live) and peak are the hand-counted
/// ones, the callers are named, the program prints what it prints
/// natively, and malloc's heap still equals DHAT's (the pools' blocks are
/// not malloc's).
#[test]
fn custom_allocators_are_recorded_apart_from_malloc() {
    for opt in ["-O0", "-O2"] {
        let bin = c_example("pool", &[opt]);
        let trace = trace_path(&format!("pool{opt}"));
        let flags: Vec<&str> = ["--allocations"].into_iter().chain(POOL_ALLOC_FNS).collect();
        let out = record_with(&flags, &bin, &[], &trace);
        assert!(out.status.success(), "{opt}: {}", String::from_utf8_lossy(&out.stderr));
        let native = Command::new(&bin).output().expect("runs");
        assert_eq!(out.stdout, native.stdout, "{opt}: the program's output");
        let h = heap_report(&trace);
        let custom = h["custom"].as_array().expect("custom").clone();
        assert_eq!(custom.len(), 1, "{opt}: {custom:?}");
        let c = &custom[0];
        assert_eq!(c["allocator"], "pool_alloc");
        let n = |v: &serde_json::Value| v.as_u64().expect("a number");
        assert_eq!((n(&c["blocks"]), n(&c["bytes"]), n(&c["freed"])), (4000, 100000, 3000), "{opt}");
        assert_eq!((n(&c["peak"]["bytes"]), n(&c["peak"]["blocks"])), (34510, 1501), "{opt}");
        assert_eq!((n(&c["at_end"]["bytes"]), n(&c["at_end"]["blocks"])), (16000, 1000), "{opt}: the labels");
        let sizes: Vec<(u64, u64)> =
            c["sizes"].as_array().expect("sizes").iter().map(|s| (n(&s[0]), n(&s[1]))).collect();
        assert_eq!(sizes, vec![(10, 1000), (16, 1000), (24, 1000), (50, 1000)]);
        if opt == "-O0" {
            let callers: Vec<&str> =
                c["callers"].as_array().expect("callers").iter().filter_map(|f| f["function"].as_str()).collect();
            assert_eq!(callers, ["make_key", "make_label", "make_node", "make_value"]);
        }
        assert_eq!(ours(&h), dhat(&bin, &[]), "{opt}: malloc's heap");
        assert_eq!(h["mappings"].as_u64(), Some(0), "{opt}: the pool's blocks are not mappings");
    }
}

/// `render --allocations --addresses`: a pool's arena drawn alone (the
/// picture's rows are the asked-for addresses, to a row), and a range
/// where no block lies is refused.
#[test]
fn render_draws_an_address_range() {
    let bin = c_example("pool", &["-O2"]);
    let trace = trace_path("pool-render");
    let flags = ["--allocations", "--alloc-fn", "pool_alloc:size=ARG2"];
    assert!(record_with(&flags, &bin, &[], &trace).status.success());
    let model = decoder::model::Model::decode(&trace, &Default::default(), &mut |_| {}).expect("decode");
    let arena = model.allocations.iter().find(|r| r.size == 1 << 20).expect("the arena").address;
    let (lo, hi) = (arena, arena + 0x7000);
    let png = trace.with_extension("png");
    let render = |range: &str| {
        linetrace()
            .args(["render", "--allocations", "--force", "--height", "400", "--addresses", range, "-o"])
            .arg(&png)
            .arg(&trace)
            .output()
            .expect("render runs")
    };
    let out = render(&format!("{lo:#x}..{hi:#x}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let shown = err.split("addresses ").nth(1).expect("the addresses drawn").trim_end_matches([')', '\n']);
    let (a, b) = shown.split_once("..").expect("a range");
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
    let row = (hi - lo) / 370;
    assert!(hex(a).abs_diff(lo) <= row && hex(b).abs_diff(hi) <= row, "{shown} for {lo:#x}..{hi:#x}");
    let out = render("0x10..0x20");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no heap block"));
}

/// `render --allocations --bins`: one view per size class of heap_mix, as
/// many as the report has classes with blocks, named in the summary line;
/// a cursor outside the run is said to draw nothing; an opacity above 1
/// and bins with --addresses are refused.
#[test]
fn render_draws_size_class_bins_with_cursors() {
    let bin = c_example("heap_mix", &["-O2"]);
    let trace = trace_path("heap-mix-bins");
    assert!(record_with(&["--allocations"], &bin, &["2000"], &trace).status.success());
    let classes = heap_report(&trace)["size_classes"]
        .as_array()
        .expect("classes")
        .iter()
        .filter(|c| c["blocks"].as_u64() > Some(0))
        .count();
    let png = trace.with_extension("png");
    let render = |extra: &[&str]| {
        linetrace()
            .args(["render", "--allocations", "--force", "--width", "640", "--height", "480", "-o"])
            .arg(&png)
            .arg(&trace)
            .args(extra)
            .output()
            .expect("render runs")
    };
    // One picture of all blocks: the cursor at event 100 brightens column
    // 100 / events * 640 against the same picture without it.
    let events = heap_report(&trace)["events"].as_u64().expect("events");
    let pixels = |extra: &[&str]| {
        assert!(render(extra).status.success());
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).expect("png")));
        let mut reader = decoder.read_info().expect("png header");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        reader.next_frame(&mut buf).expect("png data");
        buf
    };
    let (plain, with) = (pixels(&[]), pixels(&["--cursor", "100"]));
    let x = (100.0 / events as f64 * 640.0) as usize;
    let channels = plain.len() / (640 * 480);
    // Red channel, rows 100..300: on average 40 levels brighter.
    let brighter: i64 =
        (100..300).map(|y| (y * 640 + x) * channels).map(|i| i64::from(with[i]) - i64::from(plain[i])).sum();
    assert!(brighter > 200 * 40, "the cursor's column is brighter: {brighter}");
    for layout in ["time", "address"] {
        let out = render(&["--bins", layout, "--cursor", "100", "--cursor", "1e12"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains(&format!("(640x480, {classes} size-class bins")), "{layout}: {err}");
        assert!(err.contains("--cursor 1000000000000 is outside the run"), "{err}");
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).expect("png")));
        let info = decoder.read_info().expect("png header").info().clone();
        assert_eq!((info.width, info.height), (640, 480));
    }
    // Four stacked bins in 100 rows would be cut: refused, saying what fits.
    let out = linetrace()
        .args(["render", "--allocations", "--force", "--height", "100", "--bins", "time", "-o"])
        .arg(&png)
        .arg(&trace)
        .output()
        .expect("render runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("too small for") && err.contains("at least"), "{err}");
    for bad in
        [&["--cursor", "5", "--cursor-strength", "1.5"][..], &["--bins", "time", "--addresses", "0x1000..0x2000"]]
    {
        let out = render(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The heap picture's options follow the picture drawn: a trace of `record
/// --allocations` takes them without --allocations (it implies the heap
/// picture; clap refused them there), and a trace of reads refuses them,
/// naming each, before anything is decoded or drawn.
#[test]
fn heap_options_follow_the_picture_drawn() {
    let bin = c_example("heap_mix", &["-O2"]);
    let heap = trace_path("heap-mix-implied");
    assert!(record_with(&["--allocations"], &bin, &["300"], &heap).status.success());
    let png = heap.with_extension("png");
    let heap_options = ["--heap-colour", "lifetime", "--cushion", "none", "--bins", "time", "--cursor", "50"];
    let out = linetrace().args(["render", "--height", "480", "-o"]).arg(&png).arg(&heap).args(heap_options).output();
    let out = out.expect("render runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("shows its heap") && err.contains("size-class bins"), "{err}");
    assert!(png.exists());

    let reads = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/array_sweep_work.lntrace");
    let reads_png = trace_path("heap-options-on-reads").with_extension("png");
    let render = linetrace().args(["render", "-o"]).arg(&reads_png).arg(&reads).args(heap_options).output();
    let view = linetrace().args(["view", "--addresses", "0x1000..0x2000"]).arg(&reads).output();
    let compare = linetrace().arg("view").args([&reads, &reads]).args(["--bins", "time"]).output();
    for (out, message) in [
        (
            render,
            "--heap-colour, --cushion, --bins, --cursor are for the heap picture (--allocations), and render shows the reads",
        ),
        (view, "--addresses is for the heap picture (--allocations), and view shows the reads"),
        (compare, "--bins is for the heap picture (--allocations), and view A B compares reads"),
    ] {
        let out = out.expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(message), "wanted {message:?}: {err}");
    }
    assert!(!reads_png.exists(), "nothing drawn");

    // `report --by line` of the heap trace: no reads to group, said so,
    // where it printed a table's header over no rows.
    let out = linetrace().args(["report", "--by", "line"]).arg(&heap).output().expect("report runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("by line: the trace records no memory access") && !text.contains("self reads"), "{text}");
}

/// A custom allocator nested in itself 21 deep: the 16 outermost calls the
/// agent keeps track of are recorded, the 5 deepest run unrecorded and the
/// recording says so; the program's output is unchanged.
#[test]
fn nested_custom_allocator_calls_past_the_agents_depth_are_counted() {
    let bin = c_example("nested_alloc", &["-O1"]);
    let trace = trace_path("nested-alloc");
    let out = linetrace()
        .args(["record", "--allocations", "--alloc-fn", "chain_alloc:size=ARG1", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .output()
        .expect("linetrace runs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "168\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("5 calls of --alloc-fn functions were not recorded"), "{err}");
    let custom = heap_report(&trace)["custom"].clone();
    assert_eq!(custom[0]["blocks"].as_u64(), Some(16), "{custom}");
}

/// `--alloc-fn` names that cannot be hooked are refused before the
/// program runs, with the reason.
#[test]
fn bad_custom_allocators_are_refused() {
    let bin = c_example("pool", &["-O2"]);
    let trace = trace_path("pool-bad");
    for (spec, says) in [
        ("no_such_function:size=ARG1", "no_such_function"),
        ("pool_alloc:size=ARG9", "ARG1..ARG6"),
        ("pool_alloc", "expected NAME:size=ARGn"),
    ] {
        let out = record_with(&["--allocations", "--alloc-fn", spec], &bin, &[], &trace);
        assert_eq!(out.status.code(), Some(2), "{spec}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{spec}: {err}");
        assert!(!trace.exists(), "no trace");
    }
}

/// A static program cannot preload the agent: refused, nothing written.
#[test]
fn static_programs_are_refused() {
    let bin = c_example("heap_mix", &["-static"]);
    let trace = trace_path("heap-mix-static");
    let out = record_allocations(&bin, &["10"], &trace);
    assert_eq!(out.status.code(), Some(2), "linetrace's own failure");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("statically linked"), "{err}");
    assert!(!trace.exists(), "no trace");
}

/// `render --allocations` draws the blocks: with flat colours by size
/// class, the classes of blocks much taller than a pixel (large, huge) are
/// there in their exact colours, and a bar of live bytes is beneath.
#[test]
fn render_draws_the_heap_in_class_colours() {
    let bin = c_example("heap_mix", &[]);
    let trace = trace_path("heap-mix-render");
    assert!(record_allocations(&bin, &["3000"], &trace).status.success());
    let png_path = trace.with_extension("png");
    let out = linetrace()
        .args(["render", "--allocations", "--heap-colour", "size-class", "--cushion", "none", "--width", "400"])
        .args(["--height", "300", "-o"])
        .arg(&png_path)
        .arg(&trace)
        .output()
        .expect("render runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png_path).expect("png")));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png data");
    assert_eq!((info.width, info.height), (400, 300));
    let rgba = |c: [f64; 3]| c.map(|v| (v * 255.0).round() as u8);
    let count = |c: [u8; 3]| buf.chunks_exact(4).filter(|p| p[..3] == c).count();
    let [_, _, large, huge] = decoder::heap_raster::CLASS_COLOURS.map(rgba);
    assert!(count(large) > 30, "large blocks: {} pixels", count(large));
    assert!(count(huge) > 200, "huge blocks: {} pixels", count(huge));
    // The occupancy bar: the bottom row is coloured all along.
    let bottom = &buf[(299 * 400 * 4)..];
    let dark = bottom.chunks_exact(4).filter(|p| p[0] < 40 && p[1] < 40 && p[2] < 40).count();
    assert_eq!(dark, 0, "the bar's bottom row is drawn everywhere");
    // A trace with no heap blocks is an error, not an empty picture.
    let empty = trace_path("true-allocs");
    assert!(record_allocations(Path::new("/bin/true"), &[], &empty).status.success());
    let out = linetrace()
        .args(["render", "--allocations", "-o"])
        .arg(empty.with_extension("png"))
        .arg(&empty)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no heap blocks"));
}

/// With --alloc-stack, leaks are listed by call path: through the wrapper
/// xmalloc to make_node (10 blocks, 480 bytes) and make_name (1, 16);
/// with `--alloc-stack 0`, no stacks are recorded.
#[test]
fn stacks_show_who_called_the_wrapper() {
    let bin = c_example("alloc_wrapper", &["-O1"]);
    let (with, without) = (trace_path("wrapper-stacks"), trace_path("wrapper-nostacks"));
    assert!(record_with(&["--allocations", "--alloc-stack", "3"], &bin, &[], &with).status.success());
    assert!(record_with(&["--allocations", "--alloc-stack", "0"], &bin, &[], &without).status.success());
    let stacks = heap_report(&with)["leak_stacks"].as_array().expect("stacks").clone();
    let row = |caller: &str| {
        stacks
            .iter()
            .find(|s| s["frames"][1].as_str().is_some_and(|f| f.starts_with(caller)))
            .unwrap_or_else(|| panic!("no stack through {caller}: {stacks:?}"))
    };
    let (node, name) = (row("make_node"), row("make_name"));
    assert_eq!((node["blocks"].as_u64(), node["bytes"].as_u64()), (Some(10), Some(480)));
    assert_eq!((name["blocks"].as_u64(), name["bytes"].as_u64()), (Some(1), Some(16)));
    for s in [node, name] {
        assert!(s["frames"][0].as_str().is_some_and(|f| f.starts_with("xmalloc")), "{s}");
        assert!(s["frames"][2].as_str().is_some_and(|f| f.starts_with("main")), "{s}");
    }
    assert_eq!(heap_report(&without)["leak_stacks"].as_array().map(Vec::len), Some(0));
}

/// The second oracle, heaptrack: what it reports leaked equals our bytes
/// live at the end (heaptrack prints 3 significant digits, "5.27M"), and
/// its count of allocation calls is our blocks plus at most one (its own
/// start-up allocation, which DHAT does not see either). Its peak is
/// counted differently (within 2% here).
#[test]
fn heaptrack_agrees_on_leaks_and_calls() {
    let bin = c_example("heap_mix", &[]);
    let trace = trace_path("heap-mix-heaptrack");
    assert!(record_allocations(&bin, &["5000"], &trace).status.success());
    let h = heap_report(&trace);
    let (calls, leaked, peak) = heaptrack(&bin, &["5000"], "heap-mix");
    let blocks = h["blocks"].as_u64().expect("blocks");
    assert!(calls == blocks || calls == blocks + 1, "heaptrack's calls {calls}, our blocks {blocks}");
    let at_end = h["at_end"]["bytes"].as_f64().expect("bytes");
    assert!((leaked - at_end).abs() <= 0.005 * at_end, "leaked: heaptrack {leaked}, ours {at_end}");
    let our_peak = h["peak"]["bytes"].as_f64().expect("peak");
    assert!((peak - our_peak).abs() <= 0.02 * our_peak, "peak: heaptrack {peak}, ours {our_peak}");
}

/// Third-party C code from a crate's bundled sources: zstd's compressor
/// (built by `zstd-sys`) allocates its context and workspace through
/// `ZSTD_customMalloc`, beside the Rust program's own blocks. Totals, peak
/// and what is left at the end equal DHAT's; heaptrack counts the same
/// calls (plus its own start-up one) and the same bytes left.
#[test]
fn a_third_party_c_library_heap_equals_dhat_and_heaptrack() {
    let bin = rust_example("zstd_compress");
    let (h, _) = heap_equal_to_dhat(&bin, &["512"], "zstd-heap");
    let largest = &h["top_by_bytes"][0];
    // Built with optimisation (`cargo test --release`), zstd-sys inlines
    // the wrapper into its caller: the row then names the caller, at the
    // wrapper's line in allocations.h.
    let wrapper = largest["function"] == "ZSTD_customMalloc"
        || largest["line"].as_str().is_some_and(|l| l.starts_with("common/allocations.h:"));
    assert!(wrapper, "zstd's workspace is the largest, allocated in ZSTD_customMalloc: {largest}");
    let (calls, leaked, _) = heaptrack(&bin, &["512"], "zstd");
    let blocks = h["blocks"].as_u64().expect("blocks");
    assert!(calls == blocks || calls == blocks + 1, "heaptrack's calls {calls}, our blocks {blocks}");
    assert_eq!(leaked, h["at_end"]["bytes"].as_f64().expect("bytes"), "bytes left at the end");
}

/// Every replaceable operator new and delete of C++17 (plain, array,
/// nothrow, sized, aligned and their mixes) is recorded where the program
/// calls it: the 13 blocks of each round are `allocate_all`'s, not the C++
/// library's operator new's, the 7 aligned ones carry their alignment, and
/// the totals equal DHAT's.
#[test]
fn every_operator_new_and_delete_is_recorded_at_its_caller() {
    let (h, trace) = heap_equal_to_dhat(&cpp_example("new_variants"), &["10"], "new-variants");
    let functions = h["top_by_count"].as_array().expect("functions");
    let named = |f: &&serde_json::Value, name: &str| f["function"].as_str().is_some_and(|n| n.contains(name));
    let all = functions.iter().find(|f| named(f, "allocate_all"));
    assert_eq!(all.map(|f| &f["blocks"]), Some(&serde_json::json!(130)), "{functions:?}");
    assert!(!functions.iter().any(|f| named(&f, "operator new")), "no block is the library's: {functions:?}");
    let aligned = dump(&trace).iter().filter(|l| l.contains("aligned_alloc") && l.contains("align=64")).count();
    assert_eq!(aligned, 70, "the aligned news with their alignment");
}

/// heaptrack's summary of `program args` (`heaptrack_print`): calls to
/// allocation functions, bytes leaked, peak heap bytes.
fn heaptrack(program: &Path, args: &[&str], name: &str) -> (u64, f64, f64) {
    let dir = std::env::temp_dir().join(format!("linetrace-heaptrack-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let out = Command::new("heaptrack")
        .arg("-o")
        .arg(dir.join("ht"))
        .arg(program)
        .args(args)
        .output()
        .expect("heaptrack runs");
    assert!(out.status.success(), "heaptrack: {}", String::from_utf8_lossy(&out.stderr));
    let data =
        std::fs::read_dir(&dir).expect("dir").filter_map(Result::ok).map(|e| e.path()).next().expect("heaptrack data");
    let printed = Command::new("heaptrack_print").arg(&data).output().expect("heaptrack_print runs");
    let text = String::from_utf8_lossy(&printed.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    let after = |label: &str| -> &str {
        text.lines().find_map(|l| l.strip_prefix(label)).unwrap_or_else(|| panic!("no {label:?} in {text}")).trim()
    };
    let calls: u64 =
        after("calls to allocation functions:").split_whitespace().next().and_then(|n| n.parse().ok()).expect("calls");
    let megabytes = |s: &str| -> f64 {
        let (n, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
        let n: f64 = n.parse().expect("a number");
        n * match unit {
            "K" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            _ => 1.0,
        }
    };
    (calls, megabytes(after("total memory leaked:")), megabytes(after("peak heap memory consumption:")))
}

/// A trace of `record --allocations` has no reads: `report`, `render` and
/// `view` show its heap without being asked (`--allocations`), say so on
/// stderr, and give what `--allocations` gives. `--by` still asks for the
/// trace's own table.
#[test]
fn an_allocation_trace_shows_its_heap_unasked() {
    let program = c_example("heap_mix", &[]);
    let trace = trace_path("heap-unasked");
    let out = record_allocations(&program, &["2000"], &trace);
    assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
    let run = |args: &[&str]| {
        let out = linetrace().args(args).arg(&trace).output().expect("linetrace runs");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let note = "a trace of `record --allocations` has no reads";
    let (unasked, asked) = (run(&["report"]), run(&["report", "--allocations"]));
    assert_eq!(String::from_utf8_lossy(&unasked.stdout), String::from_utf8_lossy(&asked.stdout));
    assert!(String::from_utf8_lossy(&unasked.stderr).contains(note), "{}", String::from_utf8_lossy(&unasked.stderr));
    assert!(!String::from_utf8_lossy(&asked.stderr).contains(note));
    let by_site = run(&["report", "--by", "allocation"]);
    assert!(String::from_utf8_lossy(&by_site.stdout).contains("allocation site"));
    let (png_unasked, png_asked) = (trace.with_extension("unasked.png"), trace.with_extension("asked.png"));
    let unasked = run(&["render", "-o", png_unasked.to_str().expect("path")]);
    assert!(String::from_utf8_lossy(&unasked.stderr).contains(note));
    run(&["render", "--allocations", "-o", png_asked.to_str().expect("path")]);
    assert!(std::fs::read(&png_unasked).expect("png") == std::fs::read(&png_asked).expect("png"), "the same picture");
    // What shows accesses refuses it rather than answer empty, and says
    // what it does take.
    let json = trace.with_extension("json");
    for (args, why) in [
        (&["export", "--format", "chrome", "-o", json.to_str().expect("path")][..], "--format csv exports its blocks"),
        (&["at", "--column", "0"], "with no read columns; ask with --event N --address A"),
    ] {
        let out = linetrace().args(args).arg(&trace).output().expect("linetrace runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("is a trace of `record --allocations`") && stderr.contains(why), "{stderr}");
    }
    assert!(!json.exists(), "no export written");
}

/// `export --format csv` of a trace of `record --allocations` writes one row
/// per block, in the order they were made. Checked against early_heap's
/// printed addresses and calls: its first block (512 bytes, never freed),
/// its first large block (freed), and as many rows as `report` counts
/// blocks and mappings.
#[test]
fn a_csv_export_of_an_allocation_trace_has_a_row_per_block() {
    let early = EarlyHeap::record("early-heap-csv");
    let trace = &early.trace;
    let csv = trace.with_extension("csv");
    let out = linetrace().args(["export", "--format", "csv", "-o"]).arg(&csv).arg(trace).output().expect("export");
    assert!(out.status.success(), "export: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&csv).expect("csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let field = |row: &[&str], name: &str| -> String {
        let i = header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}: {header:?}"));
        row[i].to_string()
    };
    let heap = heap_report(trace);
    let blocks = heap["blocks"].as_u64().expect("blocks") + heap["mappings"].as_u64().expect("mappings");
    assert_eq!(rows.len() as u64, blocks, "a row per block and mapping");
    let events: Vec<u64> = rows.iter().map(|r| field(r, "alloc_event").parse().expect("event")).collect();
    assert!(events.windows(2).all(|w| w[0] < w[1]), "in the order made");
    let address = |name: &str| early.address("0", name);
    let row_at = |address: &str| rows.iter().find(|r| field(r, "address") == address).cloned();
    let small = row_at(&address("small")).unwrap_or_else(|| panic!("no row of the small block in\n{text}"));
    assert_eq!((field(&small, "size"), field(&small, "free_event")), ("512".into(), String::new()), "{small:?}");
    assert_eq!((field(&small, "kind"), field(&small, "function")), ("malloc".into(), "call".into()), "{small:?}");
    assert!(field(&small, "file_line").starts_with("c/early_heap.c:"), "{small:?}");
    let large = row_at(&address("large")).unwrap_or_else(|| panic!("no row of the large block in\n{text}"));
    assert_eq!(field(&large, "size"), "1048576");
    let (alloc, free) = (field(&large, "alloc_event"), field(&large, "free_event"));
    assert!(free.parse::<u64>().expect("freed") > alloc.parse::<u64>().expect("event"), "{large:?}");
}

/// examples/c/early_heap.c recorded with `record --allocations` into a
/// trace named `name`, and what it printed: one line a call,
/// `round=R small=0x… large=0x… sum=…`.
struct EarlyHeap {
    trace: std::path::PathBuf,
    printed: String,
}

impl EarlyHeap {
    fn record(name: &str) -> EarlyHeap {
        let bin = c_example("early_heap", &[]);
        let trace = trace_path(name);
        let out = record_allocations(&bin, &[], &trace);
        assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
        EarlyHeap { trace, printed: String::from_utf8_lossy(&out.stdout).to_string() }
    }

    /// The address printed for block `name` (`small`, `large`) of call
    /// `round`, as printed (`0x…`).
    fn address(&self, round: &str, name: &str) -> String {
        let line = self.printed.lines().find(|l| l.starts_with(&format!("round={round} "))).expect("round line");
        line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{name}="))).expect("address").to_string()
    }
}

/// `at --event N --address A` answers for the allocations view what hovering
/// it shows: the block holding A just after event N, or that none does.
/// Checked against the addresses early_heap prints, and the order of its
/// calls: its first block (event 0) is never freed; its first large block
/// is freed within the first call; the second call's blocks come after the
/// 4096 blocks `main` allocates between the calls.
#[test]
fn at_an_event_and_address_names_the_block_there() {
    let early = EarlyHeap::record("early-heap-at");
    let (trace, address) = (&early.trace, |round: &str, name: &str| early.address(round, name));
    let events = heap_report(trace)["events"].as_u64().expect("allocator calls");
    assert!(events > 4096, "{events} allocator calls");
    let last = (events - 1).to_string();
    let at = |event: &str, address: &str| -> (Option<i32>, String, String) {
        let out =
            linetrace().args(["at", "--event", event, "--address", address]).arg(trace).output().expect("at runs");
        let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let small0 = address("0", "small");
    let (code, text, _) = at(&last, &small0);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("malloc of 512 bytes") && text.contains(&format!("at {small0}..")), "{text}");
    assert!(text.contains("from call (c/early_heap.c:") && text.contains("never freed"), "{text}");
    let large0 = address("0", "large");
    let (_, text, _) = at("1", &large0);
    assert!(text.contains("malloc of 1048576 bytes"), "allocated at event 1:\n{text}");
    let (_, text, _) = at(&last, &large0);
    assert!(text.contains("free: no block holds it"), "freed in the first call:\n{text}");
    let small1 = address("1", "small");
    let (_, text, _) = at("1", &small1);
    assert!(text.contains("free: no block holds it"), "not allocated yet:\n{text}");
    let (_, text, _) = at(&last, &small1);
    assert!(text.contains("malloc of 512 bytes") && text.contains(&format!("at {small1}..")), "{text}");
    // The same through --json.
    let out =
        linetrace().args(["at", "--json", "--event", &last, "--address", &small0]).arg(trace).output().expect("at");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("at --json");
    assert_eq!(json["block"]["size"], 512);
    assert_eq!(format!("{:#x}", json["block"]["address"].as_u64().expect("address")), small0);
    // Past the last event, and a malformed address: said, exit 2.
    let (code, _, stderr) = at(&events.to_string(), &small0);
    assert_eq!(code, Some(2));
    assert!(stderr.contains(&format!("the trace has {events} allocation events")), "{stderr}");
    let (code, _, stderr) = at(&last, "0xzz");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("is not an address"), "{stderr}");
}

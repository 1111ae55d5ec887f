#![allow(missing_docs)]
//! Benchmark of the ptrace recorder against a raw single-stepper.
//!
//! `cargo bench --bench record` builds two examples with gcc, then for each
//! traced function runs, alternately and in this one process:
//! - a minimal stepper: breakpoint at the function, then only
//!   `PTRACE_SINGLESTEP` + `waitpid` + `PTRACE_GETREGS` until it returns —
//!   the ceiling for any ptrace single-step tracer;
//! - `instrument::record` on the same function.
//!
//! It prints steps per second of both and their ratio (median of several
//! rounds: the machine is noisy, ratios are what to compare), and the
//! on-disk bytes per recorded access.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use decoder::symbols::{ElfSymbols, SymbolPaths};
use instrument::sys;

use common::median;

const ROUNDS: usize = 5;

/// -no-pie: link-time addresses are run-time addresses, so the raw stepper
/// needs no load-bias logic.
fn build(name: &str, dir: &Path) -> PathBuf {
    common::build_c_example(name, dir, &["-no-pie", "-pthread"])
}

/// Steps `function` of `program` with nothing but step/wait/getregs.
/// Returns (steps, seconds).
fn raw_stepper(program: &Path, args: &[&str], function: &str) -> (u64, f64) {
    use std::os::unix::process::CommandExt;
    let symbols = ElfSymbols::load(program, &SymbolPaths::default()).expect("symbols");
    let entry = symbols.functions.iter().find(|f| f.raw == function).expect("function").address;
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(std::process::Stdio::null()).env("LD_BIND_NOW", "1");
    // SAFETY: PTRACE_TRACEME only.
    unsafe { cmd.pre_exec(sys::traceme) };
    // Reaped below with waitpid, which the tracer needs to own.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("spawn");
    let pid = child.id() as sys::Tid;
    sys::wait(pid).expect("exec stop");
    let word = sys::peek(pid, entry).expect("peek");
    sys::poke(pid, entry, (word & !0xff) | 0xcc).expect("poke");
    sys::resume(pid, 0).expect("cont");
    sys::wait(pid).expect("breakpoint");
    sys::poke(pid, entry, word).expect("restore");
    let mut regs = sys::get_regs(pid).expect("regs");
    regs.rip = entry;
    sys::set_regs(pid, &regs).expect("rewind");
    let entry_sp = regs.rsp;
    let start = Instant::now();
    let mut steps = 0u64;
    loop {
        sys::single_step(pid, 0).expect("step");
        sys::wait(pid).expect("wait");
        let r = sys::get_regs(pid).expect("regs");
        steps += 1;
        if r.rsp > entry_sp {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // SAFETY: kill(2) of our own child, then reap it.
    unsafe { libc_kill(pid, 9) };
    let _ = sys::wait(pid);
    (steps, secs)
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Records `function` with linetrace. Returns (steps, seconds, file bytes,
/// event-chunk bytes, accesses).
fn linetrace(program: &Path, args: &[&str], function: &str, trace: &Path) -> (u64, f64, u64, u64, u64) {
    let summary = instrument::record(instrument::RecordOptions {
        program: program.to_path_buf(),
        args: args.iter().map(Into::into).collect(),
        function: Some(function.to_string()),
        output: trace.to_path_buf(),
        max_invocations: None,
        progress: None,
        backend: instrument::Backend::Ptrace,
    })
    .expect("record");
    let mut reader = trace_rt::format::TraceReader::open(trace).expect("trace");
    while reader.next_record().expect("read").is_some() {}
    (summary.instructions, summary.elapsed.as_secs_f64(), summary.trace_bytes, reader.event_bytes(), summary.accesses)
}

fn main() {
    let dir = std::env::temp_dir().join(format!("linetrace-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sweep = build("array_sweep", &dir);
    let matmul = build("matmul", &dir);
    let trace = dir.join("bench.lntrace");

    println!("stepping rate (median of {ROUNDS} rounds)");
    let cases: [(&Path, &[&str], &str); 2] = [(&sweep, &[], "work"), (&matmul, &["4"], "main")];
    for (program, args, function) in cases {
        let (mut raw_rates, mut lt_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (raw_steps, raw_secs) = raw_stepper(program, args, function);
            let (steps, secs, ..) = linetrace(program, args, function, &trace);
            let (raw, lt) = (raw_steps as f64 / raw_secs, steps as f64 / secs);
            raw_rates.push(raw);
            lt_rates.push(lt);
            ratios.push(lt / raw);
        }
        let name = program.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        println!(
            "  {name} {function}: raw step+wait+getregs {:.0} steps/s, linetrace record {:.0} steps/s, ratio {:.0}% (goal >= 70%)",
            median(raw_rates),
            median(lt_rates),
            100.0 * median(ratios)
        );
    }

    println!("bytes per access on disk");
    let cases: [(&Path, &[&str], &str); 3] =
        [(&sweep, &[], "work"), (&matmul, &[], "matmul_naive"), (&matmul, &[], "matmul_blocked")];
    for (program, args, function) in cases {
        let (_, _, file, events, accesses) = linetrace(program, args, function, &trace);
        let name = program.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        println!(
            "  {name} {function}: {accesses} accesses, file {file} B = {:.3} B/access, event chunks {events} B = {:.3} B/access",
            file as f64 / accesses as f64,
            events as f64 / accesses as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

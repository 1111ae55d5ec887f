#![allow(missing_docs)]
//! Whole-program allocation recording against its peers, in one run.
//!
//! `cargo bench --bench alloc` builds `examples/c/heap_mix.c` and runs it
//! (2M rounds, about 1.4M allocator calls; `LINETRACE_BENCH_ROUNDS=N`
//! changes that) natively, under `linetrace record --allocations`, under
//! `heaptrack` and under `valgrind --tool=dhat`, alternately, several
//! times, and prints the median wall time of each and its ratio to native
//! (the machine is noisy: compare ratios). For linetrace it also prints
//! the program's own run time under the agent (the rest is turning the
//! agent's log into the trace) and allocator calls recorded per second.
//!
//! Then the cost of a custom allocator function (`--alloc-fn`):
//! `examples/c/pool.c` with 1M rounds (5M calls of its pool functions),
//! natively and recorded with its three functions declared; it prints the
//! time per hooked call.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

#[path = "common/mod.rs"]
mod common;
use common::median;

#[path = "../tests/common/pool_flags.rs"]
mod pool_flags;

const ROUNDS: usize = 3;

/// Seconds the command took, and its standard error; `None` if it failed.
fn timed(cmd: &mut Command) -> Option<(f64, String)> {
    let start = Instant::now();
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().ok()?;
    let took = start.elapsed().as_secs_f64();
    out.status.success().then(|| (took, String::from_utf8_lossy(&out.stderr).into_owned()))
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("heap_mix");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/heap_mix.c");
    let built = Command::new("gcc").args(["-O2", "-g", "-pthread"]).arg(&src).arg("-o").arg(&bin).status();
    assert!(built.is_ok_and(|s| s.success()), "gcc failed on {}", src.display());
    let rounds = std::env::var("LINETRACE_BENCH_ROUNDS").unwrap_or_else(|_| "2000000".into());
    let linetrace = env!("CARGO_BIN_EXE_linetrace");
    let trace = dir.path().join("heap_mix.lntrace");
    let heaptrack_out = dir.path().join("heaptrack");
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut run_times = Vec::new();
    let mut calls = 0u64;
    for _ in 0..ROUNDS {
        if let Some((t, _)) = timed(Command::new(&bin).arg(&rounds)) {
            times[0].push(t);
        }
        let mut record = Command::new(linetrace);
        record.args(["record", "--force", "--allocations", "-o"]).arg(&trace).arg("--").arg(&bin).arg(&rounds);
        if let Some((t, err)) = timed(&mut record) {
            times[1].push(t);
            // "recorded N allocator calls on T thread(s) in S s"
            let words: Vec<&str> = err.split_whitespace().collect();
            if let Some(i) = words.iter().position(|w| *w == "recorded") {
                calls = words.get(i + 1).and_then(|w| w.parse().ok()).unwrap_or(0);
            }
            if let Some(i) = words.iter().position(|w| *w == "in")
                && let Some(s) = words.get(i + 1).and_then(|w| w.parse::<f64>().ok())
            {
                run_times.push(s);
            }
        }
        if let Some((t, _)) = timed(Command::new("heaptrack").arg("-o").arg(&heaptrack_out).arg(&bin).arg(&rounds)) {
            times[2].push(t);
        }
        let mut dhat = Command::new("valgrind");
        dhat.args(["--tool=dhat", "--dhat-out-file=/dev/null"]).arg(&bin).arg(&rounds);
        if let Some((t, _)) = timed(&mut dhat) {
            times[3].push(t);
        }
    }
    // Every ratio divides by it: without it they would print as infinite.
    assert!(!times[0].is_empty(), "the program failed natively in all {ROUNDS} rounds: nothing to compare with");
    let native = median(times[0].clone());
    println!("heap_mix {rounds} rounds, {calls} allocator calls; median of {ROUNDS} runs");
    for (name, t) in
        ["native", "linetrace record --allocations", "heaptrack", "valgrind --tool=dhat"].iter().zip(&times)
    {
        if t.is_empty() {
            println!("{name:<32} not run (missing?)");
            continue;
        }
        let s = median(t.clone());
        println!("{name:<32} {s:>7.3} s  {:>6.2}x native", s / native);
    }
    if !run_times.is_empty() {
        let run = median(run_times);
        println!(
            "  the program under the agent     {run:>7.3} s  {:>6.2}x native, {:.1}M calls/s recorded",
            run / native,
            calls as f64 / run / 1e6
        );
    }
    pool_cost(dir.path(), linetrace);
}

/// The time a call of a declared custom allocator function costs.
fn pool_cost(dir: &Path, linetrace: &str) {
    let bin = dir.join("pool");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/pool.c");
    let built = Command::new("gcc").args(["-O2", "-g"]).arg(&src).arg("-o").arg(&bin).status();
    assert!(built.is_ok_and(|s| s.success()), "gcc failed on {}", src.display());
    let rounds = "1000000";
    let trace = dir.join("pool.lntrace");
    let (mut native, mut hooked) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        if let Some((t, _)) = timed(Command::new(&bin).arg(rounds)) {
            native.push(t);
        }
        let mut record = Command::new(linetrace);
        record
            .args(["record", "--force", "--allocations", "-o"])
            .arg(&trace)
            .args(pool_flags::POOL_ALLOC_FNS)
            .arg("--")
            .arg(&bin)
            .arg(rounds);
        if let Some((t, _)) = timed(&mut record) {
            hooked.push(t);
        }
    }
    if native.is_empty() || hooked.is_empty() {
        println!("pool: not run");
        return;
    }
    // Each round calls the pool four times (node, key, value, label) and
    // frees once; four resets in 1000 rounds.
    let calls = 5.0 * 1e6 + 4.0 * 1e3;
    let (n, h) = (median(native), median(hooked));
    println!(
        "pool 1M rounds ({calls:.0} custom allocator calls): native {n:.3} s, recorded with --alloc-fn {h:.3} s, \
         {:.0} ns a call",
        (h - n) / calls * 1e9
    );
}

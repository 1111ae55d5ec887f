#![allow(missing_docs)]
//! Benchmark of the rewrite backend against the native program and valgrind.
//!
//! `cargo bench --bench rewrite` builds examples/c/kernels.c, then for each
//! workload runs, alternately in this one process (the machine is noisy:
//! compare ratios, not seconds):
//! - the program natively;
//! - `instrument::record` with the rewrite backend on `kernel` (trace
//!   written and compressed);
//! - `valgrind --tool=cachegrind` (counts only, writes no trace);
//! - `valgrind --tool=lackey --trace-mem=yes` (traces every access), once
//!   (it is slow; `LINETRACE_BENCH_LACKEY=0` skips it).
//!
//! The third-party workload is zstd's compressor (C sources built by the
//! `zstd-sys` crate) compressing 8 MiB, traced through
//! `zstd_compress::work`; the bench builds that example with cargo.
//!
//! The `outside` workload calls a trivial `kernel` and then computes for a
//! while untraced: its ratio is the recorder's cost outside the function.
//! It is split into a fixed cost (the same program with 16 iterations:
//! starting the program under ptrace, reading symbols, translating, writing
//! the trace) and the overhead per second of untraced work (the slope
//! between the two lengths).
//!
//! Times are whole runs, wall clock, medians of `LINETRACE_BENCH_ROUNDS`
//! (default 3). It prints the table, the bytes per recorded access on disk,
//! and how each goal of the issue stands.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::median;

fn timed(mut cmd: Command) -> f64 {
    let start = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().expect("runs");
    assert!(status.success(), "{cmd:?} failed");
    start.elapsed().as_secs_f64()
}

/// Seconds, and bytes per access of the trace of `function`.
fn rewrite(program: &Path, args: &[&str], function: &str, trace: &Path) -> (f64, f64) {
    let start = Instant::now();
    let summary = instrument::record(instrument::RecordOptions {
        program: program.to_path_buf(),
        args: args.iter().map(Into::into).collect(),
        function: Some(function.into()),
        output: trace.to_path_buf(),
        max_invocations: None,
        progress: None,
        backend: instrument::Backend::Rewrite,
    })
    .expect("record");
    let secs = start.elapsed().as_secs_f64();
    (secs, summary.trace_bytes as f64 / summary.accesses.max(1) as f64)
}

fn valgrind(tool: &[&str], program: &Path, args: &[&str]) -> f64 {
    let mut cmd = Command::new("valgrind");
    cmd.args(tool).arg(program).args(args);
    timed(cmd)
}

/// Builds the Rust example `name` in the release profile and returns its
/// path (cargo's own target directory, so nothing is built twice).
fn build_rust_example(name: &str) -> std::path::PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = Command::new(cargo)
        .args(["build", "--quiet", "--release", "--example", name])
        .current_dir(root)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cargo build --release --example {name} failed");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    target.join("release/examples").join(name)
}

fn main() {
    let rounds: usize = std::env::var("LINETRACE_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let lackey = std::env::var("LINETRACE_BENCH_LACKEY").map_or(true, |v| v != "0");
    let dir = std::env::temp_dir().join(format!("linetrace-bench-rewrite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kernels = common::build_c_example("kernels", &dir, &[]);
    let zstd = build_rust_example("zstd_compress");
    let trace = dir.join("bench.lntrace");
    let cachegrind = ["--tool=cachegrind", "--cachegrind-out-file=/dev/null"];
    let lackey_tool = ["--tool=lackey", "--trace-mem=yes", "--log-file=/dev/null"];
    // (name, program, arguments, traced function)
    let workloads: [(&str, &Path, &[&str], &str); 7] = [
        ("matmul 256", kernels.as_path(), &["matmul", "256"], "kernel"),
        ("blocked 256", kernels.as_path(), &["blocked", "256"], "kernel"),
        ("list 1000000", kernels.as_path(), &["list", "1000000"], "kernel"),
        ("hash 1000000", kernels.as_path(), &["hash", "1000000"], "kernel"),
        ("sort 1000000", kernels.as_path(), &["sort", "1000000"], "kernel"),
        ("zstd 8 MiB", zstd.as_path(), &["8192"], "zstd_compress::work"),
        ("outside 300000000", kernels.as_path(), &["outside", "300000000"], "kernel"),
    ];
    println!("wall time, median of {rounds} rounds (lackey: one round); x = times native");
    println!(
        "{:<18} {:>9} {:>16} {:>16} {:>16} {:>9} {:>9} {:>9}",
        "workload", "native", "rewrite", "cachegrind", "lackey", "cg/rw", "lk/rw", "B/access"
    );
    let (mut slowdowns, mut vs_cachegrind, mut vs_lackey) = (Vec::new(), Vec::new(), Vec::new());
    let mut outside = None;
    let mut outside_times = None;
    let mut bytes = Vec::new();
    for (name, program, args, function) in workloads {
        let (mut native, mut rw, mut cg, mut per_access) = (Vec::new(), Vec::new(), Vec::new(), 0.0);
        for _ in 0..rounds {
            let mut cmd = Command::new(program);
            cmd.args(args);
            native.push(timed(cmd));
            let (secs, b) = rewrite(program, args, function, &trace);
            rw.push(secs);
            per_access = b;
            cg.push(valgrind(&cachegrind, program, args));
        }
        // Lackey of the untraced part measures nothing of interest, slowly.
        let is_outside = name.starts_with("outside");
        let lk = (lackey && !is_outside).then(|| valgrind(&lackey_tool, program, args));
        let (native, rw, cg) = (median(native), median(rw), median(cg));
        let lk_text = lk.map_or("-".to_string(), |l| format!("{l:.2}s {:>5.1}x", l / native));
        let lk_ratio = lk.map_or("-".to_string(), |l| format!("{:.1}", l / rw));
        println!(
            "{name:<18} {native:>8.3}s {:>8.2}s {:>5.1}x {:>8.2}s {:>5.1}x {lk_text:>16} {:>9.2} {lk_ratio:>9} {per_access:>9.3}",
            rw,
            rw / native,
            cg,
            cg / native,
            cg / rw
        );
        if is_outside {
            outside = Some(rw / native);
            outside_times = Some((native, rw));
            continue;
        }
        slowdowns.push(rw / native);
        vs_cachegrind.push(cg / rw);
        if let Some(l) = lk {
            vs_lackey.push(l / rw);
        }
        bytes.push(per_access);
    }
    println!("goals:");
    println!("  median slowdown {:.1}x (goal <= 10x)", median(slowdowns.clone()));
    println!(
        "  faster than cachegrind: {}/{} workloads, median {:.2}x (goal: all, >= 3x)",
        vs_cachegrind.iter().filter(|&&r| r > 1.0).count(),
        vs_cachegrind.len(),
        median(vs_cachegrind)
    );
    if !vs_lackey.is_empty() {
        let min = vs_lackey.iter().copied().fold(f64::INFINITY, f64::min);
        println!("  faster than lackey: at least {min:.1}x (goal >= 10x)");
    }
    if let (Some(o), Some((native, rw))) = (outside, outside_times) {
        println!("  overhead outside the function: {:+.0}% (goal <= 5%)", 100.0 * (o - 1.0));
        let (mut tiny_native, mut tiny_rw) = (Vec::new(), Vec::new());
        for _ in 0..rounds.max(5) {
            let mut cmd = Command::new(&kernels);
            cmd.args(["outside", "16"]);
            tiny_native.push(timed(cmd));
            tiny_rw.push(rewrite(&kernels, &["outside", "16"], "kernel", &trace).0);
        }
        let (tiny_native, tiny_rw) = (median(tiny_native), median(tiny_rw));
        let slope = (rw - tiny_rw) / (native - tiny_native).max(1e-9);
        println!(
            "    of which fixed: {:.1} ms (outside 16: native {:.1} ms, recorded {:.1} ms); per second of untraced \
             work: {:+.1}%",
            1e3 * (tiny_rw - tiny_native),
            1e3 * tiny_native,
            1e3 * tiny_rw,
            100.0 * (slope - 1.0)
        );
    }
    println!("  bytes per access on disk: median {:.2} (goal <= 1.5)", median(bytes));
    let _ = std::fs::remove_dir_all(&dir);
}

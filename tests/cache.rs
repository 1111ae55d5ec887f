//! The simulated D1/LL against valgrind's cachegrind, which nobody here
//! wrote: exactly on a cold-start program, within 1% on the matmul example.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// `report --json` with an explicit cache geometry.
fn report_with_cache(trace: &Path, d1: &str, ll: &str) -> serde_json::Value {
    let out = linetrace().args(["report", "--json", "--d1", d1, "--ll", ll]).arg(trace).output().expect("report");
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// (D1mr, D1mw, DLmr, DLmw) of a report.
fn simulated(report: &serde_json::Value) -> [u64; 4] {
    let m = &report["cache"]["misses"];
    let get = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("cache.misses.{k} in {m}"));
    [get("d1_read"), get("d1_write"), get("ll_read"), get("ll_write")]
}

/// The assembly example: no C library, `_start` jumps into `work`, which
/// exits by system call. Every data access of the run is `work`'s and both
/// caches start cold, so the figures must be equal, not close.
#[test]
fn cold_start_misses_equal_cachegrind_exactly() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/asm/cache_mix.S");
    let bin: PathBuf = std::env::temp_dir().join(format!("linetrace-cache-mix-{}", std::process::id()));
    let status = std::process::Command::new("gcc")
        .args(["-nostdlib", "-static", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "gcc failed on {}", src.display());
    // A small D1 (64 sets of 2) makes conflict misses; an LL whose sets the
    // data never fills keeps the instruction lines cachegrind also puts in
    // its LL from evicting anything.
    let (d1, ll) = ("4096,2,64", "131072,4,64");
    let cg = cachegrind_summary(&bin, &[], &["--D1=4096,2,64", "--LL=131072,4,64"]);
    let trace = trace_path("cache-mix");
    let out = record(&bin, "work", &[], &trace);
    assert!(out.status.success(), "record failed: {}", String::from_utf8_lossy(&out.stderr));
    let report = report_with_cache(&trace, d1, ll);
    assert_eq!(report["total"]["reads"].as_u64(), Some(cg.dr), "same reads as cachegrind's Dr");
    let ours = simulated(&report);
    assert_eq!(ours, [cg.d1mr, cg.d1mw, cg.dlmr, cg.dlmw], "D1mr D1mw DLmr DLmw");
    assert!(cg.d1mr > 10_000 && cg.d1mr < cg.dr * 9 / 10, "the program must both hit and miss: {cg:?}");
    let _ = std::fs::remove_file(&bin);
    let _ = std::fs::remove_file(&trace);
}

/// The matmul example scaled to 40x40 (38 KiB of matrices) with a D1 of
/// 8 KiB, so that most misses are capacity and conflict misses; the
/// matrices are first touched inside the multiply (`-DNO_INIT`), so only
/// the stack line differs between a cold start and cachegrind's warm one.
#[test]
fn matmul_misses_within_one_percent_of_cachegrind() {
    let bin = c_example("matmul", &["-DN=40", "-DNO_INIT"]);
    let cg = cachegrind_with(&bin, &[], &["--D1=8192,4,64", "--LL=8388608,16,64"], "matmul_naive");
    let trace = trace_path("matmul-cache");
    let out = record(&bin, "matmul_naive", &[], &trace);
    assert!(out.status.success(), "record failed: {}", String::from_utf8_lossy(&out.stderr));
    let report = report_with_cache(&trace, "8K,4,64", "8M,16,64");
    let ours = simulated(&report);
    let theirs = [cg.d1mr, cg.d1mw, cg.dlmr, cg.dlmw];
    for (name, (a, b)) in ["D1mr", "D1mw", "DLmr", "DLmw"].iter().zip(ours.iter().zip(&theirs)) {
        let off = (*a as f64 - *b as f64).abs() / (*b).max(1) as f64;
        assert!(off <= 0.01, "{name}: linetrace {a}, cachegrind {b} ({:.2}% apart)", off * 100.0);
    }
    assert!(cg.d1mr > 5_000, "capacity misses expected: {cg:?}");
    // Per function: the multiply's own row carries its misses.
    let by = linetrace()
        .args(["report", "--json", "--by", "function", "--d1", "8K,4,64", "--ll", "8M,16,64"])
        .arg(&trace)
        .output()
        .expect("report");
    let by: serde_json::Value = serde_json::from_slice(&by.stdout).expect("JSON");
    let row = by["by_function"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["key"] == "matmul_naive"))
        .expect("matmul_naive row")
        .clone();
    assert_eq!(row["self_misses"]["d1_read"].as_u64(), Some(ours[0]), "{row}");
    let _ = std::fs::remove_file(&trace);
}

/// Bad geometries are clear errors, before any decoding.
#[test]
fn bad_cache_geometries_are_refused() {
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/array_sweep_work.lntrace");
    for (flag, value, says) in
        [("--d1", "12K,8,64", "power of two"), ("--ll", "8M,16", "SIZE,WAYS,LINE"), ("--d1", "32K,8,60", "line size")]
    {
        let out = linetrace().args(["report", flag, value]).arg(&trace).output().expect("report");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(says) && !err.contains("panicked"), "{flag} {value}: {err}");
    }
}

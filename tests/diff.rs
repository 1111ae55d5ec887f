//! `linetrace diff`: the per-function read deltas of two builds against
//! cachegrind's, a golden table on checked-in traces, and the CI gate.

mod common;

use std::path::Path;

use common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Per-function reads of the traced extent, -O0 against -O2: the delta
/// linetrace reports equals the difference of cachegrind's Dr in the two
/// builds (matmul_naive calls nothing, so its self and total reads are
/// the whole extent's).
#[test]
fn read_deltas_between_builds_equal_cachegrind() {
    let o0 = c_example("matmul", &["-O0"]);
    let o2 = c_example("matmul", &[]);
    let (ta, tb) = (trace_path("diff-O0"), trace_path("diff-O2"));
    for (bin, trace) in [(&o0, &ta), (&o2, &tb)] {
        let out = record(bin, "matmul_naive", &[], trace);
        assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = linetrace().args(["diff", "--json"]).arg(&ta).arg(&tb).output().expect("diff");
    assert!(out.status.success(), "diff: {}", String::from_utf8_lossy(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let row = d["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["key"] == "matmul_naive"))
        .expect("matmul_naive row")
        .clone();
    let (cg0, cg2) = (cachegrind(&o0, &[], "matmul_naive"), cachegrind(&o2, &[], "matmul_naive"));
    let expected = cg2.dr as i64 - cg0.dr as i64;
    assert_eq!(row["delta_self_reads"].as_i64(), Some(expected), "{row}");
    assert_eq!(row["delta_total_reads"].as_i64(), Some(expected), "{row}");
    assert!(expected < -50_000, "-O2 reads far less than -O0: {expected}");
    let reads = d["metrics"].as_array().and_then(|m| m.iter().find(|m| m["name"] == "reads")).expect("reads");
    assert_eq!(reads["a"].as_f64(), Some(cg0.dr as f64));
    assert_eq!(reads["b"].as_f64(), Some(cg2.dr as f64));
}

/// The text table of the checked-in pair, against its golden file
/// (`LINETRACE_BLESS=1` rewrites it).
#[test]
fn diff_table_matches_the_golden_file() {
    let out = linetrace()
        .current_dir(root())
        .args(["diff", "--modules", "tests/data", "--ll", "8M,16,64"])
        .args(["tests/data/matmul_naive_O0.lntrace", "tests/data/matmul_naive_O2.lntrace"])
        .output()
        .expect("diff");
    assert!(out.status.success(), "diff: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let golden = root().join("tests/data/matmul_naive_diff.txt");
    if std::env::var_os("LINETRACE_BLESS").is_some() {
        std::fs::write(&golden, &text).expect("bless");
    }
    let want = std::fs::read_to_string(&golden).expect("golden file (LINETRACE_BLESS=1 writes it)");
    assert_eq!(text, want, "diff output changed; LINETRACE_BLESS=1 rewrites the golden file if that is right");
    assert!(text.contains("matmul_naive"), "{text}");
}

/// `--fail-if` makes diff a CI gate: exit 1 with the crossing on stderr
/// when crossed, 0 when not, 2 with a clear message for a bad condition.
#[test]
fn fail_if_gates_on_thresholds() {
    let run = |conditions: &[&str]| {
        let mut cmd = linetrace();
        cmd.current_dir(root()).args(["diff", "--modules", "tests/data"]);
        for c in conditions {
            cmd.args(["--fail-if", c]);
        }
        cmd.args(["tests/data/matmul_naive_O0.lntrace", "tests/data/matmul_naive_O2.lntrace"]).output().expect("diff")
    };
    let out = run(&["reads<-50%"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("threshold crossed: reads"), "{err}");
    assert_eq!(run(&["reads>+5%", "lines>+1%"]).status.code(), Some(0), "-O2 reads less, touches no more lines");
    // Swapped: -O0 after -O2 is a regression.
    let out = linetrace()
        .current_dir(root())
        .args(["diff", "--modules", "tests/data", "--fail-if", "reads>+5%"])
        .args(["tests/data/matmul_naive_O2.lntrace", "tests/data/matmul_naive_O0.lntrace"])
        .output()
        .expect("diff");
    assert_eq!(out.status.code(), Some(1));
    let out = run(&["reeds>+5%"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown metric") && !err.contains("panicked"), "{err}");
}

/// A cut trace (a recording that was killed, a file copied in part) counts
/// only part of its run: the comparison says so, in the table and in the
/// JSON, instead of printing ratios as if both runs were whole.
#[test]
fn a_cut_trace_is_named_in_the_warnings() {
    let whole = root().join("tests/data/matmul_naive_O2.lntrace");
    let bytes = std::fs::read(&whole).expect("trace");
    let cut = trace_path("diff-cut");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("cut copy");
    let a = root().join("tests/data/matmul_naive_O0.lntrace");
    let diff = |args: &[&str], a: &Path, b: &Path| {
        let mut cmd = linetrace();
        cmd.arg("diff").args(args).args(["--modules", "tests/data"]).arg(a).arg(b).current_dir(root());
        cmd.output().expect("diff runs")
    };
    let text = diff(&[], &a, &cut);
    assert!(text.status.success(), "diff: {}", String::from_utf8_lossy(&text.stderr));
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("warning: B is truncated"), "{stdout}");
    assert!(!stdout.contains("warning: A is"), "{stdout}");
    let json = diff(&["--json"], &cut, &a);
    let d: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let warnings = d["warnings"].as_array().expect("warnings");
    assert!(warnings.iter().any(|w| w.as_str().is_some_and(|w| w.starts_with("A is truncated"))), "{warnings:?}");
}

/// Two traces of `record --allocations` (two runs of an allocator's
/// workload) compare by their heaps: each heap metric equals what
/// `report --allocations` counts for that trace, there are no access
/// metrics (0 against 0), and `--fail-if` gates on heap metrics but
/// refuses one the comparison lacks.
#[test]
fn allocation_traces_compare_by_their_heaps() {
    let program = c_example("heap_mix", &[]);
    let (ta, tb) = (trace_path("diff-heap-a"), trace_path("diff-heap-b"));
    for (rounds, trace) in [("2000", &ta), ("3000", &tb)] {
        let out = record_with(&["--allocations"], &program, &[rounds], trace);
        assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
    }
    let heap = |trace: &Path| -> serde_json::Value {
        let out = linetrace().args(["report", "--allocations", "--json"]).arg(trace).output().expect("report");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")["heap"].clone()
    };
    let (ha, hb) = (heap(&ta), heap(&tb));
    let out = linetrace().args(["diff", "--json"]).arg(&ta).arg(&tb).output().expect("diff");
    assert!(out.status.success(), "diff: {}", String::from_utf8_lossy(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let metric = |name: &str| d["metrics"].as_array().and_then(|m| m.iter().find(|m| m["name"] == name)).cloned();
    for (name, path) in [
        ("allocator_calls", &["events"][..]),
        ("heap_blocks", &["blocks"]),
        ("heap_bytes", &["bytes"]),
        ("peak_live_bytes", &["peak", "bytes"]),
        ("live_bytes_at_end", &["at_end", "bytes"]),
        ("waste_bytes", &["waste"]),
    ] {
        let m = metric(name).unwrap_or_else(|| panic!("no {name} in {d}"));
        let get = |h: &serde_json::Value| path.iter().fold(h.clone(), |v, k| v[k].clone()).as_f64();
        assert_eq!(m["a"].as_f64(), get(&ha), "{name}");
        assert_eq!(m["b"].as_f64(), get(&hb), "{name}");
    }
    assert!(metric("heap_blocks").and_then(|m| m["b"].as_f64()) > metric("heap_blocks").and_then(|m| m["a"].as_f64()));
    assert!(metric("reads").is_none(), "no access metrics: {d}");
    let gate = |condition: &str| {
        let out = linetrace().args(["diff", "--fail-if", condition]).arg(&ta).arg(&tb).output().expect("diff");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    assert_eq!(gate("heap_blocks>+5%").0, Some(1), "3000 rounds allocate more blocks than 2000");
    assert_eq!(gate("heap_blocks>+1000%").0, Some(0));
    let (code, stderr) = gate("reads>+5%");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("this comparison has no reads"), "{stderr}");

    // Against a trace of a function's accesses, diff and the compare view
    // refuse, either way round: every read of the one faced a 0 of the
    // other, as if it read nothing ("reads 1501 0 0.000x").
    let accesses = root().join("tests/data/array_sweep_work.lntrace");
    for (a, b) in [(&accesses, &ta), (&ta, &accesses)] {
        for command in [&["diff"][..], &["view", "--screenshot", "/nonexistent-dir/x.png"]] {
            let out = linetrace().args(&command[..1]).arg(a).arg(b).args(&command[1..]).output().expect("runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
            assert!(stderr.contains("compares two traces of a kind"), "{command:?}: {stderr}");
        }
    }
}

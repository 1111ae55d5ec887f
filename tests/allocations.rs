//! `record --allocations` and `report --allocations` on real programs,
//! against valgrind's DHAT as the oracle nobody here wrote.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// DHAT's summary: (total bytes, total blocks, t-gmax bytes, t-gmax
/// blocks, t-end bytes, t-end blocks). libc's exit-time cleanup is off, as
/// it is outside valgrind.
fn dhat(program: &Path, args: &[&str]) -> [u64; 6] {
    let out = Command::new("valgrind")
        .args(["--tool=dhat", "--run-libc-freeres=no", "--dhat-out-file=/dev/null"])
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

/// One thread, every glibc size class, reallocs in place and moved, leaks:
/// totals, peak and leaks equal DHAT's exactly.
#[test]
fn whole_program_heap_equals_dhat() {
    let bin = c_example("heap_mix", &[]);
    let trace = trace_path("heap-mix");
    let out = record_allocations(&bin, &["5000"], &trace);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let h = heap_report(&trace);
    assert_eq!(ours(&h), dhat(&bin, &["5000"]), "[bytes, blocks, peak bytes, peak blocks, end bytes, end blocks]");
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
/// without it, no stacks are recorded.
#[test]
fn stacks_show_who_called_the_wrapper() {
    let bin = c_example("alloc_wrapper", &["-O1"]);
    let (with, without) = (trace_path("wrapper-stacks"), trace_path("wrapper-nostacks"));
    assert!(record_with(&["--allocations", "--alloc-stack", "3"], &bin, &[], &with).status.success());
    assert!(record_allocations(&bin, &[], &without).status.success());
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
    let dir = std::env::temp_dir().join(format!("linetrace-heaptrack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let out =
        Command::new("heaptrack").arg("-o").arg(dir.join("ht")).arg(&bin).arg("5000").output().expect("heaptrack runs");
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
    let leaked = megabytes(after("total memory leaked:"));
    let peak = megabytes(after("peak heap memory consumption:"));
    let blocks = h["blocks"].as_u64().expect("blocks");
    assert!(calls == blocks || calls == blocks + 1, "heaptrack's calls {calls}, our blocks {blocks}");
    let at_end = h["at_end"]["bytes"].as_f64().expect("bytes");
    assert!((leaked - at_end).abs() <= 0.005 * at_end, "leaked: heaptrack {leaked}, ours {at_end}");
    let our_peak = h["peak"]["bytes"].as_f64().expect("peak");
    assert!((peak - our_peak).abs() <= 0.02 * our_peak, "peak: heaptrack {peak}, ours {our_peak}");
}

//! `linetrace export`: each format read back with its own rules, on a
//! recursive trace (many nested frames).

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// A trace of `fib` (recursion.c reads n = 10 from stdin), recorded once.
fn fib_trace() -> PathBuf {
    static TRACE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TRACE
        .get_or_init(|| {
            let bin = c_example("recursion", &[]);
            let trace = trace_path("export-fib");
            let out = record(&bin, "fib", &[], &trace);
            assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
            trace
        })
        .clone()
}

fn export(trace: &Path, format: &str, extra: &[&str]) -> String {
    let out_path = trace.with_extension(format!("{format}{}", extra.join("")));
    let out = linetrace()
        .args(["export", "--force", "--format", format, "-o"])
        .arg(&out_path)
        .args(extra)
        .arg(trace)
        .output()
        .expect("export");
    assert!(out.status.success(), "export {format}: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string(&out_path).expect("export file")
}

fn totals(trace: &Path) -> (u64, u64, u64) {
    let r = report(trace);
    let get = |k: &str| r["total"][k].as_u64().expect("total");
    (get("reads"), get("writes"), r["metrics"]["line_fetches"].as_u64().expect("fetches"))
}

/// Folded stacks: `frames weight` per line, weights summing to the
/// trace's reads (writes, fetches), stacks rooted at fib and as deep as the
/// recursion; inferno draws an SVG of them.
#[test]
fn folded_weights_sum_to_the_totals_and_inferno_draws_them() {
    let trace = fib_trace();
    let (reads, writes, fetches) = totals(&trace);
    for (weight, want) in [("reads", reads), ("writes", writes), ("fetches", fetches)] {
        let text = export(&trace, "folded", &["--weight", weight]);
        let mut sum = 0;
        let mut deepest = 0;
        for line in text.lines() {
            let (stack, w) = line.rsplit_once(' ').expect("`stack weight`");
            sum += w.parse::<u64>().expect("integer weight");
            let frames: Vec<&str> = stack.split(';').collect();
            assert_eq!(frames[0], "fib", "{line}");
            assert!(frames.iter().all(|f| !f.is_empty()), "{line}");
            deepest = deepest.max(frames.len());
        }
        assert_eq!(sum, want, "--weight {weight}");
        assert!(deepest >= 9, "fib(10) nests 9 deep, saw {deepest}");
        if weight == "reads" {
            let mut svg = Vec::new();
            let mut options = inferno::flamegraph::Options::default();
            inferno::flamegraph::from_lines(&mut options, text.lines(), &mut svg).expect("inferno reads it");
            let svg = String::from_utf8(svg).expect("utf-8");
            assert!(svg.starts_with("<?xml") && svg.contains("<svg") && svg.contains("fib"), "{}", &svg[..200]);
        }
    }
}

/// Chrome trace events: a JSON object with `traceEvents`; every complete
/// event has name, ph "X", numeric ts/dur/pid/tid, slices on a thread
/// nest; one slice per call; counters carry numeric args.
#[test]
fn chrome_trace_events_follow_the_format() {
    let trace = fib_trace();
    let v: serde_json::Value = serde_json::from_str(&export(&trace, "chrome", &[])).expect("JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    let calls = dump(&trace).iter().filter(|l| l.split_whitespace().nth(1) == Some("call")).count();
    let slices: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), calls + 1, "one slice per call plus the invocation");
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for e in &slices {
        assert!(e["name"].as_str().is_some_and(|n| !n.is_empty()), "{e}");
        for k in ["ts", "dur", "pid", "tid"] {
            assert!(e[k].is_u64(), "{k} of {e}");
        }
        spans.push((e["ts"].as_u64().unwrap_or(0), e["ts"].as_u64().unwrap_or(0) + e["dur"].as_u64().unwrap_or(0)));
    }
    // X events on one thread must nest: any two are disjoint or one holds
    // the other.
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            let disjoint = a.1 <= b.0 || b.1 <= a.0;
            let nested = (a.0 <= b.0 && b.1 <= a.1) || (b.0 <= a.0 && a.1 <= b.1);
            assert!(disjoint || nested, "slices {a:?} and {b:?} overlap without nesting");
        }
    }
    let (reads, _, fetches) = totals(&trace);
    let root = spans.iter().map(|s| s.1 - s.0).max().unwrap_or(0);
    assert_eq!(root, reads, "the invocation's slice spans every read column");
    let counters: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    for name in ["working set", "line fetches", "bytes read per fetch"] {
        let track: Vec<_> = counters.iter().filter(|e| e["name"] == name).collect();
        assert!(!track.is_empty(), "counter track {name}");
        assert!(track.iter().all(|e| e["args"].as_object().is_some_and(|a| a.values().all(|x| x.is_number()))));
    }
    let fetched: u64 = counters
        .iter()
        .filter(|e| e["name"] == "line fetches")
        .map(|e| e["args"]["fetches"].as_u64().expect("count"))
        .sum();
    assert_eq!(fetched, fetches, "the fetch counter adds up to the trace's line fetches");
}

/// speedscope's evented profile: frames in `shared.frames`, events O/C
/// with valid frame indices, `at` non-decreasing within the profile's
/// start and end, every close matching the innermost open frame.
#[test]
fn speedscope_profiles_are_balanced() {
    let trace = fib_trace();
    let v: serde_json::Value = serde_json::from_str(&export(&trace, "speedscope", &[])).expect("JSON");
    assert_eq!(v["$schema"], "https://www.speedscope.app/file-format-schema.json");
    let frames = v["shared"]["frames"].as_array().expect("frames");
    assert!(frames.iter().all(|f| f["name"].is_string()));
    let profiles = v["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), 1);
    let p = &profiles[0];
    assert_eq!(p["type"], "evented");
    let (start, end) = (p["startValue"].as_u64().expect("start"), p["endValue"].as_u64().expect("end"));
    let mut open: Vec<u64> = Vec::new();
    let mut last = start;
    let mut opened = 0;
    for e in p["events"].as_array().expect("events") {
        let (frame, at) = (e["frame"].as_u64().expect("frame"), e["at"].as_u64().expect("at"));
        assert!((frame as usize) < frames.len(), "{e}");
        assert!(at >= last && at <= end, "{e} after {last}, end {end}");
        last = at;
        match e["type"].as_str() {
            Some("O") => {
                open.push(frame);
                opened += 1;
            }
            Some("C") => assert_eq!(open.pop(), Some(frame), "close of the innermost frame: {e}"),
            _ => panic!("event type: {e}"),
        }
    }
    assert!(open.is_empty(), "unclosed frames {open:?}");
    let calls = dump(&trace).iter().filter(|l| l.split_whitespace().nth(1) == Some("call")).count();
    assert_eq!(opened, calls + 1);
}

/// CSV: the documented header, nine fields a row, reads and writes adding
/// up to the trace's, columns non-decreasing, and the source line of fib's
/// reads named.
#[test]
fn csv_rows_are_the_accesses() {
    let trace = fib_trace();
    let text = export(&trace, "csv", &[]);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("column,thread,pc,function,file_line,address,line,size,kind"));
    let (reads, writes, _) = totals(&trace);
    let (mut r, mut w, mut last) = (0, 0, 0u64);
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 9, "{line}");
        let column: u64 = f[0].parse().expect("column");
        assert!(column >= last, "{line}");
        last = column;
        let addr = u64::from_str_radix(f[5].trim_start_matches("0x"), 16).expect("address");
        let cache_line = u64::from_str_radix(f[6].trim_start_matches("0x"), 16).expect("line");
        assert_eq!(addr / 64, cache_line, "{line}");
        match f[8] {
            "read" => r += 1,
            "write" => w += 1,
            "modify" => {
                r += 1;
                w += 1
            }
            other => panic!("kind {other}"),
        }
        assert!(f[3] == "fib" && f[4].starts_with("c/recursion.c:"), "{line}");
    }
    assert_eq!((r, w), (reads, writes));
}

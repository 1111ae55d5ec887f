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

/// A trace with no events (a recording stopped before the function's first
/// access, or a file cut inside its first events chunk): every format is
/// written, empty of accesses, where the walk over the trace used to fail
/// ("corrupt trace: the trace has no snapshot to start from"); and a cut
/// file says so, as `render` does.
#[test]
fn a_trace_without_events_exports_empty() {
    use trace_rt::format::{Metadata, TraceWriter, Trailer};
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("export-empty");
    std::fs::create_dir_all(&dir).expect("dir");
    let whole = dir.join("no-events.lntrace");
    let w = TraceWriter::new(std::fs::File::create(&whole).expect("create"), &Metadata::new("test")).expect("header");
    w.finish(&Trailer::default()).expect("finish");
    let bytes = std::fs::read(&whole).expect("read");
    let cut = dir.join("cut.lntrace");
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).expect("write");
    for (trace, note) in [(&whole, false), (&cut, true)] {
        for format in ["csv", "chrome", "folded", "speedscope"] {
            let out_path = dir.join(format!("{}.{format}", trace.file_stem().and_then(|s| s.to_str()).unwrap_or("t")));
            let out = linetrace()
                .args(["export", "--force", "--format", format, "-o"])
                .arg(&out_path)
                .arg(trace)
                .output()
                .expect("export");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "export {format} of {}: {stderr}", trace.display());
            assert_eq!(stderr.contains("note: the trace is truncated"), note, "{format}: {stderr}");
            let text = std::fs::read_to_string(&out_path).expect("export file");
            match format {
                "csv" => assert_eq!(text.lines().count(), 1, "the header only: {text}"),
                "folded" => assert!(text.is_empty(), "no stacks: {text}"),
                _ => {
                    serde_json::from_str::<serde_json::Value>(&text).expect("JSON");
                }
            }
        }
    }
}

/// Writes after the trace's last read (a function that crashed right after
/// a store) are exported, at the column after that read (a write's column is
/// the read after it), and counted as `report` counts them. The walk used to
/// stop at the last read and leave them out of every format.
#[test]
fn writes_after_the_last_read_are_exported() {
    use trace_rt::format::{AccessKind, Event, Implied, Metadata, Site, TraceWriter, Trailer};
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("export-last-write");
    std::fs::create_dir_all(&dir).expect("dir");
    let trace = dir.join("store-last.lntrace");
    let mut w =
        TraceWriter::new(std::fs::File::create(&trace).expect("create"), &Metadata::new("test")).expect("header");
    let read =
        w.add_site(Site { pc: 0x1000, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    let write =
        w.add_site(Site { pc: 0x1004, len: 4, kind: AccessKind::Write, size: 8, count: 1, implied: Implied::NONE });
    w.push(1, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x8000 }).expect("push");
    w.push(1, &Event::Access { site: read, addr: 0x5000 }).expect("push");
    w.push(1, &Event::Access { site: write, addr: 0x6000 }).expect("push");
    w.push(1, &Event::Access { site: write, addr: 0x6008 }).expect("push");
    w.finish(&Trailer::default()).expect("finish");
    assert_eq!(totals(&trace).0, 1);
    assert_eq!(totals(&trace).1, 2);
    let text = export(&trace, "csv", &[]);
    let rows: Vec<(&str, &str, &str)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0], f[5], f[8])
        })
        .collect();
    assert_eq!(rows, [("0", "0x5000", "read"), ("1", "0x6000", "write"), ("1", "0x6008", "write")], "{text}");
    let folded = export(&trace, "folded", &["--weight", "writes"]);
    let sum: u64 = folded.lines().filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok()).sum();
    assert_eq!(sum, 2, "{folded}");
}

/// An output that is not a regular file is written to, never replaced: a
/// link to this process's standard output (what `-o /dev/stdout` is, into
/// a pipe) carries the export down the pipe and stays a link; a link to a
/// regular file stays a link, and the file it names gets the export.
/// (Renamed over, `-o /dev/stdout` replaced the link with a regular file
/// holding the export, and `-o /dev/null` as root deleted the device.)
#[test]
fn outputs_that_are_not_regular_files_are_written_through() {
    let trace = fib_trace();
    let expected = export(&trace, "folded", &[]);
    assert!(!expected.is_empty());
    let dir = tempfile::tempdir().expect("tempdir");
    let is_link = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());

    let to_stdout = dir.path().join("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &to_stdout).expect("symlink");
    let mut cmd = linetrace();
    cmd.args(["export", "--format", "folded", "-o"]).arg(&to_stdout).arg(&trace);
    // Before the fix, the output check read the pipe it writes to, and
    // waited for ever.
    let run = run_bounded(cmd, std::time::Duration::from_secs(60));
    assert!(!run.timed_out && run.code == Some(0), "export to a pipe: {}", run.stderr);
    assert_eq!(run.stdout, expected, "the export goes down the pipe");
    assert!(is_link(&to_stdout), "the link is left alone");
    assert!(!dir.path().join("stdout.partial").exists());

    let real = dir.path().join("real.folded");
    std::fs::write(&real, "old").expect("write");
    let link = dir.path().join("link.folded");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let out = linetrace().args(["export", "--format", "folded", "-o"]).arg(&link).arg(&trace).output().expect("export");
    assert!(out.status.success(), "export through a link: {}", String::from_utf8_lossy(&out.stderr));
    assert!(is_link(&link), "the link stays a link");
    assert_eq!(std::fs::read_to_string(&real).expect("read"), expected, "the file it names has the export");
}

//! Mutation fuzzing of trace files through the CLI: seeded mutations of
//! the checked-in fixtures and of a synthetic many-chunk trace, each run
//! through `report`, `render` or `dump`. Every run must end (time limit per
//! case) in bounded memory, with exit code 0 or 2 and no panic, and a
//! mutation inside a middle chunk must be reported (damage, truncation or
//! an error), never read as if nothing happened.
//!
//! `LINETRACE_FUZZ_CASES=N` runs N cases (default 240); `LINETRACE_FUZZ_SEED`
//! picks another seed.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use trace_rt::format::{AccessKind, AllocKind, Allocation, Event, Implied, Metadata, Site, TraceWriter, Trailer};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A trace with many small chunks, several threads, calls and allocations.
fn synthetic(path: &Path) {
    let file = std::fs::File::create(path).expect("create");
    let mut w = TraceWriter::new(file, &Metadata::new("fuzz")).expect("header");
    w.set_chunk_target(256);
    let read =
        w.add_site(Site { pc: 0x1010, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    let write =
        w.add_site(Site { pc: 0x1020, len: 4, kind: AccessKind::Write, size: 16, count: 1, implied: Implied::NONE });
    for t in [7u32, 8] {
        w.push(t, &Event::InvocationStart { index: t, pc: 0x1000, sp: 0x8000 }).expect("push");
    }
    for i in 0..3000u64 {
        let t = if i % 3 == 0 { 8 } else { 7 };
        if i % 100 == 0 {
            w.push(t, &Event::Call { callsite: 0x1030, target: 0x2000, sp: 0x7ff8 }).expect("push");
            let a = Allocation {
                kind: AllocKind::Malloc,
                size: 64,
                align: 0,
                ptr_in: 0,
                ptr_out: 0x9000 + i,
                callsite: 0x1030,
            };
            w.push(t, &Event::Alloc(a)).expect("push");
        }
        w.push(t, &Event::Access { site: read, addr: 0x5000 + 8 * (i * 13 % 700) }).expect("push");
        w.push(t, &Event::Access { site: write, addr: 0x9000 + 16 * (i % 40) }).expect("push");
        if i % 100 == 50 {
            w.push(t, &Event::Return { sp: 0x8000 }).expect("push");
        }
    }
    w.finish(&Trailer::default()).expect("finish");
}

/// Offsets of the chunks of a trace: [(start, end)].
fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut at = 16;
    let mut out = Vec::new();
    while at + 24 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 12..at + 16].try_into().expect("4 bytes")) as usize;
        let end = (at + 24 + len).min(bytes.len());
        out.push((at, end));
        at = end;
    }
    out
}

/// What was done to a file, and whether it hit a middle chunk's bytes (the
/// change must then be reported).
struct Mutation {
    bytes: Vec<u8>,
    what: String,
    must_report: bool,
}

fn mutate(original: &[u8], rng: &mut Rng) -> Mutation {
    let mut b = original.to_vec();
    let spans = chunks(original);
    // A middle chunk: after the metadata chunk, before the end chunk.
    let middle = || spans.get(1..spans.len().saturating_sub(1)).filter(|m| !m.is_empty());
    let in_middle = |pos: usize| middle().is_some_and(|m| m.iter().any(|&(s, e)| pos >= s && pos < e));
    match rng.below(7) {
        0 => {
            let pos = rng.below(b.len());
            b[pos] ^= 1 << rng.below(8);
            Mutation { bytes: b, what: format!("bit flip at {pos}"), must_report: in_middle(pos) }
        }
        1 => {
            let pos = rng.below(b.len());
            let v = rng.next() as u8;
            let changed = b[pos] != v;
            b[pos] = v;
            Mutation { bytes: b, what: format!("byte {v:#x} at {pos}"), must_report: changed && in_middle(pos) }
        }
        2 => {
            // A chunk header field of a middle chunk: length, sizes or CRC.
            let Some(m) = middle() else { return mutate(original, rng) };
            let (start, _) = m[rng.below(m.len())];
            let field = [12, 16, 20, 4][rng.below(4)];
            let v = rng.next() as u32;
            let old = u32::from_le_bytes(b[start + field..start + field + 4].try_into().expect("4"));
            b[start + field..start + field + 4].copy_from_slice(&v.to_le_bytes());
            Mutation { bytes: b, what: format!("field {field} of chunk at {start} = {v:#x}"), must_report: v != old }
        }
        3 => {
            let cut = rng.below(b.len());
            b.truncate(cut);
            Mutation { bytes: b, what: format!("cut at {cut}"), must_report: true }
        }
        4 => {
            let pos = rng.below(b.len());
            let n = 1 + rng.below(64.min(b.len() - pos));
            b.drain(pos..pos + n);
            Mutation { bytes: b, what: format!("{n} bytes deleted at {pos}"), must_report: in_middle(pos) }
        }
        5 => {
            let pos = rng.below(b.len());
            let n = 1 + rng.below(64);
            let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            b.splice(pos..pos, junk);
            Mutation { bytes: b, what: format!("{n} bytes inserted at {pos}"), must_report: in_middle(pos) }
        }
        _ => {
            // A whole middle chunk repeated.
            let Some(m) = middle() else { return mutate(original, rng) };
            let (s, e) = m[rng.below(m.len())];
            let copy = original[s..e].to_vec();
            b.splice(e..e, copy);
            Mutation { bytes: b, what: format!("chunk at {s} repeated"), must_report: false }
        }
    }
}

#[test]
fn mutated_traces_never_panic_hang_or_pass_unnoticed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mutation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let synthetic_path = dir.join("synthetic.lntrace");
    synthetic(&synthetic_path);
    let fixtures: Vec<PathBuf> = vec![
        synthetic_path,
        root.join("tests/data/array_sweep_work.lntrace"),
        root.join("trace-rt/tests/data/v1-work.lntrace"),
        root.join("trace-rt/tests/data/v2-work.lntrace"),
    ];
    let originals: Vec<Vec<u8>> = fixtures.iter().map(|p| std::fs::read(p).expect("fixture")).collect();
    let cases: usize = std::env::var("LINETRACE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(240);
    let seed: u64 = std::env::var("LINETRACE_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    let mut rng = Rng(seed | 1);
    let file = dir.join("case.lntrace");
    let mut reported = 0;
    for case in 0..cases {
        let which = case % originals.len();
        let m = mutate(&originals[which], &mut rng);
        std::fs::write(&file, &m.bytes).expect("write case");
        let context = format!("case {case} (seed {seed}): {} of {}", m.what, fixtures[which].display());
        let mut cmd = linetrace();
        let command = ["report", "render", "dump"][case % 3];
        match command {
            "report" => cmd.args(["report", "--json", "--by", "function"]).arg(&file),
            "render" => cmd
                .args(["render", "--force", "--width", "300", "--height", "120", "-o"])
                .arg(dir.join("case.png"))
                .arg(&file),
            _ => cmd.args(["dump"]).arg(&file),
        };
        let run = run_bounded(cmd, Duration::from_secs(20));
        assert!(!run.timed_out, "{context}: {command} hung");
        assert!(matches!(run.code, Some(0 | 2)), "{context}: {command} exit {:?}: {}", run.code, run.stderr);
        assert!(!run.stderr.contains("panicked"), "{context}: {}", run.stderr);
        assert!(run.max_rss_kib < 90 * 1024, "{context}: {command} used {} KiB", run.max_rss_kib);
        if m.must_report && command == "report" && run.code == Some(0) {
            let r: serde_json::Value = serde_json::from_str(&run.stdout).expect("report JSON");
            let noticed = r["status"] != "complete" || !r["damage"].as_array().is_none_or(|d| d.is_empty());
            assert!(noticed, "{context}: the change went unnoticed: status {}", r["status"]);
            reported += 1;
        }
    }
    assert!(cases < 30 || reported > cases / 20, "few cases checked for reporting: {reported}");
}

//! Decode throughput and memory, on synthetic traces written with the
//! trace-rt writer.
//!
//! `cargo bench --bench decode` writes traces of 10M and 100M reads (a
//! strided sweep over a 1 MiB array with a call every 64 reads, plus scattered reads
//! into a 64 KiB table), then decodes each in a child process of this
//! benchmark (three times; the median is kept), which reports wall time and
//! its peak RSS (VmHWM). It prints
//! reads per second (one core) and the RSS ratio 100M : 10M, which should
//! stay near 1: decoding memory must not grow with the trace length.
//! `LINETRACE_BENCH_READS=a,b` changes the sizes.
//!
//! Then a real program: examples/c/matmul.c's `matmul_naive` on 464x464
//! doubles (-O2), recorded with the rewrite backend: 99.9M reads, whose
//! column-wise walk of `b` misses the working set on most of them. Its trace
//! is decoded in the child, in rounds alternating with the peer,
//! `valgrind --tool=cachegrind` (the same two caches simulated). Cachegrind
//! runs the whole program, so the peer is the difference between the
//! program multiplying twice and once (argument `2`, then `1`): one
//! multiply, the accesses the trace holds. It prints both medians and
//! their ratio. Then, the same way, a heap-heavy program:
//! examples/c/heap_reads.c's `work`, random reads over 200,000 live 64-byte
//! blocks, each access attributed to its block. Finding those blocks (the
//! two found last, then a walk of a tree of the live blocks) is a quarter
//! of its decode's samples (`perf record`), so it decodes far fewer reads
//! a second than the other traces (8.6M reads in 1.75 s against 99.9M in
//! 7.29 s for `matmul_naive`: medians of 3 rounds, one run of this bench).
//! `LINETRACE_BENCH_PROGRAM=0` skips both.
//!
//! `cargo bench --bench decode -- --draw TRACE COLUMNS_PER_PIXEL PICTURES`
//! decodes TRACE once, then draws PICTURES 1920x1080 bitmaps at that scale,
//! spread over the trace, and prints each one's milliseconds (wall, and
//! CPU of all threads, steadier on a shared machine): the work a
//! zoom step waits for in the viewer (below the summary's scale, a replay
//! summed into one span a pixel). Where the viewer would have summarized
//! the view a step out first ([`decoder::range_summary`]), it also prints
//! the time of that summary and of the picture drawn from it.
//! `cargo bench --bench view --
//! --write-only PATH READS` writes the miss-heavy trace the view bench
//! uses.

#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use decoder::model::{DecodeOptions, Model};

#[path = "common/mod.rs"]
mod common;
use common::{Pattern, build_c_example, median, peak_rss_kib, process_cpu_time, write_trace};

/// Side of the matrices of the real-program trace: 464^3 = 99.9M reads,
/// about as many as the larger synthetic trace (and a multiple of the
/// blocked multiply's tile, which the program also runs).
const MATMUL_N: u32 = 464;
/// Live blocks of the heap-heavy trace (examples/c/heap_reads.c): every
/// access to them is attributed to its block.
const HEAP_BLOCKS: u32 = 200_000;
/// Its random reads of those blocks, each through the table of pointers to
/// them.
const HEAP_READS: u32 = 4_000_000;

/// Child mode: decode one file, print "seconds reads rss_kib".
fn decode_child(path: &Path) {
    let start = Instant::now();
    let model = Model::decode(path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let secs = start.elapsed().as_secs_f64();
    println!("{secs} {} {}", model.total.reads, peak_rss_kib());
}

/// Draw mode: decode `path`, then time `pictures` bitmaps at
/// `per_pixel` columns a pixel, spread evenly over the trace.
fn draw(path: &Path, per_pixel: f64, pictures: usize) {
    use decoder::raster::{BitmapView, ColourBy, Palette, rasterize_bitmap};
    let model = Model::decode(path, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let (width, height) = (1920u32, 1080u32);
    let wide = per_pixel * f64::from(width);
    // All the rows the set reached, as the viewer shows them at first.
    let rows = f64::from(model.metrics.max_rows.max(1));
    for i in 0..pictures {
        let start = (model.columns as f64 - wide).max(0.0) * i as f64 / pictures.max(1) as f64;
        let view = BitmapView {
            columns: (start, start + wide),
            rows: (0.0, rows),
            width,
            height,
            alpha: 1.0,
            colour_by: ColourBy::BytesRead,
        };
        let (t, cpu) = (Instant::now(), process_cpu_time());
        rasterize_bitmap(&model, &view, &Palette::default()).expect("draw");
        let cpu = process_cpu_time().saturating_sub(cpu);
        println!(
            "draw {per_pixel} columns/pixel from column {start:.0}: {:.1} ms, cpu {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3,
            cpu.as_secs_f64() * 1e3
        );
        draw_refined(&model, &view);
    }
}

/// The viewer's other way to the same picture: the view it zoomed in from
/// (twice as wide, around it) summarized at rest, then the picture drawn
/// from that summary. Prints both times, if such a summary is wanted.
fn draw_refined(model: &Model, view: &decoder::raster::BitmapView) {
    use decoder::range_summary::{RangeSummary, wanted_for};
    use decoder::raster::{Palette, rasterize_bitmap_refined};
    let (a, b) = view.columns;
    let from = (a - (b - a) / 2.0).max(0.0);
    let before = (from, (from + 2.0 * (b - a)).min(model.columns as f64));
    let Some(request) = wanted_for(model, before, view.width, None) else { return };
    let (t, cpu) = (Instant::now(), process_cpu_time());
    let summary = RangeSummary::build(model, request, &mut |_, _| true).expect("range summary");
    let (made, made_cpu) = (t.elapsed(), process_cpu_time().saturating_sub(cpu));
    let (t, cpu) = (Instant::now(), process_cpu_time());
    let names = |pc: u64| format!("{pc:#x}");
    rasterize_bitmap_refined(model, Some(&summary), view, &Palette::default(), &names, &mut |_, _| true).expect("draw");
    let cpu = process_cpu_time().saturating_sub(cpu);
    println!(
        "  refined: summary of {} columns in blocks of {}: {:.1} ms, cpu {:.1} ms; picture from it: {:.1} ms, cpu {:.1} ms (fits: {})",
        request.to - request.from,
        summary.block_width(),
        made.as_secs_f64() * 1e3,
        made_cpu.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e3,
        summary.fits(view),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--draw") {
        let arg = |k: usize| args.get(i + k).expect("--draw TRACE COLUMNS_PER_PIXEL PICTURES");
        draw(Path::new(arg(1)), arg(2).parse().expect("columns per pixel"), arg(3).parse().expect("pictures"));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--write-only") {
        write_trace(Path::new(&args[i + 1]), args[i + 2].parse().expect("reads"), Pattern::Sweep);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--decode-child") {
        decode_child(Path::new(&args[i + 1]));
        return;
    }
    let sizes: Vec<u64> = std::env::var("LINETRACE_BENCH_READS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000_000, 100_000_000]);
    let dir = std::env::temp_dir();
    let exe = std::env::current_exe().expect("own path");
    let mut results = Vec::new();
    for &reads in &sizes {
        let path: PathBuf = dir.join(format!("linetrace-bench-{reads}-{}.lntrace", std::process::id()));
        let start = Instant::now();
        write_trace(&path, reads, Pattern::Sweep);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        eprintln!("wrote {reads} reads ({size} bytes) in {:.1}s", start.elapsed().as_secs_f64());
        // Median of three runs: the machine is noisy.
        let mut runs: Vec<(f64, f64, f64)> = (0..3).map(|_| decode_in_child(&exe, &path)).collect();
        let _ = std::fs::remove_file(&path);
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (secs, decoded, rss) = runs[1];
        println!(
            "decode {reads} reads: {:.2}s, {:.1}M reads/s, peak RSS {:.1} MiB, {:.3} bytes/read on disk",
            secs,
            decoded / secs / 1e6,
            rss / 1024.0,
            size as f64 / reads as f64
        );
        results.push((reads, rss));
    }
    if let (Some(first), Some(last)) = (results.first(), results.last())
        && results.len() > 1
    {
        println!("peak RSS ratio {}M : {}M reads = {:.2}", last.0 / 1_000_000, first.0 / 1_000_000, last.1 / first.1);
    }
    if std::env::var("LINETRACE_BENCH_PROGRAM").map_or(true, |v| v != "0") {
        real_program(&exe);
    }
}

/// Decodes `path` in a child process of `exe`: (seconds, reads, peak RSS
/// in KiB).
fn decode_in_child(exe: &Path, path: &Path) -> (f64, f64, f64) {
    let out = std::process::Command::new(exe).arg("--decode-child").arg(path).output().expect("child");
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<f64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    assert!(out.status.success() && f.len() == 3, "decode child failed: {}", String::from_utf8_lossy(&out.stderr));
    (f[0], f[1], f[2])
}

/// The real-program traces against cachegrind (see this file's docs).
fn real_program(exe: &Path) {
    let dir = std::env::temp_dir().join(format!("linetrace-bench-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let matmul = build_c_example("matmul", &dir, &[&format!("-DN={MATMUL_N}")]);
    against_cachegrind(
        exe,
        &dir,
        &format!("matmul_naive {MATMUL_N}x{MATMUL_N}"),
        (&matmul, "matmul_naive", &[]),
        ["1", "2"].map(|multiplies| vec![multiplies.to_string()]),
    );
    let heap_reads = build_c_example("heap_reads", &dir, &[]);
    let (blocks, reads) = (HEAP_BLOCKS.to_string(), HEAP_READS.to_string());
    against_cachegrind(
        exe,
        &dir,
        &format!("heap_reads {HEAP_BLOCKS} blocks, {HEAP_READS} reads"),
        (&heap_reads, "work", &[blocks.clone(), reads.clone()]),
        ["1", "2"].map(|passes| vec![blocks.clone(), reads.clone(), passes.to_string()]),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Records `function` of `program` run with `args` (the rewrite backend),
/// then decodes its trace in the child in 3 rounds alternating with the
/// peer: cachegrind's run with `peer_args[1]` less its run with
/// `peer_args[0]`, which differ by one call of the function. Prints both
/// medians and their ratio under `title`.
fn against_cachegrind(
    exe: &Path,
    dir: &Path,
    title: &str,
    (program, function, args): (&Path, &str, &[String]),
    peer_args: [Vec<String>; 2],
) {
    let trace = dir.join(format!("{function}.lntrace"));
    let summary = instrument::record(instrument::RecordOptions {
        program: program.to_path_buf(),
        args: args.iter().map(Into::into).collect(),
        function: Some(function.into()),
        output: trace.clone(),
        max_invocations: None,
        progress: None,
        backend: instrument::Backend::Rewrite,
    })
    .unwrap_or_else(|e| panic!("record {function}: {e}"));
    let cachegrind = |args: &[String]| {
        let mut cmd = std::process::Command::new("valgrind");
        cmd.args(["--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file=/dev/null"]).arg(program).args(args);
        let (secs, _, ok, _, err) = common::run_measured(&mut cmd);
        assert!(ok, "cachegrind failed: {err}");
        secs
    };
    let (mut decoded, mut peer) = (Vec::new(), Vec::new());
    let mut reads = 0.0;
    for _ in 0..3 {
        let (secs, r, _) = decode_in_child(exe, &trace);
        decoded.push(secs);
        reads = r;
        let once = cachegrind(&peer_args[0]);
        peer.push(cachegrind(&peer_args[1]) - once);
    }
    let _ = std::fs::remove_file(&trace);
    let (decoded, peer) = (median(decoded), median(peer));
    // On a noisy host the difference of two runs can vanish: then there is
    // no ratio to print, rather than a meaningless one.
    let ratio = if peer > 0.0 { format!("{:.2}", decoded / peer) } else { "not measurable".into() };
    println!(
        "{title} (-O2, rewrite backend: {} accesses, {:.1}M reads): decode {decoded:.2}s; \
         cachegrind, one call (2 less 1) {peer:.2}s; decode / cachegrind {ratio}",
        summary.accesses,
        reads / 1e6,
    );
}

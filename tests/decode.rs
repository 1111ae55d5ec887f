//! End-to-end tests of decoding real traces: `report --by`, the bitmap's
//! structure, and `render`.

mod common;

use std::collections::BTreeMap;

use common::*;
use decoder::model::{DecodeOptions, Model};

fn report_by(trace: &std::path::Path, by: &str) -> serde_json::Value {
    let out = linetrace().args(["report", "--json", "--by", by]).arg(trace).output().expect("report runs");
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Per-source-line reads of leaf functions equal cachegrind's per-line Dr
/// (and writes its Dw).
#[test]
fn per_line_reads_equal_cachegrind() {
    let trials = [
        ("array_sweep", "work"),
        ("list_vs_array", "sum_array"),
        ("list_vs_array", "sum_list"),
        ("matmul", "matmul_naive"),
        ("crash", "walk"),
    ];
    for (example, function) in trials {
        let bin = c_example(example, &[]);
        let args: &[&str] = if example == "crash" { &["1"] } else { &[] };
        let oracle: BTreeMap<(String, u32), (u64, u64)> = cachegrind_lines(&bin, args, function)
            .into_iter()
            .filter(|(_, c)| c.dr + c.dw > 0)
            .map(|(k, c)| (k, (c.dr, c.dw)))
            .collect();
        assert!(!oracle.is_empty(), "{function}: cachegrind has no lines");
        let trace = trace_path(&format!("lines-{function}"));
        assert!(record(&bin, function, args, &trace).status.success());
        let r = report_by(&trace, "line");
        let mut got = BTreeMap::new();
        for row in r["by_line"].as_array().expect("rows") {
            let key = row["key"].as_str().expect("key");
            let (file, line) = key.rsplit_once(':').expect("file:line");
            let file = file.rsplit('/').next().expect("name").to_string();
            let line: u32 = line.parse().expect("line number");
            let counts = (row["self_reads"].as_u64().expect("reads"), row["self_writes"].as_u64().expect("writes"));
            got.insert((file, line), counts);
        }
        assert_eq!(got, oracle, "{example} {function}");
    }
}

/// The checked-in fixture: `tests/data/array_sweep` and its trace of `work`
/// (see tests/data/README.md).
fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Example (a): the forward sweep inserts one new line every 4 columns at
/// increasing rows, the backward half-sweep only hits, and the final `ret`
/// adds the one stack line, in the last row. On the checked-in trace: the
/// numbers are the fixture binary's, whatever compiler is installed.
#[test]
fn array_sweep_bitmap_structure() {
    let trace = fixture("array_sweep_work.lntrace");
    let model = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    assert_eq!(model.columns, 376);
    let mut inserted_at = Vec::new();
    let mut inserted_row = Vec::new();
    let mut rows = Vec::new();
    let mut clock = 0;
    model
        .replay(0, model.columns, |column, set, _| {
            if set.clock() != clock {
                assert_eq!(set.clock(), clock + 1, "one insertion per column at most");
                clock = set.clock();
                inserted_at.push(column);
                let row = set.lines().iter().position(|l| l.last_touch == clock).expect("new line");
                inserted_row.push(row);
            }
            rows.push(set.lines().len());
        })
        .expect("replay");
    // 4000 bytes from a 64-aligned array: 63 lines; 16-byte loads: 4 per line.
    let forward: Vec<u64> = (0..63).map(|i| i * 4).collect();
    assert_eq!(&inserted_at[..63], &forward[..], "one insertion every 4 columns");
    assert_eq!(&inserted_row[..63], &(0..63).collect::<Vec<_>>()[..], "at increasing rows");
    assert_eq!(inserted_at.len(), 64, "backward sweep: hits only; then one more line");
    assert_eq!(inserted_at[63], 375, "the final ret's stack read is the last column");
    assert_eq!(inserted_row[63], 63, "the stack line sorts below the array");
    assert_eq!(rows[249], 63);
    assert!(rows[250..375].iter().all(|&r| r == 63), "no rows added by the backward sweep");
    assert_eq!(rows[375], 64);
}

/// `render` writes a PNG of the requested size with the flamegraph and the
/// bitmap, identical to the golden image (LINETRACE_BLESS=1 rewrites it),
/// from the checked-in trace and binary.
#[test]
fn render_matches_the_golden_image() {
    let trace = fixture("array_sweep_work.lntrace");
    let png_path = trace_path("render").with_extension("png");
    let out = linetrace()
        .args(["render", "--width", "400", "--height", "200", "--modules"])
        .arg(fixture(""))
        .arg("-o")
        .arg(&png_path)
        .arg(&trace)
        .output()
        .expect("render runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decoded = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png_path).expect("png")));
    let mut reader = decoded.read_info().expect("png header");
    let mut pixels = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut pixels).expect("png data");
    assert_eq!((info.width, info.height), (400, 200));
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/array_sweep_work.png");
    if std::env::var_os("LINETRACE_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().expect("dir")).expect("mkdir");
        std::fs::copy(&png_path, &golden).expect("bless");
    }
    let want = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&golden).expect("golden image")));
    let mut want_reader = want.read_info().expect("golden header");
    let mut want_pixels = vec![0; want_reader.output_buffer_size().expect("size")];
    want_reader.next_frame(&mut want_pixels).expect("golden data");
    assert!(pixels == want_pixels, "render differs from tests/data/array_sweep_work.png");
}

/// `report --by function` and `--by allocation` name the right things.
#[test]
fn report_tables_name_functions_and_allocation_sites() {
    let bin = c_example("alloc_churn", &[]);
    let trace = trace_path("tables");
    assert!(record(&bin, "churn", &[], &trace).status.success());
    let r = report_by(&trace, "allocation");
    let rows = r["by_allocation"].as_array().expect("rows");
    let blocks: u64 = rows.iter().map(|r| r["blocks"].as_u64().expect("blocks")).sum();
    assert_eq!(blocks, 8, "7 heap blocks and 1 mapping: {rows:?}");
    let site = |r: &serde_json::Value| r["site"].as_str().expect("site").to_string();
    // Heap blocks are attributed to the call in churn; the mapping to the
    // system call instruction in libc's mmap wrapper.
    let heap: Vec<String> = rows.iter().map(site).filter(|s| !s.ends_with("(mmap)")).collect();
    assert_eq!(heap.len(), 7);
    assert!(heap.iter().all(|s| s.starts_with("churn ") && s.contains("alloc_churn.c:")), "{heap:?}");
    let realloc = rows.iter().find(|r| site(r).ends_with("(realloc)")).expect("realloc row");
    assert_eq!(realloc["bytes"], 200);
    let live: u64 = rows.iter().map(|r| r["live_at_end"].as_u64().expect("live")).sum();
    assert_eq!(live, 0, "everything is freed");

    let r = report_by(&trace, "function");
    let rows = r["by_function"].as_array().expect("rows");
    let churn = rows.iter().find(|r| r["key"] == "churn").expect("churn row");
    assert_eq!(churn["total_reads"], r["total"]["reads"], "the root's total is every read");
    assert!(churn["self_reads"].as_u64() < churn["total_reads"].as_u64(), "churn calls memset/mmap");

    // In text, a table of the sites; a trace without allocations says it
    // has none, where it printed the table's header over no rows.
    let text = |trace: &std::path::Path| {
        let out = linetrace().args(["report", "--by", "allocation"]).arg(trace).output().expect("report runs");
        assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let none = "the trace records no allocation";
    let churn = text(&trace);
    assert!(churn.contains("allocation site") && !churn.contains(none), "{churn}");
    let sweep_trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/array_sweep_work.lntrace");
    let sweep = text(&sweep_trace);
    assert!(sweep.contains(none) && !sweep.contains("allocation site"), "{sweep}");
    // Nor does its heap report print empty tables.
    let out = linetrace().args(["report", "--allocations"]).arg(&sweep_trace).output().expect("report runs");
    let heap = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(heap.contains("records no allocator call") && !heap.contains("size class"), "{heap}");
}

/// A bad column range or size is a clear error, naming what is wrong;
/// a good range is drawn and named. (Written to /dev/null, which has no
/// image extension, every case failed for that alone.)
#[test]
fn render_rejects_bad_settings() {
    let bin = c_example("array_sweep", &[]);
    let trace = trace_path("render-bad");
    assert!(record(&bin, "work", &[], &trace).status.success());
    let png = trace.with_extension("png");
    let render = |args: &[&str]| linetrace().arg("render").args(args).arg("-o").arg(&png).arg(&trace).output();
    for (args, cause) in [
        (&["--columns", "10..5"][..], "the range is empty"),
        (&["--columns", "0..99999"], "outside the trace's 376 columns"),
        (&["--columns", "x"], "expected A..B"),
        (&["--alpha", "0"], "alpha 0 must be a positive number"),
        (&["--width", "3"], "at least 16x32 pixels"),
        (&["--width", "100000", "--height", "100000"], "pixel limit"),
        (&["--size", "100000x100000"], "pixel limit"),
        (&["--line-size", "48"], "line size 48 must be a power of two"),
    ] {
        let out = render(args).expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} must fail: {stderr}");
        assert!(stderr.starts_with("linetrace: error:") && stderr.contains(cause), "{args:?}: {stderr}");
        assert!(!png.exists(), "{args:?}: nothing written");
    }
    let out = render(&["--columns", "100..110"]).expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("columns 100..110 of 376)"), "the range drawn is named: {stderr}");
    // `--size WxH`, as the viewer takes it.
    let out = render(&["--size", "900x300"]).expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).expect("png")));
    let info = header.read_info().expect("png header");
    assert_eq!((info.info().width, info.info().height), (900, 300));
}

/// Source lines of `work` from a trace of `program`, symbolized with
/// separate debug files looked up under `debug_root`.
fn work_lines(program: &std::path::Path, debug_root: &std::path::Path) -> (Vec<String>, Vec<String>, Vec<String>) {
    let trace = trace_path(&format!("sym-{}", program.file_name().and_then(|n| n.to_str()).unwrap_or("x")));
    assert!(record(program, "work", &[], &trace).status.success());
    let model = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let symbols = decoder::symbols::Symbolizer::with_paths(
        &model.modules,
        decoder::symbols::SymbolPaths { debug_roots: vec![debug_root.to_path_buf()], module_dirs: vec![] },
    );
    let mut lines: Vec<String> = decoder::tables::access_table(&model, &symbols, decoder::tables::Grouping::Line)
        .into_iter()
        .map(|r| r.key)
        .collect();
    lines.sort();
    let functions: Vec<String> = decoder::tables::access_table(&model, &symbols, decoder::tables::Grouping::Function)
        .into_iter()
        .map(|r| r.key)
        .collect();
    (lines, functions, symbols.warnings().to_vec())
}

/// Plain, SHF_COMPRESSED and `.zdebug` DWARF, and a separate debug file
/// found by build-id, all give the same lines; without debug info the
/// function still has its name, lines are `??`, and there is one warning.
#[test]
fn symbolization_reads_every_form_of_debug_info() {
    let no_root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-debug-root");
    let plain = c_example("array_sweep", &[]);
    let (lines, functions, warnings) = work_lines(&plain, &no_root);
    assert!(lines.len() >= 3 && lines.iter().all(|l| l.contains("array_sweep.c:")), "{lines:?}");
    assert_eq!(functions, vec!["work".to_string()]);
    assert!(warnings.is_empty(), "{warnings:?}");
    for flag in ["-gz=zlib", "-gz=zlib-gnu"] {
        let compressed = c_example("array_sweep", &[flag]);
        assert_eq!(work_lines(&compressed, &no_root).0, lines, "{flag}");
    }

    // Debug info moved to <root>/.build-id/xx/rest.debug, symbols kept.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("debug-root-{}", std::process::id()));
    let stripped = dir.join("array_sweep_nodebug");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let run = |cmd: &str, args: &[&std::ffi::OsStr]| {
        let ok = std::process::Command::new(cmd).args(args).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "{cmd} failed");
    };
    let debug_file = dir.join("array_sweep.debug");
    run("objcopy", &["--only-keep-debug".as_ref(), plain.as_os_str(), debug_file.as_os_str()]);
    run("objcopy", &["--strip-debug".as_ref(), plain.as_os_str(), stripped.as_os_str()]);
    let notes = std::process::Command::new("readelf").arg("-n").arg(&stripped).output().expect("readelf");
    let build_id = String::from_utf8_lossy(&notes.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("gcc links a build-id");
    let by_id = dir.join(".build-id").join(&build_id[..2]);
    std::fs::create_dir_all(&by_id).expect("mkdir");
    std::fs::copy(&debug_file, by_id.join(format!("{}.debug", &build_id[2..]))).expect("copy");
    let (separate_lines, separate_functions, _) = work_lines(&stripped, &dir);
    assert_eq!(separate_lines, lines, "lines from the separate debug file");
    assert_eq!(separate_functions, functions);

    // A program rebuilt since the recording is not trusted for names.
    let trace = trace_path("rebuilt");
    let rebuilt = dir.join("array_sweep_rebuilt");
    std::fs::copy(&plain, &rebuilt).expect("copy");
    assert!(record(&rebuilt, "work", &[], &trace).status.success());
    let model = Model::decode(&trace, &DecodeOptions::default(), &mut |_| {}).expect("decode");
    let other = c_example("array_sweep", &["-O1"]);
    std::fs::copy(&other, &rebuilt).expect("rebuild");
    let symbols = decoder::symbols::Symbolizer::with_paths(
        &model.modules,
        decoder::symbols::SymbolPaths { debug_roots: vec![no_root.clone()], module_dirs: vec![] },
    );
    let rows = decoder::tables::access_table(&model, &symbols, decoder::tables::Grouping::Function);
    assert!(rows.iter().all(|r| r.key != "work"), "stale names must not show: {rows:?}");
    assert!(symbols.warnings().iter().any(|w| w.contains("changed since the recording")), "{:?}", symbols.warnings());

    // No debug info anywhere: names from the symbol table, ?? lines, one warning.
    let (bare_lines, bare_functions, bare_warnings) = work_lines(&stripped, &no_root);
    assert_eq!(bare_lines, vec!["??:??".to_string()]);
    assert_eq!(bare_functions, vec!["work".to_string()]);
    assert_eq!(bare_warnings.len(), 1, "{bare_warnings:?}");
    assert!(bare_warnings[0].contains("no debug info"), "{bare_warnings:?}");
}

/// Functions in libc (no DWARF installed) are named from its dynamic
/// symbols; the program's PIE code from its own symbols.
#[test]
fn libc_frames_are_named_from_dynamic_symbols() {
    let bin = c_example("list_vs_array", &[]);
    let trace = trace_path("libc-names");
    assert!(record(&bin, "main", &[], &trace).status.success());
    let r = report_by(&trace, "function");
    let keys: Vec<&str> = r["by_function"].as_array().expect("rows").iter().filter_map(|r| r["key"].as_str()).collect();
    assert!(keys.contains(&"main") && keys.contains(&"run") && keys.contains(&"sum_list"), "{keys:?}");
    assert!(keys.iter().any(|k| k.contains("printf") && !k.ends_with("@plt")), "printf from libc: {keys:?}");
    assert!(keys.contains(&"printf@plt"), "the PLT entry is named after its symbol: {keys:?}");
    assert!(!keys.iter().any(|k| k.starts_with("_init")), "PLT code is not attributed to _init: {keys:?}");
}

/// `linetrace at` names the same code as `addr2line -f -i -e MODULE ADDRESS`
/// (binutils): the function, file and line of the read at a column, and
/// every inlined frame, innermost first.
#[test]
fn at_agrees_with_addr2line() {
    let trials = [
        ("array_sweep", "work"),
        ("matmul", "matmul_blocked"),
        ("list_vs_array", "sum_list"),
        ("string_ops", "gather"),
        ("recursion", "fib"),
    ];
    let mut compared = 0;
    let mut inlined_seen = 0;
    for (example, function) in trials {
        let bin = c_example(example, &[]);
        let trace = trace_path(&format!("at-{function}"));
        let child = if example == "recursion" {
            let mut c = linetrace()
                .args(["record", "--quiet", "-f", function, "-o"])
                .arg(&trace)
                .arg("--")
                .arg(&bin)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn");
            use std::io::Write as _;
            c.stdin.take().expect("stdin").write_all(b"10\n").expect("stdin");
            c.wait().expect("wait")
        } else {
            record(&bin, function, &[], &trace).status
        };
        assert!(child.success(), "{function}");
        let columns = report(&trace)["columns"].as_u64().expect("columns");
        for k in 0..6u64 {
            let column = k * (columns - 1) / 5;
            let out = linetrace()
                .arg("at")
                .arg(&trace)
                .args(["--json", "--column", &column.to_string()])
                .output()
                .expect("at");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let at: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let a = &at["access"];
            let (Some(module), Some(address)) = (a["module"].as_str(), a["module_address"].as_u64()) else {
                panic!("{function} column {column}: no module address: {a}");
            };
            let oracle = std::process::Command::new("addr2line")
                .args(["-f", "-i", "-e", module, &format!("{address:#x}")])
                .output()
                .expect("addr2line (binutils) runs");
            let text = String::from_utf8_lossy(&oracle.stdout);
            let lines: Vec<&str> = text.lines().collect();
            let pairs: Vec<(&str, String)> = lines
                .chunks(2)
                .map(|p| {
                    let loc = p.get(1).copied().unwrap_or("??:?");
                    let loc = loc.split(" (discriminator").next().unwrap_or(loc);
                    let (file, line) = loc.rsplit_once(':').unwrap_or((loc, "?"));
                    let file = file.rsplit('/').next().unwrap_or(file);
                    (p[0], format!("{file}:{line}"))
                })
                .collect();
            let inlined = a["inlined"].as_array().expect("inlined");
            assert_eq!(inlined.len() + 1, pairs.len(), "{function} column {column}: frames {inlined:?} vs {pairs:?}");
            for (ours, theirs) in inlined.iter().zip(&pairs) {
                let file = ours["file"].as_str().map(|f| f.rsplit('/').next().unwrap_or(f)).unwrap_or("??");
                let here = format!("{file}:{}", ours["line"].as_u64().map_or("?".to_string(), |l| l.to_string()));
                assert_eq!(
                    (ours["function"].as_str().unwrap_or("??"), here),
                    (theirs.0, theirs.1.clone()),
                    "{function} column {column}"
                );
            }
            let innermost = &pairs[0].1;
            let file = a["file"].as_str().map(|f| f.rsplit('/').next().unwrap_or(f)).unwrap_or("??");
            assert_eq!(&format!("{file}:{}", a["line"]), innermost, "{function} column {column}: innermost location");
            assert_eq!(a["function"].as_str(), Some(pairs[pairs.len() - 1].0), "{function} column {column}: function");
            compared += 1;
            inlined_seen += inlined.len();
        }
    }
    assert_eq!(compared, 30);
    assert!(inlined_seen > 0, "the gather's intrinsics are inlined frames");
}

/// Row labels name static arrays in `.bss` beyond the file's last page
/// (mapped anonymously next to the program): matmul's `a` and `b` are
/// 4.5 KiB each, past the page that holds `c`.
#[test]
fn row_labels_name_bss_arrays_past_the_file() {
    let bin = c_example("matmul", &[]);
    let trace = trace_path("matmul-rows");
    let out = record(&bin, "matmul_naive", &[], &trace);
    assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
    let columns = report(&trace)["columns"].as_u64().expect("columns");
    let out = linetrace().args(["at", "--column", &(columns - 1).to_string()]).arg(&trace).output().expect("at");
    let text = String::from_utf8_lossy(&out.stdout);
    let labels: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("rows:"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(labels.contains(&"a") && labels.contains(&"b"), "labels {labels:?} in\n{text}");
    assert!(labels.iter().all(|l| !l.starts_with("0x")), "unnamed rows: {labels:?}");
}

/// Rows of memory allocated before the recording began (so the recorder saw
/// no allocation of it) are named by the mapping holding it, with both
/// backends: early_heap's small blocks by the heap, its first large one
/// (malloc maps it on its own) as anonymous memory. The second call's small
/// block lies past the heap the recorder found at the first call, so it is
/// named only if the recorder read the map again. Every row is checked
/// against the addresses the program printed, through `at --row`.
#[test]
fn row_labels_name_memory_allocated_before_the_trace() {
    let bin = c_example("early_heap", &[]);
    for backend in ["rewrite", "ptrace"] {
        let trace = trace_path(&format!("early-heap-{backend}"));
        let out = record_with(&["--backend", backend, "-f", "work"], &bin, &[], &trace);
        assert!(out.status.success(), "{backend}: {}", String::from_utf8_lossy(&out.stderr));
        // `round=R small=0x… large=0x… sum=…`, one line a call.
        let printed = String::from_utf8_lossy(&out.stdout).to_string();
        let blocks: Vec<(String, u64, u64)> = printed
            .lines()
            .flat_map(|line| {
                let round = line.split_whitespace().next().unwrap_or_default().to_string();
                line.split_whitespace()
                    .filter_map(|w| {
                        let (name, hex) = w.split_once("=0x")?;
                        let size = if name == "small" { 512 } else { 1 << 20 };
                        Some((format!("{round} {name}"), u64::from_str_radix(hex, 16).ok()?, size))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(blocks.len(), 4, "{printed}");
        let columns = report(&trace)["columns"].as_u64().expect("columns");
        let at = |row: Option<usize>| -> serde_json::Value {
            let mut cmd = linetrace();
            cmd.args(["at", "--json", "--column", &(columns - 1).to_string()]).arg(&trace);
            if let Some(row) = row {
                cmd.args(["--row", &row.to_string()]);
            }
            let out = cmd.output().expect("at");
            assert!(out.status.success(), "at: {}", String::from_utf8_lossy(&out.stderr));
            serde_json::from_slice(&out.stdout).expect("at --json")
        };
        let bands = at(None)["bands"].as_array().expect("bands").clone();
        assert!(bands.iter().all(|b| !b["label"].as_str().is_some_and(|l| l.starts_with("0x"))), "{bands:?}");
        // Each block's label, from its rows' labels; eight lines of each are
        // read.
        let mut labels: Vec<(String, String)> = Vec::new();
        for b in &bands {
            let (first, rows) = (b["first_row"].as_u64().expect("row") as usize, b["rows"].as_u64().expect("rows"));
            for row in first..first + rows as usize {
                let line = at(Some(row))["line"]["address"].as_u64().expect("line address");
                for (block, start, size) in &blocks {
                    if line + 64 > *start && line < start + size {
                        labels.push((block.clone(), b["label"].as_str().unwrap_or_default().to_string()));
                    }
                }
            }
        }
        for (block, want) in
            [("round=0 small", "heap"), ("round=0 large", "anonymous memory"), ("round=1 small", "heap")]
        {
            let got: Vec<&str> = labels.iter().filter(|(b, _)| b == block).map(|(_, l)| l.as_str()).collect();
            assert_eq!(got, [want; 8], "{backend}: {block}'s rows; bands {bands:?}");
        }
    }
}

//! What the benches share: building the C examples, synthetic traces,
//! measuring a child process.

#![allow(dead_code)]

use std::path::Path;

use trace_rt::format::{AccessKind, Event, Implied, Metadata, Site, TraceWriter, Trailer};

/// Builds `examples/c/NAME.c` into `dir` with `gcc -O2 -g` and `flags`.
pub fn build_c_example(name: &str, dir: &Path, flags: &[&str]) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c").join(format!("{name}.c"));
    let out = dir.join(name);
    let ok = std::process::Command::new("gcc")
        .args(["-O2", "-g"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "gcc failed on {}", src.display());
    out
}

/// What a synthetic trace reads.
#[derive(Clone, Copy, Debug)]
pub enum Pattern {
    /// A strided sweep over a 1 MiB array, a call every 64 reads, one read
    /// in eight scattered over a 64 KiB table.
    Sweep,
    /// One read in three scattered over 16 MiB: about a third of the reads
    /// miss the working set, the hard case for drawing.
    MissHeavy,
}

/// Writes `reads` reads of `pattern` to `path`.
pub fn write_trace(path: &Path, reads: u64, pattern: Pattern) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut w = TraceWriter::new(file, &Metadata::new("synthetic")).expect("header");
    let sweep =
        w.add_site(Site { pc: 0x1000, len: 4, kind: AccessKind::Read, size: 16, count: 1, implied: Implied::NONE });
    let store =
        w.add_site(Site { pc: 0x1004, len: 4, kind: AccessKind::Write, size: 16, count: 1, implied: Implied::NONE });
    let table =
        w.add_site(Site { pc: 0x1010, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
    let t = 1;
    w.push(t, &Event::InvocationStart { index: 0, pc: 0x1000, sp: 0x7fff_0000 }).expect("push");
    let array = 0x10_0000_0000u64;
    let lut = 0x20_0000_0000u64;
    let (every, spread) = match pattern {
        Pattern::Sweep => (8, 8192u64),
        Pattern::MissHeavy => (3, 1 << 21),
    };
    let mut seed = 0x1234_5678u64;
    for i in 0..reads {
        if i % 64 == 0 {
            w.push(t, &Event::Call { callsite: 0x1008, target: 0x2000, sp: 0x7ffe_fff8 }).expect("push");
        }
        if i % every == every - 1 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            w.push(t, &Event::Access { site: table, addr: lut + ((seed >> 33) % spread) * 8 }).expect("push");
        } else {
            let addr = array + (i * 16) % (1 << 20);
            w.push(t, &Event::Access { site: sweep, addr }).expect("push");
            if i % 4 == 0 {
                w.push(t, &Event::Access { site: store, addr }).expect("push");
            }
        }
        if i % 64 == 63 {
            w.push(t, &Event::Return { sp: 0x7fff_0000 }).expect("push");
        }
    }
    w.push(t, &Event::InvocationEnd { index: 0 }).expect("push");
    w.finish(&Trailer::default()).expect("finish");
}

/// The middle value; for an even count, the mean of the two middle ones
/// (0 for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n.is_multiple_of(2) => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        _ => v[n / 2],
    }
}

/// Peak resident memory of this process, KiB.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmHWM:")?.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user and system) this process has used, all its threads.
/// Steadier than wall time on a shared machine for comparing two builds:
/// time the machine gives to others does not count.
pub fn process_cpu_time() -> std::time::Duration {
    // SAFETY: rusage is plain data the kernel fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer; RUSAGE_SELF always exists.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return std::time::Duration::ZERO;
    }
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Runs a command; returns wall seconds, the child's peak RSS in KiB
/// (`wait4`), its exit status and its output.
// The child is reaped by `wait4` below (std's `wait` cannot report rusage).
#[allow(clippy::zombie_processes)]
pub fn run_measured(cmd: &mut std::process::Command) -> (f64, u64, bool, String, String) {
    use std::io::Read;
    let start = std::time::Instant::now();
    let mut child =
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn");
    let (mut o, mut e) = (child.stdout.take().expect("stdout"), child.stderr.take().expect("stderr"));
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = o.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = e.read_to_string(&mut s);
        s
    });
    let mut status = 0;
    // SAFETY: rusage is plain data the kernel fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: our own child, valid out-pointers; it is reaped here.
    unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (
        start.elapsed().as_secs_f64(),
        usage.ru_maxrss as u64,
        ok,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

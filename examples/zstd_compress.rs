//! Third-party C code shipped inside a crate: zstd's compressor, from the C
//! sources the `zstd-sys` crate builds. `work` compresses 96 KiB of text-like
//! data once: tens of millions of instructions in `ZSTD_*`, `HUF_*` and
//! `FSE_*` functions, which nothing else in the program calls. Trace
//! `zstd_compress::work`: each of those functions' reads equal cachegrind's.
//!
//! Usage: `zstd_compress [KIB]` compresses KIB KiB (default 96; the recorder
//! benchmark uses a larger input so that the run is more than start-up).

use std::hint::black_box;

/// Compresses `data` at zstd's default level; returns the compressed size.
#[inline(never)]
pub fn work(data: &[u8]) -> usize {
    zstd::bulk::compress(data, 3).map_or(0, |v| v.len())
}

fn main() {
    let kib: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 96,
        Some(Ok(k)) if k > 0 => k,
        Some(_) => {
            eprintln!("usage: zstd_compress [KIB > 0]");
            std::process::exit(2);
        }
    };
    // Words of a small vocabulary in a pseudo-random order: compressible,
    // but not trivially.
    let words = ["cache", "line", "memory", "read", "write", "frame", "heap", "stack", "trace", "column"];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut data = Vec::with_capacity(kib << 10);
    while data.len() < kib << 10 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(words[(state % words.len() as u64) as usize].as_bytes());
        data.push(if state & 0x30 == 0 { b'\n' } else { b' ' });
    }
    println!("{} -> {} bytes", data.len(), work(black_box(&data)));
}

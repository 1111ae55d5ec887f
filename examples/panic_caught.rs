//! A Rust panic caught inside the traced function: `work` calls `inner` for
//! five indices under `catch_unwind`; index 3 panics. Trace `work` (as
//! `panic_caught::work`): the output must equal the native run's.

use std::hint::black_box;

#[inline(never)]
fn inner(v: &[u64], i: usize) -> u64 {
    if i == 3 {
        panic!("index three");
    }
    v[i] * 2
}

/// Sums `inner` over five indices, counting a panic as 1000.
#[inline(never)]
pub fn work(v: &[u64]) -> u64 {
    let mut s = 0;
    for i in 0..5 {
        s += std::panic::catch_unwind(|| inner(v, i)).unwrap_or(1000);
    }
    s
}

fn main() {
    std::panic::set_hook(Box::new(|info| eprintln!("panicked: {info}")));
    let v: Vec<u64> = (0..8).collect();
    println!("work={}", work(black_box(&v)));
}

//! (a) in Rust: double every element of a 1000-element array, then halve the
//! first 500 walking backwards. Trace `array_sweep::work`:
//!
//! ```sh
//! cargo build --release --example array_sweep
//! linetrace record -f work -- target/release/examples/array_sweep
//! ```

use std::hint::black_box;

const LEN: usize = 1000;

#[inline(never)]
fn work(array: &mut [i32; LEN]) {
    for v in array.iter_mut() {
        *v *= 2;
    }
    for v in array[..LEN / 2].iter_mut().rev() {
        *v /= 2;
    }
}

fn main() {
    let mut array = [0i32; LEN];
    for (i, v) in array.iter_mut().enumerate() {
        *v = i as i32;
    }
    work(black_box(&mut array));
    let sum: i64 = array.iter().map(|&v| i64::from(v)).sum();
    println!("sum={sum}");
}

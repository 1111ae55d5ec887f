//! (b) in Rust: sum 256 values from a Vec, then from a linked list of boxed
//! nodes. Trace `sum_vec` or `sum_list`.

use std::hint::black_box;

struct Node {
    value: i64,
    next: Option<Box<Node>>,
}

#[inline(never)]
fn sum_vec(values: &[i64]) -> i64 {
    values.iter().sum()
}

#[inline(never)]
fn sum_list(mut node: Option<&Node>) -> i64 {
    let mut sum = 0;
    while let Some(n) = node {
        sum += n.value;
        node = n.next.as_deref();
    }
    sum
}

fn main() {
    let values: Vec<i64> = (0..256).collect();
    let mut head: Option<Box<Node>> = None;
    for &v in values.iter().rev() {
        head = Some(Box::new(Node { value: v, next: head }));
    }
    let a = sum_vec(black_box(&values));
    let b = sum_list(black_box(head.as_deref()));
    println!("vec={a} list={b}");
}

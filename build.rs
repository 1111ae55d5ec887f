//! Links the `linetrace` binary as a position-dependent executable.
//!
//! The binary carries the viewer (Bevy), and as a position-independent
//! executable it started with 460k relative relocations for the dynamic
//! loader (an 11 MB table) and a few thousand page faults: 9 ms before
//! `main`, for every `record` and `report` as much as for `view`, half of
//! the recorder's fixed cost outside a traced function (issue 8). Linked
//! at a fixed address, the same objects need none of that.

fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
    println!("cargo:rerun-if-changed=build.rs");
}

//! Builds the allocation agent (`agent/alloc_agent.c`), a shared library
//! `linetrace record --allocations` preloads into the program; the bytes
//! are embedded in `trace_rt::agent::ALLOC_AGENT`, so an installed
//! linetrace needs no file next to it. Without a C compiler the agent is
//! empty and recording allocations says so.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "agent/alloc_agent.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("liblinetrace_alloc.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".to_string());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(source)
        .args(["-ldl", "-pthread"])
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        println!("cargo:warning=no C compiler ({cc}): `record --allocations` will be unavailable");
        std::fs::write(&out, b"").expect("write an empty agent");
    }
}

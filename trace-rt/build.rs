//! Builds the allocation agent (`agent/alloc_agent.c`), a shared library
//! `linetrace record --allocations` preloads into the program; the bytes
//! are embedded in `trace_rt::agent::ALLOC_AGENT`, so an installed
//! linetrace needs no file next to it. Without a C compiler the agent is
//! empty and recording allocations says so.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let sources = ["agent/alloc_agent.c", "agent/unwind.c", "agent/hooks.c"];
    for file in sources.iter().chain(&["agent/unwind.h", "agent/agent.h"]) {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("liblinetrace_alloc.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".to_string());
    let compiled = Command::new(&cc)
        // Frame pointers: each wrapper hands its own frame to the unwinder
        // as the place to start from.
        .args(["-shared", "-fPIC", "-O2", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .args(sources)
        // libgcc_s: _Unwind_Find_FDE, the unwind tables' index.
        .args(["-ldl", "-pthread", "-lgcc_s"])
        .status();
    match compiled {
        Ok(status) if status.success() => {}
        // The compiler ran and refused the agent: a bug in it, not a
        // missing tool (its messages are above).
        Ok(status) => panic!("{cc} failed to build the allocation agent ({status})"),
        Err(_) => {
            println!("cargo:warning=no C compiler ({cc}): `record --allocations` will be unavailable");
            std::fs::write(&out, b"").expect("write an empty agent");
        }
    }
}

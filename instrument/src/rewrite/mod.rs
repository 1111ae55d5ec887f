//! The binary-rewriting recorder's parts that do not need a live process:
//! the layout shared with the translated code, block translation, and the
//! conversion of the records it writes into trace events.
//!
//! Design (the "B"): linetrace translates, the code cache lives in
//! the target, ptrace is the control channel. The cache and the thread's
//! record buffer are shared memory (a memfd mapped in both processes), so
//! linetrace writes translations and reads records without system calls, and
//! keeps every record even when the target dies.

pub mod codegen;
pub mod layout;
pub mod records;
pub mod region;

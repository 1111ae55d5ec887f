use std::path::PathBuf;

/// Everything that can make recording fail.
#[derive(Debug, thiserror::Error)]
pub enum InstrumentError {
    /// A file could not be read.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The program could not be started.
    #[error("cannot run {program}: {cause}")]
    Spawn {
        /// The program as given.
        program: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The file is not an ELF executable.
    #[error("{0} is not an ELF executable")]
    NotElf(PathBuf),
    /// The file is ELF for another machine.
    #[error("{path} is a {arch} executable; linetrace traces x86-64 only")]
    WrongArchitecture {
        /// The file.
        path: PathBuf,
        /// Its architecture.
        arch: String,
    },
    /// The executable has no function symbols at all.
    #[error("{0} has no symbol table (stripped?): cannot find the function to trace; rebuild without -s")]
    Stripped(PathBuf),
    /// No symbol matched.
    #[error("no function named '{name}' in {path}; closest: {closest}")]
    FunctionNotFound {
        /// What the user asked for.
        name: String,
        /// The executable.
        path: PathBuf,
        /// The nearest names.
        closest: String,
    },
    /// Several functions matched.
    #[error("'{name}' matches several functions, name one: {candidates}")]
    AmbiguousFunction {
        /// What the user asked for.
        name: String,
        /// The candidates.
        candidates: String,
    },
    /// A ptrace or wait call failed.
    #[error("tracing failed ({what}): {cause}")]
    Ptrace {
        /// What was being done.
        what: &'static str,
        /// The system error.
        cause: std::io::Error,
    },
    /// The process map did not contain the executable.
    #[error("cannot find {0} in the target's memory map")]
    NotMapped(PathBuf),
    /// Writing the trace failed.
    #[error("writing the trace: {0}")]
    Trace(#[from] trace_rt::format::FormatError),
}

/// Adapter for `map_err` on system calls.
pub(crate) fn ptrace_err(what: &'static str) -> impl FnOnce(std::io::Error) -> InstrumentError {
    move |cause| InstrumentError::Ptrace { what, cause }
}

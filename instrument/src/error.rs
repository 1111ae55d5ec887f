use std::path::PathBuf;

/// Everything that can make recording fail. Causes are `#[source]`s, not
/// part of the message, so a chain prints each of them once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstrumentError {
    /// The trace file could not be created.
    #[error("cannot create {path}")]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// The program could not be started.
    #[error("cannot run {program}")]
    Spawn {
        /// The program as given.
        program: String,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// Reading symbols or finding the function failed.
    #[error(transparent)]
    Symbols(#[from] decoder::symbols::SymbolError),
    /// `-f MODULE:NAME` named a module the process does not map.
    #[error("no module named '{module}' is loaded when the program starts; loaded: {loaded}")]
    ModuleNotLoaded {
        /// The module asked for.
        module: String,
        /// The modules mapped.
        loaded: String,
    },
    /// An IFUNC whose selected implementation could not be found.
    #[error("cannot tell which implementation of {name} the program uses; name one of: {options}")]
    UnresolvedIfunc {
        /// The IFUNC.
        name: String,
        /// Its likely implementations.
        options: String,
    },
    /// The program ended before the function could be looked up.
    #[error("the program ended before linetrace could look up '{function}' in its libraries")]
    EndedBeforeStart {
        /// The function asked for.
        function: String,
    },
    /// A ptrace or wait call failed.
    #[error("tracing failed ({what})")]
    Ptrace {
        /// What was being done.
        what: &'static str,
        /// The system error.
        #[source]
        cause: std::io::Error,
    },
    /// The process map did not contain the executable.
    #[error("cannot find {0} in the target's memory map")]
    NotMapped(PathBuf),
    /// Writing the trace failed.
    #[error("writing the trace")]
    Trace(#[from] trace_rt::format::FormatError),
    /// linetrace was built without a C compiler: no allocation agent.
    #[error("this linetrace was built without a C compiler, so it has no allocation agent (install gcc and rebuild)")]
    AgentUnavailable,
    /// A static program cannot preload the allocation agent.
    #[error("{0} is statically linked: --allocations needs a dynamically linked program (the agent is preloaded)")]
    StaticProgram(PathBuf),
    /// The rewriter cannot translate the program's code.
    #[error(transparent)]
    Rewrite(#[from] crate::rewrite::codegen::CodegenError),
    /// The translated code's records made no sense (a rewriter bug).
    #[error(transparent)]
    Records(#[from] crate::rewrite::records::RecordError),
    /// A custom allocator function (`--alloc-fn`) cannot be hooked.
    #[error("--alloc-fn {name}: {reason}")]
    AllocFn {
        /// The function as given.
        name: String,
        /// Why not.
        reason: String,
    },
    /// The agent's log could not be read.
    #[error(transparent)]
    AgentLog(#[from] trace_rt::agent::AgentLogError),
}

/// Adapter for `map_err` on system calls.
pub(crate) fn ptrace_err(what: &'static str) -> impl FnOnce(std::io::Error) -> InstrumentError {
    move |cause| InstrumentError::Ptrace { what, cause }
}

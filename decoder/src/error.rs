/// Everything that can go wrong decoding a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The trace file could not be read or is malformed.
    #[error(transparent)]
    Format(#[from] trace_rt::format::FormatError),
    /// The trace is well formed but its content cannot be right.
    #[error("corrupt trace: {0}")]
    Corrupt(String),
    /// A configuration value is out of range.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
    /// The thread asked for made no events in the trace.
    #[error("thread {thread} is not in this trace (threads with events: {})", list_threads(known))]
    NoSuchThread {
        /// The thread asked for.
        thread: u32,
        /// The threads that are there.
        known: Vec<u32>,
    },
    /// A long piece of work was stopped by its caller.
    #[error("cancelled")]
    Cancelled,
}

fn list_threads(known: &[u32]) -> String {
    if known.is_empty() {
        return "none".into();
    }
    known.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

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
    /// A long piece of work was stopped by its caller.
    #[error("cancelled")]
    Cancelled,
}

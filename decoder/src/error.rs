/// Everything that can go wrong decoding a trace.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The trace file could not be read or is malformed.
    #[error(transparent)]
    Format(#[from] trace_rt::format::FormatError),
    /// A configuration value is out of range.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
}

use std::io;

/// Everything that can go wrong reading or writing a trace file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The underlying file failed.
    #[error("I/O error")]
    Io(#[from] io::Error),
    /// The file does not start with the trace magic.
    #[error("not a linetrace trace file (bad magic)")]
    NotATrace,
    /// The file is a trace of a version this reader does not know.
    #[error(
        "trace format version {found} is not one this linetrace reads (versions {oldest} to {supported}){newer}",
        newer = if .found > .supported { ": a newer linetrace wrote it" } else { "" }
    )]
    UnsupportedVersion {
        /// Version in the file.
        found: u16,
        /// Oldest version this reader reads.
        oldest: u16,
        /// Newest version this reader reads (the one it writes).
        supported: u16,
    },
    /// The file is shorter than its header.
    #[error("trace file is empty or cut off inside its header")]
    NoHeader,
    /// The first chunk is not the metadata chunk.
    #[error("trace file has no metadata chunk (the recording died before writing anything)")]
    NoMetadata,
    /// A chunk failed a structural check.
    #[error("corrupt chunk at byte offset {offset}: {what}")]
    Corrupt {
        /// Offset of the chunk header in the file.
        offset: u64,
        /// What is wrong with it.
        what: String,
    },
    /// The writer was given an event that refers to something undefined.
    #[error("invalid event: {0}")]
    InvalidEvent(String),
    /// The writer's compressing thread stopped (after an error it returned
    /// before, or a panic).
    #[error("the trace writer's thread stopped after an earlier error")]
    WriterStopped,
}

//! The runtime side of linetrace and the trace file format.
//!
//! The trace format ([`format`](mod@format)) is the first contract of the project: the
//! recorders write it, the decoder reads it. It lives here, in the crate that
//! will also be loaded *into* the traced process by the binary rewriter, so it
//! must stay light: serde, zstd and a checksum, nothing that symbolizes,
//! decodes instructions or draws. The allocation agent ([`agent`]) is the
//! runtime that lives in the traced process today: a preloaded library
//! recording allocator calls.
//!
//! ```
//! use trace_rt::format::{AccessKind, Event, Metadata, Implied, Site, TraceReader, TraceWriter, Trailer};
//!
//! let mut bytes = Vec::new();
//! let mut writer = TraceWriter::new(&mut bytes, &Metadata::new("ptrace-singlestep"))?;
//! let site = writer.add_site(Site { pc: 0x1000, len: 4, kind: AccessKind::Read, size: 8, count: 1, implied: Implied::NONE });
//! writer.push(1, &Event::Access { site, addr: 0x7000 })?;
//! writer.finish(&Trailer::default())?;
//!
//! let mut reader = TraceReader::new(&bytes[..])?;
//! let record = reader.next_record()?.expect("one record");
//! assert_eq!(record.event, Event::Access { site, addr: 0x7000 });
//! assert_eq!(reader.sites()[site as usize].size, 8);
//! # Ok::<(), trace_rt::format::FormatError>(())
//! ```

pub mod agent;
pub mod format;
pub mod tsc;

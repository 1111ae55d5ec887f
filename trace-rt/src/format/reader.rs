//! Reading trace files as a stream of events in bounded memory.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

use super::event::decode_sites;
use super::varint::Cursor;
use super::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, ChunkDecoder, ChunkKind, Event, FormatError, HEADER_LEN, MAGIC, MAX_CHUNK_BYTES,
    Metadata, Module, Site, ThreadId, Trailer, VERSION,
};

/// One event and the thread it happened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Thread the event belongs to.
    pub thread: ThreadId,
    /// The event.
    pub event: Event,
}

/// How a trace file ended, known once the reader has reached its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceEnd {
    /// The recorder finished the file; the trailer says how the target ended
    /// and whether recording was stopped early.
    Finished(Trailer),
    /// The file stops without an end chunk (the recorder died, or the file
    /// was cut): everything up to `valid_bytes` was read.
    Cut {
        /// Length of the readable prefix of the file.
        valid_bytes: u64,
        /// Whether the last chunk was cut in the middle.
        mid_chunk: bool,
    },
}

impl TraceEnd {
    /// True when the recording does not cover the whole run of the target.
    pub fn is_truncated(&self) -> bool {
        match self {
            TraceEnd::Finished(t) => t.truncated.is_some(),
            TraceEnd::Cut { .. } => true,
        }
    }

    /// One line for people: why the trace is incomplete, or "complete".
    pub fn describe(&self) -> String {
        match self {
            TraceEnd::Finished(Trailer { truncated: None, .. }) => "complete".to_string(),
            TraceEnd::Finished(Trailer { truncated: Some(r), .. }) => format!("truncated ({r:?})"),
            TraceEnd::Cut { valid_bytes, mid_chunk: true } => {
                format!("truncated (file cut inside a chunk; {valid_bytes} bytes readable)")
            }
            TraceEnd::Cut { valid_bytes, mid_chunk: false } => {
                format!("truncated (no end marker: the recorder stopped early; {valid_bytes} bytes readable)")
            }
        }
    }
}

/// Streams the events of a trace file.
///
/// Memory use is bounded by one chunk plus the site table and module map.
pub struct TraceReader<R: Read> {
    input: R,
    offset: u64,
    metadata: Metadata,
    sites: Vec<Site>,
    modules: Vec<Module>,
    raw: Vec<u8>,
    pos: usize,
    thread: ThreadId,
    decoder: ChunkDecoder,
    end: Option<TraceEnd>,
    failed: bool,
    event_bytes: u64,
    chunk: ChunkPosition,
    chunk_serial: u64,
}

/// Where an events chunk starts, and how many sites were defined before it:
/// enough to resume reading there with [`TraceReader::seek_to_chunk`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkPosition {
    /// Byte offset of the chunk header in the file.
    pub offset: u64,
    /// Sites defined before the chunk.
    pub sites: usize,
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file.
    pub fn open(path: &Path) -> Result<Self, FormatError> {
        TraceReader::new(BufReader::with_capacity(1 << 16, File::open(path)?))
    }
}

enum Chunk {
    Read { kind: ChunkKind, thread: ThreadId, raw: Vec<u8> },
    Eof { mid_chunk: bool },
}

impl<R: Read> TraceReader<R> {
    /// Reads the file header and the metadata chunk.
    pub fn new(mut input: R) -> Result<Self, FormatError> {
        let mut header = [0u8; HEADER_LEN];
        if read_full(&mut input, &mut header)? < HEADER_LEN {
            return Err(if header[..8] == MAGIC { FormatError::NoHeader } else { FormatError::NotATrace });
        }
        if header[..8] != MAGIC {
            return Err(FormatError::NotATrace);
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion { found: version, supported: VERSION });
        }
        let mut reader = TraceReader {
            input,
            offset: HEADER_LEN as u64,
            metadata: Metadata::new(""),
            sites: Vec::new(),
            modules: Vec::new(),
            raw: Vec::new(),
            pos: 0,
            thread: 0,
            decoder: ChunkDecoder::new(),
            end: None,
            failed: false,
            event_bytes: 0,
            chunk: ChunkPosition::default(),
            chunk_serial: 0,
        };
        let offset = reader.offset;
        match reader.read_chunk()? {
            Chunk::Read { kind: ChunkKind::Metadata, raw, .. } => {
                reader.metadata = serde_json::from_slice(&raw)
                    .map_err(|e| FormatError::Corrupt { offset, what: format!("metadata: {e}") })?;
            }
            _ => return Err(FormatError::NoMetadata),
        }
        Ok(reader)
    }

    /// The recording's metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Sites defined so far (all sites any returned event refers to).
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }

    /// Modules recorded so far.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// How the file ended; `None` until the last event has been read.
    pub fn end(&self) -> Option<&TraceEnd> {
        self.end.as_ref()
    }

    /// Bytes of the file consumed so far (for progress reporting).
    pub fn bytes_read(&self) -> u64 {
        self.offset
    }

    /// On-disk bytes (headers included) of the events chunks read so far:
    /// the dynamic part of the trace, without metadata, modules and sites.
    pub fn event_bytes(&self) -> u64 {
        self.event_bytes
    }

    /// Position of the events chunk the last returned record came from.
    pub fn chunk_position(&self) -> ChunkPosition {
        self.chunk
    }

    /// Counts events chunks entered so far: changes exactly when a record
    /// comes from a new chunk.
    pub fn chunk_serial(&self) -> u64 {
        self.chunk_serial
    }

    /// The next event, `Ok(None)` at the end of the readable file.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<Record>, FormatError> {
        if self.failed {
            return Ok(None);
        }
        loop {
            if self.pos < self.raw.len() {
                let mut c = Cursor::new(&self.raw[self.pos..]);
                match self.decoder.next(&mut c, self.sites.len()) {
                    Ok(event) => {
                        self.pos += c.position();
                        return Ok(Some(Record { thread: self.thread, event }));
                    }
                    Err(what) => return Err(self.fail(what.to_string())),
                }
            }
            if self.end.is_some() {
                return Ok(None);
            }
            let offset = self.offset;
            let chunk = match self.read_chunk() {
                Ok(c) => c,
                Err(e) => {
                    self.failed = true;
                    return Err(e);
                }
            };
            match chunk {
                Chunk::Eof { mid_chunk } => {
                    self.end = Some(TraceEnd::Cut { valid_bytes: offset, mid_chunk });
                }
                Chunk::Read { kind, thread, raw } => match kind {
                    ChunkKind::Events => {
                        self.event_bytes += self.offset - offset;
                        self.chunk = ChunkPosition { offset, sites: self.sites.len() };
                        self.chunk_serial += 1;
                        self.raw = raw;
                        self.pos = 0;
                        self.thread = thread;
                        self.decoder.start_chunk();
                    }
                    ChunkKind::Sites => {
                        if let Err(what) = decode_sites(&raw, &mut self.sites) {
                            return Err(self.fail_at(offset, what.to_string()));
                        }
                    }
                    ChunkKind::Modules => match serde_json::from_slice::<Vec<Module>>(&raw) {
                        Ok(m) => self.modules.extend(m),
                        Err(e) => return Err(self.fail_at(offset, format!("module map: {e}"))),
                    },
                    ChunkKind::End => match serde_json::from_slice::<Trailer>(&raw) {
                        Ok(t) => self.end = Some(TraceEnd::Finished(t)),
                        Err(e) => return Err(self.fail_at(offset, format!("trailer: {e}"))),
                    },
                    ChunkKind::Metadata => {
                        return Err(self.fail_at(offset, "a second metadata chunk".to_string()));
                    }
                },
            }
        }
    }

    fn fail(&mut self, what: String) -> FormatError {
        // `offset` already points past the events chunk being decoded.
        self.fail_at(self.offset, format!("{what} (event at byte {} of a chunk)", self.pos))
    }

    fn fail_at(&mut self, offset: u64, what: String) -> FormatError {
        self.failed = true;
        FormatError::Corrupt { offset, what }
    }

    fn read_chunk(&mut self) -> Result<Chunk, FormatError> {
        let offset = self.offset;
        let corrupt = |what: String| FormatError::Corrupt { offset, what };
        let mut header = [0u8; CHUNK_HEADER_LEN];
        let n = read_full(&mut self.input, &mut header)?;
        if n < CHUNK_HEADER_LEN {
            return Ok(Chunk::Eof { mid_chunk: n > 0 });
        }
        if header[..4] != CHUNK_MAGIC {
            return Err(corrupt("bad chunk magic".to_string()));
        }
        let kind = ChunkKind::from_u8(header[4]).ok_or_else(|| corrupt(format!("unknown chunk kind {}", header[4])))?;
        let word = |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (thread, payload_len, raw_len, crc) = (word(8), word(12), word(16), word(20));
        if payload_len > MAX_CHUNK_BYTES || raw_len > MAX_CHUNK_BYTES {
            return Err(corrupt(format!("chunk sizes {payload_len}/{raw_len} exceed the format limit")));
        }
        let mut payload = vec![0u8; payload_len as usize];
        if read_full(&mut self.input, &mut payload)? < payload.len() {
            return Ok(Chunk::Eof { mid_chunk: true });
        }
        if super::chunk_checksum(&header, &payload) != crc {
            return Err(corrupt("checksum mismatch".to_string()));
        }
        let raw = zstd::bulk::decompress(&payload, raw_len as usize)
            .map_err(|e| corrupt(format!("zstd payload does not decompress: {e}")))?;
        if raw.len() != raw_len as usize {
            return Err(corrupt(format!("payload decompressed to {} bytes, header says {raw_len}", raw.len())));
        }
        self.offset += (CHUNK_HEADER_LEN + payload.len()) as u64;
        Ok(Chunk::Read { kind, thread, raw })
    }
}

impl<R: Read + Seek> TraceReader<R> {
    /// Continues reading at an events chunk seen before (from
    /// [`TraceReader::chunk_position`] of any reader of the same file).
    /// `sites` must hold at least the sites defined before that chunk.
    pub fn seek_to_chunk(&mut self, position: ChunkPosition, sites: &[Site]) -> Result<(), FormatError> {
        if sites.len() < position.sites {
            return Err(FormatError::InvalidEvent(format!(
                "seeking needs {} sites, {} given",
                position.sites,
                sites.len()
            )));
        }
        self.input.seek(SeekFrom::Start(position.offset))?;
        self.offset = position.offset;
        self.sites = sites[..position.sites].to_vec();
        self.raw.clear();
        self.pos = 0;
        self.end = None;
        self.failed = false;
        Ok(())
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Record, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<usize, FormatError> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(filled)
}

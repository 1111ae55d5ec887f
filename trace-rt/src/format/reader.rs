//! Reading trace files as a stream of events in bounded memory.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

use super::event::{decode_sites, read_events_prefix};
use super::varint::Cursor;
use super::writer::StringTable;
use super::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, ChunkDecoder, ChunkKind, DataMapping, Event, FormatError, HEADER_LEN, MAGIC,
    MAX_CHUNK_BYTES, Metadata, Module, OLDEST_VERSION, Site, SiteId, ThreadId, Trailer, VERSION,
};

/// Most strings a string table may hold.
const MAX_STRINGS: u64 = 1 << 20;
/// Bytes the reader may re-read while looking for the next good chunk after
/// one damaged region; past it, the rest of the file counts as damaged. It
/// bounds the work a file full of false chunk magics can cause.
const MAX_RESYNC_BYTES: u64 = 1 << 28;

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
                format!("truncated (file cut inside its last chunk; {valid_bytes} bytes readable)")
            }
            TraceEnd::Cut { valid_bytes, mid_chunk: false } => {
                format!("truncated (no end marker: the recorder stopped early; {valid_bytes} bytes readable)")
            }
        }
    }
}

/// A region of the file the reader skipped because it failed its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Offset of the first skipped byte.
    pub offset: u64,
    /// Bytes skipped (the events in them are lost).
    pub bytes: u64,
    /// What was wrong with the first chunk of the region.
    pub what: String,
}

impl Damage {
    /// One line for people about a list of damaged regions (empty if none).
    pub fn describe(damage: &[Damage]) -> String {
        match damage {
            [] => String::new(),
            [d] => format!("1 damaged region skipped (bytes {}..{}: {})", d.offset, d.offset + d.bytes, d.what),
            [d, ..] => format!(
                "{} damaged regions skipped ({} bytes in all; first at bytes {}..{}: {})",
                damage.len(),
                damage.iter().map(|d| d.bytes).sum::<u64>(),
                d.offset,
                d.offset + d.bytes,
                d.what
            ),
        }
    }
}

/// Streams the events of a trace file.
///
/// Memory use is bounded by one chunk plus the site table, string table and
/// module map.
pub struct TraceReader<R: Read> {
    input: Rewindable<R>,
    version: u16,
    offset: u64,
    metadata: Metadata,
    sites: Vec<Site>,
    strings: Vec<String>,
    modules: Vec<Module>,
    mappings: Vec<DataMapping>,
    raw: Vec<u8>,
    pos: usize,
    thread: ThreadId,
    decoder: ChunkDecoder,
    end: Option<TraceEnd>,
    damage: Vec<Damage>,
    /// Next expected events-chunk number per thread (v2).
    next_seq: HashMap<ThreadId, u64>,
    chunk_time: u64,
    event_bytes: u64,
    chunk: ChunkPosition,
    chunk_len: u64,
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

/// The threads that have events chunks, from the chunk headers alone
/// (payloads skipped, not checked): a quick look at a trace before deciding
/// whether it needs reading thread by thread. `None` when the headers do not
/// chain up to the end of the file (damage, a cut last chunk): then only
/// reading the events tells.
pub fn event_threads(path: &Path) -> Result<Option<std::collections::BTreeSet<ThreadId>>, FormatError> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut input = BufReader::with_capacity(1 << 16, file);
    let mut header = [0u8; HEADER_LEN];
    input.read_exact(&mut header).map_err(|_| FormatError::NoHeader)?;
    if header[..8] != MAGIC {
        return Err(FormatError::NotATrace);
    }
    let mut threads = std::collections::BTreeSet::new();
    let mut chunk = [0u8; CHUNK_HEADER_LEN];
    let mut offset = HEADER_LEN as u64;
    loop {
        let mut got = 0;
        while got < CHUNK_HEADER_LEN {
            match input.read(&mut chunk[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if got == 0 {
            return Ok(Some(threads));
        }
        let word = |at: usize| u32::from_le_bytes([chunk[at], chunk[at + 1], chunk[at + 2], chunk[at + 3]]);
        let payload_len = word(12);
        offset += (CHUNK_HEADER_LEN as u64) + u64::from(payload_len);
        if got < CHUNK_HEADER_LEN || chunk[..4] != CHUNK_MAGIC || payload_len > MAX_CHUNK_BYTES || offset > file_len {
            return Ok(None);
        }
        if ChunkKind::from_u8(chunk[4]) == Some(ChunkKind::Events) {
            threads.insert(word(8));
        }
        input.seek_relative(i64::from(payload_len))?;
    }
}

/// A chunk that passed every check.
struct GoodChunk {
    kind: ChunkKind,
    thread: ThreadId,
    raw: Vec<u8>,
    /// Size on disk, header included.
    len: u64,
}

/// The outcome of reading one chunk at the current offset.
enum Attempt {
    /// A chunk that passed every check.
    Good(GoodChunk),
    /// The file ends here; `partial` if it ends inside a chunk header.
    End { partial: bool },
    /// Something that is not a good chunk: `consumed` are the bytes read
    /// for it; `cut` when the file ended inside its payload.
    Bad { what: String, consumed: Vec<u8>, cut: bool },
}

impl<R: Read> TraceReader<R> {
    /// Reads the file header and the metadata chunk.
    pub fn new(input: R) -> Result<Self, FormatError> {
        let mut input = Rewindable::new(input);
        let mut header = [0u8; HEADER_LEN];
        if input.read_full(&mut header)? < HEADER_LEN {
            return Err(if header[..8] == MAGIC { FormatError::NoHeader } else { FormatError::NotATrace });
        }
        if header[..8] != MAGIC {
            return Err(FormatError::NotATrace);
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(FormatError::UnsupportedVersion { found: version, oldest: OLDEST_VERSION, supported: VERSION });
        }
        let mut reader = TraceReader {
            input,
            version,
            offset: HEADER_LEN as u64,
            metadata: Metadata::new(""),
            sites: Vec::new(),
            strings: Vec::new(),
            modules: Vec::new(),
            mappings: Vec::new(),
            raw: Vec::new(),
            pos: 0,
            thread: 0,
            decoder: ChunkDecoder::for_version(version),
            end: None,
            damage: Vec::new(),
            next_seq: HashMap::new(),
            chunk_time: 0,
            event_bytes: 0,
            chunk: ChunkPosition::default(),
            chunk_len: 0,
            chunk_serial: 0,
        };
        let offset = reader.offset;
        match reader.read_chunk()? {
            Attempt::Good(GoodChunk { kind: ChunkKind::Metadata, raw, len, .. }) => {
                reader.metadata = serde_json::from_slice(&raw)
                    .map_err(|e| FormatError::Corrupt { offset, what: format!("metadata: {e}") })?;
                reader.offset += len;
            }
            Attempt::Bad { what, cut: false, .. } => return Err(FormatError::Corrupt { offset, what }),
            _ => return Err(FormatError::NoMetadata),
        }
        Ok(reader)
    }

    /// Format version of the file.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The recording's metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Sites defined so far, by id (all sites any returned event refers to).
    /// Ids no chunk defined are [`Site::UNDEFINED`].
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }

    /// Strings defined so far, by id (empty for ids never defined).
    pub fn strings(&self) -> &[String] {
        &self.strings
    }

    /// Modules recorded so far.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// Data mappings recorded so far (none before v7).
    pub fn mappings(&self) -> &[DataMapping] {
        &self.mappings
    }

    /// How the file ended; `None` until the last event has been read.
    pub fn end(&self) -> Option<&TraceEnd> {
        self.end.as_ref()
    }

    /// Regions skipped so far because they failed their checks.
    pub fn damage(&self) -> &[Damage] {
        &self.damage
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

    /// Time of the first event of the current events chunk (v2; 0 in v1
    /// files and when the recorder keeps no clock).
    pub fn chunk_time(&self) -> u64 {
        self.chunk_time
    }

    /// Counts events chunks entered so far: changes exactly when a record
    /// comes from a new chunk.
    pub fn chunk_serial(&self) -> u64 {
        self.chunk_serial
    }

    /// The next event, `Ok(None)` at the end of the readable file.
    // Always inlined: called out of line (as `ColumnCursor::step` had it),
    // the record came back through memory, written field by field and read
    // back in wider loads that the CPU could not forward from those stores;
    // those stalls were a third of a replay's stepping.
    #[inline(always)]
    pub fn next_record(&mut self) -> Result<Option<Record>, FormatError> {
        loop {
            if self.pos < self.raw.len() || self.decoder.in_implied() {
                let mut c = Cursor::new(&self.raw[self.pos..]);
                match self.decoder.next(&mut c, &self.sites) {
                    Ok(Some(event)) => {
                        self.pos += c.position();
                        return Ok(Some(Record { thread: self.thread, event }));
                    }
                    Ok(None) => self.pos = self.raw.len(),
                    Err(what) => {
                        // The checksum held, so the chunk was written like
                        // this: the rest of it cannot be trusted.
                        self.damage.push(Damage {
                            offset: self.chunk.offset,
                            bytes: self.chunk_len,
                            what: format!("{what} (event at byte {} of the chunk; the rest of it skipped)", self.pos),
                        });
                        self.pos = self.raw.len();
                    }
                }
                continue;
            }
            if self.end.is_some() {
                return Ok(None);
            }
            self.next_chunk()?;
        }
    }

    /// The next event if it is an [`Event::Access`] of the chunk being read:
    /// (thread, site, address). `None` when it is another event, a
    /// malformed one, or the chunk's end: [`Self::next_record`] then
    /// returns it (or the error, or goes on to the next chunk). So a
    /// record from a new chunk always comes from `next_record`.
    ///
    /// The decoding pass's fast path (see [`ChunkDecoder::next_access`]):
    /// `while let Some(a) = reader.next_access() { .. }`, then one
    /// `next_record`, again.
    #[inline(always)]
    pub fn next_access(&mut self) -> Option<(ThreadId, SiteId, u64)> {
        let mut c = Cursor::new(self.raw.get(self.pos..)?);
        let (site, addr) = self.decoder.next_access(&mut c, &self.sites)?;
        self.pos += c.position();
        Some((self.thread, site, addr))
    }

    /// Reads the next chunk and takes in what it carries (or notes the end,
    /// or skips a damaged region).
    fn next_chunk(&mut self) -> Result<(), FormatError> {
        let offset = self.offset;
        match self.read_chunk()? {
            Attempt::Good(chunk) => self.take_chunk(offset, chunk),
            Attempt::End { partial } => self.end = Some(TraceEnd::Cut { valid_bytes: offset, mid_chunk: partial }),
            Attempt::Bad { what, consumed, cut } => {
                if let Some((found, chunk)) = self.resync(offset, what, consumed, cut)? {
                    self.take_chunk(found, chunk);
                }
            }
        }
        Ok(())
    }

    /// Takes in a chunk that passed its checks, found at `offset`.
    fn take_chunk(&mut self, offset: u64, chunk: GoodChunk) {
        let GoodChunk { kind, thread, raw, len } = chunk;
        self.offset = offset + len;
        match kind {
            ChunkKind::Events => self.enter_events(offset, len, thread, raw),
            ChunkKind::Sites => {
                if self.version < 2 && !self.damage.is_empty() {
                    // v1 numbers sites by order of definition: after a lost
                    // chunk (maybe of sites) later ids cannot be trusted.
                    self.skip_rest(offset, "a version-1 site table after a damaged region cannot be trusted");
                } else if let Err(what) = decode_sites(&raw, self.version, &mut self.sites) {
                    self.damage.push(Damage { offset, bytes: len, what: format!("site table: {what}") });
                }
            }
            ChunkKind::Strings => {
                if let Err(what) = self.add_strings(&raw) {
                    self.damage.push(Damage { offset, bytes: len, what: format!("string table: {what}") });
                }
            }
            ChunkKind::Modules => match serde_json::from_slice::<Vec<Module>>(&raw) {
                Ok(m) => self.modules.extend(m),
                Err(e) => self.damage.push(Damage { offset, bytes: len, what: format!("module map: {e}") }),
            },
            ChunkKind::Mappings => match serde_json::from_slice::<Vec<DataMapping>>(&raw) {
                Ok(m) => self.mappings.extend(m),
                Err(e) => self.damage.push(Damage { offset, bytes: len, what: format!("data mappings: {e}") }),
            },
            ChunkKind::End => match serde_json::from_slice::<Trailer>(&raw) {
                Ok(t) => self.end = Some(TraceEnd::Finished(t)),
                Err(e) => self.damage.push(Damage { offset, bytes: len, what: format!("trailer: {e}") }),
            },
            ChunkKind::Metadata => {
                self.damage.push(Damage { offset, bytes: len, what: "a second metadata chunk".to_string() })
            }
        }
    }

    /// Starts reading the events of a chunk that passed its checks.
    fn enter_events(&mut self, offset: u64, len: u64, thread: ThreadId, raw: Vec<u8>) {
        let mut start = 0;
        self.chunk_time = 0;
        if self.version >= 2 {
            let mut c = Cursor::new(&raw);
            let (seq, time) = match read_events_prefix(&mut c) {
                Ok(p) => p,
                Err(what) => {
                    self.damage.push(Damage { offset, bytes: len, what: what.to_string() });
                    return;
                }
            };
            let expected = self.next_seq.entry(thread).or_insert(0);
            if seq < *expected {
                let what = format!("chunk {seq} of thread {thread} after chunk {}", *expected - 1);
                self.damage.push(Damage { offset, bytes: len, what });
                return;
            }
            // A gap (seq > expected) is chunks lost to damage already listed.
            *expected = seq + 1;
            self.chunk_time = time;
            start = c.position();
        }
        self.event_bytes += len;
        self.chunk = ChunkPosition { offset, sites: self.sites.len() };
        self.chunk_len = len;
        self.chunk_serial += 1;
        self.raw = raw;
        self.pos = start;
        self.thread = thread;
        self.decoder.start_chunk();
    }

    fn add_strings(&mut self, raw: &[u8]) -> Result<(), String> {
        let table: StringTable = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
        let end = u64::from(table.first) + table.strings.len() as u64;
        if end > MAX_STRINGS {
            return Err("string id beyond the format limit".to_string());
        }
        if end as usize > self.strings.len() {
            self.strings.resize(end as usize, String::new());
        }
        for (slot, s) in self.strings[table.first as usize..end as usize].iter_mut().zip(table.strings) {
            *slot = s;
        }
        Ok(())
    }

    /// Marks everything from `offset` on as damaged and ends the file there.
    fn skip_rest(&mut self, offset: u64, what: &str) {
        let mut rest = 0u64;
        let mut sink = [0u8; 1 << 16];
        while let Ok(n) = self.input.read_full(&mut sink) {
            if n == 0 {
                break;
            }
            rest += n as u64;
        }
        let bytes = self.offset - offset + rest;
        self.damage.push(Damage { offset, bytes, what: what.to_string() });
        self.offset += rest;
        self.end = Some(TraceEnd::Cut { valid_bytes: offset, mid_chunk: false });
    }

    /// After a bad chunk at `offset`: looks for the next chunk that checks
    /// out, from the byte after `offset` on. Found: the region before it is
    /// damage, and the chunk is returned with its offset. Not found: a chunk
    /// cut by the end of the file is truncation; anything else is damage up
    /// to the end.
    fn resync(
        &mut self,
        offset: u64,
        what: String,
        consumed: Vec<u8>,
        cut: bool,
    ) -> Result<Option<(u64, GoodChunk)>, FormatError> {
        self.input.unread(consumed.get(1..).unwrap_or(&[]));
        self.offset = offset + 1;
        let mut budget = MAX_RESYNC_BYTES;
        loop {
            self.offset += self.input.skip_to(&CHUNK_MAGIC, &mut budget)?;
            let found = self.offset;
            let attempt = if budget == 0 { Attempt::End { partial: false } } else { self.read_chunk()? };
            match attempt {
                Attempt::Good(chunk) => {
                    self.damage.push(Damage { offset, bytes: found - offset, what });
                    return Ok(Some((found, chunk)));
                }
                Attempt::Bad { consumed, .. } => {
                    budget = budget.saturating_sub(consumed.len() as u64);
                    self.input.unread(consumed.get(1..).unwrap_or(&[]));
                    self.offset = found + 1;
                }
                Attempt::End { .. } => {
                    if cut {
                        self.end = Some(TraceEnd::Cut { valid_bytes: offset, mid_chunk: true });
                    } else {
                        self.damage.push(Damage { offset, bytes: found - offset, what });
                        self.end = Some(TraceEnd::Cut { valid_bytes: offset, mid_chunk: false });
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Reads one chunk at the current offset (without moving `offset`).
    fn read_chunk(&mut self) -> Result<Attempt, FormatError> {
        let mut header = [0u8; CHUNK_HEADER_LEN];
        let n = self.input.read_full(&mut header)?;
        if n < CHUNK_HEADER_LEN {
            return Ok(Attempt::End { partial: n > 0 });
        }
        let bad = |what: String, consumed: Vec<u8>| Ok(Attempt::Bad { what, consumed, cut: false });
        if header[..4] != CHUNK_MAGIC {
            return bad("bad chunk magic".to_string(), header.to_vec());
        }
        let Some(kind) = ChunkKind::from_u8(header[4]) else {
            return bad(format!("unknown chunk kind {}", header[4]), header.to_vec());
        };
        let word = |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (thread, payload_len, raw_len, crc) = (word(8), word(12), word(16), word(20));
        if payload_len > MAX_CHUNK_BYTES || raw_len > MAX_CHUNK_BYTES {
            return bad(format!("chunk sizes {payload_len}/{raw_len} exceed the format limit"), header.to_vec());
        }
        let mut whole = vec![0u8; CHUNK_HEADER_LEN + payload_len as usize];
        whole[..CHUNK_HEADER_LEN].copy_from_slice(&header);
        let got = self.input.read_full(&mut whole[CHUNK_HEADER_LEN..])?;
        if got < payload_len as usize {
            whole.truncate(CHUNK_HEADER_LEN + got);
            let what = format!("chunk of {payload_len} bytes runs past the end of the file");
            return Ok(Attempt::Bad { what, consumed: whole, cut: true });
        }
        let payload = &whole[CHUNK_HEADER_LEN..];
        if super::chunk_checksum(&header, payload) != crc {
            return bad("checksum mismatch".to_string(), whole);
        }
        let raw = match zstd::bulk::decompress(payload, raw_len as usize) {
            Ok(raw) if raw.len() == raw_len as usize => raw,
            Ok(raw) => {
                return bad(format!("payload decompressed to {} bytes, header says {raw_len}", raw.len()), whole);
            }
            Err(e) => return bad(format!("zstd payload does not decompress: {e}"), whole),
        };
        Ok(Attempt::Good(GoodChunk { kind, thread, raw, len: whole.len() as u64 }))
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
        self.input.seek(position.offset)?;
        self.offset = position.offset;
        self.sites = sites[..position.sites].to_vec();
        self.raw.clear();
        self.pos = 0;
        self.end = None;
        self.next_seq.clear();
        Ok(())
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Record, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// An input that can take bytes back, so that the reader can look for the
/// next chunk inside bytes it already read as a (bad) chunk.
struct Rewindable<R> {
    inner: R,
    back: Vec<u8>,
    back_pos: usize,
}

impl<R: Read> Rewindable<R> {
    fn new(inner: R) -> Self {
        Rewindable { inner, back: Vec::new(), back_pos: 0 }
    }

    /// Puts `bytes` in front of what is left to read.
    fn unread(&mut self, bytes: &[u8]) {
        let mut back = Vec::with_capacity(bytes.len() + self.back.len() - self.back_pos);
        back.extend_from_slice(bytes);
        back.extend_from_slice(&self.back[self.back_pos..]);
        self.back = back;
        self.back_pos = 0;
    }

    /// Reads until `buf` is full or the input ends; returns the bytes read.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, FormatError> {
        let mut filled = 0;
        if self.back_pos < self.back.len() {
            let n = (self.back.len() - self.back_pos).min(buf.len());
            buf[..n].copy_from_slice(&self.back[self.back_pos..self.back_pos + n]);
            self.back_pos += n;
            filled = n;
            if self.back_pos == self.back.len() {
                self.back.clear();
                self.back_pos = 0;
            }
        }
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(filled)
    }

    /// Discards bytes up to the next occurrence of `magic` (left unread) or
    /// the end of the input; returns how many were discarded. Counts what
    /// it reads against `budget`.
    fn skip_to(&mut self, magic: &[u8; 4], budget: &mut u64) -> Result<u64, FormatError> {
        let mut skipped = 0u64;
        let mut window: Vec<u8> = Vec::new();
        loop {
            let mut block = vec![0u8; 1 << 16];
            let n = self.read_full(&mut block)?;
            *budget = budget.saturating_sub(n as u64);
            block.truncate(n);
            window.extend_from_slice(&block);
            if let Some(p) = window.windows(magic.len()).position(|w| w == magic) {
                self.unread(&window[p..]);
                return Ok(skipped + p as u64);
            }
            if n == 0 || *budget == 0 {
                return Ok(skipped + window.len() as u64);
            }
            // Keep a possible start of the magic across blocks.
            let keep_from = window.len().saturating_sub(magic.len() - 1);
            skipped += keep_from as u64;
            window.drain(..keep_from);
        }
    }
}

impl<R: Read + Seek> Rewindable<R> {
    fn seek(&mut self, offset: u64) -> Result<(), FormatError> {
        self.inner.seek(SeekFrom::Start(offset))?;
        self.back.clear();
        self.back_pos = 0;
        Ok(())
    }
}

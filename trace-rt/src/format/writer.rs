//! Writing trace files.

use std::io::Write;
use std::time::Instant;

use super::chunk_output::{ChunkOutput, ChunkSink};
use super::event::{encode_sites, put_events_prefix};
use super::{
    ChunkEncoder, ChunkKind, DataMapping, Event, FormatError, HEADER_LEN, MAGIC, MAX_CHUNK_BYTES, Metadata, Module,
    PackedKind, PackedRun, Site, SiteId, StringId, ThreadId, Trailer, VERSION,
};

/// Raw bytes buffered per thread before its chunk is compressed and written.
const DEFAULT_CHUNK_TARGET: usize = 1 << 20;
/// zstd level: 3 is zstd's default; trace data compresses well at it, and
/// higher levels cost the recorder time it does not have.
const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// Writes a trace file chunk by chunk.
///
/// Events are buffered per thread and written as one compressed chunk when a
/// thread's buffer reaches the chunk target, on [`TraceWriter::flush`], and on
/// [`TraceWriter::finish`] (or when the writer is dropped unfinished: the
/// file is then a truncated trace with every event pushed). Sites and
/// modules added since the last chunk are always written before the events
/// that may refer to them.
pub struct TraceWriter<W: Write> {
    output: ChunkOutput<W>,
    threads: Vec<ThreadBuffer>,
    sites_defined: u32,
    pending_sites: Vec<Site>,
    strings_defined: u32,
    pending_strings: Vec<String>,
    pending_modules: Vec<Module>,
    pending_mappings: Vec<DataMapping>,
    chunk_target: usize,
    /// Reused buffer: an events chunk's raw payload.
    raw: Vec<u8>,
    started: Instant,
}

/// The events of one thread not written yet.
struct ThreadBuffer {
    thread: ThreadId,
    encoder: ChunkEncoder,
    /// Number of the thread's next events chunk.
    seq: u64,
    /// When the first buffered event was pushed (ns since the start).
    first_time: u64,
}

/// The `Strings` chunk payload.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct StringTable {
    pub(crate) first: StringId,
    pub(crate) strings: Vec<String>,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace: writes the file header and the metadata chunk.
    pub fn new(mut out: W, metadata: &Metadata) -> Result<Self, FormatError> {
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(&MAGIC);
        header[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out.write_all(&header)?;
        let mut w = TraceWriter {
            output: ChunkOutput::Here(ChunkSink::new(out, DEFAULT_ZSTD_LEVEL, HEADER_LEN as u64)?),
            threads: Vec::new(),
            sites_defined: 0,
            pending_sites: Vec::new(),
            strings_defined: 0,
            pending_strings: Vec::new(),
            pending_modules: Vec::new(),
            pending_mappings: Vec::new(),
            chunk_target: DEFAULT_CHUNK_TARGET,
            raw: Vec::new(),
            started: Instant::now(),
        };
        let json = serde_json::to_vec(metadata).map_err(|e| FormatError::InvalidEvent(e.to_string()))?;
        w.write_chunk(ChunkKind::Metadata, 0, &json)?;
        Ok(w)
    }

    /// Sets how many raw bytes a thread buffers before a chunk is written
    /// (smaller chunks lose less on a crash, larger ones compress better).
    pub fn set_chunk_target(&mut self, bytes: usize) {
        self.chunk_target = bytes.clamp(1, MAX_CHUNK_BYTES as usize / 2);
    }

    /// Sets the zstd level (1 to 19): 1 is about twice as fast as the
    /// default 3 for a somewhat larger file, for recorders whose time is
    /// the program's.
    pub fn set_compression_level(&mut self, level: i32) {
        self.output.set_level(level.clamp(1, 19));
    }

    /// How many sites and strings were defined: the next ids.
    pub fn definitions(&self) -> (SiteId, StringId) {
        (self.sites_defined, self.strings_defined)
    }

    /// Bytes written to the output so far (with a compression thread: the
    /// chunks it has written yet).
    pub fn bytes_written(&self) -> u64 {
        self.output.bytes_written()
    }

    /// Defines a new site and returns its id.
    pub fn add_site(&mut self, site: Site) -> SiteId {
        self.pending_sites.push(site);
        self.sites_defined += 1;
        self.sites_defined - 1
    }

    /// Adds a string to the string table and returns its id.
    pub fn add_string(&mut self, s: &str) -> StringId {
        self.pending_strings.push(s.to_string());
        self.strings_defined += 1;
        self.strings_defined - 1
    }

    /// Records modules mapped into the target.
    pub fn add_modules(&mut self, modules: &[Module]) {
        self.pending_modules.extend_from_slice(modules);
    }

    /// Records mappings of the target that no module covers (the heap,
    /// stacks, anonymous memory, data files).
    pub fn add_mappings(&mut self, mappings: &[DataMapping]) {
        self.pending_mappings.extend_from_slice(mappings);
    }

    /// Appends an event of thread `thread`.
    #[inline]
    pub fn push(&mut self, thread: ThreadId, event: &Event) -> Result<(), FormatError> {
        let i = self.thread_index(thread);
        self.push_at(i, event)
    }

    /// Appends many events of one thread: the same as pushing each, with the
    /// thread looked up once (for recorders that convert events in bulk).
    pub fn push_all(&mut self, thread: ThreadId, events: &[Event]) -> Result<(), FormatError> {
        let i = self.thread_index(thread);
        events.iter().try_for_each(|event| self.push_at(i, event))
    }

    /// Appends the leading packed events of `packed` (see
    /// [`super::unpack_access`]; `kinds[tag]` says what a tag stands for) as
    /// events of `thread`: the same as pushing each as its [`Event`], in one
    /// tight loop. Stops before the first record of [`PackedKind::Other`]
    /// (or a tag beyond `kinds`) and says how many it took; an access to a
    /// site never defined is an error.
    pub fn push_packed(
        &mut self,
        thread: ThreadId,
        packed: &[u64],
        kinds: &[PackedKind],
    ) -> Result<PackedRun, FormatError> {
        let i = self.thread_index(thread);
        let mut run = PackedRun::default();
        while run.taken < packed.len() {
            let t = &mut self.threads[i];
            if t.encoder.is_empty() {
                t.first_time = self.started.elapsed().as_nanos() as u64;
            }
            let part = t.encoder.push_packed(&packed[run.taken..], kinds, self.sites_defined, self.chunk_target);
            let part = part.map_err(|tag| {
                let site = match kinds.get(usize::from(tag)) {
                    Some(PackedKind::Access(site, _)) => site.to_string(),
                    _ => "?".into(),
                };
                FormatError::InvalidEvent(format!("packed access of tag {tag} names site {site}, never defined"))
            })?;
            run.taken += part.taken;
            run.flow += part.flow;
            run.implied += part.implied;
            run.last_callsite = part.last_callsite.or(run.last_callsite);
            if t.encoder.len() < self.chunk_target {
                // Not stopped by the chunk's size: by the end of `packed`,
                // or at a record of another kind.
                break;
            }
            self.flush_definitions()?;
            self.write_events(i)?;
        }
        Ok(run)
    }

    /// Index of `thread`'s buffer, made on first use.
    fn thread_index(&mut self, thread: ThreadId) -> usize {
        match self.threads.iter().position(|t| t.thread == thread) {
            Some(i) => i,
            None => {
                self.threads.push(ThreadBuffer { thread, encoder: ChunkEncoder::new(), seq: 0, first_time: 0 });
                self.threads.len() - 1
            }
        }
    }

    #[inline]
    fn push_at(&mut self, i: usize, event: &Event) -> Result<(), FormatError> {
        match *event {
            Event::Access { site, .. } | Event::AccessSized { site, .. } if site >= self.sites_defined => {
                return Err(FormatError::InvalidEvent(format!("site {site} was never defined")));
            }
            Event::Exec { path } if path >= self.strings_defined => {
                return Err(FormatError::InvalidEvent(format!("string {path} was never defined")));
            }
            _ => {}
        }
        if self.threads[i].encoder.is_empty() {
            self.threads[i].first_time = self.started.elapsed().as_nanos() as u64;
        }
        self.threads[i].encoder.push(event);
        if self.threads[i].encoder.len() >= self.chunk_target {
            self.flush_definitions()?;
            self.write_events(i)?;
        }
        Ok(())
    }

    /// Writes the buffered events of `self.threads[i]` as one chunk.
    fn write_events(&mut self, i: usize) -> Result<(), FormatError> {
        let t = &mut self.threads[i];
        let events = t.encoder.take();
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        put_events_prefix(&mut raw, t.seq, t.first_time);
        raw.extend_from_slice(&events);
        t.encoder.reuse(events);
        t.seq += 1;
        let thread = t.thread;
        self.raw = self.output.write_chunk_buffer(ChunkKind::Events, thread, raw)?;
        Ok(())
    }

    /// Writes every buffered event as chunks and flushes the output, so that
    /// everything pushed so far survives the recorder being killed.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.flush_definitions()?;
        for i in 0..self.threads.len() {
            if !self.threads[i].encoder.is_empty() {
                self.write_events(i)?;
            }
        }
        self.output.flush()
    }

    /// Flushes everything, writes the end chunk and returns the output
    /// (waiting for a compression thread to write it all).
    pub fn finish(mut self, trailer: &Trailer) -> Result<W, FormatError> {
        self.flush()?;
        let json = serde_json::to_vec(trailer).map_err(|e| FormatError::InvalidEvent(e.to_string()))?;
        self.write_chunk(ChunkKind::End, 0, &json)?;
        std::mem::replace(&mut self.output, ChunkOutput::Finished).finish()
    }

    fn flush_definitions(&mut self) -> Result<(), FormatError> {
        if !self.pending_modules.is_empty() {
            let json =
                serde_json::to_vec(&self.pending_modules).map_err(|e| FormatError::InvalidEvent(e.to_string()))?;
            self.pending_modules.clear();
            self.write_chunk(ChunkKind::Modules, 0, &json)?;
        }
        if !self.pending_mappings.is_empty() {
            let json =
                serde_json::to_vec(&self.pending_mappings).map_err(|e| FormatError::InvalidEvent(e.to_string()))?;
            self.pending_mappings.clear();
            self.write_chunk(ChunkKind::Mappings, 0, &json)?;
        }
        if !self.pending_sites.is_empty() {
            let first = self.sites_defined - self.pending_sites.len() as u32;
            let raw = encode_sites(first, &self.pending_sites);
            self.pending_sites.clear();
            self.write_chunk(ChunkKind::Sites, 0, &raw)?;
        }
        if !self.pending_strings.is_empty() {
            let table = StringTable {
                first: self.strings_defined - self.pending_strings.len() as u32,
                strings: std::mem::take(&mut self.pending_strings),
            };
            let json = serde_json::to_vec(&table).map_err(|e| FormatError::InvalidEvent(e.to_string()))?;
            self.write_chunk(ChunkKind::Strings, 0, &json)?;
        }
        Ok(())
    }

    fn write_chunk(&mut self, kind: ChunkKind, thread: ThreadId, raw: &[u8]) -> Result<(), FormatError> {
        self.output.write_chunk(kind, thread, raw)
    }
}

impl<W: Write> Drop for TraceWriter<W> {
    /// A writer dropped without `finish` (its recorder failed) still writes
    /// every event it was given, as whole chunks: the file reads as a
    /// truncated trace with all of them.
    fn drop(&mut self) {
        if !matches!(self.output, ChunkOutput::Finished) {
            let _ = self.flush();
        }
    }
}

impl<W: Write + Send + 'static> TraceWriter<W> {
    /// Compresses and writes chunks on a thread of their own from now on,
    /// so that encoding events and compressing chunks use two cores. The
    /// file is the same; `finish` (or dropping the writer) waits for the
    /// thread to write every chunk.
    pub fn compress_on_own_thread(mut self) -> Result<Self, FormatError> {
        self.output = std::mem::replace(&mut self.output, ChunkOutput::Finished).on_own_thread()?;
        Ok(self)
    }
}

//! Compressing and writing finished chunks: where [`super::TraceWriter`]
//! sends every chunk, either done on the caller's thread or on a thread of
//! its own.
//!
//! A recorder's writer spends most of its time in zstd when the trace
//! compresses badly (hashed or shuffled addresses: half its samples for
//! zstd's own compressor traced). Compressing on a second thread lets the
//! encoding of the next chunk and the compression of the last one use both
//! cores; chunks still reach the file in the order they were made, each in
//! one `write` (a recorder killed mid-way leaves whole chunks only).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};

use super::worker::Worker;
use super::{CHUNK_HEADER_LEN, CHUNK_MAGIC, ChunkKind, FormatError, MAX_CHUNK_BYTES, ThreadId};

/// Chunks handed to the compressing thread and not written yet before the
/// writer waits: bounds memory (a chunk is ~1 MiB) and keeps the thread fed.
const CHUNKS_IN_FLIGHT: usize = 2;

/// Compresses chunks and writes them to `out`.
pub(crate) struct ChunkSink<W: Write> {
    out: W,
    /// One compression context for the whole file: a fresh one per chunk
    /// costs an allocation (and its page faults) per megabyte of trace.
    compressor: zstd::bulk::Compressor<'static>,
    /// Reused buffer: header plus compressed payload.
    whole: Vec<u8>,
    /// Bytes written to `out` so far (shared with the writer when this
    /// sink runs on its own thread).
    written: Arc<AtomicU64>,
}

impl<W: Write> ChunkSink<W> {
    /// A sink writing to `out`, which already holds `written` bytes.
    pub(crate) fn new(out: W, level: i32, written: u64) -> Result<Self, FormatError> {
        Ok(ChunkSink {
            out,
            compressor: zstd::bulk::Compressor::new(level)?,
            whole: Vec::new(),
            written: Arc::new(AtomicU64::new(written)),
        })
    }

    fn set_level(&mut self, level: i32) {
        // Only fails for levels zstd does not have; callers clamp.
        let _ = self.compressor.set_compression_level(level);
    }

    /// Compresses `raw` and writes it as one chunk of `kind` and `thread`.
    fn write_chunk(&mut self, kind: ChunkKind, thread: ThreadId, raw: &[u8]) -> Result<(), FormatError> {
        let whole = &mut self.whole;
        whole.clear();
        whole.resize(CHUNK_HEADER_LEN + zstd::zstd_safe::compress_bound(raw.len()), 0);
        let n = self.compressor.compress_to_buffer(raw, &mut whole[CHUNK_HEADER_LEN..])?;
        whole.truncate(CHUNK_HEADER_LEN + n);
        let payload = &whole[CHUNK_HEADER_LEN..];
        let too_big = |n: usize| u32::try_from(n).ok().filter(|&n| n <= MAX_CHUNK_BYTES).is_none();
        if too_big(raw.len()) || too_big(payload.len()) {
            return Err(FormatError::InvalidEvent(format!("chunk of {} bytes exceeds the format limit", raw.len())));
        }
        let mut header = [0u8; CHUNK_HEADER_LEN];
        header[..4].copy_from_slice(&CHUNK_MAGIC);
        header[4] = kind as u8;
        header[8..12].copy_from_slice(&thread.to_le_bytes());
        header[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[16..20].copy_from_slice(&(raw.len() as u32).to_le_bytes());
        let crc = super::chunk_checksum(&header, payload);
        header[20..24].copy_from_slice(&crc.to_le_bytes());
        whole[..CHUNK_HEADER_LEN].copy_from_slice(&header);
        // One write per chunk: a recorder killed mid-write leaves at most the
        // last chunk incomplete, and the reader stops cleanly before it.
        self.out.write_all(whole)?;
        self.written.fetch_add(whole.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// What the writer asks of the compressing thread, in order.
enum ChunkMessage {
    Chunk(ChunkKind, ThreadId, Vec<u8>),
    Flush,
    Level(i32),
}

/// A [`ChunkSink`] on its own thread.
pub(crate) struct ChunkThread<W: Write> {
    worker: Worker<ChunkMessage, Vec<u8>, W>,
    written: Arc<AtomicU64>,
}

impl<W: Write> Drop for ChunkThread<W> {
    /// A writer dropped without `finish` still gets every chunk it made
    /// into the file before the drop returns.
    fn drop(&mut self) {
        if self.worker.is_running() {
            let _ = self.worker.join();
        }
    }
}

/// Where [`super::TraceWriter`] sends finished chunks.
pub(crate) enum ChunkOutput<W: Write> {
    /// Compressed and written by the caller.
    Here(ChunkSink<W>),
    /// Compressed and written by a thread of its own.
    Thread(ChunkThread<W>),
    /// Handed back by [`Self::finish`]: takes nothing more.
    Finished,
}

impl<W: Write> ChunkOutput<W> {
    /// Compresses and writes one chunk (or hands a copy to the thread).
    pub(crate) fn write_chunk(&mut self, kind: ChunkKind, thread: ThreadId, raw: &[u8]) -> Result<(), FormatError> {
        match self {
            ChunkOutput::Here(sink) => sink.write_chunk(kind, thread, raw),
            ChunkOutput::Finished => Err(FormatError::WriterStopped),
            ChunkOutput::Thread(_) => {
                let mut buf = self.spare_buffer();
                buf.extend_from_slice(raw);
                self.write_chunk_buffer(kind, thread, buf).map(drop)
            }
        }
    }

    /// As [`Self::write_chunk`], for a chunk in a buffer of its own, which
    /// goes to the thread without a copy; returns an empty buffer for the
    /// next chunk (the same one when compressed here).
    pub(crate) fn write_chunk_buffer(
        &mut self,
        kind: ChunkKind,
        thread: ThreadId,
        raw: Vec<u8>,
    ) -> Result<Vec<u8>, FormatError> {
        match self {
            ChunkOutput::Here(sink) => {
                sink.write_chunk(kind, thread, &raw)?;
                let mut raw = raw;
                raw.clear();
                Ok(raw)
            }
            ChunkOutput::Thread(t) => {
                t.worker.send(ChunkMessage::Chunk(kind, thread, raw))?;
                Ok(self.spare_buffer())
            }
            ChunkOutput::Finished => Err(FormatError::WriterStopped),
        }
    }

    /// An empty buffer: one the thread is done with if any.
    fn spare_buffer(&mut self) -> Vec<u8> {
        let ChunkOutput::Thread(t) = self else { return Vec::new() };
        let mut buf = t.worker.recycled().unwrap_or_default();
        buf.clear();
        buf
    }

    /// Flushes the output (after the chunks sent before, on the thread).
    pub(crate) fn flush(&mut self) -> Result<(), FormatError> {
        match self {
            ChunkOutput::Here(sink) => Ok(sink.out.flush()?),
            ChunkOutput::Thread(t) => t.worker.send(ChunkMessage::Flush),
            ChunkOutput::Finished => Err(FormatError::WriterStopped),
        }
    }

    /// Sets the zstd level of the chunks from now on.
    pub(crate) fn set_level(&mut self, level: i32) {
        match self {
            ChunkOutput::Here(sink) => sink.set_level(level),
            // A stopped thread reports its error at the next chunk.
            ChunkOutput::Thread(t) => {
                let _ = t.worker.send(ChunkMessage::Level(level));
            }
            ChunkOutput::Finished => {}
        }
    }

    /// Bytes written so far (by the thread: the chunks it wrote already).
    pub(crate) fn bytes_written(&self) -> u64 {
        match self {
            ChunkOutput::Here(sink) => sink.written.load(Ordering::Relaxed),
            ChunkOutput::Thread(t) => t.written.load(Ordering::Relaxed),
            ChunkOutput::Finished => 0,
        }
    }

    /// Writes everything sent, flushes, and returns the output.
    pub(crate) fn finish(self) -> Result<W, FormatError> {
        match self {
            ChunkOutput::Here(mut sink) => {
                sink.out.flush()?;
                Ok(sink.out)
            }
            ChunkOutput::Thread(mut t) => t.worker.join(),
            ChunkOutput::Finished => Err(FormatError::WriterStopped),
        }
    }
}

impl<W: Write + Send + 'static> ChunkOutput<W> {
    /// Moves the compression and the writing to a thread of their own.
    pub(crate) fn on_own_thread(self) -> Result<Self, FormatError> {
        let sink = match self {
            ChunkOutput::Here(sink) => sink,
            other @ (ChunkOutput::Thread(_) | ChunkOutput::Finished) => return Ok(other),
        };
        let written = sink.written.clone();
        let worker = Worker::start("linetrace-zstd", CHUNKS_IN_FLIGHT, move |messages, recycle| {
            compress_chunks(sink, messages, recycle)
        })?;
        Ok(ChunkOutput::Thread(ChunkThread { worker, written }))
    }
}

/// The compressing thread: writes chunks until the writer is gone, then
/// flushes and hands the output back.
fn compress_chunks<W: Write>(
    mut sink: ChunkSink<W>,
    messages: &Receiver<ChunkMessage>,
    recycle: &Sender<Vec<u8>>,
) -> Result<W, FormatError> {
    while let Ok(message) = messages.recv() {
        match message {
            ChunkMessage::Chunk(kind, thread, raw) => {
                sink.write_chunk(kind, thread, &raw)?;
                let _ = recycle.send(raw);
            }
            ChunkMessage::Flush => sink.out.flush()?,
            ChunkMessage::Level(level) => sink.set_level(level),
        }
    }
    sink.out.flush()?;
    Ok(sink.out)
}

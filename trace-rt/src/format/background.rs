//! A [`TraceWriter`] on a thread of its own: encoding and compressing the
//! events run beside the recorder instead of inside it.
//!
//! A recorder on two cores has three jobs: the program runs, the recorder
//! turns what it recorded into events, and the writer encodes and
//! compresses them. The writer's share is the largest (half of a rewrite
//! recording's time); on its own thread it overlaps the other two, and its
//! chunks are compressed on one more thread, so encoding and zstd overlap
//! too.
//!
//! Everything goes to the thread in one ordered channel, so the file is the
//! one the same calls on a [`TraceWriter`] write: definitions before the
//! events that use them, each thread's events in order. Ids of sites and
//! strings are counted here, as the writer counts them. An error on the
//! thread stops it; the next call here (at the latest [`finish`]) returns it.
//!
//! [`finish`]: BackgroundWriter::finish

use std::io::Write;
use std::sync::mpsc::{Receiver, Sender};

use super::worker::Worker;
use super::{Event, EventBatch, FormatError, Module, Site, SiteId, StringId, ThreadId, TraceWriter, Trailer};

/// Single events are sent in groups of this many (with anything else sent
/// first): one channel message per event would cost more than the event.
const SINGLES_PER_MESSAGE: usize = 4096;
/// Messages in flight before a sender waits: bounds the memory of events
/// not written yet when the writer falls behind.
const MESSAGES_IN_FLIGHT: usize = 4;

/// What the recorder asks of the writer thread, in order.
enum Command {
    Sites(Vec<Site>),
    String(String),
    Modules(Vec<Module>),
    Singles(Vec<(ThreadId, Event)>),
    Events(ThreadId, EventBatch),
    Flush,
    Finish(Trailer),
}

/// A [`TraceWriter`] running on its own thread. The methods are the
/// writer's; [`Self::push_batch`] hands over a whole batch without copying.
pub struct BackgroundWriter<W: Write + Send + 'static> {
    /// The writer's thread; batches come back from it to be filled again.
    worker: Worker<Command, EventBatch, W>,
    singles: Vec<(ThreadId, Event)>,
    pending_sites: Vec<Site>,
    sites_defined: u32,
    strings_defined: u32,
}

impl<W: Write + Send + 'static> BackgroundWriter<W> {
    /// Moves `writer` (configured, with its header written) to a new thread.
    /// The writer's chunks are compressed on a third thread
    /// ([`TraceWriter::compress_on_own_thread`]).
    pub fn start(writer: TraceWriter<W>) -> Result<Self, FormatError> {
        let writer = writer.compress_on_own_thread()?;
        let (sites_defined, strings_defined) = writer.definitions();
        let worker = Worker::start("linetrace-writer", MESSAGES_IN_FLIGHT, move |commands, recycle| {
            run(writer, commands, recycle)
        })?;
        Ok(BackgroundWriter { worker, singles: Vec::new(), pending_sites: Vec::new(), sites_defined, strings_defined })
    }

    /// Defines a new site and returns its id (as [`TraceWriter::add_site`]).
    pub fn add_site(&mut self, site: Site) -> SiteId {
        self.pending_sites.push(site);
        self.sites_defined += 1;
        self.sites_defined - 1
    }

    /// Adds a string and returns its id (as [`TraceWriter::add_string`]).
    pub fn add_string(&mut self, s: &str) -> Result<StringId, FormatError> {
        self.send(Command::String(s.to_string()))?;
        self.strings_defined += 1;
        Ok(self.strings_defined - 1)
    }

    /// Records loaded modules (as [`TraceWriter::add_modules`]).
    pub fn add_modules(&mut self, modules: &[Module]) -> Result<(), FormatError> {
        self.send(Command::Modules(modules.to_vec()))
    }

    /// Appends one event of `thread`.
    pub fn push(&mut self, thread: ThreadId, event: &Event) -> Result<(), FormatError> {
        self.send_sites()?;
        self.singles.push((thread, *event));
        if self.singles.len() >= SINGLES_PER_MESSAGE {
            self.send_singles()?;
        }
        Ok(())
    }

    /// Appends a batch of events of one thread without copying it; returns
    /// an empty batch to fill with the next events.
    pub fn push_batch(&mut self, thread: ThreadId, events: EventBatch) -> Result<EventBatch, FormatError> {
        self.send(Command::Events(thread, events))?;
        Ok(self.empty_batch())
    }

    /// Asks the thread to write every event sent so far and flush the
    /// output (it does so after what was sent before; this does not wait).
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.send(Command::Flush)
    }

    /// Writes everything, the end chunk, and returns the output.
    pub fn finish(mut self, trailer: &Trailer) -> Result<W, FormatError> {
        let sent = self.send(Command::Finish(trailer.clone()));
        let written = self.worker.join();
        sent.and(written)
    }

    /// An empty batch: one the thread is done with if any.
    fn empty_batch(&mut self) -> EventBatch {
        let mut batch = self.worker.recycled().unwrap_or_default();
        batch.clear();
        batch
    }

    fn send_sites(&mut self) -> Result<(), FormatError> {
        if self.pending_sites.is_empty() {
            return Ok(());
        }
        let sites = std::mem::take(&mut self.pending_sites);
        self.send_raw(Command::Sites(sites))
    }

    fn send_singles(&mut self) -> Result<(), FormatError> {
        if self.singles.is_empty() {
            return Ok(());
        }
        let singles = std::mem::replace(&mut self.singles, Vec::with_capacity(SINGLES_PER_MESSAGE));
        self.send_raw(Command::Singles(singles))
    }

    /// Sends `command` after the sites and single events before it.
    fn send(&mut self, command: Command) -> Result<(), FormatError> {
        self.send_sites()?;
        self.send_singles()?;
        self.send_raw(command)
    }

    fn send_raw(&mut self, command: Command) -> Result<(), FormatError> {
        self.worker.send(command)
    }
}

impl<W: Write + Send + 'static> Drop for BackgroundWriter<W> {
    /// A writer dropped without `finish` (the recorder failed) still writes
    /// what it was sent: the file stays readable, as a truncated trace.
    fn drop(&mut self) {
        let _ = self.send_sites();
        let _ = self.send_singles();
        if self.worker.is_running() {
            let _ = self.send_raw(Command::Flush);
            let _ = self.worker.join();
        }
    }
}

/// The writer thread: carries out commands until `Finish` (or until the
/// recorder is gone: then it flushes what it has).
fn run<W: Write>(
    mut writer: TraceWriter<W>,
    commands: &Receiver<Command>,
    recycle: &Sender<EventBatch>,
) -> Result<W, FormatError> {
    while let Ok(command) = commands.recv() {
        match command {
            Command::Sites(sites) => {
                for site in sites {
                    writer.add_site(site);
                }
            }
            Command::String(s) => {
                writer.add_string(&s);
            }
            Command::Modules(modules) => writer.add_modules(&modules),
            Command::Singles(events) => {
                for (thread, event) in &events {
                    writer.push(*thread, event)?;
                }
            }
            Command::Events(thread, events) => {
                writer.push_batch(thread, &events)?;
                let _ = recycle.send(events);
            }
            Command::Flush => writer.flush()?,
            Command::Finish(trailer) => return writer.finish(&trailer),
        }
    }
    writer.flush()?;
    Err(FormatError::WriterStopped)
}

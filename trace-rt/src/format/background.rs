//! A [`TraceWriter`] on a thread of its own: encoding and compressing the
//! events run beside the recorder instead of inside it.
//!
//! A recorder on two cores has three jobs: the program runs, the recorder
//! turns what it recorded into events, and the writer encodes and
//! compresses them. The writer's share is the largest (half of a rewrite
//! recording's time); on its own thread it overlaps the other two.
//!
//! Everything goes to the thread in one ordered channel, so the file is the
//! one the same calls on a [`TraceWriter`] write: definitions before the
//! events that use them, each thread's events in order. Ids of sites and
//! strings are counted here, as the writer counts them. An error on the
//! thread stops it; the next call here (at the latest [`finish`]) returns it.
//!
//! [`finish`]: BackgroundWriter::finish

use std::io::Write;
use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError, channel, sync_channel};
use std::thread::JoinHandle;

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
    commands: Option<SyncSender<Command>>,
    /// Batches the thread is done with, for the next ones.
    recycled: Receiver<EventBatch>,
    thread: Option<JoinHandle<Result<W, FormatError>>>,
    singles: Vec<(ThreadId, Event)>,
    pending_sites: Vec<Site>,
    sites_defined: u32,
    strings_defined: u32,
}

impl<W: Write + Send + 'static> BackgroundWriter<W> {
    /// Moves `writer` (configured, with its header written) to a new thread.
    pub fn start(writer: TraceWriter<W>) -> Result<Self, FormatError> {
        let (sites_defined, strings_defined) = writer.definitions();
        let (commands, received) = sync_channel(MESSAGES_IN_FLIGHT);
        let (recycle, recycled) = channel();
        let thread = std::thread::Builder::new()
            .name("linetrace-writer".into())
            .spawn(move || run(writer, &received, &recycle))?;
        Ok(BackgroundWriter {
            commands: Some(commands),
            recycled,
            thread: Some(thread),
            singles: Vec::new(),
            pending_sites: Vec::new(),
            sites_defined,
            strings_defined,
        })
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
        let written = self.join();
        sent.and(written)
    }

    /// An empty batch: one the thread is done with if any.
    fn empty_batch(&mut self) -> EventBatch {
        match self.recycled.try_recv() {
            Ok(mut v) => {
                v.clear();
                v
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => EventBatch::new(),
        }
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
        let Some(commands) = &self.commands else { return Err(FormatError::WriterStopped) };
        if commands.send(command).is_ok() {
            return Ok(());
        }
        // The thread stopped: its error says why.
        match self.join() {
            Err(e) => Err(e),
            Ok(_) => Err(FormatError::WriterStopped),
        }
    }

    /// Waits for the thread; its result, once.
    fn join(&mut self) -> Result<W, FormatError> {
        self.commands = None;
        let thread = self.thread.take().ok_or(FormatError::WriterStopped)?;
        thread.join().unwrap_or_else(|_| Err(FormatError::WriterStopped))
    }
}

impl<W: Write + Send + 'static> Drop for BackgroundWriter<W> {
    /// A writer dropped without `finish` (the recorder failed) still writes
    /// what it was sent: the file stays readable, as a truncated trace.
    fn drop(&mut self) {
        let _ = self.send_sites();
        let _ = self.send_singles();
        if self.thread.is_some() {
            let _ = self.send_raw(Command::Flush);
            let _ = self.join();
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

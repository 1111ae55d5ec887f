//! Which thread's accesses make the columns of a decoded trace.
//!
//! A column is a read in file order; with one thread that is program order.
//! Threads recorded at the same time each have their own order (and their
//! own core's cache): interleaving them by file order draws a working set no
//! core ever had. So a model is decoded for one thread's timeline, by
//! default the thread with the most reads, or for all threads at once when
//! asked ([`ThreadChoice::All`]: the order the events were written in).
//!
//! With one thread chosen, the events of the others are skipped, except the
//! ones about the process's memory (allocations, moves of the program break,
//! exec): blocks are shared, so a block another thread allocated still names
//! the rows the chosen thread reads.
//!
//! ```
//! use decoder::timeline::{ThreadChoice, on_timeline};
//! use trace_rt::format::Event;
//!
//! let read = Event::Access { site: 0, addr: 0x1000 };
//! assert!(on_timeline(Some(7), 7, &read));
//! assert!(!on_timeline(Some(7), 8, &read));
//! assert!(on_timeline(None, 8, &read));
//! assert_eq!("all".parse::<ThreadChoice>(), Ok(ThreadChoice::All));
//! assert_eq!("1234".parse::<ThreadChoice>(), Ok(ThreadChoice::Only(1234)));
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use trace_rt::format::{Event, TraceReader};

use crate::DecodeError;
use crate::model::access_of;

/// Which thread's accesses make the columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadChoice {
    /// Every thread's, in the order the events were written.
    #[default]
    All,
    /// The thread with the most reads (ties: the lowest id); every thread
    /// when only one thread read anything.
    Busiest,
    /// One thread, by its id.
    Only(u32),
}

impl std::str::FromStr for ThreadChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "all" => Ok(ThreadChoice::All),
            "busiest" => Ok(ThreadChoice::Busiest),
            id => id
                .parse::<u32>()
                .map(ThreadChoice::Only)
                .map_err(|_| format!("{id:?} is not a thread id, `busiest` or `all`")),
        }
    }
}

/// What one thread did, counted without decoding the working set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ThreadCensus {
    /// Reads (columns, were this thread's timeline shown).
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Invocations of the traced function.
    pub invocations: u64,
    /// Entries into the function that were not traced.
    pub skipped_invocations: u64,
}

/// Whether an event of `thread` belongs to a model of `timeline`'s columns
/// (`None`: every thread's). The one rule both the decoding pass and the
/// column cursor apply, so that their columns agree.
#[inline]
pub fn on_timeline(timeline: Option<u32>, thread: u32, event: &Event) -> bool {
    timeline.is_none_or(|t| t == thread) || is_process_wide(event)
}

/// Events about the whole process's memory or image, kept whichever thread
/// made them.
fn is_process_wide(event: &Event) -> bool {
    matches!(
        event,
        Event::Alloc(_)
            | Event::AllocDetail { .. }
            | Event::AllocStack { .. }
            | Event::ProgramBreak { .. }
            | Event::CustomAllocation(_)
            | Event::Exec { .. }
    )
}

/// Reads, writes and invocations of every thread that made any, from one
/// pass over the events (no working set: a fraction of a decode's time).
pub fn census(path: &Path) -> Result<Census, DecodeError> {
    let mut reader = TraceReader::open(path)?;
    let mut threads: BTreeMap<u32, ThreadCensus> = BTreeMap::new();
    let mut last: Option<(u32, ThreadCensus)> = None;
    while let Some(rec) = reader.next_record()? {
        let counted = match access_of(&rec.event, reader.sites())? {
            Some(access) => (u64::from(access.reads), u64::from(access.writes), 0, 0),
            None if matches!(rec.event, Event::InvocationStart { .. }) => (0, 0, 1, 0),
            None if matches!(rec.event, Event::InvocationSkipped { .. }) => (0, 0, 0, 1),
            None => continue,
        };
        // Events come in runs of one thread (a chunk each): count a run
        // aside, and add it up when the thread changes.
        let entry = match &mut last {
            Some((t, c)) if *t == rec.thread => c,
            _ => {
                if let Some((t, c)) = last.take() {
                    add(threads.entry(t).or_default(), &c);
                }
                &mut last.insert((rec.thread, ThreadCensus::default())).1
            }
        };
        entry.reads += counted.0;
        entry.writes += counted.1;
        entry.invocations += counted.2;
        entry.skipped_invocations += counted.3;
    }
    if let Some((t, c)) = last {
        add(threads.entry(t).or_default(), &c);
    }
    Ok(threads)
}

fn add(total: &mut ThreadCensus, run: &ThreadCensus) {
    total.reads += run.reads;
    total.writes += run.writes;
    total.invocations += run.invocations;
    total.skipped_invocations += run.skipped_invocations;
}

/// What every thread did, by thread id.
pub type Census = BTreeMap<u32, ThreadCensus>;

/// The timeline `choice` stands for in the trace at `path`, and the census
/// it was chosen from (`None` for [`ThreadChoice::All`], which needs none).
pub fn resolve(choice: ThreadChoice, path: &Path) -> Result<(Option<u32>, Option<Census>), DecodeError> {
    match choice {
        ThreadChoice::All => Ok((None, None)),
        ThreadChoice::Busiest => {
            // One thread's events (or none): it is the timeline, and no
            // census is needed to know (the common case, read cheaply).
            if trace_rt::format::event_threads(path)?.is_some_and(|threads| threads.len() <= 1) {
                return Ok((None, None));
            }
            let threads = census(path)?;
            let readers = threads.values().filter(|c| c.reads > 0).count();
            // Most reads, the lowest id among equals (max_by_key keeps the
            // last maximum: walk from the highest id down).
            let busiest = threads.iter().rev().max_by_key(|(_, c)| c.reads).map(|(&t, _)| t);
            Ok((busiest.filter(|_| readers > 1), Some(threads)))
        }
        ThreadChoice::Only(thread) => {
            let threads = census(path)?;
            if !threads.contains_key(&thread) {
                return Err(DecodeError::NoSuchThread { thread, known: threads.keys().copied().collect() });
            }
            Ok((Some(thread), Some(threads)))
        }
    }
}

//! [`ColumnCursor`]: the one way to walk the columns of a decoded trace
//! after decoding. It restores the working-set snapshot at or before the
//! column asked for, replays from there, and then hands out one read column
//! per [`ColumnCursor::step`]. It can be kept and resumed (the viewer walks
//! on from where it stopped drawing), and it can rebuild call frames
//! (`with_calls`).

use std::fs::File;
use std::io::BufReader;

use trace_rt::format::{Event, FormatError, TraceReader};

use crate::DecodeError;
use crate::calltree::{CallTreeBuilder, apply_control};
use crate::model::{Access, Model, access_of};
use crate::timeline::on_timeline;
use crate::working_set::{Departure, HashedLines, LineObserver, LineStore, WorkingSet};

/// One read column: the read, and the thread that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnRead {
    /// Its column.
    pub column: u64,
    /// Thread.
    pub thread: u32,
    /// The access (a read; possibly also a write).
    pub access: Access,
}

/// Walks the columns of `model` from any column on; the working set lives
/// in store `S` (sorted rows for drawing rows, hashed for summing spans).
pub struct ColumnCursor<'m, S: LineStore> {
    model: &'m Model,
    reader: TraceReader<BufReader<File>>,
    set: WorkingSet<S>,
    calls: Option<CallTreeBuilder>,
    /// The column the next step yields.
    column: u64,
}

impl<'m, S: LineStore> ColumnCursor<'m, S> {
    /// A cursor whose next step yields column `column` (its working set is
    /// in the state after column `column - 1`).
    pub fn new(model: &'m Model, column: u64) -> Result<Self, DecodeError> {
        Self::start(model, column, false)
    }

    /// Like [`ColumnCursor::new`], also rebuilding call frames.
    pub fn with_calls(model: &'m Model, column: u64) -> Result<Self, DecodeError> {
        Self::start(model, column, true)
    }

    fn start(model: &'m Model, column: u64, calls: bool) -> Result<Self, DecodeError> {
        let snaps = &model.working_set.snapshots;
        let i = snaps.partition_point(|s| s.column <= column).saturating_sub(1);
        let file = File::open(&model.trace_path).map_err(FormatError::from)?;
        let mut reader = TraceReader::new(BufReader::with_capacity(1 << 16, file))?;
        let Some(snap) = snaps.get(i) else {
            // Snapshots are taken at events chunks: a trace cut inside its
            // first chunk has none, and no events either. Its walk is empty.
            if model.columns > 0 {
                return Err(DecodeError::Corrupt("the trace has no snapshot to start from".into()));
            }
            let set = WorkingSet::new(model.working_set.config);
            let calls = calls.then(CallTreeBuilder::default);
            return Ok(ColumnCursor { model, reader, set, calls, column: 0 });
        };
        reader.seek_to_chunk(snap.chunk, &model.sites)?;
        let config = model.working_set.config;
        let calls = calls.then(|| CallTreeBuilder::resume(&snap.stacks));
        if snap.column >= column {
            let set = WorkingSet::restore(config, &snap.lines, snap.clock, snap.column);
            return Ok(ColumnCursor { model, reader, set, calls, column: snap.column });
        }
        // Up to the column, replay with the hashed store (a sorted one
        // shifts its rows on every miss), then take the rows' order once.
        let mut walk = ColumnCursor::<'m, HashedLines> {
            model,
            reader,
            set: WorkingSet::restore(config, &snap.lines, snap.clock, snap.column),
            calls,
            column: snap.column,
        };
        while walk.column < column {
            if walk.step(&mut |_: Departure| {})?.is_none() {
                break;
            }
        }
        let set = WorkingSet::restore(config, &walk.set.snapshot(), walk.set.clock(), walk.set.reads());
        Ok(ColumnCursor { model, reader: walk.reader, set, calls: walk.calls, column: walk.column })
    }

    /// The column the next step yields.
    pub fn column(&self) -> u64 {
        self.column
    }

    /// The working set after the last step.
    pub fn set(&self) -> &WorkingSet<S> {
        &self.set
    }

    /// The working set, for observers that keep sums in its line entries
    /// ([`crate::spans::SpanAccumulator`]).
    pub fn set_mut(&mut self) -> &mut WorkingSet<S> {
        &mut self.set
    }

    /// The frames rebuilt so far (with [`ColumnCursor::with_calls`]).
    pub fn calls(&self) -> Option<&CallTreeBuilder> {
        self.calls.as_ref()
    }

    /// Hands over the frame builder (with [`ColumnCursor::with_calls`]).
    pub fn into_calls(self) -> Option<CallTreeBuilder> {
        self.calls
    }

    /// Applies the next read column to the working set (`observer` hears of
    /// every line touched, inserted and gone) and returns it; `None` at the
    /// end of the trace. Writes and control events before it are consumed
    /// (and fed to the frame builder).
    pub fn step(&mut self, observer: &mut impl LineObserver) -> Result<Option<ColumnRead>, DecodeError> {
        loop {
            match self.next_access(observer)? {
                None => return Ok(None),
                Some(Step::Read(read)) => return Ok(Some(read)),
                Some(Step::Write { .. }) => {}
            }
        }
    }

    /// Like [`ColumnCursor::step`], but stops at writes too (which make no
    /// column): every access in trace order.
    pub fn next_access(&mut self, observer: &mut impl LineObserver) -> Result<Option<Step>, DecodeError> {
        // Past the last read the walk goes on: writes after it (a function
        // that crashed right after a store) have column `model.columns`.
        loop {
            // Accesses come the fast way (`TraceReader::next_access`), the
            // rest from `next_record`.
            let taken = match self.reader.next_access() {
                Some((thread, site, addr)) => self.take(thread, &Event::Access { site, addr }, observer)?,
                None => match self.reader.next_record()? {
                    Some(rec) => self.take(rec.thread, &rec.event, observer)?,
                    None => return Ok(None),
                },
            };
            match taken {
                Taken::Step(step) => return Ok(Some(step)),
                Taken::End => return Ok(None),
                Taken::Next => {}
            }
        }
    }

    /// One event of `thread`: an access is a step, a control event feeds
    /// the frame builder.
    #[inline(always)]
    fn take(&mut self, thread: u32, event: &Event, observer: &mut impl LineObserver) -> Result<Taken, DecodeError> {
        if !on_timeline(self.model.timeline, thread, event) {
            return Ok(Taken::Next);
        }
        let Some(access) = access_of(event, self.reader.sites())? else {
            if let Some(calls) = self.calls.as_mut() {
                apply_control(calls, thread, event, self.column);
            }
            return Ok(Taken::Next);
        };
        if access.reads && self.column >= self.model.columns {
            // Every read the model counted is walked: a read beyond them
            // would be a column it has no data for.
            return Ok(Taken::End);
        }
        if let Some(calls) = self.calls.as_mut() {
            if access.writes {
                calls.write(thread);
            }
            if access.reads {
                calls.read(thread);
            }
        }
        if !access.reads {
            return Ok(Taken::Step(Step::Write { thread, access }));
        }
        self.set.read(access.addr, access.size, observer);
        let read = ColumnRead { column: self.column, thread, access };
        self.column += 1;
        Ok(Taken::Step(Step::Read(read)))
    }
}

/// What one event does to a walk.
enum Taken {
    /// Nothing to hand out: go on.
    Next,
    /// An access to hand out.
    Step(Step),
    /// The walk is over.
    End,
}

/// One access, as [`ColumnCursor::next_access`] hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A read: a column (possibly also a write).
    Read(ColumnRead),
    /// A write only: no column.
    Write {
        /// Thread.
        thread: u32,
        /// The access.
        access: Access,
    },
}

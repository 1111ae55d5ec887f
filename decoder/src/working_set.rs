//! The working set of cache lines: the algorithm behind the bitmap.
//!
//! The set is carried forward one *column* per memory-read event. Lines are
//! kept sorted by address; a line's row is its rank. For each read:
//! - every line the read touches (an access that straddles a line boundary
//!   touches both lines; a rep-string range touches all of them) is either
//!   - a **hit**: its age goes back to `max_age`, the bytes read are added to
//!     `bytes_read`, and the touched bytes are or-ed into its byte mask; or
//!   - a **miss**: the line is inserted at its sorted row (rows below shift
//!     down by one), every *other* line's age drops by one, and lines whose
//!     age reaches 0 leave the set.
//! - `max_rows` is a hard cap on the set size: when an insertion exceeds it,
//!   the least recently touched line leaves.
//!
//! Ages are not decremented one by one: a line stores the value of the miss
//! clock when it was last touched, and its age is `max_age - (clock -
//! last_touch)`. Eviction order is a queue of (refresh sequence, line) with
//! lazy deletion: it depends only on the lines' states, so a set restored
//! from a snapshot evicts exactly like the original. An entry also says
//! where its line lies in the store ([`LineStore::Place`]), so that an
//! entry gone stale (22% of the 75M entries the 100M-read benchmark trace
//! pops) is dropped without a lookup.
//!
//! Two stores share this logic: [`SortedLines`] keeps rows in address order
//! for drawing ([`OrderedWorkingSet`]); [`HashedLines`] skips the ordering
//! for the decoding pass, where only membership, ages and bytes matter
//! ([`FastWorkingSet`]); it sorts when a snapshot is taken.
//! Writes do not enter the set: the bitmap shows how reads use lines.

use std::collections::VecDeque;

use crate::line_positions::{LinePositions, Vacancy};
use crate::lines::{LineSize, byte_mask};
use crate::spans::LineSums;

/// Configuration of the working set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkingSetConfig {
    /// Cache line size in bytes: a power of two from 8 to 128.
    pub line_size: u32,
    /// Misses a line survives untouched.
    pub max_age: u32,
    /// Hard cap on the number of lines (least recently used leaves first).
    pub max_rows: u32,
}

impl Default for WorkingSetConfig {
    fn default() -> Self {
        // 512 lines of 64 bytes: a 32 KiB L1 data cache.
        WorkingSetConfig { line_size: 64, max_age: 512, max_rows: 512 }
    }
}

impl WorkingSetConfig {
    /// Checks the ranges; returns a message for people when out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !self.line_size.is_power_of_two() || !(8..=128).contains(&self.line_size) {
            return Err(format!("line size {} must be a power of two from 8 to 128", self.line_size));
        }
        if self.max_age == 0 {
            return Err("max age must be at least 1".to_string());
        }
        if self.max_rows == 0 {
            return Err("max rows must be at least 1".to_string());
        }
        Ok(())
    }
}

/// One cache line in the set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineState {
    /// Line number: address / line size.
    pub line: u64,
    /// Miss clock at the last touch.
    pub last_touch: u64,
    /// Order of the last refresh (the first touch after a miss): the LRU
    /// order among lines with the same `last_touch`.
    pub seq: u64,
    /// Column of the last read that touched the line: who touched it last
    /// (colouring by function or allocation, hover) without a replay.
    pub last_column: u64,
    /// Bytes read from the line since it entered the set (repeats count).
    pub bytes_read: u32,
    /// Which bytes of the line were read (bit i: byte i).
    pub touched: u128,
    /// Running sums of the span being summed ([`crate::spans`]); not part
    /// of the set's state (snapshots carry them zeroed).
    pub spans: LineSums,
}

impl LineState {
    /// Distinct bytes read since the line entered the set.
    pub fn distinct_bytes(&self) -> u32 {
        self.touched.count_ones()
    }
}

/// A line leaving the set, for fetch statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Departure {
    /// The line's final state.
    pub state: LineState,
}

/// Follows what a read does to individual lines: the fetch statistics and
/// the bitmap summary ([`crate::spans`]) listen here. A closure taking a
/// [`Departure`] observes departures only.
pub trait LineObserver {
    /// A line already in the set is about to be touched; `state` is its
    /// state before the touch.
    #[inline]
    fn before_touch(&mut self, state: &mut LineState) {
        let _ = state;
    }
    /// A line entered the set with `state`.
    #[inline]
    fn inserted(&mut self, state: &mut LineState) {
        let _ = state;
    }
    /// A line left the set with `state` (by reference: a line's state is
    /// over a hundred bytes, and the copy cost more than the work on it).
    fn departed(&mut self, state: &LineState);
}

/// Counts lines entering and leaving the set, and what was read from the
/// lines that left: the fetch statistics every consumer reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct FetchCounter {
    /// Lines inserted.
    pub inserted: u64,
    /// Lines that left.
    pub departed: u64,
    /// Bytes read from the lines that left, while they were in the set.
    pub bytes_read: u64,
    /// Distinct bytes read from the lines that left.
    pub distinct_bytes: u64,
}

impl FetchCounter {
    /// Mean bytes and distinct bytes read per line that left (0 when none).
    pub fn means(&self) -> (f64, f64) {
        if self.departed == 0 {
            return (0.0, 0.0);
        }
        let n = self.departed as f64;
        (self.bytes_read as f64 / n, self.distinct_bytes as f64 / n)
    }

    /// The share of a line's bytes read while it was in the set, over the
    /// lines that left: mean distinct bytes / line size.
    pub fn utilisation(&self, line_size: u32) -> f64 {
        self.means().1 / f64::from(line_size)
    }
}

impl LineObserver for FetchCounter {
    #[inline]
    fn inserted(&mut self, _: &mut LineState) {
        self.inserted += 1;
    }
    #[inline]
    fn departed(&mut self, state: &LineState) {
        self.departed += 1;
        self.bytes_read += u64::from(state.bytes_read);
        self.distinct_bytes += u64::from(state.distinct_bytes());
    }
}

impl<F: FnMut(Departure)> LineObserver for F {
    #[inline]
    fn departed(&mut self, state: &LineState) {
        self(Departure { state: *state })
    }
}

/// What one read did to the set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadEffect {
    /// Lines inserted (misses).
    pub inserted: u32,
    /// Lines touched that were already present (hits).
    pub hits: u32,
}

/// Where the lines of a working set live.
pub trait LineStore: Default {
    /// Where an absent line goes ([`LineStore::find`]).
    type Vacancy: Copy;
    /// Where a present line lives, when the store can say so for as long
    /// as the line stays ([`HashedLines`]: its position), so that a removal
    /// can test the line's state without a lookup; `()` when lines move.
    type Place: Copy + std::fmt::Debug;
    /// The state of `line` and its place, or where it goes when absent: one
    /// lookup for a hit, or for a miss and the insertion that follows it (a
    /// miss-heavy replay spent its time in lookups).
    fn find(&mut self, line: u64) -> Result<(Self::Place, &mut LineState), Self::Vacancy>;
    /// Adds `state`, whose line was absent, where [`LineStore::find`] said,
    /// with no change to the store since; its place.
    fn insert_vacant(&mut self, vacancy: Self::Vacancy, state: LineState) -> Self::Place;
    /// Removes `line` if it is present and `wanted`, showing its state to
    /// `removed`. `place` is where the line was when last found or inserted
    /// (it may have left since, and another line taken its place).
    fn remove_if(
        &mut self,
        line: u64,
        place: Self::Place,
        wanted: impl FnOnce(&LineState) -> bool,
        removed: impl FnOnce(&LineState),
    );
    /// The state of `line`, if present.
    fn get_mut(&mut self, line: u64) -> Option<&mut LineState>;
    /// Adds a line that is not present; its place.
    fn insert(&mut self, state: LineState) -> Self::Place;
    /// Number of lines.
    fn len(&self) -> usize;
    /// True when empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every line in address order.
    fn sorted(&self) -> Vec<LineState>;
    /// Removes every line.
    fn take_all(&mut self) -> Vec<LineState>;
    /// Visits every line, in no particular order.
    fn for_each(&self, visit: impl FnMut(&LineState));
    /// Visits every line mutably, in no particular order.
    fn for_each_mut(&mut self, visit: impl FnMut(&mut LineState));
}

/// Lines in a vector kept in address order: rows for drawing.
#[derive(Clone, Debug, Default)]
pub struct SortedLines(Vec<LineState>);

impl LineStore for SortedLines {
    /// The row the line goes to.
    type Vacancy = usize;
    /// Rows move with every insertion above them.
    type Place = ();
    #[inline]
    fn find(&mut self, line: u64) -> Result<((), &mut LineState), usize> {
        let i = self.0.binary_search_by_key(&line, |l| l.line)?;
        Ok(((), &mut self.0[i]))
    }
    fn insert_vacant(&mut self, row: usize, state: LineState) {
        self.0.insert(row, state);
    }
    fn remove_if(
        &mut self,
        line: u64,
        _: (),
        wanted: impl FnOnce(&LineState) -> bool,
        removed: impl FnOnce(&LineState),
    ) {
        if let Ok(i) = self.0.binary_search_by_key(&line, |l| l.line)
            && wanted(&self.0[i])
        {
            removed(&self.0.remove(i));
        }
    }
    #[inline]
    fn get_mut(&mut self, line: u64) -> Option<&mut LineState> {
        let i = self.0.binary_search_by_key(&line, |l| l.line).ok()?;
        Some(&mut self.0[i])
    }
    fn insert(&mut self, state: LineState) {
        if let Err(i) = self.0.binary_search_by_key(&state.line, |l| l.line) {
            self.0.insert(i, state);
        }
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn sorted(&self) -> Vec<LineState> {
        self.0.clone()
    }
    fn take_all(&mut self) -> Vec<LineState> {
        std::mem::take(&mut self.0)
    }
    fn for_each(&self, visit: impl FnMut(&LineState)) {
        self.0.iter().for_each(visit)
    }
    fn for_each_mut(&mut self, visit: impl FnMut(&mut LineState)) {
        self.0.iter_mut().for_each(visit)
    }
}

/// Lines in a dense vector (no order) with an index from line number to
/// position (`LinePositions`): O(1) updates, and visiting every line (once
/// per summary block) walks contiguous memory instead of a sparse hash
/// table of large entries. A removal leaves a hole that the next insertion
/// fills: on a miss-heavy trace nearly every read removes a line and
/// inserts one, and moving the last line into the hole cost a copy and a
/// second update of the index per removal.
#[derive(Clone, Debug, Default)]
pub struct HashedLines {
    index: LinePositions,
    /// Lines, and holes (their `line` is [`HOLE`]).
    lines: Vec<LineState>,
    /// Positions of the holes in `lines`, the next to fill last.
    holes: Vec<u32>,
}

/// The line number of a hole: no line is this large (lines are addresses
/// shifted right by at least 3).
const HOLE: u64 = u64::MAX;

impl LineStore for HashedLines {
    type Vacancy = Vacancy;
    /// The position in `lines`: a line stays there until it leaves.
    type Place = u32;
    #[inline]
    fn find(&mut self, line: u64) -> Result<(u32, &mut LineState), Vacancy> {
        let i = self.index.get_or_vacancy(line)?;
        Ok((i, &mut self.lines[i as usize]))
    }
    #[inline]
    fn insert_vacant(&mut self, vacancy: Vacancy, state: LineState) -> u32 {
        let position = match self.holes.pop() {
            Some(hole) => {
                self.lines[hole as usize] = state;
                hole
            }
            None => {
                self.lines.push(state);
                (self.lines.len() - 1) as u32
            }
        };
        self.index.occupy_vacant(vacancy, state.line, position);
        position
    }
    /// The state is tested where `place` says, before the index is asked:
    /// a test that fails (a stale LRU entry) costs no lookup, and one that
    /// passes loads the state and the index side by side, where the
    /// index's answer used to lead to the state.
    #[inline]
    fn remove_if(
        &mut self,
        line: u64,
        place: u32,
        wanted: impl FnOnce(&LineState) -> bool,
        removed: impl FnOnce(&LineState),
    ) {
        let Some(state) = self.lines.get_mut(place as usize) else { return };
        if state.line != line || !wanted(state) {
            return;
        }
        let removed_from = self.index.remove(line);
        debug_assert_eq!(removed_from, Some(place), "line {line} is not where its place says");
        // Shown where it lies, then made a hole: no copy of the state.
        removed(state);
        state.line = HOLE;
        self.holes.push(place);
    }
    #[inline]
    fn get_mut(&mut self, line: u64) -> Option<&mut LineState> {
        let i = self.index.get(line)?;
        self.lines.get_mut(i as usize)
    }
    #[inline]
    fn insert(&mut self, state: LineState) -> u32 {
        match self.find(state.line) {
            Ok((place, present)) => {
                *present = state;
                place
            }
            Err(vacancy) => self.insert_vacant(vacancy, state),
        }
    }
    fn len(&self) -> usize {
        self.lines.len() - self.holes.len()
    }
    fn sorted(&self) -> Vec<LineState> {
        let mut v: Vec<LineState> = self.lines.iter().filter(|l| l.line != HOLE).copied().collect();
        v.sort_unstable_by_key(|l| l.line);
        v
    }
    fn take_all(&mut self) -> Vec<LineState> {
        self.index.clear();
        self.holes.clear();
        let mut lines = std::mem::take(&mut self.lines);
        lines.retain(|l| l.line != HOLE);
        lines
    }
    fn for_each(&self, visit: impl FnMut(&LineState)) {
        self.lines.iter().filter(|l| l.line != HOLE).for_each(visit)
    }
    fn for_each_mut(&mut self, visit: impl FnMut(&mut LineState)) {
        self.lines.iter_mut().filter(|l| l.line != HOLE).for_each(visit)
    }
}

/// The working set, generic over where its lines live.
#[derive(Clone, Debug)]
pub struct WorkingSet<S: LineStore> {
    config: WorkingSetConfig,
    line_size: LineSize,
    store: S,
    clock: u64,
    seq: u64,
    /// Reads applied so far: the column of the next read.
    reads: u64,
    /// Refreshes in order; an entry is stale when its line's current `seq`
    /// differs (it was refreshed again, or left).
    lru: VecDeque<Refresh<S::Place>>,
}

/// One refresh of a line, as the LRU order keeps it.
#[derive(Clone, Copy, Debug)]
struct Refresh<P> {
    seq: u64,
    line: u64,
    /// The miss clock at the refresh: the line's `last_touch` while the
    /// entry is current, so the age test needs no lookup.
    last_touch: u64,
    /// Where the line was ([`LineStore::Place`]).
    place: P,
}

/// A working set with rows in address order, for drawing.
pub type OrderedWorkingSet = WorkingSet<SortedLines>;
/// A working set without row order, for the decoding pass.
pub type FastWorkingSet = WorkingSet<HashedLines>;

impl<S: LineStore> WorkingSet<S> {
    /// An empty set. The config must be valid ([`WorkingSetConfig::validate`]).
    pub fn new(config: WorkingSetConfig) -> Self {
        WorkingSet {
            config,
            line_size: LineSize::new(config.line_size),
            store: S::default(),
            clock: 0,
            seq: 0,
            reads: 0,
            lru: VecDeque::new(),
        }
    }

    /// Restores a set from a snapshot ([`WorkingSet::snapshot`],
    /// [`WorkingSet::clock`], [`WorkingSet::reads`]).
    pub fn restore(config: WorkingSetConfig, lines: &[LineState], clock: u64, reads: u64) -> Self {
        let mut set = Self::new(config);
        let mut order: Vec<Refresh<S::Place>> = lines
            .iter()
            .map(|l| Refresh { seq: l.seq, line: l.line, last_touch: l.last_touch, place: set.store.insert(*l) })
            .collect();
        order.sort_unstable_by_key(|r| r.seq);
        set.lru = order.into();
        set.seq = lines.iter().map(|l| l.seq).max().unwrap_or(0);
        set.clock = clock;
        set.reads = reads;
        set
    }

    /// The configuration.
    pub fn config(&self) -> &WorkingSetConfig {
        &self.config
    }

    /// Lines in the set.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// True when no line is in the set.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// The state of `line`, if present.
    pub fn get_mut(&mut self, line: u64) -> Option<&mut LineState> {
        self.store.get_mut(line)
    }

    /// Every line, in address order, without span sums.
    pub fn snapshot(&self) -> Vec<LineState> {
        let mut lines = self.store.sorted();
        for l in &mut lines {
            l.spans = LineSums::default();
        }
        lines
    }

    /// The miss clock: insertions so far.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Reads applied so far: one per column, so also the column of the
    /// next read.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Age of a line now: `max_age` when just touched, 1 just before leaving.
    pub fn age(&self, state: &LineState) -> u32 {
        let since = self.clock - state.last_touch;
        self.config.max_age.saturating_sub(since.min(u64::from(u32::MAX)) as u32)
    }

    /// Applies one read of `size` bytes at `addr` (every line it touches:
    /// [`LineSize::pieces`]). `observer` hears of touches, insertions and
    /// departures.
    #[inline]
    pub fn read(&mut self, addr: u64, size: u64, observer: &mut impl LineObserver) -> ReadEffect {
        let mut effect = ReadEffect::default();
        for (line, lo, hi) in self.line_size.pieces(addr, size) {
            self.touch(line, hi - lo, byte_mask(lo, hi), &mut effect, observer);
        }
        self.reads += 1;
        effect
    }

    /// Visits every line, in no particular order.
    pub fn for_each_line(&self, visit: impl FnMut(&LineState)) {
        self.store.for_each(visit)
    }

    /// Visits every line mutably (for its span sums), in no particular order.
    pub fn for_each_line_mut(&mut self, visit: impl FnMut(&mut LineState)) {
        self.store.for_each_mut(visit)
    }

    #[inline]
    fn touch(&mut self, line: u64, bytes: u32, mask: u128, effect: &mut ReadEffect, observer: &mut impl LineObserver) {
        let vacancy = match self.store.find(line) {
            Err(vacancy) => vacancy,
            Ok((place, l)) => {
                observer.before_touch(l);
                l.bytes_read = l.bytes_read.saturating_add(bytes);
                l.touched |= mask;
                l.last_column = self.reads;
                if l.last_touch != self.clock {
                    self.seq += 1;
                    l.last_touch = self.clock;
                    l.seq = self.seq;
                    self.lru.push_back(Refresh { seq: self.seq, line, last_touch: self.clock, place });
                }
                effect.hits += 1;
                return;
            }
        };
        self.clock += 1;
        self.seq += 1;
        let mut state = LineState {
            line,
            last_touch: self.clock,
            seq: self.seq,
            last_column: self.reads,
            bytes_read: bytes,
            touched: mask,
            spans: LineSums::default(),
        };
        observer.inserted(&mut state);
        let place = self.store.insert_vacant(vacancy, state);
        self.lru.push_back(Refresh { seq: self.seq, line, last_touch: self.clock, place });
        effect.inserted += 1;
        self.expire(observer);
    }

    /// Removes lines whose age reached 0, then the least recently used ones
    /// while the set is over `max_rows`.
    fn expire(&mut self, observer: &mut impl LineObserver) {
        let max_age = u64::from(self.config.max_age);
        while let Some(&front) = self.lru.front() {
            // Refresh order is touch order: when the front entry is young
            // enough, so is every line, and only the row cap can evict
            // (this test runs on every miss, without a lookup).
            let over_cap = self.store.len() > self.config.max_rows as usize;
            if !over_cap && self.clock - front.last_touch < max_age {
                break;
            }
            self.lru.pop_front();
            // A stale entry (the line was refreshed since, or left) stays.
            self.store.remove_if(front.line, front.place, |l| l.seq == front.seq, |state| observer.departed(state));
        }
    }

    /// Empties the set (end of the trace), reporting every line.
    pub fn drain(&mut self, mut depart: impl FnMut(Departure)) {
        for state in self.store.take_all() {
            depart(Departure { state });
        }
        self.lru.clear();
    }
}

impl OrderedWorkingSet {
    /// Lines in row order (ascending address).
    pub fn lines(&self) -> &[LineState] {
        &self.store.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_age: u32, max_rows: u32) -> WorkingSetConfig {
        WorkingSetConfig { line_size: 64, max_age, max_rows }
    }

    fn rows(set: &OrderedWorkingSet) -> Vec<(u64, u32)> {
        set.lines().iter().map(|l| (l.line, set.age(l))).collect()
    }

    #[test]
    fn inserts_sorted_and_ages_other_lines_on_misses_only() {
        let mut set = OrderedWorkingSet::new(config(3, 10));
        let mut gone = Vec::new();
        set.read(5 * 64, 8, &mut |d: Departure| gone.push(d.state.line));
        set.read(2 * 64, 8, &mut |d: Departure| gone.push(d.state.line));
        assert_eq!(rows(&set), vec![(2, 3), (5, 2)], "line 2 inserted above 5; 5 aged by one");
        set.read(5 * 64 + 8, 8, &mut |d: Departure| gone.push(d.state.line));
        assert_eq!(rows(&set), vec![(2, 3), (5, 3)], "a hit refreshes and ages nobody");
        set.read(9 * 64, 4, &mut |d: Departure| gone.push(d.state.line));
        set.read(64, 4, &mut |d: Departure| gone.push(d.state.line));
        // Two misses since line 2 and 5 were touched: ages 1; a third leaves them.
        assert_eq!(rows(&set), vec![(1, 3), (2, 1), (5, 1), (9, 2)]);
        set.read(7 * 64, 4, &mut |d: Departure| gone.push(d.state.line));
        gone.sort();
        assert_eq!(gone, vec![2, 5]);
        assert_eq!(rows(&set), vec![(1, 2), (7, 3), (9, 1)]);
    }

    #[test]
    fn straddling_reads_touch_both_lines_and_count_bytes() {
        let mut set = OrderedWorkingSet::new(WorkingSetConfig::default());
        let e = set.read(60, 8, &mut |_: Departure| {});
        assert_eq!(e, ReadEffect { inserted: 2, hits: 0 });
        let l = set.lines();
        assert_eq!((l[0].line, l[0].bytes_read, l[0].distinct_bytes()), (0, 4, 4));
        assert_eq!((l[1].line, l[1].bytes_read, l[1].touched), (1, 4, 0b1111));
        set.read(60, 8, &mut |_: Departure| {});
        assert_eq!(set.lines()[0].bytes_read, 8, "repeated bytes count in bytes_read");
        assert_eq!(set.lines()[0].distinct_bytes(), 4, "but not in the mask");
    }

    #[test]
    fn max_rows_evicts_least_recently_used() {
        let mut set = OrderedWorkingSet::new(config(100, 2));
        let mut gone = Vec::new();
        set.read(0, 1, &mut |d: Departure| gone.push(d.state.line));
        set.read(64, 1, &mut |d: Departure| gone.push(d.state.line));
        set.read(0, 1, &mut |d: Departure| gone.push(d.state.line)); // line 0 now more recent
        set.read(128, 1, &mut |d: Departure| gone.push(d.state.line));
        assert_eq!(gone, vec![1]);
        assert_eq!(set.lines().iter().map(|l| l.line).collect::<Vec<_>>(), vec![0, 2]);
    }

    #[test]
    fn height_never_exceeds_max_age() {
        let mut set = OrderedWorkingSet::new(config(16, 1000));
        for i in 0..1000u64 {
            set.read((i * 7919 % 4096) * 64, 8, &mut |_: Departure| {});
            assert!(set.lines().len() <= 16);
        }
    }

    /// The hashed store (holes left by departures, filled by insertions)
    /// against the sorted one over a long random read sequence: the same
    /// departures in the same order, the same lines in the same states.
    #[test]
    fn hashed_and_sorted_stores_agree_under_churn() {
        for (max_age, max_rows) in [(8, 8), (16, 5), (3, 100)] {
            let mut sorted = OrderedWorkingSet::new(config(max_age, max_rows));
            let mut hashed = FastWorkingSet::new(config(max_age, max_rows));
            let mut seed = 0x9e37_79b9u64;
            for i in 0..20_000u64 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Mostly a few hot lines, sometimes one of many, sometimes straddling.
                let line = if seed >> 62 == 0 { (seed >> 20) % 4096 } else { (seed >> 20) % 24 };
                let addr = line * 64 + if seed & 0x300 == 0 { 60 } else { seed & 0x38 };
                let (mut gone_sorted, mut gone_hashed) = (Vec::new(), Vec::new());
                sorted.read(addr, 8, &mut |d: Departure| gone_sorted.push(d.state));
                hashed.read(addr, 8, &mut |d: Departure| gone_hashed.push(d.state));
                assert_eq!(gone_sorted, gone_hashed, "read {i}: departures");
                assert_eq!(sorted.len(), hashed.len(), "read {i}: size");
                if i % 97 == 0 {
                    assert_eq!(sorted.snapshot(), hashed.snapshot(), "read {i}: lines");
                }
            }
        }
    }

    /// The rules of the module's doc, kept the slow way: every line's age
    /// counted down one by one, eviction by a scan for the oldest refresh.
    struct ReferenceSet {
        config: WorkingSetConfig,
        /// (line, age, refresh order, bytes read).
        lines: Vec<(u64, u32, u64, u32)>,
        refreshes: u64,
        /// Lines touched since the last miss: touched again before the next
        /// one, they are not refreshed again.
        touched_since_miss: std::collections::HashSet<u64>,
    }

    impl ReferenceSet {
        fn new(config: WorkingSetConfig) -> Self {
            ReferenceSet { config, lines: Vec::new(), refreshes: 0, touched_since_miss: Default::default() }
        }

        /// A read of `size` bytes at `addr`; the lines that left, in order.
        fn read(&mut self, addr: u64, size: u64) -> Vec<u64> {
            let line_size = u64::from(self.config.line_size);
            let mut gone = Vec::new();
            for line in addr / line_size..=(addr + size - 1) / line_size {
                let bytes = ((line + 1) * line_size).min(addr + size) - (line * line_size).max(addr);
                if let Some(l) = self.lines.iter_mut().find(|l| l.0 == line) {
                    l.1 = self.config.max_age;
                    l.3 += bytes as u32;
                    // A line's first touch since the last miss refreshes it.
                    if self.touched_since_miss.insert(line) {
                        self.refreshes += 1;
                        l.2 = self.refreshes;
                    }
                    continue;
                }
                for l in &mut self.lines {
                    l.1 -= 1;
                }
                self.refreshes += 1;
                self.lines.push((line, self.config.max_age, self.refreshes, bytes as u32));
                self.touched_since_miss = [line].into();
                // Oldest refresh first: the lines whose age reached 0, then
                // the least recently refreshed while over the cap.
                self.lines.sort_by_key(|l| l.2);
                while let Some(&(line, age, _, _)) = self.lines.first() {
                    if age > 0 && self.lines.len() <= self.config.max_rows as usize {
                        break;
                    }
                    gone.push(line);
                    self.lines.remove(0);
                }
            }
            gone
        }

        /// (line, age, bytes read) in address order.
        fn rows(&self) -> Vec<(u64, u32, u32)> {
            let mut rows: Vec<_> = self.lines.iter().map(|l| (l.0, l.1, l.3)).collect();
            rows.sort_unstable();
            rows
        }
    }

    /// Both stores against [`ReferenceSet`] over random reads of hot and
    /// cold lines, with a set restored from a snapshot halfway joining in:
    /// the same departures in the same order, and the same rows.
    #[test]
    fn stores_follow_the_reference_rules() {
        for (max_age, max_rows) in [(8, 8), (16, 5), (3, 100), (40, 30)] {
            let config = config(max_age, max_rows);
            let mut reference = ReferenceSet::new(config);
            let mut sorted = OrderedWorkingSet::new(config);
            let mut hashed = FastWorkingSet::new(config);
            let mut restored: Option<FastWorkingSet> = None;
            let mut seed = 0x2545_f491u64 ^ u64::from(max_age);
            for i in 0..6_000u64 {
                if i == 3_000 {
                    restored =
                        Some(FastWorkingSet::restore(config, &hashed.snapshot(), hashed.clock(), hashed.reads()));
                }
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let line = if seed >> 61 == 0 { (seed >> 20) % 500 } else { (seed >> 20) % (u64::from(max_rows) + 4) };
                let addr = line * 64 + if seed & 0x700 == 0 { 60 } else { seed & 0x38 };
                let expected = reference.read(addr, 8);
                let rows = |set: &[LineState], age: &dyn Fn(&LineState) -> u32| {
                    set.iter().map(|l| (l.line, age(l), l.bytes_read)).collect::<Vec<_>>()
                };
                let (mut gone_sorted, mut gone_hashed) = (Vec::new(), Vec::new());
                sorted.read(addr, 8, &mut |d: Departure| gone_sorted.push(d.state.line));
                hashed.read(addr, 8, &mut |d: Departure| gone_hashed.push(d.state.line));
                assert_eq!(gone_sorted, expected, "max_age {max_age}, max_rows {max_rows}, read {i}: sorted");
                assert_eq!(gone_hashed, expected, "max_age {max_age}, max_rows {max_rows}, read {i}: hashed");
                assert_eq!(rows(sorted.lines(), &|l| sorted.age(l)), reference.rows(), "read {i}: rows");
                assert_eq!(rows(&hashed.snapshot(), &|l| hashed.age(l)), reference.rows(), "read {i}: hashed rows");
                if let Some(set) = &mut restored {
                    let mut gone = Vec::new();
                    set.read(addr, 8, &mut |d: Departure| gone.push(d.state.line));
                    assert_eq!(gone, expected, "max_age {max_age}, max_rows {max_rows}, read {i}: restored");
                    assert_eq!(rows(&set.snapshot(), &|l| set.age(l)), reference.rows(), "read {i}: restored rows");
                }
            }
        }
    }

    #[test]
    fn restore_continues_identically() {
        let mut a = OrderedWorkingSet::new(config(8, 8));
        for i in 0..50u64 {
            a.read((i * 37 % 20) * 64, 4, &mut |_: Departure| {});
        }
        let mut b = OrderedWorkingSet::restore(*a.config(), a.lines(), a.clock(), a.reads());
        let mut c = FastWorkingSet::restore(*a.config(), &a.snapshot(), a.clock(), a.reads());
        for i in 0..50u64 {
            let (mut ga, mut gb, mut gc) = (Vec::new(), Vec::new(), Vec::new());
            a.read((i * 13 % 23) * 64, 4, &mut |d: Departure| ga.push(d.state.line));
            b.read((i * 13 % 23) * 64, 4, &mut |d: Departure| gb.push(d.state.line));
            c.read((i * 13 % 23) * 64, 4, &mut |d: Departure| gc.push(d.state.line));
            assert_eq!(ga, gb);
            assert_eq!(ga, gc, "the hashed store behaves like the sorted one");
            assert_eq!(a.lines(), b.lines());
            assert_eq!(a.snapshot(), c.snapshot());
        }
    }
}

//! Reuse distance (LRU stack distance) of cache-line accesses, counted
//! in exact power-of-two buckets.
//!
//! The distance of an access is the number of *distinct* lines accessed
//! since the previous access to the same line (0: the line was the last one
//! accessed); a first access has no distance ("cold"). With the time of each
//! line's last access marked, the distance is the number of marks after
//! that time. Marks are bits, 64 time slots to a word; a count per block of
//! 32 words (2,048 slots), and a Fenwick tree over those counts, give the
//! marks of the blocks after a time in O(log(n/2048)).
//!
//! Only the distance's bucket is wanted (the histogram is all anyone reads),
//! and the marks of the time's own block after it are between none and all
//! the block's others: when both ends fall in one bucket, as they nearly
//! always do for a distance much longer than a block holds, that is the
//! bucket, and only otherwise are the block's words counted. The tree is
//! then 16 KiB for a trace of 280,000 lines, in the nearest cache, where a
//! tree over every word was 512 KiB and its walks waited on memory. The
//! 100M-read benchmark trace's decode, alternating rounds on a noisy host,
//! faster in 7 of 9: 4 rounds, median 7.67 -> 7.29 s (user CPU 14.4 ->
//! 13.7 s), then 5, median 6.57 -> 6.18 s (12.35 -> 11.47 s); the same
//! histogram.
//! (Per block of eight words, that tree was an eighth of the size, but
//! every query and update also summed the popcounts of up to eight words,
//! for an exact distance: slower, 2.27 -> 2.74 s for the tracker alone.)
//!
//! The word the present time is in (the *tail*) is kept out of the block
//! counts and the tree: a query never sums a word at or after its own, so
//! they need not hold the tail's marks until time moves past it. Every
//! access past the same-line shortcut sets a mark at the present, and one
//! at a short distance clears a mark in the same word, so this spares one
//! or two walks up the tree per access: the tail's count enters the tree
//! once per 64 accesses. And a line read again within the tail word (a
//! sweep's next read of its line) has all the marks after its last read in
//! that word, which is counted directly, without walking the tree.
//!
//! Memory is bounded by the number of distinct lines, not by the trace
//! length: when the time axis fills the bitmap, the live marks (one per line)
//! are renumbered densely and the counts and tree are rebuilt.

use std::collections::HashMap;

use serde::Serialize;

use crate::hashing::BuildLineHasher;
use crate::line_table::LineTable;

/// Histogram of reuse distances in power-of-two buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReuseHistogram {
    /// First accesses to a line.
    pub cold: u64,
    /// `buckets[0]`: distance 0; `buckets[k]` (k >= 1): distances in
    /// `[2^(k-1), 2^k)`.
    pub buckets: Vec<u64>,
}

impl ReuseHistogram {
    /// Bucket index of a distance.
    pub fn bucket_of(distance: u64) -> usize {
        if distance == 0 { 0 } else { 64 - distance.leading_zeros() as usize }
    }

    /// Lower bound of bucket `k`.
    pub fn bucket_start(k: usize) -> u64 {
        if k == 0 { 0 } else { 1 << (k - 1) }
    }

    /// Bucket `k` for people: `0`, `1`, `2-3`, `16-31`.
    pub fn bucket_label(k: usize) -> String {
        let (lo, hi) = (Self::bucket_start(k), Self::bucket_start(k + 1));
        if hi - lo <= 1 { lo.to_string() } else { format!("{lo}-{}", hi - 1) }
    }

    /// Counts one distance in bucket `k`.
    #[inline]
    fn add_to_bucket(&mut self, k: usize) {
        match self.buckets.get_mut(k) {
            Some(count) => *count += 1,
            None => self.add_bucket(k),
        }
    }

    /// Counts the first distance of bucket `k`, past the last bucket so
    /// far. Out of line: it is rare, and inline it kept `add_to_bucket` a call
    /// (the tracker alone, on the miss-heavy benchmark trace's accesses, 3
    /// alternating rounds: 2.35-2.48 -> 2.22-2.28 s).
    #[cold]
    #[inline(never)]
    fn add_bucket(&mut self, k: usize) {
        self.buckets.resize(k + 1, 0);
        self.buckets[k] += 1;
    }

    /// Accesses with a distance (all but the cold ones).
    pub fn warm(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// What is known of one line.
#[derive(Clone, Copy, Debug)]
struct LineEntry {
    /// Time of the last read ([`NOT_READ`] for lines only written so far).
    last_read: u32,
    /// Threads (by slot, the first [`MASKED_THREADS`]) that touched the
    /// line. 32 bits, not 64: with them an entry and its key take 16 bytes
    /// instead of 24, and this map of every line the trace touched is what
    /// outgrows the CPU's caches first.
    threads: u32,
}

const NOT_READ: u32 = u32::MAX;

impl Default for LineEntry {
    fn default() -> Self {
        LineEntry { last_read: NOT_READ, threads: 0 }
    }
}

/// Every line the trace touched: reuse distances of reads, and distinct
/// lines per thread, from one hash-map entry per line (the decoding pass
/// affords one lookup per access, not two).
pub struct ReuseDistance {
    lines: LineTable<LineEntry>,
    /// Distinct lines of threads beyond the ones the bit masks hold.
    overflow: HashMap<usize, std::collections::HashSet<u64, BuildLineHasher>>,
    /// One bit per time slot: set when it is some line's last read.
    marks: Vec<u64>,
    /// Marks in each block of [`BLOCK_WORDS`] words of `marks`, but for
    /// the tail word's. The tree holds them too, but gives one only by a
    /// walk, and every access past the tail reads one for its bounds.
    block_marks: Vec<u32>,
    /// Fenwick tree over `block_marks`.
    tree: Vec<u32>,
    /// The word `now` is in, whose marks `block_marks` and the tree leave
    /// out.
    tail: usize,
    now: u32,
    live: u32,
    /// (line, thread) of the last read.
    last: Option<(u64, usize)>,
    histogram: ReuseHistogram,
}

impl Default for ReuseDistance {
    fn default() -> Self {
        Self::new()
    }
}

impl ReuseDistance {
    /// An empty tracker.
    pub fn new() -> Self {
        ReuseDistance {
            lines: LineTable::new(),
            overflow: HashMap::new(),
            marks: vec![0; MIN_SLOTS / 64],
            block_marks: vec![0; MIN_SLOTS / BLOCK_SLOTS],
            tree: vec![0; MIN_SLOTS / BLOCK_SLOTS],
            tail: 0,
            now: 0,
            live: 0,
            last: None,
            histogram: ReuseHistogram::default(),
        }
    }

    /// Records a read of `line` by thread slot `thread`; returns the
    /// histogram bucket of its reuse distance ([`ReuseHistogram::bucket_of`];
    /// `None` when it is the line's first read).
    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    pub fn access(&mut self, line: u64, thread: usize) -> Option<usize> {
        if self.last == Some((line, thread)) {
            // The same line again: distance 0, and leaving its mark where it
            // is keeps every other line's order: no map or tree work.
            self.histogram.add_to_bucket(0);
            return Some(0);
        }
        self.last = Some((line, thread));
        if self.now as usize + 1 >= self.marks.len() * 64 {
            self.compact();
        }
        let now = self.now;
        self.now += 1;
        self.enter_word_of(now);
        let entry = self.lines.entry(line);
        let prev = std::mem::replace(&mut entry.last_read, now);
        let new_thread = mark_thread(&mut entry.threads, thread);
        if new_thread {
            self.note_overflow(line, thread);
        }
        let bucket = if prev == NOT_READ {
            self.live += 1;
            None
        } else {
            // Marks after `prev`: every line read since, once each.
            let bucket = self.bucket_after(prev);
            self.add(prev, -1);
            Some(bucket)
        };
        self.add(now, 1);
        match bucket {
            Some(k) => self.histogram.add_to_bucket(k),
            None => self.histogram.cold += 1,
        }
        bucket
    }

    /// Starts loading what an access to `line` will look at into the CPU
    /// cache (see [`ReuseQueue`]).
    #[inline]
    pub fn prefetch(&self, line: u64) {
        self.lines.prefetch(line);
    }

    /// The second step of a lookup's prefetch, a while after
    /// [`Self::prefetch`]: with `line`'s entry at hand, starts loading the
    /// word of the mark bitmap that its access will read and change;
    /// otherwise starts loading the entry's next slot. (If the line is
    /// read again before then, the hint is for an old mark, and only
    /// wasted.)
    #[inline]
    pub fn prefetch_marks(&self, line: u64) {
        if let Some(entry) = self.lines.prefetch_probe(line)
            && entry.last_read != NOT_READ
        {
            let word = entry.last_read as usize / 64;
            if let Some(w) = self.marks.get(word) {
                crate::prefetch::prefetch(w);
            }
        }
    }

    /// Records a write of `line` by thread slot `thread` (for distinct-line
    /// counts; writes have no reuse distance).
    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    pub fn write(&mut self, line: u64, thread: usize) {
        if self.last == Some((line, thread)) {
            return;
        }
        let entry = self.lines.entry(line);
        if mark_thread(&mut entry.threads, thread) {
            self.note_overflow(line, thread);
        }
    }

    fn note_overflow(&mut self, line: u64, thread: usize) {
        if thread >= MASKED_THREADS {
            self.overflow.entry(thread).or_default().insert(line);
        }
    }

    /// Distinct lines read or written by any thread.
    pub fn distinct_lines(&self) -> u64 {
        self.lines.len() as u64
    }

    /// Distinct lines read or written by thread slot `thread`.
    pub fn distinct_lines_of(&self, thread: usize) -> u64 {
        if thread >= MASKED_THREADS {
            return self.overflow.get(&thread).map_or(0, |s| s.len() as u64);
        }
        self.lines.values().filter(|e| e.threads & (1 << thread) != 0).count() as u64
    }

    /// The histogram so far.
    pub fn histogram(&self) -> &ReuseHistogram {
        &self.histogram
    }

    /// The histogram bucket of the number of marks at times `> t`, before
    /// the present's mark is set.
    ///
    /// A time in the tail word (a line read again soon, as a sweep reads
    /// its lines) has every later mark in that word: they are counted, with
    /// no walk of the tree. Otherwise the tree gives the marks of the
    /// blocks after `t`'s; those of its own block after it are between none
    /// and all its others, and when both ends fall in one bucket, that is
    /// the bucket (nearly always for a long distance, as a scattered read's:
    /// the block is a small part of it). Only otherwise are the words after
    /// `t`'s in its block counted.
    #[inline]
    fn bucket_after(&self, t: u32) -> usize {
        let word = t as usize / 64;
        let bit = t % 64;
        let later_in_word = if bit == 63 { 0 } else { (self.marks[word] & (u64::MAX << (bit + 1))).count_ones() };
        if word == self.tail {
            return ReuseHistogram::bucket_of(u64::from(later_in_word));
        }
        let block = word / BLOCK_WORDS;
        // With the tail's marks, wherever the tail is: they are all later.
        let beyond = self.live - self.prefix_blocks(block + 1);
        // `t`'s own mark is one of its block's.
        let at_most = beyond + self.block_marks[block] - 1;
        let bucket = ReuseHistogram::bucket_of(u64::from(beyond));
        if bucket == ReuseHistogram::bucket_of(u64::from(at_most)) {
            return bucket;
        }
        // The words after `t`'s, up to the tail (whose marks `beyond` has).
        let end = ((block + 1) * BLOCK_WORDS).min(self.tail);
        let later_words: u32 = self.marks[word + 1..end].iter().map(|w| w.count_ones()).sum();
        ReuseHistogram::bucket_of(u64::from(beyond + later_in_word + later_words))
    }

    /// Marks in blocks `0..blocks` (the tail word's left out).
    #[inline]
    fn prefix_blocks(&self, blocks: usize) -> u32 {
        let mut sum = 0;
        let mut i = blocks;
        while i > 0 {
            sum += self.tree[i - 1];
            i &= i - 1;
        }
        sum
    }

    /// Sets (`delta` 1) or clears (-1) the mark at `t`.
    #[inline]
    fn add(&mut self, t: u32, delta: i32) {
        let word = t as usize / 64;
        self.marks[word] ^= 1 << (t % 64);
        if word != self.tail {
            self.add_to_block(word / BLOCK_WORDS, delta);
        }
    }

    /// Moves the tail to the word of time `t` (the next mark's) if it is
    /// past the tail: the old tail's marks go into its block's count.
    #[inline]
    fn enter_word_of(&mut self, t: u32) {
        let word = t as usize / 64;
        if word != self.tail {
            self.add_to_block(self.tail / BLOCK_WORDS, self.marks[self.tail].count_ones() as i32);
            self.tail = word;
        }
    }

    /// Adds `delta` to `block`'s count, in the block counts and the tree.
    ///
    /// The tree's walks end at a step that varies with the block's bits, a
    /// branch hard to predict; but walks of a fixed number of steps were
    /// slower. The cache stage alone (a scratch harness: 20M reads of the
    /// benchmark's pattern, 32 MiB last level, best of 3 runs), 3
    /// alternating rounds each:
    /// - the tree's walks with the steps past the root sent to a spare node
    ///   (whose additions then waited on each other): 1.03-1.15 s, against
    ///   1.00-1.10 s as it is;
    /// - a sum per level of aligned runs of blocks instead of the tree (an
    ///   update adds to every level, a query takes from each level its bit
    ///   asks for): 1.07-1.12 s, against 0.98-1.16 s.
    ///
    /// Levels of sixteen-block groups that keep, for each member, the sum
    /// of the members before it in its group, were not faster either: a
    /// query then reads one number per level, with no walk, and an update
    /// adds to the later members of its group in each level (vector
    /// additions). The same
    /// harness, 12 alternating rounds on a noisy host: faster in 7, median
    /// 1.171 s against 1.165 s; `perf` put the same share of the stage's
    /// samples in the tracker (19.1% with the levels' updates, against
    /// 19.3%).
    #[inline]
    fn add_to_block(&mut self, block: usize, delta: i32) {
        self.block_marks[block] = self.block_marks[block].wrapping_add_signed(delta);
        let mut i = block + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Renumbers the live marks 0..live in time order and rebuilds the
    /// marks, the block counts and the tree, with room for sixteen times
    /// the live lines so compactions stay rare.
    ///
    /// A line's new time is the rank of its mark among the marks (one per
    /// line read): the marks of the words before its own, plus those before
    /// it in its word. So one pass over the table in memory order renumbers
    /// the lines, where they were sorted by time and each looked up again
    /// (the tracker alone, on the 100M-read benchmark trace's accesses:
    /// 2.24 s -> 2.21 s, 4 alternating rounds).
    fn compact(&mut self) {
        let mut marks_before = Vec::with_capacity(self.marks.len());
        let mut live = 0u32;
        for &word in &self.marks {
            marks_before.push(live);
            live += word.count_ones();
        }
        debug_assert_eq!(live, self.live, "one mark per line read");
        for entry in self.lines.values_mut() {
            if entry.last_read != NOT_READ {
                let (word, bit) = (entry.last_read as usize / 64, entry.last_read % 64);
                let earlier = self.marks[word] & ((1u64 << bit) - 1);
                entry.last_read = marks_before[word] + earlier.count_ones();
            }
        }
        let live = live as usize;
        let slots = (live * 16).max(MIN_SLOTS).next_power_of_two();
        self.marks = vec![0; slots / 64];
        // Times 0..live are the marks now.
        self.marks[..live / 64].fill(u64::MAX);
        if !live.is_multiple_of(64) {
            self.marks[live / 64] = (1u64 << (live % 64)) - 1;
        }
        // Block counts (the tail's left out), then the tree in O(n): the
        // counts, with partial sums pushed up.
        self.now = live as u32;
        self.tail = self.now as usize / 64;
        self.block_marks = vec![0; slots / BLOCK_SLOTS];
        for (word, marks) in self.marks[..self.tail].iter().enumerate() {
            self.block_marks[word / BLOCK_WORDS] += marks.count_ones();
        }
        self.tree = self.block_marks.clone();
        let size = self.tree.len();
        for i in 1..=size {
            let parent = i + (i & i.wrapping_neg());
            if parent <= size {
                let v = self.tree[i - 1];
                self.tree[parent - 1] += v;
            }
        }
    }
}

/// A [`ReuseDistance`] fed a few accesses late: each access starts loading
/// its line's entry when it arrives and is applied `QUEUE_DEPTH` accesses
/// later, when the entry is in the CPU cache. On a miss-heavy trace the
/// tracker's time was mostly waits on memory for the entries, one at a
/// time; queued, the waits overlap. The results are the same, in the same
/// order; read them after [`ReuseQueue::finish`].
///
/// What it still waits on: `perf annotate` of the 100M-read benchmark
/// trace's decode puts half of `push`'s samples on the instruction after
/// the entry's prefetch. The prefetch itself waits for a free slot among
/// the CPU's outstanding loads, which the scattered reads' misses in the
/// line table, the mark bitmap and the last level's sets keep full.
pub struct ReuseQueue {
    reuse: ReuseDistance,
    /// (line, thread) of the last read queued: the tracker's `last` when
    /// the next access queued is applied.
    last_read: Option<(u64, usize)>,
    pending: [(u64, u32, bool); QUEUE_DEPTH],
    /// Accesses queued so far; the oldest pending one is at
    /// `queued % QUEUE_DEPTH`.
    queued: usize,
}

/// Accesses between an entry's prefetch and its use: enough to cover a
/// load from memory at the tracker's pace. (8 and 32 did no better: the
/// cache stage alone, a scratch harness of 20M reads of the benchmark's
/// pattern with a 32 MiB last level, best of 3 runs, 3 alternating rounds:
/// 1.036-1.078 s and 0.965-1.002 s, against 0.964-1.089 s.)
const QUEUE_DEPTH: usize = 16;

impl Default for ReuseQueue {
    fn default() -> Self {
        ReuseQueue { reuse: ReuseDistance::new(), last_read: None, pending: [(0, 0, false); QUEUE_DEPTH], queued: 0 }
    }
}

impl ReuseQueue {
    /// A read of `line` by thread slot `thread` (see [`ReuseDistance::access`]).
    #[inline]
    pub fn read(&mut self, line: u64, thread: usize) {
        self.push(line, thread, false);
    }

    /// A write of `line` by thread slot `thread` (see [`ReuseDistance::write`]).
    #[inline]
    pub fn write(&mut self, line: u64, thread: usize) {
        self.push(line, thread, true);
    }

    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    fn push(&mut self, line: u64, thread: usize, write: bool) {
        // The line of the last read again: the tracker would count a
        // distance of 0 (a read) or nothing (a write) without looking
        // anything up, so it is not queued, nor its entry prefetched. A
        // quarter of the benchmark trace's reads are such, and the writes
        // after reads of their line (the tracker alone, on that trace's
        // accesses: 2.91 -> 2.72 s).
        if self.last_read == Some((line, thread)) {
            if !write {
                self.reuse.histogram.add_to_bucket(0);
            }
            return;
        }
        if !write {
            self.last_read = Some((line, thread));
        }
        self.reuse.prefetch(line);
        // Halfway through the queue, an entry is in the CPU cache: what
        // its access will touch next can start loading.
        if self.queued >= QUEUE_DEPTH / 2 {
            let (halfway, _, _) = self.pending[(self.queued - QUEUE_DEPTH / 2) % QUEUE_DEPTH];
            self.reuse.prefetch_marks(halfway);
        }
        let slot = self.queued % QUEUE_DEPTH;
        if self.queued >= QUEUE_DEPTH {
            let (l, t, w) = self.pending[slot];
            self.apply(l, t as usize, w);
        }
        // Thread slots are indices of the trace's threads: far below 2^32.
        self.pending[slot] = (line, thread as u32, write);
        self.queued += 1;
    }

    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    fn apply(&mut self, line: u64, thread: usize, write: bool) {
        if write {
            self.reuse.write(line, thread);
        } else {
            self.reuse.access(line, thread);
        }
    }

    /// Applies what is still queued, oldest first.
    pub fn finish(mut self) -> ReuseDistance {
        let start = self.queued.saturating_sub(QUEUE_DEPTH);
        for i in start..self.queued {
            let (l, t, w) = self.pending[i % QUEUE_DEPTH];
            self.apply(l, t as usize, w);
        }
        self.reuse
    }
}

/// Sets the bit of `thread` (if it has one); true when it was not set
/// (always true for threads beyond the mask, whose sets dedupe).
#[inline]
fn mark_thread(mask: &mut u32, thread: usize) -> bool {
    if thread >= MASKED_THREADS {
        return true;
    }
    let bit = 1u32 << thread;
    let new = *mask & bit == 0;
    *mask |= bit;
    new
}

/// Threads whose lines the per-line masks mark; the others' lines are
/// kept in sets of their own.
const MASKED_THREADS: usize = 32;

/// Fewest time slots of the mark bitmap.
const MIN_SLOTS: usize = 1 << 16;

/// Words of the mark bitmap per block of the tree.
const BLOCK_WORDS: usize = 32;
/// Time slots per block of the tree.
const BLOCK_SLOTS: usize = BLOCK_WORDS * 64;

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: the distance by scanning back, O(n^2).
    fn naive(seq: &[u64]) -> Vec<Option<u64>> {
        (0..seq.len())
            .map(|i| {
                let prev = (0..i).rev().find(|&j| seq[j] == seq[i])?;
                let distinct: std::collections::HashSet<u64> = seq[prev + 1..i].iter().copied().collect();
                Some(distinct.len() as u64)
            })
            .collect()
    }

    /// `n` lines drawn from `0..lines` by an LCG from `seed`.
    fn random_lines(mut seed: u64, n: usize, lines: u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 33) % lines
            })
            .collect()
    }

    /// The histogram buckets of distances.
    fn buckets(distances: &[Option<u64>]) -> Vec<Option<usize>> {
        distances.iter().map(|d| d.map(ReuseHistogram::bucket_of)).collect()
    }

    /// Reference for long sequences: every access's time marked in a
    /// Fenwick tree as long as it is its line's last, one slot per access
    /// (no tail, blocks or compaction); the distance is the marks after
    /// the line's previous access. O(n log n).
    fn by_marked_times(seq: &[u64]) -> Vec<Option<u64>> {
        let n = seq.len();
        let mut tree = vec![0i64; n + 1];
        let add = |tree: &mut Vec<i64>, t: usize, d: i64| {
            let mut i = t + 1;
            while i <= n {
                tree[i] += d;
                i += i & i.wrapping_neg();
            }
        };
        let prefix = |tree: &Vec<i64>, t: usize| {
            let (mut i, mut sum) = (t + 1, 0);
            while i > 0 {
                sum += tree[i];
                i &= i - 1;
            }
            sum
        };
        let mut last: HashMap<u64, usize> = HashMap::new();
        let mut marks = 0i64;
        seq.iter()
            .enumerate()
            .map(|(now, &line)| {
                let distance = last.insert(line, now).map(|prev| {
                    let after = marks - prefix(&tree, prev);
                    add(&mut tree, prev, -1);
                    marks -= 1;
                    after as u64
                });
                add(&mut tree, now, 1);
                marks += 1;
                distance
            })
            .collect()
    }

    /// Against an LRU stack (the distance is the line's depth in it), on
    /// enough lines that compactions leave marks spread over many words
    /// of the tree, with runs of neighbours and repeats mixed in.
    #[test]
    fn matches_an_lru_stack_over_many_lines() {
        let mut seed = 11u64;
        let mut stack: Vec<u64> = Vec::new();
        let mut r = ReuseDistance::new();
        for i in 0..150_000u64 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let line = match i % 4 {
                0 => (seed >> 33) % 2_000,
                1 => i / 4 % 1_500,
                2 => (seed >> 40) % 40,
                _ => stack.first().copied().unwrap_or(0),
            };
            let want = stack.iter().position(|&l| l == line).map(|depth| {
                stack.remove(depth);
                ReuseHistogram::bucket_of(depth as u64)
            });
            stack.insert(0, line);
            assert_eq!(r.access(line, 0), want, "access {i} of line {line}");
        }
    }

    #[test]
    fn known_sequences() {
        let mut r = ReuseDistance::new();
        let got: Vec<Option<usize>> = [1, 2, 3, 1, 1, 2, 4, 3].iter().map(|&l| r.access(l, 0)).collect();
        // Distances 2, 0, 2, 3.
        assert_eq!(got, buckets(&[None, None, None, Some(2), Some(0), Some(2), None, Some(3)]));
        assert_eq!(r.histogram().cold, 4);
        // distances 2, 0, 2, 3 -> buckets 0:1, 2 ([2,4)):3
        assert_eq!(r.histogram().buckets, vec![1, 0, 3]);
    }

    #[test]
    fn distinct_lines_per_thread() {
        let mut r = ReuseDistance::new();
        r.access(1, 0);
        r.access(2, 0);
        r.write(3, 1);
        r.access(2, 1);
        r.write(4, 70);
        r.access(5, 70);
        // The last masked thread and the first beyond the masks.
        r.access(1, MASKED_THREADS - 1);
        r.write(1, MASKED_THREADS);
        r.access(1, MASKED_THREADS);
        assert_eq!(r.distinct_lines(), 5);
        assert_eq!(r.distinct_lines_of(0), 2);
        assert_eq!(r.distinct_lines_of(1), 2);
        assert_eq!(r.distinct_lines_of(70), 2);
        assert_eq!(r.distinct_lines_of(MASKED_THREADS - 1), 1);
        assert_eq!(r.distinct_lines_of(MASKED_THREADS), 1);
        assert_eq!(r.histogram().cold, 3, "lines 1, 2 and 5; the read of 2 by thread 1 is warm");
    }

    #[test]
    fn the_queue_gives_the_same_results() {
        let mut seed = 3u64;
        let mut direct = ReuseDistance::new();
        let mut queued = ReuseQueue::default();
        let mut previous = (0, 0);
        for i in 0..20_000u64 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // A quarter of the accesses repeat the line and thread of the
            // one before, which the queue counts without queuing.
            let (line, thread) =
                if seed >> 62 == 0 { previous } else { ((seed >> 33) % 300, (seed >> 20) as usize % 3) };
            previous = (line, thread);
            let write = i % 5 == 0;
            if write {
                direct.write(line, thread);
                queued.write(line, thread);
            } else {
                direct.access(line, thread);
                queued.read(line, thread);
            }
        }
        // Fewer accesses than the queue holds, too.
        let mut short = ReuseQueue::default();
        short.read(7, 0);
        short.read(7, 0);
        let short = short.finish();
        assert_eq!(short.histogram().buckets, vec![1]);
        let queued = queued.finish();
        assert_eq!(queued.histogram(), direct.histogram());
        assert_eq!(queued.distinct_lines(), direct.distinct_lines());
        for t in 0..3 {
            assert_eq!(queued.distinct_lines_of(t), direct.distinct_lines_of(t));
        }
    }

    #[test]
    fn cyclic_sweep_has_distance_n_minus_1() {
        let mut r = ReuseDistance::new();
        for round in 0..3 {
            for l in 0..100u64 {
                let d = r.access(l, 0);
                assert_eq!(d, if round == 0 { None } else { Some(ReuseHistogram::bucket_of(99)) });
            }
        }
    }

    #[test]
    fn matches_naive_across_compactions() {
        let seq = random_lines(7, 200_000, 50);
        let mut r = ReuseDistance::new();
        let got: Vec<Option<usize>> = seq.iter().map(|&l| r.access(l, 0)).collect();
        // The naive reference is quadratic: check a window past several compactions.
        let window = &seq[150_000..151_000];
        let want = buckets(&naive(&seq[..151_000]));
        assert_eq!(&got[150_000..151_000], &want[150_000..151_000], "{}", window.len());
    }

    /// The second reference agrees with the first where both are quick.
    #[test]
    fn the_references_agree() {
        let seq = random_lines(5, 3_000, 300);
        assert_eq!(by_marked_times(&seq), naive(&seq));
    }

    /// Distances of many thousands (a block of the tree is a small part of
    /// them, and only its bounds are looked at) and of a few (they are
    /// counted in words), mixed, over compactions: every access's bucket
    /// against the reference's.
    #[test]
    fn long_and_short_distances_land_in_their_buckets() {
        let mut seed = 13u64;
        let seq: Vec<u64> = (0..600_000u64)
            .map(|i| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                match i % 5 {
                    0 | 1 => (seed >> 33) % 40_000,
                    2 => 1_000_000 + i / 5 % 9_000,
                    3 => 2_000_000 + (seed >> 50) % 300,
                    _ => 3_000_000 + (seed >> 40) % 5_000,
                }
            })
            .collect();
        let want = buckets(&by_marked_times(&seq));
        let mut r = ReuseDistance::new();
        for (i, &line) in seq.iter().enumerate() {
            assert_eq!(r.access(line, 0), want[i], "access {i} of line {line}");
        }
    }

    /// Cyclic sweeps whose distance (lines - 1) is just below, at and just
    /// above the start of a bucket, for buckets narrower and wider than a
    /// block of the tree: the bounds of a block straddle the edge.
    #[test]
    fn distances_at_bucket_edges() {
        for edge in [1u64 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 15] {
            for distance in [edge - 1, edge, edge + 1] {
                let mut r = ReuseDistance::new();
                let want = ReuseHistogram::bucket_of(distance);
                for round in 0..3 {
                    for line in 0..=distance {
                        let got = r.access(line, 0);
                        let expected = if round == 0 { None } else { Some(want) };
                        assert_eq!(got, expected, "sweep of {} lines, round {round}, line {line}", distance + 1);
                    }
                }
            }
        }
    }
}

//! A set-associative cache model: "how many L1 / last-level misses would
//! this function cause".
//!
//! The working set ([`crate::working_set`]) is fully associative and says
//! which lines were fetched; this module simulates a two-level data cache
//! (D1 and LL, inclusive of nothing, LRU in each set, write-allocate) with
//! the rules of valgrind's cachegrind, so that its figures can be checked
//! against cachegrind's D1mr/D1mw/DLmr/DLmw:
//! - a line goes to set `line mod sets` (sets are a power of two);
//! - an access within one line is one reference; an access straddling two
//!   lines references both and counts at most one miss;
//! - a D1 miss references LL with the same access;
//! - a read-modify-write is a read reference only (its write always hits);
//! - writes do not make columns, but do reference the cache.
//!
//! Approximations, stated: LL sees data only (cachegrind's LL also holds
//! instruction lines, which matter little for a data-heavy function); an
//! access over more than two lines (a rep-string range, `xsave`) references
//! each line once and counts each missing line, which is what cachegrind's
//! per-element counting of a rep-string comes to; the simulation starts
//! cold at the first access of the trace (cachegrind's cache is warm from
//! everything the program did before).

use serde::Serialize;

/// Geometry of one cache level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CacheGeometry {
    /// Capacity in bytes.
    pub size: u64,
    /// Lines per set.
    pub ways: u32,
    /// Line size in bytes.
    pub line_size: u32,
}

impl CacheGeometry {
    /// Cachegrind's usual D1: 32 KiB, 8-way, 64-byte lines.
    pub const D1: CacheGeometry = CacheGeometry { size: 32 << 10, ways: 8, line_size: 64 };
    /// The library's LL when no other is given: 8 MiB, 16-way, 64-byte
    /// lines (the CLI takes the host's last level by default).
    pub const LL: CacheGeometry = CacheGeometry { size: 8 << 20, ways: 16, line_size: 64 };

    /// Parses `SIZE,WAYS,LINE` (cachegrind's `--D1=`/`--LL=` form), SIZE in
    /// bytes or with a K/M/G suffix: `32K,8,64`, `8M,16,64`, `32768,8,64`.
    pub fn parse(text: &str) -> Result<CacheGeometry, String> {
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let [size, ways, line] = parts[..] else {
            return Err(format!("cache geometry {text:?}: expected SIZE,WAYS,LINE such as 32K,8,64"));
        };
        let number = |s: &str, what: &str| -> Result<u64, String> {
            let (digits, scale) = match s.char_indices().last() {
                Some((i, 'k' | 'K')) => (&s[..i], 1u64 << 10),
                Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
                Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
                _ => (s, 1),
            };
            digits
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(scale))
                .ok_or_else(|| format!("cache geometry {text:?}: {what} {s:?} is not a number"))
        };
        let geometry = CacheGeometry {
            size: number(size, "size")?,
            ways: u32::try_from(number(ways, "ways")?)
                .map_err(|_| format!("cache geometry {text:?}: too many ways"))?,
            line_size: u32::try_from(number(line, "line size")?)
                .map_err(|_| format!("cache geometry {text:?}: line size too large"))?,
        };
        geometry.validate()?;
        Ok(geometry)
    }

    /// Checks that the geometry can be simulated: a power-of-two line size
    /// from 8 to 4096 bytes, at least one way, and a whole, power-of-two
    /// number of sets (as cachegrind requires).
    pub fn validate(&self) -> Result<(), String> {
        let CacheGeometry { size, ways, line_size } = *self;
        if !line_size.is_power_of_two() || !(8..=4096).contains(&line_size) {
            return Err(format!("cache line size {line_size} must be a power of two from 8 to 4096"));
        }
        if ways == 0 || ways > 1024 {
            return Err(format!("cache associativity {ways} must be from 1 to 1024"));
        }
        let set_bytes = u64::from(ways) * u64::from(line_size);
        if size == 0 || size % set_bytes != 0 || !(size / set_bytes).is_power_of_two() {
            return Err(format!(
                "cache of {size} bytes, {ways}-way, {line_size}-byte lines: the number of sets \
                 (size / ways / line size) must be a whole power of two"
            ));
        }
        // The simulation keeps a tag per line: 1 GiB of 64-byte lines is
        // 128 MiB of tags, already more than a decoder should spend.
        if size > 1 << 30 {
            return Err(format!("cache of {size} bytes: at most 1 GiB"));
        }
        Ok(())
    }

    /// Sets in the cache.
    pub fn sets(&self) -> u64 {
        self.size / (u64::from(self.ways) * u64::from(self.line_size))
    }

    /// For people: `32 KiB, 8-way, 64 B lines`.
    pub fn describe(&self) -> String {
        let size = match self.size {
            s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
            s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
            s => format!("{s} B"),
        };
        let ways = if self.ways == 1 { "direct-mapped".to_string() } else { format!("{}-way", self.ways) };
        format!("{size}, {ways}, {} B lines", self.line_size)
    }

    /// The host's last-level data cache, from sysfs (the highest-level
    /// unified or data cache of CPU 0), made simulable the way cachegrind
    /// does when its set count is not a power of two: more ways, fewer sets,
    /// same size. `None` when sysfs says nothing usable.
    pub fn host_last_level() -> Option<CacheGeometry> {
        let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
        let read = |dir: &std::path::Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let mut best: Option<(u32, CacheGeometry)> = None;
        for entry in std::fs::read_dir(base).ok()?.flatten() {
            let dir = entry.path();
            let kind = read(&dir, "type").unwrap_or_default();
            if !matches!(kind.trim(), "Unified" | "Data") {
                continue;
            }
            let Some(level) = read(&dir, "level").and_then(|l| l.trim().parse::<u32>().ok()) else { continue };
            let size = read(&dir, "size").and_then(|s| parse_sysfs_size(s.trim()));
            let ways = read(&dir, "ways_of_associativity").and_then(|s| s.trim().parse::<u32>().ok());
            let line = read(&dir, "coherency_line_size").and_then(|s| s.trim().parse::<u32>().ok());
            if let (Some(size), Some(ways), Some(line_size)) = (size, ways, line)
                && best.is_none_or(|(l, _)| level > l)
            {
                best = Some((level, CacheGeometry { size, ways: ways.max(1), line_size }));
            }
        }
        let (_, geometry) = best?;
        simulable(geometry)
    }
}

/// `geometry` with a power-of-two number of sets, as cachegrind makes a
/// host cache it cannot simulate (12 MiB, 16-way -> 24-way, 8192 sets):
/// the same size and line, the largest power-of-two set count that divides
/// the lines and is not above the real one, the ways that makes up.
fn simulable(geometry: CacheGeometry) -> Option<CacheGeometry> {
    if geometry.validate().is_ok() {
        return Some(geometry);
    }
    let lines = geometry.size / u64::from(geometry.line_size.max(1));
    let sets = geometry.sets().max(1);
    let power_of_two_divisor = 1u64 << lines.trailing_zeros().min(63);
    let mut new_sets = power_of_two_divisor.min(1u64 << (63 - sets.leading_zeros()));
    while new_sets > 1 && !lines.is_multiple_of(new_sets) {
        new_sets /= 2;
    }
    let ways = u32::try_from(lines / new_sets.max(1)).ok()?;
    let tweaked = CacheGeometry { ways, ..geometry };
    tweaked.validate().ok().map(|_| tweaked)
}

/// `32768K` or `8M` as sysfs writes them.
fn parse_sysfs_size(s: &str) -> Option<u64> {
    let (digits, scale) = match s.strip_suffix('K') {
        Some(d) => (d, 1u64 << 10),
        None => match s.strip_suffix('M') {
            Some(d) => (d, 1 << 20),
            None => (s, 1),
        },
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// The simulated hierarchy: a D1 in front of an LL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CacheConfig {
    /// First-level data cache.
    pub d1: CacheGeometry,
    /// Last-level cache.
    pub ll: CacheGeometry,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { d1: CacheGeometry::D1, ll: CacheGeometry::LL }
    }
}

impl CacheConfig {
    /// Checks both levels.
    pub fn validate(&self) -> Result<(), String> {
        self.d1.validate().map_err(|e| format!("D1: {e}"))?;
        self.ll.validate().map_err(|e| format!("LL: {e}"))
    }
}

/// Simulated misses, split like cachegrind's D1mr/D1mw/DLmr/DLmw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheMisses {
    /// D1 misses of reads (loads and read-modify-writes).
    pub d1_read: u64,
    /// D1 misses of writes.
    pub d1_write: u64,
    /// LL misses of reads.
    pub ll_read: u64,
    /// LL misses of writes.
    pub ll_write: u64,
}

impl CacheMisses {
    /// Counts one reference's outcome.
    #[inline]
    pub fn count(&mut self, outcome: Outcome, write: bool) {
        if write {
            self.d1_write += u64::from(outcome.d1_misses);
            self.ll_write += u64::from(outcome.ll_misses);
        } else {
            self.d1_read += u64::from(outcome.d1_misses);
            self.ll_read += u64::from(outcome.ll_misses);
        }
    }

    /// Adds another set of counts.
    pub fn add(&mut self, other: &CacheMisses) {
        self.d1_read += other.d1_read;
        self.d1_write += other.d1_write;
        self.ll_read += other.ll_read;
        self.ll_write += other.ll_write;
    }

    /// D1 misses of both kinds.
    pub fn d1(&self) -> u64 {
        self.d1_read + self.d1_write
    }

    /// LL misses of both kinds.
    pub fn ll(&self) -> u64 {
        self.ll_read + self.ll_write
    }
}

/// What one access did: misses counted at each level (0 or 1 for an
/// access over at most two lines; one per missing line beyond).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// D1 misses.
    pub d1_misses: u32,
    /// LL misses.
    pub ll_misses: u32,
}

/// What a way holds for `line`: its number plus one, so that 0 is an empty
/// way (no line number reaches `u64::MAX`: lines are addresses shifted right
/// by at least 3) and a cold cache is zeroed memory, which the kernel backs
/// only where a set is used. The last level is tens of megabytes on
/// machines with a large L3 (63 MB for 480 MiB): filled with a marker, every
/// trace paid for all of it, however few lines it touched.
#[inline]
fn way_tag(line: u64) -> u64 {
    line + 1
}

/// One set-associative level: per set, its lines most recently used
/// first (as `way_tag`s).
///
/// Each set's two most recently used lines are kept apart from its other
/// ways, all sets' pairs side by side (`CacheLevel::recent`): a last level
/// much larger than what a trace touches holds one or two lines per set, so
/// nearly every reference is decided in that pair, 4 MB for the 480 MiB
/// last level instead of a host cache line of its own among 63 MB; and the
/// other ways of a set that never held three lines are never touched, nor
/// their memory given. (With only the most recent line apart, `report` of
/// the 100M-read benchmark trace, 262,144 sets referenced: 5.82-5.98 s ->
/// 5.70-5.94 s, peak RSS 659-672 -> 607-621 MB. On that trace a set's
/// second line is common too, a read of its table after the array's line
/// in the same set, and its search of the other ways waited on memory: with
/// it in the pair, 9 alternating rounds, 5.37 -> 5.34 s, user CPU 9.91 ->
/// 9.77 s.)
///
/// Tags of 32 bits (a line's number past its set bits, which for most
/// programs' addresses fits) would halve the last level's memory, but were
/// not faster. Tried on the benchmark trace's addresses alone (a scratch
/// build, no fallback for wider ones), with the decode child of `cargo
/// bench --bench decode`, 4 alternating rounds each:
/// - as they are laid out now: 7.92-8.84 s against 8.26-8.80 s (user CPU
///   median 16.1 against 16.3 s);
/// - with each set's other ways also padded to one aligned host line (a
///   16-way set's 14), which one prefetch then loads whole: 7.37-8.36 s
///   against 6.69-8.29 s, faster in one round; and `report --ll
///   33554432,16,64` (this host's last level, which the viewer simulates),
///   6 alternating rounds: median 6.63 s against 6.62 s, the same output.
#[derive(Clone, Debug)]
pub struct CacheLevel {
    line_shift: u32,
    set_mask: u64,
    /// Whether sets have a second way.
    two_ways: bool,
    /// Ways beyond the second, per set.
    older_ways: usize,
    /// Per set, the tags of its most recently used line and of the one
    /// before it (0: empty); one 16-byte pair per set (the allocator's
    /// blocks are 16-byte aligned, so a pair is in one host cache line).
    recent: Vec<u64>,
    /// Per set, the tags of its other lines, most recently used first.
    older: Vec<u64>,
}

impl CacheLevel {
    /// An empty (cold) level; `geometry` must be valid.
    pub fn new(geometry: CacheGeometry) -> CacheLevel {
        let sets = geometry.sets().max(1);
        let older_ways = geometry.ways.saturating_sub(2) as usize;
        CacheLevel {
            line_shift: geometry.line_size.trailing_zeros(),
            set_mask: sets - 1,
            two_ways: geometry.ways >= 2,
            older_ways,
            recent: crate::huge_pages::zeroed_words(sets as usize * 2),
            older: crate::huge_pages::zeroed_words(sets as usize * older_ways),
        }
    }

    /// Starts loading the set `addr`'s line maps to into the CPU cache (a
    /// hint: it changes nothing). The last level's sets are megabytes
    /// in all and each access to one waited on memory; the caller who
    /// knows the next accesses prefetches them.
    #[inline]
    pub fn prefetch(&self, addr: u64) {
        // The two most recently used lines, where most hits are, and the
        // host line of the next ways (the rest are loaded when a reference
        // needs them): loading all of a 30-way set, four host lines for
        // every access of the trace, kept the CPU's outstanding loads full,
        // and each prefetch waited for a free one. With the pair alone, a
        // set of the host's 75-way last level holding four or five lines
        // of the miss-heavy benchmark trace waited on its next ways (two
        // thirds of `touch_line`'s samples); with them, `report` of the
        // 100M-read trace took 9.9-12.8 s against 10.7-16.2 s (6
        // alternating rounds, every one faster; user CPU median 23.6 ->
        // 21.3 s), the 10M-read traces' the same within the noise.
        let set = ((addr >> self.line_shift) & self.set_mask) as usize;
        if let Some(pair) = self.recent.get(set * 2) {
            crate::prefetch::prefetch(pair);
        }
        if let Some(older) = self.older.get(set * self.older_ways) {
            crate::prefetch::prefetch(older);
        }
    }

    /// References `line`: true when it missed (and is now the set's most
    /// recently used line, the least recently used one evicted).
    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    pub fn touch_line(&mut self, line: u64) -> bool {
        let set = (line & self.set_mask) as usize;
        let tag = way_tag(line);
        let (first, second) = (self.recent[2 * set], self.recent[2 * set + 1]);
        if first == tag {
            return false;
        }
        self.recent[2 * set] = tag;
        if first == 0 || !self.two_ways {
            // An empty set (its other ways are empty too), or the only way.
            return true;
        }
        self.recent[2 * set + 1] = first;
        if second == tag || second == 0 {
            // The second line (a hit), or a set that held one line.
            return second == 0;
        }
        // The old second line becomes the first of the others; the line's
        // old way (or, on a miss, the last or first empty one) makes room
        // for it. One pass shifts the ways down while it looks for the line:
        // a search, then a rotation, called `memmove` for every such
        // reference (the simulation alone, on the miss-heavy benchmark
        // trace's 117M accesses, 3 alternating rounds: 1.76-1.86 ->
        // 1.51-1.62 s with an 8 MiB 16-way last level, 1.50-1.62 ->
        // 1.44-1.46 s with 32 MiB).
        let mut carry = second;
        for way in &mut self.older[set * self.older_ways..][..self.older_ways] {
            let held = std::mem::replace(way, carry);
            if held == tag {
                return false;
            }
            if held == 0 {
                // Empty ways are the last ones: the rest are empty too.
                return true;
            }
            carry = held;
        }
        true
    }

    /// References `size` bytes at `addr` with cachegrind's rule: within
    /// one line or straddling two, one reference that misses if either line
    /// missed; over more lines, each missing line counts. Returns misses.
    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    pub fn access(&mut self, addr: u64, size: u64) -> u32 {
        let first = addr >> self.line_shift;
        let last = addr.saturating_add(size.max(1) - 1) >> self.line_shift;
        if first == last {
            return u32::from(self.touch_line(first));
        }
        if first + 1 == last {
            // Both lines are referenced: each updates its set.
            let a = self.touch_line(first);
            let b = self.touch_line(last);
            return u32::from(a | b);
        }
        (first..=last).map(|l| u32::from(self.touch_line(l))).sum()
    }
}

/// The two-level simulation.
#[derive(Clone, Debug)]
pub struct CacheSimulator {
    config: CacheConfig,
    d1: CacheLevel,
    ll: CacheLevel,
}

impl CacheSimulator {
    /// A cold hierarchy; `config` must be valid.
    pub fn new(config: CacheConfig) -> CacheSimulator {
        CacheSimulator { config, d1: CacheLevel::new(config.d1), ll: CacheLevel::new(config.ll) }
    }

    /// The geometry simulated.
    pub fn config(&self) -> CacheConfig {
        self.config
    }

    /// Starts loading what an access at `addr` will look at in the last
    /// level (see [`CacheLevel::prefetch`]); the first level is small and
    /// stays in the CPU's cache.
    #[inline]
    pub fn prefetch(&self, addr: u64) {
        self.ll.prefetch(addr);
    }

    /// One access (read or write: the cache does not tell them apart).
    // Always: inlined into the decoding pass's cache stage (see `cache_stage` in decode.rs).
    #[inline(always)]
    pub fn access(&mut self, addr: u64, size: u64) -> Outcome {
        let d1_misses = self.d1.access(addr, size);
        if d1_misses == 0 {
            return Outcome::default();
        }
        Outcome { d1_misses, ll_misses: self.ll.access(addr, size) }
    }
}

/// Columns a word of [`MissFlags`] holds: two bits each.
const COLUMNS_PER_WORD: u64 = 32;

/// Per read column: whether its read missed in D1 and in LL, two bits a
/// column (the viewer's miss colours, and exact counts over any range).
#[derive(Clone, Debug, Default)]
pub struct MissFlags {
    words: Vec<u64>,
    len: u64,
}

impl MissFlags {
    /// Appends the next column's outcome.
    #[inline]
    pub fn push(&mut self, outcome: Outcome) {
        let bit = (self.len % COLUMNS_PER_WORD) * 2;
        if bit == 0 {
            self.words.push(0);
        }
        let flags = u64::from(outcome.d1_misses > 0) | (u64::from(outcome.ll_misses > 0) << 1);
        if let Some(w) = self.words.last_mut() {
            *w |= flags << bit;
        }
        self.len += 1;
    }

    /// About `columns` columns are expected in all: room for them is
    /// reserved ([`crate::reserve::for_estimate`]).
    pub(crate) fn expect(&mut self, columns: u64) {
        let words = usize::try_from(columns.div_ceil(COLUMNS_PER_WORD)).unwrap_or(usize::MAX);
        crate::reserve::for_estimate(&mut self.words, words, usize::MAX);
    }

    /// Columns recorded.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no column is recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (missed D1, missed LL) of `column`; `(false, false)` past the end.
    #[inline]
    pub fn get(&self, column: u64) -> (bool, bool) {
        if column >= self.len {
            return (false, false);
        }
        let w = self.words[(column / COLUMNS_PER_WORD) as usize] >> ((column % COLUMNS_PER_WORD) * 2);
        (w & 1 != 0, w & 2 != 0)
    }

    /// Reads that missed D1 and LL in columns `[from, to)`.
    pub fn count(&self, from: u64, to: u64) -> (u64, u64) {
        const D1_BITS: u64 = 0x5555_5555_5555_5555;
        let to = to.min(self.len);
        let (mut d1, mut ll) = (0u64, 0u64);
        let mut column = from;
        while column < to {
            let word = (column / COLUMNS_PER_WORD) as usize;
            let lo = column % COLUMNS_PER_WORD;
            let hi = (to - (column - lo)).min(COLUMNS_PER_WORD);
            let mut w = self.words[word] >> (lo * 2);
            let n = hi - lo;
            if n < COLUMNS_PER_WORD {
                w &= (1u64 << (n * 2)) - 1;
            }
            d1 += u64::from((w & D1_BITS).count_ones());
            ll += u64::from(((w >> 1) & D1_BITS).count_ones());
            column += n;
        }
        (d1, ll)
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

/// The simulation's results in a decoded model.
#[derive(Clone, Debug, Default)]
pub struct CacheReport {
    /// The geometry simulated.
    pub config: CacheConfig,
    /// Misses of the whole trace.
    pub misses: CacheMisses,
    /// Per read column, D1 and LL miss flags.
    pub columns: MissFlags,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slow reference: LRU defined by its stack property. A line is in
    /// its set iff it was referenced before and fewer than `ways` other
    /// lines of the same set were referenced since.
    struct ReferenceLevel {
        geometry: CacheGeometry,
        history: Vec<u64>,
    }

    impl ReferenceLevel {
        fn touch_line(&mut self, line: u64) -> bool {
            let sets = self.geometry.sets();
            let mut others = std::collections::HashSet::new();
            let mut hit = false;
            for &l in self.history.iter().rev() {
                if l % sets != line % sets {
                    continue;
                }
                if l == line {
                    hit = true;
                    break;
                }
                others.insert(l);
                if others.len() >= self.geometry.ways as usize {
                    break;
                }
            }
            self.history.push(line);
            !(hit && others.len() < self.geometry.ways as usize)
        }
        fn access(&mut self, addr: u64, size: u64) -> u32 {
            let line = u64::from(self.geometry.line_size);
            let (first, last) = (addr / line, (addr + size.max(1) - 1) / line);
            let misses: Vec<bool> = (first..=last).map(|l| self.touch_line(l)).collect();
            if last - first <= 1 {
                u32::from(misses.iter().any(|&m| m))
            } else {
                misses.iter().filter(|&&m| m).count() as u32
            }
        }
    }

    #[test]
    fn lru_agrees_with_the_stack_definition() {
        let geometries = [
            CacheGeometry { size: 1024, ways: 2, line_size: 64 },
            CacheGeometry { size: 512, ways: 1, line_size: 64 },
            CacheGeometry { size: 4096, ways: 8, line_size: 32 },
            CacheGeometry { size: 256, ways: 4, line_size: 64 },
            // About eight of the region's lines a set: sets that stay part
            // empty, whose empty ways end the search.
            CacheGeometry { size: 128 << 10, ways: 16, line_size: 64 },
        ];
        let mut next = crate::xorshift(0x1234_5678_9abc_def1u64);
        for g in geometries {
            g.validate().expect("valid");
            let mut fast = CacheLevel::new(g);
            let mut slow = ReferenceLevel { geometry: g, history: Vec::new() };
            let mut misses = 0;
            for i in 0..20_000 {
                // Mostly a small region (hits and conflicts), some far
                // away, sizes that straddle lines and some that span many.
                let r = next();
                let addr = if r.is_multiple_of(7) { 0x10_0000 + (r >> 8) % 65536 } else { 0x4000 + (r >> 8) % 3000 };
                let size = match r % 11 {
                    0 => 200,
                    1 => 16,
                    _ => 1 << ((r >> 3) % 4),
                };
                let (a, b) = (fast.access(addr, size), slow.access(addr, size));
                assert_eq!(a, b, "{g:?}: access {i} of {size} bytes at {addr:#x}");
                misses += a;
            }
            assert!(misses > 100, "{g:?}: the test must exercise misses, saw {misses}");
        }
    }

    #[test]
    fn a_straddling_access_misses_once_and_fills_both_lines() {
        let mut level = CacheLevel::new(CacheGeometry { size: 1024, ways: 2, line_size: 64 });
        assert_eq!(level.access(60, 8), 1);
        assert_eq!(level.access(0, 1), 0);
        assert_eq!(level.access(64, 1), 0);
        assert_eq!(level.access(0, 64 * 4), 2, "lines 2 and 3 are new");
    }

    #[test]
    fn ll_is_referenced_only_on_d1_misses() {
        let config = CacheConfig {
            d1: CacheGeometry { size: 128, ways: 1, line_size: 64 },
            ll: CacheGeometry { size: 1024, ways: 4, line_size: 64 },
        };
        let mut sim = CacheSimulator::new(config);
        assert_eq!(sim.access(0, 8), Outcome { d1_misses: 1, ll_misses: 1 });
        assert_eq!(sim.access(128, 8), Outcome { d1_misses: 1, ll_misses: 1 }, "same D1 set, evicts line 0");
        assert_eq!(sim.access(0, 8), Outcome { d1_misses: 1, ll_misses: 0 }, "still in LL");
        assert_eq!(sim.access(0, 8), Outcome::default());
    }

    #[test]
    fn geometries_parse_and_bad_ones_say_why() {
        assert_eq!(CacheGeometry::parse("32K,8,64"), Ok(CacheGeometry::D1));
        assert_eq!(CacheGeometry::parse("8M, 16, 64"), Ok(CacheGeometry::LL));
        assert_eq!(CacheGeometry::parse("32768,8,64"), Ok(CacheGeometry::D1));
        let e = CacheGeometry::parse("12M,16,64").expect_err("12 MiB / 16 / 64 = 12288 sets");
        assert!(e.contains("power of two"), "{e}");
        assert!(CacheGeometry::parse("32K,8").expect_err("two fields").contains("SIZE,WAYS,LINE"));
        assert!(CacheGeometry::parse("32Q,8,64").expect_err("bad size").contains("not a number"));
        assert!(CacheGeometry::parse("32K,0,64").expect_err("no ways").contains("associativity"));
        assert!(CacheGeometry::parse("32K,8,48").expect_err("bad line").contains("line size"));
        assert_eq!(CacheGeometry::D1.describe(), "32 KiB, 8-way, 64 B lines");
    }

    #[test]
    fn host_caches_are_made_simulable_like_cachegrind() {
        let twelve = CacheGeometry { size: 12 << 20, ways: 16, line_size: 64 };
        assert_eq!(simulable(twelve), Some(CacheGeometry { ways: 24, ..twelve }));
        let thirty = CacheGeometry { size: 30 << 20, ways: 20, line_size: 64 };
        let t = simulable(thirty).expect("30 MiB");
        assert!(t.validate().is_ok() && t.size == thirty.size && t.ways >= 20, "{t:?}");
        assert_eq!(simulable(CacheGeometry::LL), Some(CacheGeometry::LL));
    }

    #[test]
    fn miss_flags_count_any_range() {
        let mut flags = MissFlags::default();
        let mut expected = Vec::new();
        for i in 0..1000u64 {
            let o = Outcome { d1_misses: u32::from(i % 3 == 0), ll_misses: u32::from(i % 7 == 0 && i % 3 == 0) };
            flags.push(o);
            expected.push((o.d1_misses > 0, o.ll_misses > 0));
        }
        for (from, to) in [(0, 1000), (5, 6), (31, 33), (32, 64), (17, 990), (999, 2000), (40, 40)] {
            let slice = &expected[from as usize..(to as usize).min(1000).max(from as usize)];
            let want = (slice.iter().filter(|f| f.0).count() as u64, slice.iter().filter(|f| f.1).count() as u64);
            assert_eq!(flags.count(from, to), want, "{from}..{to}");
        }
        assert_eq!(flags.get(21), (true, true));
        assert_eq!(flags.get(3), (true, false));
        assert_eq!(flags.get(4000), (false, false));
    }
}

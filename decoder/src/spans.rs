//! The bitmap over a span of columns, summed: for each row, how much of the
//! span it was occupied and the mean colour terms of its cells. Both the
//! precomputed multi-resolution summary ([`crate::pyramid`]) and zoomed-out
//! drawing of a column range are made of such spans.
//!
//! Why it is cheap: a cell's colour is affine in the line's *freshness*
//! (`age / max_age`) and in freshness times its bytes-read fraction, and a
//! line's age falls by one per miss — so the sum of its freshness over any
//! run of columns in which it is not touched follows from the miss clock
//! summed over those columns ([`SpanAccumulator`] keeps that prefix sum).
//! Each line is settled when it is touched, when it leaves, and at the end
//! of the span: O(1) per access and O(rows log rows) per span, where an
//! exact per-cell sum costs O(rows) per miss (every miss shifts the rows
//! below it and ages every line).
//!
//! What is approximate: rows. Each row has as many cells as columns in
//! which the set held more lines than its index (exact, from a histogram of
//! the set's size); the lines' cells fill them from the top in address
//! order (a line that left during the span: just before the first line
//! present above it), a line straddling two rows split between them. A
//! span with no insertion is exact; otherwise a line's cells can land a
//! few rows from where they were, at most as many as there were misses in
//! the span. Every cell's colour lands somewhere: summed down a column of
//! pixels, the colour is the exact picture's.

use crate::lines::LineSize;
use crate::working_set::{LineObserver, LineState, LineStore, WorkingSet, WorkingSetConfig};

/// The colour terms of a cell, or the means of a group of cells.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CellMeans {
    /// Freshness: `age / max_age` (1 just touched, near 0 about to leave).
    pub fresh: f64,
    /// Freshness times the fraction of a line's worth of bytes read
    /// (capped at 1): what fades from purple to green.
    pub fresh_bytes: f64,
    /// Freshness times the fraction of the line's bytes read at least once.
    pub fresh_distinct: f64,
    /// Fraction of the cells inside a recorded allocation.
    pub tint: f64,
}

impl CellMeans {
    /// Adds `other` times `weight` (for weighted means: divide by the total
    /// weight with [`CellMeans::scaled`]).
    pub fn add_scaled(&mut self, other: &CellMeans, weight: f64) {
        self.fresh += other.fresh * weight;
        self.fresh_bytes += other.fresh_bytes * weight;
        self.fresh_distinct += other.fresh_distinct * weight;
        self.tint += other.tint * weight;
    }

    /// Every term times `factor`.
    pub fn scaled(&self, factor: f64) -> CellMeans {
        CellMeans {
            fresh: self.fresh * factor,
            fresh_bytes: self.fresh_bytes * factor,
            fresh_distinct: self.fresh_distinct * factor,
            tint: self.tint * factor,
        }
    }

    /// The terms of one line's cell: `age` in `1..=max_age`.
    pub fn of_line(state: &LineState, age: u32, config: &WorkingSetConfig, tinted: bool) -> CellMeans {
        let fresh = f64::from(age) / f64::from(config.max_age.max(1));
        let line = f64::from(config.line_size.max(1));
        CellMeans {
            fresh,
            fresh_bytes: fresh * (f64::from(state.bytes_read) / line).min(1.0),
            fresh_distinct: fresh * (f64::from(state.distinct_bytes()) / line).min(1.0),
            tint: if tinted { 1.0 } else { 0.0 },
        }
    }
}

/// One row of a span.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpanRow {
    /// Fraction of the span's columns in which the row held a line.
    pub occupancy: f64,
    /// Mean colour terms of its cells.
    pub means: CellMeans,
}

/// Rows of adjacent spans merged into the rows of one wider span: each
/// row's occupancy weighs by its span's width, its means by its occupied
/// cells (colours are affine in the means, so the merged row's colour is
/// the mean colour of its cells). The one rule for the summary's coarser
/// levels and for pixels that cover several summary blocks.
#[derive(Clone, Debug, Default)]
pub struct RowMerger {
    /// Sums: occupied cells, and means times cells.
    rows: Vec<SpanRow>,
    width: f64,
}

impl RowMerger {
    /// Starts over.
    pub fn clear(&mut self) {
        self.rows.clear();
        self.width = 0.0;
    }

    /// Adds the rows of a span `width` columns wide.
    pub fn add(&mut self, rows: impl ExactSizeIterator<Item = SpanRow>, width: f64) {
        if self.rows.len() < rows.len() {
            self.rows.resize(rows.len(), SpanRow::default());
        }
        for (sum, row) in self.rows.iter_mut().zip(rows) {
            let cells = width * row.occupancy;
            sum.occupancy += cells;
            sum.means.add_scaled(&row.means, cells);
        }
        self.width += width;
    }

    /// Width added so far.
    pub fn width(&self) -> f64 {
        self.width
    }

    /// The merged rows (the sums become means; call [`RowMerger::clear`]
    /// before adding again).
    pub fn finish(&mut self) -> &[SpanRow] {
        let width = self.width.max(f64::MIN_POSITIVE);
        for row in &mut self.rows {
            if row.occupancy > 0.0 {
                row.means = row.means.scaled(1.0 / row.occupancy);
            }
            row.occupancy /= width;
        }
        &self.rows
    }
}

/// A finished span: columns `[start, end)`, rows from the top.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Span {
    /// First column.
    pub start: u64,
    /// One past the last column.
    pub end: u64,
    /// Row 0 first; as many rows as the set's largest size in the span.
    pub rows: Vec<SpanRow>,
}

/// Running sums of one line over the span being summed. They live in the
/// line's working-set entry, so following a line costs no lookup of its
/// own. Integers: a line's age at a column is an integer, and so are its
/// bytes; the division into means happens once per span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineSums {
    /// Settled up to this column (exclusive).
    since: u64,
    /// Miss-clock prefix sum at `since` (wrapping: only differences count).
    clock_sum_since: u64,
    /// Whether the line is inside a recorded allocation (decided when it
    /// entered the set).
    tinted: bool,
    /// The sums over the settled columns.
    cells: CellSums,
}

impl LineSums {
    /// The sums of a line whose sums were `old`, started over at `column`
    /// (the tint stays).
    fn restarted(old: &LineSums, column: u64, clock_sum: u64) -> LineSums {
        LineSums { since: column, clock_sum_since: clock_sum, tinted: old.tinted, ..LineSums::default() }
    }
}

/// A line's cells in a span, summed: what closing the span places in its
/// rows. Kept apart from the running state of [`LineSums`]: closing a span
/// gathers these of every line in address order, from tables that, at 32
/// bytes an entry rather than 56 or 64, stay nearer the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CellSums {
    /// Columns settled (a span is at most 2^32 columns wide).
    columns: u32,
    tinted_columns: u32,
    /// Sum of the line's age over its settled columns.
    ages: u64,
    /// Sum of age x bytes read (capped at the line size).
    ages_bytes: u64,
    /// Sum of age x distinct bytes read.
    ages_distinct: u64,
}

/// Follows a working set column by column and sums it into spans. Drive it
/// with [`SpanAccumulator::begin_column`], the set's read with
/// [`SpanAccumulator::observer`] as observer, [`SpanAccumulator::end_column`];
/// close spans with [`SpanAccumulator::close_span`].
pub struct SpanAccumulator {
    config: WorkingSetConfig,
    line_size: LineSize,
    /// Lines that left during the span, and their sums (apart: the
    /// lines are searched, the sums gathered).
    departed_lines: Vec<u64>,
    departed_sums: Vec<CellSums>,
    /// Columns of the span by set size after the read.
    sizes: Vec<u64>,
    /// Buffers of `close_span`, kept between spans.
    present: Vec<(u64, u32)>,
    /// `present` packed into one word each while sorting.
    packed: Vec<u64>,
    /// The lines of `present`, sorted; the rows of the lines that left.
    sorted_lines: Vec<u64>,
    departed_rows: Vec<usize>,
    present_sums: Vec<CellSums>,
    /// The lines that left (indices into `departed_lines`) grouped by the
    /// number of lines present below them: group `k` is
    /// `gap_order[gap_starts[k]..gap_starts[k + 1]]`.
    gap_starts: Vec<u32>,
    gap_order: Vec<u32>,
    capacity: Vec<u64>,
    totals: Vec<RowTotals>,
    span_start: u64,
    column: u64,
    /// Sum of the miss clock over columns before `column` (wrapping).
    clock_sum: u64,
}

impl SpanAccumulator {
    /// An accumulator whose first span starts at `column`, for `set` in the
    /// state it has before that column (its lines' sums are reset).
    /// `tint(lo, hi)` says whether the line of addresses `[lo, hi)` is
    /// inside a recorded allocation.
    pub fn new<S: LineStore>(
        set: &mut WorkingSet<S>,
        column: u64,
        mut tint: impl FnMut(u64, u64) -> bool,
    ) -> SpanAccumulator {
        let config = *set.config();
        let line_size = LineSize::new(config.line_size);
        set.for_each_line_mut(|l| {
            let start = line_size.start_of(l.line);
            let tinted = tint(start, start.saturating_add(u64::from(line_size.bytes())));
            l.spans = LineSums { since: column, tinted, ..LineSums::default() };
        });
        SpanAccumulator {
            config,
            line_size,
            departed_lines: Vec::new(),
            departed_sums: Vec::new(),
            sizes: Vec::new(),
            present: Vec::new(),
            packed: Vec::new(),
            sorted_lines: Vec::new(),
            departed_rows: Vec::new(),
            present_sums: Vec::new(),
            gap_starts: Vec::new(),
            gap_order: Vec::new(),
            capacity: Vec::new(),
            totals: Vec::new(),
            span_start: column,
            column,
            clock_sum: 0,
        }
    }

    /// The column about to be read.
    #[inline]
    pub fn begin_column(&mut self, column: u64) {
        self.column = column;
    }

    /// The read of the current column is done; `set` is the set after it.
    #[inline]
    pub fn end_column<S: LineStore>(&mut self, set: &WorkingSet<S>) {
        self.clock_sum = self.clock_sum.wrapping_add(set.clock());
        let len = set.len();
        if self.sizes.len() <= len {
            self.sizes.resize(len + 1, 0);
        }
        self.sizes[len] += 1;
        self.column += 1;
    }

    /// The observer of the current column's read: `tint(lo, hi)` says
    /// whether the line of addresses `[lo, hi)` is inside a recorded
    /// allocation (asked for lines entering the set).
    #[inline]
    pub fn observer<T: FnMut(u64, u64) -> bool>(&mut self, tint: T) -> SpanObserver<'_, T> {
        SpanObserver { spans: self, tint }
    }

    /// `state` entered the set in the current column: its sums start here,
    /// with its tint decided once (`tint` as in [`SpanAccumulator::observer`]).
    /// Decided now, not at the column's end: that took a second lookup of
    /// the line per miss.
    #[inline]
    pub fn inserted(&mut self, state: &mut LineState, tint: impl FnOnce(u64, u64) -> bool) {
        let start = self.line_size.start_of(state.line);
        let tinted = tint(start, start.saturating_add(u64::from(self.line_size.bytes())));
        state.spans = LineSums { since: self.column, clock_sum_since: self.clock_sum, tinted, ..LineSums::default() };
    }

    /// `state` is about to be touched: its sums are settled up to now.
    #[inline]
    pub fn before_touch(&mut self, state: &mut LineState) {
        self.settle(state);
    }

    /// A line left the set: its sums go to the span's departed lines.
    #[inline]
    pub fn departed(&mut self, state: &LineState) {
        let sums = self.settled(state);
        if sums.cells.columns > 0 {
            self.departed_lines.push(state.line);
            self.departed_sums.push(sums.cells);
        }
    }

    /// Settles the sums of `state` up to the current column.
    #[inline]
    fn settle(&self, state: &mut LineState) {
        state.spans = self.settled(state);
    }

    /// The sums of `state` settled up to the current column.
    #[inline]
    fn settled(&self, state: &LineState) -> LineSums {
        let mut sums = state.spans;
        let n = self.column.saturating_sub(sums.since);
        if n == 0 {
            return sums;
        }
        let clocks = self.clock_sum.wrapping_sub(sums.clock_sum_since);
        // Age at a column is max_age - (clock - last_touch): summed, the
        // clock's sum over the columns is what varies.
        let ages = (n * (u64::from(self.config.max_age) + state.last_touch)).saturating_sub(clocks);
        let line = u64::from(self.config.line_size);
        let cells = &mut sums.cells;
        cells.columns += n as u32;
        cells.ages += ages;
        cells.ages_bytes += ages * u64::from(state.bytes_read).min(line);
        cells.ages_distinct += ages * u64::from(state.touched.count_ones());
        if sums.tinted {
            cells.tinted_columns += n as u32;
        }
        sums.since = self.column;
        sums.clock_sum_since = self.clock_sum;
        sums
    }

    /// Ends the span at the current column (exclusive) and starts the next.
    /// `set` is the set the accumulator follows, as it is now.
    pub fn close_span<S: LineStore>(&mut self, set: &mut WorkingSet<S>) -> Span {
        let (column, clock_sum) = (self.column, self.clock_sum);
        // Rows are ranks by address: sort (line, slot) keys, not the sums.
        let (mut present, mut sums, mut totals) = (
            std::mem::take(&mut self.present),
            std::mem::take(&mut self.present_sums),
            std::mem::take(&mut self.totals),
        );
        present.clear();
        sums.clear();
        set.for_each_line_mut(|state| {
            // The settled sums go to `sums` from the registers they were
            // made in: settled in place and copied from there, the copy's
            // wide loads waited for the narrower stores before them (two
            // thirds of this loop's time).
            let settled = self.settled(state);
            present.push((state.line, sums.len() as u32));
            sums.push(settled.cells);
            state.spans = LineSums::restarted(&settled, column, clock_sum);
        });
        sort_by_line(&mut present, &mut self.packed);
        let height = self.sizes.len().saturating_sub(1).max(present.len());
        // Cells of row r: columns in which the set held more than r lines.
        let span_columns = (column - self.span_start).max(1) as f64;
        let mut rows = vec![SpanRow::default(); height];
        let capacity = &mut self.capacity;
        capacity.clear();
        capacity.resize(height, 0);
        let mut above = 0u64;
        for r in (0..height).rev() {
            above += self.sizes.get(r + 1).copied().unwrap_or(0);
            capacity[r] = above;
            rows[r].occupancy = above as f64 / span_columns;
        }
        // A line that left comes, in address order, just before the first
        // line present above it.
        self.sorted_lines.clear();
        self.sorted_lines.extend(present.iter().map(|&(line, _)| line));
        count_below(&self.sorted_lines, &self.departed_lines, &mut self.departed_rows);
        // The lines that left between two lines present go in the order
        // they left: a sweep's lines leave in address order, oldest
        // first. (Summed into one, they drew one flat stripe where the
        // exact picture fades from the oldest line to the newest.)
        order_by_rank(&self.departed_rows, present.len(), &mut self.gap_starts, &mut self.gap_order);
        // Every line's cells, in that order, fill the rows' cells from the
        // top. The rows' cells and the lines' add up to the same (one cell
        // per line in the set per column), so every line's colour lands
        // whole in the rows, in address order. (Put whole in the row its
        // address holds at the end, the lines that left during a span
        // crowded into the few rows by the lines of a sweep and counted
        // there once per row, not once per cell: zoomed out, whole pixel
        // columns came out 16-19 levels of 255 off the exact picture with
        // the default settings, `tests/summary.rs`.)
        let mut fill = RowFill::new(&mut totals, capacity);
        for k in 0..=present.len() {
            for &d in &self.gap_order[self.gap_starts[k] as usize..self.gap_starts[k + 1] as usize] {
                fill.add(&self.departed_sums[d as usize]);
            }
            if let Some(&(_, slot)) = present.get(k) {
                fill.add(&sums[slot as usize]);
            }
        }
        fill.finish();
        self.departed_lines.clear();
        self.departed_sums.clear();
        let max_age = f64::from(self.config.max_age.max(1));
        let line = f64::from(self.config.line_size.max(1));
        // One division per row, not seven: this runs for every row of every
        // summary block.
        let (per_age, per_age_byte) = (1.0 / max_age, 1.0 / (max_age * line));
        for (row, t) in rows.iter_mut().zip(&totals) {
            let RowTotals { cells, ages, ages_bytes, ages_distinct, tinted } = *t;
            if cells > 0.0 {
                let per_cell = 1.0 / cells;
                row.means = CellMeans {
                    fresh: ages * per_age * per_cell,
                    fresh_bytes: ages_bytes * per_age_byte * per_cell,
                    fresh_distinct: ages_distinct * per_age_byte * per_cell,
                    tint: tinted * per_cell,
                };
            }
        }
        let span = Span { start: self.span_start, end: column, rows };
        self.sizes.clear();
        self.span_start = column;
        (self.present, self.present_sums, self.totals) = (present, sums, totals);
        span
    }
}

/// A [`SpanAccumulator`] observing one column's read, with the tint of
/// lines entering the set ([`SpanAccumulator::observer`]).
pub struct SpanObserver<'a, T> {
    spans: &'a mut SpanAccumulator,
    tint: T,
}

impl<T: FnMut(u64, u64) -> bool> LineObserver for SpanObserver<'_, T> {
    #[inline]
    fn before_touch(&mut self, state: &mut LineState) {
        self.spans.before_touch(state);
    }

    #[inline]
    fn inserted(&mut self, state: &mut LineState) {
        self.spans.inserted(state, &mut self.tint);
    }

    #[inline]
    fn departed(&mut self, state: &LineState) {
        self.spans.departed(state);
    }
}

/// The colour sums of one row of a span: its cells, and each term summed
/// over them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct RowTotals {
    cells: f64,
    ages: f64,
    ages_bytes: f64,
    ages_distinct: f64,
    tinted: f64,
}

impl RowTotals {
    /// `self - other`, term by term.
    fn minus(&self, other: &RowTotals) -> RowTotals {
        RowTotals {
            cells: self.cells - other.cells,
            ages: self.ages - other.ages,
            ages_bytes: self.ages_bytes - other.ages_bytes,
            ages_distinct: self.ages_distinct - other.ages_distinct,
            tinted: self.tinted - other.tinted,
        }
    }
}

/// Fills rows, top first, with lines' cells: each row takes as many cells
/// as it had (its capacity), a line's sums split in proportion where its
/// cells straddle rows.
///
/// How: the lines' terms are summed as they come, in integers; a row's
/// totals are the sums at its last cell less those at its first,
/// interpolated within the line its end falls in. A line costs five
/// integer additions and one comparison; a row, one interpolation. (The
/// fill before this kept each row's whole lines and the fractions of the
/// lines straddling it apart: drawing 901 columns a pixel of the 100M-read
/// benchmark trace took 83.6 ms against 80.8 ms, medians of 48 pictures,
/// `cargo bench --bench decode -- --draw`. Summing the lines' prefix sums
/// into arrays first and finding the row ends in them by binary search,
/// without a branch per line, was slower: 52 ms against 47 ms, the same
/// pictures timed by a scratch program.)
struct RowFill<'a> {
    rows: &'a mut Vec<RowTotals>,
    capacity: &'a [u64],
    row: usize,
    /// The cell the current row ends at (the lines' cells so far reach
    /// at most to it, but in the last row).
    boundary: u64,
    /// Whether the current row is the last (it keeps whatever comes past
    /// its room: only if the counts disagreed, which they should not).
    last: bool,
    /// The lines' sums so far: cells, ages, ages x bytes, ages x distinct
    /// bytes, tinted cells.
    cells: u64,
    ages: u64,
    ages_bytes: u64,
    ages_distinct: u64,
    tinted: u64,
    /// The sums at the current row's first cell.
    row_start: RowTotals,
}

impl<'a> RowFill<'a> {
    fn new(rows: &'a mut Vec<RowTotals>, capacity: &'a [u64]) -> Self {
        rows.clear();
        rows.resize(capacity.len(), RowTotals::default());
        RowFill {
            rows,
            capacity,
            row: 0,
            boundary: capacity.first().copied().unwrap_or(0),
            last: capacity.len() <= 1,
            cells: 0,
            ages: 0,
            ages_bytes: 0,
            ages_distinct: 0,
            tinted: 0,
            row_start: RowTotals::default(),
        }
    }

    #[inline]
    fn add(&mut self, sums: &CellSums) {
        let end = self.cells + u64::from(sums.columns);
        // A line ending right at a row's end leaves the row to be closed
        // by the next line, at its first cell: the same sums.
        if end > self.boundary && !self.last {
            self.close_rows(sums, end);
        }
        self.cells = end;
        self.ages += sums.ages;
        self.ages_bytes += sums.ages_bytes;
        self.ages_distinct += sums.ages_distinct;
        self.tinted += u64::from(sums.tinted_columns);
    }

    /// The line `sums`, ending at cell `end`, reaches the end of the
    /// current row (and maybe more): each row it ends is closed at the
    /// sums interpolated within the line.
    #[cold]
    fn close_rows(&mut self, sums: &CellSums, end: u64) {
        // Not a division by zero: the line has cells, as it ends past the
        // row's end and starts at or before it.
        let per_cell = 1.0 / f64::from(sums.columns);
        while end > self.boundary && !self.last {
            let share = (self.boundary - self.cells) as f64 * per_cell;
            let at_boundary = RowTotals {
                cells: self.boundary as f64,
                ages: self.ages as f64 + sums.ages as f64 * share,
                ages_bytes: self.ages_bytes as f64 + sums.ages_bytes as f64 * share,
                ages_distinct: self.ages_distinct as f64 + sums.ages_distinct as f64 * share,
                tinted: self.tinted as f64 + f64::from(sums.tinted_columns) * share,
            };
            self.rows[self.row] = at_boundary.minus(&self.row_start);
            self.row_start = at_boundary;
            self.row += 1;
            self.boundary += self.capacity[self.row];
            self.last = self.row + 1 >= self.capacity.len();
        }
    }

    /// Closes the current row with every line's cells added.
    fn finish(self) {
        let total = RowTotals {
            cells: self.cells as f64,
            ages: self.ages as f64,
            ages_bytes: self.ages_bytes as f64,
            ages_distinct: self.ages_distinct as f64,
            tinted: self.tinted as f64,
        };
        if let Some(row) = self.rows.get_mut(self.row) {
            *row = total.minus(&self.row_start);
        }
    }
}

/// Indices of `ranks` grouped by rank (`0..=max_rank`, larger ones
/// counted as `max_rank`), in their order within a group, into `order`;
/// group `k` is `order[starts[k]..starts[k + 1]]`. A counting sort: O(n +
/// ranks).
fn order_by_rank(ranks: &[usize], max_rank: usize, starts: &mut Vec<u32>, order: &mut Vec<u32>) {
    starts.clear();
    starts.resize(max_rank + 2, 0);
    for &r in ranks {
        starts[r.min(max_rank)] += 1;
    }
    // Each group's end, then (placing from the back, which keeps each
    // group's order) its start.
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    order.clear();
    order.resize(ranks.len(), 0);
    for (i, &r) in ranks.iter().enumerate().rev() {
        let end = &mut starts[r.min(max_rank)];
        *end -= 1;
        order[*end as usize] = i as u32;
    }
}

/// For each of `queries`, the number of values in `sorted` below it, into
/// `counts`. The searches go eight at a time, in step: each is a chain of
/// dependent loads, and side by side their loads overlap. One at a time,
/// the searches for the lines that left, more of them than rows on a
/// miss-heavy trace, took a third of closing a span.
fn count_below(sorted: &[u64], queries: &[u64], counts: &mut Vec<usize>) {
    const LANES: usize = 8;
    counts.clear();
    if sorted.is_empty() {
        counts.resize(queries.len(), 0);
        return;
    }
    let mut groups = queries.chunks_exact(LANES);
    for group in &mut groups {
        // Lower bounds, branch-free: `base` is the last value known below
        // the query (or 0), `n` the values left to halve.
        let mut base = [0usize; LANES];
        let mut n = sorted.len();
        while n > 1 {
            let half = n / 2;
            for (b, &q) in base.iter_mut().zip(group) {
                // Not a branch: whether the query is above the middle
                // value is a coin toss (LLVM made a plain `if`, or a mask,
                // a branch, and closing spans took 1.8 times as long).
                *b = std::hint::select_unpredictable(sorted[*b + half] < q, *b + half, *b);
            }
            n -= half;
        }
        counts.extend(base.iter().zip(group).map(|(&b, &q)| b + usize::from(sorted[b] < q)));
    }
    counts.extend(groups.remainder().iter().map(|&q| sorted.partition_point(|&l| l < q)));
}

/// Sorts (line, slot) pairs by line. Lines are distinct; when they and the
/// slots fit, the pairs are sorted as single words (`line << 20 | slot`):
/// this runs for every block of the bitmap summary, over the whole working
/// set.
fn sort_by_line(present: &mut [(u64, u32)], packed: &mut Vec<u64>) {
    const SLOT_BITS: u32 = 20;
    let fits = present.len() < 1 << SLOT_BITS && present.iter().all(|&(line, _)| line < 1 << (64 - SLOT_BITS));
    if !fits {
        present.sort_unstable_by_key(|&(line, _)| line);
        return;
    }
    packed.clear();
    packed.extend(present.iter().map(|&(line, slot)| line << SLOT_BITS | u64::from(slot)));
    packed.sort_unstable();
    for (pair, &word) in present.iter_mut().zip(packed.iter()) {
        *pair = (word >> SLOT_BITS, (word & ((1 << SLOT_BITS) - 1)) as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::working_set::FastWorkingSet;

    /// Against `partition_point`, one query at a time: lengths around the
    /// halving steps, queries below, between, equal to and above the
    /// values, counts that are and are not a multiple of the eight lanes.
    #[test]
    fn counts_below_agree_with_one_search_at_a_time() {
        let mut seed = 5u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 40
        };
        let mut counts = Vec::new();
        for len in [0usize, 1, 2, 3, 7, 8, 9, 100, 511, 512, 513] {
            let mut sorted: Vec<u64> = (0..len).map(|_| next() % 1000 * 2).collect();
            sorted.sort_unstable();
            for queries in [0usize, 1, 8, 13, 40] {
                let q: Vec<u64> = (0..queries).map(|_| next() % 2004).collect();
                count_below(&sorted, &q, &mut counts);
                let want: Vec<usize> = q.iter().map(|&x| sorted.partition_point(|&v| v < x)).collect();
                assert_eq!(counts, want, "{len} values, {queries} queries");
            }
        }
    }

    /// Per row of a span, the straight way: every column's set in row
    /// order, each cell's terms summed into its row. (cells, sums of
    /// fresh, fresh_bytes, fresh_distinct) by row.
    fn per_cell_rows(config: WorkingSetConfig, reads: &[(u64, u64)]) -> Vec<(f64, [f64; 3])> {
        let mut set = crate::working_set::OrderedWorkingSet::new(config);
        let mut rows: Vec<(f64, [f64; 3])> = Vec::new();
        for &(addr, size) in reads {
            set.read(addr, size, &mut crate::working_set::FetchCounter::default());
            for (r, line) in set.lines().iter().enumerate() {
                if rows.len() <= r {
                    rows.resize(r + 1, (0.0, [0.0; 3]));
                }
                let m = CellMeans::of_line(line, set.age(line), &config, false);
                rows[r].0 += 1.0;
                for (sum, term) in rows[r].1.iter_mut().zip([m.fresh, m.fresh_bytes, m.fresh_distinct]) {
                    *sum += term;
                }
            }
        }
        rows
    }

    /// One span over `reads`, summed by the accumulator.
    fn one_span(config: WorkingSetConfig, reads: &[(u64, u64)]) -> Span {
        let mut set = FastWorkingSet::new(config);
        let mut acc = SpanAccumulator::new(&mut set, 0, |_, _| false);
        for (column, &(addr, size)) in reads.iter().enumerate() {
            acc.begin_column(column as u64);
            set.read(addr, size, &mut acc.observer(|_, _| false));
            acc.end_column(&set);
        }
        acc.close_span(&mut set)
    }

    /// Lines that left the set during a span fill the rows in address
    /// order with the lines present, as many cells to a row as it had:
    /// line A (read 64 bytes at a time) leaves and comes back, line B (1
    /// byte) leaves, line C (1 byte) stays. Cell by cell, row 0 held A,
    /// A, B, A and row 1 B, C, C: row 0 takes A's three cells and one of
    /// B's, row 1 the other and C's two, and no colour is lost.
    #[test]
    fn lines_that_left_fill_the_rows_in_address_order() {
        let config = WorkingSetConfig { line_size: 64, max_age: 2, max_rows: 16 };
        let (a, b, c) = (100 * 64, 200 * 64, 300 * 64);
        let reads = [(a, 64), (b, 1), (c, 1), (a, 64)];
        let span = one_span(config, &reads);
        let want = per_cell_rows(config, &reads);
        let cells: Vec<f64> = span.rows.iter().map(|r| r.occupancy * 4.0).collect();
        assert_eq!(cells, vec![4.0, 3.0]);
        assert_eq!(want.iter().map(|w| w.0).collect::<Vec<_>>(), cells);
        // Bytes read per unit of freshness: 1 for A's cells, 1/64 for B's
        // and C's.
        let bytes_fraction = |row: usize| span.rows[row].means.fresh_bytes / span.rows[row].means.fresh;
        assert!(bytes_fraction(0) < 1.0 && bytes_fraction(0) > 0.5, "row 0: A's cells and one of B's");
        assert!((bytes_fraction(1) - 1.0 / 64.0).abs() < 1e-12, "row 1: B's and C's cells only");
        let total = |f: &dyn Fn(&SpanRow) -> f64| span.rows.iter().map(|r| f(r) * r.occupancy * 4.0).sum::<f64>();
        let want_fresh: f64 = want.iter().map(|w| w.1[0]).sum();
        assert!((total(&|r| r.means.fresh) - want_fresh).abs() < 1e-12);
    }

    proptest::proptest! {
        /// Whatever the reads, a span's rows hold each row's cells exactly
        /// and all the colour of the cells: summed over the rows, every
        /// term is what the cells add up to, one by one.
        #[test]
        fn a_span_keeps_every_cells_colour(
            reads in proptest::collection::vec((0u64..40, 1u64..130), 1..300),
            max_age in 1u32..12,
            max_rows in 1u32..12,
        ) {
            let config = WorkingSetConfig { line_size: 64, max_age, max_rows };
            let reads: Vec<(u64, u64)> = reads.iter().map(|&(line, size)| (line * 64 + line % 7, size)).collect();
            let span = one_span(config, &reads);
            let want = per_cell_rows(config, &reads);
            let width = reads.len() as f64;
            proptest::prop_assert_eq!(span.rows.len(), want.len());
            let mut totals = [0.0f64; 3];
            let mut want_totals = [0.0f64; 3];
            for (row, (cells, sums)) in span.rows.iter().zip(&want) {
                proptest::prop_assert!((row.occupancy * width - cells).abs() < 1e-9);
                let cells = row.occupancy * width;
                for (t, m) in totals.iter_mut().zip([row.means.fresh, row.means.fresh_bytes, row.means.fresh_distinct]) {
                    *t += m * cells;
                }
                for (t, s) in want_totals.iter_mut().zip(sums) {
                    *t += s;
                }
            }
            for k in 0..3 {
                proptest::prop_assert!((totals[k] - want_totals[k]).abs() < 1e-6 * want_totals[k].max(1.0),
                    "term {}: {} vs {}", k, totals[k], want_totals[k]);
            }
        }
    }

    /// A line's tint is asked once, with its addresses, when it enters the
    /// set, and holds while it stays: line B lies in an allocation (the
    /// tint says so for its addresses only), line A does not; A is touched
    /// again, which must not change its tint.
    #[test]
    fn a_line_is_tinted_when_it_enters_inside_an_allocation() {
        let config = WorkingSetConfig { line_size: 64, max_age: 8, max_rows: 16 };
        let mut set = FastWorkingSet::new(config);
        let mut acc = SpanAccumulator::new(&mut set, 0, |_, _| false);
        let (a, b) = (100 * 64, 200 * 64);
        let mut asked = Vec::new();
        for (column, addr) in [a, b, a + 8, b + 8].into_iter().enumerate() {
            acc.begin_column(column as u64);
            set.read(
                addr,
                8,
                &mut acc.observer(|lo, hi| {
                    asked.push((lo, hi));
                    lo >= b && hi <= b + 64
                }),
            );
            acc.end_column(&set);
        }
        assert_eq!(asked, vec![(a, a + 64), (b, b + 64)], "asked once per line, when it entered");
        let span = acc.close_span(&mut set);
        assert_eq!(span.rows[0].means.tint, 0.0, "row 0: line A, outside");
        assert_eq!(span.rows[1].means.tint, 1.0, "row 1: line B, inside");
    }

    /// A span of no columns, with lines in the set or without, has rows
    /// of nothing (and closing it does not fail).
    #[test]
    fn a_span_of_no_columns_is_empty() {
        let config = WorkingSetConfig { line_size: 64, max_age: 4, max_rows: 16 };
        let mut set = FastWorkingSet::new(config);
        let mut acc = SpanAccumulator::new(&mut set, 0, |_, _| false);
        assert!(acc.close_span(&mut set).rows.is_empty());
        for (column, addr) in [0u64, 640, 1280].into_iter().enumerate() {
            acc.begin_column(column as u64);
            set.read(addr, 8, &mut acc.observer(|_, _| false));
            acc.end_column(&set);
        }
        assert_eq!(acc.close_span(&mut set).rows.len(), 3);
        let again = acc.close_span(&mut set);
        assert_eq!(again.rows.len(), 3, "the lines present");
        assert!(again.rows.iter().all(|r| r.occupancy == 0.0));
    }

    /// Grouped by rank, each group in its first order; ranks past the
    /// last group count in it.
    #[test]
    fn grouping_by_rank_keeps_the_order_within_a_group() {
        let (mut starts, mut order) = (Vec::new(), Vec::new());
        order_by_rank(&[2, 0, 2, 1, 0, 9, 2], 2, &mut starts, &mut order);
        assert_eq!(starts, vec![0, 2, 3, 7]);
        assert_eq!(order, vec![1, 4, 3, 0, 2, 5, 6]);
        order_by_rank(&[], 3, &mut starts, &mut order);
        assert_eq!((starts, order), (vec![0; 5], vec![]));
    }

    #[test]
    fn lines_sort_the_same_packed_or_not() {
        let pairs: Vec<(u64, u32)> = (0..300u64).map(|i| ((i * 7919) % 1009 + 5, i as u32)).collect();
        let mut reference = pairs.clone();
        reference.sort_unstable_by_key(|&(line, _)| line);
        let mut packed = pairs.clone();
        sort_by_line(&mut packed, &mut Vec::new());
        assert_eq!(packed, reference);
        // A line too large to pack takes the other way, with the same order.
        let mut wide = pairs.clone();
        wide.push((u64::MAX / 2, 300));
        let mut reference = wide.clone();
        reference.sort_unstable_by_key(|&(line, _)| line);
        sort_by_line(&mut wide, &mut Vec::new());
        assert_eq!(wide, reference);
    }
}

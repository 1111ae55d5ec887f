//! Hit-testing: what is under a point of the picture. Column `c` (and
//! optionally row `r`) answer "which code, which cache line, which
//! allocation": the frame stack at the column, the read it made (pc,
//! function, inlined frames, file:line), the lines it touched and their
//! rows, the line at the row (bytes read, distinct bytes, age) and the
//! recorded block holding it. `linetrace at` prints this; the viewer's
//! tooltips show the same thing, through the same [`Inspector`].

use std::path::PathBuf;

use serde::Serialize;

use crate::DecodeError;
use crate::allocations::AllocationRecord;
use crate::cursor::ColumnCursor;
use crate::model::Model;
use crate::symbols::{InlinedFrame, Symbolizer};
use crate::working_set::{Departure, SortedLines};

/// One frame of the stack at a column, outermost first.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrameInfo {
    /// Function name.
    pub function: String,
    /// Entry address.
    pub entry: u64,
    /// Where the function is (its entry's file:line).
    pub location: String,
    /// First read column of the frame.
    pub first_column: u64,
    /// One past its last read column.
    pub end_column: u64,
    /// Reads of the frame itself.
    pub self_reads: u64,
    /// Reads with callees.
    pub total_reads: u64,
    /// Writes of the frame itself.
    pub self_writes: u64,
    /// Writes with callees.
    pub total_writes: u64,
}

/// The read that made a column.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccessInfo {
    /// Address of the instruction.
    pub pc: u64,
    /// The module file and the pc's link-time address in it (what
    /// `addr2line -e FILE ADDRESS` takes).
    pub module: Option<PathBuf>,
    /// Link-time address of the pc in its module.
    pub module_address: Option<u64>,
    /// Containing function.
    pub function: String,
    /// `file:line` of the innermost source location.
    pub file_line: String,
    /// Full path of the source file, if known.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// Inlined frames at the pc, innermost first.
    pub inlined: Vec<InlinedFrame>,
    /// Thread.
    pub thread: u32,
    /// Lowest address read.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// `read`, or `modify` for a read-modify-write.
    pub kind: &'static str,
}

/// A cache line at a row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineInfo {
    /// Row in the working set.
    pub row: usize,
    /// Line number (address / line size).
    pub line: u64,
    /// First address of the line.
    pub address: u64,
    /// Bytes read from it since it entered the set (repeats count).
    pub bytes_read: u32,
    /// Distinct bytes read since it entered the set.
    pub distinct_bytes: u32,
    /// Age: `max_age` when just touched, 1 just before leaving.
    pub age: u32,
    /// Whether this column's read touched it.
    pub touched_here: bool,
}

/// A recorded block, for people.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllocationInfo {
    /// The allocator call (`malloc`, `mmap`, ...).
    pub kind: &'static str,
    /// First address.
    pub address: u64,
    /// Requested size.
    pub size: u64,
    /// Where it was allocated: function and file:line.
    pub allocated_by: String,
    /// Column it was created at.
    pub alloc_column: u64,
    /// Column it was freed at, if it was.
    pub free_column: Option<u64>,
    /// Allocation event that created it (the allocations view's x).
    pub alloc_event: u64,
    /// Allocation event that freed it, if one did.
    pub free_event: Option<u64>,
    /// Reads that fell into it over the whole trace.
    pub reads: u64,
    /// Writes that fell into it.
    pub writes: u64,
}

/// Everything under a point of the picture.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Inspection {
    /// The column.
    pub column: u64,
    /// Frame stack at the column, outermost first.
    pub frames: Vec<FrameInfo>,
    /// The read that made the column.
    pub access: Option<AccessInfo>,
    /// Rows of the lines the read touched (the X highlight).
    pub rows_touched: Vec<usize>,
    /// The line at the row asked for.
    pub line: Option<LineInfo>,
    /// The block holding the row's line (or, without a row, the read's
    /// address), live at the column.
    pub allocation: Option<AllocationInfo>,
    /// Lines in the working set at the column.
    pub rows: usize,
}

/// Hit-tests one model, keeping its cursor between questions: moving right
/// walks on from the last column instead of replaying from a snapshot.
pub struct Inspector<'m> {
    model: &'m Model,
    symbols: &'m Symbolizer,
    cursor: Option<ColumnCursor<'m, SortedLines>>,
}

impl<'m> Inspector<'m> {
    /// An inspector of `model`, naming code with `symbols`.
    pub fn new(model: &'m Model, symbols: &'m Symbolizer) -> Self {
        Inspector { model, symbols, cursor: None }
    }

    /// What is at `column` (and `row`, if given).
    pub fn inspect(&mut self, column: u64, row: Option<usize>) -> Result<Inspection, DecodeError> {
        let model = self.model;
        if column >= model.columns {
            return Err(DecodeError::InvalidSetting(format!(
                "column {column} is past the trace's {} columns",
                model.columns
            )));
        }
        // Walk on from the kept cursor when it is at or before the column
        // and closer than a snapshot would be.
        let reuse = self.cursor.as_ref().is_some_and(|c| {
            let snap = model.working_set.snapshots.iter().rev().find(|s| s.column <= column).map_or(0, |s| s.column);
            c.column() <= column && c.column() >= snap
        });
        if !reuse {
            self.cursor = Some(ColumnCursor::new(model, column)?);
        }
        let symbols = self.symbols;
        let Some(cursor) = self.cursor.as_mut() else { unreachable!("set just above") };
        while cursor.column() < column {
            cursor.step(&mut |_: Departure| {})?;
        }
        let read = cursor.step(&mut |_: Departure| {})?;
        let set = cursor.set();
        let lines = set.lines();
        let line_size = model.line_size();
        let mut inspection = Inspection {
            column,
            frames: Vec::new(),
            access: None,
            rows_touched: Vec::new(),
            line: None,
            allocation: None,
            rows: lines.len(),
        };
        let mut touched = (1, 0);
        if let Some(read) = read {
            let a = read.access;
            touched = line_size.lines(a.addr, a.size);
            inspection.rows_touched =
                (touched.0..=touched.1).filter_map(|l| lines.binary_search_by_key(&l, |s| s.line).ok()).collect();
            let site = model.sites.get(a.site as usize).copied().unwrap_or(trace_rt::format::Site::UNDEFINED);
            let location = symbols.locate(site.pc);
            let link = symbols.link_address(site.pc);
            inspection.access = Some(AccessInfo {
                pc: site.pc,
                module: link.as_ref().map(|(p, _)| p.clone()),
                module_address: link.map(|(_, a)| a),
                function: location.function.clone(),
                file_line: location.file_line(),
                file: location.file.clone(),
                line: location.line,
                inlined: location.inlined.clone(),
                thread: read.thread,
                address: a.addr,
                size: a.size,
                kind: if a.writes { "modify" } else { "read" },
            });
            inspection.allocation = model.allocation_at(a.addr, column).map(|r| allocation_info(symbols, r));
        }
        if let Some(row) = row {
            let Some(state) = lines.get(row) else {
                return Err(DecodeError::InvalidSetting(format!(
                    "row {row} is empty at column {column} (the working set has {} lines)",
                    lines.len()
                )));
            };
            let address = line_size.start_of(state.line);
            inspection.line = Some(LineInfo {
                row,
                line: state.line,
                address,
                bytes_read: state.bytes_read,
                distinct_bytes: state.distinct_bytes(),
                age: set.age(state),
                touched_here: (touched.0..=touched.1).contains(&state.line),
            });
            let end = address.saturating_add(u64::from(line_size.bytes()));
            inspection.allocation = model
                .allocation_index
                .overlapping(&model.allocations, address, end, column)
                .max_by_key(|r| r.alloc_column)
                .map(|r| allocation_info(symbols, r));
        }
        inspection.frames = model
            .frames_in(column, column + 1)?
            .iter()
            .map(|f| {
                let l = symbols.locate(f.function);
                FrameInfo {
                    function: l.function.clone(),
                    entry: f.function,
                    location: l.file_line(),
                    first_column: f.first_column,
                    end_column: f.end_column,
                    self_reads: f.self_reads,
                    total_reads: f.total_reads,
                    self_writes: f.self_writes,
                    total_writes: f.total_writes,
                }
            })
            .collect();
        Ok(inspection)
    }
}

/// A recorded block, named through `symbols`.
fn allocation_info(symbols: &Symbolizer, r: &AllocationRecord) -> AllocationInfo {
    {
        let l = symbols.locate(r.callsite);
        AllocationInfo {
            kind: r.kind.name(),
            address: r.address,
            size: r.size,
            allocated_by: format!("{} {}", l.function, l.file_line()),
            alloc_column: r.alloc_column,
            free_column: r.free_column,
            alloc_event: r.alloc_event,
            free_event: r.free_event,
            reads: r.reads,
            writes: r.writes,
        }
    }
}

/// The columns in `[from, to)` whose read touched `line` (the Y highlight).
pub fn columns_touching(model: &Model, line: u64, from: u64, to: u64) -> Result<Vec<u64>, DecodeError> {
    let line_size = model.line_size();
    let mut cursor = ColumnCursor::<SortedLines>::new(model, from)?;
    let mut hits = Vec::new();
    while cursor.column() < to.min(model.columns) {
        let Some(read) = cursor.step(&mut |_: Departure| {})? else { break };
        let (first, last) = line_size.lines(read.access.addr, read.access.size);
        if (first..=last).contains(&line) {
            hits.push(read.column);
        }
    }
    Ok(hits)
}

/// A band of rows that hold lines of one thing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RowBand {
    /// First row.
    pub first_row: usize,
    /// Rows in the band.
    pub rows: usize,
    /// What the lines are: a variable, a heap block, a stack, a module's
    /// data.
    pub label: String,
}

/// The widest gap between two lines of one band of unnamed rows: further
/// apart, they are taken for different mappings.
const UNNAMED_GAP: u64 = 1 << 20;

/// What each row's line is at `column`, as bands of rows with one label:
/// the recorded block holding it (named by its allocating function), else
/// the variable (data symbol) holding it, else the traced thread's stack
/// (named by the innermost frame), else the module mapping it, else the
/// data mapping holding it (the heap, a stack, anonymous memory, a data
/// file: blocks allocated before the recording began); rows of none of
/// these make one band per run of them within 1 MiB of each other.
pub fn row_bands(model: &Model, symbols: &Symbolizer, column: u64) -> Result<Vec<RowBand>, DecodeError> {
    let mut cursor = ColumnCursor::<SortedLines>::new(model, column)?;
    cursor.step(&mut |_: Departure| {})?;
    let line_size = model.line_size();
    let innermost = model.frames_in(column, column + 1)?.last().map(|f| symbols.locate(f.function).function.clone());
    let mut bands: Vec<RowBand> = Vec::new();
    // The end of the last band's last line, if it is of rows without a name.
    let mut unnamed_last: Option<u64> = None;
    for (row, state) in cursor.set().lines().iter().enumerate() {
        let lo = line_size.start_of(state.line);
        let hi = lo.saturating_add(u64::from(line_size.bytes()));
        let label = if let Some(b) =
            model.allocation_index.overlapping(&model.allocations, lo, hi, column).max_by_key(|r| r.alloc_column)
        {
            format!("block from {}", symbols.locate(b.callsite).function)
        } else if let Some((name, _)) = symbols.variable_at(lo) {
            name
        } else if model.stack_thread_at(lo).is_some() {
            match &innermost {
                Some(f) => format!("stack of {f}"),
                None => "stack".to_string(),
            }
        } else if let Some(module) = symbols.module_name_at(lo) {
            format!("{module} data")
        } else if let Some(mapping) = model.data_mapping_at(lo) {
            mapping
        } else {
            // No name: consecutive such rows near each other make one
            // band, named by its first line's address and an ellipsis (one
            // band a row, each too thin for its address, left a stack of
            // unlabelled stripes: a heap allocated before the trace began;
            // a longer name was cut to its first hex digits in the gutter).
            match bands.last_mut() {
                Some(b)
                    if unnamed_last.is_some_and(|end| lo.saturating_sub(end) <= UNNAMED_GAP)
                        && b.first_row + b.rows == row =>
                {
                    b.rows += 1
                }
                _ => bands.push(RowBand { first_row: row, rows: 1, label: format!("{lo:#x}…") }),
            }
            unnamed_last = Some(hi);
            continue;
        };
        unnamed_last = None;
        match bands.last_mut() {
            Some(b) if b.label == label && b.first_row + b.rows == row => b.rows += 1,
            _ => bands.push(RowBand { first_row: row, rows: 1, label }),
        }
    }
    Ok(bands)
}

//! The call tree, in read-column space.
//!
//! Frames come from call, tail-call and return events. A frame spans
//! `[first_column, end_column)`: the memory reads it and its callees made,
//! so a frame is exactly as wide as its reads in the flamegraph. Frames are
//! stored in creation order, which is a pre-order walk: a parent always
//! precedes its children.
//!
//! Matching is by stack pointer, which tolerates what breaks call/return
//! pairing: a return pops every frame whose return-address slot is below the
//! new stack pointer (longjmp, exceptions, unmatched returns), and a call
//! first drops frames the stack has already left.
//!
//! Memory stays bounded: when more than [`MAX_FRAMES`] frames are stored,
//! closed frames narrower than a minimum width (doubling each time) are
//! dropped, and [`CallTree::pruned_below`] says so. A dropped frame is
//! narrower than a pixel at the zoom that fits the whole trace, but many of
//! them side by side are a summary bar there: [`CallTree::pruned_runs`]
//! keeps where they were. A view of a narrower column range rebuilds every
//! frame by replay (`Model::frames_in`).
//! Per-function and per-call-site totals are summed as frames close, so the
//! tables never depend on what was dropped.

use std::collections::HashMap;

use trace_rt::format::Event;

use crate::hashing::BuildFastHasher;

/// Maps keyed by addresses and thread ids, on the per-call path: a cheap
/// multiplicative hash instead of SipHash.
type FastMap<K, V> = HashMap<K, V, BuildFastHasher>;

use serde::Serialize;

/// Index of a frame in [`CallTree::frames`].
pub type FrameId = u32;

/// Most frames kept before narrow ones are dropped.
pub const MAX_FRAMES: usize = 1 << 16;

/// `end_column` of a frame still open.
const OPEN: u64 = u64::MAX;

/// One call in the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// Entry address of the called function.
    pub function: u64,
    /// Address of the call (or jump) that created it; 0 for invocation roots.
    pub callsite: u64,
    /// The calling frame (`None` for invocation roots).
    pub parent: Option<FrameId>,
    /// 0 for invocation roots.
    pub depth: u32,
    /// The traced-function invocation this frame belongs to.
    pub invocation: u32,
    /// Thread it ran on.
    pub thread: u32,
    /// First read column of the frame.
    pub first_column: u64,
    /// One past its last read column.
    pub end_column: u64,
    /// Reads made by the frame itself.
    pub self_reads: u64,
    /// Writes made by the frame itself.
    pub self_writes: u64,
    /// Reads made by the frame and its callees.
    pub total_reads: u64,
    /// Writes made by the frame and its callees.
    pub total_writes: u64,
    /// Whether the trace ended (or was cut) before the frame returned.
    pub unfinished: bool,
}

/// Inclusive reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Inclusive {
    /// Reads including callees.
    pub reads: u64,
    /// Writes including callees.
    pub writes: u64,
}

/// All frames of a trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CallTree {
    /// Frames in pre-order.
    pub frames: Vec<Frame>,
    /// Closed frames narrower than this many columns were dropped (0: none).
    pub pruned_below: u64,
    /// How many frames were dropped.
    pub pruned_frames: u64,
    /// Where the dropped frames were, for the flamegraph's summary bars,
    /// by depth, then column.
    pub pruned_runs: Vec<PrunedRun>,
    /// Inclusive totals per function entry address; recursion counted once.
    pub function_totals: FastMap<u64, Inclusive>,
    /// Inclusive totals of the calls made from each call instruction;
    /// recursion through the same call counted once.
    pub callsite_totals: FastMap<u64, Inclusive>,
}

impl CallTree {
    /// The frames overlapping columns `[from, to)` (a frame of no reads
    /// overlaps if it starts inside), in pre-order. Frames start in
    /// non-decreasing column order, so those starting inside the range are
    /// one binary search away; those starting before it and still open
    /// are the ancestors of the last frame that started before it.
    pub fn overlapping(&self, from: u64, to: u64) -> impl Iterator<Item = &Frame> {
        self.overlapping_indices(from, to).map(move |i| &self.frames[i])
    }

    /// Indices into [`CallTree::frames`] of [`CallTree::overlapping`].
    pub fn overlapping_indices(&self, from: u64, to: u64) -> impl Iterator<Item = usize> + '_ {
        let f = &self.frames;
        let overlaps = move |x: &Frame| {
            x.first_column < to && x.end_column > from
                || x.first_column == x.end_column && x.first_column >= from && x.first_column < to
        };
        let lo = f.partition_point(|x| x.first_column < from);
        let hi = f.partition_point(|x| x.first_column < to);
        let mut before: Vec<usize> = Vec::new();
        // One thread's frames nest by columns; with several threads their
        // frames interleave, and only a scan is sure.
        let one_thread = f.first().is_none_or(|x| f.iter().all(|y| y.thread == x.thread));
        if one_thread {
            let mut at = lo.checked_sub(1);
            while let Some(i) = at {
                if overlaps(&f[i]) {
                    before.push(i);
                }
                at = f[i].parent.map(|p| p as usize);
            }
            before.reverse();
        } else {
            before = (0..lo).filter(|&i| overlaps(&f[i])).collect();
        }
        before.into_iter().chain(lo..hi).filter(move |&i| overlaps(&f[i]))
    }
}

/// Feeds a control-flow event to the call tree at `column`; false for
/// events that are not about control flow.
pub fn apply_control(calls: &mut CallTreeBuilder, thread: u32, event: &Event, column: u64) -> bool {
    match *event {
        Event::Call { callsite, target, sp } => calls.call(thread, callsite, target, sp, column),
        Event::TailCall { callsite, target, sp } => calls.tail_call(thread, callsite, target, sp, column),
        Event::Return { sp } => calls.ret(thread, sp, column),
        Event::InvocationStart { index, pc, sp } => calls.invocation_start(thread, index, pc, sp, column),
        Event::InvocationEnd { .. } => calls.invocation_end(thread, column),
        _ => return false,
    }
    true
}

/// Rows a flamegraph of `frames` needs: the deepest depth plus one (0 for
/// no frames).
pub fn height(frames: &[Frame]) -> u32 {
    frames.iter().map(|f| f.depth + 1).max().unwrap_or(0)
}

/// An open frame, enough to resume building from a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenFrame {
    /// Entry address.
    pub function: u64,
    /// Call instruction.
    pub callsite: u64,
    /// Stack pointer after the call.
    pub sp: u64,
    /// First column.
    pub first_column: u64,
}

/// The open frames of one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenStack {
    /// Thread id.
    pub thread: u32,
    /// Invocation in progress.
    pub invocation: Option<u32>,
    /// Outermost first.
    pub frames: Vec<OpenFrame>,
}

#[derive(Default)]
struct ThreadStack {
    /// (frame, stack pointer after the call: where the return address is).
    open: Vec<(FrameId, u64)>,
    invocation: Option<u32>,
    /// How many open frames each function / call site has (recursion).
    active_functions: FastMap<u64, u32>,
    active_callsites: FastMap<u64, u32>,
}

/// Neighbouring frames at one depth that pruning dropped: a view that uses
/// the stored tree draws them as one summary bar, as it would have drawn
/// them. Without them, the whole-trace flamegraph of a function called
/// 312,500 times showed its bar over the last sixth of the trace only,
/// the calls made after the last pruning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PrunedRun {
    /// Depth of the frames.
    pub depth: u32,
    /// First column of the first frame.
    pub first_column: u64,
    /// End column of the last frame.
    pub end_column: u64,
    /// Frames in the run.
    pub frames: u64,
    /// Their function, if they share one.
    pub function: Option<u64>,
}

impl PrunedRun {
    /// Takes in `next`, a run at the same depth starting at or after this
    /// one's start.
    fn absorb(&mut self, next: &PrunedRun) {
        self.end_column = self.end_column.max(next.end_column);
        self.frames += next.frames;
        self.function = self.function.filter(|&f| next.function == Some(f));
    }
}

/// Sorts `runs` by depth and column and joins the ones at one depth less
/// than `gap` columns apart (less than a pixel of any view that draws
/// them), so that their number stays bounded.
fn coalesce(runs: &mut Vec<PrunedRun>, gap: u64) {
    runs.sort_by_key(|r| (r.depth, r.first_column));
    let mut joined: Vec<PrunedRun> = Vec::with_capacity(runs.len());
    for run in runs.drain(..) {
        match joined.last_mut() {
            Some(last) if last.depth == run.depth && run.first_column < last.end_column.saturating_add(gap) => {
                last.absorb(&run)
            }
            _ => joined.push(run),
        }
    }
    *runs = joined;
}

/// Builds a [`CallTree`] from events in trace order.
#[derive(Default)]
pub struct CallTreeBuilder {
    frames: Vec<Frame>,
    threads: FastMap<u32, ThreadStack>,
    /// (thread, innermost open frame) of the last read or write, so the
    /// per-access path skips the map; cleared whenever a stack changes.
    current: Option<(u32, Option<FrameId>)>,
    pruned_below: u64,
    pruned_frames: u64,
    pruned_runs: Vec<PrunedRun>,
    function_totals: FastMap<u64, Inclusive>,
    callsite_totals: FastMap<u64, Inclusive>,
}

impl CallTreeBuilder {
    /// A builder with no frames.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder that continues from open stacks (see [`CallTreeBuilder::open_stacks`]).
    pub fn resume(stacks: &[OpenStack]) -> Self {
        let mut b = Self::default();
        for s in stacks {
            b.threads.entry(s.thread).or_default().invocation = s.invocation;
            for f in &s.frames {
                b.push(s.thread, f.function, f.callsite, f.sp, f.first_column);
            }
        }
        b
    }

    /// The open frames of every thread, outermost first.
    pub fn open_stacks(&self) -> Vec<OpenStack> {
        let mut stacks: Vec<OpenStack> = self
            .threads
            .iter()
            .filter(|(_, s)| s.invocation.is_some() || !s.open.is_empty())
            .map(|(&thread, s)| OpenStack {
                thread,
                invocation: s.invocation,
                frames: s
                    .open
                    .iter()
                    .map(|&(id, sp)| {
                        let f = &self.frames[id as usize];
                        OpenFrame { function: f.function, callsite: f.callsite, sp, first_column: f.first_column }
                    })
                    .collect(),
            })
            .collect();
        stacks.sort_by_key(|s| s.thread);
        stacks
    }

    fn push(&mut self, thread: u32, function: u64, callsite: u64, sp: u64, column: u64) {
        self.prune_if_needed();
        self.current = None;
        let stack = self.threads.entry(thread).or_default();
        let Some(invocation) = stack.invocation else { return };
        let parent = stack.open.last().map(|&(f, _)| f);
        let depth = stack.open.len() as u32;
        let id = self.frames.len() as FrameId;
        *stack.active_functions.entry(function).or_default() += 1;
        *stack.active_callsites.entry(callsite).or_default() += 1;
        stack.open.push((id, sp));
        self.frames.push(Frame {
            function,
            callsite,
            parent,
            depth,
            invocation,
            thread,
            first_column: column,
            end_column: OPEN,
            self_reads: 0,
            self_writes: 0,
            total_reads: 0,
            total_writes: 0,
            unfinished: false,
        });
    }

    /// Closes the innermost open frame of `thread` at `column`.
    fn close_top(&mut self, thread: u32, column: u64, unfinished: bool) -> bool {
        self.current = None;
        let Some(stack) = self.threads.get_mut(&thread) else { return false };
        let Some((id, _)) = stack.open.pop() else { return false };
        let f = &mut self.frames[id as usize];
        f.end_column = column;
        f.unfinished = unfinished;
        f.total_reads += f.self_reads;
        f.total_writes += f.self_writes;
        let (function, callsite, parent) = (f.function, f.callsite, f.parent);
        let inclusive = Inclusive { reads: f.total_reads, writes: f.total_writes };
        if let Some(p) = parent {
            self.frames[p as usize].total_reads += inclusive.reads;
            self.frames[p as usize].total_writes += inclusive.writes;
        }
        // Count a function (call site) only at its outermost open frame.
        if release(&mut stack.active_functions, function) {
            add(self.function_totals.entry(function).or_default(), inclusive);
        }
        if release(&mut stack.active_callsites, callsite) && callsite != 0 {
            add(self.callsite_totals.entry(callsite).or_default(), inclusive);
        }
        true
    }

    /// Closes frames of `thread` while `pop(sp)` is true for the top one.
    fn pop_while(&mut self, thread: u32, column: u64, mut pop: impl FnMut(u64) -> bool) {
        loop {
            let top = self.threads.get(&thread).and_then(|s| s.open.last()).map(|&(_, sp)| sp);
            match top {
                Some(sp) if pop(sp) => {
                    self.close_top(thread, column, false);
                }
                _ => break,
            }
        }
    }

    /// The traced function was entered.
    pub fn invocation_start(&mut self, thread: u32, index: u32, pc: u64, sp: u64, column: u64) {
        self.invocation_end(thread, column);
        self.threads.entry(thread).or_default().invocation = Some(index);
        self.push(thread, pc, 0, sp, column);
    }

    /// The traced function returned (or the invocation was abandoned).
    pub fn invocation_end(&mut self, thread: u32, column: u64) {
        self.pop_while(thread, column, |_| true);
        if let Some(s) = self.threads.get_mut(&thread) {
            s.invocation = None;
        }
    }

    /// A call: `sp` points at the pushed return address.
    pub fn call(&mut self, thread: u32, callsite: u64, target: u64, sp: u64, column: u64) {
        // Frames at or below the new return-address slot were left already.
        self.pop_while(thread, column, |frame_sp| frame_sp <= sp);
        self.push(thread, target, callsite, sp, column);
    }

    /// A jump to a function's entry: it replaces the current frame.
    pub fn tail_call(&mut self, thread: u32, callsite: u64, target: u64, sp: u64, column: u64) {
        let Some(stack) = self.threads.get(&thread) else { return };
        let Some(&(_, frame_sp)) = stack.open.last() else { return };
        if stack.open.len() == 1 {
            // Never replace the invocation root: the traced function stays
            // the root of its flame, the jump target becomes its child.
            self.call(thread, callsite, target, sp.wrapping_sub(8), column);
            return;
        }
        self.close_top(thread, column, false);
        self.push(thread, target, callsite, frame_sp, column);
    }

    /// A return: `sp` is the stack pointer after it.
    pub fn ret(&mut self, thread: u32, sp: u64, column: u64) {
        self.pop_while(thread, column, |frame_sp| frame_sp < sp);
    }

    #[inline]
    fn innermost(&mut self, thread: u32) -> Option<FrameId> {
        match self.current {
            Some((t, frame)) if t == thread => frame,
            _ => {
                let frame = self.threads.get(&thread).and_then(|s| s.open.last()).map(|&(id, _)| id);
                self.current = Some((thread, frame));
                frame
            }
        }
    }

    /// Entry addresses of the open frames of `thread`, outermost first.
    pub fn open_functions(&self, thread: u32) -> impl Iterator<Item = u64> + '_ {
        self.threads
            .get(&thread)
            .into_iter()
            .flat_map(|s| s.open.iter().map(|&(id, _)| self.frames[id as usize].function))
    }

    /// Counts a read made by the current frame of `thread`.
    #[inline]
    pub fn read(&mut self, thread: u32) {
        if let Some(id) = self.innermost(thread) {
            self.frames[id as usize].self_reads += 1;
        }
    }

    /// Counts a write made by the current frame of `thread`.
    #[inline]
    pub fn write(&mut self, thread: u32) {
        if let Some(id) = self.innermost(thread) {
            self.frames[id as usize].self_writes += 1;
        }
    }

    /// Drops closed frames narrower than a doubling minimum width until at
    /// most half of [`MAX_FRAMES`] remain. Compacts in place, so the frame
    /// vector never grows past [`MAX_FRAMES`].
    fn prune_if_needed(&mut self) {
        if self.frames.len() < MAX_FRAMES {
            return;
        }
        // The width threshold only grows when the current one no longer
        // frees enough: doubling it at every call would overflow on a trace
        // with millions of calls.
        self.pruned_below = self.pruned_below.max(2);
        loop {
            let min = self.pruned_below;
            let mut new_id: Vec<Option<FrameId>> = Vec::with_capacity(self.frames.len());
            let mut write = 0usize;
            for read in 0..self.frames.len() {
                let f = &self.frames[read];
                // A child is never wider than its parent, so a dropped
                // frame's children are dropped too and parents map cleanly.
                let keep = f.end_column == OPEN || f.end_column - f.first_column >= min;
                if !keep {
                    new_id.push(None);
                    self.pruned_frames += 1;
                    self.pruned_runs.push(PrunedRun {
                        depth: f.depth,
                        first_column: f.first_column,
                        end_column: f.end_column,
                        frames: 1,
                        function: Some(f.function),
                    });
                    continue;
                }
                self.frames.swap(write, read);
                let parent = self.frames[write].parent.and_then(|p| new_id[p as usize]);
                self.frames[write].parent = parent;
                new_id.push(Some(write as FrameId));
                write += 1;
            }
            self.frames.truncate(write);
            for stack in self.threads.values_mut() {
                for (id, _) in stack.open.iter_mut() {
                    // Open frames are always kept.
                    *id = new_id[*id as usize].unwrap_or(0);
                }
            }
            self.current = None;
            coalesce(&mut self.pruned_runs, min);
            if self.frames.len() <= MAX_FRAMES / 2 || min == u64::MAX {
                // Done, or only open frames are left (as deep as the stack).
                break;
            }
            self.pruned_below = min.saturating_mul(2);
        }
    }

    /// Closes what is still open at `column` (a truncated trace) and returns
    /// the tree.
    pub fn finish(mut self, column: u64) -> CallTree {
        let threads: Vec<u32> = self.threads.keys().copied().collect();
        for t in threads {
            while self.close_top(t, column, true) {}
        }
        CallTree {
            frames: self.frames,
            pruned_below: self.pruned_below,
            pruned_frames: self.pruned_frames,
            pruned_runs: self.pruned_runs,
            function_totals: self.function_totals,
            callsite_totals: self.callsite_totals,
        }
    }
}

/// Decrements an open-frame count; true when it reaches zero.
fn release(active: &mut FastMap<u64, u32>, key: u64) -> bool {
    match active.get_mut(&key) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            active.remove(&key);
            true
        }
        None => true,
    }
}

fn add(total: &mut Inclusive, more: Inclusive) {
    total.reads += more.reads;
    total.writes += more.writes;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Millions of short calls (a compressor's inner loop) prune many times;
    /// the width threshold stays where it frees enough frames.
    #[test]
    fn millions_of_calls_prune_without_raising_the_threshold_each_time() {
        let mut b = CallTreeBuilder::new();
        b.invocation_start(1, 0, 0x100, 1000, 0);
        // A dozen prunes: enough for a threshold doubled at each to show.
        let calls = 6 * MAX_FRAMES as u64;
        for i in 0..calls {
            b.call(1, 0x110, 0x200, 992, 2 * i);
            b.read(1);
            b.ret(1, 1000, 2 * i + 1);
            b.read(1);
        }
        b.invocation_end(1, 2 * calls);
        let t = b.finish(2 * calls);
        assert!(t.frames.len() <= MAX_FRAMES, "{} frames kept", t.frames.len());
        assert_eq!(t.pruned_below, 2, "frames one column wide need a threshold of 2, no more");
        assert_eq!(t.function_totals[&0x200], Inclusive { reads: calls, writes: 0 }, "totals survive pruning");
        // Where the dropped calls were: one run (a column of the caller's
        // between two calls is narrower than the threshold), of their
        // function, up to the first call kept.
        let run = match &t.pruned_runs[..] {
            [run] => run.clone(),
            runs => panic!("one run wanted: {runs:?}"),
        };
        assert_eq!((run.depth, run.function, run.frames), (1, Some(0x200), t.pruned_frames));
        assert_eq!(run.first_column, 0);
        let first_kept = t.frames.iter().filter(|f| f.depth == 1).map(|f| f.first_column).min();
        assert_eq!(first_kept.map(|c| c - run.end_column), Some(1), "the run ends a column before the first call kept");
    }

    /// Dropped calls of two functions make a run of no one function; a call
    /// kept between dropped ones splits their runs.
    #[test]
    fn dropped_calls_are_runs_split_by_kept_calls() {
        let mut b = CallTreeBuilder::new();
        b.invocation_start(1, 0, 0x100, 1000, 0);
        let mut column = 0;
        let calls = 2 * MAX_FRAMES as u64;
        for i in 0..calls {
            // Every 10,000th call is wide (kept), the others one column.
            let width = if i % 10_000 == 5_000 { 100 } else { 1 };
            b.call(1, 0x110, if i % 2 == 0 { 0x200 } else { 0x300 }, 992, column);
            for _ in 0..width {
                b.read(1);
            }
            column += width;
            b.ret(1, 1000, column);
            b.read(1);
            column += 1;
        }
        b.invocation_end(1, column);
        let t = b.finish(column);
        let kept_wide: Vec<&Frame> =
            t.frames.iter().filter(|f| f.depth == 1 && f.end_column - f.first_column == 100).collect();
        assert!(!kept_wide.is_empty() && t.pruned_frames > 0);
        assert!(t.pruned_runs.iter().all(|r| r.depth == 1 && r.function.is_none()), "{:?}", &t.pruned_runs[..2]);
        for wide in &kept_wide {
            assert!(
                t.pruned_runs.iter().all(|r| r.end_column <= wide.first_column || r.first_column >= wide.end_column),
                "no run spans the kept call at {}",
                wide.first_column
            );
        }
        let in_runs: u64 = t.pruned_runs.iter().map(|r| r.frames).sum();
        assert_eq!(in_runs, t.pruned_frames, "every dropped call is in a run");
    }

    #[test]
    fn nested_calls_get_column_spans_and_totals() {
        let mut b = CallTreeBuilder::new();
        b.invocation_start(1, 0, 0x100, 1000, 0);
        b.read(1);
        b.call(1, 0x110, 0x200, 992, 1);
        b.read(1);
        b.read(1);
        b.call(1, 0x210, 0x300, 984, 3);
        b.read(1);
        b.ret(1, 992, 4);
        b.ret(1, 1000, 4);
        b.read(1);
        b.ret(1, 1008, 5);
        b.invocation_end(1, 5);
        let t = b.finish(5);
        let spans: Vec<(u64, u64, u32, u64, u64)> =
            t.frames.iter().map(|f| (f.function, f.first_column, f.depth, f.end_column, f.total_reads)).collect();
        assert_eq!(spans, vec![(0x100, 0, 0, 5, 5), (0x200, 1, 1, 4, 3), (0x300, 3, 2, 4, 1)]);
        assert_eq!(t.frames[1].self_reads, 2);
        assert_eq!(height(&t.frames), 3);
        assert_eq!(t.function_totals[&0x200], Inclusive { reads: 3, writes: 0 });
        assert_eq!(t.callsite_totals[&0x210], Inclusive { reads: 1, writes: 0 });
    }

    #[test]
    fn longjmp_and_unmatched_returns_are_tolerated() {
        let mut b = CallTreeBuilder::new();
        b.invocation_start(1, 0, 0x100, 1000, 0);
        b.call(1, 0x110, 0x200, 992, 0);
        b.call(1, 0x210, 0x300, 984, 1);
        // longjmp back to the root's level, then a new call from the root.
        b.call(1, 0x120, 0x400, 992, 2);
        b.read(1);
        b.ret(1, 2000, 3); // returns far above everything
        b.ret(1, 3000, 3); // and an unmatched one
        let t = b.finish(3);
        assert_eq!(t.frames.len(), 4);
        assert_eq!(t.frames[3].parent, Some(0), "the new call hangs off the root");
        assert!(t.frames.iter().all(|f| f.end_column <= 3 && !f.unfinished));
    }

    #[test]
    fn tail_calls_replace_frames_and_truncation_marks_open_frames() {
        let mut b = CallTreeBuilder::new();
        b.invocation_start(1, 0, 0x100, 1000, 0);
        b.call(1, 0x110, 0x200, 992, 0);
        b.read(1);
        b.tail_call(1, 0x220, 0x500, 992, 1);
        b.read(1);
        let t = b.finish(2);
        assert_eq!(t.frames[1].end_column, 1);
        assert_eq!((t.frames[2].function, t.frames[2].depth, t.frames[2].parent), (0x500, 1, Some(0)));
        assert!(t.frames[2].unfinished && t.frames[0].unfinished);
        assert_eq!(t.frames[0].total_reads, 2);
    }

    #[test]
    fn invocations_sit_side_by_side() {
        let mut b = CallTreeBuilder::new();
        for i in 0..3u32 {
            let c = u64::from(i) * 10;
            b.invocation_start(1, i, 0x100, 1000, c);
            b.ret(1, 1008, c + 10);
            b.invocation_end(1, c + 10);
        }
        let t = b.finish(30);
        let roots: Vec<(u32, u64, u64)> =
            t.frames.iter().map(|f| (f.invocation, f.first_column, f.end_column)).collect();
        assert_eq!(roots, vec![(0, 0, 10), (1, 10, 20), (2, 20, 30)]);
    }

    #[test]
    fn recursion_counts_once_in_function_totals() {
        let mut b = CallTreeBuilder::new();
        b.invocation_start(1, 0, 0x100, 1000, 0);
        b.call(1, 0x110, 0x200, 992, 0);
        b.read(1);
        b.call(1, 0x210, 0x200, 984, 1); // recursive call
        b.read(1);
        b.ret(1, 992, 2);
        b.ret(1, 1000, 2);
        let t = b.finish(2);
        assert_eq!(t.function_totals[&0x200].reads, 2, "not 3: the inner call is inside the outer");
        assert_eq!(t.function_totals[&0x100].reads, 2);
    }

    #[test]
    fn pruning_bounds_frames_and_keeps_totals() {
        let mut b = CallTreeBuilder::new();
        b.invocation_start(1, 0, 0x100, 1_000_000, 0);
        let calls = MAX_FRAMES as u64 + 10;
        for i in 0..calls {
            b.call(1, 0x110, 0x200, 999_992, i * 3);
            b.read(1);
            b.read(1);
            b.read(1);
            b.ret(1, 1_000_000, i * 3 + 3);
        }
        let t = b.finish(calls * 3);
        assert!(t.frames.len() <= MAX_FRAMES, "{}", t.frames.len());
        assert!(t.pruned_below > 3 && t.pruned_frames > 0);
        assert_eq!(t.frames[0].total_reads, calls * 3, "the root keeps every read");
        assert_eq!(t.function_totals[&0x200].reads, calls * 3);
    }

    #[test]
    fn resuming_from_open_stacks_rebuilds_the_same_frames() {
        let events = |b: &mut CallTreeBuilder, from: usize| {
            let script: [(u8, u64); 6] = [(0, 0), (1, 1), (2, 2), (1, 3), (2, 4), (2, 5)];
            for &(kind, col) in &script[from..] {
                match kind {
                    0 => b.invocation_start(1, 0, 0x100, 1000, col),
                    1 => b.call(1, 0x110, 0x200 + col, 992, col),
                    _ => b.ret(1, 1000, col),
                }
            }
        };
        let mut whole = CallTreeBuilder::new();
        events(&mut whole, 0);
        let whole = whole.finish(6);
        let mut first = CallTreeBuilder::new();
        first.invocation_start(1, 0, 0x100, 1000, 0);
        first.call(1, 0x110, 0x201, 992, 1);
        let mut resumed = CallTreeBuilder::resume(&first.open_stacks());
        events(&mut resumed, 2);
        let resumed = resumed.finish(6);
        let spans = |t: &CallTree| {
            t.frames.iter().map(|f| (f.function, f.first_column, f.end_column, f.depth)).collect::<Vec<_>>()
        };
        assert_eq!(spans(&resumed), spans(&whole));
    }
}

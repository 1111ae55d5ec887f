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

use std::collections::HashMap;

use serde::Serialize;

/// Index of a frame in [`CallTree::frames`].
pub type FrameId = u32;

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

/// All frames of a trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CallTree {
    /// Frames in pre-order.
    pub frames: Vec<Frame>,
}

impl CallTree {
    /// Deepest depth, plus one (0 for an empty tree).
    pub fn height(&self) -> u32 {
        self.frames.iter().map(|f| f.depth + 1).max().unwrap_or(0)
    }
}

#[derive(Default)]
struct ThreadStack {
    /// (frame, stack pointer after the call: where the return address is).
    open: Vec<(FrameId, u64)>,
    invocation: Option<u32>,
}

/// Builds a [`CallTree`] from events in trace order.
#[derive(Default)]
pub struct CallTreeBuilder {
    frames: Vec<Frame>,
    threads: HashMap<u32, ThreadStack>,
}

impl CallTreeBuilder {
    /// A builder with no frames.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, thread: u32, function: u64, callsite: u64, sp: u64, column: u64) {
        let stack = self.threads.entry(thread).or_default();
        let Some(invocation) = stack.invocation else {
            return;
        };
        let parent = stack.open.last().map(|&(f, _)| f);
        let depth = stack.open.len() as u32;
        let id = self.frames.len() as FrameId;
        self.frames.push(Frame {
            function,
            callsite,
            parent,
            depth,
            invocation,
            thread,
            first_column: column,
            end_column: column,
            self_reads: 0,
            self_writes: 0,
            total_reads: 0,
            total_writes: 0,
            unfinished: false,
        });
        stack.open.push((id, sp));
    }

    /// Closes frames of `thread` while `keep(sp)` is false for the top one.
    fn pop_while(&mut self, thread: u32, column: u64, mut pop: impl FnMut(u64) -> bool) {
        let Some(stack) = self.threads.get_mut(&thread) else {
            return;
        };
        while let Some(&(id, sp)) = stack.open.last() {
            if !pop(sp) {
                break;
            }
            stack.open.pop();
            self.frames[id as usize].end_column = column;
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
        let Some(stack) = self.threads.get_mut(&thread) else {
            return;
        };
        if stack.open.len() <= 1 {
            // Never replace the invocation root: the traced function stays
            // the root of its flame, the jump target becomes its child.
            self.call(thread, callsite, target, sp.wrapping_sub(8), column);
            return;
        }
        if let Some((id, frame_sp)) = stack.open.pop() {
            self.frames[id as usize].end_column = column;
            self.push(thread, target, callsite, frame_sp, column);
        }
    }

    /// A return: `sp` is the stack pointer after it.
    pub fn ret(&mut self, thread: u32, sp: u64, column: u64) {
        self.pop_while(thread, column, |frame_sp| frame_sp < sp);
    }

    /// Counts a read made by the current frame of `thread`.
    #[inline]
    pub fn read(&mut self, thread: u32) {
        if let Some(&(id, _)) = self.threads.get(&thread).and_then(|s| s.open.last()) {
            self.frames[id as usize].self_reads += 1;
        }
    }

    /// Counts a write made by the current frame of `thread`.
    #[inline]
    pub fn write(&mut self, thread: u32) {
        if let Some(&(id, _)) = self.threads.get(&thread).and_then(|s| s.open.last()) {
            self.frames[id as usize].self_writes += 1;
        }
    }

    /// Closes what is still open at `column` (a truncated trace) and adds up
    /// totals.
    pub fn finish(mut self, column: u64) -> CallTree {
        for stack in self.threads.values() {
            for &(id, _) in &stack.open {
                let f = &mut self.frames[id as usize];
                f.end_column = column;
                f.unfinished = true;
            }
        }
        for f in self.frames.iter_mut() {
            f.total_reads = f.self_reads;
            f.total_writes = f.self_writes;
        }
        for i in (0..self.frames.len()).rev() {
            if let Some(p) = self.frames[i].parent {
                let (r, w) = (self.frames[i].total_reads, self.frames[i].total_writes);
                self.frames[p as usize].total_reads += r;
                self.frames[p as usize].total_writes += w;
            }
        }
        CallTree {
            frames: self.frames,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let spans: Vec<(u64, u64, u32, u64, u64)> = t
            .frames
            .iter()
            .map(|f| {
                (
                    f.function,
                    f.first_column,
                    f.depth,
                    f.end_column,
                    f.total_reads,
                )
            })
            .collect();
        assert_eq!(
            spans,
            vec![
                (0x100, 0, 0, 5, 5),
                (0x200, 1, 1, 4, 3),
                (0x300, 3, 2, 4, 1)
            ]
        );
        assert_eq!(t.frames[1].self_reads, 2);
        assert_eq!(t.height(), 3);
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
        assert_eq!(
            t.frames[3].parent,
            Some(0),
            "the new call hangs off the root"
        );
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
        assert_eq!(
            (t.frames[2].function, t.frames[2].depth, t.frames[2].parent),
            (0x500, 1, Some(0))
        );
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
        let roots: Vec<(u32, u64, u64)> = t
            .frames
            .iter()
            .map(|f| (f.invocation, f.first_column, f.end_column))
            .collect();
        assert_eq!(roots, vec![(0, 0, 10), (1, 10, 20), (2, 20, 30)]);
    }
}

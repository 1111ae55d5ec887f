//! Two traces side by side (the viewer's compare mode): which frame of one
//! is which frame of the other, how a view of one maps onto the other, and
//! how much a frame changed.
//!
//! The x axes of two traces are their own read columns, so views are
//! linked through frames, never through column numbers:
//! - **Matching.** A frame is known by its function's name (demangled,
//!   compiler fragments folded: `f.part.0` is `f`, as in [`crate::diff`])
//!   and its occurrence: the k-th frame of that function in pre-order. The
//!   k-th call of `query` in A is the k-th call of `query` in B. A function
//!   inlined away in one build has no partner there; views then link
//!   through its nearest matched ancestor. When a call tree dropped narrow
//!   frames to bound memory ([`crate::calltree::CallTree::pruned_below`]),
//!   occurrences can shift and matching is approximate.
//! - **Linking.** Matched frames' starts and ends are knots of a
//!   piecewise-linear map between the columns of A and of B
//!   ([`ColumnWarp`]): a view of one trace is the same place in the other,
//!   frame boundaries landing on their partners' (a view fitted to a frame,
//!   margins included, becomes its partner fitted), positions inside a
//!   frame carried proportionally.
//! - **Deltas.** [`normalised_delta`] is `(b - a) / max(a, b)` in
//!   `[-1, 1]`: -1 gone in B, 0 unchanged, +0.5 doubled, +1 new in B.

use std::collections::HashMap;

use serde::Serialize;

use crate::calltree::{CallTree, Frame};
use crate::model::Model;
use crate::symbols::Symbolizer;
use crate::symbols::names::split_fragment;

/// One of the two traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Side {
    /// The first trace (the baseline).
    A,
    /// The second trace.
    B,
}

impl Side {
    /// The other trace.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    /// 0 for A, 1 for B.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The name a frame is matched by: its function's, fragments folded.
pub fn frame_name(symbols: &Symbolizer, frame: &Frame) -> String {
    let located = symbols.locate(frame.function);
    split_fragment(&located.function).0.to_string()
}

/// Which frame of A is which frame of B.
#[derive(Clone, Debug, Default)]
pub struct FrameMatching {
    /// Per frame of A, its partner in B.
    a_to_b: Vec<Option<u32>>,
    /// Per frame of B, its partner in A.
    b_to_a: Vec<Option<u32>>,
    /// Pairs of partners: counted once, as the compare mode's status line
    /// shows it in every frame.
    pairs: usize,
    /// Columns of A to columns of B through matched frames.
    pub warp: ColumnWarp,
}

impl FrameMatching {
    /// Matches the frames of two traces by (name, occurrence).
    pub fn new(a: &Model, sa: &Symbolizer, b: &Model, sb: &Symbolizer) -> FrameMatching {
        let names_a: Vec<String> = a.call_tree.frames.iter().map(|f| frame_name(sa, f)).collect();
        let names_b: Vec<String> = b.call_tree.frames.iter().map(|f| frame_name(sb, f)).collect();
        let mut matching = FrameMatching::from_names(&names_a, &names_b);
        matching.warp = ColumnWarp::new(&a.call_tree, a.columns, &b.call_tree, b.columns, &matching);
        matching
    }

    /// Matches frames given their names, in pre-order (no warp: see
    /// [`FrameMatching::new`]).
    pub fn from_names(a: &[String], b: &[String]) -> FrameMatching {
        let keys = |names: &[String]| -> Vec<(String, u32)> {
            let mut seen: HashMap<&str, u32> = HashMap::new();
            names
                .iter()
                .map(|n| {
                    let k = seen.entry(n.as_str()).or_insert(0);
                    *k += 1;
                    (n.clone(), *k - 1)
                })
                .collect()
        };
        let (ka, kb) = (keys(a), keys(b));
        let index_b: HashMap<&(String, u32), u32> = kb.iter().enumerate().map(|(i, k)| (k, i as u32)).collect();
        let mut a_to_b = vec![None; a.len()];
        let mut b_to_a = vec![None; b.len()];
        let mut pairs = 0;
        // Keys are unique (a name and its occurrence), so partners pair
        // one to one.
        for (i, k) in ka.iter().enumerate() {
            if let Some(&j) = index_b.get(k) {
                a_to_b[i] = Some(j);
                b_to_a[j as usize] = Some(i as u32);
                pairs += 1;
            }
        }
        FrameMatching { a_to_b, b_to_a, pairs, warp: ColumnWarp::default() }
    }

    /// The partner of frame `frame` of trace `side` in the other trace.
    pub fn partner(&self, side: Side, frame: usize) -> Option<usize> {
        let map = match side {
            Side::A => &self.a_to_b,
            Side::B => &self.b_to_a,
        };
        map.get(frame).copied().flatten().map(|j| j as usize)
    }

    /// Pairs of partners: the frames of either trace that have one.
    pub fn pairs(&self) -> usize {
        self.pairs
    }
}

/// A piecewise-linear map between the columns of A and of B whose knots
/// are the starts and ends of matched frames (and the traces' ends). Knots
/// that would make it run backwards (matching gone astray) are left out,
/// so the map is monotonic both ways.
#[derive(Clone, Debug, Default)]
pub struct ColumnWarp {
    /// (column of A, column of B), increasing in both.
    knots: Vec<(f64, f64)>,
}

impl ColumnWarp {
    /// The warp of two call trees under `matching`.
    pub fn new(a: &CallTree, a_columns: u64, b: &CallTree, b_columns: u64, matching: &FrameMatching) -> ColumnWarp {
        let mut knots = vec![(0.0, 0.0), (a_columns as f64, b_columns as f64)];
        for (i, f) in a.frames.iter().enumerate() {
            if let Some(g) = matching.partner(Side::A, i).and_then(|j| b.frames.get(j)) {
                knots.push((f.first_column as f64, g.first_column as f64));
                knots.push((f.end_column as f64, g.end_column as f64));
            }
        }
        knots.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
        let mut kept: Vec<(f64, f64)> = Vec::with_capacity(knots.len());
        for k in knots {
            match kept.last() {
                Some(&(x, y)) if k.0 == x || k.1 < y => {}
                _ => kept.push(k),
            }
        }
        ColumnWarp { knots: kept }
    }

    /// Column `x` of trace `side` as a column of the other trace.
    pub fn map(&self, side: Side, x: f64) -> f64 {
        let pick = |k: &(f64, f64)| match side {
            Side::A => *k,
            Side::B => (k.1, k.0),
        };
        let n = self.knots.len();
        if n < 2 {
            return x;
        }
        // The segment holding x (the first or last one beyond the ends).
        let i = self.knots.partition_point(|k| pick(k).0 <= x).clamp(1, n - 1);
        let ((x0, y0), (x1, y1)) = (pick(&self.knots[i - 1]), pick(&self.knots[i]));
        if x1 <= x0 { y0 } else { y0 + (x - x0) * (y1 - y0) / (x1 - x0) }
    }

    /// View `columns` of trace `side` as the same place in the other.
    pub fn map_view(&self, side: Side, columns: (f64, f64)) -> (f64, f64) {
        (self.map(side, columns.0), self.map(side, columns.1))
    }
}

/// The index in `tree` of a frame copied out of it (a picture's frames are
/// copies); `None` for frames the tree does not hold (replayed where it
/// had dropped narrow frames).
pub fn frame_index(tree: &CallTree, frame: &Frame) -> Option<usize> {
    let frames = &tree.frames;
    let lo = frames.partition_point(|f| f.first_column < frame.first_column);
    (lo..frames.len()).take_while(|&i| frames[i].first_column == frame.first_column).find(|&i| {
        let f = &frames[i];
        f.end_column == frame.end_column
            && f.depth == frame.depth
            && f.function == frame.function
            && f.thread == frame.thread
    })
}

/// What a differential flamegraph compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum DeltaMetric {
    /// Reads of the frame and its callees.
    #[default]
    Reads,
    /// Reads of the frame and its callees that missed the simulated D1.
    D1Misses,
    /// Reads that missed the simulated LL.
    LlMisses,
}

impl DeltaMetric {
    /// Every metric, in menu order.
    pub const ALL: [DeltaMetric; 3] = [DeltaMetric::Reads, DeltaMetric::D1Misses, DeltaMetric::LlMisses];

    /// For people.
    pub fn name(self) -> &'static str {
        match self {
            DeltaMetric::Reads => "reads",
            DeltaMetric::D1Misses => "D1 read misses",
            DeltaMetric::LlMisses => "LL read misses",
        }
    }

    /// The metric of a frame of `model` (its callees included).
    pub fn of(self, model: &Model, frame: &Frame) -> u64 {
        match self {
            DeltaMetric::Reads => frame.total_reads,
            DeltaMetric::D1Misses => model.cache.columns.count(frame.first_column, frame.end_column).0,
            DeltaMetric::LlMisses => model.cache.columns.count(frame.first_column, frame.end_column).1,
        }
    }
}

/// `(b - a) / max(a, b)`: in `[-1, 1]`, 0 when both are 0.
pub fn normalised_delta(a: u64, b: u64) -> f64 {
    let top = a.max(b);
    if top == 0 { 0.0 } else { (b as f64 - a as f64) / top as f64 }
}

/// A frame and its partner measured: the hover text and the colour of a
/// differential flamegraph come from this.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FrameDelta {
    /// The metric in A (`None`: the frame has no partner in A).
    pub a: Option<u64>,
    /// The metric in B.
    pub b: Option<u64>,
}

impl FrameDelta {
    /// Frame `frame` of trace `side`, against its partner.
    pub fn of(
        metric: DeltaMetric,
        matching: &FrameMatching,
        side: Side,
        frame: usize,
        models: [&Model; 2],
    ) -> Option<FrameDelta> {
        let here = models[side.index()].call_tree.frames.get(frame)?;
        let mine = Some(metric.of(models[side.index()], here));
        let theirs = matching.partner(side, frame).and_then(|j| {
            let other = models[side.other().index()];
            other.call_tree.frames.get(j).map(|g| metric.of(other, g))
        });
        Some(match side {
            Side::A => FrameDelta { a: mine, b: theirs },
            Side::B => FrameDelta { a: theirs, b: mine },
        })
    }

    /// The normalised delta, when the frame is in both traces.
    pub fn normalised(&self) -> Option<f64> {
        Some(normalised_delta(self.a?, self.b?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calltree::Frame;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn frame(depth: u32, parent: Option<u32>, first: u64, end: u64) -> Frame {
        Frame {
            function: 0,
            callsite: 0,
            parent,
            depth,
            invocation: 0,
            thread: 0,
            first_column: first,
            end_column: end,
            self_reads: 0,
            self_writes: 0,
            total_reads: end - first,
            total_writes: 0,
            unfinished: false,
        }
    }

    #[test]
    fn frames_match_by_name_and_occurrence() {
        // A: work > build, query, query, query; B: work > build > hash, query > hash, query.
        let a = names(&["work", "build", "query", "query", "query"]);
        let b = names(&["work", "build", "hash", "query", "hash", "query"]);
        let m = FrameMatching::from_names(&a, &b);
        assert_eq!(m.partner(Side::A, 0), Some(0));
        assert_eq!(m.partner(Side::A, 2), Some(3), "first query is first query");
        assert_eq!(m.partner(Side::A, 3), Some(5), "second query is second query");
        assert_eq!(m.partner(Side::A, 4), None, "no third query in B");
        assert_eq!(m.partner(Side::B, 2), None, "hash is only in B");
        assert_eq!(m.partner(Side::B, 5), Some(3));
        assert_eq!(m.pairs(), 4);
        let with_partner = |side: Side, n: usize| (0..n).filter(|&i| m.partner(side, i).is_some()).count();
        assert_eq!((with_partner(Side::A, a.len()), with_partner(Side::B, b.len())), (4, 4), "pairs, one to one");
        for (i, name) in a.iter().enumerate() {
            if let Some(j) = m.partner(Side::A, i) {
                assert_eq!(m.partner(Side::B, j), Some(i), "partners are mutual");
                assert_eq!(name, &b[j]);
            }
        }
    }

    fn tree(spans: &[(u32, u64, u64)]) -> CallTree {
        CallTree {
            frames: spans.iter().map(|&(d, a, b)| frame(d, (d > 0).then_some(0), a, b)).collect(),
            ..CallTree::default()
        }
    }

    #[test]
    fn the_warp_lands_frame_boundaries_on_their_partners() {
        // A: root [0,100) > x [10,50), y [60,90); B: root [0,40) > x [5,10), y [20,38).
        let a = tree(&[(0, 0, 100), (1, 10, 50), (1, 60, 90)]);
        let b = tree(&[(0, 0, 40), (1, 5, 10), (1, 20, 38)]);
        let mut m = FrameMatching::from_names(&names(&["root", "x", "y"]), &names(&["root", "x", "y"]));
        m.warp = ColumnWarp::new(&a, 100, &b, 40, &m);
        let w = &m.warp;
        for (x, y) in [(0.0, 0.0), (10.0, 5.0), (50.0, 10.0), (60.0, 20.0), (90.0, 38.0), (100.0, 40.0)] {
            assert_eq!(w.map(Side::A, x), y, "A {x}");
            assert_eq!(w.map(Side::B, y), x, "B {y}");
        }
        assert_eq!(w.map(Side::A, 30.0), 7.5, "inside x: proportional");
        let (l, r) = w.map_view(Side::A, (9.2, 50.8));
        assert!((l - 4.6).abs() < 1e-9 && (r - 10.8).abs() < 1e-9, "a fitted frame with margins: {l} {r}");
        assert_eq!(w.map(Side::A, 110.0), 42.0, "past the end: the last segment's scale");
        for k in 0..=400 {
            let x = f64::from(k) / 4.0;
            assert!((w.map(Side::B, w.map(Side::A, x)) - x).abs() < 1e-9, "round trip at {x}");
        }
    }

    #[test]
    fn knots_that_run_backwards_are_dropped() {
        // B's x and y swapped places: matching them would fold the map.
        let a = tree(&[(0, 0, 100), (1, 10, 20), (1, 50, 60)]);
        let b = tree(&[(0, 0, 100), (1, 50, 60), (1, 10, 20)]);
        let mut m = FrameMatching::from_names(&names(&["r", "x", "y"]), &names(&["r", "x", "y"]));
        m.warp = ColumnWarp::new(&a, 100, &b, 100, &m);
        let mut last = f64::MIN;
        for k in 0..=100 {
            let y = m.warp.map(Side::A, f64::from(k));
            assert!(y >= last, "monotonic at {k}");
            last = y;
        }
    }

    #[test]
    fn deltas_are_signed_and_bounded() {
        assert_eq!(normalised_delta(0, 0), 0.0);
        assert_eq!(normalised_delta(10, 0), -1.0);
        assert_eq!(normalised_delta(0, 10), 1.0);
        assert_eq!(normalised_delta(10, 20), 0.5);
        assert_eq!(normalised_delta(20, 10), -0.5);
        assert_eq!(normalised_delta(7, 7), 0.0);
    }
}

//! What a heap picture needs of a run that does not depend on the view,
//! prepared once and drawn from many times ([`crate::heap_raster`]).
//!
//! A viewer redraws the heap at every pan and zoom step. Drawing used to
//! start from the records each time: filter a million of them, find the
//! axis's ends, sort their address ranges into regions and sort their
//! events for the occupancy bar. On the run of `examples/c/heap_mix.c`
//! (1.4M allocator calls) that took ~125 ms of every picture, which cost
//! 160-180 ms even when 1/500 of the run was in view. A [`HeapScene`]
//! keeps those results; [`HeapScenes`] keeps one per clock and size class
//! for a model's records, so a viewer builds each once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::allocations::AllocationRecord;
use crate::heap::{SizeClass, address_regions, extent, is_heap_block};
use crate::heap_raster::{Clock, TimeAxis, TimeWindow, in_class, is_drawn};

/// One block to draw, with its place on the axis.
#[derive(Clone, Copy, Debug)]
pub struct SceneBlock {
    /// Where it starts on the axis.
    pub start: f64,
    /// Where it ends (infinity if never freed).
    pub end: f64,
    /// First address.
    pub address: u64,
    /// Requested bytes.
    pub size: u64,
    /// The allocating function's return address.
    pub callsite: u64,
    /// The allocating thread.
    pub thread: u32,
    /// Whether it was freed.
    pub freed: bool,
    /// Whether a custom allocator made it (drawn over malloc's blocks).
    pub custom: bool,
}

/// The live bytes of the heap after one event (an allocation or a free).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OccupancyStep {
    /// Where the event is on the axis.
    pub at: f64,
    /// Live bytes of malloc's blocks after it.
    pub live: i64,
}

/// The view-independent part of a heap picture, for one clock and one size
/// class (`None`: all).
#[derive(Clone, Debug)]
pub struct HeapScene {
    /// The x axis.
    pub axis: TimeAxis,
    /// The size class drawn.
    pub class: Option<SizeClass>,
    /// The blocks drawn, in record order.
    pub blocks: Vec<SceneBlock>,
    /// The address regions the blocks occupy, in address order
    /// ([`address_regions`]).
    pub regions: Vec<(u64, u64)>,
    /// Malloc's events in axis order, allocations first at equal times.
    pub steps: Vec<OccupancyStep>,
    /// The most live bytes of the whole run (at least 1).
    pub peak: i64,
}

impl HeapScene {
    /// Prepares the blocks of `records` (a run of `events` allocation
    /// events) of size class `class` on the axis of `clock`.
    pub fn new(records: &[AllocationRecord], events: u64, clock: Clock, class: Option<SizeClass>) -> HeapScene {
        let axis = TimeAxis::new(records, events, clock);
        let drawn = || records.iter().filter(|r| is_drawn(r) && in_class(r, class));
        // The blocks and regions on one thread, the occupancy steps on
        // another: each is a few sorts of a million.
        let ((blocks, regions), (steps, peak)) = std::thread::scope(|threads| {
            let steps = threads.spawn(|| occupancy_steps(drawn().filter(|r| is_heap_block(r)), &axis));
            let blocks = drawn()
                .map(|r| SceneBlock {
                    start: axis.start(r),
                    end: axis.end(r),
                    address: r.address,
                    size: r.size,
                    callsite: r.callsite,
                    thread: r.thread,
                    freed: r.free_event.is_some(),
                    custom: r.allocator.is_some(),
                })
                .collect();
            let regions = address_regions(drawn().map(extent));
            let steps = steps.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            ((blocks, regions), steps)
        });
        HeapScene { axis, class, blocks, regions, steps, peak }
    }

    /// The steps that matter to `window`: from the last one before it (the
    /// level it starts at, and the interval into it) to the first one
    /// after it (the interval out of it).
    pub fn steps_around(&self, window: &TimeWindow) -> &[OccupancyStep] {
        let first = self.steps.partition_point(|s| window.x(s.at) < 0.0).saturating_sub(1);
        let end = self.steps.partition_point(|s| window.x(s.at) < f64::from(window.width));
        &self.steps[first..(end + 1).min(self.steps.len())]
    }
}

/// The live bytes after each event of `heap` on `axis`, and the most live
/// bytes (at least 1).
fn occupancy_steps<'r>(
    heap: impl Iterator<Item = &'r AllocationRecord> + Clone,
    axis: &TimeAxis,
) -> (Vec<OccupancyStep>, i64) {
    // Allocations and frees sorted apart and merged, allocations first at
    // equal times: the allocations come nearly in order already (a sort
    // finds that fast), and one sort of both with the tie rule in its
    // comparison was a third of drawing a million blocks. The order among
    // equal times of one kind does not change a column's maximum.
    let mut allocs: Vec<(f64, i64)> = heap.clone().map(|r| (axis.start(r), r.size as i64)).collect();
    let mut frees: Vec<(f64, i64)> =
        heap.filter(|r| r.free_event.is_some()).map(|r| (axis.end(r), -(r.size as i64))).collect();
    allocs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    frees.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let (mut a, mut f) = (allocs.into_iter().peekable(), frees.into_iter().peekable());
    let delta = std::iter::from_fn(|| match (a.peek(), f.peek()) {
        (Some(x), Some(y)) if x.0.total_cmp(&y.0).is_le() => a.next(),
        (Some(_), Some(_)) => f.next(),
        (Some(_), None) => a.next(),
        (None, _) => f.next(),
    });
    let (mut live, mut peak) = (0i64, 1i64);
    let steps = delta
        .map(|(at, d)| {
            live += d;
            peak = peak.max(live);
            OccupancyStep { at, live }
        })
        .collect();
    (steps, peak)
}

/// What a scene is made for: a clock, and a size class (`None`: all).
type SceneKey = (Clock, Option<SizeClass>);

/// The scenes of one model's records, built on first use: one per clock
/// and size class. Keep one per model (the records are not checked).
#[derive(Debug, Default)]
pub struct HeapScenes {
    built: Mutex<HashMap<SceneKey, Arc<HeapScene>>>,
}

impl HeapScenes {
    /// The scene of `records` (a run of `events` events) for `clock` and
    /// `class`. Scenes are built one at a time, under the lock: concurrent
    /// callers wait for the build under way (the same scene is then never
    /// built twice; a viewer builds one or two per model).
    pub fn get(
        &self,
        records: &[AllocationRecord],
        events: u64,
        clock: Clock,
        class: Option<SizeClass>,
    ) -> Arc<HeapScene> {
        let mut built = self.built.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        built.entry((clock, class)).or_insert_with(|| Arc::new(HeapScene::new(records, events, clock, class))).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_rt::format::AllocKind;

    fn block(address: u64, size: u64, alloc: u64, free: Option<u64>) -> AllocationRecord {
        AllocationRecord::test_block(AllocKind::Malloc, address, size, alloc, free)
    }

    #[test]
    fn steps_count_live_bytes_with_allocations_first_at_equal_times() {
        // 100 bytes at 0..2, 50 at 2..3, 30 from 2 on: at time 2 the two
        // allocations come before the free.
        let records = vec![block(0x1000, 100, 0, Some(2)), block(0x2000, 50, 2, Some(3)), block(0x3000, 30, 2, None)];
        let scene = HeapScene::new(&records, 4, Clock::Events, None);
        let live: Vec<(f64, i64)> = scene.steps.iter().map(|s| (s.at, s.live)).collect();
        assert_eq!(live, vec![(0.0, 100), (2.0, 150), (2.0, 180), (2.0, 80), (3.0, 30)]);
        assert_eq!(scene.peak, 180);
        assert_eq!(scene.regions.len(), 1, "three blocks 4 KiB apart are one region");
        assert_eq!(scene.blocks.iter().map(|b| (b.start, b.end)).collect::<Vec<_>>()[2], (2.0, f64::INFINITY));
    }

    #[test]
    fn a_class_scene_holds_only_that_class() {
        let records = vec![block(0x1000, 16, 0, None), block(0x2000, 4096, 1, None)];
        let small = HeapScene::new(&records, 2, Clock::Events, Some(SizeClass::of(4096)));
        assert_eq!(small.blocks.len(), 1);
        assert_eq!(small.blocks[0].size, 4096);
        assert_eq!(small.peak, 4096);
        assert_eq!(small.axis.extent, 2.0, "the axis stays the whole run's");
    }

    #[test]
    fn scenes_are_built_once_per_clock_and_class() {
        let records = vec![block(0x1000, 16, 0, None), block(0x2000, 4096, 1, None)];
        let scenes = HeapScenes::default();
        let all = scenes.get(&records, 2, Clock::Events, None);
        assert!(Arc::ptr_eq(&all, &scenes.get(&records, 2, Clock::Events, None)));
        let fast = scenes.get(&records, 2, Clock::Events, Some(SizeClass::Fast));
        assert!(!Arc::ptr_eq(&all, &fast));
        assert_eq!((all.blocks.len(), fast.blocks.len()), (2, 1));
        assert!(!Arc::ptr_eq(&all, &scenes.get(&records, 2, Clock::Wall, None)));
    }
}

//! Work off the UI thread. A [`Job`] runs one piece of work at a time on
//! Bevy's async compute pool, keyed by what it was asked for: asking for a
//! new key cancels the running work (it checks a flag) and queues the new
//! one, which starts when the running one returns; the last finished result
//! stays until a newer one replaces it, so the UI always has something to
//! show.
//!
//! Work that ends wakes the window ([`set_waker`]): the window does not
//! draw continuously while it waits for work ([`crate::pacing`]), so a
//! result is shown (and queued work started) as soon as it is in — except
//! while a picture of the view is being drawn ([`Job::picture`]): then
//! other work's results wait for the picture (or the next paced frame).
//! A frame on the CPU renderer costs about 45 ms of CPU on the two cores
//! the picture is drawn on, and the frame a label job's end woke in the
//! middle of a zoom step showed nothing new (the old picture, stretched).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bevy::tasks::{AsyncComputeTaskPool, Task};

/// What wakes the window when work ends.
static WAKER: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();

/// Sets what wakes the window when a job's work ends (once; later calls
/// change nothing).
pub fn set_waker(wake: impl Fn() + Send + Sync + 'static) {
    let _ = WAKER.set(Box::new(wake));
}

/// Wakes the window (when a waker is set): work off the UI thread that
/// ended calls this, so its result is shown at once, not at the next paced
/// frame.
pub fn wake_window() {
    if let Some(wake) = WAKER.get() {
        wake();
    }
}

/// How long a zoom step's frame waits for the step's picture
/// ([`Job::wait_for_zoom_step`]). On a CPU renderer (lavapipe) the frame
/// showing the old picture stretched costs 70-110 ms of both cores at
/// 1920x1080; drawn while the new picture is, it slowed
/// the picture down by about that much, and showed something stale for
/// the whole time. A picture that comes within this time is shown sharp in
/// the step's own frame; one that does not is stretched as before, this
/// much later. The time is the zoom's latency goal (issue 7): a picture
/// that misses it misses the goal either way. The UI thread is blocked no
/// longer than one and a half of lavapipe's frames would block it.
pub const ZOOM_WAIT: Duration = Duration::from_millis(150);

/// Wall and CPU time of work on one thread, from when it started: what a
/// picture cost (the CPU time, unlike the wall time, is about the same
/// whether or not the renderer draws a frame on the same cores), and what
/// the UI pass costs.
pub struct Stopwatch {
    wall: Instant,
    cpu: Duration,
}

impl Stopwatch {
    /// Starts timing the calling thread.
    pub fn start() -> Stopwatch {
        Stopwatch { wall: Instant::now(), cpu: thread_cpu_time() }
    }

    /// Wall time since the start.
    pub fn wall(&self) -> Duration {
        self.wall.elapsed()
    }

    /// CPU time the calling thread has used since the start (call it on
    /// the thread that started it).
    pub fn cpu(&self) -> Duration {
        thread_cpu_time().saturating_sub(self.cpu)
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write; the clock id is a constant
    // every Linux kernel supports.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Pictures being drawn now ([`Job::picture`]).
static PICTURES_DRAWING: AtomicUsize = AtomicUsize::new(0);

/// Counts a picture as being drawn while it lives.
struct Drawing;

impl Drawing {
    fn start() -> Drawing {
        PICTURES_DRAWING.fetch_add(1, Ordering::SeqCst);
        Drawing
    }
}

impl Drop for Drawing {
    fn drop(&mut self) {
        PICTURES_DRAWING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A flag the work checks to give up early.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Whether the work should stop.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The work of a job: `None` when cancelled. (In a mutex so that the job,
/// a Bevy resource, is `Sync`; only the UI thread touches it.)
type Work<T> = std::sync::Mutex<Box<dyn FnOnce(Cancel) -> Option<Result<T, String>> + Send>>;

/// What work returns: `None` when cancelled.
type Outcome<T> = Option<Result<T, String>>;

/// Where work leaves its outcome, and whether the UI is waiting for it.
struct Slot<T> {
    /// The work's outcome, put here before the work wakes the window: a
    /// frame it wakes finds it (the task itself is finished only a moment
    /// later, and a frame that polled it too soon left the result to the
    /// next paced frame, up to a second later).
    outcome: Option<Outcome<T>>,
    /// The UI thread is waiting for the outcome ([`Job::wait_for`]): it
    /// takes it in the frame it is drawing, which needs no wake-up.
    awaited: bool,
}

/// A [`Slot`], and the signal that it was filled.
type SharedSlot<T> = Arc<(Mutex<Slot<T>>, Condvar)>;

/// Work on the pool, and what it is for.
struct Running<K, T> {
    key: K,
    task: Task<()>,
    slot: SharedSlot<T>,
    cancel: Cancel,
}

/// One kind of background work, keyed by `K`. At most one piece runs at a
/// time: asking for another key while one runs cancels it and queues the
/// newest request, which starts when the running one returns — so views
/// changing every frame never pile work up on the pool.
pub struct Job<K, T> {
    running: Option<Running<K, T>>,
    /// The newest request, waiting for the running work to stop.
    pending: Option<(K, Work<T>)>,
    done: Option<(K, T)>,
    /// The last work that failed, and why (its key is never run again
    /// until another key was asked for).
    failed: Option<(K, String)>,
    /// Whether it draws a picture of the view (see the module docs).
    picture: bool,
    /// Whether work started from now on wakes the window when it ends
    /// ([`Job::set_wakes_window`]).
    wakes: bool,
}

impl<K, T> Default for Job<K, T> {
    fn default() -> Self {
        Job { running: None, pending: None, done: None, failed: None, picture: false, wakes: true }
    }
}

impl<K, T> Job<K, T> {
    /// A job drawing a picture of the view: while it runs, other jobs that
    /// end do not wake the window; it wakes it when it ends.
    pub fn picture() -> Self {
        Job { picture: true, ..Job::default() }
    }

    /// Whether work started from now on wakes the window when it ends
    /// (the default). Work that does not leaves its result to the next
    /// frame the window draws anyway: the preview while a trace decodes,
    /// whose frames are paced, and each of which costs the decoder CPU.
    pub fn set_wakes_window(&mut self, wakes: bool) {
        self.wakes = wakes;
    }
}

impl<K: PartialEq + Clone + Send + 'static, T: Send + 'static> Job<K, T> {
    /// Makes sure work for `key` is running, queued or done; `work` is used
    /// only if none. It returns `None` when cancelled.
    pub fn want(&mut self, key: K, work: impl FnOnce(Cancel) -> Option<T> + Send + 'static) {
        self.want_fallible(key, move |cancel| work(cancel).map(Ok));
    }

    /// Like [`Job::want`] for work that can fail with a message for people:
    /// the failure is kept ([`Job::failure`]) next to the last good result.
    pub fn want_fallible(&mut self, key: K, work: impl FnOnce(Cancel) -> Option<Result<T, String>> + Send + 'static) {
        let running_it = self.running.as_ref().is_some_and(|r| r.key == key && !r.cancel.is_set());
        if running_it
            || self.done.as_ref().is_some_and(|(k, _)| *k == key)
            || self.pending.as_ref().is_some_and(|(k, _)| *k == key)
            || self.failed.as_ref().is_some_and(|(k, _)| *k == key)
        {
            return;
        }
        self.failed = None;
        match &self.running {
            Some(r) => {
                r.cancel.set();
                self.pending = Some((key, std::sync::Mutex::new(Box::new(work))));
            }
            None => self.start(key, std::sync::Mutex::new(Box::new(work))),
        }
    }

    fn start(&mut self, key: K, work: Work<T>) {
        let cancel = Cancel::default();
        let flag = cancel.clone();
        let work = work.into_inner().unwrap_or_else(|e| e.into_inner());
        // Counted from the request, so that work ending before the picture
        // has reached the pool does not wake the window either.
        let drawing = self.picture.then(Drawing::start);
        let wakes = self.wakes;
        let slot: SharedSlot<T> = Arc::new((Mutex::new(Slot { outcome: None, awaited: false }), Condvar::new()));
        let filled = slot.clone();
        let task = AsyncComputeTaskPool::get().spawn(async move {
            let result = work(flag);
            let awaited = {
                let mut s = filled.0.lock().unwrap_or_else(|p| p.into_inner());
                s.outcome = Some(result);
                s.awaited
            };
            filled.1.notify_all();
            let picture = drawing.is_some();
            drop(drawing);
            // Cancelled work too: what is queued behind it starts at the
            // next frame.
            if wakes && !awaited && (picture || PICTURES_DRAWING.load(Ordering::SeqCst) == 0) {
                wake_window();
            }
        });
        self.running = Some(Running { key, task, slot, cancel });
    }

    /// Takes in finished work and starts what was queued; true if a new
    /// result arrived.
    pub fn poll(&mut self) -> bool {
        let Some(r) = self.running.as_ref() else { return false };
        let outcome = r.slot.0.lock().unwrap_or_else(|p| p.into_inner()).outcome.take();
        // Finished without an outcome: the work panicked (a bug; the panic
        // message is on stderr). Said as a failure, not shown as nothing.
        let panicked = || Some(Err("the work stopped on an internal error (see the terminal)".to_string()));
        let Some(result) = outcome.or_else(|| r.task.is_finished().then(panicked)) else { return false };
        let Some(Running { key, task, .. }) = self.running.take() else { return false };
        // Done or about to be: nothing to wait for.
        task.detach();
        if let Some((next, work)) = self.pending.take() {
            self.start(next, work);
        }
        match result {
            // A result for a view that changed meanwhile still beats an
            // older one: the UI stretches it until the new one comes.
            Some(Ok(value)) => {
                self.done = Some((key, value));
                true
            }
            Some(Err(why)) => {
                if self.pending.is_none() && self.running.is_none() {
                    self.failed = Some((key, why));
                }
                false
            }
            None => false,
        }
    }

    /// Waits up to `budget` for the result of `key` (running, or queued
    /// behind work being cancelled), on the UI thread; whether it is in.
    /// Work that ends while it is awaited does not wake the window: the
    /// frame waiting for it shows it.
    pub fn wait_for(&mut self, key: &K, budget: Duration) -> bool {
        let deadline = Instant::now() + budget;
        loop {
            self.poll();
            if self.result_for(key).is_some() {
                return true;
            }
            let Some(r) = self.running.as_ref() else { return false };
            if r.key != *key && self.pending.as_ref().is_none_or(|(k, _)| k != key) {
                return false;
            }
            let (lock, filled) = &*r.slot;
            let mut slot = lock.lock().unwrap_or_else(|p| p.into_inner());
            while slot.outcome.is_none() {
                let now = Instant::now();
                if now >= deadline {
                    // Not in time: the work wakes the window when it ends.
                    slot.awaited = false;
                    return false;
                }
                slot.awaited = true;
                slot = filled.wait_timeout(slot, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
            }
            slot.awaited = false;
        }
    }

    /// A zoom step's frame: waits until [`ZOOM_WAIT`] after `started`
    /// (when the frame began waiting: the pictures of one step share the
    /// wait) for the picture of `key`, unless the last picture cost more
    /// than twice that CPU to draw (`last_cost`; none yet: no wait). A zoom
    /// step halves or doubles what is in view, and a picture's cost changed
    /// by up to about that much from one step to the next (the allocations
    /// view's whole run took 225 ms, the first step into it under 150).
    /// Whether it is in.
    pub fn wait_for_zoom_step(&mut self, key: &K, last_cost: Option<Duration>, started: Instant) -> bool {
        let left = (started + ZOOM_WAIT).saturating_duration_since(Instant::now());
        last_cost.is_some_and(|cost| cost <= ZOOM_WAIT * 2) && self.wait_for(key, left)
    }

    /// The last failure, if the newest work asked for failed.
    pub fn failure(&self) -> Option<&(K, String)> {
        self.failed.as_ref()
    }

    /// The last finished result and what it was for.
    pub fn latest(&self) -> Option<&(K, T)> {
        self.done.as_ref()
    }

    /// The result, if it is for `key`.
    pub fn result_for(&self, key: &K) -> Option<&T> {
        self.done.as_ref().filter(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether work is running or queued.
    pub fn busy(&self) -> bool {
        self.running.is_some() || self.pending.is_some()
    }

    /// Stops the work running and queued, keeping the last result: for
    /// work done ahead, which the cores are wanted for something else.
    pub fn stop(&mut self) {
        if let Some(r) = &self.running {
            r.cancel.set();
        }
        self.pending = None;
    }

    /// Forgets the last result, leaving work running and queued as it is:
    /// for a large result that newer work replaces, so that the two are
    /// not held at once.
    pub fn forget_result(&mut self) {
        self.done = None;
    }

    /// Forgets results and stops work (a new trace was loaded).
    pub fn clear(&mut self) {
        if let Some(r) = self.running.take() {
            r.cancel.set();
            // Dropping a task cancels it where it awaits; ours run to their
            // next check of the flag.
            r.task.detach();
        }
        self.pending = None;
        self.done = None;
        self.failed = None;
    }
}

/// Counting wake-ups in tests: the waker is set once per process, so the
/// tests that count share one counter and take turns.
#[cfg(test)]
pub(crate) mod wakes {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, MutexGuard};

    static WAKES: AtomicUsize = AtomicUsize::new(0);
    static TURN: Mutex<()> = Mutex::new(());

    /// Wake-ups so far, and the turn to count them (hold it while counting).
    pub(crate) fn count() -> (usize, MutexGuard<'static, ()>) {
        let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        super::set_waker(|| {
            WAKES.fetch_add(1, Ordering::SeqCst);
        });
        // The last turn's pictures may still be ending: a picture's result
        // is handed over before it stops counting as drawn, and while it
        // counts, other work ends without a wake-up: without this wait,
        // `ended_work_wakes_the_window` counted one wake-up too few in 4
        // runs of 40 of this module's tests (none in 50 with it).
        until(|| super::PICTURES_DRAWING.load(Ordering::SeqCst) == 0);
        (WAKES.load(Ordering::SeqCst), turn)
    }

    /// Polls `done` every millisecond until it holds or ten seconds pass;
    /// whether it held.
    pub(crate) fn until(mut done: impl FnMut() -> bool) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(10) {
            if done() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        false
    }

    /// Wake-ups since `before`.
    pub(crate) fn since(before: usize) -> usize {
        WAKES.load(Ordering::SeqCst) - before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ended work wakes the window, cancelled work included, and the work
    /// queued behind cancelled work runs.
    #[test]
    fn ended_work_wakes_the_window() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (before, _turn) = wakes::count();
        let mut job: Job<u32, u32> = Job::default();
        job.want(1, |cancel| {
            // Runs until cancelled by the request for key 2.
            while !cancel.is_set() {
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        job.want(2, |_| Some(20));
        assert!(wakes::until(|| job.poll()), "the queued work ends");
        assert_eq!(job.latest().map(|(k, v)| (*k, *v)), Some((2, 20)));
        // A wake-up follows its result into the slot: the result can be
        // taken before the wake-up is counted.
        assert!(wakes::until(|| wakes::since(before) >= 2), "both wake the window");
        assert_eq!(wakes::since(before), 2, "the cancelled work and the finished one");
    }

    /// Stopped work ends without a result, the work queued behind it is
    /// dropped, and the last result stays; its key can be asked for again.
    /// A forgotten result leaves the work running.
    #[test]
    fn stopped_work_keeps_the_last_result() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (_, _turn) = wakes::count();
        let mut job: Job<u32, u32> = Job::default();
        job.want(1, |_| Some(10));
        assert!(wakes::until(|| job.poll()), "the first work ends");
        job.want(2, |cancel| {
            while !cancel.is_set() {
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        job.want(3, |_| Some(30));
        job.stop();
        assert!(
            wakes::until(|| {
                job.poll();
                !job.busy()
            }),
            "stopped, and nothing queued runs"
        );
        assert_eq!(job.latest().map(|(k, v)| (*k, *v)), Some((1, 10)), "the last result stays");
        job.want(2, |_| Some(20));
        job.forget_result();
        assert!(job.latest().is_none() && job.busy(), "forgotten, with the work going on");
        assert!(wakes::until(|| job.poll()), "asked for again, it runs");
        assert_eq!(job.latest().map(|(k, v)| (*k, *v)), Some((2, 20)));
    }

    /// Work started while the job is told not to wake the window ends
    /// without waking it; its result is there for the next frame.
    #[test]
    fn quiet_work_leaves_its_result_to_the_next_frame() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (before, _turn) = wakes::count();
        let mut job: Job<u32, u32> = Job::default();
        job.set_wakes_window(false);
        job.want(1, |_| Some(10));
        assert!(wakes::until(|| job.poll()), "the work ends");
        assert_eq!(job.latest().map(|(k, v)| (*k, *v)), Some((1, 10)));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(wakes::since(before), 0, "quiet work woke the window");
        job.set_wakes_window(true);
        job.want(2, |_| Some(20));
        assert!(wakes::until(|| wakes::since(before) == 1), "work that wakes the window again");
    }

    /// A frame waiting for work takes its result in itself, and the work's
    /// end does not wake the window for another; work that is not done in
    /// time wakes it when it ends. Work queued behind cancelled work is
    /// waited for too.
    #[test]
    fn a_frame_can_wait_for_work_a_little() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (before, _turn) = wakes::count();
        let mut job: Job<u32, u32> = Job::picture();
        job.want(1, |_| {
            std::thread::sleep(Duration::from_millis(20));
            Some(10)
        });
        assert!(job.wait_for(&1, Duration::from_secs(10)), "in within the budget");
        assert_eq!(job.result_for(&1), Some(&10));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(wakes::since(before), 0, "the waiting frame took it: no wake-up");

        let (go, wait) = std::sync::mpsc::channel::<()>();
        job.want(2, move |_| {
            let _ = wait.recv();
            Some(20)
        });
        let start = Instant::now();
        assert!(!job.wait_for(&2, Duration::from_millis(30)), "not in time");
        assert!(start.elapsed() >= Duration::from_millis(30), "waited the budget");
        assert!(!job.wait_for(&3, Duration::from_secs(10)), "nothing is running for key 3: no wait");
        go.send(()).expect("the work waits");
        assert!(wakes::until(|| wakes::since(before) == 1), "late work wakes the window");
        assert!(job.poll());

        job.want(4, |cancel| {
            while !cancel.is_set() {
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        job.want(5, |_| Some(50));
        assert!(job.wait_for(&5, Duration::from_secs(10)), "through the cancelled work to the queued one");
        assert_eq!(job.result_for(&5), Some(&50));
    }

    /// A zoom step waits only when the last picture was cheap enough.
    #[test]
    fn zoom_steps_wait_for_cheap_pictures_only() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        // Its wake-up, if any, is not another test's to count.
        let (_, _turn) = wakes::count();
        let mut job: Job<u32, u32> = Job::picture();
        let slow = |_: Cancel| {
            std::thread::sleep(Duration::from_millis(50));
            Some(1)
        };
        job.want(1, slow);
        let now = Instant::now();
        assert!(!job.wait_for_zoom_step(&1, None, now), "no picture yet to go by");
        assert!(!job.wait_for_zoom_step(&1, Some(ZOOM_WAIT * 3), now), "the last one was too slow");
        // The pictures of one step share its wait: one that began a wait
        // ago has none left (the picture takes 50 ms, the asserts above
        // none).
        let spent = now.checked_sub(ZOOM_WAIT).expect("the clock runs longer than a wait");
        assert!(!job.wait_for_zoom_step(&1, Some(ZOOM_WAIT), spent), "the step's wait was spent on another picture");
        assert!(job.result_for(&1).is_none(), "the picture is not in yet: the wait above did not wait");
        assert!(
            job.wait_for_zoom_step(&1, Some(ZOOM_WAIT * 3 / 2), Instant::now()),
            "one about as slow as the wait: waited for"
        );
    }

    /// Other work ending while a picture is drawn does not wake the window;
    /// the picture's end does, and the frame it wakes finds the picture.
    #[test]
    fn work_ending_during_a_picture_waits_for_it() {
        AsyncComputeTaskPool::get_or_init(bevy::tasks::TaskPool::new);
        let (before, _turn) = wakes::count();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let mut picture: Job<u32, u32> = Job::picture();
        picture.want(1, move |_| {
            let _ = wait.recv();
            Some(10)
        });
        let mut labels: Job<u32, u32> = Job::default();
        labels.want(1, |_| Some(5));
        assert!(wakes::until(|| labels.poll()), "the other work ends");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(wakes::since(before), 0, "no wake-up while the picture is drawn");
        go.send(()).expect("the picture waits");
        assert!(wakes::until(|| wakes::since(before) == 1), "the picture's end wakes the window");
        assert!(picture.poll(), "the frame it wakes finds the picture");
        assert_eq!(picture.latest().map(|(k, v)| (*k, *v)), Some((1, 10)));
        // No picture drawn: other work wakes the window again.
        labels.want(2, |_| Some(6));
        assert!(wakes::until(|| wakes::since(before) == 2), "other work wakes the window");
        assert!(labels.poll(), "and the frame finds its result");
    }
}
